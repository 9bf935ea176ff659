"""The default Markov population flow as a configured, saved run (``gflow flow``)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import diffrax
import jax
import numpy as np

from gflow.analysis.stage_observables import StageObservables
from gflow.analysis.stages import Stage, detect_stages
from gflow.dynamics.flow import solve_flow
from gflow.dynamics.solvers import EXPRB32, RKC2, ROCK4, AutoSwitch, StiffSwitch
from gflow.dynamics.trajectory import Trajectory
from gflow.problems.losses import PopulationLoss
from gflow.problems.markov import MarkovChain
from gflow.problems.model import AttentionModel
from gflow.runs.environment import check_seed, environment
from gflow.runs.files import write_json
from gflow.runs.resumable_flow import solve_flow_resumable
from gflow.runs.trajectory_files import save_trajectory

#: The solvers a configuration can name; strings become objects here only.
SOLVERS = {
    "auto": AutoSwitch,
    "euler": diffrax.Euler,
    "heun": diffrax.Heun,
    "bosh3": diffrax.Bosh3,
    "tsit5": diffrax.Tsit5,
    "dopri5": diffrax.Dopri5,
    "dopri8": diffrax.Dopri8,
    "kvaerno5": diffrax.Kvaerno5,
    "rkc2": RKC2,
    "rock4": ROCK4,
    "exprb32": EXPRB32,
    "stiff": StiffSwitch,
}


@dataclasses.dataclass(frozen=True)
class FlowConfig:
    """Everything that defines a Markov population flow; validates itself."""

    pi: tuple[float, ...] = (0.75, 0.19, 0.05, 0.01)
    lam: float = 0.5
    d_model: int = 32
    init_scale: float = 1e-3
    tau: float = 1.0
    factorised: bool = True
    residual: bool = False
    seed: int = 0
    t1: float = 400.0
    num_saves: int = 401
    solver: str = "auto"
    rtol: float = 1e-6
    atol: float = 1e-8
    max_steps: int = 1_000_000
    x64: bool = True
    segments: int = 10
    save_params: bool = True

    def __post_init__(self):
        def bad(field, why):
            raise ValueError(f"{field}: {why}")

        for name in ("t1", "init_scale", "tau"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                bad(name, f"must be > 0 and finite, got {value}")
        if not 0 <= self.lam < 1:
            bad("lam", f"must lie in [0, 1), got {self.lam}")
        if self.d_model < 1:
            bad("d_model", f"must be >= 1, got {self.d_model}")
        if self.num_saves < 2:
            bad("num_saves", f"must be >= 2, got {self.num_saves}")
        if self.solver not in SOLVERS:
            bad(
                "solver",
                f"unknown solver {self.solver!r}; choose one of {', '.join(SOLVERS)}",
            )
        if not (self.rtol > 0 and self.atol >= 0) or not (
            math.isfinite(self.rtol) and math.isfinite(self.atol)
        ):
            bad(
                "rtol/atol",
                f"need finite rtol > 0 and atol >= 0, got {self.rtol}, {self.atol}",
            )
        check_seed(self.seed)
        if self.max_steps < 1:
            bad("max_steps", f"must be >= 1, got {self.max_steps}")
        if self.segments < 1:
            bad("segments", f"must be >= 1, got {self.segments}")
        try:
            MarkovChain.from_lambda(pi=self.pi, lam=self.lam)
        except ValueError as e:
            field = "lam" if str(e).startswith("lam") else "pi"
            bad(field, str(e).removeprefix(field).strip())

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


def run_flow(
    cfg: FlowConfig,
    *,
    progress: bool | None = None,
    checkpoint_dir=None,
    program_cache=None,
) -> Trajectory:
    """Integrate the population flow that ``cfg`` describes.

    With ``checkpoint_dir`` the flow runs in ``cfg.segments`` checkpointed pieces and
    resumes from a checkpoint found there (``gflow.runs.resumable_flow``);
    ``program_cache`` (a ``gflow.runs.program_cache.ProgramCache``) runs the solve
    from a traced program on disk.
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


def write_config(run_dir, cfg: FlowConfig) -> None:
    """Write the run's config.json (resolved configuration, references, versions)."""
    chain = cfg.chain()
    write_json(
        Path(run_dir) / "config.json",
        {
            "command": "flow",
            "config": dataclasses.asdict(cfg),
            "references": {
                "unigram_loss": chain.unigram_loss,
                "bayes_loss": chain.bayes_loss,
            },
            "environment": environment(),
        },
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
