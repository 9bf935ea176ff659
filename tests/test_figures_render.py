"""Every public figure function of gflow.plotting renders on a small synthetic run,
and the figure it draws passes the layout checks (issue 35 point 5): every axes
with data has both axis labels, no two texts overlap, no legend covers data, the
stages use the shared palette, every run figure has a settings line.

The checks read the figure object after ``save_figure`` (which lays it out and
draws it once); ``plt.figure`` is wrapped to keep hold of each figure made.
"""

import csv
import io
import itertools
import json
from pathlib import Path
from types import SimpleNamespace

import jax
import matplotlib
import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection, QuadMesh
from matplotlib.colors import to_rgb
from matplotlib.image import AxesImage
from matplotlib.text import Text

import gflow
from gflow import plotting
from gflow.plotting import STAGE_COLOURS, plt

PNG = b"\x89PNG\r\n\x1a\n"
#: pixels: the least gap between two texts, the margin of a legend over data
TOL = 1.0


# ------------------------------------------------------------------ the checker


def _figures(monkeypatch):
    """Collect every figure made from now on (the functions close them)."""
    made, real = [], plt.figure

    def figure(*args, **kwargs):
        fig = real(*args, **kwargs)
        made.append(fig)
        return fig

    monkeypatch.setattr(plt, "figure", figure)
    return made


def _all_axes(fig):
    out = []
    for ax in fig.axes:
        out.append(ax)
        out += list(ax.child_axes)
    return out


def _is_lanes(ax):
    return ax.get_label() == "stage lanes"


def _is_colorbar(ax):
    return ax.get_label() == "<colorbar>" or hasattr(ax, "_colorbar")


def _data_lines(ax):
    """The lines of ``ax`` drawn in data coordinates (not axhline/axvline marks)."""
    return [
        line
        for line in ax.get_lines()
        if line.get_visible()
        and line.get_transform() == ax.transData
        and np.size(line.get_xdata()) > 0
    ]


def _has_data(ax):
    if _is_lanes(ax) or _is_colorbar(ax) or not ax.get_visible() or not ax.axison:
        return False
    images = [a for a in ax.get_children() if isinstance(a, AxesImage)]
    meshes = [c for c in ax.collections if isinstance(c, (QuadMesh, PathCollection))]
    return bool(_data_lines(ax) or images or meshes)


def _label_of(ax, which):
    """The axis label of ``ax`` or of an axes it shares that axis with (a column
    of panels is labelled once)."""
    get = ax.get_xlabel if which == "x" else ax.get_ylabel
    if get():
        return get()
    group = ax.get_shared_x_axes() if which == "x" else ax.get_shared_y_axes()
    for other in group.get_siblings(ax):
        label = other.get_xlabel() if which == "x" else other.get_ylabel()
        if label:
            return label
    return ""


def _tick_labels(axis):
    """The tick labels drawn: visible, non-empty and within the view (compared on
    the axis's scale: on a log axis 1e-19 lies far below a view from 1e-17)."""
    scale = axis.get_transform()
    lo, hi = sorted(scale.transform(np.asarray(axis.get_view_interval(), float)))
    tol = 1e-9 * (hi - lo)
    out = []
    for ticks in (axis.get_major_ticks(), axis.get_minor_ticks()):
        for tick in ticks:
            loc = tick.get_loc()
            if loc is None:
                continue
            at = float(scale.transform(np.array([float(loc)]))[0])
            if not (np.isfinite(at) and lo - tol <= at <= hi + tol):
                continue
            for label in (tick.label1, tick.label2):
                if label.get_visible() and label.get_text():
                    out.append(label)
    return out


