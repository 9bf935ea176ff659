"""The stage monitor's cost in a training loop (issue 15): overhead against ``every``.

Question: what does ``gflow.Monitor`` add to an ordinary training loop, as a
fraction of the loop's time, when it observes every 1, 2, 5, 10, 20 or 50 steps?

Command:  PYTHONPATH=$PWD python benchmarks/monitor_overhead.py [--quick]
          PYTHONPATH=$PWD python -m benchmarks --only monitor [--quick] --no-table
Runtime:  about 5 min on 2 cores (300 steps × 3 repeats × 7 loops, ~40 ms a step;
          ``--quick``: 100 steps × 2 repeats, ~1.5 min).
Writes:   benchmarks/results/monitor_overhead.json (machine, load averages, every
          time) and monitor_overhead.md (the table of BENCHMARKS.md's monitor
          section) and monitor_overhead.png (overhead against every).

The loop: a 2-layer, 4-head ``gflow.Transformer`` of width 64 with values, MLP
(d_ff 256), pre-LayerNorm and residual streams (a small GPT), 64 tokens, context 64,
trained with Adam (optax, learning rate 1e-3) on batches of 32 sequences of a
Markov chain with a Zipf stationary distribution, float32; one jitted step (loss,
gradient, Adam update). The batches are drawn beforehand (a pool of 16, cycled), so
the loop's time is the training step's and the overhead is the monitor's alone.
The monitor observes a fixed probe batch of 32 sequences (the training batch size),
with its default settings (3 tracked tokens, 4 singular values per head), writing
its files into a temporary directory, ``verbose=False``.

Timing: every configuration runs ``steps`` steps from the same initial model, the
step and the monitor's observation compiled beforehand (one untimed run of each).
Configurations are *interleaved*: each repeat times the loop without the monitor
and then with it at every ``every``, so load that drifts moves all alike. The
overhead at ``every`` is median(loop with monitor) / median(loop without) - 1. One
observation alone (the jitted call, the transfer, the rules, the files) and one
training step alone are timed as well: their ratio predicts the overhead as
(observation / step) / every.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import equinox as eqx  # noqa: E402
import jax
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

RESULTS = Path(__file__).parent / "results"
EVERY = (1, 2, 5, 10, 20, 50)
#: the model's key and, folded with 1, the batches' and the probe's (one timed
#: configuration: a cost, not a result that varies with the draw)
SEED = 0


def _setup(seed: int):
    from gflow import MarkovChain, Transformer

    d = 64
    pi = 1.0 / np.arange(1, d + 1)
    chain = MarkovChain.from_lambda(pi=pi / pi.sum(), lam=0.5)
    key = jax.random.key(seed)
    model = Transformer.init(
        d_vocab=d,
        d_model=64,
        n_layers=2,
        n_heads=4,
        key=key,
        init_scale=0.02,
        d_ff=256,
        value=True,
        layernorm=True,
        residual=True,
        max_len=64,
        dtype=jnp.float32,
    )
    keys = jax.random.split(jax.random.fold_in(key, 1), 17)
    pool = [chain.sample(key=k, batch=32, length=65) for k in keys[:16]]
    probe = chain.sample(key=keys[16], batch=32, length=65)
    return model, pool, probe


def _train_step():
    from gflow import sequence_loss

    opt = optax.adam(1e-3)

    @eqx.filter_jit
    def step(model, state, tokens):
        loss, grads = eqx.filter_value_and_grad(sequence_loss)(model, tokens)
        updates, state = opt.update(grads, state, model)
        return eqx.apply_updates(model, updates), state, loss

    return opt, step


def _loop(model, state, step, pool, steps, monitor=None, probe=None):
    start = time.perf_counter()
    for k in range(steps):
        if monitor is not None:
            monitor.observe(k, model, probe)
        model, state, _ = step(model, state, pool[k % len(pool)])
    jax.block_until_ready((model, state))
    if monitor is not None:
        monitor.close()
    return time.perf_counter() - start


def run(*, quick: bool = False) -> dict:
    from gflow import Monitor

    steps, repeats = (100, 2) if quick else (300, 3)
    model, pool, probe = _setup(SEED)
    opt, step = _train_step()
    state = opt.init(eqx.filter(model, eqx.is_inexact_array))
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load_start = list(os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        n = 0

        def monitor(every):
            nonlocal n
            n += 1
            return Monitor(Path(tmp) / f"m{n}", every=every, verbose=False)

        # compile the step and the observation once, untimed
        _loop(model, state, step, pool, 2, monitor(1), probe)
        # one step alone and one observation alone (medians of 50)
        one_step, one_obs = [], []
        m = monitor(1)
        for k in range(50):
            t0 = time.perf_counter()
            jax.block_until_ready(step(model, state, pool[k % 16]))
            one_step.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            m.observe(k, model, probe)
            one_obs.append(time.perf_counter() - t0)
        m.close()
        base, timed = [], {e: [] for e in EVERY}
        loads = []
        for _ in range(repeats):
            base.append(_loop(model, state, step, pool, steps))
            for every in EVERY:
                timed[every].append(
                    _loop(model, state, step, pool, steps, monitor(every), probe)
                )
            loads.append(os.getloadavg()[0])
    b = float(np.median(base))
    step_ms, obs_ms = 1e3 * np.median(one_step), 1e3 * np.median(one_obs)
    rows = [
        {
            "every": e,
            "loop_s": float(np.median(timed[e])),
            "overhead": float(np.median(timed[e]) / b - 1),
            "predicted": float(obs_ms / step_ms / e),
        }
        for e in EVERY
    ]
    record = {
        "started": started,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "jax": jax.__version__,
            "devices": [str(d) for d in jax.devices()],
        },
        "load_average_start": load_start,
        "load_1min_after_each_repeat": loads,
        "steps": steps,
        "repeats": repeats,
        "seed": SEED,
        "loop_without_monitor_s": b,
        "step_ms": float(step_ms),
        "observation_ms": float(obs_ms),
        "rows": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "monitor_overhead.json").write_text(json.dumps(record, indent=2))
    (RESULTS / "monitor_overhead.md").write_text(table(record))
    _figure(record)
    return record


def seeds(record: dict) -> str:
    """The seed statement: the model's key and the data's (records from before the
    seed was kept used 0, the only seed the script has had)."""
    seed = record.get("seed", 0)
    return (
        f"Seed {seed}, one configuration: the model from `jax.random.key({seed})`, "
        f"the 16 training batches and the probe from "
        f"`jax.random.fold_in(jax.random.key({seed}), 1)`."
    )


def table(record: dict) -> str:
    lines = [
        f"Run {record['started']}, {record['machine']['cpus']} CPUs (jax "
        f"{record['machine']['jax']}, {', '.join(record['machine']['devices'])}), "
        f"load average {record['load_average_start'][0]:.2f} at the start and "
        f"{min(record['load_1min_after_each_repeat']):.2f}-"
        f"{max(record['load_1min_after_each_repeat']):.2f} after the repeats; "
        f"{record['steps']} steps × {record['repeats']} interleaved repeats. One "
        f"training step: {record['step_ms']:.2f} ms; one observation: "
        f"{record['observation_ms']:.2f} ms (medians of 50). Loop without the "
        f"monitor: {record['loop_without_monitor_s']:.2f} s. " + seeds(record),
        "",
        "| every | loop with monitor (s) | overhead | predicted (obs / step / every) |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for r in record["rows"]:
        lines.append(
            f"| {r['every']} | {r['loop_s']:.2f} | {100 * r['overhead']:+.1f}% | "
            f"{100 * r['predicted']:.1f}% |"
        )
    return "\n".join(lines) + "\n"


def _figure(record: dict) -> None:
    """Overhead (%) against every on a log x axis with a tick at each every and a
    linear y axis (overheads near 0 may be negative: noise), the 5% budget drawn."""
    from gflow.plotting import (
        DOC_WIDTH,
        RC,
        outside_legend,
        plt,
        save_figure,
        settings_line,
    )

    every = [r["every"] for r in record["rows"]]
    with plt.rc_context(RC):
        fig, ax = plt.subplots(figsize=(DOC_WIDTH, 3.2))
        lines = (
            ("overhead", "o-", "k", "measured"),
            ("predicted", "--", "tab:orange", "predicted:\nobservation / step / every"),
        )
        for key, style, colour, label in lines:
            values = [100 * r[key] for r in record["rows"]]
            ax.plot(every, values, style, color=colour, label=label)
        ax.axhline(5, color="0.5", lw=0.8, ls=":", label="5% budget")
        ax.axhline(0, color="0.8", lw=0.6)
        ax.set_xscale("log")
        ax.set_xticks(every, [str(e) for e in every])
        ax.minorticks_off()
        ax.set_xlabel("every (steps between observations)")
        ax.set_ylabel("overhead (%)")
        ax.set_title(
            "gflow.Monitor on a 2-layer transformer trained with Adam", loc="left"
        )
        outside_legend(ax)
        settings_line(
            fig,
            f"{record.get('steps', '?')} steps × {record.get('repeats', '?')} "
            "interleaved repeats · medians · float32 · 2 CPUs",
        )
        save_figure(fig, RESULTS / "monitor_overhead.png")


DOC = Path(__file__).resolve().parent.parent / "docs" / "monitor.md"
START, END = "<!-- monitor_overhead:start -->", "<!-- monitor_overhead:end -->"


def write_docs() -> None:
    """Put results/monitor_overhead.md and its figure into docs/monitor.md."""
    import shutil

    record = json.loads((RESULTS / "monitor_overhead.json").read_text())
    text = (
        "`PYTHONPATH=$PWD python benchmarks/monitor_overhead.py --write-docs` "
        "(the module docstring says what is measured). "
        + table(record)
        + "\n![overhead against every](figures/monitor_overhead.png)"
    )
    doc = DOC.read_text()
    i, j = doc.index(START) + len(START), doc.index(END)
    DOC.write_text(doc[:i] + "\n" + text + "\n" + doc[j:])
    shutil.copy(RESULTS / "monitor_overhead.png", DOC.parent / "figures")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument(
        "--write-docs",
        action="store_true",
        help="rewrite the cost block of docs/monitor.md (from the records alone "
        "with --doc-only)",
    )
    p.add_argument("--doc-only", action="store_true", help="do not measure")
    args = p.parse_args(argv)
    if not args.doc_only:
        print(table(run(quick=args.quick)))
    if args.write_docs or args.doc_only:
        write_docs()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
