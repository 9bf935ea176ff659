"""A command as a strategy: ``AbstractJob`` (plan, run, write, summary).

Every ``gflow`` command is a job, and one driver (``gflow.cli.driver.execute``)
runs any of them without asking which it got, as Equinox's ``docs/pattern.md``
writes one ``train`` against an abstract optimiser:

1. ``plan(cfg)`` turns the configuration's names into objects, once (the chain,
   the loss, the model, the solver or optimizer, the data set);
2. the driver writes ``config.json`` (the configuration and the run's ``facts``),
   then ``start`` writes what else is known before the run;
3. ``run(plan, directory, context)`` computes, checkpointing into the directory;
4. ``write(result, directory)`` writes the run's files and returns the result
   with what writing found (the stages);
5. ``summary(result)`` is the line the command prints; ``succeeded(result)`` its
   exit status.

A job that can be split over processes says into how many units (``units``);
``AbstractMembersJob`` is the family of jobs whose units are members saved one by
one (``gflow text``'s seeds, ``gflow train``'s sweep), with one way to run them
over processes and read them back.
"""

from __future__ import annotations

import abc
import dataclasses
import logging
import sys
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import Any, ClassVar, Generic, TypeVar

from gflow.dynamics.trajectory import Trajectory
from gflow.runs.config import AbstractConfig, ConfigError
from gflow.runs.distributed import Processes, deal, total
from gflow.runs.program_cache import ProgramCache
from gflow.runs.run_dir import RunDirectory, RunFacts
from gflow.runs.stages import StagesEntry

C = TypeVar("C", bound=AbstractConfig)
log = logging.getLogger("gflow")


@dataclasses.dataclass(frozen=True)
class Context:
    """How a job runs, besides its configuration.

    Attributes:
        quiet: no progress bars or per-member lines.
        resumed: the run continues one found in its directory.
        processes: this process among several joined ones (None: one process).
        program_cache: where traced programs are kept (None: not kept).
        interrupt: whether a signal arrived (``gflow.dynamics.interrupt.
            SignalWatch``), asked from inside long compiled work (None: not asked).
    """

    quiet: bool = False
    resumed: bool = False
    processes: Processes | None = None
    program_cache: ProgramCache | None = None
    interrupt: Callable[[], bool] | None = None

    def solve_interrupt(self) -> Callable[[], bool] | None:
        """The ``interrupt`` a flow's solve should ask: always where a progress
        bar is shown or no program cache is used. A batch run that keeps its
        traced program on disk (which cannot hold the host callback) is
        interrupted by the program cache instead, which the driver gives the
        same watch (``ProgramCache(interrupt=...)``: the wait for the kept
        program ends at a signal, the program is abandoned)."""
        shown = not self.quiet and sys.stderr.isatty()
        return self.interrupt if shown or self.program_cache is None else None

    def watched(self, method):
        """``method`` (an ``AbstractFlowMethod``) asking ``interrupt`` from inside
        its loop and, unless quiet, showing its progress (a flow's t, step size and
        solver)."""
        method = method.watched(self.interrupt)
        return method if self.quiet else method.shown()

    @property
    def main(self) -> bool:
        """Whether this process writes the run directory."""
        return self.processes is None or self.processes.main


@dataclasses.dataclass(frozen=True)
class Units:
    """What a job splits over processes: ``count`` units (members, chunks, seeds);
    ``more`` names the options that make more of them, for error messages."""

    count: int
    more: str


