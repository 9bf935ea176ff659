"""Does the default Markov flow show the paper's stage cycle, claim by claim (a-g)?

Question: with π = (0.75, 0.19, 0.05, 0.01), λ = 0.5, m = 32, float64 Tsit5 at
rtol 1e-6, do we measure (a) a stage-I escape time linear in ln(1/ε) with slope
1/σ₀ and later stage onsets linear in ln(1/ε); (b) a first plateau at H(π);
(c) Φ/|Φ| aligned with ππᵀ during focus and no focus for λ = 0 or uniform π;
(d) dilution (sign change of low-frequency coordinates, low-frequency queries'
attention on token 0 dropping); (e) stalled asymmetry lifting for symmetric
low-frequency tokens, slower as their asymmetry δ shrinks; (f) the next cycle on a
long horizon; (g) no unigram plateau without the W_Q W_Kᵀ factorisation and no
focus with a residual connection?

Command (from the repository root):

    PYTHONPATH=$PWD python experiments/markov_cycle.py [--skip-long] [--write-docs]

Runtime: about 2-4 minutes on two idle cores for everything but the long horizon
(one compilation serves every factorised run: the initial model and the chain are
data); the t = 1500 flow of claim f adds ~24,000 Tsit5 steps (several minutes).
Writes experiments/results/markov_cycle/: one run directory per flow (metrics,
final model), summary.json, table.md and markov_cycle.png; with --write-docs it
replaces the table in docs/markov_cycle.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from gflow.analysis.stages import StageDetector, detect_stages  # noqa: E402
from gflow.runs.files import read_json, write_json  # noqa
from gflow.runs.flow_run import FlowConfig, run_flow  # noqa: E402
from gflow.runs.trajectory_files import load_trajectory, save_trajectory  # noqa

OUT = Path("experiments/results/markov_cycle")
DOC = Path("docs/markov_cycle.md")


@dataclasses.dataclass(frozen=True)
class Config:
    """The runs of the experiment; every factorised run shares one compiled flow."""

    eps: tuple[float, ...] = (1e-2, 1e-3, 1e-4, 1e-5)
    t1: float = 600.0
    num_saves: int = 1201
    deltas: tuple[float, ...] = (0.04, 0.02, 0.01, 0.005, 0.0)
    sym_base: tuple[float, ...] = (0.7, 0.1, 0.1, 0.1)
    long_t1: float = 1500.0
    long: bool = True


def runs(cfg: Config) -> dict[str, FlowConfig]:
    """Name -> flow configuration of every run."""
    base = FlowConfig(t1=cfg.t1, num_saves=cfg.num_saves)
    out = {f"eps_{e:g}": dataclasses.replace(base, init_scale=e) for e in cfg.eps}
    out["lam0"] = dataclasses.replace(base, lam=0.0)
    out["uniform"] = dataclasses.replace(base, pi=(0.25,) * 4)
    for d in cfg.deltas:
        p = cfg.sym_base
        out[f"delta_{d:g}"] = dataclasses.replace(
            base, pi=(p[0], p[1] + d, p[2], p[3] - d)
        )
    out["unfactorised"] = dataclasses.replace(base, factorised=False)
    out["residual"] = dataclasses.replace(base, residual=True)
    if cfg.long:
        out["long"] = dataclasses.replace(base, t1=cfg.long_t1)
    return out


def run(cfg: Config, *, out: Path = OUT, only: tuple[str, ...] = ()) -> None:
    """Integrate every flow (or those in ``only``) and save it under ``out/<name>``."""
    for name, fc in runs(cfg).items():
        if only and name not in only:
            continue
        start = time.perf_counter()
        traj = run_flow(fc, progress=False)
        save_trajectory(out / name, traj, name="flow")
        write_json(out / name / "config.json", dataclasses.asdict(fc))
        wall = time.perf_counter() - start
        print(f"{name}: {traj.status}, {traj.stats['num_steps']} steps, {wall:.1f} s")


def _load(out, name):
    traj = load_trajectory(out / name, name="flow")
    return traj, read_json(out / name / "config.json")


def _escape(traj, chain):
    """First time the loss is halfway from log d to H(π)."""
    mid = 0.5 * (np.log(len(chain.pi)) + chain.unigram_loss)
    return float(traj.t[np.argmax(traj.metrics["loss"] <= mid)])


def _stage(stages, name, cycle=1):
    return next((s for s in stages if s.name == name and s.cycle == cycle), None)


def _fit(x, y):
    slope, icpt = np.polyfit(x, y, 1)
    resid = y - (slope * x + icpt)
    r2 = 1 - np.sum(resid**2) / np.sum((y - np.mean(y)) ** 2)
    return float(slope), float(r2)


def measure(cfg: Config, *, out: Path = OUT) -> dict:
    """Every claim's numbers from the saved runs."""
    res: dict = {}
    default = FlowConfig().chain()
    pi = default.pi
    d = len(pi)
    sigma0 = float(np.linalg.norm(pi) * np.linalg.norm(pi - 1 / d))
    # a: escape time and later onsets against ln(1/ε)
    rows = []
    for e in cfg.eps:
        traj, _ = _load(out, f"eps_{e:g}")
        st = detect_stages(traj, pi=pi)
        row = {"eps": e, "escape": _escape(traj, default)}
        for name in ("focus", "dilution", "asymmetry_lifting"):
            s = _stage(st, name)
            row[name] = None if s is None else s.t_start
        rows.append(row)
    x = np.log(1 / np.array(cfg.eps))
    a = {"sigma0": sigma0, "inv_sigma0": 1 / sigma0, "rows": rows}
    for key in ("escape", "focus", "dilution", "asymmetry_lifting"):
        y = np.array([r[key] if r[key] is not None else np.nan for r in rows], float)
        if np.all(np.isfinite(y)):
            a[f"slope_{key}"], a[f"r2_{key}"] = _fit(x, y)
    a["slope_ratio"] = a["slope_escape"] * sigma0
    res["a"] = a
    # b: plateau loss = loss where |∇L| is smallest between condensation and focus
    b = []
    for e in cfg.eps:
        traj, _ = _load(out, f"eps_{e:g}")
        st = detect_stages(traj, pi=pi)
        c, f = _stage(st, "condensation"), _stage(st, "focus")
        sel = (traj.t >= c.t_end) & (traj.t <= f.t_start)
        i = np.flatnonzero(sel)[np.argmin(traj.metrics["grad_norm"][sel])]
        b.append(
            {
                "eps": e,
                "t": float(traj.t[i]),
                "loss": float(traj.metrics["loss"][i]),
                "grad_norm": float(traj.metrics["grad_norm"][i]),
            }
        )
    res["b"] = {"H_pi": default.unigram_loss, "rows": b}
    # c: Φ/|Φ| against ππᵀ during focus; no focus for λ = 0 or uniform π
    traj, _ = _load(out, "eps_0.001")
    st = detect_stages(traj, pi=pi)
    f = _stage(st, "focus")
    sel = (traj.t >= f.t_start) & (traj.t <= f.t_end)
    cos = traj.metrics["cos_Phi_pipi"][sel]
    ent = traj.metrics["attention_entropy"]
    c = {
        "focus": [f.t_start, f.t_end],
        "cos_min": float(cos.min()),
        "cos_mean": float(cos.mean()),
        "entropy_drop_default": float(ent[0] - ent.min()),
    }
    for name in ("lam0", "uniform"):
        tr, fc = _load(out, name)
        ent = tr.metrics["attention_entropy"]
        top = tr.metrics["attention_on_top"][:, 0]
        c[name] = {
            "entropy_drop": float(ent[0] - ent.min()),
            "top_query_on_top_max": float(top.max()),
            "focus_detected": _stage(detect_stages(tr, pi=fc["pi"]), "focus")
            is not None,
            "final_loss": float(tr.metrics["loss"][-1]),
        }
    res["c"] = c
    # d: dilution — sign changes of coordinates on u₁ and the drop of attention on 0
    coords = traj.metrics["coords"][:, :, 0]  # [n, d], sign: π-weighted sum > 0
    dil = _stage(st, "dilution")
    lift = _stage(st, "asymmetry_lifting")
    window = traj.t <= lift.t_end
    flips = {}
    for i in range(1, d):
        neg = np.flatnonzero((coords[:, i] < 0) & window & (traj.t > 20))
        flips[f"token{i}"] = None if neg.size == 0 else float(traj.t[neg[0]])
    on_top = traj.metrics["attention_on_top"]
    ifoc = np.argmin(np.abs(traj.t - f.t_end))
    res["d"] = {
        "dilution": [dil.t_start, dil.t_end],
        "sign_change_t": flips,
        "attention_on_0_at_focus_end": on_top[ifoc].tolist(),
        "attention_on_0_min_in_cycle1": on_top[window].min(axis=0).tolist(),
    }
    # e: symmetric low-frequency tokens — σ₂(W_E) growth onset against δ
    e_rows = []
    for delta in cfg.deltas:
        tr, fc = _load(out, f"delta_{delta:g}")
        sv2 = tr.metrics["sv_W_E"][:, 1]
        g = StageDetector().growth(tr.t, sv2, after=100.0)
        late = tr.t >= tr.t[-1] / 2  # growth rate of ln σ₂ over the second half
        rate = np.polyfit(tr.t[late], np.log(sv2[late]), 1)[0]
        e_rows.append(
            {
                "delta": delta,
                "onset": None if g is None else g[0],
                "late_rate": float(rate),
                "sv2_final": float(sv2[-1]),
                "sv2_min": float(sv2[tr.t >= 100].min()),
            }
        )
    res["e"] = {"pi_base": list(cfg.sym_base), "rows": e_rows}
    # f: the next cycle on the long horizon
    if cfg.long:
        tr, _ = _load(out, "long")
        meta = read_json(out / "long" / "flow.json")
        st = detect_stages(tr, pi=pi)
        sv3 = tr.metrics["sv_W_E"][:, 2]
        res["f"] = {
            "stages": [s.to_dict() for s in st],
            "solver": meta["info"]["solver"],
            "steps": meta["stats"]["num_steps"],
            "rejected": meta["stats"]["num_rejected_steps"],
            "sv3_at_400": float(sv3[np.argmin(np.abs(tr.t - 400))]),
            "sv3_final": float(sv3[-1]),
            "top_query_on_0_final": float(tr.metrics["attention_on_top"][-1, 0]),
        }
    # g: ablations
    g = {}
    h, log_d = default.unigram_loss, np.log(d)
    for name in ("eps_0.001", "unfactorised", "residual"):
        tr, fc = _load(out, name)
        near = np.abs(tr.metrics["loss"] - h) < 0.01 * (log_d - h)
        ent = tr.metrics["attention_entropy"]
        g[name] = {
            "time_near_H_pi": float(np.sum(near) * (tr.t[1] - tr.t[0])),
            "entropy_drop": float(ent[0] - ent.min()),
            "top_query_on_top_max": float(tr.metrics["attention_on_top"][:, 0].max()),
            "stages": [s.name for s in detect_stages(tr, pi=pi)],
            "final_loss": float(tr.metrics["loss"][-1]),
        }
    res["g"] = g
    return res


