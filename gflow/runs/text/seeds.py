"""Stage times of a text (or training) run over seeds: mean ± sd per stage
(stages_summary.json) and the printed table."""

from __future__ import annotations

import numpy as np

from gflow.runs.text.config import TextConfig


def _stage_key(stage: dict) -> tuple:
    return (
        stage["stage"],
        int(stage.get("cycle", 1)),
        int(stage.get("layer", -1)),
        int(stage.get("head", -1)),
    )


def _mean_sd(values: list[float]) -> dict:
    """mean and sample sd (ddof 1; null for one value) of the found values."""
    x = np.asarray(values, float)
    return {
        "mean": float(x.mean()) if x.size else None,
        "sd": float(x.std(ddof=1)) if x.size > 1 else None,
    }


def stages_summary(cfg: TextConfig, stages: dict) -> dict:
    """Each run's stage times over the seeds (``summarise_seeds``).

    ``stages``: stages.json's content (run name -> ``_stages`` of that run).
    """
    groups = {
        base: {s: stages.get(cfg.run_names(s)[i], {}) for s in cfg.seed_list}
        for i, base in enumerate(cfg.base_names)
    }
    return summarise_seeds(groups, list(cfg.seed_list))


def summarise_seeds(groups: dict[str, dict[int, dict]], seeds: list[int]) -> dict:
    """Each group's stage times over the seeds: for every stage (name, cycle, layer,
    head) found in some seed, how many seeds found it, its t_start and t_end per
    seed (null where not found) and their mean ± sd over the seeds that found it.

    ``groups``: group name -> seed -> that seed's stages.json entry
    (``{"available": bool, "stages": [...]}`` or ``{"why": ...}``).
    """
    out = {}
    for base, per_seed in groups.items():
        per_seed = {s: per_seed.get(s, {}) for s in seeds}
        found: dict[tuple, dict[int, dict]] = {}
        for seed, entry in per_seed.items():
            for st in entry.get("stages", []) if entry.get("available") else []:
                found.setdefault(_stage_key(st), {})[seed] = st
        rows = []
        for key in sorted(found, key=lambda k: _first_start(found[k])):
            by_seed = found[key]
            row = dict(zip(("stage", "cycle", "layer", "head"), key))
            row["found"] = len(by_seed)
            for end in ("t_start", "t_end"):
                times = [by_seed[s][end] if s in by_seed else None for s in seeds]
                row[end] = {
                    **_mean_sd([t for t in times if t is not None]),
                    "per_seed": times,
                }
            rows.append(row)
        unavailable = {
            str(seed): entry.get("why", "no stages")
            for seed, entry in per_seed.items()
            if not entry.get("available")
        }
        out[base] = {"stages": rows, "unavailable": unavailable}
    return {"seeds": list(seeds), "runs": out}


def _first_start(by_seed: dict) -> float:
    return min(st["t_start"] for st in by_seed.values())


def stages_table(summary: dict) -> str:
    """``stages_summary``'s content as a text table: one line per run and stage."""
    n = len(summary["seeds"])
    lines = [f"stage times over {n} seeds (mean ± sd; found: seeds with the stage)"]
    lines.append(
        f"{'run':<10} {'stage':<18} {'cycle':>5} {'found':>6} "
        f"{'t_start':>22} {'t_end':>22}"
    )

    def fmt(x):
        sd = "–" if x["sd"] is None else f"{x['sd']:.4g}"
        return f"{x['mean']:.4g} ± {sd}"

    for run, entry in summary["runs"].items():
        for row in entry["stages"]:
            lines.append(
                f"{run:<10} {row['stage']:<18} {row['cycle']:>5} "
                f"{row['found']:>3}/{n:<2} {fmt(row['t_start']):>22} "
                f"{fmt(row['t_end']):>22}"
            )
        if not entry["stages"]:
            lines.append(f"{run:<10} no stage found")
        for seed, why in entry["unavailable"].items():
            lines.append(f"{run:<10} seed {seed}: no stages ({why})")
    return "\n".join(lines)
