"""Where a training run's names become objects, once: ``train_strategies(cfg)``
reads the name tables (``gflow.runs.names``) and the run receives what they build.
``gflow text`` builds its own from the same tables (``gflow.runs.text.strategies``):
one model table, one table of deterministic methods, one of optimizers and
schedules for both commands."""

from __future__ import annotations

import dataclasses

from gflow.dynamics.optimizers import AbstractOptimizer
from gflow.runs.names import MODELS, OPTIMIZERS, SCHEDULES, SOLVERS, TRAINING
from gflow.runs.train.config import TrainConfig
from gflow.text.strategies import AbstractFlowMethod, AbstractTextModel


@dataclasses.dataclass(frozen=True)
class TrainStrategies:
    """The objects a training run's names stand for.

    Attributes:
        model: the model trained (``AbstractTextModel``: its compiled draw).
        optimizer: the update rule of ``cfg.optimizer``.
        method: how a run on a fixed loss descends it (the optimizer on the full
            sample, GD or the flow); unused by a run on fresh minibatches.
    """

    model: AbstractTextModel
    optimizer: AbstractOptimizer
    method: AbstractFlowMethod


def train_strategies(cfg: TrainConfig) -> TrainStrategies:
    """The strategies of ``cfg``, built from its names and settings."""
    settings = dataclasses.asdict(cfg)
    optimizer = OPTIMIZERS.build(
        cfg.optimizer, beta=cfg.beta, weight_decay=cfg.weight_decay
    )
    warmup = min(max(1, round(cfg.warmup * cfg.steps)), max(0, cfg.steps - 1))
    schedule = SCHEDULES.build(
        cfg.schedule, cfg.lr, steps=cfg.steps, warmup_steps=warmup
    )
    method = TRAINING.build(
        cfg.method,
        **{
            **settings,
            "solver": SOLVERS.build(cfg.solver),
            "optimizer": optimizer,
            "schedule": schedule,
            "num_saves": cfg.num_saves - 1,  # and the last step: num_saves in all
            "sharpness_checks": 0,
        },
    )
    return TrainStrategies(
        model=MODELS.build(cfg.model, **settings),
        optimizer=optimizer,
        method=method,
    )
