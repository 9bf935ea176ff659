"""Central flows beyond GD: RMSProp's, and the quasi-static attempt for heavy ball and
Adam, against the runs themselves (issue 19, point 3).

Question: past its edge of stability, does RMSProp follow its central flow
(``RMSPropCentralFlowReference``), and do heavy ball and Adam follow the quasi-static
model (``MomentumCentralFlowReference``, ``AdamCentralFlowReference``: the momentum
buffer at its steady state, the method's own stability limit as the edge)? Each is
compared with the same ODE without the oscillation (``oscillation=False``, the
"stable flow"), which is what the run would follow if the edge did not act.

Cases: the two-parameter edge-of-stability problem L = y(1 − cos x) − c y (c = 0.05,
tests/test_central_flow.py), where RMSProp's central flow settles at y = 2/√(η² − 8c)
in closed form, and the default Markov model (MODEL.md §3, float64) from the initial
weights of seeds 0, 1 and 2. The two-parameter cases have no seed: the start
(0.3, 1.5), the full gradient and the models' eigenvector start (a fixed key) make
them deterministic, so they run once.
Per case: the run's time average (over ``window`` steps) against each model at the
save times, before the model reaches its edge and at the end; the run's
time-averaged loss against the central flow's predicted loss L + ½⟨Σ, H⟩ and the
stable flow's loss; and each model's wall time. The Markov rows of the table are the
median [min, max] over the seeds.

Command:
    PYTHONPATH=$PWD python experiments/central_flows_beyond_gd.py [--write-docs]
        [--quick] [--seeds 0,1,2]

Runtime: the two-parameter cases about a minute, the Markov cases 8-9 min per seed
on 2 CPU cores (7.7-9.0 min in the run in the docs, with another job beside it).

Writes experiments/results/central_flows_beyond_gd/{toy.json, results.json,
table.md, distance.png}: toy.json holds the two-parameter cases, each saved as it
finishes; results.json the Markov cases of each seed, saved as the seed finishes,
with the runs' time and the load at the start and after each seed (a rerun reads
both back and runs only what is missing). ``--write-docs`` puts the tables and
figure into docs/flow_vs_optimizers.md (between the ``beyond_gd`` markers).
``--quick`` runs the two-parameter cases only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from jax.flatten_util import ravel_pytree  # noqa: E402

from experiments import _docs, _seeds  # noqa: E402
from gflow import (  # noqa: E402
    AdamCentralFlowReference,
    MomentumCentralFlowReference,
    PopulationLoss,
    RMSProp,
    RMSPropCentralFlowReference,
)
from gflow.plotting import (  # noqa: E402
    DOC_WIDTH,
    STEP_CLOCK,
    save_figure,  # noqa: E402
    settings_line,
    styled,
)
from gflow.runs import FlowConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "results" / "central_flows_beyond_gd"
DOC = ROOT / "docs" / "flow_vs_optimizers.md"
START, END = "<!-- beyond_gd:start -->", "<!-- beyond_gd:end -->"
C = 0.05

#: (name, problem, optimizer, η, steps, β, ε): β is RMSProp's decay, heavy ball's
#: momentum or Adam's β₁ (β₂ = 0.999).
CASES = (
    ("rmsprop-toy", "toy", "rmsprop", 1.0, 600, 0.9, 1.0),
    ("momentum-toy", "toy", "momentum", 0.05, 6000, 0.9, 0.0),
    ("momentum-toy-large", "toy", "momentum", 0.5, 600, 0.9, 0.0),
    ("adam-toy", "toy", "adam", 0.05, 4000, 0.9, 1e-8),
    ("rmsprop-markov", "markov", "rmsprop", 0.2, 500, 0.9, 1e-2),
    ("momentum-markov", "markov", "momentum", 0.1, 2000, 0.9, 0.0),
    ("adam-markov", "markov", "adam", 0.05, 2000, 0.9, 1e-2),
)


def _problem(name, seed: int):
    """(the loss of a flat parameter vector, the start); the toy ignores ``seed``."""
    if name == "toy":
        return (lambda w: w[1] * (1.0 - jnp.cos(w[0])) - C * w[1]), jnp.asarray(
            [0.3, 1.5]
        )
    cfg = FlowConfig(seed=seed)
    loss, model = PopulationLoss(cfg.chain()), cfg.model()
    params, static = eqx.partition(model, eqx.is_inexact_array)
    w0, unravel = ravel_pytree(params)
    return (lambda w: loss(eqx.combine(unravel(w), static))), w0


def _models(opt, eta, beta, eps):
    """(the discrete optimizer, its central flow, its stable flow)."""
    if opt == "rmsprop":
        ref = RMSPropCentralFlowReference(beta=beta, eps=eps)
        return RMSProp(beta=beta, eps=eps).transform(eta), ref
    if opt == "momentum":
        ref = MomentumCentralFlowReference(beta=beta)
        return optax.sgd(eta, momentum=beta), ref
    ref = AdamCentralFlowReference(beta1=beta, eps=eps)
    return optax.adam(eta, b1=beta, b2=ref.beta2, eps=eps), ref


def _run(f, w0, opt, steps):
    @jax.jit
    def scan(w0):
        def body(carry, _):
            w, state = carry
            u, state = opt.update(jax.grad(f)(w), state, w)
            return (w + u, state), w + u

        _, ws = jax.lax.scan(body, (w0, opt.init(w0)), None, length=steps)
        return jnp.concatenate([w0[None], ws])

    return np.asarray(scan(w0))


def run_case(case, saves: int = 101, *, seed: int = 0) -> dict:
    """The run of ``case`` against its central and stable flows; ``seed`` sets the
    Markov model's initial weights (the toy has none)."""
    start_case = time.perf_counter()
    name, problem, opt_name, eta, steps, beta, eps = case
    f, w0 = _problem(problem, seed)
    opt, ref = _models(opt_name, eta, beta, eps)
    ws = _run(f, w0, opt, steps)
    window = 20
    idx = np.linspace(0, steps, saves).round().astype(int)
    avg = np.stack([ws[max(0, k - window) : k + 1].mean(0) for k in idx])
    losses = np.asarray(jax.vmap(f)(jnp.asarray(ws)))
    loss_avg = np.array([losses[max(0, k - window) : k + 1].mean() for k in idx])
    times = idx * eta
    rec = {
        "case": name,
        "problem": problem,
        "seed": None if problem == "toy" else seed,
        "optimizer": opt_name,
        "eta": eta,
        "beta": beta,
        "eps": eps,
        "steps": steps,
        "t": times.tolist(),
        "edge": ref.edge_constant / eta,
        "finite": bool(np.all(np.isfinite(ws))),
    }
    for label, model in (
        ("central", ref),
        ("stable", dataclasses.replace(ref, oscillation=False)),
    ):
        start = time.perf_counter()
        traj = model.solve_one(f, w0, times, eta)
        rec[f"{label}_s"] = time.perf_counter() - start
        rec[f"{label}_status"] = traj.status
        d = np.linalg.norm(avg - np.asarray(traj.params), axis=1)
        rec[f"{label}_distance"] = d.tolist()
        rec[f"{label}_lambda"] = (traj.metrics["lambda_max"] * eta).tolist()
        key = "predicted_loss" if label == "central" else "loss"
        rec[f"{label}_loss"] = np.asarray(traj.metrics[key]).tolist()
    rec["run_loss"] = loss_avg.tolist()
    lam = np.asarray(rec["central_lambda"])
    at_edge = np.nonzero(lam >= 0.975 * ref.edge_constant)[0]
    rec["edge_index"] = int(at_edge[0]) if len(at_edge) else None
    rec["seconds"] = time.perf_counter() - start_case
    print(
        f"{name} (seed {rec['seed']}): central {rec['central_distance'][-1]:.3g}, "
        f"stable {rec['stable_distance'][-1]:.3g} ({rec['central_s']:.0f} s, "
        f"{rec['stable_s']:.0f} s)",
        flush=True,
    )
    return rec


