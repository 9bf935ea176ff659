"""Where the standard block's flow stiffens, and why (issue 31, point 1).

Question: along the gradient flow of the issue's standard block (``gflow.Transformer``,
2 layers, 2 heads, width 16, value/output, pre-LayerNorm, residual, MLP 32, learned
positions (max_len 64: 5 504 parameters), init 0.02, 64 sequences of length 33 from
``MarkovChain.default()``, float64, last-position loss), what are the Hessian's top
eigenvalues against t, how many are stiff, and which part of the model makes them:
the same flow with LayerNorm off, with positions off, and on a larger sample (256
sequences, harder to memorise)? Each variant also records the smallest standard
deviation of a LayerNorm's input over positions and sequences (LayerNorm's Hessian
grows like 1/σ² as σ → 0) and the loss.

Command:  nice -n 10 python experiments/stiff_spectrum.py [--variants base no_ln ...]
          [--t1 6] [--max-steps 1500]
          the base block through its stiff phase (about 17 min on one core):
          python experiments/stiff_spectrum.py --variants base --t1 4 \
            --max-steps 100000 --saves 33 --tag _t4 --progress
Runtime:  about 3-6 min per variant on 2 shared cores (the default solver's flow
          until t1 or max_steps, then 40 Lanczos steps at each of 25 saves).
Writes:   runs/stiff_spectrum/<variant><tag>.json (t, loss, top eigenvalues,
          LayerNorm input σ, the parameters' norm, the solve's statistics and its
          StallReport) and docs/figures/stiff_spectrum<tag>.png.
Seeds:    sample key 0, model key 1 (jax.random.key), Lanczos key 2.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import jax

if __name__ == "__main__":
    jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "runs" / "stiff_spectrum"
FIGURE = ROOT / "docs" / "figures" / "stiff_spectrum.png"

VARIANTS = {
    "base": dict(layernorm=True, positions=True, batch=64),
    "no_ln": dict(layernorm=False, positions=True, batch=64),
    "no_pos": dict(layernorm=True, positions=False, batch=64),
    "batch256": dict(layernorm=True, positions=True, batch=256),
    # the same block on in-context Markov chains (3 states, Dirichlet(1) rows):
    # the data of the practical ladder and of the stand-in's block row
    "icl": dict(layernorm=True, positions=True, batch=64, data="icl-markov"),
}


def problem(*, layernorm=True, positions=True, batch=64, seed=0, data="markov"):
    """(loss, model) of the standard block (or a variant of it); ``data``: the
    paper's chain ("markov") or in-context Markov chains ("icl-markov", 3 states,
    Dirichlet(1) rows)."""
    from gflow import InContextMarkov, MarkovChain, SequenceLoss, Transformer

    if data == "markov":
        source = MarkovChain.default()
        d = source.d
    elif data == "icl-markov":
        source = InContextMarkov(states=3, alpha=1.0)
        d = source.states
    else:
        raise ValueError(f"data must be markov or icl-markov, got {data!r}")
    tokens = source.sample(key=jax.random.key(seed), batch=batch, length=33)
    model = Transformer.init(
        d_vocab=d,
        d_model=16,
        n_layers=2,
        n_heads=2,
        key=jax.random.key(seed + 1),
        init_scale=0.02,
        d_ff=32,
        value=True,
        layernorm=layernorm,
        residual=True,
        max_len=64 if positions else None,
        dtype=jnp.float64,
    )
    return SequenceLoss(tokens, d_vocab=d), model


def ln_input_sigma(model, tokens) -> float:
    """The smallest σ of any LayerNorm's input over sequences and positions (inf
    without LayerNorm): the scale LayerNorm divides by."""

    def one(context):
        x = model.W_E[context]
        if model.W_pos is not None:
            x = x + model.W_pos[: context.shape[0]]
        sig = []
        for block in model.blocks:
            if block.ln_attn is not None:
                sig.append(jnp.min(jnp.std(x, axis=-1)))
            x, _ = block(x, model.tau, model.residual)
        if model.ln_final is not None:
            sig.append(jnp.std(x[-1]))
        return jnp.min(jnp.stack(sig)) if sig else jnp.inf

    return float(jnp.min(jax.vmap(one)(jnp.asarray(tokens[:, :-1]))))


def run(
    name: str,
    *,
    t1: float,
    max_steps: int,
    saves: int = 25,
    k: int = 10,
    tag: str = "",
    progress: bool = False,
):
    from gflow import solve_flow
    from gflow.analysis import extreme_eigenpairs, flatten

    loss, model = problem(**VARIANTS[name])
    start = time.perf_counter()
    tr = solve_flow(
        loss,
        model,
        t1=t1,
        ts=np.linspace(0.0, t1, saves),
        max_steps=max_steps,
        save_params=True,
        progress=progress,
    )
    solve_s = time.perf_counter() - start
    rows = []
    for i, t in enumerate(tr.t):
        m = tr.snapshot(i)
        evals, _ = extreme_eigenpairs(loss, m, key=jax.random.key(2), iters=40)
        top = np.sort(np.asarray(evals))[::-1][:k]
        rows.append(
            {
                "t": float(t),
                "loss": float(tr.metrics["loss"][i]),
                "top": top.tolist(),
                "lambda_min": float(np.min(np.asarray(evals))),
                "ln_sigma": ln_input_sigma(m, loss.tokens),
                "param_norm": float(np.linalg.norm(flatten(m)[0])),
            }
        )
        print(
            f"{name} t={t:.3f} loss={rows[-1]['loss']:.4f} top={top[:5].round(1)} "
            f"sigma={rows[-1]['ln_sigma']:.3g}",
            flush=True,
        )
    d = tr.diagnosis
    record = {
        "variant": name,
        "settings": VARIANTS[name],
        "t1": t1,
        "max_steps": max_steps,
        "status": tr.status,
        "stats": tr.stats,
        "solve_s": solve_s,
        "rows": rows,
        "stall": None if d is None else d.message,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}{tag}.json").write_text(json.dumps(record, indent=1))
    return record


def solver_for(name: str):
    """The solver a segmented run uses: the default (None) or a named one."""
    from gflow.dynamics import solvers

    if name == "default":
        return None
    if name == "rkc2":
        return solvers.RKC2()
    if name == "split":
        return solvers.SplitRKC2()
    if name == "auto-rkc2":  # the default before SplitRKC2 became its Chebyshev method
        return solvers.AutoSwitch(chebyshev=solvers.RKC2())
    raise ValueError(f"solver must be default, rkc2, split or auto-rkc2, got {name!r}")


def spectrum_row(loss, m, t, loss_value):
    from gflow.analysis import extreme_eigenpairs, flatten

    evals, _ = extreme_eigenpairs(loss, m, key=jax.random.key(2), iters=40)
    return {
        "t": float(t),
        "loss": float(loss_value),
        "top": np.sort(np.asarray(evals))[::-1][:10].tolist(),
        "lambda_min": float(np.min(np.asarray(evals))),
        "ln_sigma": ln_input_sigma(m, loss.tokens),
        "param_norm": float(np.linalg.norm(flatten(m)[0])),
    }


def run_segments(
    name: str,
    *,
    t1: float,
    segment: float,
    max_steps: int,
    tag: str = "",
    solver: str = "default",
    rtol: float = 1e-6,
    progress: bool = False,
):
    """The flow in segments of length ``segment``, each a ``solve_flow`` from the last
    segment's end, checkpointed after each (``runs/stiff_spectrum/<name><tag>/``):
    an interrupted run resumes from its last finished segment with the same
    command. The spectrum is taken at each segment's end. Each segment restarts the
    solver (the default then begins with Tsit5 steps and detects the stiffness
    again); its cost is counted."""
    import equinox as eqx

    from gflow import solve_flow

    loss, model = problem(**VARIANTS[name])
    folder = OUT / f"{name}{tag}"
    folder.mkdir(parents=True, exist_ok=True)
    state_path, log_path = folder / "checkpoint.eqx", folder / "segments.json"
    if log_path.exists():
        log = json.loads(log_path.read_text())
        same = (log["solver"], log["segment"], log.get("rtol", 1e-6))
        if same != (solver, segment, rtol):
            raise SystemExit(
                f"{folder} was run with (solver, segment, rtol) = {same}: use "
                "another --tag"
            )
        model = eqx.tree_deserialise_leaves(state_path, model)
        print(f"resuming {name}{tag} at t = {log['rows'][-1]['t']}", flush=True)
    else:
        log = {
            "variant": name,
            "settings": VARIANTS[name],
            "solver": solver,
            "rtol": rtol,
            "segment": segment,
            "segments": [],
            "rows": [spectrum_row(loss, model, 0.0, loss(model))],
        }
    t = log["rows"][-1]["t"]
    while t < t1 - 1e-12:
        t_next = min(t + segment, t1)
        start = time.perf_counter()
        tr = solve_flow(
            loss,
            model,
            t0=t,
            t1=t_next,
            ts=[t_next],
            solver=solver_for(solver),
            rtol=rtol,
            atol=rtol * 1e-2,
            max_steps=max_steps,
            progress=progress,
        )
        wall = time.perf_counter() - start
        if tr.status != "success":
            print(tr.diagnosis.message if tr.diagnosis else tr.status, flush=True)
            raise SystemExit(f"segment [{t}, {t_next}] ended with {tr.status}")
        model = tr.final
        row = spectrum_row(loss, model, t_next, tr.metrics["loss"][-1])
        log["segments"].append({"t0": t, "t1": t_next, "wall_s": wall, **tr.stats})
        log["rows"].append(row)
        tmp = state_path.with_suffix(".tmp")
        eqx.tree_serialise_leaves(tmp, model)
        tmp.replace(state_path)
        # every segment's end is kept (44 KB each): windows start from them
        (folder / "states").mkdir(exist_ok=True)
        eqx.tree_serialise_leaves(folder / "states" / f"t{t_next:.3f}.eqx", model)
        log_path.with_suffix(".tmp").write_text(json.dumps(log, indent=1))
        log_path.with_suffix(".tmp").replace(log_path)
        t = t_next
        print(
            f"{name}{tag} t={t:.3f} loss={row['loss']:.5f} "
            f"evals={tr.stats['grad_evals']} steps={tr.stats['num_steps']} "
            f"wall={wall:.0f}s top={np.round(row['top'][:3], 1)} "
            f"sigma={row['ln_sigma']:.3g}",
            flush=True,
        )
    segs = log["segments"]
    record = {
        "variant": name,
        "settings": VARIANTS[name],
        "t1": t1,
        "solver": solver,
        "rtol": rtol,
        "segment": segment,
        "status": "success",
        "stats": {
            k: sum(s[k] for s in segs)
            for k in (
                "num_steps",
                "num_accepted_steps",
                "num_rejected_steps",
                "grad_evals",
            )
        },
        "solve_s": sum(s["wall_s"] for s in segs),
        "rows": log["rows"],
        "stall": None,
    }
    (OUT / f"{name}{tag}.json").write_text(json.dumps(record, indent=1))
    return record


def compare(name: str, tags: list[str]) -> dict:
    """The finished segmented runs ``<name><tag>`` side by side: each run's solver,
    tolerance, steps, gradient evaluations and solving time, and the relative
    distance between every pair's final parameters (two runs that agree bound each
    other's error). Writes runs/stiff_spectrum/<name>_compare.json."""
    import equinox as eqx

    from gflow.analysis import flatten

    _, model = problem(**VARIANTS[name])
    runs, finals = {}, {}
    for tag in tags:
        folder = OUT / f"{name}{tag}"
        log = json.loads((folder / "segments.json").read_text())
        segs = log["segments"]
        runs[tag] = {
            "solver": log["solver"],
            "rtol": log.get("rtol", 1e-6),
            "t_reached": log["rows"][-1]["t"],
            "num_steps": sum(s["num_steps"] for s in segs),
            "num_rejected_steps": sum(s["num_rejected_steps"] for s in segs),
            "grad_evals": sum(s["grad_evals"] for s in segs),
            "solve_s": sum(s["wall_s"] for s in segs),
            "final_loss": log["rows"][-1]["loss"],
        }
        m = eqx.tree_deserialise_leaves(folder / "checkpoint.eqx", model)
        finals[tag] = np.asarray(flatten(m)[0])
    reached = {r["t_reached"] for r in runs.values()}
    if len(reached) != 1:
        raise SystemExit(f"the runs end at different times {sorted(reached)}")
    dist = {
        f"{a} vs {b}": float(
            np.linalg.norm(finals[a] - finals[b]) / np.linalg.norm(finals[b])
        )
        for i, a in enumerate(tags)
        for b in tags[i + 1 :]
    }
    out = {"variant": name, "runs": runs, "relative_distance": dist}
    (OUT / f"{name}_compare.json").write_text(json.dumps(out, indent=1))
    for tag, r in runs.items():
        print(tag, r)
    for k, v in dist.items():
        print(f"{k}: {v:.2e}")
    return out


