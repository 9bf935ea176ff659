"""stages.json of a run of members (``gflow text``'s seeds and arms, ``gflow
train``'s members): each run's ``StagesEntry``, and, over seeds, each stage's time
as mean ± sd (stages_summary.json, a ``SeedSummary``) and the printed table."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gflow.analysis.stage import Stage
from gflow.runs.files import write_json


@dataclasses.dataclass(frozen=True)
class StagesEntry:
    """One run's entry in stages.json: the stages found, the rule that found them
    (None: the run's default rule), or, when none could be, why.

    stages.json holds each as ``{"available": true, "stages": [...]}`` (with
    ``"rule"`` where set) or ``{"available": false, "why": ...}``.
    """

    available: bool
    stages: tuple[Stage, ...] = ()
    rule: str | None = None
    why: str | None = None

    @classmethod
    def from_json(cls, data: Any) -> StagesEntry:
        """The entry stages.json holds (a stage written without a cycle is of the
        first)."""
        stages = tuple(
            Stage.from_dict({"cycle": 1, **s}) for s in data.get("stages", ())
        )
        return cls(
            bool(data.get("available")), stages, data.get("rule"), data.get("why")
        )


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


def _stage_key(stage: Stage) -> tuple:
    none = -1  # a whole-model stage: no layer or head
    layer, head = (none if x is None else x for x in (stage.layer, stage.head))
    return stage.stage, stage.cycle, layer, head


def summarise_seeds(
    groups: dict[str, dict[int, StagesEntry]], seeds: Sequence[int]
) -> SeedSummary:
    """Each group's stage times over the seeds: for every stage (name, cycle, layer,
    head) found in some seed, how many seeds found it, its t_start and t_end per
    seed (None where not found) and their mean ± sd over the seeds that found it.

    ``groups``: group name -> seed -> that seed's stages.json entry (a seed
    missing there has no stages).
    """
    out = {}
    missing = StagesEntry(False, why="no stages")
    for base, per_seed in groups.items():
        per_seed = {s: per_seed.get(s, missing) for s in seeds}
        found: dict[tuple, dict[int, Stage]] = {}
        for seed, entry in per_seed.items():
            for st in entry.stages if entry.available else ():
                found.setdefault(_stage_key(st), {})[seed] = st
        rows = []
        for key in sorted(found, key=lambda k: _first_start(found[k])):
            by_seed = found[key]
            times = {
                end: Spread.of(
                    [getattr(by_seed[s], end) if s in by_seed else None for s in seeds]
                )
                for end in ("t_start", "t_end")
            }
            rows.append(StageOverSeeds(*key, len(by_seed), **times))
        unavailable = {
            str(seed): entry.why or "no stages"
            for seed, entry in per_seed.items()
            if not entry.available
        }
        out[base] = RunOverSeeds(tuple(rows), unavailable)
    return SeedSummary(tuple(seeds), out)


def _first_start(by_seed: dict[int, Stage]) -> float:
    return min(st.t_start for st in by_seed.values())


def write_stages(
    out, entries: dict[str, StagesEntry], seeds: dict[str, int]
) -> SeedSummary | None:
    """Write stages.json (each run's entry) and, when the runs have several seeds
    (``seeds``: run name -> its seed, the runs named ``<group>_s<seed>``),
    stages_summary.json: each group's stage times over its seeds, the summary
    returned (else None)."""
    out = Path(out)
    document = {}
    for name, e in entries.items():
        stages = [s.to_dict() for s in e.stages] if e.available else None
        fields = {"available": e.available, "rule": e.rule, "stages": stages}
        fields["why"] = e.why
        document[name] = {k: v for k, v in fields.items() if v is not None}
    write_json(out / "stages.json", document)
    if len(set(seeds.values())) < 2:
        return None
    groups: dict[str, dict[int, StagesEntry]] = {}
    for name, seed in seeds.items():
        groups.setdefault(name.removesuffix(f"_s{seed}"), {})[seed] = entries[name]
    summary = summarise_seeds(groups, sorted(set(seeds.values())))
    write_json(out / "stages_summary.json", dataclasses.asdict(summary))
    return summary


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
