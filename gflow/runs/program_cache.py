"""Traced programs kept on disk, so that a new process skips tracing (issue 12.3).

JAX's persistent compilation cache skips XLA's compile, but a new process still traces
and lowers the solve before it can look the compiled program up: about 1.5 s of the
default ``gflow flow`` on 2 cores, more than the integration itself. A
``ProgramCache`` keeps the lowered program instead, as a serialized ``jax.export``
artifact, and calls that: tracing happens once per machine, like compiling.

The artifact is found by a key of everything that decides the program and is not an
input array:

- the function's module and name;
- the structure of the arguments (their ``PyTreeDef``, with the static fields of
  Equinox modules) and the values of the other static leaves (``describe``: Python
  numbers and strings, functions of gflow and the JAX libraries by name);
- the shapes and dtypes of the array leaves;
- the versions of JAX, jaxlib, Equinox, Diffrax, Optax, Lineax and Optimistix, the
  backend, the 64-bit flag and ``EQX_ON_ERROR``;
- a digest of gflow's own source.

Arguments that hold an object known only by its address, or a function or an
``eqx.Module`` class of the user's (a lambda, a closure, a script's loss: its code
may change under the same name), cannot be keyed. They, and programs that cannot be
exported (host callbacks: a progress bar, Equinox's run-time checks), run through
``eqx.filter_jit`` as before. Nothing is lost either way: a miss traces, exports and
writes the artifact, then calls it, so the first run and every later one run the
same program.

The function must return built-in containers (tuple, list, dict, None) of arrays:
the output structure is stored in the artifact.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Callable
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import equinox as eqx
import jax

from gflow.dynamics.interrupt import call_interruptibly
from gflow.runs.files import atomic_write_bytes

log = logging.getLogger(__name__)

_PACKAGES = ("jax", "jaxlib", "equinox", "diffrax", "optax", "lineax", "optimistix")
#: functions from these packages are known by name: their versions (or, for gflow,
#: its source digest) are in the key
_KNOWN = frozenset(_PACKAGES) | {"gflow", "builtins", "numpy"}
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")


def describe(leaf) -> str | None:
    """A static argument as key text, or None when its text would not pin it down.

    A function is named by module and qualified name if it lives at module level in a
    package whose version the key holds (a user's function could change between runs
    under the same name); anything else by ``repr``, unless that shows an address.
    """
    if callable(leaf) and not isinstance(leaf, type) and hasattr(leaf, "__qualname__"):
        module = getattr(leaf, "__module__", None) or ""
        qualname = leaf.__qualname__
        if module.partition(".")[0] in _KNOWN and "<" not in qualname:
            return f"{module}.{qualname}"
        return None
    text = repr(leaf)
    return None if _ADDRESS.search(text) else text


@cache
def source_digest() -> str:
    """SHA-256 of gflow's Python source (every ``*.py`` of the package, by path)."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@cache
def _versions() -> str:
    # one process sees one set of installed packages: read them once, not per call
    out = []
    for name in _PACKAGES:
        try:
            out.append(f"{name}={version(name)}")
        except PackageNotFoundError:
            out.append(f"{name}=?")
    return ",".join(out)


def _node_types(treedef) -> list[type]:
    """The types of every container node of ``treedef`` (modules, dicts, tuples)."""
    data = treedef.node_data()
    types = [] if data is None else [data[0]]
    for child in treedef.children():
        types += _node_types(child)
    return types


def _known(kind: type) -> bool:
    return (kind.__module__ or "").partition(".")[0] in _KNOWN


