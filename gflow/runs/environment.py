"""What a run records about where it ran (config.json's ``environment``)."""

from __future__ import annotations

import dataclasses
import datetime
import platform
from importlib import metadata

import jax

#: The packages whose versions a run records.
PACKAGES = ("gflow", "jax", "jaxlib", "diffrax", "equinox", "optax", "numpy")


@dataclasses.dataclass(frozen=True)
class Environment:
    """Where a run ran: package versions (None where not installed), Python, the
    platform, JAX's devices, whether float64 was on, and when (UTC, ISO 8601).
    config.json holds it as a JSON object of these fields."""

    versions: dict[str, str | None]
    python: str
    platform: str
    devices: list[str]
    x64: bool
    created: str


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def environment() -> Environment:
    """This process's ``Environment``, for a run's config.json."""
    return Environment(
        versions={package: _version(package) for package in PACKAGES},
        python=platform.python_version(),
        platform=platform.platform(),
        devices=[str(d) for d in jax.devices()],
        x64=bool(jax.config.jax_enable_x64),
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(),
    )
