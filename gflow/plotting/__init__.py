"""Figures of runs; the only package that imports matplotlib.

Public names, by concept: the shared figure helpers (``plt`` with the
non-interactive backend already chosen) and style (``STAGE_COLOURS``, the one
stage palette of every figure; ``styled``, ``RC``, ``DOC_WIDTH``, ``STEP_CLOCK``,
``outside_legend`` and ``settings_line`` for figures of one's own in the same
look); figures of stages, heads, sweeps, monitors and text runs; the paper's
figures.
"""

# Figure helpers
from gflow.plotting.figure import plain_log_ticks as plain_log_ticks
from gflow.plotting.figure import plt as plt
from gflow.plotting.figure import save_figure as save_figure
from gflow.plotting.stages import stage_legend as stage_legend
from gflow.plotting.style import DOC_WIDTH as DOC_WIDTH
from gflow.plotting.style import RC as RC
from gflow.plotting.style import STAGE_COLOURS as STAGE_COLOURS
from gflow.plotting.style import STEP_CLOCK as STEP_CLOCK
from gflow.plotting.style import outside_legend as outside_legend
from gflow.plotting.style import settings_line as settings_line
from gflow.plotting.style import styled as styled

# Figures of runs
from gflow.plotting.heads import plot_attention_maps as plot_attention_maps
from gflow.plotting.heads import plot_head_entropy as plot_head_entropy
from gflow.plotting.sweep import plot_departure_records as plot_departure_records
from gflow.plotting.monitor import focus_key_class as focus_key_class
from gflow.plotting.monitor import plot_monitor as plot_monitor
from gflow.plotting.text import plot_attention_rows as plot_attention_rows
from gflow.plotting.text import row_masses as row_masses
from gflow.plotting.text import plot_text_summary as plot_text_summary

# The paper's figures
from gflow.plotting.paper import block_singular_values as block_singular_values
from gflow.plotting.paper import embedding_pca as embedding_pca
from gflow.plotting.paper import entropy_extrema as entropy_extrema
from gflow.plotting.paper import paper_figures as paper_figures
from gflow.plotting.paper import plot_attention_heatmaps as plot_attention_heatmaps
from gflow.plotting.paper import plot_embedding_pca as plot_embedding_pca
from gflow.plotting.paper import plot_entropy_cycles as plot_entropy_cycles
from gflow.plotting.paper import plot_row_norms as plot_row_norms
from gflow.plotting.paper import plot_singular_values as plot_singular_values
from gflow.plotting.paper import row_norms as row_norms
from gflow.plotting.paper import stage_boundaries as stage_boundaries

__all__ = [
    "DOC_WIDTH",
    "RC",
    "STAGE_COLOURS",
    "STEP_CLOCK",
    "block_singular_values",
    "embedding_pca",
    "entropy_extrema",
    "focus_key_class",
    "paper_figures",
    "plain_log_ticks",
    "plot_attention_heatmaps",
    "plot_attention_maps",
    "plot_attention_rows",
    "plot_departure_records",
    "plot_embedding_pca",
    "plot_entropy_cycles",
    "plot_head_entropy",
    "plot_monitor",
    "plot_row_norms",
    "plot_singular_values",
    "plot_text_summary",
    "outside_legend",
    "plt",
    "row_masses",
    "row_norms",
    "save_figure",
    "settings_line",
    "stage_boundaries",
    "stage_legend",
    "styled",
]
