"""Does the cycle recur at larger vocabularies? d = 8 and 16 to t = 10⁵.

Question (issue 34 point 1): the default flow's cycle recurs at d = 4 (two cycles by
t = 10⁴, docs/markov_cycle.md). With d = 8 and 16 tokens, a geometric π with the
paper's dynamic range (π_i ∝ r^i, r chosen so that π_min/π_max = 0.01/0.75 as in
the paper's π = (0.75, 0.19, 0.05, 0.01)), λ = 0.5, m = 32, ε = 1e-3, float64,
integrated to t1 = 10⁵ with the stiff-aware solver from 5 seeds of the initial
weights: how many cycles does ``detect_stages`` find, does each have a focus and a
dilution that are distinct (their spans overlap by less than half the shorter
one), and where are the extrema of the π-weighted attention entropy?

Command (from the repository root):

    PYTHONPATH=$PWD python experiments/markov_recurrence.py [--write-docs]

Resumable: each (d, seed) flow is saved under
experiments/results/markov_recurrence/d<d>_seed<s>/ as it finishes and read back
by a rerun. With --write-docs the figure docs/figures/markov_recurrence.png and the
block between ``<!-- markov_recurrence:start -->`` and ``<!-- markov_recurrence:end
-->`` of docs/markov_cycle.md.
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
from experiments import _docs  # noqa: E402
from gflow.analysis import detect_stages  # noqa: E402
from gflow.runs import (  # noqa: E402
    FlowConfig,
    load_trajectory,
    read_json,
    run_flow,
    save_trajectory,
    write_json,
)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "results" / "markov_recurrence"
DOC = ROOT / "docs" / "markov_cycle.md"
FIGURE = ROOT / "docs" / "figures" / "markov_recurrence.png"
START, END = "<!-- markov_recurrence:start -->", "<!-- markov_recurrence:end -->"
CMD = "PYTHONPATH=$PWD python experiments/markov_recurrence.py --write-docs"
SHORT = {"condensation": "C", "focus": "F", "dilution": "D", "asymmetry_lifting": "A"}


@dataclasses.dataclass(frozen=True)
class Config:
    ds: tuple[int, ...] = (8, 16)
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    t1: float = 100_000.0
    num_saves: int = 2001
    solver: str = "stiff"
    spread: float = 0.01 / 0.75  # π_min / π_max, the paper's π

    def pi(self, d: int) -> tuple[float, ...]:
        return geometric_pi(d, self.spread)

    def flow(self, d: int, seed: int) -> FlowConfig:
        return FlowConfig(
            pi=self.pi(d),
            t1=self.t1,
            num_saves=self.num_saves,
            solver=self.solver,
            seed=seed,
        )


def geometric_pi(d: int, spread: float) -> tuple[float, ...]:
    """π_i ∝ r^i, i = 0..d−1, with r^(d−1) = ``spread`` (= π_{d−1}/π_0)."""
    if d < 2 or not 0 < spread < 1:
        raise ValueError(f"need d >= 2 and 0 < spread < 1, got {d}, {spread}")
    w = spread ** (np.arange(d) / (d - 1))
    return tuple((w / w.sum()).tolist())


def fly(cfg: Config, d: int, seed: int, out: Path = OUT) -> Path:
    """The (d, seed) flow, integrated once and saved; its folder."""
    folder = out / f"d{d}_seed{seed}"
    if (folder / "run.json").exists():
        return folder
    load, start = os.getloadavg(), time.perf_counter()
    print(f"d = {d}, seed {seed}: flowing to t = {cfg.t1:g}", flush=True)
    traj = run_flow(cfg.flow(d, seed), progress=False)
    save_trajectory(folder, traj, name="flow")
    write_json(
        folder / "run.json",
        {
            "load_at_start": list(load),
            "wall_s": time.perf_counter() - start,
            "status": traj.status,
            "steps": int(traj.stats["num_steps"]),
            "rejected": int(traj.stats["num_rejected_steps"]),
        },
    )
    print(f"  {traj.status} in {time.perf_counter() - start:.0f} s", flush=True)
    return folder


def overlap(a: dict, b: dict) -> float:
    """The overlap of two spans as a fraction of the shorter one (0: disjoint)."""
    inter = min(a["t_end"], b["t_end"]) - max(a["t_start"], b["t_start"])
    shorter = min(a["t_end"] - a["t_start"], b["t_end"] - b["t_start"])
    return max(0.0, inter) / shorter if shorter > 0 else float(inter >= 0)


def summarise(traj, stages) -> dict:
    """Cycles, each cycle's stages and whether its focus and dilution are distinct,
    and the entropy's significant extrema."""
    rows = [s.to_dict() for s in stages if s.is_paper_stage]  # named moves apart
    cycles = sorted({r["cycle"] for r in rows})
    per_cycle = []
    for c in cycles:
        mine = {r["stage"]: r for r in rows if r["cycle"] == c}
        f, dil = mine.get("focus"), mine.get("dilution")
        share = None if f is None or dil is None else overlap(f, dil)
        per_cycle.append(
            {
                "cycle": c,
                "stages": [r["stage"] for r in rows if r["cycle"] == c],
                "focus_dilution_overlap": share,
                "distinct": share is not None and share < 0.5,
            }
        )
    t, ent = np.asarray(traj.t), traj.metrics["attention_entropy"]
    return {
        "cycles": len(cycles),
        "stages": rows,
        "per_cycle": per_cycle,
        "extrema": [
            {"t": float(tt), "value": float(v), "kind": kind}
            for tt, v, kind in paper.entropy_extrema(t, ent)
        ],
        "entropy": {"initial": float(ent[0]), "final": float(ent[-1])},
    }


