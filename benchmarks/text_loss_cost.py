"""Memory and time per gradient of the text loss: d×d form against gathered form.

Question: at text vocabularies (d up to ~2000) and width m = 64, which form of the
last-token loss should a text run use? The d×d form of ``gflow.sequence_loss`` builds
Φ = W_E W_A W_Eᵀ and M = W_E W_P (d² each); the gathered form gathers m-dim embeddings
per position; the counts form (``gflow.text.counts``) is a softmax over types weighted
by their window counts, dense products only.

Command:  PYTHONPATH=$PWD python benchmarks/text_loss_cost.py [--quick]
Runtime:  --quick (n = 256 windows, 2 repeats): ~5 min on 2 shared cores;
          full (n = 1024, 5 repeats): ~10 min.
Writes:   benchmarks/results/text_loss_cost.json and text_loss_cost.png.

Each (d, form) is compiled once before timing; compile and run are timed separately;
results are blocked on; both forms are measured in the same process on the same
windows, and their gradients are compared (the reference). Memory is XLA's estimate
for the compiled gradient (temporaries + outputs + arguments), from
``compiled.memory_analysis()``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

from gflow import AttentionModel, sequence_loss
from gflow.text import counts_loss, window_log_counts

#: The three forms of the last-token loss (the gathered one is the reference).
FORMS = ("dense", "gathered", "counts")


def measure(model, windows, form: str, reps: int) -> dict:
    params, static = eqx.partition(model, eqx.is_inexact_array)
    log_counts = jax.numpy.asarray(window_log_counts(windows, model.d_vocab))

    def loss(p, w):
        m = eqx.combine(p, static)
        if form == "counts":
            return counts_loss(m, log_counts, w)
        return sequence_loss(m, w, dense=form == "dense")

    grad = jax.jit(jax.value_and_grad(loss))
    t0 = time.perf_counter()
    compiled = grad.lower(params, windows).compile()
    compile_s = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    out = jax.block_until_ready(compiled(params, windows))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(params, windows))
        times.append(time.perf_counter() - t0)
    memory = None
    if mem is not None:
        memory = int(
            mem.temp_size_in_bytes
            + mem.output_size_in_bytes
            + mem.argument_size_in_bytes
        )
    return {
        "compile_s": compile_s,
        "ms_per_grad": 1e3 * float(np.median(times)),
        "bytes": memory,
        "value": out,
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = p.parse_args()
    vocab = (200, 500, 1000, 2000)
    m, s = 64, 32
    n, reps = (256, 2) if args.quick else (1024, 5)
    rng = np.random.default_rng(0)
    records = []
    for d in vocab:
        # Zipf-like token frequencies, as in text.
        p_tok = 1.0 / np.arange(1, d + 1)
        windows = rng.choice(d, size=(n, s + 1), p=p_tok / p_tok.sum()).astype(np.int32)
        model = AttentionModel.init(
            d_vocab=d, d_model=m, init_scale=0.1, key=jax.random.key(0)
        )
        rec = {"d": d, "m": m, "s": s, "n": n}
        res = {f: measure(model, windows, f, reps) for f in FORMS}
        ref = jax.tree.leaves(res["gathered"]["value"][1])
        for f in ("dense", "counts"):
            rec[f"max_grad_diff_{f}"] = float(
                max(
                    np.max(np.abs(a - b))
                    for a, b in zip(jax.tree.leaves(res[f]["value"][1]), ref)
                )
            )
        for f, r in res.items():
            rec[f] = {k: v for k, v in r.items() if k != "value"}
        print(json.dumps(rec), flush=True)
        records.append(rec)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {
        "platform": platform.platform(),
        "devices": str(jax.devices()),
        "dtype": str(jax.numpy.zeros(()).dtype),
    }
    (args.out / "text_loss_cost.json").write_text(
        json.dumps({"meta": meta, "records": records}, indent=2) + "\n"
    )
    from gflow.plotting import plt, save_figure

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    ds = [r["d"] for r in records]
    for f in FORMS:
        axes[0].loglog(ds, [r[f]["ms_per_grad"] for r in records], "o-", label=f)
        if records[0][f]["bytes"]:
            axes[1].loglog(ds, [r[f]["bytes"] / 2**20 for r in records], "o-", label=f)
    axes[0].set(
        xlabel="vocabulary d", ylabel="ms per gradient", title=f"m={m}, s={s}, n={n}"
    )
    axes[1].set(xlabel="vocabulary d", ylabel="MiB (XLA estimate)")
    for ax in axes:
        ax.legend()
    save_figure(fig, args.out / "text_loss_cost.png")


if __name__ == "__main__":
    main()