def _texts(fig):
    """Every text drawn: figure texts and legends, and per axes its titles, axis
    labels, tick labels, texts, annotations and legend."""
    texts = list(fig.texts)
    for name in ("_suptitle", "_supxlabel", "_supylabel"):
        if getattr(fig, name, None) is not None:
            texts.append(getattr(fig, name))
    legends = list(fig.legends)
    for ax in _all_axes(fig):
        if not ax.get_visible():
            continue
        texts += [ax.title, ax._left_title, ax._right_title]
        if ax.axison:
            texts += [ax.xaxis.label, ax.yaxis.label]
            texts += _tick_labels(ax.xaxis) + _tick_labels(ax.yaxis)
        texts += list(ax.texts)
        if ax.get_legend() is not None:
            legends.append(ax.get_legend())
    for legend in legends:
        texts += list(legend.get_texts()) + [legend.get_title()]
    drawn = [t for t in texts if isinstance(t, Text) and t.get_visible()]
    # by identity: the suptitle is also one of fig.texts
    return list({id(t): t for t in drawn if t.get_text()}.values())


def _overlaps(a, b, gap=TOL):
    """Whether two boxes overlap or come closer than ``gap`` pixels (texts that
    touch, such as "0" and "1e−02" side by side, read as one)."""
    return (
        min(a.x1, b.x1) - max(a.x0, b.x0) > -gap
        and min(a.y1, b.y1) - max(a.y0, b.y0) > -gap
    )


def _legends(fig):
    legends = [(leg, None) for leg in fig.legends]
    for ax in _all_axes(fig):
        if ax.get_legend() is not None:
            legends.append((ax.get_legend(), ax))
    return legends


def layout_problems(fig) -> list[str]:
    """What the checks find wrong with a drawn figure (empty: none)."""
    renderer = FigureCanvasAgg(fig).get_renderer()  # plt.close detached the canvas
    fig.draw(renderer)
    problems = []
    # (a) every axes with data has an x and a y label
    for ax in _all_axes(fig):
        if _has_data(ax):
            for which in "xy":
                if not _label_of(ax, which):
                    problems.append(f"axes {ax.get_title()!r} has no {which} label")
    # (b) no two texts overlap
    texts = _texts(fig)
    boxes = [t.get_window_extent(renderer) for t in texts]
    for (i, a), (j, b) in itertools.combinations(enumerate(boxes), 2):
        if _overlaps(a, b):
            problems.append(
                f"texts overlap: {texts[i].get_text()!r} and {texts[j].get_text()!r}"
            )
    # (c) no legend covers a data point (of its axes, or of any for a figure one)
    for legend, owner in _legends(fig):
        box = legend.get_window_extent(renderer).padded(-TOL)
        axes = [owner] if owner is not None else _all_axes(fig)
        for ax in axes:
            for line in _data_lines(ax):
                xy = np.column_stack(
                    [
                        np.asarray(line.get_xdata(), float),
                        np.asarray(line.get_ydata(), float),
                    ]
                )
                xy = xy[np.all(np.isfinite(xy), axis=1)]
                if not len(xy):
                    continue
                pts = ax.transData.transform(xy)
                inside = ax.bbox.contains  # points outside the view are not drawn
                drawn = [p for p in pts if inside(*p)]
                if any(box.contains(*p) for p in drawn):
                    problems.append(f"a legend covers {line.get_label()!r}")
                    break
    # (d) the stages in the shared palette
    palette = {n.replace("_", " "): to_rgb(c) for n, c in STAGE_COLOURS.items()}
    for legend, _ in _legends(fig):
        for text, handle in zip(legend.get_texts(), legend.legend_handles):
            name = text.get_text()
            if name in palette:
                colour = (
                    handle.get_color()
                    if hasattr(handle, "get_xdata")
                    else handle.get_facecolor()
                )
                if not np.allclose(to_rgb(colour), palette[name], atol=1e-6):
                    problems.append(f"stage {name!r} is not in the shared colour")
    allowed = {tuple(np.round(c, 6)) for c in palette.values()}
    for ax in _all_axes(fig):
        if _is_lanes(ax):
            for coll in ax.collections:
                for c in np.atleast_2d(coll.get_facecolor()):
                    if tuple(np.round(c[:3], 6)) not in allowed:
                        problems.append(f"a stage lane in a foreign colour {c[:3]}")
    return problems


