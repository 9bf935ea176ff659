"""The ``gflow`` command's persistent compilation cache: compile once per machine.

JAX can keep compiled programs on disk and reuse them in later processes; the
``gflow`` command turns that on for itself (never the library: a script that imports
gflow keeps its own JAX settings). The folder is per user and per host, because a
cached CPU program can be refused on another CPU:

    $XDG_CACHE_HOME/gflow/jax-<hostname>    (default ~/.cache/gflow/jax-<hostname>)

``GFLOW_COMPILE_CACHE=0`` (or ``off``) or ``gflow --no-compile-cache CMD`` turns it
off; ``GFLOW_COMPILE_CACHE=DIR`` chooses the folder.

JAX 0.10 does not write a program that contains host callbacks to the cache, and
Equinox's run-time error checks are host callbacks (Diffrax's solves have several:
the checks of the save times). With the cache on, the command therefore makes those
checks return NaN instead of raising (Equinox's ``EQX_ON_ERROR=nan``), unless the user
set ``EQX_ON_ERROR`` themselves. gflow's statuses do not depend on them: a solve runs
with ``throw=False`` and its status comes from Diffrax's result code and from finite
values (``gflow.dynamics.flow``), and the checked conditions (save times ordered and
inside [t0, t1]) are validated by gflow before a solve. Progress bars are host
callbacks too: a solve shown with a progress bar is compiled again each time (use
``--quiet``, or run without a terminal).
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

ENV = "GFLOW_COMPILE_CACHE"
_OFF = ("0", "off", "no", "false")
_ON = ("", "1", "on", "yes", "true")
#: Programs that compile faster than this are not written (JAX's default is 1 s,
#: which leaves out most of a short command's programs).
MIN_COMPILE_TIME_S = 0.0


def cache_dir(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The cache folder that ``environ`` asks for, or None when the cache is off."""
    value = environ.get(ENV, "").strip()
    if value.lower() in _OFF:
        return None
    if value.lower() not in _ON:
        return Path(value).expanduser().absolute()
    base = environ.get("XDG_CACHE_HOME", "").strip()
    root = Path(base) if base else Path("~/.cache").expanduser()
    return root.absolute() / "gflow" / f"jax-{socket.gethostname()}"


def _errors_as_nan() -> None:
    """Equinox's run-time checks return NaN instead of calling back to the host.

    Equinox reads ``EQX_ON_ERROR`` when it is imported, which ``import gflow`` has
    done before the command line is parsed; the value it keeps is read again each
    time a check is traced, so it is set there too (before anything is traced).
    A value the user set is kept. The variable also reaches the processes that
    ``gflow sweep --processes`` starts.
    """
    if "EQX_ON_ERROR" in os.environ:
        return
    os.environ["EQX_ON_ERROR"] = "nan"
    for name in ("equinox._config", "equinox._errors"):
        module = sys.modules.get(name)
        if isinstance(getattr(module, "EQX_ON_ERROR", None), str):
            module.EQX_ON_ERROR = "nan"


def configure(no_cache: bool = False) -> Path | None:
    """Turn the cache on for this process as the environment asks; return its folder.

    ``no_cache`` (``--no-compile-cache``) turns it off here and, through the
    environment, in any process this one starts. Call it once, from the command's
    entry point, before anything is compiled.
    """
    if no_cache:
        os.environ[ENV] = "0"
    folder = cache_dir()
    if folder is None:
        return None
    import jax

    _errors_as_nan()
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_TIME_S)
    return folder
