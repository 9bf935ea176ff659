"""Several seeds of a text run: a loop over one compiled program against a vmap.

Question: ``gflow text --seeds K`` runs K inits of the same model on the same fixed
sample. Should the full-batch loop (``gflow.text.fullbatch``) be vmapped over the
seeds (one program, K-wide products), or called K times (one compiled program,
reused)? The loop's results are bit for bit those of single-seed runs; a vmap's need
not be, so it would have to pay.

Command:  PYTHONPATH=$PWD python benchmarks/text_seeds.py [--quick]
Runtime:  --quick (200 steps, K = 1, 2, 4, 1 repeat): ~30 s on 2 shared cores;
          full (400 steps, 2 repeats): ~75 s.
Writes:   benchmarks/results/text_seeds.json.

For each corpus setting (the default word vocabulary, 201 types; a 2000-piece BPE
vocabulary, whose loss takes the gathered form) and each K: the loop's compile time
(the first call) and its run time for K seeds (K further calls, the same compiled
program), and the vmapped program's compile time and run time for the K seeds at
once. Times are blocked on and the minimum over repeats; ``uptime``'s load average is
recorded (the 2 cores are shared).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from gflow.dynamics import SGD
from gflow.runs.text import TextConfig, init_model, prepare
from gflow.text import TextLoss, full_batch_arrays, run_full_batch

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SETTINGS = {
    "word-200": dict(tokenizer="word", vocab_size=200),
    "bpe-2000": dict(tokenizer="bpe", vocab_size=2000),
}


def measure(cfg: TextConfig, ks, steps: int, reps: int) -> list[dict]:
    data = prepare(cfg)
    d = len(data.vocab)
    loss = TextLoss(data.sample, d_vocab=d)
    # GD at a constant step 0.25, the same settings for the loop and the vmap
    run = dict(
        optimizer=SGD(), learning_rate=0.25, steps=steps, num_saves=cfg.num_saves
    )

    def looped(models):
        out = [run_full_batch(loss, m, **run) for m in models]
        return [o.metrics["loss"] for o in out]

    @eqx.filter_jit
    def vmapped(params, static):
        def one(p):
            return full_batch_arrays(loss, eqx.combine(p, static), **run)[0]

        return jax.vmap(one)(params)

    records = []
    t0 = time.perf_counter()
    looped([init_model(cfg, d, 0)])  # compiles the loop (and the init)
    loop_compile = time.perf_counter() - t0
    t0 = time.perf_counter()
    looped([init_model(cfg, d, 0)])
    loop_compile -= time.perf_counter() - t0  # the first call minus a warm one
    for k in ks:
        models = [init_model(cfg, d, s) for s in range(k)]
        params = [eqx.partition(m, eqx.is_inexact_array)[0] for m in models]
        stacked = jax.tree.map(lambda *x: jnp.stack(x), *params)
        static = eqx.partition(models[0], eqx.is_inexact_array)[1]
        t0 = time.perf_counter()
        jax.block_until_ready(vmapped(stacked, static))
        first = time.perf_counter() - t0
        loop_s, vmap_s = [], []
        for _ in range(reps):  # interleaved, so that contention hits both alike
            t0 = time.perf_counter()
            a = looped(models)
            loop_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            b = np.asarray(jax.block_until_ready(vmapped(stacked, static)))
            vmap_s.append(time.perf_counter() - t0)
        diff = float(np.nanmax(np.abs(np.stack(a) - b)))
        records.append(
            {
                "seeds": k,
                "d_vocab": d,
                "steps": steps,
                "loop_compile_s": loop_compile,
                "loop_run_s": min(loop_s),
                "vmap_compile_s": first - min(vmap_s),
                "vmap_run_s": min(vmap_s),
                "max_loss_difference": diff,
            }
        )
        print(json.dumps(records[-1]))
    return records


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    p.add_argument("--corpus", default=str(DATA / "wikitext2" / "valid.txt"))
    args = p.parse_args()
    steps, reps = (200, 1) if args.quick else (400, 2)
    result = {
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average": list(os.getloadavg()),
        "settings": {},
    }
    for name, kw in SETTINGS.items():
        cfg = TextConfig(corpus=args.corpus, num_saves=20, **kw)
        print(name)
        result["settings"][name] = measure(cfg, (1, 2, 4), steps, reps)
    result["load_average_after"] = list(os.getloadavg())
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "text_seeds.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