def _settings_line(fig) -> str:
    texts = [t.get_text() for t in fig.texts if t.get_gid() == "gflow-settings"]
    return texts[0] if texts else ""


def _rendered(made, path, *, settings=True):
    """The one figure a call made, its PNG written, checked."""
    assert path.read_bytes()[:8] == PNG
    assert len(made) >= 1
    fig = made[-1]
    assert layout_problems(fig) == []
    if settings:
        assert _settings_line(fig), "a run figure without its settings line"
    return fig


# ------------------------------------------------------------------ the checker fails


def test_the_checker_catches_a_bad_figure():
    fig, axes = plt.subplots(1, 2, figsize=(4, 3))
    t = np.linspace(0.0, 1.0, 20)
    axes[0].plot(t, t, label="a curve")  # no axis labels
    axes[0].legend(loc="center")  # over the curve
    axes[1].plot(t, t**2)
    axes[1].set_xlabel("t")
    axes[1].set_ylabel("y")
    axes[1].text(0.5, 0.5, "one text", transform=axes[1].transAxes)
    axes[1].text(0.5, 0.5, "another text", transform=axes[1].transAxes)
    legend = fig.legend(
        [plt.Rectangle((0, 0), 1, 1, color="tab:orange")], ["focus"], loc="lower left"
    )
    assert legend is not None
    problems = layout_problems(fig)
    plt.close(fig)
    joined = "\n".join(problems)
    assert "has no x label" in joined and "has no y label" in joined
    assert "texts overlap: 'one text' and 'another text'" in joined
    assert "a legend covers 'a curve'" in joined
    assert "stage 'focus' is not in the shared colour" in joined


def test_a_clean_figure_passes_the_checker(tmp_path):
    fig, ax = plt.subplots(figsize=(5, 3))
    t = np.linspace(0.0, 1.0, 20)
    ax.plot(t, t, label="a curve")
    ax.set_xlabel("t")
    ax.set_ylabel("y")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    plotting.save_figure(fig, tmp_path / "ok.png")
    assert layout_problems(fig) == []


def test_a_figure_of_ones_own_in_the_package_style(tmp_path, monkeypatch):
    """The public style helpers make a figure the checker accepts: ``styled`` sets
    ``RC``'s fonts while it draws, ``outside_legend`` keeps the legend off the
    data, ``settings_line`` writes the footer."""
    made = _figures(monkeypatch)

    @plotting.styled
    def draw(path):
        fig, ax = plt.subplots(figsize=(plotting.DOC_WIDTH, 2.5))
        t = np.linspace(0.0, 1.0, 30)
        ax.plot(t, np.exp(-t), label="loss")
        ax.set_xlabel(plotting.STEP_CLOCK)
        ax.set_ylabel("loss")
        assert ax.xaxis.label.get_fontsize() == plotting.RC["axes.labelsize"]
        plotting.outside_legend(ax)
        plotting.settings_line(fig, "adam · η = 0.01")
        plotting.save_figure(fig, path)

    draw(tmp_path / "own.png")
    fig = _rendered(made, tmp_path / "own.png")
    assert _settings_line(fig) == "adam · η = 0.01"
    assert fig.get_figwidth() == plotting.DOC_WIDTH


# ------------------------------------------------------------------ small runs

#: t from 0 over four decades: the time axis turns symlog
T = np.concatenate([[0.0], np.geomspace(0.01, 100.0, 40)])
#: overlapping stages of every kind, drawn as stacked lanes
STAGES = [
    gflow.Stage("condensation", 0.0, 0.5, 1),
    gflow.Stage("focus", 0.3, 5.0, 1),
    gflow.Stage("dilution", 4.0, 30.0, 1),
    gflow.Stage("asymmetry_lifting", 20.0, 100.0, 1),
]
PI = np.array([0.5, 0.3, 0.2])


def _sig(t, at, width):
    return 1.0 / (1.0 + np.exp(-(np.log10(t + 1e-3) - np.log10(at)) / width))


