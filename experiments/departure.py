"""Does the sharpness bound predict when an optimizer leaves the flow?

Question: on the default Markov model (MODEL.md §3, float64), the flow's sharpness
λ_max(t) grows (0.46 at t = 0, 2.8 at t = 400). An optimizer with step η is predicted
to turn unstable at the first t with λ_max(t) > c/η (c = 2 for GD, 2 + 2β for heavy
ball, (2 + 2β₁)/(1 − β₁) for Adam). Is it? The measured instability is the first step
at which the optimizer's loss rises, L(θ_k) > L(θ_{k−1}) (``SweepRun.first_rise_step``,
recorded inside the vmapped sweep). For GD this is a certificate: below 2/λ_max on the
step the descent lemma forbids any rise. Each member's own λ_max at its saves is also
measured, to tell "the prediction is wrong" from "the optimizer is elsewhere than the
flow".

Heavy ball with fixed β moves 1/(1 − β) times faster than the flow on the clock
t = Σ η (its small-η limit is the flow sped up), so its prediction reads the flow's
λ_max at flow time t/(1 − β). Adam's bound is on its preconditioned sharpness; with
the raw λ_max it is only indicative.

Command:
    PYTHONPATH=$PWD python experiments/departure.py [--out DIR] [--only sgd,momentum]
    PYTHONPATH=$PWD python experiments/departure.py --seeds 0,1,2,3,4 --only sgd \
        --write-docs

With --seeds the runs are repeated from each seed of the initial weights (each saved
to seeds.json as it finishes and skipped by a rerun) and the table over seeds is
written; with --write-docs into docs/flow_vs_optimizers.md.

Runtime: 5-10 min on 2 busy CPU cores (compilation, Lanczos, one flow solve). Writes
experiments/results/departure/{results.json, departure.md, departure.png}.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from experiments import _docs, _seeds  # noqa: E402
from gflow import PopulationLoss, solve_flow  # noqa: E402
from gflow.analysis import compare, predicted_departure, sharpness_along  # noqa: E402
from gflow.dynamics import SGD, Adam, Momentum, run_sweep  # noqa: E402
from gflow.dynamics.references import FlowReference  # noqa: E402
from gflow.runs import FlowConfig  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Config:
    t1: float = 400.0  # flow horizon; λ_max(400) ≈ 2.8
    num_saves: int = 201
    beta: float = 0.9
    sgd_lrs: tuple[float, ...] = (0.5, 0.8, 1.0, 1.5, 2.0, 3.0)
    momentum_lrs: tuple[float, ...] = (0.5, 1.0, 1.5, 2.0, 3.0)
    adam_lrs: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3)
    adam_t1: float = 40.0
    lanczos_iters: int = 20
    drift_factor: float = 2.0  # candidate (b): d_η > factor · (η/η₀) · d_η₀


def optimizers(cfg: Config):
    """name -> (optimizer, lrs, clock horizon, stability constant c, clock speed)."""
    speed = 1.0 / (1.0 - cfg.beta)  # heavy ball: flow time per unit of Σ η
    return {
        "sgd": (
            SGD().transform(),
            cfg.sgd_lrs,
            cfg.t1,
            SGD().stability,
            1,
        ),
        "momentum": (
            Momentum(beta=cfg.beta).transform(),
            cfg.momentum_lrs,
            cfg.t1 / speed,
            Momentum(beta=cfg.beta).stability,
            speed,
        ),
        "adam": (
            Adam(beta=cfg.beta).transform(),
            cfg.adam_lrs,
            cfg.adam_t1,
            Adam(beta=cfg.beta).stability,
            1,
        ),
    }


def drift_departures(loss, model, sweep, members, factor: float) -> None:
    """Candidate measure (b) for GD, added to ``members`` in place.

    The distance to the flow is O(η) while GD is stable, so d_η(t) ≈ (η/η₀) d_η₀(t)
    for the smallest member η₀ whose loss never rose; ``drift_departure`` is the
    first saved t > 0 with d_η(t) > factor · (η/η₀) · d_η₀(t) (save times of different
    η agree to within η/2).
    """
    stable = [m for m in range(len(sweep.lrs)) if sweep.first_rise_time(m) is None]
    if not stable:
        return
    refs = FlowReference().solve(loss, model, list(sweep.t), sweep.lrs)
    dist = [
        compare(sweep.member(m), refs[m])["distance"]["total"]
        for m in range(len(sweep.lrs))
    ]
    m0 = min(stable, key=lambda m: sweep.lrs[m])
    for m, rec in enumerate(members):
        n = min(len(dist[m]), len(dist[m0]))
        scaled = factor * sweep.lrs[m] / sweep.lrs[m0] * dist[m0][:n]
        over = (dist[m][:n] > scaled) & (sweep.t[m][:n] > 0)
        rec["drift_departure"] = (
            float(sweep.t[m][np.argmax(over)]) if over.any() else None
        )
        rec["distance"] = np.asarray(dist[m]).tolist()
        rec["drift_reference_lr"] = float(sweep.lrs[m0])


def run(cfg: Config, *, key, only=("sgd", "momentum", "adam"), seed: int = 0) -> dict:
    """λ_max along the flow and the members from the initial weights of ``seed``;
    predicted vs measured departures."""
    flow_cfg = FlowConfig(seed=seed)
    loss, model = PopulationLoss(flow_cfg.chain()), flow_cfg.model()
    flow = solve_flow(
        loss,
        model,
        t1=cfg.t1,
        ts=np.linspace(0, cfg.t1, cfg.num_saves),
        rtol=1e-8,
        atol=1e-10,
        save_params=True,
        progress=False,
    )
    lam_flow = sharpness_along(loss, flow, key=key, iters=cfg.lanczos_iters)
    out = {"flow": {"t": flow.t.tolist(), "lambda_max": lam_flow.tolist()}}
    for name, (opt, lrs, t1, c, speed) in optimizers(cfg).items():
        if name not in only:
            continue
        sweep = run_sweep(loss, model, opt, lrs, t1=t1, num_saves=cfg.num_saves)
        members = []
        for m, lr in enumerate(lrs):
            traj = sweep.member(m)
            lam = sharpness_along(loss, traj, key=key, iters=cfg.lanczos_iters)
            rise = sweep.first_rise_time(m)
            at_rise = None
            if rise is not None:
                i = min(int(np.searchsorted(traj.t, rise)), len(lam) - 1)
                at_rise = float(lam[i])
            members.append(
                {
                    "lr": lr,
                    "status": sweep.status(m),
                    "predicted": predicted_departure(flow.t / speed, lam_flow, lr, c),
                    "first_rise": rise,
                    "rises": int(sweep.rises[m]),
                    "steps": int(sweep.steps[m, -1]),
                    "own_prediction": predicted_departure(traj.t, lam, lr, c),
                    "lambda_at_rise": at_rise,
                    "bound": c / lr,
                    "t": traj.t.tolist(),
                    "lambda_max": lam.tolist(),
                    "loss": traj.metrics["loss"].tolist(),
                }
            )
        if name == "sgd":
            drift_departures(loss, model, sweep, members, cfg.drift_factor)
        out[name] = {"t1": t1, "stability": c, "speed": speed, "members": members}
    return out


def table(results: dict) -> str:
    """The markdown table of predicted and measured departures."""

    def fmt(x):
        return "—" if x is None else f"{x:.4g}"

    header = ["optimizer", "η", "c/η", "predicted (flow λ_max > c/η)"]
    header += ["first loss rise", "rises / steps", "own λ_max > c/η"]
    header += ["own λ_max at the rise", "d_η > 2(η/η₀)d_η₀"]
    rows = [
        [f"{name} (t1={results[name]['t1']:g})", f"{r['lr']:g}", f"{r['bound']:.3g}"]
        + [fmt(r["predicted"]), fmt(r["first_rise"]), f"{r['rises']} / {r['steps']}"]
        + [fmt(r[k]) for k in ("own_prediction", "lambda_at_rise")]
        + [fmt(r.get("drift_departure"))]
        for name in ("sgd", "momentum", "adam")
        if name in results
        for r in results[name]["members"]
    ]
    return _docs.table(header, rows) + "\n"


def plot(out_dir: Path) -> None:
    """Per optimizer: λ_max with c/η, and τ predicted vs measured (from files)."""
    from gflow.plotting import plot_departure_records

    results = json.loads((out_dir / "results.json").read_text())
    plot_departure_records(results, out_dir / "departure.png")


DOC = Path(__file__).resolve().parents[1] / "docs" / "flow_vs_optimizers.md"
START, END = "<!-- departure_seeds:start -->", "<!-- departure_seeds:end -->"


def seeds_table(by_seed: dict[str, dict]) -> str:
    """Per optimizer and η, over the seeds: the predicted departure, the first loss
    rise and their ratio, each as median [min, max] with the seeds that have one."""

    def spread(xs, fmt="{:.4g}"):
        have = [x for x in xs if x is not None]
        if not have:
            return "—"
        text = (
            f"{fmt.format(np.median(have))} [{fmt.format(min(have))}, "
            f"{fmt.format(max(have))}]"
        )
        return text if len(have) == len(xs) else f"{text} ({len(have)}/{len(xs)})"

    rows = []
    first = next(iter(by_seed.values()))
    for name in ("sgd", "momentum", "adam"):
        if name not in first:
            continue
        for i, lr in enumerate(r["lr"] for r in first[name]["members"]):
            ms = [res[name]["members"][i] for res in by_seed.values()]
            pred = [m["predicted"] for m in ms]
            rise = [m["first_rise"] for m in ms]
            ratio = [
                None if a is None or b is None else b / a for a, b in zip(pred, rise)
            ]
            rows.append(
                [f"{name} (t1={first[name]['t1']:g})", f"{lr:g}"]
                + [spread(pred), spread(rise), spread(ratio, "{:.3g}")]
                + [spread([m["own_prediction"] for m in ms])]
            )
    header = ["optimizer", "η", "predicted (flow λ_max > c/η)", "first loss rise"]
    header += ["first rise / predicted", "own λ_max > c/η"]
    intro = (
        f"Over seeds {', '.join(by_seed)} of the initial weights (flow and members "
        "from the same draw); median [min, max], with the number of seeds that have "
        "a value where not all do:"
    )
    return intro + "\n\n" + _docs.table(header, rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path("experiments/results/departure")
    )
    parser.add_argument("--only", default="sgd,momentum,adam", help="optimizers")
    parser.add_argument("--seeds", default=None, help="e.g. 0,1,2,3,4")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    cfg = Config()
    only = tuple(args.only.split(","))
    if args.seeds is None:
        results = run(cfg, key=jax.random.key(0), only=only)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(
            json.dumps({"config": dataclasses.asdict(cfg), **results})
        )
        (args.out / "departure.md").write_text(table(results))
        plot(args.out)
        print(table(results))
        return
    saved = _seeds.over_seeds(
        args.out / "seeds.json",
        {"config": dataclasses.asdict(cfg), "only": list(only)},
        (int(x) for x in args.seeds.split(",")),
        lambda seed: run(cfg, key=jax.random.key(0), only=only, seed=seed),
    )
    text = seeds_table(saved["seeds"]) + (
        f"\nGenerated by `PYTHONPATH=$PWD python experiments/departure.py --seeds "
        f"{args.seeds} --only {args.only} --write-docs` ({saved['seconds'] / 60:.1f} "
        f"min of runs; `uptime` at the start: `{saved['uptime_at_start']}`).\n"
    )
    if args.write_docs:
        _docs.replace_block(DOC, START, END, text)
    print(text)


if __name__ == "__main__":
    main()
