"""A self-contained HTML report of a run directory (figures embedded as data URIs)."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from gflow.runs.files import atomic_write_bytes, read_json, read_jsonl
from gflow.runs.run_dir import RunDirectory

_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1000px; margin: 2em auto;
       color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
td, th { border: 1px solid #ccc; padding: 0.3em 0.7em; text-align: left; }
th { background: #f3f3f3; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
pre { background: #f7f7f7; padding: 1em; overflow-x: auto; font-size: 0.85em; }
.status-success, .status-ok { color: #176317; } .status-diverged { color: #a31515; }
"""


def _table(rows: list[dict]) -> str:
    if not rows:
        return "<p>(none)</p>"
    cols = list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
    body = []
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c, "")
            text = f"{v:.6g}" if isinstance(v, float) else str(v)
            cls = f' class="status-{html.escape(text)}"' if c == "status" else ""
            cells.append(f"<td{cls}>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _stage_tables(stages) -> list[str]:
    """HTML of stages.json: a list of stages (``gflow flow``), or one entry per run
    (``gflow text``: ``{run: {"available": bool, "stages": [...] or "why": ...}}``)."""
    if isinstance(stages, list):
        return [_table(stages)]
    parts = []
    for name, entry in stages.items():
        parts.append(f"<h3>{html.escape(str(name))}</h3>")
        if entry.get("available", True):
            parts.append(_table(entry.get("stages", [])))
        else:
            why = html.escape(str(entry.get("why", "not available")))
            parts.append(f"<p>no stages detected: {why}</p>")
    return parts


def _kv_table(d: dict) -> str:
    return _table([{"name": k, "value": v} for k, v in d.items()])


def _img(path: Path, run_dir: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    name = html.escape(path.relative_to(run_dir).as_posix())
    return (
        f'<figure><img alt="{name}" src="data:image/png;base64,{data}">'
        f"<figcaption>{name}</figcaption></figure>"
    )


def _read(path: Path):
    """(the JSON document, None), or (None, why) for a damaged file: a report of a
    damaged run directory still shows what it can."""
    try:
        return read_json(path), None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return None, type(e).__name__


def _unreadable(name: str, why) -> str:
    return (
        f"<p>{html.escape(name)} is unreadable ({html.escape(str(why or 'shape'))})</p>"
    )


def render_report(run_dir) -> str:
    """The HTML of the report of ``run_dir``: config, statuses, stages, figures."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.json").exists():
        raise FileNotFoundError(
            f"{run_dir} has no config.json: give a directory written by a gflow command"
        )
    cfg = read_json(run_dir / "config.json")
    directory = RunDirectory(run_dir)
    command = directory.command(cfg)
    parts = [
        f"<h1>gflow {html.escape(str(command or 'run'))}: "
        f"{html.escape(run_dir.name)}</h1>"
    ]
    runs = []
    for name in directory.trajectory_names():
        m, why = _read(run_dir / f"{name}.json")
        if why is None and isinstance(m.get("stats"), dict) and "status" in m:
            stats = {k: v for k, v in m["stats"].items() if v is not None}
            runs.append({"run": name, "status": m["status"], **stats})
        else:
            runs.append({"run": name, "status": f"unreadable ({why or 'keys'})"})
    if runs:
        parts += ["<h2>Runs and solver statistics</h2>", _table(runs)]
    if (run_dir / "stages.json").exists():
        stages, why = _read(run_dir / "stages.json")
        ok = why is None and isinstance(stages, (list, dict))
        body = _stage_tables(stages) if ok else [_unreadable("stages.json", why)]
        parts += ["<h2>Stages</h2>", *body]
    if (run_dir / "sweep.json").exists():
        sweep, why = _read(run_dir / "sweep.json")
        if why is None and isinstance(sweep, dict):
            summary = {k: v for k, v in sweep.items() if k != "members"}
            body = [_kv_table(summary), _table(sweep.get("members", []))]
        else:
            body = [_unreadable("sweep.json", why)]
        parts += ["<h2>Sweep</h2>", *body]
    if (run_dir / "events.jsonl").exists():  # a monitor directory
        events = read_jsonl(run_dir / "events.jsonl")
        keep = ("event", "cycle", "layer", "head", "step", "t", "t_onset", "signal")
        parts += [
            "<h2>Monitor events</h2>",
            "<p>layer = head = -1: a global event (condensation; the embedding's "
            "asymmetry lifting).</p>",
            _table([{k: e.get(k, "") for k in keep} for e in events]),
        ]
    figures = directory.figures()
    if figures:
        parts += ["<h2>Figures</h2>", *(_img(p, run_dir) for p in figures)]
    parts += [
        "<h2>Configuration</h2>",
        f"<pre>{html.escape(json.dumps(cfg, indent=2))}</pre>",
    ]
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>gflow report: {html.escape(run_dir.name)}</title>"
        f"<style>{_STYLE}</style></head><body>{''.join(parts)}</body></html>"
    )


def write_report(run_dir, out=None) -> Path:
    """Write ``report.html`` (or ``out``) for ``run_dir``; return its path.

    Written through ``atomic_write_bytes``: a temporary file beside ``out`` renamed
    into place, and an ``out`` that is a symbolic link, FIFO, socket, device or
    directory is refused (``OutputError``, one line naming it), not replaced.
    """
    out = Path(out) if out else Path(run_dir) / "report.html"
    atomic_write_bytes(out, render_report(run_dir).encode())
    return out
