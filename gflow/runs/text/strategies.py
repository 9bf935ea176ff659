"""Where a text run's names become objects, once: ``text_strategies(cfg)`` reads
the name tables (``gflow.runs.names``) and the run receives what they build."""

from __future__ import annotations

import dataclasses

from gflow.dynamics.optimizers import AbstractOptimizer
from gflow.dynamics.schedules import AbstractSchedule
from gflow.runs.names import (
    METHODS,
    MODELS,
    OPTIMIZERS,
    SCHEDULES,
    SOLVERS,
    TOKENIZERS,
)
from gflow.runs.text.config import TextConfig
from gflow.text.strategies import (
    AbstractFlowMethod,
    AbstractTextModel,
    AbstractTokenization,
)


@dataclasses.dataclass(frozen=True)
class TextStrategies:
    """The objects a text run's names stand for.

    Attributes:
        model: the model trained (``AbstractTextModel``).
        method: how the deterministic run follows the flow (GD or the flow).
        optimizer: the optimizer arm's update rule (``AbstractOptimizer``).
        schedule: the optimizer arm's step size over its steps.
        tokenization: how the corpus becomes tokens.
    """

    model: AbstractTextModel
    method: AbstractFlowMethod
    optimizer: AbstractOptimizer
    schedule: AbstractSchedule
    tokenization: AbstractTokenization


def text_strategies(cfg: TextConfig) -> TextStrategies:
    """The strategies of ``cfg``, built from its names and settings."""
    settings = dataclasses.asdict(cfg)
    solver = SOLVERS.build(cfg.solver)  # a small object: GD ignores it
    return TextStrategies(
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
