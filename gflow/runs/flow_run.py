"""The default Markov population flow as a configured, saved run (``gflow flow``)."""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import ClassVar

import jax
import numpy as np

from gflow.analysis.stage_observables import StageObservables
from gflow.analysis.stages import Stage, detect_stages
from gflow.dynamics.flow import solve_flow
from gflow.dynamics.references.central_adaptive import CENTRAL_FLOW_OPTIMIZERS
from gflow.dynamics.trajectory import Trajectory
from gflow.problems.losses import PopulationLoss
from gflow.problems.markov import MarkovChain
from gflow.problems.model import AttentionModel
from gflow.runs.config import (
    AbstractConfig,
    at_least,
    bad,
    check_flow_solver,
    check_seed,
    non_negative,
    positive,
    setting,
)
from gflow.runs.files import write_json
from gflow.runs.job import AbstractJob, Context
from gflow.runs.names import OPTIMIZERS, SOLVERS
from gflow.runs.resumable_flow import solve_flow_resumable
from gflow.runs.run_dir import RunDirectory, RunFacts
from gflow.runs.trajectory_files import save_trajectory

#: copies of the parameter vector a solve holds at once, at the least (Tsit5's
#: stages and state, the gradient, AutoSwitch's Lanczos vectors)
WORKING_COPIES = 40


