"""The one look of gflow's figures: sizes, fonts, the stage palette, time axes and
the settings line.

Every figure function is wrapped in ``styled`` (the font sizes below, for figures
``DOC_WIDTH`` wide that are shown at 100 % in the docs), names its clock with
``clock_label``, picks a log time axis with ``time_axis`` when the run spans
decades, draws stages with ``stage_lanes`` / ``stage_marks`` (one lane per stage
kind above the data, labels in the stage legend, no text over the curves) and ends
with ``settings_line``: a footer with the run's key settings.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Mapping

import numpy as np

from gflow.analysis.stage import STAGE_NAMES
from gflow.plotting.figure import SETTINGS_GID, plt

#: inches: a figure at the docs' text width, so that its fonts read at 100 %
DOC_WIDTH = 7.0
#: inches: the height of one panel of a stack of time series
PANEL_HEIGHT = 2.1

#: font sizes and line widths of every gflow figure (points)
RC = {
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "legend.title_fontsize": 8,
    "figure.titlesize": 10,
    "lines.linewidth": 1.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
}

#: One colour per stage kind, the same in every figure (and its legend).
STAGE_COLOURS = {
    "condensation": "tab:blue",
    "focus": "tab:red",
    "dilution": "tab:green",
    "asymmetry_lifting": "tab:purple",
    # the other named moves (never the paper's stages): muted, told apart by shade
    "entropy_fall": "0.55",
    "self_focus": "tab:olive",
    "previous_token_focus": "tab:brown",
    "first_position_focus": "tab:gray",
    "induction_focus": "tab:cyan",
    "head_lifting": "tab:pink",
}

#: the clock of a flow, and of an optimizer run (the sum of its step sizes)
FLOW_CLOCK = "flow time $t$"
STEP_CLOCK = r"$t = \sum\,\eta$"

#: label of the stage lanes' axes, gid of the stage marks
LANES_LABEL = "stage lanes"
MARK_GID = "gflow-stage-mark"

# a caller that knows the run's configuration (``flow_figures``) sets the line here
_SETTINGS: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "gflow_figure_settings", default=None
)


def styled(fn):
    """Run a figure function under ``RC`` (fonts are fixed when artists are made)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with plt.rc_context(RC):
            return fn(*args, **kwargs)

    return wrapper


def clock_label(info: Mapping | None) -> str:
    """The x label of a run's clock from its ``Trajectory.info``: the flow time for
    flows, t = Σ η for optimizer, training and minibatch runs, "time t" otherwise."""
    info = info or {}
    kind = info.get("kind")
    if kind == "flow" or "solver" in info:
        return FLOW_CLOCK
    if kind in ("optimizer", "train", "minibatch") or "optimizer" in info:
        return STEP_CLOCK
    return "time $t$"


def time_axis(ax, t, *, label: str | None = None, decades: float = 2.0) -> str:
    """Put the x axis on a log scale when ``t`` spans more than ``decades`` decades
    (from the first positive save to the last), ``symlog`` if it starts at 0;
    return the scale chosen. ``label``: the x label, if given."""
    t = np.asarray(t, float)
    t = t[np.isfinite(t)]
    pos = t[t > 0]
    scale = "linear"
    if pos.size >= 2 and np.log10(pos.max() / pos.min()) > decades:
        if np.any(t <= 0):
            ax.set_xscale("symlog", linthresh=float(pos.min()), linscale=0.6)
            ax.set_xlim(left=float(t.min()))  # no margin of negative decades
            scale = "symlog"
        else:
            ax.set_xscale("log")
            scale = "log"
    if label is not None:
        ax.set_xlabel(label)
    return scale


def _kinds(stages) -> list[str]:
    present = {s.name for s in stages}
    return [n for n in STAGE_NAMES if n in present]


def stage_lanes(ax, stages, *, row_height: float = 0.045):
    """One lane per stage kind present, in a strip above ``ax`` (outside the data):
    each stage a bar over [t_start, t_end] in its colour, an instant a tick. The
    stage legend (``stage_legend``) names the colours. Returns the strip's axes."""
    kinds = _kinds(stages)
    if not kinds:
        return None
    h = row_height * len(kinds)
    lanes = ax.inset_axes([0.0, 1.01, 1.0, h], sharex=ax)
    lanes.set_label(LANES_LABEL)
    for row, kind in enumerate(reversed(kinds)):
        spans = [(s.t_start, s.t_end - s.t_start) for s in stages if s.name == kind]
        colour = STAGE_COLOURS[kind]
        lanes.broken_barh(spans, (row + 0.1, 0.8), color=colour, alpha=0.75, lw=0)
        instants = [
            s.t_start for s in stages if s.name == kind and s.t_end == s.t_start
        ]
        if instants:
            lanes.scatter(
                instants, [row + 0.5] * len(instants), marker="|", color=colour, s=30
            )
    lanes.set_ylim(0, len(kinds))
    lanes.tick_params(
        axis="both",
        which="both",
        bottom=False,
        left=False,
        labelbottom=False,
        labelleft=False,
    )
    for spine in lanes.spines.values():
        spine.set_visible(False)
    lanes.patch.set_alpha(0.0)
    return lanes


def stage_marks(ax, stages) -> None:
    """A thin line at each stage's start on ``ax``, in the stage's colour (for the
    panels below the one with the lanes)."""
    for s in stages:
        ax.axvline(
            s.t_start, color=STAGE_COLOURS[s.name], lw=0.7, alpha=0.45, gid=MARK_GID
        )


def outside_legend(ax, **kwargs):
    """The axes' legend to the right of its data area, where it covers no curve."""
    kwargs.setdefault("loc", "upper left")
    kwargs.setdefault("bbox_to_anchor", (1.01, 1.0))
    kwargs.setdefault("borderaxespad", 0.0)
    kwargs.setdefault("frameon", False)
    return ax.legend(**kwargs)


def settings_text(info: Mapping | None, **extra) -> str:
    """A short line of a run's key settings from its ``Trajectory.info`` (what made
    it: solver and tolerances, or optimizer, step size and schedule) and ``extra``."""
    info = dict(info or {})
    parts = []
    for key in ("optimizer", "solver", "reference", "schedule"):
        if info.get(key):
            parts.append(str(info[key]))
    for key, name in (("lr", "η"), ("rtol", "rtol"), ("seed", "seed")):
        if info.get(key) is not None:
            parts.append(f"{name} = {info[key]:g}")
    parts += [f"{k} = {v}" for k, v in extra.items() if v is not None]
    return " · ".join(parts)


@contextlib.contextmanager
def figure_settings(text: str):
    """Figures drawn inside this block carry ``text`` as their settings line (for
    callers that know the run's configuration: π, λ, ε, seed, solver)."""
    token = _SETTINGS.set(text)
    try:
        yield
    finally:
        _SETTINGS.reset(token)


def settings_line(fig, text: str = "") -> None:
    """The footer of a run figure: ``figure_settings``' text if set, else ``text``.

    ``save_figure`` keeps room for it below the panels and the stage legend."""
    line = _SETTINGS.get() or text
    if not line:
        return
    fig.text(
        0.01,
        0.01,
        line,
        ha="left",
        va="bottom",
        fontsize=7,
        color="0.3",
        gid=SETTINGS_GID,
    )