@pytest.fixture(scope="module")
def markov():
    """A Markov flow's metrics and snapshots (d = 3, m = 3) with one zigzag in the
    entropy, no solver run."""
    n, d = T.size, 3
    rng = np.random.default_rng(0)
    up = _sig(T, 0.5, 0.2)
    ent = 1.0 - 0.6 * _sig(T, 3.0, 0.1) + 0.4 * _sig(T, 20.0, 0.1)
    attn = np.tile(PI, (n, d, 1))
    focus = np.eye(d)[None] * up[:, None, None]
    attn = (attn + 3 * focus) / (1 + 3 * up)[:, None, None]
    W = rng.normal(size=(d, 3))
    grow = (0.01 + up)[:, None, None]
    params = SimpleNamespace()  # the blocks _snapshots reads, stacked over time
    params.W_E = W[None] * grow
    params.W_P = (0.1 + 0.0 * grow) * rng.normal(size=(1, 3, d))
    params.W_Q = W.T[None] * grow
    params.W_K = W.T[None] * grow
    traj = gflow.Trajectory(
        t=T,
        metrics={"loss": 1.1 - 0.3 * up, "attention": attn, "attention_entropy": ent},
        final=None,
        params=params,
        info={"kind": "flow", "solver": "Tsit5", "rtol": 1e-6},
    )
    return traj


def _heads_traj(kind):
    n = T.size
    ent = np.full((n, 1, 2), np.log(6.0))
    ent[:, 0, 1] -= 1.2 * _sig(T, 3.0, 0.1)
    info = {"kind": kind, "optimizer": "adamw"} if kind == "train" else {"kind": kind}
    return gflow.Trajectory(
        t=T,
        metrics={"loss": 1 - 0.1 * _sig(T, 1, 0.2), "head_entropy": ent},
        final=None,
        info=info,
    )


HEAD_STAGES = [
    gflow.Stage("condensation", 0.0, 0.5, 1, -1, -1),
    gflow.Stage("focus", 1.0, 8.0, 1, 0, 1),
]


# ------------------------------------------------------------------ the figures


def test_entropy_cycles(markov, tmp_path, monkeypatch):
    made = _figures(monkeypatch)
    path = plotting.plot_entropy_cycles(markov, STAGES, tmp_path / "e.png")
    fig = _rendered(made, path)
    ax = fig.axes[0]
    assert ax.get_xscale() == "symlog"  # four decades
    assert ax.get_ylabel().startswith(r"$\sum_i \pi_i H(a_{i\cdot})$")
    assert ax.get_xlabel() == "flow time $t$"
    lanes = [a for a in ax.child_axes if a.get_label() == "stage lanes"]
    assert len(lanes) == 1 and len(lanes[0].collections) == 4  # one lane per kind
    assert not any(t.get_rotation() == 90 for t in ax.texts)  # no vertical labels


def test_singular_values_row_norms_pca_heatmaps(markov, tmp_path, monkeypatch):
    made = _figures(monkeypatch)
    _rendered(
        made, plotting.plot_singular_values(markov, tmp_path / "s.png", stages=STAGES)
    )
    fig = _rendered(
        made, plotting.plot_row_norms(markov, tmp_path / "r.png", pi=PI, stages=STAGES)
    )
    assert "π" in _settings_line(fig)
    _rendered(
        made, plotting.plot_embedding_pca(markov, tmp_path / "p.png", stages=STAGES)
    )
    _rendered(
        made, plotting.plot_attention_heatmaps(markov, STAGES, tmp_path / "a.png")
    )


def test_paper_figures_carry_the_callers_settings(markov, tmp_path, monkeypatch):
    made = _figures(monkeypatch)
    out = plotting.paper_figures(tmp_path, markov, STAGES, pi=PI)
    assert [p.name for p in out] == [
        "paper_entropy.png",
        "paper_attention.png",
        "paper_singular_values.png",
        "paper_pca.png",
        "paper_row_norms.png",
    ]
    assert len(made) == len(out)
    for fig in made:
        assert layout_problems(fig) == []
        assert _settings_line(fig)


