"""One run-directory format for every command (``gflow.runs.RunDirectory``): a
refused run leaves the old one byte for byte, a directory is locked while a command
writes it, another command's run is named as such, ``load_run`` is typed."""

import json

import pytest

from gflow import load_run
from gflow.cli import main
from gflow.runs import (
    ConfigError,
    FlowConfig,
    Run,
    RunDirectory,
    RunDocument,
    RunFacts,
    SweepConfig,
    environment,
)

TINY = [
    "--quiet",
    "flow",
    "--t1",
    "1",
    "--num-saves",
    "3",
    "--segments",
    "2",
    "--d-model",
    "4",
    "--solver",
    "tsit5",  # the run directory, not the solver: Tsit5 compiles in a third the time
    "--no-figures",
]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "flow"
    assert main([*TINY, "--out", str(out)]) == 0
    return out


def _files(path):
    return {
        p.relative_to(path).as_posix(): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def _one_line(capsys, *words):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    for word in words:
        assert word in err[0], err[0]


def test_a_refused_run_leaves_the_old_one_byte_for_byte(finished, capsys):
    """Regression (issue 33.1): --t1 50 --out OLD rewrote config.json, then refused
    at the first checkpoint piece, and OLD could not be resumed any more."""
    before = _files(finished)
    assert main([*TINY, "--t1", "50", "--out", str(finished)]) == 2
    _one_line(capsys, "holds a run with other settings", "t1", "--resume")
    assert _files(finished) == before
    assert main(["--quiet", "flow", "--resume", str(finished), "--no-figures"]) == 0


def test_the_same_settings_continue_the_run_there(finished, capsys):
    assert main([*TINY, "--out", str(finished)]) == 0
    assert "resumed after segment 2/2" in capsys.readouterr().out


def test_a_second_writer_is_refused_in_one_line(finished, capsys):
    with RunDirectory(finished).lock("flow"):
        assert main([*TINY, "--out", str(finished)]) == 2
        _one_line(capsys, "another gflow command is writing", str(finished))
    assert main([*TINY, "--out", str(finished)]) == 0  # released with the lock


def test_another_commands_run_is_named_as_such(tmp_path, capsys):
    """Regression (issue 33.6): resuming a sweep directory as a flow said "unknown
    settings beta, chunk, ..."."""
    run = RunDirectory(tmp_path / "sweep")
    run.write_config("sweep", SweepConfig(), environment=None)
    assert main(["flow", "--resume", str(run.path)]) == 2
    _one_line(capsys, "holds a 'gflow sweep' run, not a 'gflow flow' run")
    with pytest.raises(ConfigError, match="holds a 'gflow sweep' run"):
        run.accept("flow", FlowConfig())


def test_config_json_is_one_format(finished):
    doc = json.loads((finished / "config.json").read_text())
    assert list(doc)[:2] == ["command", "config"] and doc["command"] == "flow"
    assert FlowConfig.from_json(doc["config"]) == FlowConfig(
        t1=1.0, num_saves=3, segments=2, d_model=4, solver="tsit5"
    )
    assert doc["environment"]["x64"] is True


def test_load_run_is_typed_and_reads_as_before(finished):
    run = load_run(finished)
    assert isinstance(run, Run) and run.command == "flow"
    assert run["flow"] is run.trajectories["flow"]
    assert run["config"]["command"] == "flow" and run.config["t1"] == 1.0
    assert set(run) == {"config", "flow"}
    assert isinstance(run.document, RunDocument) and run.document.started
    facts = run.document.facts
    assert facts.references == run["config"]["references"] and facts.members is None


def test_the_document_reader_knows_every_version(tmp_path):
    """One reader: a launcher's config.json (no environment yet) is launched, not
    started; a directory of a gflow that wrote no "command" is known by its files;
    the facts a job records are written when known and left out when None."""
    run = RunDirectory(tmp_path / "launched")
    run.write_config("sweep", SweepConfig(), environment=None)
    doc = run.read()
    assert doc.command == "sweep" and doc.launched and not doc.started
    assert "references" not in doc.json and "members" not in doc.json
    run.write_config("flow", FlowConfig(), environment(), RunFacts(d_vocab=4))
    doc = run.read()
    assert doc.started and not doc.launched and doc.facts == RunFacts(d_vocab=4)
    old = tmp_path / "old"
    old.mkdir()
    (old / "config.json").write_text(json.dumps({"config": {}}))
    (old / "sweep.json").write_text("{}")
    assert RunDirectory(old).read().command == "sweep"


def test_a_directory_made_for_a_refused_run_is_removed(tmp_path, capsys):
    out = tmp_path / "new"
    with pytest.raises(RuntimeError):
        with RunDirectory(out).lock("flow"):
            raise RuntimeError("the plan failed")
    assert not out.exists()
