"""save_figure: one draw per PNG, nothing clipped, log axes without mathtext."""

import matplotlib.image as mpimg
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg

from gflow.plotting import plain_log_ticks, save_figure, stage_legend


def _figure_with_a_stage_legend():
    fig, axes = plt.subplots(2, 1, figsize=(6, 5), sharex=True)
    t = np.linspace(0.0, 10.0, 50)
    axes[0].plot(t, np.exp(-t))
    axes[1].semilogy(t, np.exp(-t))
    axes[1].set_xlabel("flow time t")
    stage_legend(fig, ["condensation", "focus"])
    return fig


def test_save_figure_draws_each_figure_once(tmp_path):
    fig = _figure_with_a_stage_legend()
    draws = []
    fig.canvas.mpl_connect("draw_event", lambda event: draws.append(event))
    save_figure(fig, tmp_path / "a.png")
    # a tight bounding box or a layout engine left on the figure draws it twice
    assert len(draws) == 1


def test_the_stage_legend_and_labels_lie_inside_the_png(tmp_path):
    fig = _figure_with_a_stage_legend()
    save_figure(fig, tmp_path / "a.png")
    image = mpimg.imread(tmp_path / "a.png")
    assert image.shape[:2] == (round(5 * 110), round(6 * 110))  # the figure's size
    renderer = FigureCanvasAgg(fig).get_renderer()  # plt.close detached the canvas
    frame = fig.bbox
    legend = fig.legends[0].get_window_extent(renderer)
    assert frame.x0 <= legend.x0 and legend.x1 <= frame.x1
    assert frame.y0 <= legend.y0 and legend.y1 <= frame.y1
    # the panels, their tick labels and the x label stay above the legend
    lowest = min(ax.get_tightbbox(renderer).y0 for ax in fig.axes)
    assert lowest >= legend.y1 - 1.0


def test_log_axes_are_labelled_in_plain_numbers():
    fig, ax = plt.subplots()
    ax.semilogy([0, 1, 2], [1e-4, 1e-2, 1.0])
    plain_log_ticks(fig)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    plt.close(fig)
    assert labels and not any("$" in s for s in labels)  # no mathtext to parse
    assert "1e\u221202" in labels  # LogFormatter, with a true minus sign
    minor = ax.yaxis.get_minor_locator()
    ticks = minor.tick_values(1e-4, 1.0)
    mantissas = {round(v / 10 ** np.floor(np.log10(v)), 6) for v in ticks}
    assert mantissas <= {2.0, 5.0}