def test_head_entropy_names_the_clock(tmp_path, monkeypatch):
    made = _figures(monkeypatch)
    plotting.plot_head_entropy(
        _heads_traj("train"), tmp_path / "h.png", stages=HEAD_STAGES, title="adamw"
    )
    fig = _rendered(made, tmp_path / "h.png")
    bottom = [ax for ax in fig.axes if ax.get_xlabel()]
    # an AdamW run's clock is t = Σ η, not the flow's time (issue 35 point 4)
    assert bottom and all(r"\sum" in ax.get_xlabel() for ax in bottom)
    assert not any("flow" in ax.get_xlabel() for ax in bottom)
    assert "adamw" in _settings_line(fig)
    plotting.plot_head_entropy(_heads_traj("flow"), tmp_path / "f.png")
    fig = _rendered(made, tmp_path / "f.png", settings=False)
    assert {ax.get_xlabel() for ax in fig.axes if ax.get_xlabel()} == {"flow time $t$"}


@pytest.mark.slow  # rendering only (4 s); .ci/run runs it
def test_attention_maps(tmp_path, monkeypatch):
    made = _figures(monkeypatch)
    model = gflow.Transformer.init(
        d_vocab=3,
        d_model=2,
        n_layers=1,
        n_heads=1,
        init_scale=0.5,
        key=jax.random.key(0),
    )
    plotting.plot_attention_maps(model, np.array([0, 1, 2, 1]), tmp_path / "m.png")
    # a model's figure, no run behind it: no settings line of its own
    _rendered(made, tmp_path / "m.png", settings=False)
    # the paper's model ([s, s]: one layer, one head) and the positional one (its
    # last row [s]: one query), as gflow train --model attention draws them
    one = gflow.AttentionModel.init(
        d_vocab=3, d_model=2, init_scale=0.5, key=jax.random.key(0)
    )
    row = gflow.text.PositionalAttentionModel.init(
        d_vocab=3, d_model=2, init_scale=0.5, context_length=4, key=jax.random.key(0)
    )
    for m, queries in ((one, 4), (row, 1)):
        plotting.plot_attention_maps(m, np.array([0, 1, 2, 1]), tmp_path / "a.png")
        fig = _rendered(made, tmp_path / "a.png", settings=False)
        (image,) = fig.axes[0].get_images()
        assert image.get_array().shape == (queries, 4)


def test_departure_records(tmp_path, monkeypatch):
    made = _figures(monkeypatch)
    members = [
        {
            "lr": lr,
            "bound": 2.0 / lr,
            "predicted": 50.0 / lr,
            "first_rise": None,
            "own_prediction": 60.0 / lr,
            "t": [0.0, 50.0, 100.0],
            "lambda_max": [0.5, 1.0 + lr, 1.2],
        }
        for lr in (0.1, 0.4, 1.6)
    ]
    results = {
        "flow": {"t": [0.0, 50.0, 100.0], "lambda_max": [0.5, 1.0, 1.5]},
        "sgd": {"t1": 100.0, "stability": 2.0, "speed": 1, "members": members},
    }
    plotting.plot_departure_records(results, tmp_path / "d.png")
    fig = _rendered(made, tmp_path / "d.png")
    # every member's step size is labelled on the η axis (0.4 was not)
    lr_axes = [
        ax
        for ax in fig.axes
        if "eta" in ax.get_xlabel() and "sum" not in ax.get_xlabel()
    ]
    labels = {t.get_text() for t in lr_axes[0].get_xticklabels()}
    assert {"0.1", "0.4", "1.6"} <= labels


