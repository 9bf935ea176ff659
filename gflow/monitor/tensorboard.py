"""An optional TensorBoard scalar writer (the ``tensorboard`` extra).

It writes TensorBoard's event files with the ``tensorboard`` package alone (no
TensorFlow, no PyTorch): every scalar signal under its CSV column name, and each
stage event as the scalar ``event/<stage>/L<layer>H<head>`` = its cycle.
"""

from __future__ import annotations

import os
import time


class ScalarWriter:
    """Scalars into TensorBoard event files under ``logdir``."""

    def __init__(self, logdir: str | os.PathLike):
        try:
            from tensorboard.compat.proto.event_pb2 import Event
            from tensorboard.compat.proto.summary_pb2 import Summary
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError as e:
            raise ImportError(
                "Monitor(tensorboard=True) needs the tensorboard package: "
                "pip install 'gflow[tensorboard]'"
            ) from e
        self._Event, self._Summary = Event, Summary
        self._writer = EventFileWriter(str(logdir))

    def scalars(self, step: int, values: dict[str, float]) -> None:
        summary = self._Summary(
            value=[
                self._Summary.Value(tag=tag, simple_value=float(v))
                for tag, v in values.items()
            ]
        )
        self._writer.add_event(
            self._Event(wall_time=time.time(), step=int(step), summary=summary)
        )

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
