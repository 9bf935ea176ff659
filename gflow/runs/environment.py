"""What a run records about where it ran, and checks every configuration shares."""

from __future__ import annotations

import datetime
import platform
from importlib import metadata

import jax


def check_seed(seed) -> None:
    """ValueError unless ``seed`` is a PRNG seed every run can use: [0, 2**32)."""
    if not 0 <= seed < 2**32:
        raise ValueError(f"seed: must be an integer in [0, 2**32), got {seed}")


def environment() -> dict:
    """Package versions, platform and device, for a run's config.json."""
    versions = {}
    for pkg in ("gflow", "jax", "jaxlib", "diffrax", "equinox", "optax", "numpy"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {
        "versions": versions,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "devices": [str(d) for d in jax.devices()],
        "x64": bool(jax.config.jax_enable_x64),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
    }