class ProgramCache:
    """Call ``fn(*args)`` through a traced program stored in ``folder``.

    A strategy object for ``gflow.solve_flow(program_cache=...)``; the ``gflow``
    command makes one in its compilation-cache folder. One instance keeps the
    programs it loaded, so the segments of a run trace and load once.

    A kept program cannot ask a signal watch from inside (``jax.export`` refuses
    host callbacks), so with ``interrupt`` (a ``gflow.dynamics.interrupt.
    SignalWatch``) each call, its tracing and compiling included, runs through
    ``gflow.dynamics.interrupt.call_interruptibly``: a signal ends the wait within
    ``POLL_S`` and raises ``KeyboardInterrupt``, the call itself is abandoned (it
    cannot be stopped), and an uninterrupted call returns what it returns without
    ``interrupt``, bit for bit (the same program, the same inputs).
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        interrupt: Callable[[], bool] | None = None,
    ):
        self.folder = Path(folder)
        self.interrupt = interrupt
        self._calls: dict[str, Callable | None] = {}  # None: cannot be exported
        self._jitted: dict[Callable, Callable] = {}
        self.hits = 0  # programs read from the folder by this instance
        self.writes = 0  # programs traced and written by this instance
        self.fallbacks = 0  # calls that ran through eqx.filter_jit instead

    def key(self, fn: Callable, static, treedef, leaves) -> str | None:
        """The artifact's key, or None when the arguments cannot be keyed."""
        values = [describe(x) for x in jax.tree.leaves(static)]
        static_def = jax.tree.structure(static)
        structure = f"{treedef}|{static_def}|{values}"
        if None in values or _ADDRESS.search(structure):
            return None
        # a user's Module appears in the structure by its class name only
        if not all(map(_known, _node_types(treedef) + _node_types(static_def))):
            return None
        shapes = [(tuple(x.shape), str(x.dtype)) for x in leaves]
        parts = [
            f"{fn.__module__}.{fn.__qualname__}",
            structure,
            repr(shapes),
            _versions(),
            jax.default_backend(),
            str(jax.config.jax_enable_x64),
            os.environ.get("EQX_ON_ERROR", ""),
            source_digest(),
        ]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]

    def __call__(self, fn: Callable, *args):
        return call_interruptibly(self._call, fn, *args, interrupt=self.interrupt)

    def _call(self, fn: Callable, *args):
        dynamic, static = eqx.partition(args, eqx.is_array)
        leaves, treedef = jax.tree.flatten(dynamic)
        key = self.key(fn, static, treedef, leaves)
        if key is not None and key not in self._calls:
            self._calls[key] = self._load(fn, key) or self._export(
                key, fn, static, treedef, leaves
            )
        call = None if key is None else self._calls[key]
        if call is None:
            self.fallbacks += 1
            if fn not in self._jitted:
                self._jitted[fn] = eqx.filter_jit(fn)
            return self._jitted[fn](*args)
        return call(leaves)

    def path(self, name: str, key: str) -> Path:
        """The artifact of function ``name`` under ``key``."""
        return self.folder / f"{name}-{key}.jaxexport"

    def _load(self, fn: Callable, key: str) -> Callable | None:
        path = self.path(fn.__name__, key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        try:
            exported = jax.export.deserialize(bytearray(data))
        except Exception as e:  # a damaged or foreign file: trace again
            log.warning("program cache: cannot read %s (%s); tracing again", path, e)
            return None
        self.hits += 1
        log.info("program cache: read %s", path)
        return _named_call(exported, fn.__name__)

    def _export(
        self, key: str, fn: Callable, static, treedef, leaves
    ) -> Callable | None:
        def flat(leaves):
            return fn(*eqx.combine(jax.tree.unflatten(treedef, leaves), static))

        flat.__name__ = fn.__name__
        try:
            exported = jax.export.export(jax.jit(flat))(leaves)
            data = exported.serialize()
        except Exception as e:  # host callbacks, custom outputs, no flatbuffers
            log.debug("program cache: %s cannot be exported (%s)", fn.__name__, e)
            return None
        try:
            atomic_write_bytes(self.path(fn.__name__, key), bytes(data))
            self.writes += 1
            log.info("program cache: wrote %s", self.path(fn.__name__, key))
        except OSError as e:  # a read-only cache folder still runs the program
            log.warning("program cache: cannot write in %s (%s)", self.folder, e)
        return _named_call(exported, fn.__name__)


def _named_call(exported, name: str) -> Callable:
    """``exported.call`` under jit, named as the function it was traced from."""

    def call(leaves):
        return exported.call(leaves)

    call.__name__ = name
    return jax.jit(call)