def _physical_memory() -> int | None:
    """This machine's memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


@dataclasses.dataclass(frozen=True)
class FlowConfig(AbstractConfig):
    """Everything that defines a Markov population flow; validates itself."""

    pi: tuple[float, ...] = setting(
        (0.75, 0.19, 0.05, 0.01), "stationary distribution, comma-separated"
    )
    lam: float = setting(0.5, "repeat probability λ")
    d_model: int = setting(32, "width m")
    init_scale: float = setting(1e-3, "std of the initial weights ε")
    tau: float = setting(1.0, "softmax scale τ")
    factorised: bool = setting(
        True, "one m×m W_A instead of W_Q W_Kᵀ (ablation)", flag="--unfactorised"
    )
    residual: bool = setting(False, "residual ablation")
    seed: int = setting(0, "PRNG seed of the initial weights")
    t1: float = setting(1000.0, "final flow time")
    num_saves: int = setting(401, "number of saved times")
    solver: str = setting("auto", f"one of {', '.join(SOLVERS)}")
    rtol: float = setting(1e-6, "relative tolerance")
    atol: float = setting(1e-8, "absolute tolerance")
    max_steps: int = setting(1_000_000, "solver step budget")
    x64: bool = setting(True, "float32 (default float64)", flag="--float32")
    segments: int = setting(10, "checkpointed pieces of [0, t1]")
    save_params: bool = setting(
        True,
        "do not keep parameter snapshots (flow_params.eqx) at the saved times",
        flag="--no-params",
    )

    def check(self):
        for name in ("t1", "init_scale", "tau"):
            positive(name, getattr(self, name))
        if not 0 <= self.lam < 1:
            bad("lam", f"must lie in [0, 1), got {self.lam}")
        at_least("d_model", self.d_model, 1)
        at_least("num_saves", self.num_saves, 2)
        SOLVERS.check("solver", self.solver)
        check_flow_solver(self.solver)
        if not (self.rtol > 0 and self.atol >= 0) or not (
            math.isfinite(self.rtol) and math.isfinite(self.atol)
        ):
            bad(
                "rtol/atol",
                f"need finite rtol > 0 and atol >= 0, got {self.rtol}, {self.atol}",
            )
        check_seed(self.seed)
        at_least("max_steps", self.max_steps, 1)
        at_least("segments", self.segments, 1)
        try:
            MarkovChain.from_lambda(pi=self.pi, lam=self.lam)
        except ValueError as e:
            field = "lam" if str(e).startswith("lam") else "pi"
            bad(field, str(e).removeprefix(field).strip())
        need, have = self.memory_bytes(), _physical_memory()
        if have is not None and need > have:
            bad(
                # the field to lower: the width, when even the working copies
                # alone do not fit; else the snapshots
                "d_model" if self.memory_bytes(snapshots=False) > have else "num_saves",
                f"a flow of {self.parameter_count():,} parameters with "
                f"{self.num_saves} saved snapshots needs about {need / 2**30:.3g} GiB "
                f"({WORKING_COPIES} working copies of the parameters, plus the "
                f"snapshots), more than this machine's {have / 2**30:.3g} GiB; lower "
                "--d-model or --num-saves, or pass --no-params",
            )

    #: copies of the parameters a solve holds at once, at the least
    working_copies: ClassVar[int] = WORKING_COPIES

    def parameter_count(self) -> int:
        """Floats of the model: W_E [d, m], W_Q and W_K [m, m] (or one W_A), W_P
        [m, d]."""
        d, m = len(self.pi), self.d_model
        return 2 * d * m + (2 if self.factorised else 1) * m * m

    def memory_bytes(self, *, snapshots: bool = True) -> int:
        """A lower bound on what the solve holds: ``WORKING_COPIES`` copies of the
        parameters (the solver's stages and state, the gradient, Lanczos vectors),
        and one per saved time when the snapshots are kept (and ``snapshots``)."""
        kept = self.num_saves if self.save_params and snapshots else 0
        copies = WORKING_COPIES + kept
        return (8 if self.x64 else 4) * self.parameter_count() * copies

    def chain(self) -> MarkovChain:
        return MarkovChain.from_lambda(pi=self.pi, lam=self.lam)

    def model(self) -> AttentionModel:
        return AttentionModel.init(
            d_vocab=len(self.pi),
            d_model=self.d_model,
            init_scale=self.init_scale,
            key=jax.random.key(self.seed),
            tau=self.tau,
            factorised=self.factorised,
            residual=self.residual,
        )


@dataclasses.dataclass(frozen=True)
class AbstractOptimizerConfig(AbstractConfig):
    """An optimizer on the default flow's problem, compared with a reference flow:
    the settings that ``gflow compare`` and ``gflow sweep`` share, validated once.
    Each command adds its step size(s), saves and reference (``reference``: its
    own help and choices)."""

    optimizer: str = setting("sgd", "the optimizer", choices=tuple(OPTIMIZERS))
    t1: float = setting(60.0, "final flow time")
    threshold: float = setting(0.1, "distance that defines the departure time")
    beta: float = setting(0.9, "momentum β / Adam β₁ / RMSProp decay")
    eps: float = setting(
        1e-8,
        "RMSProp's ε: the preconditioner is bounded by 1/√ε (from a small "
        "initialisation a larger ε keeps RMSProp below its edge at the start)",
    )
    reference: str = setting("flow")

    def check(self):
        OPTIMIZERS.check("optimizer", self.optimizer)
        for name in ("t1", "threshold"):
            positive(name, getattr(self, name))
        if not 0 <= self.beta < 1:
            bad("beta", f"must lie in [0, 1), got {self.beta}")
        non_negative("eps", self.eps)
        central = CENTRAL_FLOW_OPTIMIZERS
        if self.reference == "central" and self.optimizer not in central:
            bad(
                "reference",
                f"no central flow for {self.optimizer!r}; use one of "
                f"{', '.join(central)}",
            )

    def check_step(self, name: str, lr: float) -> None:
        """ConfigError unless step size ``lr`` (of the setting ``name``) is
        finite, > 0 and at most ``t1``."""
        positive(name, lr)
        if lr > self.t1:
            bad(
                name,
                f"step size {lr:g} exceeds t1 = {self.t1:g}; give step sizes <= t1 "
                "(or a longer t1)",
            )


def run_flow(
    cfg: FlowConfig,
    *,
    progress: bool | None = None,
    checkpoint_dir=None,
    program_cache=None,
    interrupt=None,
) -> Trajectory:
    """Integrate the population flow that ``cfg`` describes.

    With ``checkpoint_dir`` the flow runs in ``cfg.segments`` checkpointed pieces and
    resumes from a checkpoint found there (``gflow.runs.resumable_flow``);
    ``program_cache`` (a ``gflow.runs.program_cache.ProgramCache``) runs the solve
    from a traced program on disk; ``interrupt`` is asked inside the solve
    (``solve_flow``).
    """
    chain = cfg.chain()
    kwargs = dict(
        ts=np.linspace(0.0, cfg.t1, cfg.num_saves),
        solver=SOLVERS[cfg.solver](),
        rtol=cfg.rtol,
        atol=cfg.atol,
        max_steps=cfg.max_steps,
        observables=StageObservables(chain),
        save_params=cfg.save_params,
        progress=progress,
        program_cache=program_cache,
        interrupt=interrupt,
    )
    if checkpoint_dir is None:
        return solve_flow(PopulationLoss(chain), cfg.model(), t1=cfg.t1, **kwargs)
    return solve_flow_resumable(
        PopulationLoss(chain),
        cfg.model(),
        t1=cfg.t1,
        checkpoint_dir=checkpoint_dir,
        segments=cfg.segments,
        **kwargs,
    )


def write_flow_run(run_dir, cfg: FlowConfig, traj: Trajectory) -> list[Stage]:
    """Write the trajectory files and stages.json; return the detected stages.

    stages.json is the JSON list of ``{stage, t_start, t_end, cycle}`` that
    ``detect_stages`` finds (docs/markov_cycle.md). The figures are drawn by
    ``gflow.plotting.figures.flow_figures``.
    """
    run_dir = Path(run_dir)
    save_trajectory(run_dir, traj, name="flow")
    stages = detect_stages(traj, pi=cfg.chain().pi)
    write_json(run_dir / "stages.json", [s.to_dict() for s in stages])
    return stages


@dataclasses.dataclass(frozen=True)
class FlowResult:
    """A finished ``gflow flow``: its configuration, trajectory and stages."""

    cfg: FlowConfig
    trajectory: Trajectory
    stages: tuple[Stage, ...] = ()


class FlowJob(AbstractJob[FlowConfig]):
    """``gflow flow``: the Markov population flow as a resumable run directory."""

    command = "flow"
    config_type = FlowConfig
    help = "integrate the default Markov population flow and write a run directory"
    description = (
        "Integrate dθ/dt = -∇L(θ) for the population loss of a Markov chain "
        "(MODEL.md §3-4); write config.json, metrics, parameters and figures. The "
        "flow is checkpointed after each segment: an interrupted run continues with "
        "--resume RUN_DIR."
    )

    def plan(self, cfg: FlowConfig) -> FlowConfig:
        return cfg

    def facts(self, cfg: FlowConfig) -> RunFacts:
        chain = cfg.chain()
        losses = {"unigram_loss": chain.unigram_loss, "bayes_loss": chain.bayes_loss}
        return RunFacts(references=losses)

    def run(self, cfg: FlowConfig, directory: RunDirectory, context: Context):
        traj = run_flow(
            cfg,
            progress=False if context.quiet else None,
            checkpoint_dir=directory.checkpoint,
            program_cache=context.program_cache,
            interrupt=context.solve_interrupt(),
        )
        return FlowResult(cfg, traj)

    def write(self, result: FlowResult, directory: RunDirectory) -> FlowResult:
        stages = write_flow_run(directory.path, result.cfg, result.trajectory)
        return dataclasses.replace(result, stages=tuple(stages))

    def summary(self, result: FlowResult) -> str:
        traj, cfg = result.trajectory, result.cfg
        s = traj.stats
        resumed = traj.info.get("resumed_from_segment", -1)
        return (
            f"flow {traj.status}: t={s['t_reached']:g}, "
            f"loss={traj.metrics['loss'][-1]:.6f}, "
            f"{s['num_steps']} steps ({s['num_rejected_steps']} rejected)"
            + (
                f", resumed after segment {resumed + 1}/{cfg.segments}"
                if resumed >= 0
                else ""
            )
            # where and why a flow stopped early, and what to try
            + ("" if traj.diagnosis is None else "\n" + traj.diagnosis.message)
        )

    def succeeded(self, result: FlowResult) -> bool:
        return result.trajectory.status == "success"
