"""The figure backend of gflow: headless matplotlib and an atomic PNG writer.

``gflow.plotting`` is the only package that imports matplotlib.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: runs and CI have no display

import matplotlib.pyplot as plt  # noqa: E402

from gflow.runs.files import atomic_write_bytes  # noqa: E402


def save_figure(fig, path) -> None:
    """Save a figure atomically as PNG and close it."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(Path(path), buf.getvalue())