def critical(*, out: Path = OUT, t_plateau: float = 40.0, horizon: float = 15.0):
    """Claim 3: the critical point near the unigram plateau, its spectrum, and the
    linearised flow exp(−Ht)δθ₀ against the actual flow from the plateau state."""
    from gflow.analysis.critical import (
        block_weights,
        hessian_spectrum,
        linearised_flow,
        newton_critical_point,
    )
    from gflow.analysis.hessian import extreme_eigenpairs, flatten
    from gflow.dynamics.flow import solve_flow
    from gflow.problems.losses import PopulationLoss

    fc = FlowConfig(t1=t_plateau, num_saves=Config().num_saves)
    chain = fc.chain()
    loss = PopulationLoss(chain)
    state = run_flow(fc, progress=False).final
    crit, norms = newton_critical_point(loss, state, iters=12)
    lam, V = hessian_spectrum(loss, crit)
    neg = np.flatnonzero(lam < -1e-8 * np.abs(lam).max())
    w = block_weights(crit, V[:, neg])
    ritz, _ = extreme_eigenpairs(loss, crit, key=jax.random.key(0), iters=80)
    ts = np.linspace(0.0, horizon, 16)
    x_state, _ = flatten(state)
    x_crit, _ = flatten(crit)
    delta0 = np.asarray(x_state - x_crit)
    pred = linearised_flow(lam, V, delta0, ts)
    traj = solve_flow(loss, state, t1=horizon, ts=ts, save_params=True)
    actual = np.stack(
        [
            np.asarray(flatten(traj.snapshot(i))[0]) - np.asarray(x_crit)
            for i in range(len(ts))
        ]
    )
    err = np.linalg.norm(actual - pred, axis=1) / np.linalg.norm(actual, axis=1)
    res = {
        "t_plateau": t_plateau,
        "grad_norms": norms,
        "loss_at_critical": float(loss(crit)),
        "H_pi": chain.unigram_loss,
        "norm_W_A_at_critical": float(np.linalg.norm(np.asarray(crit.W_A))),
        "num_params": int(lam.size),
        "num_negative": int(neg.size),
        "negative_eigenvalues": lam[neg].tolist(),
        "lambda_max": float(lam[-1]),
        "lanczos_min_max": [float(ritz[0]), float(ritz[-1])],
        "unstable_block_weights": {k: v.tolist() for k, v in w.items()},
        "distance_to_critical": float(np.linalg.norm(delta0)),
        "ts": ts.tolist(),
        "linear_rel_error": err.tolist(),
        "norm_actual": np.linalg.norm(actual, axis=1).tolist(),
        "norm_linear": np.linalg.norm(pred, axis=1).tolist(),
    }
    write_json(out / "critical.json", res)
    return res


