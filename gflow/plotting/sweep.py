"""Figures of learning-rate sweeps and optimizer-vs-flow comparisons."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gflow.plotting.figure import plt, save_figure
from gflow.plotting.style import (
    DOC_WIDTH,
    PANEL_HEIGHT,
    STEP_CLOCK,
    outside_legend,
    settings_line,
    styled,
    time_axis,
)

#: the distance of a run to its reference, in mathtext
_DISTANCE = r"$\|\theta_\eta(t) - \theta_{\mathrm{ref}}(t)\|$"


def _lr_ticks(ax, lrs) -> None:
    """Label every member's step size on a log η axis (the decades alone leave
    η = 0.4 unlabelled), and no minor labels that could collide with them."""
    lrs = sorted({float(x) for x in lrs})
    ax.set_xticks(lrs, [f"{x:g}" for x in lrs])
    ax.xaxis.set_minor_formatter(plt.NullFormatter())


def _sweep_settings(result: Mapping) -> str:
    run = result.get("run")
    info = getattr(run, "info", {}) or {}
    lrs = ", ".join(f"{r['lr']:g}" for r in result["members"])
    parts = [f"η ∈ {{{lrs}}}"]
    if "t1" in info:
        parts.append(f"t1 = {info['t1']:g}")
    if result.get("stability") is not None:
        parts.append(f"c = {result['stability']:g}")
    if result.get("threshold") is not None:
        parts.append(f"threshold {result['threshold']:g}")
    return " · ".join(parts)


@styled
def plot_error_vs_lr(result: Mapping, path, *, title: str = "") -> None:
    """Error (max parameter distance over [0, t1]) against η, log-log, with the fit."""
    ok = [r for r in result["members"] if r["status"] == "success" and r["error"]]
    fig, ax = plt.subplots(figsize=(DOC_WIDTH, 3.6))
    if ok:
        lr = np.array([r["lr"] for r in ok])
        err = np.array([r["error"] for r in ok])
        ax.loglog(lr, err, "o", color="k", label="members")
        if result["order"] is not None and np.isfinite(result["order"]):
            grid = np.geomspace(lr.min(), lr.max(), 50)
            fit = np.exp(result["intercept"]) * grid ** result["order"]
            ax.loglog(grid, fit, "--", label=f"fit: order {result['order']:.3f}")
    for r in result["members"]:
        if r["status"] != "success":
            ax.axvline(
                r["lr"], color="tab:red", ls=":", label=f"η={r['lr']:g} diverged"
            )
    if ok:
        _lr_ticks(ax, lr)
    ax.set_xlabel(r"step size $\eta$")
    ax.set_ylabel(r"$\max_t$ " + _DISTANCE)
    ax.set_title(f"{title}: error vs η", loc="left")
    outside_legend(ax)
    settings_line(fig, _sweep_settings(result))
    save_figure(fig, path)


@styled
def plot_trajectories(result: Mapping, path, *, title: str = "") -> None:
    """Loss of every member overlaid on its reference, and the distance against t."""
    run = result["run"]
    fig, axes = plt.subplots(
        2, 1, figsize=(DOC_WIDTH, 2 * PANEL_HEIGHT + 1.2), sharex=True
    )
    refs = result["references"]
    for m, lr in enumerate(run.lrs):
        ok = np.isfinite(run.loss[m])
        (line,) = axes[0].plot(run.t[m][ok], run.loss[m][ok], lw=1, label=f"η={lr:g}")
        if m in result["comparisons"]:
            cmp = result["comparisons"][m]
            axes[1].semilogy(
                cmp["t"], cmp["distance"]["total"], lw=1, color=line.get_color()
            )
    if refs:
        ref = refs[min(refs, key=lambda m: run.lrs[m])]
        axes[0].plot(ref.t, ref.metrics["loss"], "k--", lw=1.5, label="reference")
    axes[0].set_ylabel("loss (nats)")
    outside_legend(axes[0])
    axes[0].set_title(f"{title}: trajectories on the shared clock", loc="left")
    axes[1].set_ylabel(_DISTANCE)
    time_axis(axes[1], np.concatenate([np.ravel(x) for x in run.t]))
    axes[1].set_xlabel(STEP_CLOCK + r" $= k\eta$")
    settings_line(fig, _sweep_settings(result))
    save_figure(fig, path)


@styled
def plot_departures(result: Mapping, path, *, title: str = "") -> None:
    """λ_max along the reference with the bounds c/η (one colour per member; the
    bounds above the view are named in the corner, not in the legend), and
    predicted vs measured τ(η)."""
    fig, axes = plt.subplots(2, 1, figsize=(DOC_WIDTH, 2 * PANEL_HEIGHT + 1.6))
    sharp = result.get("sharpness")
    c = result["stability"]
    ax = axes[0]
    if sharp is not None:
        ax.plot(
            sharp["t"],
            sharp["lambda_max"],
            "k",
            label=r"$\lambda_{\max}$ along reference",
        )
        bounds = [c / r["lr"] for r in result["members"]]
        top = min(
            max(2 * np.max(sharp["lambda_max"]), 1.1 * min(bounds)), 1.1 * max(bounds)
        )
        ax.set_ylim(0, top)
        off = []
        for k, r in enumerate(result["members"]):
            bound = c / r["lr"]
            if bound > top:
                off.append(f"{r['lr']:g}")
                continue
            ax.axhline(
                bound, ls=":", lw=1.2, color=f"C{k}", label=f"{c:g}/η, η = {r['lr']:g}"
            )
        if off:
            ax.text(
                1.01,
                0.0,
                f"c/η above the view\nfor η = {', '.join(off)}",
                transform=ax.transAxes,
                va="bottom",
                ha="left",
                fontsize=7,
            )
        time_axis(ax, sharp["t"])
    ax.set_xlabel(STEP_CLOCK)
    ax.set_ylabel(r"$\lambda_{\max}(H)$")
    outside_legend(ax)
    ax.set_title(f"{title}: sharpness", loc="left")
    ax = axes[1]
    t1 = result["run"].info["t1"]
    for key, marker, label in (
        ("predicted_departure", "s", "predicted (λ_max > c/η)"),
        ("first_rise_time", "^", "measured: first loss rise"),
        ("departure_time", "o", f"distance > {result.get('threshold', '')}"),
    ):
        lr = [r["lr"] for r in result["members"]]
        tau = [np.nan if r.get(key) is None else r[key] for r in result["members"]]
        # "never before t1" and departures after t1 are drawn on the t1 line
        tau = [t1 if not np.isfinite(x) or x > t1 else x for x in tau]
        ax.semilogx(lr, tau, marker, ls="none", label=label, alpha=0.7)
    ax.axhline(t1, color="gray", lw=0.8, ls="--", label="t1: no departure before")
    _lr_ticks(ax, [r["lr"] for r in result["members"]])
    ax.set_xlabel(r"step size $\eta$")
    ax.set_ylabel(r"departure time $\tau(\eta)$")
    outside_legend(ax)
    ax.set_title("departure: predicted vs measured", loc="left")
    settings_line(fig, _sweep_settings(result))
    save_figure(fig, path)


@styled
def plot_comparison(cmp: Mapping, run, ref, path, *, title: str = "") -> None:
    """Distance per block, loss of both runs and attention drift against t."""
    fig, axes = plt.subplots(
        3, 1, figsize=(DOC_WIDTH, 3 * PANEL_HEIGHT + 1.0), sharex=True
    )
    t = cmp["t"]
    for name, d in cmp["distance"].items():
        axes[0].semilogy(t, d, lw=1.2 if name == "total" else 1, label=name)
    axes[0].axhline(cmp["threshold"], color="gray", ls=":", label="threshold")
    if cmp["departure_time"] is not None:
        axes[0].axvline(cmp["departure_time"], color="tab:red", ls="--", label="τ")
    axes[0].set_ylabel(r"$\|\theta_{\mathrm{opt}} - \theta_{\mathrm{flow}}\|$")
    outside_legend(axes[0])
    axes[0].set_title(f"{title}: optimizer vs flow on the shared clock", loc="left")
    axes[1].plot(run.t, run.metrics["loss"], label="optimizer")
    axes[1].plot(ref.t, ref.metrics["loss"], "k--", label="flow")
    axes[1].set_ylabel("loss (nats)")
    outside_legend(axes[1])
    if "attention_tv" in cmp:
        tv = np.asarray(cmp["attention_tv"])
        for i in range(tv.shape[1]):
            axes[2].plot(t, tv[:, i], lw=1, label=f"query {i}")
        outside_legend(axes[2])
    axes[2].set_ylabel("attention TV distance")
    time_axis(axes[2], t, label=STEP_CLOCK + " (the flow at the same t)")
    settings_line(fig, title)
    save_figure(fig, path)


@styled
def plot_departure_records(results: dict, path) -> None:
    """Per optimizer: λ_max along the flow and the members against c/η (top), and
    predicted against measured departure time (bottom), from saved records.

    ``results[name]`` holds ``stability``, ``speed`` (flow time per unit of the
    optimizer's clock), ``t1`` and ``members`` with ``lr``, ``predicted``,
    ``first_rise``, ``t`` and ``lambda_max``; ``results["flow"]`` holds ``t`` and
    ``lambda_max``.
    """
    names = [n for n in ("sgd", "momentum", "adam") if n in results]
    fig, axes = plt.subplots(
        2, len(names), figsize=(max(DOC_WIDTH, 4.6 * len(names)), 7.5)
    )
    axes = np.asarray(axes).reshape(2, len(names))
    flow = results["flow"]
    for j, name in enumerate(names):
        res = results[name]
        ax = axes[0, j]
        tf = np.asarray(flow["t"]) / res["speed"]
        keep = tf <= res["t1"]
        ax.plot(tf[keep], np.asarray(flow["lambda_max"])[keep], "k", lw=2, label="flow")
        for r in res["members"]:
            (line,) = ax.plot(r["t"], r["lambda_max"], lw=1, label=f"η={r['lr']:g}")
            ax.axhline(r["bound"], color=line.get_color(), ls=":", lw=1)
            if r["first_rise"] is not None:
                ax.axvline(r["first_rise"], color=line.get_color(), ls="--", lw=0.8)
        # a member that blows up can spike far above; keep the bounds in view
        top = max(np.max(flow["lambda_max"]), *(r["bound"] for r in res["members"]))
        ax.set_ylim(0, 1.3 * top)
        ax.set_xlabel(
            STEP_CLOCK + ("" if res["speed"] == 1 else r" (flow at $t\cdot$speed)")
        )
        ax.set_ylabel(r"$\lambda_{\max}(H)$")
        ax.set_title(
            f"{name}: sharpness\ndotted c/η, dashed first loss rise", loc="left"
        )
        ax.legend(
            loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False
        )
        ax = axes[1, j]
        lr = np.array([r["lr"] for r in res["members"]])
        for key, marker, label in (
            ("predicted", "s", "predicted: flow λ_max > c/η"),
            ("first_rise", "^", "measured: first loss rise"),
            ("own_prediction", "x", "member's own λ_max > c/η"),
        ):
            # "none before t1" is drawn on the t1 line
            tau = [res["t1"] if r.get(key) is None else r[key] for r in res["members"]]
            ax.semilogx(lr, tau, marker, ls="none", label=label, alpha=0.8, ms=8)
        ax.axhline(res["t1"], color="gray", lw=0.8, ls="--", label="t1 (none before)")
        _lr_ticks(ax, lr)
        ax.set_xlabel(r"step size $\eta$")
        ax.set_ylabel(r"departure time $\tau(\eta)$")
        ax.set_title(f"{name}: predicted vs measured", loc="left")
        ax.legend(
            loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False
        )
    settings_line(
        fig,
        " · ".join(
            f"{n}: c = {results[n]['stability']:g}, t1 = {results[n]['t1']:g}"
            for n in names
        ),
    )
    save_figure(fig, path)
