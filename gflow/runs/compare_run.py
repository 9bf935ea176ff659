"""One optimizer at one step size against the gradient flow (``gflow compare``)."""

from __future__ import annotations

import dataclasses

import numpy as np

from gflow.analysis.compare import Comparison, compare
from gflow.analysis.observables import MarkovObservables
from gflow.dynamics import optimizer_run
from gflow.dynamics.flow import solve_flow
from gflow.dynamics.references.flow import FlowReference
from gflow.dynamics.trajectory import Trajectory
from gflow.problems.losses import PopulationLoss
from gflow.runs.config import ConfigError, at_least, bad, setting
from gflow.runs.environment import environment
from gflow.runs.files import write_json
from gflow.runs.flow_run import AbstractOptimizerConfig, FlowConfig
from gflow.runs.job import AbstractJob, Context
from gflow.runs.names import OPTIMIZERS, REFERENCES
from gflow.runs.run_dir import RunDirectory
from gflow.runs.trajectory_files import save_trajectory


@dataclasses.dataclass(frozen=True)
class CompareConfig(AbstractOptimizerConfig):
    """One optimizer at one step size on the default flow's problem; validates
    itself."""

    lr: float = setting(0.1, "step size η")
    num_saves: int = setting(201, "saved times")
    reference: str = setting(
        "flow",
        "'central' also compares the run with its optimizer's central flow at the "
        "edge of stability (Cohen et al. 2024: GD and RMSProp; heavy ball and Adam: "
        "a quasi-static attempt, see docs/flow_vs_optimizers.md), beside the "
        "gradient flow",
        choices=("flow", "central"),
    )
    flow: FlowConfig = setting(FlowConfig())

    def check(self):
        super().check()
        self.check_step("lr", self.lr)
        at_least("num_saves", self.num_saves, 2)
        if self.reference not in ("flow", "central"):
            bad("reference", f"must be flow or central, got {self.reference!r}")


@dataclasses.dataclass(frozen=True)
class ComparePlan:
    """The objects of a comparison, built once from its configuration."""

    cfg: CompareConfig
    loss: PopulationLoss
    model: object
    observables: MarkovObservables
    optimizer: object  # an AbstractOptimizer
    reference: object | None  # the central-flow reference, or None
    pi: np.ndarray  # the chain's stationary distribution, float64 [d]


@dataclasses.dataclass(frozen=True)
class CompareResult:
    """The optimizer run, the flow at its times, and their comparison (a dict of
    distances per block, loss gap, attention drift, departure time); the central
    flow and its comparison with ``reference="central"``."""

    plan: ComparePlan
    optimizer: Trajectory
    flow: Trajectory
    comparison: Comparison
    central: Trajectory | None = None
    central_comparison: Comparison | None = None


class CompareJob(AbstractJob[CompareConfig]):
    """``gflow compare``: one optimizer at one step size against the flow."""

    command = "compare"
    config_type = CompareConfig
    help = "compare one optimizer at one step size with the gradient flow"
    description = (
        "Run an optax optimizer on the default Markov population loss, solve the "
        "flow at its times t = Σ η and write config.json, compare.json (distances "
        "per block, loss gap, attention drift, departure time), both trajectories "
        "and compare.png."
    )

    def x64(self, cfg: CompareConfig) -> bool:
        return True  # the float64 flow

    def plan(self, cfg: CompareConfig) -> ComparePlan:
        chain = cfg.flow.chain()
        loss, model = PopulationLoss(chain), cfg.flow.model()
        chosen = OPTIMIZERS.build(cfg.optimizer, beta=cfg.beta, eps=cfg.eps)
        reference = REFERENCES.build(cfg.reference, optimizer=chosen)
        try:
            reference.check_start(loss, model, cfg.lr)
        except ValueError as e:
            raise ConfigError(f"--reference {cfg.reference}: {e}") from None
        if isinstance(reference, FlowReference):
            reference = None  # the flow: compared with in any case
        return ComparePlan(
            cfg, loss, model, MarkovObservables(chain), chosen, reference, chain.pi
        )

    def run(self, plan: ComparePlan, directory: RunDirectory, context: Context):
        cfg = plan.cfg
        steps = max(1, round(cfg.t1 / cfg.lr))
        traj = optimizer_run.run_optimizer(
            plan.loss,
            plan.model,
            plan.optimizer.transform(cfg.lr),
            steps=steps,
            save_every=max(1, steps // (cfg.num_saves - 1)),
            observables=plan.observables,
            save_params=True,
        )
        n = len(traj)
        if traj.status != "success":
            n = max(1, int(np.searchsorted(traj.t, traj.stats["diverged_time"])))
        flow = solve_flow(
            plan.loss,
            plan.model,
            t1=max(float(traj.t[n - 1]), 1e-9),
            ts=traj.t[:n],
            rtol=1e-10,
            atol=1e-12,
            observables=plan.observables,
            save_params=True,
            progress=False,
            interrupt=context.interrupt,
        )
        pi = plan.pi
        comparison = compare(traj, flow, threshold=cfg.threshold, pi=pi)
        if plan.reference is None:
            return CompareResult(plan, traj, flow, comparison)
        (central,) = plan.reference.solve(
            plan.loss, plan.model, [traj.t[:n]], [cfg.lr], plan.observables
        )
        central_comparison = compare(traj, central, threshold=cfg.threshold, pi=pi)
        return CompareResult(plan, traj, flow, comparison, central, central_comparison)

    def write(self, result: CompareResult, directory: RunDirectory) -> CompareResult:
        cfg, cmp, out = result.plan.cfg, result.comparison, directory.path
        save_trajectory(out, result.optimizer, name="optimizer")
        save_trajectory(out, result.flow, name="flow")
        if result.central is not None:
            save_trajectory(out, result.central, name="central")
        central = result.central_comparison
        write_json(
            out / "compare.json",
            {
                "optimizer": cfg.optimizer,
                "lr": cfg.lr,
                "beta": cfg.beta,
                "t1": cfg.t1,
                "status": result.optimizer.status,
                **{k: v for k, v in cmp.items() if k != "distance"},
                "distance": cmp["distance"],
                "central": None
                if central is None
                else {
                    "error": central["error"],
                    "final_error": central["final_error"],
                    "departure_time": central["departure_time"],
                    "lambda_max": result.central.metrics["lambda_max"].tolist(),
                    "predicted_loss": result.central.metrics["predicted_loss"].tolist(),
                },
                "environment": environment(),
            },
        )
        return result

    def summary(self, result: CompareResult) -> str:
        cfg, cmp = result.plan.cfg, result.comparison
        dep = cmp["departure_time"]
        line = (
            f"compare {cfg.optimizer} η={cfg.lr:g}: {result.optimizer.status}, max "
            f"distance {cmp['error']:.4g}, final loss gap {cmp['loss_gap'][-1]:.3g}, "
            f"departure {'-' if dep is None else f'{dep:g}'}"
        )
        central = result.central_comparison
        if central is None:
            return line
        return (
            f"{line}\n  central flow: max distance {central['error']:.4g}, final "
            f"{central['final_error']:.4g} (gradient flow: final "
            f"{cmp['final_error']:.4g})"
        )
