"""Figures of learning-rate sweeps and optimizer-vs-flow comparisons."""

from __future__ import annotations

import numpy as np

from gflow.plotting.figure import plt, save_figure


def plot_error_vs_lr(result: dict, path, *, title: str = "") -> None:
    """Error (max parameter distance over [0, t1]) against η, log-log, with the fit."""
    ok = [r for r in result["members"] if r["status"] == "success" and r["error"]]
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
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
    ax.set_xlabel("step size η")
    ax.set_ylabel("max_t |θ_η(t) − θ_ref(t)|")
    ax.set_title(f"{title}: error vs η")
    ax.legend(fontsize=8)
    save_figure(fig, path)


def plot_trajectories(result: dict, path, *, title: str = "") -> None:
    """Loss of every member overlaid on its reference, and the distance against t."""
    run = result["run"]
    fig, axes = plt.subplots(2, 1, figsize=(7, 7), sharex=True)
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
    axes[0].legend(fontsize=8)
    axes[0].set_title(f"{title}: trajectories on the shared clock")
    axes[1].set_ylabel("|θ_η(t) − θ_ref(t)|")
    axes[1].set_xlabel("flow time t = kη")
    fig.tight_layout()
    save_figure(fig, path)


def plot_departures(result: dict, path, *, title: str = "") -> None:
    """λ_max along the reference with the bounds c/η, and predicted vs measured τ(η)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    sharp = result.get("sharpness")
    c = result["stability"]
    ax = axes[0]
    if sharp is not None:
        ax.plot(sharp["t"], sharp["lambda_max"], "k", label="λ_max along reference")
        for r in result["members"]:
            ax.axhline(c / r["lr"], ls=":", lw=1, label=f"{c:g}/η, η={r['lr']:g}")
        bounds = [c / r["lr"] for r in result["members"]]
        top = max(2 * np.max(sharp["lambda_max"]), 1.1 * min(bounds))
        ax.set_ylim(0, min(top, 1.1 * max(bounds)))
    ax.set_xlabel("flow time t")
    ax.set_ylabel("λ_max(H)")
    ax.legend(fontsize=7)
    ax.set_title(f"{title}: sharpness")
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
    ax.set_xlabel("step size η")
    ax.set_ylabel("departure time τ(η)")
    ax.legend(fontsize=8)
    ax.set_title("departure: predicted vs measured")
    fig.tight_layout()
    save_figure(fig, path)


def plot_comparison(cmp: dict, run, ref, path, *, title: str = "") -> None:
    """Distance per block, loss of both runs and attention drift against t."""
    fig, axes = plt.subplots(3, 1, figsize=(7, 9), sharex=True)
    t = cmp["t"]
    for name, d in cmp["distance"].items():
        axes[0].semilogy(t, d, lw=1.2 if name == "total" else 1, label=name)
    axes[0].axhline(cmp["threshold"], color="gray", ls=":", label="threshold")
    if cmp["departure_time"] is not None:
        axes[0].axvline(cmp["departure_time"], color="tab:red", ls="--", label="τ")
    axes[0].set_ylabel("|θ_opt − θ_flow|")
    axes[0].legend(fontsize=8)
    axes[0].set_title(f"{title}: optimizer vs flow on the shared clock")
    axes[1].plot(run.t, run.metrics["loss"], label="optimizer")
    axes[1].plot(ref.t, ref.metrics["loss"], "k--", label="flow")
    axes[1].set_ylabel("loss (nats)")
    axes[1].legend(fontsize=8)
    if "attention_tv" in cmp:
        tv = np.asarray(cmp["attention_tv"])
        for i in range(tv.shape[1]):
            axes[2].plot(t, tv[:, i], lw=1, label=f"query {i}")
        axes[2].legend(fontsize=8)
    axes[2].set_ylabel("attention TV distance")
    axes[2].set_xlabel("flow time t = Σ η")
    fig.tight_layout()
    save_figure(fig, path)


def plot_departure_records(results: dict, path) -> None:
    """Per optimizer: λ_max along the flow and the members against c/η (top), and
    predicted against measured departure time (bottom), from saved records.

    ``results[name]`` holds ``stability``, ``speed`` (flow time per unit of the
    optimizer's clock), ``t1`` and ``members`` with ``lr``, ``predicted``,
    ``first_rise``, ``t`` and ``lambda_max``; ``results["flow"]`` holds ``t`` and
    ``lambda_max``.
    """
    names = [n for n in ("sgd", "momentum", "adam") if n in results]
    fig, axes = plt.subplots(2, len(names), figsize=(5.2 * len(names), 8.5))
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
        ax.set_xlabel("t = Σ η" + ("" if res["speed"] == 1 else " (flow at t·speed)"))
        ax.set_ylabel("λ_max(H)")
        ax.set_title(f"{name}: sharpness; dotted c/η, dashed first loss rise")
        ax.legend(fontsize=7)
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
        ax.set_xlabel("step size η")
        ax.set_ylabel("departure time τ(η)")
        ax.set_title(f"{name}: predicted vs measured")
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)