def table(res: dict) -> str:
    """The measured table (markdown)."""
    a, b, c, d, e, g = (res[k] for k in "abcdeg")
    lines = ["| claim | measured |", "|---|---|"]
    esc = ", ".join(f"{r['eps']:g}: {r['escape']:.1f}" for r in a["rows"])
    lines.append(
        f"| a. escape time (loss halfway to H(π)) vs ln(1/ε) | {esc}; slope "
        f"{a['slope_escape']:.3f} (R² {a['r2_escape']:.4f}) vs 1/σ₀ = "
        f"{a['inv_sigma0']:.3f}: ratio {a['slope_ratio']:.3f} |"
    )
    for key in ("focus", "dilution", "asymmetry_lifting"):
        on = ", ".join(
            f"{r['eps']:g}: {r[key]:.0f}" if r[key] is not None else f"{r['eps']:g}: -"
            for r in a["rows"]
        )
        fit = (
            f"slope {a[f'slope_{key}']:.1f} per unit ln(1/ε), R² {a[f'r2_{key}']:.3f}"
            if f"slope_{key}" in a
            else "not detected for every ε"
        )
        lines.append(f"| a. {key} onset vs ε | {on}; {fit} |")
    pl = ", ".join(f"{r['eps']:g}: {r['loss']:.4f} (t={r['t']:.0f})" for r in b["rows"])
    lines.append(
        f"| b. first plateau loss (min-∣∇L∣ point), H(π) = {b['H_pi']:.4f} | {pl} |"
    )
    lines.append(
        f"| c. cos(Φ, ππᵀ) during focus t∈[{c['focus'][0]:.0f}, {c['focus'][1]:.0f}] "
        f"| min {c['cos_min']:.3f}, mean {c['cos_mean']:.3f}; entropy drop "
        f"{c['entropy_drop_default']:.3f} nats |"
    )
    for name, label in (("lam0", "λ = 0"), ("uniform", "uniform π")):
        x = c[name]
        lines.append(
            f"| c. {label}: focus? | entropy drop {x['entropy_drop']:.4f} nats, top "
            f"query's attention on token 0 ≤ {x['top_query_on_top_max']:.3f}, focus "
            f"detected: {x['focus_detected']} |"
        )
    fl = ", ".join(
        f"{k}: t={v:.0f}" if v else f"{k}: none" for k, v in d["sign_change_t"].items()
    )
    drop = ", ".join(
        f"q{i}: {x:.2f} → {y:.2f}"
        for i, (x, y) in enumerate(
            zip(d["attention_on_0_at_focus_end"], d["attention_on_0_min_in_cycle1"])
        )
        if i > 0
    )
    lines.append(
        f"| d. dilution t∈[{d['dilution'][0]:.0f}, {d['dilution'][1]:.0f}]: "
        f"u₁ coordinate turns negative | {fl} |"
    )
    lines.append(f"| d. attention on token 0, focus end → cycle-1 minimum | {drop} |")
    er = ", ".join(
        f"δ={r['delta']:g}: "
        + (f"{r['onset']:.0f}" if r["onset"] is not None else "no growth")
        + f" (σ₂ at t1 {r['sv2_final']:.3g}, d ln σ₂/dt late {r['late_rate']:.1e})"
        for r in e["rows"]
    )
    lines.append(f"| e. σ₂(W_E) growth onset, π = {tuple(e['pi_base'])} ± δ | {er} |")
    if "f" in res:
        f = res["f"]
        cyc2 = ", ".join(
            f"{s['stage']} [{s['t_start']:.0f}, {s['t_end']:.0f}]"
            for s in f["stages"]
            if s["cycle"] == 2
        )
        lines.append(
            f"| f. next cycle (t ≤ 1500, {f['solver']}, {f['steps']} steps, "
            f"{f['rejected']} rejected) | cycle 2: {cyc2}; σ₃ {f['sv3_at_400']:.3g} "
            f"(t=400) → {f['sv3_final']:.3g}; query 0 on token 0 at t=1500: "
            f"{f['top_query_on_0_final']:.2f} |"
        )
    for name, label in (
        ("eps_0.001", "factorised (default)"),
        ("unfactorised", "unfactorised W_A"),
        ("residual", "residual"),
    ):
        x = g[name]
        lines.append(
            f"| g. {label} | time with ∣L−H(π)∣ < 1% of log d − H(π): "
            f"{x['time_near_H_pi']:.1f}; entropy drop {x['entropy_drop']:.3f}; "
            f"stages: {', '.join(x['stages']) or 'none'} |"
        )
    if "critical" in res:
        k = res["critical"]
        att = [
            q + kk
            for q, kk in zip(
                k["unstable_block_weights"]["W_Q"], k["unstable_block_weights"]["W_K"]
            )
        ]
        lines.append(
            f"| 3. critical point near the plateau (Newton from t = "
            f"{k['t_plateau']:g}) | ∣∇L∣ {k['grad_norms'][0]:.1e} → "
            f"{k['grad_norms'][-1]:.1e}; L* = {k['loss_at_critical']:.5f} (H(π) = "
            f"{k['H_pi']:.5f}); ∣W_A∣ = {k['norm_W_A_at_critical']:.1e}; "
            f"{k['num_negative']} negative eigenvalues of {k['num_params']} "
            f"(most negative {min(k['negative_eigenvalues'], default=0):.2e}), "
            f"W_Q+W_K weight of each unstable direction ≥ "
            f"{min(att, default=0):.3f}; "
            f"λ_max {k['lambda_max']:.3f}, Lanczos [{k['lanczos_min_max'][0]:.2e}, "
            f"{k['lanczos_min_max'][1]:.3f}]; linearised vs actual flow: "
            f"relative error "
            f"{k['linear_rel_error'][5]:.1e} at t = {k['ts'][5]:g}, "
            f"{k['linear_rel_error'][-1]:.1e} at t = {k['ts'][-1]:g} |"
        )
    return "\n".join(lines) + "\n"


