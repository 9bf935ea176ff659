"""A run directory and its format, for every command.

``config.json`` is the one document every command writes the same way::

    {"command": "flow", "config": {...}, <the command's extras>, "environment": {...}}

``RunDirectory`` owns that format: it reads the document as a typed
``RunDocument`` (the one reader of every gflow version's directories: those
that wrote no ``"command"`` are known by the files they hold), refuses a
directory that holds another run *before* anything is written there, and holds
a lock while a command writes it, so that two commands never write one run.
What a job records besides its configuration is a ``RunFacts``. ``load_run``
reads any run directory back as a typed ``Run``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gflow.dynamics.trajectory import Trajectory
from gflow.runs.config import AbstractConfig, ConfigError
from gflow.runs.environment import Environment
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


@dataclasses.dataclass(frozen=True)
class RunFacts:
    """What config.json records besides the configuration, once a run is planned
    (``AbstractJob.facts``); a field left None is not written.

    Attributes:
        references: losses the run is read against (unigram, Bayes, ...).
        d_vocab: the vocabulary size.
        n_tokens: a text run's corpus length in tokens.
        unk_frequency: the share of a text corpus's tokens outside the vocabulary.
        queries: a text run's tracked query tokens and their ids.
        top: the keys named in a text run's attention rows.
        runs: a text run's run names, every seed's.
        members: the names of a training sweep's members.
    """

    references: dict[str, float] | None = None
    d_vocab: int | None = None
    n_tokens: int | None = None
    unk_frequency: float | None = None
    queries: dict[str, int] | None = None
    top: list[str] | None = None
    runs: list[str] | None = None
    members: list[str] | None = None


_FACTS = dataclasses.fields(RunFacts)


@dataclasses.dataclass(frozen=True)
class RunDocument:
    """A run's config.json as read back, of any gflow version.

    Attributes:
        command: the command that wrote it: config.json's ``"command"``, or for a
            directory of a gflow that wrote none, the one its files show; None if
            neither says.
        json: the document as written (``json["config"]`` the settings).
    """

    command: str | None
    json: Any

    @property
    def settings(self) -> Any:
        """The configuration's settings (``"config"``)."""
        return self.json.get("config")

    @property
    def facts(self) -> RunFacts:
        """What the run recorded besides its configuration."""
        return RunFacts(**{f.name: self.json.get(f.name) for f in _FACTS})

    @property
    def launched(self) -> bool:
        """Written by a launcher (``--processes N``) whose workers have not started:
        an ``"environment"`` of null."""
        return "environment" in self.json and self.json["environment"] is None

    @property
    def started(self) -> bool:
        """Whether a process has run it (the environment is recorded)."""
        return self.json.get("environment") is not None


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

    def read(self, option: str = "--resume") -> RunDocument:
        """config.json as a ``RunDocument``; ConfigError (naming ``option``) when it
        is missing or not a JSON object."""
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
        return RunDocument(self.command(doc), doc)

    def command(self, doc: Any) -> str | None:
        """The command that wrote ``doc`` (config.json's content) here: its
        ``"command"``, or for a directory of an earlier gflow version, the one its
        files show."""
        if isinstance(doc, dict) and isinstance(doc.get("command"), str):
            return doc["command"]
        for name, command in LEGACY_MARKS:
            if (self.path / name).exists():
                return command
        return None

    def read_config(self, cls: type[AbstractConfig], command: str, option: str):
        """The configuration saved by ``command``, read as ``cls``; ConfigError when
        the directory holds another command's run, a damaged configuration or none
        (an empty ``"config"``: read as the defaults, it would run another run)."""
        doc = self.read(option)
        if doc.command is not None and doc.command != command:
            raise ConfigError(
                f"{option}: {self.path} holds a 'gflow {doc.command}' run, not a "
                f"'gflow {command}' run"
            )
        if doc.settings == {}:  # every gflow writes all its settings there
            raise ConfigError(
                f'{option}: {self.config_path} has no settings (its "config" is '
                "empty), so the run cannot be rebuilt as it was; give the directory "
                "of an earlier gflow run"
            )
        settings = cls.document_settings(doc.json)
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
        self,
        command: str,
        cfg: AbstractConfig,
        environment: Environment | None,
        facts: RunFacts = RunFacts(),
    ) -> None:
        """Write config.json atomically: command, config, the ``facts`` that are
        known, environment (``gflow.runs.environment()``; ``None`` while a launcher
        has written it and no process has started)."""
        doc: dict[str, Any] = {"command": command, **dict(cfg.document())}
        for f in _FACTS:
            if getattr(facts, f.name) is not None:
                doc[f.name] = getattr(facts, f.name)
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


@dataclasses.dataclass(frozen=True)
class Run:
    """A run directory read back (``load_run``).

    Attributes:
        path: the directory.
        document: its config.json (``document.command``: the command that wrote
            it, ``flow``, ``sweep``, ``compare``, ``text``, ``train``, ``monitor``
            or None if unknown).
        trajectories: name -> Trajectory of every run saved there.
        sweep: a ``gflow sweep``'s sweep.json (None for another command).
        members: a ``gflow sweep``'s saved members (a ``SweepRun``; ``.member(m)``
            a Trajectory), None when there are none.

    ``run["flow"]`` is ``run.trajectories["flow"]``; ``run["config"]`` the whole
    config.json, ``run["sweep"]`` and ``run["members"]`` as above (the keys of
    the dict that ``load_run`` returned before).
    """

    path: Path
    document: RunDocument
    trajectories: dict[str, Trajectory]
    sweep: Any = None
    members: Any = None

    @property
    def command(self) -> str | None:
        return self.document.command

    @property
    def config(self) -> Any:
        """The run's settings (config.json's ``"config"``)."""
        return self.document.settings or {}

    def keys(self) -> list[str]:
        extras = ["sweep", "members"] if self.sweep is not None else []
        return ["config", *self.trajectories, *extras]

    def __getitem__(self, key: str):
        if key == "config":
            return self.document.json
        if key in self.trajectories:
            return self.trajectories[key]
        if key in ("sweep", "members") and self.sweep is not None:
            return getattr(self, key)
        raise KeyError(key)

    def __contains__(self, key: str) -> bool:
        return key in self.keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __repr__(self) -> str:
        return (
            f"Run({str(self.path)!r}, command={self.command!r}, "
            f"trajectories={list(self.trajectories)})"
        )
