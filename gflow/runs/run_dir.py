"""A run directory and its format, for every command.

``config.json`` is the one document every command writes the same way::

    {"command": "flow", "config": {...}, <the command's extras>, "environment": {...}}

``RunDirectory`` owns that format: it reads the document (and knows the
directories of earlier versions of gflow by the files they hold), refuses a
directory that holds another run *before* anything is written there, and holds
a lock while a command writes it, so that two commands never write one run.
``load_run`` reads any run directory back as a typed ``Run``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from gflow.dynamics.trajectory import Trajectory
from gflow.runs.config import AbstractConfig, ConfigError
from gflow.runs.files import write_json

#: The file whose lock marks a directory as being written by a command.
LOCK = ".gflow.lock"

#: How the directories of gflow versions that wrote no ``"command"`` are known:
#: the first command whose file is there.
LEGACY_MARKS = (
    ("vocab.json", "text"),
    ("sweep.json", "sweep"),
    ("compare.json", "compare"),
    ("flow.json", "flow"),
)


class RunDirectory:
    """The directory of one run: its ``config.json``, checkpoints and lock."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDirectory({str(self.path)!r})"

    @property
    def config_path(self) -> Path:
        return self.path / "config.json"

    @property
    def checkpoint(self) -> Path:
        """Where the run's pieces are saved (flow segments, sweep chunks, members)."""
        return self.path / "checkpoint"

    def has_config(self) -> bool:
        return self.config_path.is_file()

    def trajectory_names(self) -> list[str]:
        """The runs saved here as trajectories: ``<name>.json`` beside
        ``<name>_metrics.npz`` (``gflow.runs.save_trajectory``), sorted."""
        return [
            meta.stem
            for meta in sorted(self.path.glob("*.json"))
            if (self.path / f"{meta.stem}_metrics.npz").exists()
        ]

    def figures(self) -> list[Path]:
        """The figures of the run: its PNGs, then those of a training sweep's
        members in ``figures/<member>/``."""
        return sorted(self.path.glob("*.png")) + sorted(
            self.path.glob("figures/*/*.png")
        )

    def document(self, option: str = "--resume") -> dict:
        """The whole ``config.json``; ConfigError (naming ``option``) when it is
        missing or not a JSON object."""
        if not self.has_config():
            raise ConfigError(
                f"{option}: {self.path} has no config.json; give the directory of an "
                "earlier gflow run"
            )
        try:
            doc = json.loads(self.config_path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            why = getattr(e, "strerror", None) or type(e).__name__
            raise ConfigError(
                f"{option}: {self.config_path} cannot be read ({why}); give the "
                "directory of an earlier gflow run"
            ) from None
        if not isinstance(doc, dict):
            raise ConfigError(
                f"{option}: {self.config_path} is not a gflow configuration (a JSON "
                "object)"
            )
        return doc

    def command(self, doc: dict | None = None) -> str | None:
        """The command that wrote the run: config.json's ``"command"``, or for a
        directory of an earlier gflow version, the one its files show."""
        doc = self.document() if doc is None else doc
        if isinstance(doc.get("command"), str):
            return doc["command"]
        for name, command in LEGACY_MARKS:
            if (self.path / name).exists():
                return command
        return None

    def read_config(self, cls: type[AbstractConfig], command: str, option: str):
        """The configuration saved by ``command``, read as ``cls``; ConfigError when
        the directory holds another command's run, a damaged configuration or none
        (an empty ``"config"``: read as the defaults, it would run another run)."""
        doc = self.document(option)
        theirs = self.command(doc)
        if theirs is not None and theirs != command:
            raise ConfigError(
                f"{option}: {self.path} holds a 'gflow {theirs}' run, not a 'gflow "
                f"{command}' run"
            )
        if doc.get("config") == {}:  # every gflow writes all its settings there
            raise ConfigError(
                f'{option}: {self.config_path} has no settings (its "config" is '
                "empty), so the run cannot be rebuilt as it was; give the directory "
                "of an earlier gflow run"
            )
        settings = cls.document_settings(doc)
        return cls.from_json(
            settings, source=f"{option}: config file {self.config_path}"
        )

    def accept(self, command: str, cfg: AbstractConfig, option: str = "--out") -> bool:
        """Check, before anything is written, that ``cfg`` may run here: the
        directory is new, empty, or holds the same run (then it continues: True).
        ConfigError otherwise, and nothing there is touched."""
        if self.path.exists() and not self.path.is_dir():
            raise ConfigError(f"{option}: {self.path} exists and is not a directory")
        if not self.has_config():
            return False
        saved = self.read_config(type(cfg), command, option)
        changed = saved.differences(cfg)
        if changed:
            raise ConfigError(
                f"{option}: {self.path} holds a run with other settings "
                f"({', '.join(changed[:4])}{', ...' if len(changed) > 4 else ''}); "
                f"continue it with --resume {self.path}, or give a new --out"
            )
        return True

    def write_config(
        self, command: str, cfg: AbstractConfig, environment: dict | None, **extra
    ) -> None:
        """Write config.json atomically: command, config, ``extra``, environment
        (``None`` while a launcher has written it and no process has started)."""
        doc: dict[str, Any] = {"command": command, **cfg.to_document(), **extra}
        doc["environment"] = environment  # None: a launcher's, before the run
        write_json(self.config_path, doc)

    @contextlib.contextmanager
    def lock(self, command: str, option: str = "--out") -> Iterator[None]:
        """Hold the directory's write lock; ConfigError at once if another command
        holds it (the lock ends with the process, however it ends), or if the
        system refuses to make the directory or its lock file (one line naming
        ``option``, the path and the system's reason). The folders made for the
        lock are removed again if the command fails before writing anything
        there."""
        made = self._missing_folders()
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            self._remove_if_made(made)
            why = e.strerror or type(e).__name__
            where = "" if e.filename in (None, str(self.path)) else f" ({e.filename})"
            fix = (
                "give another --out (a new or existing directory in a writable place)"
                if option == "--out"
                else "make it writable, or resume a copy of it"
            )
            raise ConfigError(
                f"{option} {self.path}: cannot make or lock the run directory: "
                f"{why}{where}; {fix}"
            ) from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ConfigError(
                    f"{option} {self.path}: another gflow command is writing this "
                    "run directory now; wait for it to end, or give another --out"
                ) from None
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} gflow {command}\n".encode())
            yield
        except BaseException:
            self._remove_if_made(made)
            raise
        finally:
            os.close(fd)  # closing releases the lock

    def _missing_folders(self) -> list[Path]:
        """The directory and those of its parents that do not exist yet, deepest
        first: what ``lock`` makes."""
        missing = []
        for folder in (self.path, *self.path.parents):
            if os.path.lexists(folder):
                break
            missing.append(folder)
        return missing

    def _remove_if_made(self, made: list[Path]) -> None:
        """Remove the folders ``lock`` made (``made``, deepest first) while they
        hold nothing but the lock file: a command that fails before writing
        anything leaves nothing behind (not even the ``runs/`` of a default
        ``--out``)."""
        for folder in made:
            try:
                if [p.name for p in folder.iterdir()] == [LOCK]:
                    (folder / LOCK).unlink()
                folder.rmdir()  # refused when something else is there: kept
            except OSError:  # never made, or not empty: leave it and its parents
                return


