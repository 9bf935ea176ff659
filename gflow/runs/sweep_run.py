"""A configured learning-rate sweep on the default Markov model (``gflow sweep``).

The one table where optimizer and reference names become objects lives here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np

from gflow.analysis.compare import compare
from gflow.analysis.sharpness import predicted_departure, sharpness_along
from gflow.analysis.stage_observables import StageObservables
from gflow.analysis.stages import detect_stages
from gflow.analysis.sweep_compare import SweepComparison, compare_sweep
from gflow.dynamics.interrupt import call_interruptibly
from gflow.dynamics.references.base import evaluate_along
from gflow.dynamics.references.flow import FlowReference
from gflow.dynamics.sweep import SweepRun, member_mesh, run_sweep
from gflow.problems.losses import PopulationLoss
from gflow.runs.config import (
    ConfigError,
    at_least,
    bad,
    setting,
)
from gflow.runs.distributed import Processes
from gflow.runs.files import read_json, write_json
from gflow.runs.flow_run import AbstractOptimizerConfig, FlowConfig
from gflow.runs.job import AbstractJob, Context
from gflow.runs.names import OPTIMIZERS, REFERENCES
from gflow.runs.resumable_sweep import load_members, run_sweep_resumable
from gflow.runs.run_dir import RunDirectory

log = logging.getLogger("gflow")


@dataclasses.dataclass(frozen=True)
class SweepConfig(AbstractOptimizerConfig):
    """A sweep of one optimizer over step sizes; validates itself."""

    lrs: tuple[float, ...] = setting(
        (0.4, 0.2, 0.1, 0.05), "step sizes, comma-separated"
    )
    reference: str = setting(
        "flow",
        "flow: dθ/dt = -∇L; modified: -∇(L + η/4 |∇L|²) (GD only); central: the "
        "optimizer's central flow at the edge of stability (GD: λ_max held at 2/η; "
        "RMSProp: the preconditioned λ_max; momentum and Adam: a quasi-static "
        "attempt, see docs/flow_vs_optimizers.md)",
        choices=tuple(REFERENCES),
    )
    num_saves: int = setting(101, "saved times per member")
    sharded: bool = setting(
        True, "do not shard members over devices", flag="--no-shard"
    )
    chunk: int = setting(
        4,
        "members per compiled program; each finished chunk is saved, so an "
        "interrupted sweep resumes after it (over N processes, by default at most "
        "the members / N rounded up, so that every process has a chunk)",
    )
    member_analysis: bool = setting(
        False,
        "per member: its own λ_max at every save (against the stability bound c/η) "
        "and its stages, in sweep.json",
        flag="--member-stages",
    )
    flow: FlowConfig = setting(FlowConfig(), nested=("init_scale", "seed"))

    def check(self):
        super().check()
        REFERENCES.check("reference", self.reference)
        if self.reference == "modified" and self.optimizer != "sgd":
            bad("reference", f"{self.reference!r} is a flow of GD; use sgd")
        if not self.lrs:
            bad("lrs", f"need positive, finite step sizes, got {self.lrs}")
        for lr in self.lrs:
            self.check_step("lrs", lr)
        repeated = sorted({lr for lr in self.lrs if self.lrs.count(lr) > 1})
        if repeated:  # the order and Richardson fits need distinct step sizes
            bad(
                "lrs",
                f"step sizes must be distinct, got {', '.join(map(str, repeated))}"
                " more than once; drop the repeats",
            )
        at_least("num_saves", self.num_saves, 2)
        at_least("chunk", self.chunk, 1)

    def fingerprint(self) -> str:
        """A hash of the settings that determine the members (not the comparison)."""
        members = dataclasses.asdict(self)
        for key in ("reference", "threshold", "member_analysis"):
            members.pop(key)
        if self.optimizer != "rmsprop" or self.eps == SweepConfig.eps:
            members.pop("eps")  # only RMSProp reads it (and older runs had none)
        text = json.dumps(members, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_sweep_members(
    cfg: SweepConfig,
    *,
    checkpoint_dir=None,
    progress: bool | None = None,
    processes: Processes | None = None,
    interrupt: Callable[[], bool] | None = None,
) -> SweepRun | None:
    """The members of the sweep that ``cfg`` describes, before any comparison.

    Members are sharded over this process's devices when ``cfg.sharded``. With
    ``processes`` (several processes joined by ``jax.distributed``, each calling this
    with the same ``cfg`` and shared ``checkpoint_dir``), each runs its chunks and
    process 0 gets the whole sweep; the others get None. ``interrupt`` (a
    ``gflow.dynamics.interrupt.SignalWatch``): a signal ends the wait for the
    running chunk at once (``run_sweep_resumable``).
    """
    loss, model = PopulationLoss(cfg.flow.chain()), cfg.flow.model()
    optimizer = optimizer_of(cfg).transform()
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
        return call_interruptibly(
            run_sweep, loss, model, optimizer, cfg.lrs, interrupt=interrupt, **kwargs
        )
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
        interrupt=interrupt,
        **kwargs,
    )


def compare_sweep_members(cfg: SweepConfig, run: SweepRun, *, key) -> SweepComparison:
    """``run`` (the members of ``cfg``'s sweep) against ``cfg``'s reference:
    ``compare_sweep``'s ``SweepComparison`` with ``run`` (the SweepRun),
    ``stability``, ``sharpness`` (t, λ_max along the reference of the smallest η)
    and, per member, ``predicted_departure``.
    """
    chain = cfg.flow.chain()
    loss, model = PopulationLoss(chain), cfg.flow.model()
    stability = optimizer_of(cfg).stability
    reference = reference_of(cfg)
    result = compare_sweep(run, reference, loss, model, threshold=cfg.threshold)
    refs = result["references"]
    if refs:
        ref = refs[min(refs, key=lambda m: run.lrs[m])]
        lam = sharpness_along(loss, ref, key=key)
        result["sharpness"] = {"t": ref.t, "lambda_max": lam}
        for rec in result["members"]:
            rec["predicted_departure"] = predicted_departure(
                ref.t, lam, rec["lr"], stability
            )
    if not isinstance(reference, FlowReference):  # the distances to the flow too
        _add_flow_distances(result, run, loss, model, cfg.threshold)
    if cfg.member_analysis:
        _add_member_analysis(result, run, loss, chain, key, stability)
    result["run"] = run
    result["stability"] = stability
    return result


def optimizer_of(cfg: SweepConfig):
    """The optimizer object of ``cfg`` (its β and ε)."""
    return OPTIMIZERS.build(cfg.optimizer, beta=cfg.beta, eps=cfg.eps)


def reference_of(cfg: SweepConfig):
    """The reference object of ``cfg``, for its optimizer (the central flow is the
    optimizer's own)."""
    return REFERENCES.build(cfg.reference, optimizer=optimizer_of(cfg))


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


def write_sweep_run(run_dir, cfg: SweepConfig, result: SweepComparison) -> Path:
    """Write sweep.json into ``run_dir`` (the driver has written config.json).

    The figures are drawn by ``gflow.plotting.figures.sweep_figures``.
    """
    run_dir = Path(run_dir)
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


def load_sweep(run_dir, settings) -> tuple[dict, SweepRun | None]:
    """A ``gflow sweep`` run directory's sweep.json and saved members
    (``settings``: its config.json's ``"config"``).

    The members are the SweepRun of the saved chunks (losses, times and parameter
    snapshots; ``.member(m)`` gives a Trajectory), or None when none were saved.
    """
    run_dir = Path(run_dir)
    cfg = SweepConfig.from_json(settings)
    checkpoint = run_dir / "checkpoint"
    members = None
    if any(checkpoint.glob("members-*.npz")):
        members = load_members(checkpoint, cfg.flow.model())
    sweep = read_json(run_dir / "sweep.json")
    for rec in sweep.get("members", []):
        if rec.get("status") == "ok":  # written before the status words were unified
            rec["status"] = "success"
    return sweep, members


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """A finished ``gflow sweep``: its configuration, the members against the
    reference (``compare_sweep_members``) and the members' wall time."""

    cfg: SweepConfig
    comparison: SweepComparison


class SweepJob(AbstractJob[SweepConfig]):
    """``gflow sweep``: an optimizer at several step sizes against a reference."""

    command = "sweep"
    config_type = SweepConfig
    help = (
        "run an optimizer at several step sizes as one vmapped program and compare "
        "each with the flow"
    )
    description = (
        "Run an optax optimizer at every step size of --lrs (one compiled, vmapped "
        "program) on the default Markov population loss, compare each member with a "
        "float64 reference on the clock t = kη, fit the convergence order and write "
        "sweep.json and figures."
    )
    splits = True
    saved = "the chunks finished so far are saved"

    def x64(self, cfg: SweepConfig) -> bool:
        return True  # float64 references

    def check_processes(self, cfg, count, what, resumed) -> None:
        chunks = -(-len(cfg.lrs) // cfg.chunk)
        if count > chunks:
            fix = (
                "(a resumed run keeps its chunks)"
                if resumed
                else "or a smaller --chunk"
            )
            raise ConfigError(
                f"{what}: the {len(cfg.lrs)} step sizes make {chunks} chunk(s) of "
                f"--chunk {cfg.chunk}, so {count - chunks} process(es) would have "
                f"none; give at most {chunks} process(es) {fix}"
            )

    def for_processes(self, cfg: SweepConfig, count: int, given) -> SweepConfig:
        if "chunk" in given or count <= 1:
            return cfg
        return dataclasses.replace(cfg, chunk=min(cfg.chunk, -(-len(cfg.lrs) // count)))

    def plan(self, cfg: SweepConfig) -> SweepConfig:
        try:
            check_reference(cfg)
        except ValueError as e:
            raise ConfigError(f"--reference {cfg.reference}: {e}") from None
        return cfg

    def run(self, cfg: SweepConfig, directory: RunDirectory, context: Context):
        start = time.perf_counter()
        members = run_sweep_members(
            cfg,
            checkpoint_dir=directory.checkpoint,
            progress=False if context.quiet else None,
            processes=context.processes,
            interrupt=context.interrupt,
        )
        members_s = time.perf_counter() - start
        if context.processes is not None:  # process 0 goes on alone
            jax.distributed.shutdown()
        if not context.main:
            return None
        log.info(
            "members: %d process(es), %.2f s", members.info["processes"], members_s
        )
        # the references' solves too: nothing of them is saved before they end
        result = call_interruptibly(
            compare_sweep_members,
            cfg,
            members,
            key=jax.random.key(cfg.flow.seed),
            interrupt=context.interrupt,
        )
        result["members_wall_s"] = members_s
        return SweepResult(cfg, result)

    def write(self, result: SweepResult, directory: RunDirectory) -> SweepResult:
        write_sweep_run(directory.path, result.cfg, result.comparison)
        return result

    def summary(self, result: SweepResult) -> str:
        cfg, out = result.cfg, result.comparison
        lines = []
        for r in out["members"]:
            err = "-" if r["error"] is None else f"{r['error']:.4g}"
            dep, rise = r["departure_time"], r.get("first_rise_time")
            lines.append(
                f"  η={r['lr']:<8g} {r['status']:<9} error={err:<10} "
                f"departure={'-' if dep is None else f'{dep:g}':<8} "
                f"first loss rise={'-' if rise is None else f'{rise:g}'}"
            )
            if "flow_final_error" in r:
                flow_err = r["flow_final_error"]
                lines.append(f"    final distance to the gradient flow {flow_err:.4g}")
            if "stages" in r:
                edge = r["edge_time"]
                found = " ".join(f"{s['stage'][0]}{s['cycle']}" for s in r["stages"])
                lines.append(
                    f"    λ_max crosses {r['edge']:.3g} at "
                    f"{'-' if edge is None else f'{edge:g}'}; stages {found or '-'}"
                )
            if "excluded" in r:
                lines.append(f"    left out of the order fit: {r['excluded']}")
        resumed = out["run"].info.get("resumed_chunks", 0)
        count = out["run"].info.get("processes", 1)
        if out["order"] is None:  # its reason's first clause; members say the rest
            order = f"none ({out['order_reason'].split(';')[0]})"
        else:
            fit, total = len(out["order_members"]), len(out["members"])
            order = f"{out['order']:.3f}" + (
                f" over {fit} of {total} members" if fit < total else ""
            )
        lines.append(
            f"sweep {cfg.optimizer} vs {cfg.reference}: order {order}"
            + (f", {resumed} chunk(s) resumed" if resumed else "")
            + (f", {count} processes" if count > 1 else "")
        )
        return "\n".join(lines)
