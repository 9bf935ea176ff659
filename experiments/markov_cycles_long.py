"""How many stage cycles does the default Markov flow go through by t = 10 000?

Question (issue 13.4): the default flow (π = (0.75, 0.19, 0.05, 0.01), λ = 0.5, m = 32,
ε = 1e-3, float64) integrated to t1 = 10 000 with the stiff-aware solver
(``StiffSwitch``): how many cycles does ``detect_stages`` find, are they complete,
where are the extrema of the π-weighted attention entropy (down, up, down?), how much
does σ_k(W_E) grow in each cycle, and why do cycle 2's focus and dilution overlap?

Command (from the repository root):

    PYTHONPATH=$PWD python experiments/markov_cycles_long.py [--write-docs] [--replot]

Runtime: about 1-2 minutes on two shared cores (compilation included; the flow
itself takes ~25 s). Writes experiments/results/markov_cycles_long/ (the run: metrics,
parameter snapshots, stages.json, summary.json, table.md); with --write-docs the
figures docs/figures/markov_long_*.png (gflow.plotting.paper) and the block between
``<!-- markov_long:start -->`` and ``<!-- markov_long:end -->`` of
docs/markov_cycle.md. ``--replot`` reads the saved run instead of integrating again.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import gflow.plotting as paper  # noqa: E402
from gflow.analysis import StageDetector, detect_stages  # noqa: E402
from gflow.runs import (  # noqa: E402
    FlowConfig,
    load_trajectory,
    read_json,
    run_flow,
    save_trajectory,
    write_json,
)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "results" / "markov_cycles_long"
DOC = ROOT / "docs" / "markov_cycle.md"
FIGS = ROOT / "docs" / "figures"
START, END = "<!-- markov_long:start -->", "<!-- markov_long:end -->"
CMD = "PYTHONPATH=$PWD python experiments/markov_cycles_long.py --write-docs"


@dataclasses.dataclass(frozen=True)
class Config:
    """The long flow: the defaults of ``gflow flow`` but the horizon, the solver and
    a finer save grid (dt = 5; every 5th point is the default grid of --t1 10000)."""

    t1: float = 10_000.0
    num_saves: int = 2001
    solver: str = "stiff"
    fine_threshold: float = 0.02  # nats: the smaller entropy extrema reported too
    #: seeds of the initial weights: the first is the run described in detail, the
    #: others are flown again for the table over seeds
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)

    def flow(self, seed: int | None = None) -> FlowConfig:
        seed = self.seeds[0] if seed is None else seed
        return FlowConfig(
            t1=self.t1, num_saves=self.num_saves, solver=self.solver, seed=seed
        )


def run(cfg: Config, out: Path = OUT, seed: int | None = None) -> dict:
    """Integrate the flow and save it with its stages; returns wall time and load."""
    load, start = os.getloadavg(), time.perf_counter()
    fc = cfg.flow(seed)
    traj = run_flow(fc, progress=False)
    save_trajectory(out, traj, name="flow")
    stages = detect_stages(traj, pi=fc.chain().pi)
    write_json(out / "stages.json", [s.to_dict() for s in stages])
    info = {
        "load_at_start": list(load),
        "wall_s": time.perf_counter() - start,
        "status": traj.status,
        "steps": int(traj.stats["num_steps"]),
        "rejected": int(traj.stats["num_rejected_steps"]),
        "seed": fc.seed,
    }
    write_json(out / "run.json", info)
    return info


def _at(t, time):
    return int(np.argmin(np.abs(np.asarray(t) - time)))


def measure(traj, stages, pi, cfg: Config) -> dict:
    """Cycle count, stage table, entropy extrema, σ_k per cycle, cycle-2 overlap."""
    t, m = np.asarray(traj.t), traj.metrics
    ent, attn = m["attention_entropy"], m["attention"]
    sv, sv_A = m["sv_W_E"], m["sv_W_A"]
    cycles = sorted({s.cycle for s in stages})
    starts = {c: min(s.t_start for s in stages if s.cycle == c) for c in cycles}
    res: dict = {"stages": [s.to_dict() for s in stages]}
    res["complete"] = {
        c: sorted(s.name for s in stages if s.cycle == c) for c in cycles
    }

    def cycle_of(time):
        return max([c for c in cycles if starts[c] <= time] or [cycles[0]])

    fine = StageDetector(min_move=1e-3, min_amplitude=cfg.fine_threshold)
    res["extrema"] = {
        "significant": [
            (tt, v, kind, cycle_of(tt)) for tt, v, kind in paper.entropy_extrema(t, ent)
        ],
        "fine": [
            (tt, v, kind, cycle_of(tt))
            for tt, v, kind in paper.entropy_extrema(t, ent, detector=fine)
        ],
        "initial": float(ent[0]),
        "final": float(ent[-1]),
    }
    lifts = [s for s in stages if s.name == "asymmetry_lifting"]
    rate = np.gradient(np.log(sv), t, axis=0)
    res["sigma"] = []
    after = next(s.t_start for s in stages if s.name == "focus")
    for s in lifts:
        k = s.cycle + 1  # σ_{k} of W_E grows in the lifting of cycle k - 1
        i0, i1 = _at(t, s.t_start), _at(t, s.t_end)
        ia, after = _at(t, after), s.t_end  # σ_k's minimum: since the last lifting
        seg = rate[i0 : i1 + 1, k - 1]
        res["sigma"].append(
            {
                "cycle": s.cycle,
                "k": k,
                "t_start": s.t_start,
                "t_end": s.t_end,
                "min_before": float(sv[ia : i0 + 1, k - 1].min()),
                "at_start": float(sv[i0, k - 1]),
                "at_end": float(sv[i1, k - 1]),
                "final": float(sv[-1, k - 1]),
                "peak_rate": float(seg.max()),
                "t_peak_rate": float(t[i0 + seg.argmax()]),
                "min_rate": float(seg.min()),
                "t_min_rate": float(t[i0 + seg.argmin()]),
            }
        )
    res["sigma_final"] = [float(x) for x in sv[-1]]
    # cycle 2: the attention rows and σ₂(W_A) at its edges (why focus and dilution
    # overlap); the columns are key tokens, the rows queries
    edges = sorted(
        {float(t[0])}
        | {s.t_end for s in stages if s.cycle == 1 and s.name == "asymmetry_lifting"}
        | {x for s in stages if s.cycle == 2 for x in (s.t_start, s.t_end)}
        | {550.0, 650.0, float(t[-1])}
    )
    res["rows"] = [
        {"t": e, "attention": attn[i].tolist(), "sv2_W_A": float(sv_A[i, 1])}
        for e in edges
        for i in [_at(t, e)]
    ]
    two = [s for s in stages if s.cycle == 2]
    if len(two) >= 2:
        lo, hi = _at(t, two[0].t_start), _at(t, two[0].t_end)
        low = np.arange(len(pi)) != int(np.argmax(pi))
        w = pi[low] / pi[low].sum()
        self_attn = np.einsum("nii->ni", attn)[:, low] @ w
        on_top = attn[:, 0, int(np.argmax(pi))]
        on_one = attn[:, 0, 1]  # query 0 on token 1, the second most frequent
        d1, d2 = np.gradient(self_attn, t), np.gradient(-on_top, t)
        res["overlap"] = {
            "window": [float(t[lo]), float(t[hi])],
            "corr_rates": float(np.corrcoef(d1[lo:hi], d2[lo:hi])[0, 1]),
            "self_attn": [float(self_attn[lo]), float(self_attn[hi])],
            "q0_on_top": [float(on_top[lo]), float(on_top[hi]), float(on_top[-1])],
            "q0_on_token1": [float(on_one[lo]), float(on_one[hi]), float(on_one[-1])],
        }
    return res


def table(res: dict, info: dict) -> str:
    """The markdown block of docs/markov_cycle.md."""
    lines = [
        f"`{CMD}` (StiffSwitch, t1 = 10 000, 2001 saved times, seed "
        f"{info.get('seed', 0)} of the initial weights; {info['steps']} steps, "
        f"{info['rejected']} rejected; "
        + (
            f"{info['wall_s']:.0f} s with compilation"
            if info["load_at_start"][0] <= 1.5
            else "not timed"
        )
        + f"; load average {info['load_at_start'][0]:.2f} at the start).",
        "",
        f"**Cycles found: {max(s['cycle'] for s in res['stages'])}**; stages per "
        "cycle: "
        + "; ".join(f"{c}: {', '.join(n)}" for c, n in res["complete"].items())
        + ".",
        "",
        "| stage | cycle | t_start | t_end |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {s['stage']} | {s['cycle']} | {s['t_start']:g} | {s['t_end']:g}"
        + (" (provisional)" if s.get("provisional") else "")
        + " |"
        for s in res["stages"]
    ]
    ex = res["extrema"]

    def fmt(items):
        return ", ".join(
            f"{'down to' if k == 'min' else 'up to'} {v:.3f} at t = {tt:g} (cycle {c})"
            for tt, v, k, c in items
        )

    lines += [
        "",
        f"π-weighted attention entropy: starts at {ex['initial']:.3f} nats, ends at "
        f"{ex['final']:.3f}. Significant extrema (the detector's zigzag, threshold "
        f"max(20% of the range, 0.1 nats)): {fmt(ex['significant'])}. With a 0.02-nat "
        f"threshold: {fmt(ex['fine'])}.",
        "",
        "| lifting | σ_k(W_E) | min since last | at start | at end | at t1 | peak "
        "d ln σ/dt (t) | lowest rate inside (t) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for g in res["sigma"]:
        lines.append(
            f"| cycle {g['cycle']} [{g['t_start']:g}, {g['t_end']:g}] | σ{g['k']} | "
            f"{g['min_before']:.4f} | {g['at_start']:.4f} | {g['at_end']:.3f} | "
            f"{g['final']:.3f} | {g['peak_rate']:.2e} ({g['t_peak_rate']:g}) | "
            f"{g['min_rate']:.2e} ({g['t_min_rate']:g}) |"
        )
    sf = ", ".join(f"{x:.3f}" for x in res["sigma_final"])
    lines += ["", f"σ(W_E) at t1: {sf}.", ""]
    lines += [
        "| t | σ₂(W_A) | query 0 | query 1 | query 2 | query 3 |",
        "|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        rows = " | ".join(
            "(" + ", ".join(f"{x:.2f}" for x in row) + ")" for row in r["attention"]
        )
        lines.append(f"| {r['t']:g} | {r['sv2_W_A']:.3f} | {rows} |")
    if "overlap" in res:
        o = res["overlap"]
        lines += [
            "",
            f"Cycle-2 focus window t ∈ [{o['window'][0]:g}, {o['window'][1]:g}]: the "
            f"low-frequency queries' self-attention {o['self_attn'][0]:.2f} → "
            f"{o['self_attn'][1]:.2f} while query 0's attention on token 0 falls "
            f"{o['q0_on_top'][0]:.2f} → {o['q0_on_top'][1]:.2f} (→ "
            f"{o['q0_on_top'][2]:.2f} at t1) and its attention on token 1 rises "
            f"{o['q0_on_token1'][0]:.2f} → {o['q0_on_token1'][1]:.2f} (→ "
            f"{o['q0_on_token1'][2]:.2f} at t1); correlation of the two rates "
            f"(self-attention up, query 0 on token 0 down): {o['corr_rates']:.2f}.",
        ]
    return "\n".join(lines)


def seed_summary(traj, stages) -> dict:
    """What the table over seeds compares: each stage's cycle and start, and the
    significant extrema of the π-weighted attention entropy."""
    t, ent = np.asarray(traj.t), traj.metrics["attention_entropy"]
    return {
        "cycles": max(s.cycle for s in stages),
        "stages": [
            {
                "stage": s.name,
                "cycle": s.cycle,
                "t_start": s.t_start,
                "provisional": bool(s.provisional),
            }
            for s in stages
        ],
        "extrema": [
            {"t": float(tt), "value": float(v), "kind": kind}
            for tt, v, kind in paper.entropy_extrema(t, ent)
        ],
    }


def run_seeds(cfg: Config, out: Path = OUT, *, rerun: bool = False) -> dict:
    """Every seed after the first, each in out/seed<k> (a seed already flown there is
    read back, not flown again, unless ``rerun``); seed -> its ``seed_summary``."""
    pi = np.asarray(cfg.flow().chain().pi)
    found = {}
    for seed in cfg.seeds[1:]:
        folder = out / f"seed{seed}"
        if rerun or not (folder / "run.json").exists():
            print(f"seed {seed}: flowing to t = {cfg.t1:g}", flush=True)
            run(cfg, folder, seed=seed)
        traj = load_trajectory(folder, name="flow")
        found[seed] = seed_summary(traj, detect_stages(traj, pi=pi))
    return found


def seeds_table(first: int, summaries: dict[int, dict]) -> str:
    """The block over seeds: per seed its cycles, each stage's start and the entropy
    extrema; then each (stage, cycle) with the seeds that show it and the spread of
    its start."""
    lines = [
        f"Over {len(summaries)} seeds of the initial weights "
        f"({', '.join(map(str, summaries))}; seed {first} is the run above), the "
        "same flow, solver and horizon:",
        "",
        "| seed | cycles | stage starts (cycle: stage t) "
        "| entropy extrema (t: value) |",
        "|---|---|---|---|",
    ]
    short = {
        "condensation": "C",
        "focus": "F",
        "dilution": "D",
        "asymmetry_lifting": "A",
    }
    for seed, res in summaries.items():
        starts = " ".join(
            f"{s['cycle']}{short[s['stage']]} {s['t_start']:g}"
            + ("?" if s["provisional"] else "")
            for s in res["stages"]
            if s["stage"] in short  # the paper's stages; named moves apart
        )
        ext = ", ".join(
            f"{'↓' if e['kind'] == 'min' else '↑'} {e['t']:g}: {e['value']:.3f}"
            for e in res["extrema"]
        )
        lines.append(f"| {seed} | {res['cycles']} | {starts} | {ext} |")
    keys = sorted(
        {(s["cycle"], s["stage"]) for r in summaries.values() for s in r["stages"]},
        key=lambda k: (k[0], list(short).index(k[1])),
    )
    lines += [
        "",
        "| cycle | stage | seeds with it | start, mean ± sd | start range |",
        "|---|---|---|---|---|",
    ]
    for cycle, name in keys:
        ts = [
            s["t_start"]
            for r in summaries.values()
            for s in r["stages"]
            if (s["cycle"], s["stage"]) == (cycle, name)
        ]
        lines.append(
            f"| {cycle} | {name} | {len(ts)}/{len(summaries)} | "
            f"{np.mean(ts):.0f} ± {np.std(ts):.0f} | {min(ts):g} - {max(ts):g} |"
        )
    cycles = [r["cycles"] for r in summaries.values()]
    lines += [
        "",
        f"Cycles found by t = 10 000: {', '.join(map(str, cycles))} (seeds in that "
        "order); a start marked ? is provisional (the stage was still open at t1).",
    ]
    return "\n".join(lines)


FIGURES = ("entropy", "attention", "singular_values", "pca", "row_norms")


def figures(traj, stages, pi, folder: Path) -> list[Path]:
    """The paper's figures of the long run as markov_long_<name>.png."""
    p = folder / "markov_long_{}.png"
    title = "default flow to t = 10 000"
    return [
        paper.plot_entropy_cycles(
            traj,
            stages,
            Path(str(p).format("entropy")),
            title=f"attention entropy, {title}",
        ),
        paper.plot_attention_heatmaps(traj, stages, Path(str(p).format("attention"))),
        paper.plot_singular_values(
            traj,
            Path(str(p).format("singular_values")),
            stages=stages,
            title=f"singular values, {title}",
        ),
        paper.plot_embedding_pca(traj, Path(str(p).format("pca")), stages=stages),
        paper.plot_row_norms(
            traj, Path(str(p).format("row_norms")), pi=pi, stages=stages
        ),
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--replot", action="store_true", help="use the saved run")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument(
        "--first-seed-only", action="store_true", help="skip the table over seeds"
    )
    args = ap.parse_args(argv)
    cfg = Config()
    if args.replot:
        info = read_json(args.out / "run.json")
    else:
        info = run(cfg, args.out)
    traj = load_trajectory(args.out, name="flow")
    pi = np.asarray(cfg.flow().chain().pi)
    stages = detect_stages(traj, pi=pi)
    res = measure(traj, stages, pi, cfg)
    write_json(args.out / "summary.json", {"run": info, **res})
    text = table(res, info)
    if not args.first_seed_only:
        summaries = {cfg.seeds[0]: seed_summary(traj, stages)}
        summaries |= run_seeds(cfg, args.out)
        write_json(args.out / "seeds.json", {str(k): v for k, v in summaries.items()})
        text += "\n\n" + seeds_table(cfg.seeds[0], summaries)
    (args.out / "table.md").write_text(text + "\n")
    print(text)
    if args.write_docs:
        from experiments._docs import replace_block

        paths = figures(traj, stages, pi, FIGS)
        figs = [f"![{q.stem}](figures/{q.name})" for q in paths]
        replace_block(DOC, START, END, "\n\n".join([text, *figs]) + "\n", append=True)
    else:
        figures(traj, stages, pi, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