def _monitor_dir(path):
    """A monitor directory in the files ``gflow.monitor`` documents: config.json,
    metrics.csv, events.jsonl (1 layer × 2 heads, one tracked query)."""
    path.mkdir()
    shapes = {
        "loss": [],
        "head_entropy": [1, 2],
        "head_self": [1, 2],
        "head_tracked_on_top": [1, 2, 1],
    }
    config = {
        "command": "monitor",
        "every": 5,
        "probe_shape": [4, 8],
        "window": 3,
        "shapes": shapes,
    }
    (path / "config.json").write_text(json.dumps(config))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        [
            "step",
            "t",
            "loss",
            "head_entropy_0_0",
            "head_entropy_0_1",
            "head_self_0_0",
            "head_self_0_1",
            "head_tracked_on_top_0_0_0",
            "head_tracked_on_top_0_1_0",
        ]
    )
    for step in range(0, 200, 5):
        t = 0.01 * step
        row = [step, t, 1 / (1 + t), 1.7, 1.7 - t / 2, 0.2, 0.2, 0.4, 0.4 + t / 4]
        w.writerow(row)
    (path / "metrics.csv").write_text(buf.getvalue())
    events = [
        gflow.Stage(
            "condensation",
            0.3,
            0.3,
            1,
            -1,
            -1,
            onset=0.1,
            step=30,
            signal="loss",
            value=0.8,
            reference=1.0,
            threshold=0.1,
        ),
        gflow.Stage(
            "focus",
            1.2,
            1.2,
            1,
            0,
            1,
            onset=0.8,
            step=120,
            signal="head_entropy",
            value=1.1,
            reference=1.7,
            threshold=0.1,
        ),
    ]
    (path / "events.jsonl").write_text(
        "".join(json.dumps(e.to_dict()) + "\n" for e in events)
    )
    return path


def test_monitor(tmp_path, monkeypatch):
    made = _figures(monkeypatch)
    out = plotting.plot_monitor(_monitor_dir(tmp_path / "mon"))
    assert out.name == "monitor.png"
    fig = _rendered(made, out)
    assert {ax.get_xlabel() for ax in fig.axes if ax.get_xlabel()} == {
        r"$t = \sum\,\eta$"
    }
    # the timeline names the focus of head (0, 1): its tracked mass on top rose
    (line,) = [ax for ax in fig.axes if ax.get_ylabel() == "layer, head"]
    assert [t.get_text() for t in line.get_yticklabels()] == [
        "global",
        "L0 H0",
        "L0 H1",
    ]
    assert [t.get_text() for t in line.get_legend().get_texts()] == ["top token"]


def _stage(onset, t, layer=0, head=0):
    if onset is None:  # an offline stage
        return gflow.Stage("focus", t, t, 1, layer, head)
    online = dict(step=0, signal="head_entropy", value=0.0, reference=0.0)
    return gflow.Stage(
        "focus", t, t, 1, layer, head, onset=onset, threshold=0.1, **online
    )


def test_focus_key_class_is_the_class_whose_mass_rose_most():
    """Oracle: three rows of hand-set masses (top, self, rest = 1 - both)."""
    from gflow.plotting import focus_key_class

    t = np.array([0.0, 1.0, 2.0])
    top = np.array([0.2, 0.6, 0.1]).reshape(3, 1, 1, 1)  # [t, l, h, q]
    self_ = np.array([0.2, 0.1, 0.7]).reshape(3, 1, 1)
    m = {"head_tracked_on_top": top, "head_self": self_}
    assert focus_key_class(t, m, _stage(0.0, 1.0)) == "top token"  # +0.4 on top
    assert focus_key_class(t, m, _stage(1.0, 2.0)) == "itself"  # +0.6 on self
    # from t = 0 to 2: top −0.1, self +0.5, rest −0.4: itself; an onset between
    # saves reads the save before it
    assert focus_key_class(t, m, _stage(0.5, 2.0)) == "itself"
    rest = {"head_tracked_on_top": top[::-1] * 0 + 0.1, "head_self": self_ * 0}
    rest["head_tracked_on_top"][0] = 0.5  # top falls 0.5 → 0.1: the rest rises
    assert focus_key_class(t, rest, _stage(0.0, 2.0)) == "other keys"
    assert focus_key_class(t, {"head_tracked_on_top": top}, _stage(0.0, 1.0)) == ""
    assert focus_key_class(t, m, _stage(float("nan"), 1.0)) == ""  # no span
    assert focus_key_class(t, m, _stage(None, 1.0)) == ""


