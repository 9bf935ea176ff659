"""Where a run's names become objects, once: ``text_strategies(cfg)`` (``gflow
text``) and ``train_strategies(cfg)`` (``gflow train``) read the one set of name
tables (``gflow.runs.names``: one model table, one of deterministic methods, one of
optimizers, schedules and tokenisers) and return the same ``Strategies``; the run
receives them and reads no name."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from gflow.dynamics.optimizers import AbstractOptimizer
from gflow.dynamics.schedules import AbstractSchedule
from gflow.runs.names import (
    METHODS,
    MODELS,
    OPTIMIZERS,
    SCHEDULES,
    SOLVERS,
    TOKENIZERS,
    TRAINING,
)
from gflow.text.strategies import (
    AbstractFlowMethod,
    AbstractTextModel,
    AbstractTokenization,
)

if TYPE_CHECKING:  # the configurations import nothing of this module
    from gflow.runs.text.config import TextConfig
    from gflow.runs.train.config import TrainConfig


@dataclasses.dataclass(frozen=True)
class Strategies:
    """The objects a run's names stand for.

    Attributes:
        model: the model trained (``AbstractTextModel``: its compiled draw).
        method: the deterministic run (GD or the flow; ``gflow train``: how a run
            on a fixed loss descends it, the optimizer on the full sample
            included; unused on fresh minibatches).
        optimizer: the optimizer's update rule (``gflow text``: the optimizer
            arm's).
        schedule: the optimizer's step size over its steps.
        tokenization: how a text corpus becomes tokens.
    """

    model: AbstractTextModel
    method: AbstractFlowMethod
    optimizer: AbstractOptimizer
    schedule: AbstractSchedule
    tokenization: AbstractTokenization


def text_strategies(cfg: TextConfig) -> Strategies:
    """The strategies of a text run, built from its names and settings."""
    settings = dataclasses.asdict(cfg)
    solver = SOLVERS.build(cfg.solver)  # a small object: GD ignores it
    return Strategies(
        model=MODELS.build(cfg.model, **settings),
        method=METHODS.build(cfg.method, **{**settings, "solver": solver}),
        optimizer=OPTIMIZERS.build(cfg.optimizer, weight_decay=cfg.weight_decay),
        schedule=SCHEDULES.build(
            cfg.schedule,
            cfg.opt_lr,
            steps=max(1, cfg.opt_steps),
            warmup_steps=cfg.warmup_steps,
            final=cfg.final_lr,
        ),
        tokenization=TOKENIZERS.build(cfg.tokenizer, **settings),
    )


def train_strategies(cfg: TrainConfig) -> Strategies:
    """The strategies of a training run, built from its names and settings."""
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
    return Strategies(
        model=MODELS.build(cfg.model, **settings),
        method=method,
        optimizer=optimizer,
        schedule=schedule,
        tokenization=TOKENIZERS.build(cfg.tokenizer, **settings),
    )
