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
in closed form, and the default Markov model (MODEL.md §3, float64, init seed 0).
Per case: the run's time average (over ``window`` steps) against each model at the
save times, before the model reaches its edge and at the end; the run's
time-averaged loss against the central flow's predicted loss L + ½⟨Σ, H⟩ and the
stable flow's loss; and each model's wall time.

Command:
    PYTHONPATH=$PWD python experiments/central_flows_beyond_gd.py [--write-docs]
        [--quick]

Writes experiments/results/central_flows_beyond_gd/{results.json, table.md,
distance.png}; a finished case is saved at once and read back by a rerun.
``--write-docs`` puts the table and figure into docs/flow_vs_optimizers.md (between
the ``beyond_gd`` markers). ``--quick`` runs the two-parameter cases only.
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


def _problem(name):
    if name == "toy":
        return (lambda w: w[1] * (1.0 - jnp.cos(w[0])) - C * w[1]), jnp.asarray(
            [0.3, 1.5]
        )
    cfg = FlowConfig()
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


def run_case(case, saves: int = 101) -> dict:
    name, problem, opt_name, eta, steps, beta, eps = case
    f, w0 = _problem(problem)
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
    print(
        f"{name}: central {rec['central_distance'][-1]:.3g}, stable "
        f"{rec['stable_distance'][-1]:.3g} ({rec['central_s']:.0f} s, "
        f"{rec['stable_s']:.0f} s)",
        flush=True,
    )
    return rec


def table(records) -> str:
    head = (
        "| case | η | edge c/η | model at its edge at t | run finite | distance "
        "before the edge: central / stable | at the end: central / stable | "
        "time-averaged loss at the end: run / central predicts / stable |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    rows = []
    for r in records:
        e = r["edge_index"]
        before = slice(0, e if e is not None else len(r["t"]))
        cb, sb = (
            max(r[f"{k}_distance"][before], default=0.0) for k in ("central", "stable")
        )
        rows.append(
            f"| {r['case']} | {r['eta']:g} | {r['edge']:.3g} | "
            f"{'-' if e is None else format(r['t'][e], 'g')} | "
            f"{'yes' if r['finite'] else '**no**'} | {cb:.3g} / {sb:.3g} | "
            f"{r['central_distance'][-1]:.3g} / {r['stable_distance'][-1]:.3g} | "
            f"{r['run_loss'][-1]:.5g} / {r['central_loss'][-1]:.5g} / "
            f"{r['stable_loss'][-1]:.5g} |"
        )
    return "\n".join([head, *rows])


#: how each optimizer is named in the figure
OPTIMIZER_NAMES = {"rmsprop": "RMSProp", "momentum": "heavy ball", "adam": "Adam"}


@styled
def figure(records, out: Path) -> Path:
    """One panel per case (3 per row, at the docs' width): the distance of the
    run's time average from the central flow (solid) and from the stable flow
    (dashed), on a log axis where they span decades, a grey line where the
    central flow reaches its edge; the legend below names all three, the footer
    the settings."""
    cols = 3
    rows = -(-len(records) // cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(DOC_WIDTH, 2.05 * rows + 0.5), squeeze=False
    )
    for ax, r in zip(axes.flat, records):
        # t = 0 is left out: run and models start at one point (distance 0)
        t = r["t"][1:]
        central = np.maximum(r["central_distance"][1:], 1e-6)
        stable = np.maximum(r["stable_distance"][1:], 1e-6)
        ax.plot(t, central, color="k")
        ax.plot(t, stable, "--", color="tab:orange")
        both = np.concatenate([central, stable])
        if both.max() / both.min() > 10:  # a log axis only where it spans decades
            ax.set_yscale("log")
        if r["edge_index"] is not None:
            ax.axvline(r["t"][r["edge_index"]], color="0.55", lw=0.9, ls=":")
        problem = "toy" if r["problem"] == "toy" else "Markov"
        ax.set_title(
            f"{OPTIMIZER_NAMES[r['optimizer']]}, {problem}, η = {r['eta']:g}",
            loc="left",
            fontsize=8,
        )
        ax.set_xlabel(STEP_CLOCK)
        ax.set_ylabel("|run − flow|")
        ax.xaxis.set_major_locator(plt.MaxNLocator(4))
    for ax in axes.flat[len(records) :]:
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
    settings_line(
        fig,
        "toy: L = y(1 − cos x) − c y, c = 0.05 · Markov: the default model, "
        "float64, init seed 0 · run averaged over 20 steps · β = 0.9",
    )
    path = out / "distance.png"
    save_figure(fig, path)
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--write-docs", action="store_true")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    cases = [c for c in CASES if not args.quick or c[1] == "toy"]
    args.out.mkdir(parents=True, exist_ok=True)
    record = args.out / "results.json"
    saved = json.loads(record.read_text()) if record.exists() else {}
    start, load = time.perf_counter(), os.getloadavg()[0]
    for case in cases:
        if case[0] in saved and saved[case[0]]["spec"] == list(case):
            continue
        saved[case[0]] = {"spec": list(case), "result": run_case(case)}
        record.write_text(json.dumps(saved))  # a finished case is never lost
    wall = time.perf_counter() - start
    records = [saved[c[0]]["result"] for c in cases]
    text = table(records)
    path = figure(records, args.out)
    cmd = "PYTHONPATH=$PWD python experiments/central_flows_beyond_gd.py"
    note = f"Regenerated by `{cmd} --write-docs`" + (
        f" in {wall / 60:.1f} min (load average {load:.2f} at the start)."
        if wall > 60
        else " (read back from results.json)."
    )
    (args.out / "table.md").write_text(text + "\n\n" + note + "\n")
    print(text)
    if args.write_docs:
        from experiments._docs import replace_block

        target = ROOT / "docs" / "figures" / "beyond_gd_distance.png"
        shutil.copyfile(path, target)
        figs = f"![distance](figures/{target.name})"
        replace_block(
            DOC, START, END, "\n\n".join([text, note, figs]) + "\n", append=True
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