class Run(Mapping[str, Any]):
    """A run directory read back (``load_run``): typed, and a mapping as before.

    Attributes:
        path: the directory.
        command: the command that wrote it (``flow``, ``sweep``, ``compare``,
            ``text``, ``train``, ``monitor``), or None if unknown.
        document: config.json as written (``document["config"]`` the settings).
        trajectories: name -> Trajectory of every run saved there.
        extras: what a command saves besides trajectories (a sweep's ``sweep``,
            its ``members``).

    ``run["flow"]`` is ``run.trajectories["flow"]``, ``run["config"]`` the
    document, as the dict that ``load_run`` returned before.
    """

    def __init__(self, path, command, document, trajectories, extras=None):
        self.path = Path(path)
        self.command: str | None = command
        self.document: dict = document
        self.trajectories: dict[str, Trajectory] = dict(trajectories)
        self.extras: dict[str, Any] = dict(extras or {})

    @property
    def config(self) -> dict:
        """The run's settings (config.json's ``"config"``)."""
        return self.document.get("config", {})

    def _items(self) -> dict[str, Any]:
        return {"config": self.document, **self.trajectories, **self.extras}

    def __getitem__(self, key: str):
        return self._items()[key]

    def __iter__(self):
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())

    def __repr__(self) -> str:
        return (
            f"Run({str(self.path)!r}, command={self.command!r}, "
            f"trajectories={list(self.trajectories)})"
        )
