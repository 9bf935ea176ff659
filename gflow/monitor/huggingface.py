"""The stage monitor as a Hugging Face ``transformers.TrainerCallback``.

::

    from gflow.monitor.huggingface import MonitorCallback

    trainer = Trainer(model=model, args=args, train_dataset=data,
                      callbacks=[MonitorCallback("runs/monitor", probe, every=10)])
    trainer.train()                  # or trainer.train(resume_from_checkpoint=True)

The callback observes the model on the fixed ``probe`` batch (int [b, s+1]) at step 0
and at every ``every``-th optimizer step, through a ``TorchMonitor`` (one separate
forward pass under ``torch.no_grad()``, in eager attention for that pass alone).
Only the main process
(``state.is_world_process_zero``) observes and writes.

The clock ``t`` of each row is Σ η over the steps taken, η the learning rate the
scheduler gave each step (``clock="lr"``, gflow's shared clock; ``clock="step"``
records the step). At every checkpoint the callback writes that clock into the
checkpoint's folder (``gflow_monitor.json``); a training resumed from the checkpoint
reads it back, and the monitor keeps its rows before the resumed step and replays
them through the stage rules, so the resumed run's files are those of a run never
interrupted.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch
from jaxtyping import ArrayLike, Int
from transformers import TrainerCallback

from gflow.monitor.pytorch import AbstractAttentionReader, TorchMonitor

__all__ = ["CLOCK_FILE", "MonitorCallback"]

#: The file in each checkpoint folder that holds the monitor's clock.
CLOCK_FILE = "gflow_monitor.json"
_CHECKPOINT = "checkpoint-{}"  # transformers' checkpoint folder names


class MonitorCallback(TrainerCallback):
    """Observe a ``Trainer``'s model every ``every`` steps (module docstring).

    Args:
        out: the monitor directory.
        probe: the probe batch, int [b, s+1] (NumPy or torch).
        every: observe at step 0 and at the steps divisible by ``every``.
        clock: ``"lr"`` (t = Σ η) or ``"step"``.
        reader: the attention reader (default: ``AutoAttention``).
        **kwargs: the other ``Monitor`` options.
    """

    def __init__(
        self,
        out: str | os.PathLike,
        probe: Int[ArrayLike, "b s1"] | torch.Tensor,
        every: int = 10,
        *,
        clock: str = "lr",
        reader: AbstractAttentionReader | None = None,
        **kwargs,
    ):
        if clock not in ("lr", "step"):
            raise ValueError(f'clock must be "lr" or "step", got {clock!r}')
        self.out = Path(out)
        self.probe = (
            probe.detach().cpu().numpy() if isinstance(probe, torch.Tensor) else probe
        )
        self.every = every
        self.clock = clock
        self._options = dict(kwargs, reader=reader)
        self.monitor: TorchMonitor | None = None  # made on the main process only
        self.t = 0.0  # Σ η over the steps taken so far

    def _observe(self, state, model) -> None:
        if not state.is_world_process_zero or model is None:
            return
        if self.monitor is None:
            self.monitor = TorchMonitor(self.out, self.every, **self._options)
        step = int(state.global_step)
        t = self.t if self.clock == "lr" else float(step)
        self.monitor.observe(step, model, self.probe, t=t)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.t = 0.0
        if state.global_step:
            saved = Path(args.output_dir) / _CHECKPOINT.format(state.global_step)
            saved = saved / CLOCK_FILE
            if saved.exists():
                self.t = float(json.loads(saved.read_text())["t"])
            elif self.clock == "lr":
                raise FileNotFoundError(
                    f"resuming at step {state.global_step} but {saved} holds no "
                    "monitor clock; resume from a checkpoint written with this "
                    'callback, or use clock="step"'
                )
        self._observe(state, model)

    def on_step_begin(
        self, args, state, control, lr_scheduler=None, optimizer=None, **kwargs
    ):
        self.t += _learning_rate(lr_scheduler, optimizer, args)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every == 0:
            self._observe(state, model)

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        folder = Path(args.output_dir) / _CHECKPOINT.format(state.global_step)
        if folder.is_dir():
            (folder / CLOCK_FILE).write_text(
                json.dumps({"t": self.t, "step": int(state.global_step)})
            )

    def on_train_end(self, args, state, control, **kwargs):
        if self.monitor is not None:
            self.monitor.close()
            self.monitor = None


def _learning_rate(lr_scheduler, optimizer, args) -> float:
    """The learning rate of the step about to be taken."""
    if lr_scheduler is not None:
        return float(np.ravel(lr_scheduler.get_last_lr())[0])
    if optimizer is not None:
        return float(optimizer.param_groups[0]["lr"])
    return float(args.learning_rate)
