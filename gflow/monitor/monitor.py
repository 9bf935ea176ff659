"""``gflow.Monitor``: the stages of attention detected online in any training loop.

::

    monitor = gflow.Monitor("runs/monitor", every=10)
    for step in range(steps):
        model, opt_state = train_step(model, opt_state, next(batches))
        monitor.observe(step, model, probe)        # probe: int [b, s+1], fixed
    monitor.close()                                # or: with gflow.Monitor(...) as m

Every ``every`` steps the monitor measures the model on the probe batch in one
jitted call (``gflow.monitor.signals``), feeds the signals to the streaming stage
rules (``gflow.analysis.online_stages``), appends a row to ``metrics.csv`` and the
new events to ``events.jsonl`` (``gflow.monitor.logs``), calls the ``on_event``
callbacks, and optionally writes TensorBoard scalars. The model may be any
attending model (``gflow.analysis.attending``): AttentionModel, Transformer,
PositionalAttentionModel or one's own.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Int

from gflow.analysis.attending import check_attending
from gflow.analysis.edge import AbstractEdge, edge_losses, edge_reading
from gflow.analysis.head_observables import HeadObservables
from gflow.analysis.head_stages import detect_head_stages
from gflow.analysis.online_stages import ONLINE_SIGNALS, OnlineStageDetector
from gflow.analysis.stage import Stage
from gflow.analysis.stages import StageDetector, has_frequent_token
from gflow.dynamics.trajectory import Trajectory
from gflow.monitor import logs
from gflow.monitor.edge_watch import EDGE_FILE, EDGE_SIGNALS, EdgeWatch
from gflow.monitor.logs import load_monitor
from gflow.monitor.probe import Probe
from gflow.monitor.reduce import AttentionSignals
from gflow.monitor.signals import probe_loss, probe_signals
from gflow.monitor.tensorboard import ScalarWriter
from gflow.problems.losses import check_token_ids
from gflow.runs.environment import environment
from gflow.runs.files import to_json, write_json

EventCallback = Callable[[Stage], None]


def _positive_int(name, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


class Monitor:
    """Watch a training loop's attention heads and report their stages as they occur.

    Args:
        out: the monitor directory (created; see ``gflow.monitor.logs``).
        every: observe at the steps divisible by ``every``; ``observe`` does nothing
            (and costs nothing) at other steps.
        top: the most frequent token; default: the most frequent query token of the
            first probe batch.
        tracked: the tracked query tokens; default: the ``n_tracked`` least frequent
            query tokens of the first probe batch.
        n_tracked: how many tracked tokens to choose by default.
        detector: the stage thresholds (default ``StageDetector()``).
        window: intervals over which condensation's loss rate is measured.
        n_sv: singular values kept per matrix (asymmetry lifting of cycle c reads
            σ_{c+1}, so ``n_sv`` bounds the cycles seen at n_sv - 1).
        on_event: callables, each called with every event (a ``Stage``) as it is
            detected.
        tensorboard: also write TensorBoard scalars to ``out/tensorboard``.
        resume: what to do with a monitor already in ``out`` (decided at the first
            observation, which fixes this monitor's configuration). None (default):
            continue it when its configuration (``every``, the probe's shape, top
            and tracked tokens, ``n_sv``, ``window``, the thresholds and the
            signals' shapes) is this one's, else start afresh; one line on stderr
            says which. Continuing drops its rows from the first observed step on
            and replays the rest through the stage rules, so a loop restarted from
            a checkpoint continues its monitor where it was, and the same loop run
            again from step 0 replaces it. True: continue it (a directory of other
            signals is refused with a ValueError). False: start afresh.
        verbose: print one line per event to stderr.
    """

    def __init__(
        self,
        out: str | os.PathLike,
        every: int = 10,
        *,
        top: int | None = None,
        tracked: Sequence[int] | None = None,
        n_tracked: int = 3,
        detector: StageDetector | None = None,
        window: int = 2,
        n_sv: int = 4,
        on_event: EventCallback | Iterable[EventCallback] = (),
        tensorboard: bool = False,
        resume: bool | None = None,
        verbose: bool = True,
    ):
        self.out = Path(out)
        self.every = _positive_int("every", every)
        self.n_tracked = _positive_int("n_tracked", n_tracked)
        self.n_sv = _positive_int("n_sv", n_sv)
        self._top, self._tracked = top, tracked
        self.detector = OnlineStageDetector(detector, window=window)
        self.callbacks = [on_event] if callable(on_event) else list(on_event)
        if not all(callable(f) for f in self.callbacks):
            raise TypeError("on_event must be a callable or an iterable of callables")
        self.edge = EdgeWatch()
        self.resume = None if resume is None else bool(resume)
        self.verbose = bool(verbose)
        if self.out.exists() and not self.out.is_dir():
            raise NotADirectoryError(f"out: {self.out} exists and is not a directory")
        self.out.mkdir(parents=True, exist_ok=True)
        self._tb = ScalarWriter(self.out / "tensorboard") if tensorboard else None
        self._obs: HeadObservables | None = None
        self._chosen: Probe | None = None  # the probe of record(), see probe_for
        self._d_vocab: int | None = None  # the logits' width, fixed by _start
        self._probe = None  # the probe object last observed (identity, not value)
        self._shapes: dict[str, list[int]] | None = None
        self._rows: AppendLogs | None = None
        self._last_step: int | None = None  # the signals themselves are on disk
        self._closed = False

    @property
    def events(self) -> list[Stage]:
        """Every event detected so far, in order (``Stage`` objects; the online
        fields: ``gflow.analysis.online_stages``)."""
        return self.detector.events

    def on_event(self, callback: EventCallback) -> EventCallback:
        """Register a callback (usable as a decorator)."""
        if not callable(callback):
            raise TypeError("on_event needs a callable")
        self.callbacks.append(callback)
        return callback

    def observe(
        self,
        step: int,
        model,
        tokens: Int[ArrayLike, "b s1"],
        t: float | None = None,
        *,
        update=None,
        edge: AbstractEdge | None = None,
        opt_state=None,
    ) -> list[Stage]:
        """Observe the model at ``step`` (when ``every`` divides it).

        Args:
            step: the training step (an integer ≥ 0).
            model: an attending model (``gflow.analysis.attending``).
            tokens: the probe batch, int [b, s+1]; keep it fixed (a new batch of the
                same shape does not recompile, but moves the signals). Its ids must
                lie in 0 .. d_vocab−1: a ValueError names the first that does not.
            t: the shared clock t = Σ η of the step (default: the step).
            update: the update the optimizer is about to apply (optax's
                ``updates``, the structure of the model's inexact arrays): with
                ``edge``, the curvature along it from three probe-loss passes is
                recorded (``gflow.analysis.edge``; signals ``edge_*``) and an
                ``edge_of_stability`` event is reported when it reaches the bound
                (``monitor.edge.events``, ``edge.jsonl``). Give it at every
                observation or at none.
            edge: the optimizer's bound and metric (``GDEdge(lr)``,
                ``MomentumEdge(lr, beta)``, ``AdamEdge(lr, b1, ...)``).
            opt_state: the optimizer state (``AdamEdge`` reads its moments).

        Returns:
            The events this observation completed ([] at steps not observed).
        """
        if not self._due(step):
            return []
        if (update is None) != (edge is None):
            raise ValueError("give update= and edge= together (or neither)")
        if self._obs is None:
            self._start(step, model, tokens, edged=update is not None)
        elif tokens is not self._probe:  # the same probe object: nothing to move
            if np.shape(tokens) != tuple(self._obs.tokens.shape):
                raise ValueError(
                    f"tokens changed shape {tuple(self._obs.tokens.shape)} -> "
                    f"{np.shape(tokens)}; keep one probe batch"
                )
            check_token_ids(tokens, self._d_vocab, name="probe")
            self._obs = HeadObservables(tokens, self._obs.top, self._obs.tracked)
        self._probe = tokens
        clock = float(step if t is None else t)
        if self._last_step is not None and step <= self._last_step:
            raise ValueError(f"steps must increase: {step} after {self._last_step}")
        values = jax.device_get(probe_signals(model, self._obs, self.n_sv))
        values = {k: np.asarray(v, float) for k, v in values.items()}
        if update is not None:
            losses = edge_losses(probe_loss, model, update, self._obs.tokens)
            values.update(_edge_values(edge, losses, update, opt_state))
        if set(values) != set(self._shapes):
            raise ValueError(
                "give update= and edge= at every observation or at none "
                f"(this monitor records {sorted(self._shapes)})"
            )
        return self._record(int(step), clock, values)

    def probe_for(self, tokens: Int[ArrayLike, "b s1"], d_vocab: int) -> Probe:
        """The ``Probe`` of ``tokens`` for ``record``: top and tracked chosen at
        the first call (``Probe.default`` with this monitor's ``top``, ``tracked``
        and ``n_tracked``) and kept for later batches, which must keep the shape.
        The adapters of other frameworks call it with the model's vocabulary."""
        tokens = np.asarray(tokens)
        chosen = self._chosen
        if chosen is None:
            chosen = Probe.default(
                tokens,
                d_vocab,
                n_tracked=self.n_tracked,
                top=self._top,
                tracked=self._tracked,
            )
        elif tokens.shape != chosen.tokens.shape:
            raise ValueError(
                f"tokens changed shape {chosen.tokens.shape} -> {tokens.shape}; "
                "keep one probe batch"
            )
        elif not np.array_equal(tokens, chosen.tokens):
            chosen = Probe.default(
                tokens, d_vocab, top=chosen.top, tracked=chosen.tracked
            )
        self._chosen = chosen
        return chosen

    def _due(self, step) -> bool:
        if self._closed:
            raise ValueError("the monitor is closed")
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
            raise TypeError(f"step must be an integer, got {step!r}")
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        return not step % self.every

    def record(
        self,
        step: int,
        signals: AttentionSignals | Mapping[str, ArrayLike],
        t: float | None = None,
        *,
        loss: float | None = None,
        probe: Probe | None = None,
    ) -> list[Stage]:
        """Record signals measured by any framework at ``step`` (when ``every``
        divides it): the framework-free entry.

        Args:
            step: the training step (an integer ≥ 0).
            signals: ``gflow.attention_signals(...)`` of the probe's attention, or
                a mapping of NumPy arrays holding at least ``head_entropy``,
                ``head_on_top``, ``head_tracked_on_top``, ``head_self`` and
                ``loss``, optionally singular values ``sv_*``.
            t: the shared clock of the step (default: the step).
            loss: the probe loss, when ``signals`` does not hold it.
            probe: the ``gflow.monitor.Probe`` the signals were measured on; its
                shape, top and tracked tokens go into the monitor's configuration
                at the first observation (so a resumed loop with another probe
                starts afresh, as ``observe`` does).

        Returns:
            The events this observation completed ([] at steps not observed).
        """
        if not self._due(step):
            return []
        if isinstance(signals, AttentionSignals):
            signals = signals.as_dict()
        values = {k: np.asarray(v, float) for k, v in signals.items()}
        if loss is not None:
            values["loss"] = np.asarray(loss, float)
        missing = [k for k in ONLINE_SIGNALS if k not in values]
        if missing:
            raise ValueError(f"signals lack {missing} (give loss= for the loss)")
        if self._last_step is not None and step <= self._last_step:
            raise ValueError(f"steps must increase: {step} after {self._last_step}")
        if self._shapes is None:
            names = sorted(values, key=lambda k: (k != "loss", k))
            self._shapes = {k: list(values[k].shape) for k in names}
            self._open(step, self._config(None, probe))
        elif {k: list(v.shape) for k, v in values.items()} != self._shapes:
            raise ValueError(
                f"signals changed names or shapes: {self._shapes} -> "
                f"{ {k: list(v.shape) for k, v in values.items()} }"
            )
        return self._record(int(step), float(step if t is None else t), values)

    def _record(
        self, step: int, t: float, values: dict, *, replay=False
    ) -> list[Stage]:
        new = self.detector.update(step, t, values)
        edged = self.edge.update(step, t, values)
        self._last_step = step
        if replay:
            return new
        for e in edged:
            self._edge_log.write([json.dumps(e)])
            if self.verbose:
                print(
                    f"[gflow monitor] step {step} t={t:.4g}: edge of stability "
                    f"(curvature along the update {e['sharpness']:.4g} = "
                    f"{e['ratio']:.3g} x the bound {e['threshold']:.4g})",
                    file=sys.stderr,
                )
        flat = [np.ravel(values[k]) for k in self._shapes]
        row = [str(step), repr(t)] + [repr(float(x)) for v in flat for x in v]
        self._rows.metrics.write([logs.csv_line(row)])
        if new:
            self._rows.events.write([json.dumps(e.to_dict()) for e in new])
        if self._tb is not None:
            scalars = dict(zip(self._columns, np.concatenate(flat)))
            for e in new:
                scalars[f"event/{e.stage}/L{e.layer}H{e.head}"] = e.cycle
            self._tb.scalars(step, scalars)
        for e in new:
            if self.verbose:
                where = "all heads" if e.layer < 0 else f"L{e.layer}H{e.head}"
                print(
                    f"[gflow monitor] step {step} t={t:.4g}: {e.stage} "
                    f"(cycle {e.cycle}, {where}; {e.signal} "
                    f"{e.reference:.4g} -> {e.value:.4g})",
                    file=sys.stderr,
                )
            for callback in self.callbacks:
                callback(e)
        return new

    def _start(self, step: int, model, tokens, *, edged: bool = False) -> None:
        """The first observation: fix top and tracked, the signal shapes, the files."""
        check_attending(model)
        tokens = np.asarray(tokens)
        if tokens.ndim != 2 or tokens.shape[1] < 2:
            raise ValueError(f"tokens must be int [batch, s+1], got {tokens.shape}")
        if not np.issubdtype(tokens.dtype, np.integer):
            raise TypeError(f"tokens must be integers, got {tokens.dtype}")
        d = int(eqx.filter_eval_shape(model, jnp.asarray(tokens[0, :-1])).shape[-1])
        check_token_ids(tokens, d, name="probe")
        self._d_vocab = d
        obs = HeadObservables.default(tokens, d, n_tracked=self.n_tracked)
        top = obs.top if self._top is None else self._top
        tracked = obs.tracked if self._tracked is None else self._tracked
        for tok in np.ravel(np.asarray(tracked)).tolist() + [int(top)]:
            if not 0 <= tok < d:
                raise ValueError(f"top and tracked tokens must lie in [0, {d})")
        self._obs = HeadObservables(tokens, top, tracked)
        # the paper's cycle-1 focus is defined only on data with a frequent token
        dominance = float(self._obs.dominance)
        self.detector.frequent_token = bool(np.isnan(dominance)) or (
            has_frequent_token(
                [dominance, 1.0], self.detector.detector.min_dominance, "Monitor"
            )
        )
        shapes = eqx.filter_eval_shape(probe_signals, model, self._obs, self.n_sv)
        names = sorted(shapes, key=lambda k: (k != "loss", k))
        self._shapes = {k: list(shapes[k].shape) for k in names}
        if edged:
            self._shapes.update({k: [] for k in EDGE_SIGNALS})
        self._open(step, self._config(tokens.shape))

    def _open(self, step: int, config: dict) -> None:
        """Open the directory at the first observation: continue or replace."""
        continues = self._continues(config)
        self._columns = logs.flat_names(self._shapes)  # the CSV's signal columns
        header = ["step", "t", *self._columns]
        if continues:
            kept = self._replay(step, header)
            if self.verbose and self.resume is None:  # True: as asked
                what = (
                    f"continuing it from step {step} ({kept} earlier observations "
                    "kept and replayed)"
                    if kept
                    else f"replacing it: observed again from step {step}"
                )
                self._say(f"holds a monitor of this configuration; {what}")
        else:
            logs.rewrite(self.out / logs.METRICS, [logs.csv_line(header)])
            logs.rewrite(self.out / logs.EVENTS, [])
            logs.rewrite(self.out / EDGE_FILE, [])
        # after the replay: a directory it refuses keeps its own configuration
        write_json(self.out / logs.CONFIG, config)
        self._rows = AppendLogs(self.out)
        self._edge_log = logs.AppendLog(self.out / EDGE_FILE)

    def _continues(self, config: dict) -> bool:
        """Whether the first observation continues the monitor in ``out``
        (``resume``); starting afresh over one says so in one line."""
        if not (self.out / logs.METRICS).exists():
            return bool(self.resume)
        if self.resume is not None:
            if not self.resume:
                self._say("held a monitor; replacing it (resume=False)")
            return self.resume
        differ = _differences(self.out / logs.CONFIG, config)
        if differ:
            self._say(
                f"held a monitor of another configuration ({differ}); replacing it "
                "with this one (give another directory to keep both)"
            )
        return not differ

    def _say(self, what: str) -> None:
        print(f"[gflow monitor] {self.out}: {what}", file=sys.stderr)

    def _replay(self, step: int, header: list[str]) -> int:
        """Resume: keep the rows before ``step``, replay them through the rules;
        returns how many were kept."""
        old, rows = logs.read_rows(self.out)
        if old and old != header:
            raise ValueError(
                f"{self.out}/{logs.METRICS} has other columns than this model's "
                "signals; resume it with the same model, probe and settings"
            )
        rows = rows[rows[:, 0] < step] if len(rows) else rows
        signals = logs.signals_from_rows(self._shapes, header, rows) if old else {}
        for i in range(len(rows)):
            values = {k: v[i] for k, v in signals.items()}
            self._record(int(rows[i, 0]), float(rows[i, 1]), values, replay=True)
        lines = [logs.csv_line(header)]
        lines += [
            logs.csv_line([str(int(r[0]))] + [repr(float(x)) for x in r[1:]])
            for r in rows
        ]
        logs.rewrite(self.out / logs.METRICS, lines)
        logs.rewrite(
            self.out / logs.EVENTS, [json.dumps(e.to_dict()) for e in self.events]
        )
        logs.rewrite(self.out / EDGE_FILE, [json.dumps(e) for e in self.edge.events])
        return len(rows)

    def _config(self, probe_shape, probe: Probe | None = None) -> dict:
        d = self.detector.detector
        if probe is not None:
            described = probe.config()
        else:
            described = {
                "probe_shape": None if probe_shape is None else list(probe_shape),
                "top": None if self._obs is None else int(self._obs.top),
                "tracked": None
                if self._obs is None
                else np.asarray(self._obs.tracked).tolist(),
            }
        return {
            "command": "monitor",
            "every": self.every,
            **described,
            "n_sv": self.n_sv,
            "window": self.detector.window,
            "detector": {
                "edge": d.edge,
                "min_amplitude": d.min_amplitude,
                "growth_start": d.growth_start,
                "min_growth": d.min_growth,
            },
            "shapes": self._shapes,
            "environment": environment(),
        }

    def trajectory(self) -> Trajectory:
        """The signals observed so far as a Trajectory (t, metrics [n, ...]), read
        back from metrics.csv (the monitor keeps no copy in memory, so a long
        training loop does not grow it)."""
        if self._last_step is None:
            raise ValueError("nothing observed yet")
        return load_monitor(self.out)[0]

    def offline_stages(self, detector: StageDetector | None = None) -> list[Stage]:
        """The offline rules (``detect_head_stages``) on the same signals."""
        return detect_head_stages(
            self.trajectory(), detector=detector or self.detector.detector
        )

    def close(self) -> None:
        """Flush and sync the files (observing after it is an error)."""
        if self._closed:
            return
        self._closed = True
        if self._rows is not None:
            self._rows.close()
            self._edge_log.close()
        if self._tb is not None:
            self._tb.close()

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _edge_values(edge, losses, update, opt_state) -> dict[str, np.ndarray]:
    reading = edge_reading(losses, edge.update_norm2(update, opt_state), edge.threshold)
    return {
        "edge_sharpness": np.asarray(reading.sharpness),
        "edge_threshold": np.asarray(reading.threshold),
        "edge_ratio": np.asarray(reading.ratio),
        "edge_critical_step": np.asarray(min(reading.critical_step, 1e300)),
    }


def _differences(path: Path, config: dict) -> str:
    """The settings in which the monitor configuration at ``path`` differs from
    ``config`` (the environment aside), as text; '' when none does."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return f"no readable {logs.CONFIG}"
    if not isinstance(old, dict):
        return f"no readable {logs.CONFIG}"
    new = json.loads(to_json(config))  # the types that JSON gives back
    keys = [k for k in new if k != "environment" and old.get(k) != new[k]]
    return ", ".join(
        f"{k} {old[k]} -> {new[k]}" if k in old and k != "shapes" else k for k in keys
    )


class AppendLogs:
    """The monitor's two append-only files."""

    def __init__(self, out: Path):
        self.metrics = logs.AppendLog(out / logs.METRICS)
        self.events = logs.AppendLog(out / logs.EVENTS)

    def close(self) -> None:
        self.metrics.close()
        self.events.close()
