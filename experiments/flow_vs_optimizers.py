"""Flow versus optimizers: up to which step size do the four stages survive?

Question: on the default Markov model (MODEL.md §3, float64), for GD, heavy-ball
momentum (β = 0.9) and Adam (β₁ = 0.9), up to which η do condensation, focus,
dilution and asymmetry lifting still appear, and how do the stage times shift with η
on the shared clock t = Σ η?

Command:
    PYTHONPATH=$PWD python experiments/flow_vs_optimizers.py [--out DIR] [--only adam]
        [--write-docs]

Runtime: about 5-10 min per seed on 2 busy CPU cores (mostly compilation); 5 seeds
of the initial weights (``Config.seeds``), each saved to results.json as it finishes
and skipped by a rerun. Writes
experiments/results/flow_vs_optimizers/{results.json, stages.md, <optimizer>.png}
(the figures: the first seed), and with --write-docs the table over seeds into
docs/flow_vs_optimizers.md.

Stage times are read by the library's one-layer stage rules
(``gflow.detect_stages``, docs/stage_rules.md: one definition for every page),
cycle 1 only: condensation's end, and the start of the paper's focus (the excess
attention on the most frequent token rising by the margin), of its dilution and of
σ₂(W_E)'s lifting, each only when closed; a provisional stage (one a longer run
could move) is not a stage here, its name is listed under ``provisional``. The
information gate reads ``unigram_gap`` = loss − H(π). Collapse = first t with
attention entropy < 0.05, far below the flow's focus plateau (0.27): every query
attends to one token. The table's last column asks for all four stages closed and
no collapse before t1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import optax  # noqa: E402

from experiments import _docs, _seeds  # noqa: E402
from gflow import (  # noqa: E402
    MarkovObservables,
    PopulationLoss,
    Trajectory,
    detect_stages,
    solve_flow,
)
from gflow.dynamics import run_sweep  # noqa: E402
from gflow.dynamics.references import evaluate_along  # noqa: E402
from gflow.runs import FlowConfig  # noqa: E402

STAGES = ("condensation", "focus", "dilution", "asymmetry")
COLLAPSE_ENTROPY = 0.05
DOC = Path(__file__).resolve().parents[1] / "docs" / "flow_vs_optimizers.md"
START, END = "<!-- optimizer_stages:start -->", "<!-- optimizer_stages:end -->"


@dataclasses.dataclass(frozen=True)
class Config:
    # cycle 1 closes only once σ₃(W_E) has begun to grow (t ≈ 734 on the flow):
    # a shorter run leaves its dilution and lifting provisional
    t1: float = 1000.0
    num_saves: int = 1001
    sgd_lrs: tuple[float, ...] = (0.1, 0.5, 1.0, 2.0, 3.0, 4.0)
    momentum_lrs: tuple[float, ...] = (0.01, 0.05, 0.1, 0.2, 0.3, 0.4)
    adam_lrs: tuple[float, ...] = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3)
    adam_t1: float = 30.0
    beta: float = 0.9
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)  # of the initial weights


#: What the stage times depend on besides the runs (a results file read with
#: other rules is started over).
RULES = "detect_stages cycle 1, closed stages only, each save time once (issue 55)"
_NAMES = {
    "condensation": "condensation",
    "focus": "focus",
    "dilution": "dilution",
    "asymmetry": "asymmetry_lifting",
}


def paper_stages(traj, chain) -> dict:
    """Cycle 1's stages by ``gflow.detect_stages`` (module docstring): per name in
    ``STAGES`` the time (condensation: its end; the others: their start) of the
    closed stage, else None; ``provisional`` (the names found but not closed),
    ``focus_key``, ``collapse`` and ``min_entropy``."""
    t = np.asarray(traj.t, float)
    m = {k: np.asarray(v) for k, v in traj.metrics.items()}
    m["unigram_gap"] = m["loss"] - chain.unigram_loss
    ok = np.all(np.isfinite(m["attention"].reshape(t.size, -1)), axis=1)
    ok &= np.isfinite(m["loss"]) & np.all(np.isfinite(m["sv_W_E"]), axis=1)
    n = t.size if ok.all() else int(np.argmin(ok))  # up to the first bad save
    # a save on the step grid can repeat the time of the one before (a step
    # longer than the save interval; a diverged member's stopped clock): each
    # time is read once
    keep = np.flatnonzero(
        t[:n] > np.concatenate([[-np.inf], np.maximum.accumulate(t[:n])[:-1]])
    )
    found = detect_stages(
        Trajectory(t=t[keep], metrics={k: v[keep] for k, v in m.items()}, final=None),
        pi=np.asarray(chain.pi),
    )
    cycle1 = {}
    for st in found:
        if st.cycle == 1 and st.stage not in cycle1:
            cycle1[st.stage] = st
    out: dict = {}
    for name, stage in _NAMES.items():
        st = cycle1.get(stage)
        closed = st is not None and not st.provisional
        when = (
            None if st is None else (st.t_end if name == "condensation" else st.t_start)
        )
        out[name] = float(when) if closed else None
    out["provisional"] = [
        n for n, s in _NAMES.items() if s in cycle1 and out[n] is None
    ]
    out["focus_key"] = None if "focus" not in cycle1 else cycle1["focus"].key
    entropy = m["attention_entropy"]
    low = np.flatnonzero(np.asarray(entropy) < COLLAPSE_ENTROPY)
    out["collapse"] = float(t[low[0]]) if low.size else None
    out["min_entropy"] = float(np.nanmin(entropy))
    return out


def optimizers(cfg: Config):
    inj = optax.inject_hyperparams
    return {
        "sgd": (inj(optax.sgd)(learning_rate=0.1), cfg.sgd_lrs, cfg.t1),
        "momentum": (
            inj(optax.sgd)(learning_rate=0.1, momentum=cfg.beta),
            cfg.momentum_lrs,
            cfg.t1,
        ),
        "adam": (
            inj(optax.adam)(learning_rate=0.1, b1=cfg.beta),
            cfg.adam_lrs,
            cfg.adam_t1,
        ),
    }


def keeps_stages(stages: dict) -> bool:
    """All four stages present and closed, and no attention collapse."""
    return all(stages[s] is not None for s in STAGES) and stages["collapse"] is None


def run(cfg: Config, *, seed: int = 0, only=("sgd", "momentum", "adam")) -> dict:
    """Stage times of the flow and of every optimizer member from the initial
    weights of ``seed`` (pure; no files)."""
    flow_cfg = FlowConfig(seed=seed)
    chain = flow_cfg.chain()
    loss, model, obs = PopulationLoss(chain), flow_cfg.model(), MarkovObservables(chain)
    flow = solve_flow(
        loss,
        model,
        t1=cfg.t1,
        ts=np.linspace(0, cfg.t1, cfg.num_saves),
        observables=obs,
        progress=False,
    )
    out = {
        "flow": {
            "stages": paper_stages(flow, chain),
            "t": flow.t.tolist(),
            "attention_entropy": flow.metrics["attention_entropy"].tolist(),
            "loss": flow.metrics["loss"].tolist(),
        },
        "optimizers": {},
    }
    for name, (opt, lrs, t1) in optimizers(cfg).items():
        if name not in only:
            continue
        sweep = run_sweep(loss, model, opt, lrs, t1=t1, num_saves=cfg.num_saves)
        members = []
        for m, lr in enumerate(lrs):
            traj = evaluate_along(sweep.member(m), loss, obs)
            members.append(
                {
                    "lr": lr,
                    "status": sweep.status(m),
                    "stages": paper_stages(traj, chain),
                    "t": traj.t.tolist(),
                    "attention_entropy": traj.metrics["attention_entropy"].tolist(),
                    "loss": traj.metrics["loss"].tolist(),
                }
            )
        out["optimizers"][name] = {"t1": t1, "members": members}
    return out


def table(results: dict) -> str:
    """The markdown table of stage times."""

    def fmt(x):
        return "—" if x is None else f"{x:.3g}"

    def cells(st):
        return (
            " | ".join(fmt(st[s]) for s in STAGES)
            + f" | {fmt(st['collapse'])} | {st['min_entropy']:.3g}"
            + f" | {'yes' if keeps_stages(st) else 'no'} |"
        )

    rows = [
        "| run | η | status | "
        + " | ".join(STAGES)
        + " | collapse (entropy < 0.05) | min entropy | all four, no collapse by t1 |",
        "|---|---|---|" + "---|" * (len(STAGES) + 3),
        "| flow | 0 | ok | " + cells(results["flow"]["stages"]),
    ]
    for name, res in results["optimizers"].items():
        for r in res["members"]:
            rows.append(
                f"| {name} (t1={res['t1']:g}) | {r['lr']:g} | {r['status']} | "
                + cells(r["stages"])
            )
    return "\n".join(rows) + "\n"


def plot(out_dir: Path) -> None:
    """Loss and attention entropy of every member against the flow (from files)."""
    from gflow.plotting import plt, save_figure

    results = json.loads((out_dir / "first_seed.json").read_text())
    flow = results["flow"]
    for name, res in results["optimizers"].items():
        fig, axes = plt.subplots(2, 1, figsize=(7, 6.5), sharex=True)
        for r in res["members"]:
            axes[0].plot(
                r["t"], r["loss"], lw=1, label=f"η={r['lr']:g} ({r['status']})"
            )
            axes[1].plot(r["t"], r["attention_entropy"], lw=1)
        mask = np.asarray(flow["t"]) <= res["t1"]
        axes[0].plot(
            np.asarray(flow["t"])[mask],
            np.asarray(flow["loss"])[mask],
            "k--",
            label="flow",
        )
        axes[1].plot(
            np.asarray(flow["t"])[mask],
            np.asarray(flow["attention_entropy"])[mask],
            "k--",
        )
        axes[0].set_ylabel("loss")
        axes[1].set_ylabel("π-weighted attention entropy")
        axes[1].set_xlabel("t = Σ η")
        axes[0].legend(fontsize=7)
        axes[0].set_title(f"{name} vs the flow on the shared clock")
        save_figure(fig, out_dir / f"{name}.png")


def seeds_table(by_seed: dict[str, dict]) -> str:
    """Per run (the flow, each optimizer and η): over the seeds, each stage's time
    as median [min, max] with the seeds that show it, the collapses, the median
    minimum entropy, and the seeds that keep all four stages without a collapse."""
    seeds = list(by_seed)
    runs: dict[tuple, list[dict]] = {}
    for res in by_seed.values():
        runs.setdefault(("flow", 0.0, None), []).append(
            {"status": "success", "stages": res["flow"]["stages"]}
        )
        for name, opt in res["optimizers"].items():
            for r in opt["members"]:
                runs.setdefault((name, r["lr"], opt["t1"]), []).append(r)

    def spread(values):
        xs = [x for x in values if x is not None]
        if not xs:
            return "—"
        text = f"{np.median(xs):.3g} [{min(xs):.3g}, {max(xs):.3g}]"
        return text if len(xs) == len(values) else f"{text} ({len(xs)}/{len(values)})"

    header = ["run", "η", "not diverged"] + list(STAGES)
    header += [
        "collapse (entropy < 0.05)",
        "min entropy (median)",
        "all four, no collapse",
    ]
    rows = []
    for (name, lr, t1), rs in runs.items():
        st = [r["stages"] for r in rs]
        rows.append(
            [name if t1 is None else f"{name} (t1={t1:g})", f"{lr:g}"]
            + [f"{sum(r['status'] != 'diverged' for r in rs)}/{len(rs)}"]
            + [spread([x[s] for x in st]) for s in STAGES]
            + [spread([x["collapse"] for x in st])]
            + [f"{np.median([x['min_entropy'] for x in st]):.3g}"]
            + [f"{sum(keeps_stages(x) for x in st)}/{len(st)}"]
        )
    intro = (
        f"Seeds {', '.join(seeds)} of the initial weights (the same seed for the flow "
        "and every optimizer of that row); a stage time is the median [min, max] over "
        "the seeds, with the number of seeds that show it when not all do; a run "
        "diverges when a saved loss exceeds 10 × L(θ₀) or a parameter blows up."
    )
    return intro + "\n\n" + _docs.table(header, rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path("experiments/results/flow_vs_optimizers")
    )
    parser.add_argument("--only", default="sgd,momentum,adam", help="optimizers")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    cfg = Config()
    only = tuple(args.only.split(","))
    saved = _seeds.over_seeds(
        args.out / "results.json",
        {"config": dataclasses.asdict(cfg), "only": list(only), "rules": RULES},
        cfg.seeds,
        lambda seed: run(cfg, seed=seed, only=only),
    )
    first = saved["seeds"][str(cfg.seeds[0])]
    (args.out / "stages.md").write_text(table(first))
    # the figures read the first seed
    (args.out / "first_seed.json").write_text(json.dumps(first))
    text = seeds_table(saved["seeds"])
    text += (
        f"\nGenerated by `PYTHONPATH=$PWD python experiments/flow_vs_optimizers.py "
        f"--write-docs` ({saved['seconds'] / 60:.1f} min of runs; `uptime` at the "
        f"start: `{saved['uptime_at_start']}`).\n"
    )
    plot(args.out)
    if args.write_docs:
        _docs.replace_block(DOC, START, END, text)
    print(text)


if __name__ == "__main__":
    main()
