import base64
import io
import os
import shutil
import subprocess
from html.parser import HTMLParser

import matplotlib.image as mpimg
import matplotlib.pyplot as plt
import pytest

from gflow.cli import main
from gflow.plotting import save_figure
from gflow.runs import render_report, write_json


class _Images(HTMLParser):
    def __init__(self):
        super().__init__()
        self.srcs = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.srcs.append(dict(attrs)["src"])


def _run_dir(path):
    write_json(path / "config.json", {"command": "flow", "config": {"t1": 5.0}})
    write_json(
        path / "stages.json",
        [
            {"stage": "condensation", "t_start": 0.0, "t_end": 20.0, "cycle": 1},
            {"stage": "focus", "t_start": 60.0, "t_end": 100.0, "cycle": 1},
        ],
    )
    for name in ("a.png", "b.png"):
        fig, ax = plt.subplots()
        ax.plot([0, 1], [1, 0])
        save_figure(fig, path / name)


def test_report_embeds_every_figure_and_the_stage_table(tmp_path):
    _run_dir(tmp_path)
    assert main(["report", str(tmp_path)]) == 0
    text = (tmp_path / "report.html").read_text()
    parser = _Images()
    parser.feed(text)
    assert len(parser.srcs) == 2
    for src in parser.srcs:
        assert src.startswith("data:image/png;base64,")
        img = mpimg.imread(io.BytesIO(base64.b64decode(src.split(",", 1)[1])))
        assert img.shape[0] > 50 and img.shape[1] > 50  # decodes as a real image
    assert "condensation" in text and "focus" in text
    assert 'src="http' not in text  # self-contained


def test_report_of_a_non_run_directory_is_a_clear_error(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "config.json" in capsys.readouterr().err


def _chromium() -> str:
    """The chromium binary; skip without one, except in CI, which must have it."""
    path = shutil.which("chromium")
    if path is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(
                "CI=true but chromium is not installed: .ci/run installs Debian's "
                "chromium package (apt-get install chromium)"
            )
        pytest.skip("chromium not installed (CI installs it)")
    return path


def test_browser_test_fails_in_ci_without_chromium(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="chromium is not installed"):
        _chromium()
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception):
        _chromium()


def test_report_renders_in_headless_chromium(tmp_path):
    chromium = _chromium()
    _run_dir(tmp_path)
    (tmp_path / "r.html").write_text(render_report(tmp_path))
    # every <img> must have a decoded width > 0 once the page has loaded
    js = (
        "[...document.images].every(i => i.complete && i.naturalWidth > 0)"
        " ? 'ALL-LOADED' : 'MISSING'"
    )
    page = tmp_path / "check.html"
    page.write_text(
        (tmp_path / "r.html")
        .read_text()
        .replace(
            "</body>",
            f"<script>window.onload=()=>{{document.title={js};}}</script></body>",
        )
    )
    out = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "<title>ALL-LOADED</title>" in out


def test_report_of_a_damaged_run_directory_shows_what_it_can(tmp_path):
    """Truncated JSON files (a disk filled up, a copy cut short) do not stop the
    report: each damaged part says it is unreadable, the rest is shown."""
    _run_dir(tmp_path)
    (tmp_path / "stages.json").write_text('[{"stage": "foc')
    write_json(tmp_path / "flow.json", {"status": "success"})  # no stats
    (tmp_path / "flow_metrics.npz").write_bytes(b"")
    (tmp_path / "gd.json").write_text("{")
    (tmp_path / "gd_metrics.npz").write_bytes(b"")
    (tmp_path / "sweep.json").write_text("[1, 2")
    assert main(["report", str(tmp_path)]) == 0
    text = (tmp_path / "report.html").read_text()
    assert "stages.json is unreadable (JSONDecodeError)" in text
    assert "sweep.json is unreadable (JSONDecodeError)" in text
    assert "unreadable (keys)" in text and "unreadable (JSONDecodeError)" in text
    parser = _Images()
    parser.feed(text)
    assert len(parser.srcs) == 2  # the figures are still there
