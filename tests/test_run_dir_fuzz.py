"""The command line against damaged and foreign run directories (issue 33 point 8):
every command that resumes refuses each kind of bad directory (a config.json of the
right command without settings among them) in one line with exit 2, writes nothing
there, and leaves every file byte-identical."""

from __future__ import annotations

import json

import pytest

from gflow.cli import main

#: the commands that take --resume RUN_DIR
RESUMING = ("flow", "sweep", "train", "text")

#: name -> the files of a bad run directory (None: the directory is not made)
DAMAGED = {
    "missing": None,
    "empty": {},
    "truncated config": {"config.json": '{"command": "flow", "con'},
    "config not an object": {"config.json": "[1, 2]"},
    "empty config file": {"config.json": ""},
    "binary config": {"config.json": "\x00\xff\xfe garbage"},
    "config a folder": {"config.json/": None},
    "no settings": {"config.json": '{"command": "<command>", "config": {}}'},
}


def _make(path, files, command):
    if files is None:
        return
    path.mkdir()
    for name, text in files.items():
        if name.endswith("/"):
            (path / name.rstrip("/")).mkdir()
        else:
            text = text.replace("<command>", command)
            (path / name).write_bytes(text.encode("utf-8", "surrogateescape"))


def _snapshot(path):
    if not path.exists():
        return None
    return {
        str(p.relative_to(path)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(path.rglob("*"))
    }


def _refused(argv, capsys):
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    return code, err


@pytest.mark.parametrize("command", RESUMING)
@pytest.mark.parametrize("kind", list(DAMAGED))
def test_a_damaged_run_directory_is_refused_in_one_line(
    tmp_path, capsys, command, kind
):
    run = tmp_path / "run"
    _make(run, DAMAGED[kind], command)
    before = _snapshot(run)
    code, err = _refused([command, "--resume", str(run)], capsys)
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith(f"gflow {command}: error: --resume")
    assert "Traceback" not in err[0]
    if kind == "no settings":  # not the default run of the command
        assert f"{run / 'config.json'} has no settings" in err[0]
    assert _snapshot(run) == before  # nothing written, nothing changed


@pytest.mark.parametrize("command", RESUMING)
def test_another_commands_directory_is_refused_by_name(tmp_path, capsys, command):
    other = next(c for c in RESUMING if c != command)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"command": other, "config": {}}))
    before = _snapshot(run)
    code, err = _refused([command, "--resume", str(run)], capsys)
    assert code == 2, err
    assert len(err) == 1 and f"'gflow {other}' run" in err[0]
    assert _snapshot(run) == before