def plot(cfg: Config, res: dict, *, out: Path = OUT) -> None:
    """One panel per claim, from the saved runs."""
    from gflow.plotting.figure import plt, save_figure

    fig, axes = plt.subplots(3, 3, figsize=(14, 11))
    ax = axes[0, 0]
    a = res["a"]
    x = np.log(1 / np.array(cfg.eps))
    for key in ("escape", "focus", "dilution", "asymmetry_lifting"):
        y = [r[key] if r[key] is not None else np.nan for r in a["rows"]]
        ax.plot(x, y, "o-", label=key)
    ax.plot(x, x / a["sigma0"], "k--", lw=1, label="ln(1/ε)/σ₀")
    ax.set_xlabel("ln(1/ε)")
    ax.set_ylabel("onset time")
    ax.set_title("a. onsets vs ln(1/ε)")
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    for e in cfg.eps:
        tr, _ = _load(out, f"eps_{e:g}")
        ax.plot(tr.t, tr.metrics["loss"], label=f"ε={e:g}")
    ax.axhline(res["b"]["H_pi"], color="k", ls="--", lw=1, label="H(π)")
    ax.set_xlim(0, 200)
    ax.set_title("b. loss; plateau at H(π)")
    ax.legend(fontsize=7)
    ax = axes[0, 2]
    for name in ("eps_0.001", "lam0", "uniform", "residual"):
        tr, _ = _load(out, name)
        ax.plot(tr.t, tr.metrics["attention_entropy"], label=name)
    tr, _ = _load(out, "eps_0.001")
    ax.plot(tr.t, tr.metrics["cos_Phi_pipi"], "k:", label="cos(Φ, ππᵀ) default")
    ax.set_xlim(0, 400)
    ax.set_title("c/g. attention entropy; cos(Φ, ππᵀ)")
    ax.legend(fontsize=7)
    ax = axes[1, 0]
    coords = tr.metrics["coords"][:, :, 0]
    for i in range(coords.shape[1]):
        ax.plot(tr.t, coords[:, i], label=f"token {i}")
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xlim(0, 400)
    ax.set_title("d. coordinates on u₁(W_E)")
    ax.legend(fontsize=7)
    ax = axes[1, 1]
    for i in range(coords.shape[1]):
        ax.plot(tr.t, tr.metrics["attention_on_top"][:, i], label=f"query {i}")
    ax.set_xlim(0, 400)
    ax.set_title("d. attention on token 0")
    ax.legend(fontsize=7)
    ax = axes[1, 2]
    for delta in cfg.deltas:
        trd, _ = _load(out, f"delta_{delta:g}")
        ax.semilogy(trd.t, trd.metrics["sv_W_E"][:, 1], label=f"δ={delta:g}")
    ax.set_title("e. σ₂(W_E), symmetric low-frequency tokens ± δ")
    ax.legend(fontsize=7)
    ax = axes[2, 0]
    if cfg.long:
        trl, _ = _load(out, "long")
        for i in range(3):
            ax.semilogy(trl.t, trl.metrics["sv_W_E"][:, i], label=f"σ{i + 1}(W_E)")
        ax2 = ax.twinx()
        ax2.plot(trl.t, trl.metrics["attention_entropy"], "k:", label="entropy")
        ax.set_title("f. next cycle: σ₃ grows, entropy rises")
        ax.legend(fontsize=7)
    ax = axes[2, 1]
    for name in ("eps_0.001", "unfactorised", "residual"):
        trg, _ = _load(out, name)
        ax.plot(trg.t, trg.metrics["loss"], label=name)
    ax.axhline(res["b"]["H_pi"], color="k", ls="--", lw=1)
    ax.set_xlim(0, 200)
    ax.set_title("g. ablations: loss")
    ax.legend(fontsize=7)
    ax = axes[2, 2]
    for name in ("eps_0.001", "unfactorised", "residual"):
        trg, _ = _load(out, name)
        ax.plot(trg.t, trg.metrics["attention_on_top"][:, 0], label=name)
    ax.set_xlim(0, 400)
    ax.set_title("g. query 0's attention on token 0")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, out / "markov_cycle.png")