class AbstractJob(abc.ABC, Generic[C]):
    """A command: its configuration type and the steps the driver calls."""

    #: The command's name (``gflow <command>``), also config.json's ``"command"``.
    command: ClassVar[str]
    #: The configuration type of the command.
    config_type: ClassVar[type[AbstractConfig]]
    #: One line for ``gflow --help``, and the command's description.
    help: ClassVar[str]
    description: ClassVar[str]
    #: Whether the run can be split over processes (``units``); such a command
    #: has the process options.
    splits: ClassVar[bool] = False
    #: What an interrupted run keeps, as the error line of a killed worker says.
    saved: ClassVar[str] = "the pieces finished so far are saved"

    def x64(self, cfg: C) -> bool:
        """Whether the run computes in float64 (the driver sets JAX's flag)."""
        return bool(getattr(cfg, "x64", True))

    def units(self, cfg: C) -> Units | None:
        """What the run splits over processes; None: it runs in one process."""
        return None

    def check_processes(self, cfg: C, count: int, what: str, resumed: bool) -> None:
        """ConfigError unless each of ``count`` processes gets a unit of ``cfg``
        (``what``: the option that set ``count``, as the message begins)."""
        units = self.units(cfg)
        if units is not None and count > units.count:
            raise ConfigError(
                f"{what}: the run has {units.count} member(s), so "
                f"{count - units.count} process(es) would have none; give at most "
                f"{units.count} process(es), or more members ({units.more})"
            )

    def for_processes(self, cfg: C, count: int, given: AbstractSet[str]) -> C:
        """``cfg`` adjusted to run over ``count`` processes (``given``: the
        settings the user chose, which stay as they are)."""
        return cfg

    def resume(self, cfg: C, directory: RunDirectory) -> C:
        """``cfg`` as a resumed run rebuilds it from its directory (e.g. with the
        tokeniser it trained); the settings that define the results stay."""
        return cfg

    @abc.abstractmethod
    def plan(self, cfg: C) -> Any:
        """The objects of the run: every name of ``cfg`` turned into its object."""

    def facts(self, plan: Any) -> RunFacts:
        """What config.json holds besides the configuration (reference losses,
        the vocabulary size, the members' names)."""
        return RunFacts()

    def start(self, plan: Any, directory: RunDirectory, context: Context) -> None:
        """Write what the run knows before it runs, besides config.json (a text
        run's vocabulary and trained tokeniser); process 0 only."""

    @abc.abstractmethod
    def run(self, plan: Any, directory: RunDirectory, context: Context) -> Any:
        """Compute the run, checkpointing into ``directory``; None on a process
        that does not write (the others' results are gathered by process 0)."""

    @abc.abstractmethod
    def write(self, result: Any, directory: RunDirectory) -> Any:
        """Write the run's files (trajectories, stages, the command's JSON);
        return ``result`` with what writing found (the stages)."""

    @abc.abstractmethod
    def summary(self, result: Any) -> str:
        """What the command prints at the end (one or a few lines)."""

    def succeeded(self, result: Any) -> bool:
        """Whether the run ended well (exit status 0)."""
        return True


@dataclasses.dataclass(frozen=True)
class Member:
    """One finished run of a members job (a text run's seed and arm, a training
    sweep's member): its name in the run directory, its seed, configuration, data
    and trajectory, and its stages.json entry once written."""

    name: str
    seed: int
    cfg: AbstractConfig
    data: Any
    trajectory: Trajectory
    stages: StagesEntry | None = None


@dataclasses.dataclass(frozen=True)
class MembersResult:
    """A finished members job: its plan, every member (with its stages once
    written), the pieces read back instead of computed, the processes that ran
    them, the wall time of each part of the command, and the run directory."""

    plan: Any
    runs: tuple[Member, ...]
    resumed: int = 0
    processes: int = 1
    wall: dict[str, float] = dataclasses.field(default_factory=dict)
    directory: RunDirectory | None = None


class AbstractMembersJob(AbstractJob[C]):
    """A job of members saved one by one, in one process or several.

    Over P processes each runs the members that ``deal`` gives it and saves each
    in the run directory, which they share, the moment it ends; process 0 then
    reads every member back from there and alone writes the run. A member is the
    same program on whichever process runs it, so the results do not depend on P,
    and an interrupted run resumes from the members (or their pieces) on disk.
    """

    splits = True
    #: What a member is, as the log names them (``members``, ``seeds``).
    unit: ClassVar[str] = "members"

    @abc.abstractmethod
    def members(self, plan: Any) -> list:
        """The members, in order (names, or the seeds of a text run)."""

    @abc.abstractmethod
    def run_members(
        self, plan: Any, directory: RunDirectory, context: Context, mine: list[int]
    ) -> int:
        """Run the members at the indices ``mine``, each saved as it ends; return
        how many pieces were read back instead of computed."""

    @abc.abstractmethod
    def read_members(
        self, plan: Any, directory: RunDirectory, owner: list[int], resumed: int
    ) -> MembersResult:
        """The result, every member read back from ``directory`` (``owner``: the
        process that ran each; ``resumed``: pieces read back over all processes);
        FileNotFoundError naming a member that is not there."""

    def succeeded(self, result: MembersResult) -> bool:
        return all(m.trajectory.status == "success" for m in result.runs)

    def run_alone(
        self, plan: Any, directory: RunDirectory, context: Context
    ) -> MembersResult:
        """The run in one process: every member, then read back."""
        everyone = list(range(len(self.members(plan))))
        resumed = self.run_members(plan, directory, context, everyone)
        return self.read_members(plan, directory, [0] * len(everyone), resumed)

    def run(
        self, plan: Any, directory: RunDirectory, context: Context
    ) -> MembersResult | None:
        processes = context.processes
        if processes is None:
            return self.run_alone(plan, directory, context)
        members = self.members(plan)
        owner = deal(len(members), processes.count)
        mine = [i for i, p in enumerate(owner) if p == processes.index]
        resumed = self.run_members(plan, directory, context, mine)
        resumed = total(resumed, processes)  # every member is on disk after this
        import jax

        jax.distributed.shutdown()  # process 0 goes on alone
        if not processes.main:
            return None
        for p in range(processes.count):
            ran = ", ".join(str(m) for m, o in zip(members, owner) if o == p)
            log.info("%s from process %d of %d: %s", self.unit, p, processes.count, ran)
        return self.read_members(plan, directory, owner, resumed)