def window(name: str, tag: str, t0: float, dt: float, runs: list[str]) -> dict:
    """Solvers side by side on one window [t0, t0 + dt] of a segmented run, from its
    state kept at t0 (``<name><tag>/states/t<t0>.eqx``), in one process: each run
    ``solver@rtol`` (atol rtol/100) with its gradient evaluations, steps, wall time
    (the first solve of each solver includes its compile: context only) and the
    relative distance of its end to the last run's (list the tightest last).
    Writes runs/stiff_spectrum/<name><tag>_window_t<t0>.json."""
    import equinox as eqx

    from gflow import solve_flow
    from gflow.analysis import flatten

    loss, model = problem(**VARIANTS[name])
    state = OUT / f"{name}{tag}" / "states" / f"t{t0:.3f}.eqx"
    if not state.exists():
        raise SystemExit(f"no state at t = {t0} in {state.parent}: run it first")
    model = eqx.tree_deserialise_leaves(state, model)
    rows, finals = {}, {}
    for run_name in runs:
        solver, rtol = run_name.split("@")
        start = time.perf_counter()
        tr = solve_flow(
            loss,
            model,
            t0=t0,
            t1=t0 + dt,
            ts=[t0 + dt],
            solver=solver_for(solver),
            rtol=float(rtol),
            atol=float(rtol) * 1e-2,
            max_steps=400_000,
        )
        rows[run_name] = {
            "status": tr.status,
            **tr.stats,
            "wall_s_with_compile": time.perf_counter() - start,
            "load_average": os.getloadavg()[0],
            "final_loss": float(tr.metrics["loss"][-1]),
        }
        finals[run_name] = np.asarray(flatten(tr.final)[0])
        print(run_name, rows[run_name], flush=True)
    ref = finals[runs[-1]]
    for run_name in runs:
        rows[run_name]["distance_to_last"] = float(
            np.linalg.norm(finals[run_name] - ref) / np.linalg.norm(ref)
        )
        print(f"{run_name}: {rows[run_name]['distance_to_last']:.2e} from {runs[-1]}")
    out = {"variant": name, "tag": tag, "t0": t0, "dt": dt, "runs": rows}
    path = OUT / f"{name}{tag}_window_t{t0:g}.json"
    path.write_text(json.dumps(out, indent=1))
    return out