def run(cfg: Config, out: Path = OUT) -> dict:
    """Every (d, seed): its summary and run record (flows integrated once)."""
    found = {}
    for d in cfg.ds:
        pi = np.asarray(cfg.pi(d))
        for seed in cfg.seeds:
            folder = fly(cfg, d, seed, out)
            traj = load_trajectory(folder, name="flow")
            found[f"d{d}_seed{seed}"] = {
                "d": d,
                "seed": seed,
                "run": read_json(folder / "run.json"),
                **summarise(traj, detect_stages(traj, pi=pi)),
            }
    write_json(out / "summary.json", found)
    return found


def table(cfg: Config, found: dict) -> str:
    """The block of docs/markov_cycle.md."""
    walls = [r["run"]["wall_s"] for r in found.values()]
    loads = [r["run"]["load_at_start"][0] for r in found.values()]
    lines = [
        f"`{CMD}` ({len(found)} flows: d ∈ {list(cfg.ds)} × seeds "
        f"{list(cfg.seeds)} of the initial weights; StiffSwitch, t1 = {cfg.t1:g}, "
        f"{cfg.num_saves} saved times; {sum(walls) / 60:.1f} min of flows, "
        f"{min(walls):.0f}-{max(walls):.0f} s each, load average "
        f"{min(loads):.2f}-{max(loads):.2f} at their starts). π is geometric with "
        f"π_min/π_max = {cfg.spread:.4f}: "
        + "; ".join(
            f"d = {d}: ({', '.join(f'{x:.3g}' for x in cfg.pi(d))})" for d in cfg.ds
        )
        + ".",
        "",
        "| d | seed | status | cycles | stage starts (cycle, stage, t; ? provisional) "
        "| focus and dilution distinct, per cycle (overlap) | entropy extrema |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in found.values():
        starts = " ".join(
            f"{s['cycle']}{SHORT[s['stage']]} {s['t_start']:.4g}"
            + ("?" if s.get("provisional") else "")
            for s in r["stages"]
        )
        distinct = ", ".join(
            f"{c['cycle']}: "
            + (
                "no focus or dilution"
                if c["focus_dilution_overlap"] is None
                else f"{'yes' if c['distinct'] else 'no'} "
                f"({c['focus_dilution_overlap']:.2f})"
            )
            for c in r["per_cycle"]
        )
        ext = ", ".join(
            f"{'↓' if e['kind'] == 'min' else '↑'} {e['value']:.3f} at {e['t']:.4g}"
            for e in r["extrema"]
        )
        lines.append(
            f"| {r['d']} | {r['seed']} | {r['run']['status']} | {r['cycles']} | "
            f"{starts} | {distinct} | {ext} |"
        )
    lines += ["", "| d | cycles per seed | cycles with distinct focus and dilution |"]
    lines += ["|---|---|---|"]
    for d in cfg.ds:
        rs = [r for r in found.values() if r["d"] == d]
        n = sum(len(r["per_cycle"]) for r in rs)
        k = sum(c["distinct"] for r in rs for c in r["per_cycle"])
        lines.append(
            f"| {d} | {', '.join(str(r['cycles']) for r in rs)} | {k} of {n} |"
        )
    return "\n".join(lines) + "\n"


def figure(cfg: Config, out: Path, found: dict, path: Path) -> Path:
    """The π-weighted attention entropy of every flow against t (log scale), one
    panel per d, with each seed's cycle starts marked."""
    from gflow.plotting import RC, plt, save_figure, settings_line

    with plt.rc_context(RC):
        fig, axes = plt.subplots(
            len(cfg.ds), 1, figsize=(7.0, 2.4 * len(cfg.ds) + 0.6), squeeze=False
        )
        for ax, d in zip(axes[:, 0], cfg.ds):
            for r in (r for r in found.values() if r["d"] == d):
                traj = load_trajectory(out / f"d{d}_seed{r['seed']}", name="flow")
                t = np.asarray(traj.t)
                keep = t > 0
                (line,) = ax.plot(
                    t[keep],
                    traj.metrics["attention_entropy"][keep],
                    lw=1,
                    label=f"seed {r['seed']}: {r['cycles']} cycles",
                )
                for s in r["stages"]:
                    if s["stage"] == "focus":
                        ax.axvline(s["t_start"], color=line.get_color(), lw=0.5, ls=":")
            ax.set_xscale("log")
            ax.set_ylabel("π-weighted attention entropy")
            ax.set_title(f"d = {d}: focus starts dotted", loc="left")
            ax.legend(fontsize=6, ncol=2)
        axes[-1, 0].set_xlabel("t")
        settings_line(
            fig,
            f"{len(cfg.seeds)} seeds · geometric π, π_min/π_max = {cfg.spread:.4f} · "
            f"λ = 0.5 · m = 32 · ε = 1e-3 · StiffSwitch to t1 = {cfg.t1:g}",
        )
        save_figure(fig, path)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    cfg = Config()
    print(f"start: {_docs.uptime()}", flush=True)
    found = run(cfg, args.out)
    text = table(cfg, found)
    (args.out / "table.md").write_text(text)
    if args.write_docs:
        figure(cfg, args.out, found, FIGURE)
        text += "\n![entropy at d = 8 and 16](figures/markov_recurrence.png)\n"
        _docs.replace_block(DOC, START, END, text, append=True)
    else:
        figure(cfg, args.out, found, args.out / "markov_recurrence.png")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
