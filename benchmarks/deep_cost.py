"""Deep models (issue 14): the cost of one gradient, and the flow to the first focus.

Question: what does a deep ``gflow.Transformer`` cost, (a) per jitted
value-and-gradient of ``SequenceLoss`` as depth, heads and width grow, and (b) as a
float64 gradient flow (``gflow.solve_flow``, Tsit5) of a 2-layer, 2-head model run
until one of its heads focuses?

Command:  PYTHONPATH=$PWD python benchmarks/deep_cost.py [--quick]
          PYTHONPATH=$PWD python -m benchmarks --only deep [--quick] --no-table
Runtime:  4.2 min on 2 cores at load ≤ 1.4 (``--quick``: fewer repeats and only
          the 32-sequence flow, about 2 min).
Writes:   benchmarks/results/deep_cost.json (machine, load averages, every number)
          and deep_cost.md (the tables of BENCHMARKS.md's deep-model section).

(a) Gradient cost. The default Markov chain, a fixed sample of batch 32 and context
64, float32, no value/MLP/LayerNorm/residual (the paper's model, deepened), every
(layers, heads, width) in {1, 2, 4} × {1, 2, 4} × {16, 32, 64}. Each program is
lowered and compiled apart (``compile_s``), called once, and then timed against the
1-layer, 1-head, width-16 baseline *interleaved* in the same process: each repeat
times ``number`` calls of the baseline, then ``number`` calls of the model, so that
load that drifts during the run moves both halves of the ratio alike. Warm times are
medians over the repeats; the ratio is the model's median over the baseline's.
``flops`` is XLA's estimate (``cost_analysis``) where it gives one.

(b) The flow. A 2-layer, 2-head, width-16 model (init scale 0.02, float64) on a fixed
sample of the chain (context 64), full batch, Tsit5 at rtol 1e-6, with
``HeadObservables`` and the loss of a held-out sample (64 sequences) recorded at the
saves; ``detect_head_stages`` on the saved trajectory gives the first per-head focus.
Compilation is timed apart: a first solve over a negligible horizon (t1 = 1e-3)
minus the same solve warm (the horizon and the save times are traced, so the later
solves reuse the program). A warm solve to the horizon ``t1`` gives the run time,
the solver statistics and the stages; a last warm solve to the start of the first
focus gives the wall time, steps and gradient evaluations "until the first focus".
The full run also tries a larger sample (256 sequences, which the model cannot
memorise as it does 32) to t1 = 800 and reports whether a focus appears at all.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import jax

if __name__ == "__main__":  # entry point: the flow is float64
    jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

CONTEXT = 64
BATCH = 32
BASE = (1, 1, 16)  # layers, heads, width of the ratios' baseline


def _chain():
    from gflow import MarkovChain

    return MarkovChain.default()


def _model(layers, heads, width, *, dtype, init_scale=0.02, seed=0):
    from gflow import Transformer

    return Transformer.init(
        d_vocab=_chain().d,
        d_model=width,
        n_layers=layers,
        n_heads=heads,
        key=jax.random.key(seed),
        init_scale=init_scale,
        dtype=dtype,
    )


def _compiled_grad(model, tokens):
    """(compiled value-and-gradient, params, compile seconds, XLA flops or None)."""
    from gflow import SequenceLoss

    params, static = eqx.partition(model, eqx.is_inexact_array)

    def loss(p, toks):
        return SequenceLoss(toks)(eqx.combine(p, static))

    fn = jax.jit(jax.value_and_grad(loss))
    start = time.perf_counter()
    compiled = fn.lower(params, tokens).compile()
    compile_s = time.perf_counter() - start
    flops = None
    try:
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, (list, tuple)) else cost
        flops = float(cost["flops"]) if cost and "flops" in cost else None
    except Exception:  # cost analysis is optional on some backends
        flops = None
    jax.block_until_ready(compiled(params, tokens))  # the first call, untimed
    return compiled, params, compile_s, flops


def _time_calls(compiled, params, tokens, number: int) -> float:
    """Seconds per call over ``number`` back-to-back calls (blocked at the end)."""
    start = time.perf_counter()
    for _ in range(number):
        out = compiled(params, tokens)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / number


def gradient_costs(
    *,
    layers=(1, 2, 4),
    heads=(1, 2, 4),
    widths=(16, 32, 64),
    repeats: int = 15,
    number: int = 10,
) -> dict:
    """Compile and warm cost of one value-and-gradient per (layers, heads, width)."""
    tokens = _chain().sample(key=jax.random.key(1), batch=BATCH, length=CONTEXT + 1)
    base = _compiled_grad(_model(*BASE, dtype=jnp.float32), tokens)
    rows = []
    for n_layers in layers:
        for n_heads in heads:
            for width in widths:
                model = _model(n_layers, n_heads, width, dtype=jnp.float32)
                compiled, params, compile_s, flops = _compiled_grad(model, tokens)
                t_base, t_model = [], []
                for _ in range(repeats):
                    t_base.append(_time_calls(base[0], base[1], tokens, number))
                    t_model.append(_time_calls(compiled, params, tokens, number))
                ms, ms_base = 1e3 * np.median(t_model), 1e3 * np.median(t_base)
                row = {
                    "layers": n_layers,
                    "heads": n_heads,
                    "width": width,
                    "params": int(
                        sum(x.size for x in jax.tree.leaves(params) if x is not None)
                    ),
                    "compile_s": compile_s,
                    "warm_ms": float(ms),
                    "base_warm_ms": float(ms_base),
                    "ratio": float(ms / ms_base),
                    "flops": flops,
                    "load_average": list(os.getloadavg()),
                }
                print(
                    f"L={n_layers} H={n_heads} m={width}: compile {compile_s:.2f} s, "
                    f"{row['warm_ms']:.3f} ms ({row['ratio']:.2f}× base)",
                    flush=True,
                )
                rows.append(row)
    return {
        "batch": BATCH,
        "context": CONTEXT,
        "dtype": "float32",
        "repeats": repeats,
        "number": number,
        "base": dict(zip(("layers", "heads", "width"), BASE)),
        "base_compile_s": base[2],
        "rows": rows,
    }


class FlowObservables(eqx.Module):
    """``HeadObservables`` plus the loss of a held-out sample."""

    heads: object
    held_out: jax.Array

    def __call__(self, model):
        from gflow import sequence_loss

        return {
            **self.heads(model),
            "held_out_loss": sequence_loss(model, self.held_out),
        }


def _solve(loss, model, obs, t1, num_saves, rtol):
    from gflow import solve_flow

    start = time.perf_counter()
    traj = solve_flow(
        loss,
        model,
        t1=t1,
        ts=np.linspace(0.0, t1, num_saves),
        observables=obs,
        rtol=rtol,
        atol=rtol * 1e-2,
        progress=False,
    )
    return traj, time.perf_counter() - start


def flow_to_focus(
    *,
    sample: int = BATCH,
    t1: float = 450.0,
    num_saves: int = 226,
    init_scale: float = 0.02,
    rtol: float = 1e-6,
) -> dict:
    """The float64 flow of a 2-layer, 2-head model until its first per-head focus."""
    from gflow import HeadObservables, SequenceLoss, detect_head_stages

    chain = _chain()
    tokens = chain.sample(key=jax.random.key(1), batch=sample, length=CONTEXT + 1)
    held = chain.sample(key=jax.random.key(2), batch=64, length=CONTEXT + 1)
    model = _model(2, 2, 16, dtype=jnp.float64, init_scale=init_scale)
    loss = SequenceLoss(tokens)
    obs = FlowObservables(HeadObservables.default(held, chain.d), held)
    # compile apart: a first solve over a negligible horizon (compile + ~0), then
    # the same solve warm (~0); the horizon t1 and the save times are traced
    _, cold_s = _solve(loss, model, obs, 1e-3, num_saves, rtol)
    _, tiny_s = _solve(loss, model, obs, 1e-3, num_saves, rtol)
    traj, warm_s = _solve(loss, model, obs, t1, num_saves, rtol)
    stages = detect_head_stages(traj)
    focus = [s for s in stages if s.name == "focus"]
    out = {
        "model": {"layers": 2, "heads": 2, "width": 16, "init_scale": init_scale},
        "sample": sample,
        "context": CONTEXT,
        "t1": t1,
        "num_saves": num_saves,
        "rtol": rtol,
        "status": traj.status,
        "compile_s": cold_s - tiny_s,
        "warm_s": warm_s,
        "stats": traj.stats,
        "stages": [s.to_dict() for s in stages],
        "unigram_loss": chain.unigram_loss,
        "bayes_loss": chain.bayes_loss,
        "final_loss": float(traj.metrics["loss"][-1]),
        "final_held_out_loss": float(traj.metrics["held_out_loss"][-1]),
        "final_head_entropy": np.asarray(traj.metrics["head_entropy"][-1]).tolist(),
        "first_focus": None,
        "load_average": list(os.getloadavg()),
    }
    if focus:
        first = min(focus, key=lambda s: s.t_start)
        i = int(np.argmin(np.abs(traj.t - first.t_start)))
        # the cost of reaching the first focus: a warm solve to its start
        to_focus, focus_s = _solve(loss, model, obs, first.t_start, num_saves, rtol)
        out["first_focus"] = {
            **first.to_dict(),
            "loss_at_start": float(traj.metrics["loss"][i]),
            "held_out_loss_at_start": float(traj.metrics["held_out_loss"][i]),
            "wall_s": focus_s,
            "stats": to_focus.stats,
            "status": to_focus.status,
        }
    print(
        f"flow, sample {sample}, t1 {t1:g}: {traj.status}, compile "
        f"{out['compile_s']:.1f} s, warm {warm_s:.1f} s, first focus "
        f"{out['first_focus'] and (out['first_focus']['t_start'])}",
        flush=True,
    )
    return out


def table(record: dict) -> str:
    """The markdown tables of BENCHMARKS.md's deep-model section."""
    g = record["gradient"]
    b = g["base"]
    lines = [
        f"Gradient of `SequenceLoss` (batch {g['batch']}, context {g['context']}, "
        f"{g['dtype']}); ratio to L={b['layers']}, H={b['heads']}, m={b['width']} "
        "timed interleaved in the same process; warm = median of "
        f"{g['repeats']} repeats of {g['number']} calls.",
        "",
        "| layers | heads | width | params | compile (s) | warm (ms) | ratio | "
        "MFLOP (XLA) | load (1 min) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in g["rows"]:
        mflop = "—" if r["flops"] is None else f"{r['flops'] / 1e6:.1f}"
        lines.append(
            f"| {r['layers']} | {r['heads']} | {r['width']} | {r['params']} | "
            f"{r['compile_s']:.2f} | {r['warm_ms']:.3f} | {r['ratio']:.2f} | "
            f"{mflop} | {r['load_average'][0]:.2f} |"
        )
    lines += [
        "",
        "| flow (L=2, H=2, m=16, float64, Tsit5) | status | first focus: head, "
        "t_start–t_end | to the start of that focus: wall, steps, grad evals | "
        "whole horizon: compile, warm wall, steps, grad evals | loss / held-out "
        "at focus start | load (1 min) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for f in record["flows"]:
        st = f["stats"]
        whole = (
            f"{f['compile_s']:.1f} s, {f['warm_s']:.1f} s, {st['num_steps']}, "
            f"{st['grad_evals']}"
        )
        ff = f["first_focus"]
        if ff is None:
            focus, cost, losses = f"none by t = {f['t1']:g}", "—", "—"
        else:
            focus = (
                f"layer {ff['layer']} head {ff['head']}, "
                f"{ff['t_start']:.0f}–{ff['t_end']:.0f}"
            )
            cost = (
                f"{ff['wall_s']:.1f} s, {ff['stats']['num_steps']}, "
                f"{ff['stats']['grad_evals']}"
            )
            losses = f"{ff['loss_at_start']:.3f} / {ff['held_out_loss_at_start']:.3f}"
        lines.append(
            f"| sample {f['sample']} × {f['context']}, t1 = {f['t1']:g} | "
            f"{f['status']} | {focus} | {cost} | {whole} | {losses} | "
            f"{f['load_average'][0]:.2f} |"
        )
    return "\n".join(lines) + "\n"


def run(*, quick: bool = False) -> dict:
    """Both parts; writes results/deep_cost.json and deep_cost.md."""
    from .common import RESULTS, machine, save

    start_machine = machine()
    gradient = gradient_costs(repeats=5 if quick else 15, number=5 if quick else 10)
    flows = [flow_to_focus(sample=BATCH, t1=450.0)]
    if not quick:
        flows.append(flow_to_focus(sample=256, t1=800.0, num_saves=201))
    record = {
        "quick": quick,
        "machine_at_start": start_machine,
        "gradient": gradient,
        "flows": flows,
    }
    save("deep_cost", record)
    md = table(record)
    (RESULTS / "deep_cost.md").write_text(md)
    print(md)
    return record


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repeats, one flow")
    args = p.parse_args(argv)
    run(quick=args.quick)
    return 0


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks import deep_cost  # the package import, for .common

    raise SystemExit(deep_cost.main())