def _text_dir(path):
    """A text run directory: config.json, vocab.json, the run's trajectory
    (``gflow.save_trajectory``) and its tracked rows."""
    path.mkdir()
    tokens = ["▁the", "▁a", "cat", "sat"]
    (path / "vocab.json").write_text(json.dumps([{"token": t} for t in tokens]))
    config = {"queries": {"cat": 2}, "top": ["▁the"], "corpus": "tiny", "seed": 0}
    (path / "config.json").write_text(json.dumps(config))
    n = T.size
    focus = _sig(T, 1.0, 0.2)
    rows = np.tile([0.4, 0.3, 0.2, 0.1], (n, 1, 1))
    rows[:, 0, 0] += 0.5 * focus
    rows[:, 0, 1:] *= (1 - 0.5 * focus / 0.6)[:, None]
    model = gflow.AttentionModel.init(
        d_vocab=4, d_model=2, init_scale=0.5, key=jax.random.key(0)
    )
    traj = gflow.Trajectory(
        t=T,
        metrics={
            "loss": 1.3 - 0.2 * focus,
            "query_entropy": (1.2 - 0.5 * focus)[:, None],
            "query_on_top1": rows[:, :, 0],
            "query_on_self": rows[:, :, 2],
            "attention_entropy": 1.2 - 0.3 * focus,
            "sv_W_E": np.column_stack([0.1 + focus, 0.1 + 0 * focus]),
        },
        final=model,
        info={"kind": "optimizer", "optimizer": "adamw"},
    )
    gflow.save_trajectory(path, traj, name="adamw")
    buf = io.BytesIO()
    np.savez(buf, t=T, rows=rows, queries=np.array([2]))
    (path / "adamw_rows.npz").write_bytes(buf.getvalue())
    return path


def test_text_figures(tmp_path, monkeypatch):
    run_dir = _text_dir(tmp_path / "text")
    made = _figures(monkeypatch)
    out = plotting.plot_attention_rows(run_dir, "adamw", others=1)
    assert out.name == "attention_rows_adamw.png"
    fig = _rendered(made, out)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend[0].startswith("on ") and "on itself" in legend
    assert legend[-1] == "on every other key"
    assert fig.axes[0].get_xscale() == "symlog"  # the rows move in the first decades
    out = plotting.plot_text_summary(run_dir, ["adamw"])
    assert out.name == "text_summary.png"
    fig = _rendered(made, out)
    assert {ax.get_xlabel() for ax in fig.axes if ax.get_xlabel()} == {
        r"$t = \sum\,\eta$"
    }


def test_row_masses_split_the_row_and_name_the_largest_other_key():
    """Oracle: a hand-made row over 3 saves, 5 key types (top 0, query 2)."""
    from gflow.plotting import row_masses

    R = np.array(
        [
            [0.2, 0.2, 0.2, 0.2, 0.2],
            [0.5, 0.1, 0.1, 0.1, 0.2],
            [0.1, 0.0, 0.6, 0.3, 0.0],
        ]
    )
    m = row_masses(R, q=2, top=0, others=1)
    assert list(m) == ["top", "self", 3, "rest"]  # key 3 peaks at 0.3, key 4 at 0.2
    np.testing.assert_allclose(m["top"], R[:, 0])
    np.testing.assert_allclose(m["self"], R[:, 2])
    np.testing.assert_allclose(m["rest"], R[:, 1] + R[:, 4])
    np.testing.assert_allclose(sum(m.values()), 1.0)
    # the query is the top type: no "self" line; others=0 leaves only the rest
    m = row_masses(R, q=0, top=0, others=0)
    assert list(m) == ["top", "rest"]
    np.testing.assert_allclose(m["rest"], 1 - R[:, 0])


#: px: the docs show a figure 770 px wide; none may then be taller than this
#: (issue 56 point 5)
DOCS_WIDTH_PX, DOCS_MAX_HEIGHT_PX = 770, 1200
DOCS = Path(__file__).resolve().parents[1] / "docs"