def write_docs(text: str, path: Path = DOC) -> None:
    """Replace the block between the table markers in docs/markov_cycle.md."""
    start, end = "<!-- table:start -->", "<!-- table:end -->"
    doc = path.read_text()
    i, j = doc.index(start) + len(start), doc.index(end)
    path.write_text(doc[:i] + "\n" + text + doc[j:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--skip-long", action="store_true", help="skip claim f (t=1500)")
    p.add_argument("--skip-runs", action="store_true", help="reuse the saved runs")
    p.add_argument("--critical", action="store_true", help="run claim 3 (Newton)")
    p.add_argument("--only", nargs="*", default=(), help="integrate only these runs")
    p.add_argument("--write-docs", action="store_true", help=f"update {DOC}")
    args = p.parse_args()
    cfg = Config(long=not args.skip_long)
    if not args.skip_runs:
        run(cfg, only=tuple(args.only))
    crit = critical() if args.critical else None
    if args.only:
        return
    res = measure(cfg)
    if crit is None and (OUT / "critical.json").exists():
        crit = read_json(OUT / "critical.json")
    if crit is not None:
        res["critical"] = crit
    write_json(OUT / "summary.json", res)
    text = table(res)
    (OUT / "table.md").write_text(text)
    plot(cfg, res)
    print(text)
    if args.write_docs:
        write_docs(text)


if __name__ == "__main__":
    main()
