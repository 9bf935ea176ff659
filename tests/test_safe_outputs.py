"""Outputs never replace what they point at (issue 33, point 5).

``atomic_write_bytes`` (every file a run writes) and ``report --out`` refuse a target
that is a symbolic link, FIFO, device or directory, in one line naming it, and leave
it as it was; a write the system refuses is one line, not a traceback. Device nodes
are made in the test's folder (root only), never the machine's /dev/null: before
the fix a write replaced the node it was given.
"""

import errno
import json
import os
import stat

import pytest

from gflow.cli import main
from gflow.runs import ConfigError, atomic_write_bytes, write_report


def _device(tmp_path):
    """A character device like /dev/null (1, 3) in ``tmp_path``, or skip."""
    node = tmp_path / "null"
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, AttributeError):
        pytest.skip("making a device node needs root")
    return node


def _special(tmp_path, kind):
    """(path, check that it is still what it was) for each kind of target."""
    if kind == "symlink":
        target = tmp_path / "kept.txt"
        target.write_text("keep me")
        link = tmp_path / "link"
        link.symlink_to(target)
        return link, lambda: link.is_symlink() and target.read_text() == "keep me"
    if kind == "dangling symlink":
        link = tmp_path / "dangling"
        link.symlink_to(tmp_path / "nowhere")
        return link, lambda: link.is_symlink() and not (tmp_path / "nowhere").exists()
    if kind == "fifo":
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        return fifo, lambda: stat.S_ISFIFO(os.lstat(fifo).st_mode)
    if kind == "directory":
        folder = tmp_path / "folder"
        folder.mkdir()
        return folder, lambda: folder.is_dir() and not any(folder.iterdir())
    node = _device(tmp_path)
    return node, lambda: stat.S_ISCHR(os.lstat(node).st_mode)


KINDS = {
    "symlink": "a symbolic link",
    "dangling symlink": "a symbolic link",
    "fifo": "a FIFO",
    "directory": "a directory",
    "device": "a character device",
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_write_refuses_a_target_that_is_not_a_regular_file(tmp_path, kind):
    path, unchanged = _special(tmp_path, kind)
    with pytest.raises(ConfigError, match=f"{path} is {KINDS[kind]}") as e:
        atomic_write_bytes(path, b"new")
    assert "\n" not in str(e.value) and "regular file" in str(e.value)
    assert unchanged()
    assert not [p for p in tmp_path.rglob("*.tmp")]  # no temporary file left


def test_a_regular_file_is_still_replaced_atomically(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("old")
    atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"new" and [p.name for p in tmp_path.iterdir()] == [
        "a.txt"
    ]


def test_a_refused_write_is_one_line_naming_the_path_and_the_reason(
    tmp_path, monkeypatch
):
    def refuse(src, dst):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr("gflow.runs.files.os.replace", refuse)
    path = tmp_path / "a.txt"
    with pytest.raises(ConfigError) as e:
        atomic_write_bytes(path, b"x")
    assert str(e.value) == (
        f"cannot write {path}: Permission denied; give a path in a writable directory"
    )
    assert isinstance(e.value, OSError)  # best-effort writers still catch it
    assert not list(tmp_path.iterdir())  # the temporary file is removed


def test_a_read_only_folder_is_one_line(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("root writes into a read-only folder")
        with pytest.raises(ConfigError, match="cannot write .*Permission denied"):
            atomic_write_bytes(folder / "a.txt", b"x")
    finally:
        folder.chmod(0o700)


@pytest.mark.skipif(not os.path.isdir("/sys/kernel"), reason="no sysfs")
def test_writing_into_sysfs_is_one_line():
    with pytest.raises(ConfigError, match=r"cannot write /sys/gflow-x: \w"):
        atomic_write_bytes("/sys/gflow-x", b"x")


# ---- the command line: gflow report --out ------------------------------------------


def _run_dir(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"command": "flow"}))
    return run


def _one_line(capsys, *words):
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for word in words:
        assert word in lines[0], err


@pytest.mark.parametrize("kind", list(KINDS))
def test_report_out_refuses_what_it_would_replace(tmp_path, capsys, kind):
    run = _run_dir(tmp_path)
    path, unchanged = _special(tmp_path, kind)
    assert main(["report", str(run), "--out", str(path)]) == 2
    _one_line(capsys, "gflow report: error: argument --out:", KINDS[kind])
    assert unchanged()


def test_report_writes_through_the_checked_write(tmp_path):
    """Past the command line's check (a link made after parsing, say) the write
    itself refuses."""
    run = _run_dir(tmp_path)
    path, unchanged = _special(tmp_path, "symlink")
    with pytest.raises(ConfigError, match="is a symbolic link"):
        write_report(run, path)
    assert unchanged()
    assert (
        write_report(run, tmp_path / "page.html")
        .read_text()
        .startswith("<!DOCTYPE html>")
    )


@pytest.mark.skipif(not os.path.isdir("/sys/kernel"), reason="no sysfs")
def test_report_out_into_sysfs_is_one_line(tmp_path, capsys):
    assert main(["report", str(_run_dir(tmp_path)), "--out", "/sys/gflow-x"]) == 2
    _one_line(capsys, "gflow report: error:", "/sys")