def _height_at_docs_width(path) -> float:
    from PIL import Image

    with Image.open(path) as im:
        width, height = im.size
    return height * DOCS_WIDTH_PX / width


def _many_rows_dir(path, n):
    """A text run directory with ``n`` tracked rows, each moving to the top type
    ▁ at its own pace, and one still row (named, not drawn)."""
    path.mkdir()
    d = n + 4
    tokens = ["▁"] + [f"w{i}" for i in range(1, d)]
    (path / "vocab.json").write_text(json.dumps([{"token": t} for t in tokens]))
    config = {"top": ["▁"], "corpus": "tiny", "seed": 0}
    (path / "config.json").write_text(json.dumps(config))
    info = {"info": {"kind": "optimizer", "optimizer": "adamw"}}
    (path / "adamw.json").write_text(json.dumps(info))
    rng = np.random.default_rng(0)
    rows = np.tile(rng.dirichlet(np.ones(d), size=n + 1), (T.size, 1, 1))
    for j in range(n):  # row j moves to ▁ (and row n stays still)
        rise = (0.3 + 0.7 * j / n) * _sig(T, 1.0, 0.2)[:, None]
        rows[:, j, :] = (1 - rise) * rows[:, j, :] + rise * np.eye(d)[0]
    buf = io.BytesIO()
    np.savez(buf, t=T, rows=rows, queries=np.arange(1, n + 2))
    (path / "adamw_rows.npz").write_bytes(buf.getvalue())
    return path


@pytest.mark.parametrize("n", [12, pytest.param(30, marks=pytest.mark.slow)])
def test_attention_rows_stay_within_the_docs_height(n, tmp_path, monkeypatch):
    """Many tracked rows wrap into a grid, not a stack taller than the docs allow:
    at most 1200 px tall at the docs' 770 px, whatever the number of rows (a stack
    of 12 was 2409 px), and still a clean layout."""
    run_dir = _many_rows_dir(tmp_path / "text", n)
    made = _figures(monkeypatch)
    out = plotting.plot_attention_rows(run_dir, "adamw")
    assert _height_at_docs_width(out) <= DOCS_MAX_HEIGHT_PX
    fig = _rendered(made, out)
    drawn = [ax for ax in fig.axes if _has_data(ax)]
    assert len(drawn) == n  # every moving row, the still one named in the title
    assert f"not drawn: no entry moves by 0.05: 'w{n + 1}'" in fig.get_suptitle()


def test_every_docs_figure_stays_within_the_docs_height():
    """Every PNG under docs/ is at most 1200 px tall shown at the docs' 770 px."""
    pngs = sorted(DOCS.rglob("*.png"))
    assert pngs
    tall = {
        str(p.relative_to(DOCS)): round(h)
        for p in pngs
        if (h := _height_at_docs_width(p)) > DOCS_MAX_HEIGHT_PX
    }
    assert tall == {}


def test_every_public_figure_function_is_rendered_here():
    """The list above covers every ``plot_*`` / ``*_figures`` export."""
    exports = vars(plotting)["__all__"]  # the list, not a name of it
    covered = {
        "plot_entropy_cycles",
        "plot_singular_values",
        "plot_row_norms",
        "plot_embedding_pca",
        "plot_attention_heatmaps",
        "paper_figures",
        "plot_head_entropy",
        "plot_attention_maps",
        "plot_departure_records",
        "plot_monitor",
        "plot_attention_rows",
        "plot_text_summary",
    }
    public = {n for n in exports if n.startswith("plot_") or n.endswith("_figures")}
    assert public == covered


def test_the_palette_is_one_colour_per_stage_kind():
    from gflow.analysis import MOVE_NAMES, STAGE_NAMES

    kinds = ["condensation", "focus", "dilution", "asymmetry_lifting"]
    assert list(STAGE_NAMES) == kinds
    assert list(STAGE_COLOURS) == kinds + list(MOVE_NAMES)  # every kind of Stage
    assert len({to_rgb(c) for c in STAGE_COLOURS.values()}) == len(STAGE_COLOURS)
    assert matplotlib.get_backend().lower() == "agg"