T20_START, T20_END = "<!-- deep_t20:start -->", "<!-- deep_t20:end -->"

SOLVER_WORDS = {
    "default": "the default (AutoSwitch: Tsit5, EXPRB32, SplitRKC2)",
    "auto-rkc2": "the previous default (AutoSwitch with plain RKC2)",
    "split": "SplitRKC2 alone",
    "rkc2": "RKC2 alone",
}


def tsit5_bound(rows) -> float:
    """Tsit5's least gradient evaluations over the rows' span by stability alone: its
    step stays below 3.4/λ_max, 6 evaluations a step, so 6 ∫ λ_max dt / 3.4 (the
    trapezoid rule on the saved spectra): an estimate, not a run."""
    t = np.array([r["t"] for r in rows])
    lam = np.array([r["top"][0] for r in rows])
    return 6.0 * float(np.trapezoid(lam, t)) / 3.4


def bare_gradient_ms() -> float:
    """The block's bare fused gradient in ms, as benchmarks/deep_overhead.py last
    measured it quietly (its 2-saves pass); 7.7 ms, its first measurement, where
    that record is absent."""
    path = ROOT / "benchmarks" / "results" / "deep_overhead.json"
    if not path.exists():
        return 7.7
    return json.loads(path.read_text())["rows"]["2 saves"]["bare_fused_us"] / 1e3


