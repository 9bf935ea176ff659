"""What a run records about where it ran (config.json's ``environment``)."""

from __future__ import annotations

import datetime
import platform
from importlib import metadata

import jax


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
