"""Stage times of a text (or training) run over seeds: mean ± sd per stage
(stages_summary.json, a ``SeedSummary``) and the printed table."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from gflow.runs.text.config import TextConfig


@dataclasses.dataclass(frozen=True)
class Spread:
    """One stage time over the seeds: its mean and sample sd (ddof 1) over the
    seeds that found the stage (None where fewer than one or two did), and the
    time per seed (None where not found)."""

    mean: float | None
    sd: float | None
    per_seed: tuple[float | None, ...]

    @classmethod
    def of(cls, times: list[float | None]) -> Spread:
        x = np.asarray([t for t in times if t is not None], float)
        mean = float(x.mean()) if x.size else None
        return cls(mean, float(x.std(ddof=1)) if x.size > 1 else None, tuple(times))


@dataclasses.dataclass(frozen=True)
class StageOverSeeds:
    """A stage (name, cycle, layer, head) of one run over the seeds: how many
    seeds found it, and its start and end times."""

    stage: str
    cycle: int
    layer: int
    head: int
    found: int
    t_start: Spread
    t_end: Spread


@dataclasses.dataclass(frozen=True)
class RunOverSeeds:
    """One run's stages over the seeds, in order of their first start, and the
    seeds without stages (seed -> why)."""

    stages: tuple[StageOverSeeds, ...]
    unavailable: dict[str, str]


@dataclasses.dataclass(frozen=True)
class SeedSummary:
    """stages_summary.json: every run's stage times over ``seeds``
    (``dataclasses.asdict`` is the file's content; ``from_json`` reads it)."""

    seeds: tuple[int, ...]
    runs: dict[str, RunOverSeeds]

    @classmethod
    def from_json(cls, data: Any) -> SeedSummary:
        """The summary that stages_summary.json holds."""

        def stage(row):
            spreads = {
                e: Spread(**{**row[e], "per_seed": tuple(row[e]["per_seed"])})
                for e in ("t_start", "t_end")
            }
            return StageOverSeeds(**{**row, **spreads})

        runs = {
            name: RunOverSeeds(
                tuple(stage(r) for r in entry["stages"]), dict(entry["unavailable"])
            )
            for name, entry in data["runs"].items()
        }
        return cls(tuple(data["seeds"]), runs)


def _stage_key(stage: dict) -> tuple:
    return (
        stage["stage"],
        int(stage.get("cycle", 1)),
        int(stage.get("layer", -1)),
        int(stage.get("head", -1)),
    )


def stages_summary(cfg: TextConfig, stages: Any) -> SeedSummary:
    """Each run's stage times over the seeds (``summarise_seeds``).

    ``stages``: stages.json's content (run name -> ``_stages`` of that run).
    """
    groups = {
        base: {s: stages.get(cfg.run_names(s)[i], {}) for s in cfg.seed_list}
        for i, base in enumerate(cfg.base_names)
    }
    return summarise_seeds(groups, list(cfg.seed_list))


def summarise_seeds(groups: dict[str, dict[int, Any]], seeds: list[int]) -> SeedSummary:
    """Each group's stage times over the seeds: for every stage (name, cycle, layer,
    head) found in some seed, how many seeds found it, its t_start and t_end per
    seed (None where not found) and their mean ± sd over the seeds that found it.

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
            times = {
                end: Spread.of(
                    [by_seed[s][end] if s in by_seed else None for s in seeds]
                )
                for end in ("t_start", "t_end")
            }
            rows.append(StageOverSeeds(*key, len(by_seed), **times))
        unavailable = {
            str(seed): entry.get("why", "no stages")
            for seed, entry in per_seed.items()
            if not entry.get("available")
        }
        out[base] = RunOverSeeds(tuple(rows), unavailable)
    return SeedSummary(tuple(seeds), out)


def _first_start(by_seed: dict) -> float:
    return min(st["t_start"] for st in by_seed.values())


def stages_table(summary: SeedSummary) -> str:
    """A ``SeedSummary`` as a text table: one line per run and stage."""
    n = len(summary.seeds)
    lines = [f"stage times over {n} seeds (mean ± sd; found: seeds with the stage)"]
    lines.append(
        f"{'run':<10} {'stage':<18} {'cycle':>5} {'found':>6} "
        f"{'t_start':>22} {'t_end':>22}"
    )

    def fmt(x: Spread):
        sd = "–" if x.sd is None else f"{x.sd:.4g}"
        return f"{x.mean:.4g} ± {sd}"

    for run, entry in summary.runs.items():
        for row in entry.stages:
            lines.append(
                f"{run:<10} {row.stage:<18} {row.cycle:>5} "
                f"{row.found:>3}/{n:<2} {fmt(row.t_start):>22} "
                f"{fmt(row.t_end):>22}"
            )
        if not entry.stages:
            lines.append(f"{run:<10} no stage found")
        for seed, why in entry.unavailable.items():
            lines.append(f"{run:<10} seed {seed}: no stages ({why})")
    return "\n".join(lines)