def t20_block(name: str = "base", windows=("_t20_window_t4",)) -> str:
    """The markdown of BENCHMARKS.md's block on the block's flow to t = 20, from the
    segmented runs' records and the window comparisons (nothing typed by hand)."""
    comp = json.loads((OUT / f"{name}_compare.json").read_text())
    runs = comp["runs"]
    first, ref = list(runs)[0], list(runs)[-1]  # compared in that order
    rows0 = json.loads((OUT / f"{name}{first}" / "segments.json").read_text())["rows"]
    bound = tsit5_bound(rows0)
    grad_ms = bare_gradient_ms()
    lines = [
        f'Runs: `XLA_FLAGS="--xla_cpu_multi_thread_eigen=false '
        'intra_op_parallelism_threads=1" PYTHONPATH=$PWD taskset -c N python '
        "experiments/stiff_spectrum.py --variants base --t1 20 --segment 0.5 "
        "--max-steps 400000 --tag TAG --solver SOLVER --rtol RTOL` (one core each, "
        "two at a time beside other jobs, at loads of 2-5: their solving times are "
        "not quoted), "
        f"then `--compare {' '.join(runs)}`. Each run is 40 segments of 0.5, each a "
        "`solve_flow` from the last one's end (a restart: the default begins each "
        "with Tsit5 steps), atol = rtol/100. Tsit5's bound: 6 ∫ λ_max dt / 3.4 "
        f"over the 41 spectra saved along the first run = {bound:,.0f} gradient "
        "evaluations (its stability alone; an estimate, not a run: at the "
        f"{grad_ms:.1f} ms a gradient measured quietly in the per-gradient block "
        f"below, about {bound * grad_ms / 3.6e6:.0f} hours).",
        "",
        "| run | solver | rtol | steps (rejected) | gradient evaluations | "
        "Tsit5's bound ÷ this | loss at t = 20 | "
        f"distance to {ref} |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for tag, r in runs.items():
        d = comp["relative_distance"].get(f"{tag} vs {ref}")
        dist = "—" if tag == ref else (f"{d:.1e}" if d is not None else "n/a")
        lines.append(
            f"| {tag} | {SOLVER_WORDS.get(r['solver'], r['solver'])} | "
            f"{r['rtol']:g} | {r['num_steps']:,} ({r['num_rejected_steps']:,}) | "
            f"{r['grad_evals']:,} | {bound / r['grad_evals']:.0f}× | "
            f"{r['final_loss']:.6f} | {dist} |"
        )
    pairs = "; ".join(f"{k} {v:.1e}" for k, v in comp["relative_distance"].items())
    lines += ["", f"Relative distances between the final parameters: {pairs}."]
    for w in windows:
        path = OUT / f"{name}{w}.json"
        if not path.exists():
            continue
        rec = json.loads(path.read_text())
        last = list(rec["runs"])[-1]
        lines += [
            "",
            f"One window, t = {rec['t0']:g} to {rec['t0'] + rec['dt']:g}, from the "
            f"state the first run kept at t = {rec['t0']:g}, in one process "
            f"(`--tag {rec['tag']} --window {rec['t0']:g} {rec['dt']:g} --solvers "
            f"{','.join(rec['runs'])}`); distances to {last}:",
            "",
            "| solver@rtol | steps (rejected) | gradient evaluations | distance | "
            "load (1 min) |",
            "|---|---|---|---|---|",
        ]
        for run_name, r in rec["runs"].items():
            dist = "—" if run_name == last else f"{r['distance_to_last']:.1e}"
            lines.append(
                f"| {run_name} | {r['num_steps']:,} ({r['num_rejected_steps']:,}) | "
                f"{r['grad_evals']:,} | {dist} | {r['load_average']:.2f} |"
            )
    return "\n".join(lines)


def write_t20_block(doc: Path = ROOT / "BENCHMARKS.md") -> None:
    from benchmarks.quiet import replace_block

    replace_block(doc, T20_START, T20_END, t20_block() + "\n")


def plot(names, tag: str = ""):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = [OUT / f"{n}{tag}.json" for n in names if (OUT / f"{n}{tag}.json").exists()]
    if not paths:  # never overwrite the published figure with an empty one
        raise SystemExit(
            f"no records {names} with tag {tag!r} in {OUT}: run them first"
        )
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for path in paths:
        name = path.stem[: len(path.stem) - len(tag)] if tag else path.stem
        rec = json.loads(path.read_text())
        t = [r["t"] for r in rec["rows"]]
        top = np.array([r["top"] for r in rec["rows"]])
        (line,) = axes[0].semilogy(t, top[:, 0], label=f"{name}: λ₁")
        for j in range(1, min(5, top.shape[1])):
            axes[0].semilogy(
                t,
                np.maximum(top[:, j], 1e-3),
                color=line.get_color(),
                alpha=0.35,
                lw=0.8,
            )
        axes[1].semilogy(
            t, [r["ln_sigma"] for r in rec["rows"]], label=name, color=line.get_color()
        )
    axes[0].set(
        xlabel="flow time t",
        ylabel="Hessian eigenvalues (top 5)",
        title="λ₁ (bold) and λ₂…λ₅ (faint)",
    )
    # LayerNorm divides by sqrt(σ² + ε): below sqrt(ε) its factor stops growing
    axes[1].axhline(np.sqrt(1e-5), color="0.5", ls=":", lw=1, label="√ε (ε = 1e-5)")
    axes[1].set(xlabel="flow time t", ylabel="smallest LayerNorm input σ")
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    out = FIGURE.with_name(f"{FIGURE.stem}{tag}{FIGURE.suffix}")
    fig.savefig(out, dpi=120)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variants", nargs="+", default=list(VARIANTS))
    p.add_argument("--t1", type=float, default=6.0)
    p.add_argument("--max-steps", type=int, default=1500)
    p.add_argument("--saves", type=int, default=25)
    p.add_argument(
        "--tag",
        default="",
        help="appended to the names of the records and the figure (a longer run "
        "beside the default one, e.g. _t20)",
    )
    p.add_argument(
        "--progress", action="store_true", help="the solver's progress lines"
    )
    p.add_argument(
        "--segment",
        type=float,
        default=None,
        help="run in segments of this flow time, checkpointed after each under "
        "runs/stiff_spectrum/<variant><tag>/ (an interrupted run resumes with the "
        "same command); the spectrum is taken at each segment's end",
    )
    p.add_argument(
        "--solver",
        default="default",
        choices=["default", "rkc2", "split", "auto-rkc2"],
        help="with --segment: the solver (default: solve_flow's default)",
    )
    p.add_argument(
        "--rtol",
        type=float,
        default=1e-6,
        help="with --segment: the tolerance (atol = rtol/100, as solve_flow's "
        "defaults 1e-6, 1e-8)",
    )
    p.add_argument(
        "--compare",
        nargs="+",
        metavar="TAG",
        help="compare finished segmented runs of the first variant by their tags "
        "(costs and the distances between their final parameters), then exit",
    )
    p.add_argument(
        "--window",
        nargs=2,
        type=float,
        metavar=("T0", "DT"),
        help="compare --solvers on [T0, T0 + DT] from the state a segmented run "
        "(the first variant, --tag) kept at T0, then exit",
    )
    p.add_argument(
        "--solvers",
        default="auto-rkc2@1e-6,default@1e-6,split@1e-8,auto-rkc2@1e-8",
        help="with --window: solver@rtol runs, the tightest last (the reference)",
    )
    p.add_argument("--plot-only", action="store_true")
    a = p.parse_args()
    if a.window:
        window(a.variants[0], a.tag, *a.window, a.solvers.split(","))
        return
    if a.compare:
        compare(a.variants[0], a.compare)
        if a.variants[0] == "base":
            write_t20_block()
        return
    if a.segment is not None and not a.plot_only:
        for name in a.variants:
            run_segments(
                name,
                t1=a.t1,
                segment=a.segment,
                max_steps=a.max_steps,
                tag=a.tag,
                solver=a.solver,
                rtol=a.rtol,
                progress=a.progress,
            )
    elif not a.plot_only:
        for name in a.variants:
            run(
                name,
                t1=a.t1,
                max_steps=a.max_steps,
                saves=a.saves,
                tag=a.tag,
                progress=a.progress,
            )
    plot(list(VARIANTS), tag=a.tag)


if __name__ == "__main__":
    main()