def summary(r: dict) -> dict:
    """One run's row: when its central flow reaches the edge, whether it stayed
    finite, the largest distance before the edge and the distance at the end from
    each model, and the time-averaged loss at the end (run, central prediction,
    stable flow)."""
    e = r["edge_index"]
    before = slice(0, e if e is not None else len(r["t"]))
    out = {"edge_t": None if e is None else r["t"][e], "finite": r["finite"]}
    for k in ("central", "stable"):
        out[f"{k}_before"] = max(r[f"{k}_distance"][before], default=0.0)
        out[f"{k}_end"] = r[f"{k}_distance"][-1]
        out[f"{k}_loss"] = r[f"{k}_loss"][-1]
    out["run_loss"] = r["run_loss"][-1]
    return out


def table(records) -> str:
    """One row per run (the two-parameter cases, or one seed's)."""
    head = (
        "| case | η | edge c/η | model at its edge at t | run finite | distance "
        "before the edge: central / stable | at the end: central / stable | "
        "time-averaged loss at the end: run / central predicts / stable |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    rows = []
    for r in records:
        s = summary(r)
        rows.append(
            f"| {r['case']} | {r['eta']:g} | {r['edge']:.3g} | "
            f"{'-' if s['edge_t'] is None else format(s['edge_t'], 'g')} | "
            f"{'yes' if s['finite'] else '**no**'} | "
            f"{s['central_before']:.3g} / {s['stable_before']:.3g} | "
            f"{s['central_end']:.3g} / {s['stable_end']:.3g} | "
            f"{s['run_loss']:.5g} / {s['central_loss']:.5g} / {s['stable_loss']:.5g} |"
        )
    return "\n".join([head, *rows])


def spread(values, fmt: str = ".3g") -> str:
    """``median [min, max]`` of ``values``; ``-`` for those that are None, with the
    count that has one when not all do."""
    xs = [x for x in values if x is not None]
    if not xs:
        return "-"
    text = f"{np.median(xs):{fmt}} [{min(xs):{fmt}}, {max(xs):{fmt}}]"
    return text if len(xs) == len(values) else f"{text} ({len(xs)}/{len(values)})"


def seeds_table(by_seed: dict[str, dict]) -> str:
    """The Markov cases over the seeds (``by_seed``: seed as text -> {``"cases"``:
    case name -> run record}): each column of ``table`` as median [min, max], the
    seeds whose run stayed finite, and those that end closer to the central flow
    than to the stable one."""
    seeds = list(by_seed)
    names = list(by_seed[seeds[0]]["cases"])
    header = [
        "case",
        "η",
        "edge c/η",
        "model at its edge at t",
        "run finite",
        "before the edge: central",
        "before the edge: stable",
        "at the end: central",
        "at the end: stable",
        "central closer at the end",
        "loss at the end: run",
        "central predicts",
        "stable",
    ]
    rows = []
    for name in names:
        rs = [by_seed[s]["cases"][name] for s in seeds]
        ss = [summary(r) for r in rs]

        def col(k, fmt=".3g", ss=ss):
            return spread([x[k] for x in ss], fmt)

        closer = sum(x["central_end"] < x["stable_end"] for x in ss)
        rows.append(
            [name, f"{rs[0]['eta']:g}", f"{rs[0]['edge']:.3g}", col("edge_t", "g")]
            + [f"{sum(x['finite'] for x in ss)}/{len(ss)}"]
            + [
                col(f"{k}_{w}")
                for w in ("before", "end")
                for k in ("central", "stable")
            ]
            + [f"{closer}/{len(ss)}"]
            + [col(k, ".5g") for k in ("run_loss", "central_loss", "stable_loss")]
        )
    intro = (
        f"The Markov cases over seeds {', '.join(seeds)} of the initial weights (the "
        "same seed for the run and both flows): each cell is the median [min, max] "
        "over the seeds; the loss is the run's time average at the end and what each "
        "flow gives there."
    )
    return intro + "\n\n" + _docs.table(header, rows) + "\n"


#: how each optimizer is named in the figure
OPTIMIZER_NAMES = {"rmsprop": "RMSProp", "momentum": "heavy ball", "adam": "Adam"}


@styled
def figure(cases: list[list[dict]], out: Path) -> Path:
    """One panel per case (3 per row, at the docs' width), each from its runs (one
    for a two-parameter case, one per seed for a Markov case): the distance of the
    run's time average from the central flow (solid) and from the stable flow
    (dashed), the median over the seeds with their range shaded, on a log axis
    where they span decades, grey lines where each seed's central flow reaches its
    edge; the legend below names them, the footer the settings."""
    cols = 3
    rows = -(-len(cases) // cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(DOC_WIDTH, 2.05 * rows + 0.5), squeeze=False
    )
    for ax, rs in zip(axes.flat, cases):
        r = rs[0]
        # t = 0 is left out: run and models start at one point (distance 0)
        t = r["t"][1:]
        both = []
        for k, style, color in (("central", "-", "k"), ("stable", "--", "tab:orange")):
            d = np.maximum([x[f"{k}_distance"][1:] for x in rs], 1e-6)
            ax.plot(t, np.median(d, axis=0), style, color=color)
            if len(rs) > 1:
                ax.fill_between(t, d.min(0), d.max(0), color=color, alpha=0.2, lw=0)
            both.append(d)
        both = np.concatenate(both, axis=None)
        if both.max() / both.min() > 10:  # a log axis only where it spans decades
            ax.set_yscale("log")
        for e in sorted({x["edge_index"] for x in rs} - {None}):
            ax.axvline(r["t"][e], color="0.55", lw=0.9, ls=":")
        problem = "toy" if r["problem"] == "toy" else "Markov"
        ax.set_title(
            f"{OPTIMIZER_NAMES[r['optimizer']]}, {problem}, η = {r['eta']:g}",
            loc="left",
            fontsize=8,
        )
        ax.set_xlabel(STEP_CLOCK)
        ax.set_ylabel("|run − flow|")
        ax.xaxis.set_major_locator(plt.MaxNLocator(4))
    for ax in axes.flat[len(cases) :]:
        ax.set_visible(False)
    handles = [
        plt.Line2D([], [], color="k"),
        plt.Line2D([], [], color="tab:orange", ls="--"),
        plt.Line2D([], [], color="0.55", lw=0.9, ls=":"),
    ]
    labels = [
        "central flow",
        "stable flow (no oscillation)",
        "central flow at its edge",
    ]
    fig.legend(handles, labels, loc="lower center", ncol=3, frameon=False)
    seeds = sorted({x["seed"] for rs in cases for x in rs} - {None})
    settings_line(
        fig,
        "toy: c = 0.05, no seed · Markov: default model, float64, "
        f"seeds {', '.join(map(str, seeds))} (median, range shaded) · "
        "20-step average · β = 0.9",
    )
    path = out / "distance.png"
    save_figure(fig, path)
    return path


def run_toys(cases, path: Path) -> dict:
    """The two-parameter cases (deterministic: run once), each saved in ``path``
    as it finishes and read back by a rerun with the same spec."""
    saved = json.loads(path.read_text()) if path.exists() else {}
    for case in cases:
        if case[0] in saved and saved[case[0]]["spec"] == list(case):
            continue
        saved[case[0]] = {"spec": list(case), "result": run_case(case)}
        path.write_text(json.dumps(saved))  # a finished case is never lost
    return {c[0]: saved[c[0]]["result"] for c in cases}


def note(toys: dict, markov: dict | None, seeds: str) -> str:
    """The block's line on seeds, command, runtime and load."""
    cmd = "PYTHONPATH=$PWD python experiments/central_flows_beyond_gd.py"
    toy_s = sum(r["seconds"] for r in toys.values())
    text = (
        "The two-parameter cases have no seed: the start (0.3, 1.5), the full "
        "gradient and the models' eigenvector start (a fixed key) make them "
        f"deterministic, so they ran once ({toy_s:.0f} s)."
    )
    if markov is not None:
        per_seed = ", ".join(
            f"{sum(r['seconds'] for r in v['cases'].values()) / 60:.1f}"
            for v in markov["seeds"].values()
        )
        text += (
            f" The Markov cases ran from seeds {', '.join(markov['seeds'])} in "
            f"{markov['seconds'] / 60:.1f} min of runs ({per_seed} min per seed); "
            f"`uptime` at the start: `{markov['uptime_at_start']}`"
        )
        loads = [v.get("load_after") for v in markov["seeds"].values()]
        if None not in loads:  # kept since the seeds' loop ran with it
            text += ", 1-minute load after each seed: " + ", ".join(
                f"{x:.2f}" for x in loads
            )
        text += "."
    return text + f" Generated by `{cmd} --seeds {seeds} --write-docs`."


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--write-docs", action="store_true")
    p.add_argument("--seeds", default="0,1,2", help="init seeds of the Markov cases")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    toys = run_toys([c for c in CASES if c[1] == "toy"], args.out / "toy.json")
    markov_cases = [c for c in CASES if c[1] != "toy"]
    markov = None
    if not args.quick:
        markov = _seeds.over_seeds(
            args.out / "results.json",
            {"cases": [list(c) for c in markov_cases]},
            [int(s) for s in args.seeds.split(",")],
            lambda seed: {
                "cases": {c[0]: run_case(c, seed=seed) for c in markov_cases},
                "load_after": os.getloadavg()[0],
            },
        )
        markov["seeds"] = {s: markov["seeds"][s] for s in args.seeds.split(",")}
    text = table(list(toys.values()))
    if markov is not None:
        text += "\n\n" + seeds_table(markov["seeds"])
    by_case = [[r] for r in toys.values()]
    if markov is not None:
        by_case += [
            [v["cases"][c[0]] for v in markov["seeds"].values()] for c in markov_cases
        ]
    path = figure(by_case, args.out)
    text = text.rstrip("\n") + "\n\n" + note(toys, markov, args.seeds)
    (args.out / "table.md").write_text(text + "\n")
    print(text)
    if args.write_docs:
        target = ROOT / "docs" / "figures" / "beyond_gd_distance.png"
        shutil.copyfile(path, target)
        figs = f"![distance](figures/{target.name})"
        _docs.replace_block(DOC, START, END, text + "\n\n" + figs + "\n", append=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
