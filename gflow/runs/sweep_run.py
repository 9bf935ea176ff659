"""A configured learning-rate sweep on the default Markov model (``gflow sweep``).

The one table where optimizer and reference names become objects lives here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from pathlib import Path

import jax
import numpy as np

from gflow.analysis.compare import compare
from gflow.analysis.sharpness import predicted_departure, sharpness_along
from gflow.analysis.stage_observables import StageObservables
from gflow.analysis.stages import detect_stages
from gflow.analysis.sweep_compare import compare_sweep
from gflow.dynamics.optimizers import OPTIMIZERS, optimizer_named
from gflow.dynamics.references.base import evaluate_along
from gflow.dynamics.references.central import CentralFlowReference
from gflow.dynamics.references.central_adaptive import (
    CENTRAL_FLOW_OPTIMIZERS,
    central_flow_of,
)
from gflow.dynamics.references.flow import FlowReference, ModifiedFlowReference
from gflow.dynamics.sweep import SweepRun, member_mesh, run_sweep
from gflow.problems.losses import PopulationLoss
from gflow.runs.distributed import Processes
from gflow.runs.environment import environment
from gflow.runs.files import read_json, write_json
from gflow.runs.flow_run import FlowConfig
from gflow.runs.resumable_sweep import load_members, run_sweep_resumable

REFERENCES = {
    "flow": FlowReference,
    "modified": ModifiedFlowReference,
    "central": CentralFlowReference,
}


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    """A sweep of one optimizer over step sizes; validates itself."""

    optimizer: str = "sgd"
    lrs: tuple[float, ...] = (0.4, 0.2, 0.1, 0.05)
    t1: float = 60.0
    reference: str = "flow"
    num_saves: int = 101
    threshold: float = 0.1
    beta: float = 0.9
    eps: float = 1e-8
    sharded: bool = True
    chunk: int = 4
    member_analysis: bool = False
    flow: FlowConfig = FlowConfig()

    def __post_init__(self):
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(
                f"optimizer: unknown {self.optimizer!r}; choose one of "
                f"{', '.join(OPTIMIZERS)}"
            )
        if self.reference not in REFERENCES:
            raise ValueError(
                f"reference: unknown {self.reference!r}; choose one of "
                f"{', '.join(REFERENCES)}"
            )
        if self.reference == "modified" and self.optimizer != "sgd":
            raise ValueError(f"reference: {self.reference!r} is a flow of GD; use sgd")
        if (
            self.reference == "central"
            and self.optimizer not in CENTRAL_FLOW_OPTIMIZERS
        ):
            raise ValueError(
                f"reference: no central flow for {self.optimizer!r}; use one of "
                f"{', '.join(CENTRAL_FLOW_OPTIMIZERS)}"
            )
        if not self.lrs or not all(lr > 0 and math.isfinite(lr) for lr in self.lrs):
            raise ValueError(f"lrs: need positive, finite step sizes, got {self.lrs}")
        repeated = sorted({lr for lr in self.lrs if self.lrs.count(lr) > 1})
        if repeated:  # the order and Richardson fits need distinct step sizes
            raise ValueError(
                f"lrs: step sizes must be distinct, got {', '.join(map(str, repeated))}"
                " more than once; drop the repeats"
            )
        if not (self.t1 > 0 and math.isfinite(self.t1)):
            raise ValueError(f"t1: must be > 0 and finite, got {self.t1}")
        if max(self.lrs) > self.t1:
            raise ValueError(
                f"lrs: step size {max(self.lrs):g} exceeds t1 = {self.t1:g}; give step "
                "sizes <= t1 (or a longer t1)"
            )
        if self.num_saves < 2:
            raise ValueError(f"num_saves: must be >= 2, got {self.num_saves}")
        if not 0 <= self.beta < 1:
            raise ValueError(f"beta: must lie in [0, 1), got {self.beta}")
        if not (self.eps >= 0 and math.isfinite(self.eps)):
            raise ValueError(f"eps: must be >= 0 and finite, got {self.eps}")
        if not (self.threshold > 0 and math.isfinite(self.threshold)):
            raise ValueError(f"threshold: must be > 0 and finite, got {self.threshold}")
        if self.chunk < 1:
            raise ValueError(f"chunk: must be >= 1, got {self.chunk}")

    @classmethod
    def from_dict(cls, settings: dict) -> SweepConfig:
        """A SweepConfig from JSON-like settings (a run's config.json "config")."""
        settings = dict(settings)
        flow = dict(settings.pop("flow", {}))
        if "pi" in flow:
            flow["pi"] = tuple(flow["pi"])
        if "lrs" in settings:
            settings["lrs"] = tuple(settings["lrs"])
        return cls(**settings, flow=FlowConfig(**flow))

    def fingerprint(self) -> str:
        """A hash of the settings that determine the members (not the comparison)."""
        members = dataclasses.asdict(self)
        for key in ("reference", "threshold", "member_analysis"):
            members.pop(key)
        if self.optimizer != "rmsprop" or self.eps == SweepConfig.eps:
            members.pop("eps")  # only RMSProp reads it (and older runs had none)
        text = json.dumps(members, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_sweep_config(
    cfg: SweepConfig, *, key, checkpoint_dir=None, progress: bool | None = None
) -> dict:
    """Run the sweep that ``cfg`` describes and compare it with its reference.

    With ``checkpoint_dir`` the members run in chunks of ``cfg.chunk``, each saved
    when done, and chunks already there are read back (``gflow.runs.resumable_sweep``).

    Returns ``compare_sweep``'s dict plus ``run`` (the SweepRun), ``stability``,
    ``sharpness`` (t, λ_max along the reference of the smallest η) and, per member,
    ``predicted_departure``.
    """
    run = run_sweep_members(cfg, checkpoint_dir=checkpoint_dir, progress=progress)
    return compare_sweep_members(cfg, run, key=key)


def run_sweep_members(
    cfg: SweepConfig,
    *,
    checkpoint_dir=None,
    progress: bool | None = None,
    processes: Processes | None = None,
) -> SweepRun | None:
    """The members of the sweep that ``cfg`` describes, before any comparison.

    Members are sharded over this process's devices when ``cfg.sharded``. With
    ``processes`` (several processes joined by ``jax.distributed``, each calling this
    with the same ``cfg`` and shared ``checkpoint_dir``), each runs its chunks and
    process 0 gets the whole sweep; the others get None.
    """
    loss, model = PopulationLoss(cfg.flow.chain()), cfg.flow.model()
    optimizer = optimizer_named(cfg.optimizer, cfg.beta, eps=cfg.eps).transform()
    # this process's devices only: a program over every process's devices would
    # synchronise the processes at every step of the adaptive loop
    devices = jax.local_devices()
    mesh = member_mesh(devices) if cfg.sharded and len(devices) > 1 else None
    kwargs = dict(t1=cfg.t1, num_saves=cfg.num_saves, mesh=mesh)
    if checkpoint_dir is None:
        if processes is not None and processes.count > 1:
            raise ValueError(
                "processes: a sweep over several processes needs a checkpoint_dir "
                "that they share"
            )
        return run_sweep(loss, model, optimizer, cfg.lrs, **kwargs)
    return run_sweep_resumable(
        loss,
        model,
        optimizer,
        cfg.lrs,
        checkpoint_dir=checkpoint_dir,
        fingerprint=cfg.fingerprint(),
        chunk=cfg.chunk,
        progress=progress,
        processes=processes,
        **kwargs,
    )


def compare_sweep_members(cfg: SweepConfig, run: SweepRun, *, key) -> dict:
    """``run`` (the members of ``cfg``'s sweep) against ``cfg``'s reference.

    Returns what ``run_sweep_config`` returns.
    """
    chain = cfg.flow.chain()
    loss, model = PopulationLoss(chain), cfg.flow.model()
    stability = optimizer_named(cfg.optimizer, cfg.beta, eps=cfg.eps).stability
    result = compare_sweep(run, reference_of(cfg), loss, model, threshold=cfg.threshold)
    refs = result["references"]
    if refs:
        ref = refs[min(refs, key=lambda m: run.lrs[m])]
        lam = sharpness_along(loss, ref, key=key)
        result["sharpness"] = {"t": ref.t, "lambda_max": lam}
        for rec in result["members"]:
            rec["predicted_departure"] = predicted_departure(
                ref.t, lam, rec["lr"], stability
            )
    if cfg.reference != "flow":
        _add_flow_distances(result, run, loss, model, cfg.threshold)
    if cfg.member_analysis:
        _add_member_analysis(result, run, loss, chain, key, stability)
    result["run"] = run
    result["stability"] = stability
    return result


def reference_of(cfg: SweepConfig):
    """The reference object of ``cfg``: the central flow is the optimizer's own."""
    if cfg.reference == "central":
        return central_flow_of(optimizer_named(cfg.optimizer, cfg.beta, eps=cfg.eps))
    return REFERENCES[cfg.reference]()


def check_reference(cfg: SweepConfig) -> None:
    """ValueError if ``cfg``'s reference cannot describe its largest step from the
    initial model (e.g. RMSProp started past its edge), before any member runs."""
    loss = PopulationLoss(cfg.flow.chain())
    reference_of(cfg).check_start(loss, cfg.flow.model(), max(cfg.lrs))


def _add_member_analysis(result, run, loss, chain, key, stability) -> None:
    """Each member's own sharpness at its saves (against stability/η) and stages.

    λ_max by warm-started Lanczos on the member's snapshots; the stages by
    ``detect_stages`` on the stage observables recomputed from them, so a member
    that leaves the flow shows which stages (and cycles) it keeps.
    """
    observables = StageObservables(chain)
    for m, rec in enumerate(result["members"]):
        member = run.member(m)
        if rec["status"] != "success" or member.params is None:
            continue
        lam = sharpness_along(loss, member, key=key)
        rec["lambda_max"] = lam.tolist()
        rec["edge"] = stability / rec["lr"]
        rec["edge_time"] = predicted_departure(member.t, lam, rec["lr"], stability)
        observed = evaluate_along(member, loss, observables)
        rec["stages"] = [
            s.to_dict() for s in detect_stages(observed, pi=np.asarray(chain.pi))
        ]


def _add_flow_distances(result, run, loss, model, threshold) -> None:
    """Each compared member's distance to the gradient flow beside its reference's.

    Answers "does this member follow its reference better than the flow?", e.g. GD
    past the edge of stability against the central flow.
    """
    compared = sorted(result["comparisons"])
    if not compared:
        return
    flows = FlowReference().solve(
        loss, model, [run.t[m] for m in compared], run.lrs[compared]
    )
    for m, flow in zip(compared, flows):
        cmp = compare(run.member(m), flow, threshold=threshold)
        rec = result["members"][m]
        rec["flow_error"] = cmp["error"]
        rec["flow_final_error"] = cmp["final_error"]


def write_sweep_config(run_dir, cfg: SweepConfig) -> None:
    """Write the run's config.json (resolved configuration, versions)."""
    write_json(
        Path(run_dir) / "config.json",
        {
            "command": "sweep",
            "config": dataclasses.asdict(cfg),
            "environment": environment(),
        },
    )


def write_sweep_run(run_dir, cfg: SweepConfig, result: dict) -> Path:
    """Write sweep.json and (if missing) config.json into ``run_dir``.

    The figures are drawn by ``gflow.plotting.figures.sweep_figures``.
    """
    run_dir = Path(run_dir)
    if not (run_dir / "config.json").exists():
        write_sweep_config(run_dir, cfg)
    sharp = result.get("sharpness")
    write_json(
        run_dir / "sweep.json",
        {
            "optimizer": cfg.optimizer,
            "reference": cfg.reference,
            "order": result["order"],
            "intercept": result["intercept"],
            "richardson": result["richardson"],
            "t1": cfg.t1,
            "threshold": cfg.threshold,
            "stability_constant": result["stability"],
            "processes": result["run"].info.get("processes", 1),
            "members_wall_s": result.get("members_wall_s"),
            "members": result["members"],
            "sharpness": None
            if sharp is None
            else {k: np.asarray(v).tolist() for k, v in sharp.items()},
        },
    )
    return run_dir


def load_sweep(run_dir) -> dict:
    """A ``gflow sweep`` run directory: ``sweep`` (sweep.json) and ``members``.

    ``members`` is the SweepRun of the saved members (losses, times and parameter
    snapshots; ``.member(m)`` gives a Trajectory), or None when none were saved.
    """
    run_dir = Path(run_dir)
    cfg = SweepConfig.from_dict(read_json(run_dir / "config.json")["config"])
    checkpoint = run_dir / "checkpoint"
    members = None
    if any(checkpoint.glob("members-*.npz")):
        members = load_members(checkpoint, cfg.flow.model())
    sweep = read_json(run_dir / "sweep.json")
    for rec in sweep.get("members", []):
        if rec.get("status") == "ok":  # written before the status words were unified
            rec["status"] = "success"
    return {"sweep": sweep, "members": members}
