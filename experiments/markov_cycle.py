"""Does the default Markov flow show the paper's stage cycle, claim by claim (a-g)?

Question: with π = (0.75, 0.19, 0.05, 0.01), λ = 0.5, m = 32, float64 at rtol 1e-6,
do we measure (a) a stage-I escape time linear in ln(1/ε) with slope 1/σ₀ and later
stage onsets linear in ln(1/ε); (b) a first plateau at H(π); (c) Φ/|Φ| aligned with
ππᵀ during focus and no focus for λ = 0 or uniform π; (d) dilution (sign change of
low-frequency coordinates, low-frequency queries' attention on token 0 dropping);
(e) stalled asymmetry lifting for symmetric low-frequency tokens, slower as their
asymmetry δ shrinks; (f) the next cycle on a long horizon; (g) no unigram plateau
without the W_Q W_Kᵀ factorisation and no focus with a residual connection?

Every table row gets a verdict (reproduced / partly / not reproduced) from an explicit
rule, the ``verdict_*`` functions below (tests/test_markov_cycle_verdicts.py). The
rows measured on the default flow (a, b, c's alignment, d, f) are measured for the
init seeds ``Config.seeds`` (0..4) and give seed 0's numbers and the mean ± sample
sd over the seeds; the ablations (c's λ = 0 and uniform π, e, g) are seed 0 only.
Rows e and 3 are superseded by docs/markov_saddle.md; their verdict cells quote it
(experiments/results/markov_saddle/table.md when that is a full five-seed run, else
the generated table of docs/markov_saddle.md).

Command (from the repository root):

    PYTHONPATH=$PWD python experiments/markov_cycle.py --write-docs

Runtime: about 2.5-4 minutes on two shared cores for everything (the last run is in
docs/markov_cycle.md, next to the command): this script's flows
(4 ε × 5 seeds to t = 600 and 5 seeds to t = 1500 with the stiff-aware solver, the
ablations, the Newton/Hessian of row 3), then, with --write-docs,
experiments/markov_cycles_long.py (t = 10 000) and experiments/markov_robustness.py
(50 flows to t = 3000), each writing its own block of docs/markov_cycle.md. Those
two run from scratch into experiments/results/markov_cycle/{cycles_long,robustness}/
(their results saved elsewhere are not reused). Writes experiments/results/
markov_cycle/: one run directory per flow (metrics), summary.json, table.md and
markov_cycle.png; with --write-docs also the table, the figure
docs/figures/markov_cycle.png and the run line (wall time, load average) in
docs/markov_cycle.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import math
import os
import re
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from experiments import _docs  # noqa: E402
from gflow.analysis import StageDetector, detect_stages  # noqa: E402
from gflow.runs import (  # noqa: E402
    FlowConfig,
    load_trajectory,
    read_json,
    run_flow,
    save_trajectory,
    write_json,
)

ROOT = Path(__file__).resolve().parents[1]
OUT = Path("experiments/results/markov_cycle")
DOC = Path("docs/markov_cycle.md")
FIG = Path("docs/figures/markov_cycle.png")
SADDLE_OUT = Path("experiments/results/markov_saddle")
SADDLE_DOC = Path("docs/markov_saddle.md")
RECURRENCE = Path("experiments/results/markov_recurrence/summary.json")
RECURRENCE_CLAIM = "f'. the cycle recurs at d = 8 and 16"
CMD = "PYTHONPATH=$PWD python experiments/markov_cycle.py --write-docs"
RUN_START, RUN_END = "<!-- cycle_run:start -->", "<!-- cycle_run:end -->"

REPRODUCED, PARTLY, NOT = "reproduced", "partly", "not reproduced"


@dataclasses.dataclass(frozen=True)
class Config:
    """The runs of the experiment; every factorised run shares one compiled flow."""

    eps: tuple[float, ...] = (1e-2, 1e-3, 1e-4, 1e-5)
    t1: float = 600.0
    num_saves: int = 1201
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    deltas: tuple[float, ...] = (0.04, 0.02, 0.01, 0.005, 0.0)
    sym_base: tuple[float, ...] = (0.7, 0.1, 0.1, 0.1)
    long_t1: float = 1500.0
    long_solver: str = "stiff"
    long: bool = True


def seed_name(name: str, seed: int) -> str:
    """Run directory of ``name`` for init seed ``seed`` (seed 0 keeps the bare name)."""
    return name if seed == 0 else f"{name}_s{seed}"


def runs(cfg: Config) -> dict[str, FlowConfig]:
    """Name -> flow configuration of every run."""
    base = FlowConfig(t1=cfg.t1, num_saves=cfg.num_saves, save_params=False)
    out = {}
    for seed in cfg.seeds:
        for e in cfg.eps:
            out[seed_name(f"eps_{e:g}", seed)] = dataclasses.replace(
                base, init_scale=e, seed=seed
            )
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
        for seed in cfg.seeds:
            out[seed_name("long", seed)] = dataclasses.replace(
                base, t1=cfg.long_t1, solver=cfg.long_solver, seed=seed
            )
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
        print(
            f"{name}: {traj.status}, {traj.stats['num_steps']} steps, {wall:.1f} s",
            flush=True,
        )


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


# ---------------------------------------------------------------- verdict rules
# Each rule returns (verdict, why); ``why`` states the rule with the number it used.


def _grade(err: float, tight: float, loose: float) -> str:
    return REPRODUCED if err <= tight else PARTLY if err <= loose else NOT


def verdict_slope(slopes, predicted, *, r2s=None, tight=0.02, loose=0.10, min_r2=0.99):
    """A slope against its prediction. Rule: every seed's slope within ``tight``
    (2%) of the prediction and every fit linear (R² ≥ 0.99) → reproduced; every seed
    within ``loose`` (10%) → partly; otherwise (or a slope missing) → not reproduced.
    """
    slopes = [s for s in slopes]
    if not slopes or any(s is None or not math.isfinite(s) for s in slopes):
        return NOT, "slope missing in some seed (a stage not detected for every ε)"
    err = max(abs(s / predicted - 1.0) for s in slopes)
    linear = r2s is None or all(r >= min_r2 for r in r2s)
    v = _grade(err, tight, loose)
    if v == REPRODUCED and not linear:
        v = PARTLY
    why = (
        f"worst seed {err:.1%} from {predicted:.3f} (≤ {tight:.0%}: reproduced, "
        f"≤ {loose:.0%}: partly)"
    )
    if r2s is not None:
        why += f", min R² {min(r2s):.4f} (≥ {min_r2} needed)"
    return v, why


def verdict_linear(r2s, *, min_r2=0.99, loose_r2=0.9):
    """An onset linear in ln(1/ε). Rule: the stage detected at every ε in every seed
    and the least-squares line has R² ≥ 0.99 in every seed → reproduced; R² ≥ 0.9 in
    every seed, or the stage missing at some ε in some seeds only → partly; otherwise
    → not reproduced."""
    found = [r for r in r2s if r is not None and math.isfinite(r)]
    if not found:
        return NOT, "not detected at every ε in any seed"
    lo = min(found)
    why = f"min R² over seeds {lo:.4f} (≥ {min_r2}: reproduced, ≥ {loose_r2}: partly)"
    if len(found) < len(r2s):
        return PARTLY, f"detected at every ε in {len(found)}/{len(r2s)} seeds; " + why
    return (REPRODUCED if lo >= min_r2 else PARTLY if lo >= loose_r2 else NOT), why


def verdict_plateau(losses, h, log_d, *, tight=0.01, loose=0.05):
    """The first plateau at H(π). Rule: the loss at the least-|∇L| point between
    condensation and focus is within ``tight`` (1%) of log d − H(π) from H(π) for
    every ε and seed → reproduced; within ``loose`` (5%) → partly; else not."""
    err = max(abs(x - h) / (log_d - h) for x in losses)
    why = (
        f"worst ∣L − H(π)∣ = {err:.2%} of log d − H(π) (≤ {tight:.0%}: reproduced, "
        f"≤ {loose:.0%}: partly)"
    )
    return _grade(err, tight, loose), why


def verdict_alignment(cos_means, *, tight=0.95, loose=0.8):
    """Φ/|Φ| aligned with ππᵀ during focus. Rule: the mean of cos(Φ, ππᵀ) over the
    focus window ≥ 0.95 in every seed → reproduced; ≥ 0.8 → partly; else not."""
    lo = min(cos_means)
    why = f"lowest seed's mean cos {lo:.3f} (≥ {tight}: reproduced, ≥ {loose}: partly)"
    return (REPRODUCED if lo >= tight else PARTLY if lo >= loose else NOT), why


def verdict_no_focus(entropy_drop, focus_detected, *, tol=1e-3):
    """No focus (λ = 0, uniform π). Rule: no focus stage detected and the attention
    entropy never drops by more than ``tol`` (1e-3 nats) → reproduced; no focus
    detected but a larger drop → partly; a focus detected → not reproduced."""
    why = (
        f"entropy drop {entropy_drop:.1e} nats (< {tol:g} needed), focus "
        f"detected: {focus_detected}"
    )
    if focus_detected:
        return NOT, why
    return (REPRODUCED if entropy_drop < tol else PARTLY), why


def verdict_every(flags, what):
    """A property that should hold for every item in every seed (``flags``: one list
    of booleans per seed). Rule: all true → reproduced; some true → partly; none →
    not reproduced."""
    flat = [bool(x) for seed in flags for x in seed]
    k, n = sum(flat), len(flat)
    why = f"{what} in {k}/{n} (token, seed) pairs"
    return (REPRODUCED if k == n and n else PARTLY if k else NOT), why


def verdict_recurrence(per_seed: list[list[bool]]):
    """The cycle at larger d. ``per_seed``: for each (d, seed) flow, whether each
    cycle has a distinct focus and dilution. Rule: two or more such cycles in every
    flow → reproduced; one in every flow → partly; else not reproduced."""
    counts = [sum(x) for x in per_seed]
    why = (
        f"cycles with distinct focus and dilution per flow: {min(counts)}-"
        f"{max(counts)} in {len(counts)} flows"
    )
    if min(counts) >= 2:
        return REPRODUCED, why
    return (PARTLY if min(counts) >= 1 else NOT), why


def recurrence_row(doc: Path = DOC) -> tuple[str, str, str] | None:
    """Row f' (issue 34 point 1) from experiments/markov_recurrence.py's
    summary.json, or as the page has it when that run is absent here."""
    if not RECURRENCE.exists():
        for line in (doc.read_text() if doc.exists() else "").splitlines():
            cells = [x.strip() for x in line.strip().strip("|").split("|")]
            if len(cells) == 3 and cells[0].startswith(RECURRENCE_CLAIM):
                return cells[0], cells[1], cells[2]
        return None
    found = read_json(RECURRENCE)
    by_d: dict[int, list[dict]] = {}
    for r in found.values():
        by_d.setdefault(r["d"], []).append(r)
    parts = []
    for d, rs in sorted(by_d.items()):
        distinct = [sum(c["distinct"] for c in r["per_cycle"]) for r in rs]
        second = sum(
            any(c["cycle"] == 2 and c["distinct"] for c in r["per_cycle"]) for r in rs
        )
        parts.append(
            f"d = {d}, {len(rs)} seeds: cycles detected "
            f"{', '.join(str(r['cycles']) for r in rs)}; with distinct focus and "
            f"dilution {', '.join(map(str, distinct))}; cycle 2 distinct in "
            f"{second}/{len(rs)}"
        )
    per_seed = [[c["distinct"] for c in r["per_cycle"]] for r in found.values()]
    return (
        f"{RECURRENCE_CLAIM} (t ≤ 10⁵, geometric π; experiments/markov_recurrence.py)",
        "; ".join(parts),
        _cell(verdict_recurrence(per_seed)),
    )


def verdict_cycle2(found, growth, *, min_growth=4.0):
    """The next cycle. ``found``: per seed, the names of the cycle-2 stages detected;
    ``growth``: per seed, σ₃(W_E) at t1 over σ₃ at t = 400. Rule: focus, dilution and
    asymmetry lifting of cycle 2 detected and σ₃ growing ≥ 4-fold in every seed →
    reproduced; some cycle-2 stage in some seed → partly; none → not reproduced."""
    need = {"focus", "dilution", "asymmetry_lifting"}
    full = [need <= set(f) and g >= min_growth for f, g in zip(found, growth)]
    why = (
        f"all three cycle-2 stages and σ₃ ≥ {min_growth:g}× in {sum(full)}/{len(full)} "
        f"seeds (σ₃ growth {min(growth):.1f}-{max(growth):.1f}×)"
    )
    if all(full):
        return REPRODUCED, why
    return (PARTLY if any(f for f in found) else NOT), why


def verdict_plateau_time(time_near, *, expect_plateau, min_plateau=10.0):
    """A unigram plateau present (default) or absent (ablations). Rule, as in
    experiments/markov_robustness.py: a plateau is present when the loss spends
    ≥ 10 time units within 1% of log d − H(π) of H(π); reproduced when presence
    matches the claim, not reproduced otherwise."""
    present = time_near >= min_plateau
    why = f"{time_near:.1f} time units near H(π) (plateau iff ≥ {min_plateau:g})"
    return (REPRODUCED if present == expect_plateau else NOT), why


def mean_sd(xs) -> tuple[float, float, int]:
    """Mean and sample standard deviation (ddof 1; nan for one value) of ``xs``."""
    x = np.asarray([v for v in xs if v is not None], float)
    sd = float(np.std(x, ddof=1)) if x.size > 1 else float("nan")
    return float(np.mean(x)) if x.size else float("nan"), sd, int(x.size)


def fmt_ms(xs, spec=".3f") -> str:
    """'mean ± sd' of ``xs`` (with (k/n) when values are missing)."""
    m, s, n = mean_sd(xs)
    if n == 0:
        return "–"
    text = f"{m:{spec}} ± {s:{spec}}" if n > 1 else f"{m:{spec}}"
    return text + (f" ({n}/{len(list(xs))})" if n < len(list(xs)) else "")


# ---------------------------------------------------------------- measurements


def measure_seed(cfg: Config, seed: int, *, out: Path = OUT) -> dict:
    """The default-flow numbers of one init seed: a (onsets and slopes), b (plateau
    loss), c's alignment, d (dilution), f (the next cycle) and g's default plateau."""
    res: dict = {"seed": seed}
    default = FlowConfig().chain()
    pi = default.pi
    d = len(pi)
    sigma0 = float(np.linalg.norm(pi) * np.linalg.norm(pi - 1 / d))
    rows, b = [], []
    for e in cfg.eps:
        traj, _ = _load(out, seed_name(f"eps_{e:g}", seed))
        st = detect_stages(traj, pi=pi)
        row = {"eps": e, "escape": _escape(traj, default)}
        for name in ("focus", "dilution", "asymmetry_lifting"):
            s = _stage(st, name)
            row[name] = None if s is None else s.t_start
        rows.append(row)
        # b: plateau loss = loss where |∇L| is smallest between condensation and focus
        c, f = _stage(st, "condensation"), _stage(st, "focus")
        if c is None or f is None:
            b.append({"eps": e, "t": None, "loss": None, "grad_norm": None})
            continue
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
    x = np.log(1 / np.array(cfg.eps))
    a = {"sigma0": sigma0, "inv_sigma0": 1 / sigma0, "rows": rows}
    for key in ("escape", "focus", "dilution", "asymmetry_lifting"):
        y = np.array([r[key] if r[key] is not None else np.nan for r in rows], float)
        if np.all(np.isfinite(y)):
            a[f"slope_{key}"], a[f"r2_{key}"] = _fit(x, y)
        else:
            a[f"slope_{key}"] = a[f"r2_{key}"] = None
    a["slope_ratio"] = a["slope_escape"] * sigma0
    res["a"] = a
    res["b"] = {"H_pi": default.unigram_loss, "rows": b}
    # c: Φ/|Φ| against ππᵀ during focus (ε = 1e-3)
    traj, _ = _load(out, seed_name("eps_0.001", seed))
    st = detect_stages(traj, pi=pi)
    f = _stage(st, "focus")
    sel = (traj.t >= f.t_start) & (traj.t <= f.t_end)
    cos = traj.metrics["cos_Phi_pipi"][sel]
    ent = traj.metrics["attention_entropy"]
    res["c"] = {
        "focus": [f.t_start, f.t_end],
        "cos_min": float(cos.min()),
        "cos_mean": float(cos.mean()),
        "entropy_drop_default": float(ent[0] - ent.min()),
    }
    # d: dilution — sign changes of coordinates on u₁ and the drop of attention on 0
    coords = traj.metrics["coords"][:, :, 0]  # [n, d], sign: π-weighted sum > 0
    dil = _stage(st, "dilution")
    lift = _stage(st, "asymmetry_lifting")
    t_end = traj.t[-1] if lift is None else lift.t_end
    window = traj.t <= t_end
    flips = {}
    for i in range(1, d):
        neg = np.flatnonzero((coords[:, i] < 0) & window & (traj.t > 20))
        flips[f"token{i}"] = None if neg.size == 0 else float(traj.t[neg[0]])
    on_top = traj.metrics["attention_on_top"]
    ifoc = np.argmin(np.abs(traj.t - f.t_end))
    res["d"] = {
        "dilution": None if dil is None else [dil.t_start, dil.t_end],
        "sign_change_t": flips,
        "attention_on_0_at_focus_end": on_top[ifoc].tolist(),
        "attention_on_0_min_in_cycle1": on_top[window].min(axis=0).tolist(),
    }
    # g (default row): time near H(π) and the stages
    h, log_d = default.unigram_loss, np.log(d)
    near = np.abs(traj.metrics["loss"] - h) < 0.01 * (log_d - h)
    res["g_default"] = {
        "time_near_H_pi": float(np.sum(near) * (traj.t[1] - traj.t[0])),
        "stages": [s.name for s in st],
    }
    # f: the next cycle on the long horizon
    if cfg.long:
        name = seed_name("long", seed)
        tr, _ = _load(out, name)
        meta = read_json(out / name / "flow.json")
        stl = detect_stages(tr, pi=pi)
        sv3 = tr.metrics["sv_W_E"][:, 2]
        res["f"] = {
            "stages": [s.to_dict() for s in stl],
            "solver": meta["info"]["solver"],
            "steps": meta["stats"]["num_steps"],
            "rejected": meta["stats"]["num_rejected_steps"],
            "sv3_at_400": float(sv3[np.argmin(np.abs(tr.t - 400))]),
            "sv3_final": float(sv3[-1]),
            "top_query_on_0_final": float(tr.metrics["attention_on_top"][-1, 0]),
        }
    return res


def measure(cfg: Config, *, out: Path = OUT) -> dict:
    """Every claim's numbers: seed 0's (the headline, keys a-g as before), the other
    seeds' under "seeds", and the seed-0-only ablations."""
    per_seed = [measure_seed(cfg, s, out=out) for s in cfg.seeds]
    res = dict(per_seed[0])
    res["seeds"] = per_seed
    default = FlowConfig().chain()
    pi = default.pi
    d = len(pi)
    # c: no focus for λ = 0 or uniform π
    for name in ("lam0", "uniform"):
        tr, fc = _load(out, name)
        ent = tr.metrics["attention_entropy"]
        top = tr.metrics["attention_on_top"][:, 0]
        res["c"][name] = {
            "entropy_drop": float(ent[0] - ent.min()),
            "top_query_on_top_max": float(top.max()),
            "focus_detected": _stage(detect_stages(tr, pi=fc["pi"]), "focus")
            is not None,
            "final_loss": float(tr.metrics["loss"][-1]),
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


def saddle_rows() -> dict:
    """The rows of markov_saddle.md's claims table that supersede rows e and 3,
    read from experiments/results/markov_saddle/table.md when summary.json there is
    a full run (≥ 5 seeds), else from the generated table of docs/markov_saddle.md.
    """
    source = None
    summ = SADDLE_OUT / "summary.json"
    if summ.exists() and (SADDLE_OUT / "table.md").exists():
        seeds = read_json(summ).get("config", {}).get("seeds", [])
        if len(seeds) >= 5:
            source, text = (
                SADDLE_OUT / "table.md",
                (SADDLE_OUT / "table.md").read_text(),
            )
    if source is None and SADDLE_DOC.exists():
        source, text = SADDLE_DOC, SADDLE_DOC.read_text()
    if source is None:
        return {}
    rows = {}
    for line in text.splitlines():
        cells = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(cells) == 4:
            rows[cells[0]] = {
                "predicted": cells[1],
                "measured": cells[2],
                "verdict": cells[3],
            }
    out = {"source": str(source)}
    for key, prefix in (
        ("plateau", "1. plateau duration"),
        ("focus", "1. focus onset"),
        ("lambda1", "2. transverse unstable eigenvalue"),
        ("escape_delta", "2. escape time"),
        ("growth", "2. growth of σ₂(W_E)"),
    ):
        hit = next((v for k, v in rows.items() if k.startswith(prefix)), None)
        if hit is not None:
            out[key] = hit
    return out


def _match(pattern: str, text: str) -> str:
    m = re.search(pattern, text)
    return m.group(1) if m else "?"


def superseded_cell(kind: str, sad: dict) -> str:
    """The verdict cell of a row superseded by markov_saddle.md (kind: "3" or "e")."""
    if not sad:
        return "superseded by markov_saddle.md (its results are missing here)"
    src = sad["source"]
    if kind == "3":
        r = sad.get("plateau")
        if r is None:
            return f"superseded: see markov_saddle.md §1 (row not found in {src})"
        c = _match(r"1/c = ([\d.]+)", r["predicted"])
        seeds = _match(r"over seeds ([^;|]+?\(n = \d+\))", r["measured"])
        from gflow.analysis import saddle_rate

        cval = saddle_rate(FlowConfig().chain())
        return (
            f"superseded: see markov_saddle.md §1 (the balanced unigram saddle: "
            f"c = {cval:.4f}, plateau slope {seeds} vs 1/c = {c}: {r['verdict']}; "
            f"from {src})"
        )
    r, esc = sad.get("lambda1"), sad.get("escape_delta")
    if r is None:
        return f"superseded: see markov_saddle.md §2 (row not found in {src})"
    fit = _match(
        r"(slope [\d.]+ \(R² [\d.]+\) for δ ≤ [\d.]+, λ₁ ≈ [^|;]+)", r["measured"]
    )
    text = (
        f"superseded: see markov_saddle.md §2 (transverse unstable eigenvalue "
        f"Θ(δ): {fit.strip()}: {r['verdict']}"
    )
    if esc is not None:
        law = _match(r"escape ≈ ([^;]+)", esc["measured"])
        text += f"; escape time ≈ {law.strip()}: {esc['verdict']}"
    return text + f"; from {src})"


def critical(*, out: Path = OUT, t_plateau: float = 40.0, horizon: float = 15.0):
    """Claim 3: the critical point near the unigram plateau, its spectrum, and the
    linearised flow exp(−Ht)δθ₀ against the actual flow from the plateau state."""
    from gflow.analysis import (
        block_weights,
        extreme_eigenpairs,
        flatten,
        hessian_spectrum,
        linearised_flow,
        newton_critical_point,
    )
    from gflow.dynamics import solve_flow
    from gflow.problems import PopulationLoss

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


# ---------------------------------------------------------------- the table


def _cell(verdict) -> str:
    v, why = verdict
    return f"**{v}** ({why})"


def table(res: dict, sad: dict | None = None) -> str:
    """The measured table (markdown): claim, measured (seed 0; mean ± sd over the
    seeds), verdict (the rule's outcome and the number it used)."""
    from gflow.analysis import saddle_rate

    sad = saddle_rows() if sad is None else sad
    a, b, c, d, e, g = (res[k] for k in "abcdeg")
    seeds = res.get("seeds", [res])
    n = len(seeds)
    sn = f"{n} seeds"
    lines = ["| claim | measured | verdict |", "|---|---|---|"]

    def row(claim, measured, verdict):
        lines.append(f"| {claim} | {measured} | {verdict} |")

    # a: escape
    esc = ", ".join(f"{r['eps']:g}: {r['escape']:.1f}" for r in a["rows"])
    slopes = [s["a"]["slope_escape"] for s in seeds]
    row(
        "a. escape time (loss halfway to H(π)) vs ln(1/ε)",
        f"seed 0: {esc}; slope {a['slope_escape']:.3f} (R² {a['r2_escape']:.4f}) vs "
        f"1/σ₀ = {a['inv_sigma0']:.3f}: ratio {a['slope_ratio']:.3f}; {sn}: slope "
        f"{fmt_ms(slopes)}",
        _cell(
            verdict_slope(
                slopes, a["inv_sigma0"], r2s=[s["a"]["r2_escape"] for s in seeds]
            )
        ),
    )
    # a: later onsets
    c_rate = saddle_rate(FlowConfig().chain())
    for key in ("focus", "dilution", "asymmetry_lifting"):
        on = ", ".join(
            f"{r['eps']:g}: {r[key]:.0f}" if r[key] is not None else f"{r['eps']:g}: -"
            for r in a["rows"]
        )
        fit = (
            f"slope {a[f'slope_{key}']:.2f} per unit ln(1/ε), R² {a[f'r2_{key}']:.4f}"
            if a.get(f"slope_{key}") is not None
            else "not detected for every ε"
        )
        ks = [s["a"][f"slope_{key}"] for s in seeds]
        r2s = [s["a"][f"r2_{key}"] for s in seeds]
        at = "; ".join(
            f"{r['eps']:g}: {fmt_ms([x['a']['rows'][i][key] for x in seeds], '.1f')}"
            for i, r in enumerate(a["rows"])
        )
        spread = f"{sn}: onsets {at}; slope {fmt_ms(ks, '.2f')}"
        if key == "focus":
            pred = a["inv_sigma0"] + 1 / c_rate
            claim = (
                f"a. focus onset vs ln(1/ε) (prediction 1/σ₀ + 1/c = "
                f"{a['inv_sigma0']:.3f} + {1 / c_rate:.2f} = {pred:.2f}, c from "
                f"`gflow.analysis.saddle.saddle_rate`)"
            )
            verdict = verdict_slope(ks, pred, r2s=r2s)
        else:
            claim = f"a. {key} onset linear in ln(1/ε)"
            verdict = verdict_linear(r2s)
        row(claim, f"seed 0: {on}; {fit}; {spread}", _cell(verdict))
    # b: plateau loss
    pl = ", ".join(
        f"{r['eps']:g}: {r['loss']:.4f} (t={r['t']:.0f})"
        for r in b["rows"]
        if r["loss"] is not None
    )
    per_eps = "; ".join(
        f"{e['eps']:g}: {fmt_ms([s['b']['rows'][i]['loss'] for s in seeds], '.5f')}"
        for i, e in enumerate(b["rows"])
    )
    losses = [r["loss"] for s in seeds for r in s["b"]["rows"]]
    log_d = math.log(len(FlowConfig().pi))
    if any(x is None for x in losses):
        pv = (NOT, "no plateau point (condensation or focus missing) in some run")
    else:
        pv = verdict_plateau(losses, b["H_pi"], log_d)
    row(
        f"b. first plateau loss (min-∣∇L∣ point), H(π) = {b['H_pi']:.4f}",
        f"seed 0: {pl}; {sn}: {per_eps}",
        _cell(pv),
    )
    # c: alignment
    cm = [s["c"]["cos_mean"] for s in seeds]
    row(
        f"c. cos(Φ, ππᵀ) during focus (ε = 1e-3; seed 0: t∈[{c['focus'][0]:.0f}, "
        f"{c['focus'][1]:.0f}])",
        f"seed 0: min {c['cos_min']:.3f}, mean {c['cos_mean']:.3f}, entropy drop "
        f"{c['entropy_drop_default']:.3f} nats; {sn}: min "
        f"{fmt_ms([s['c']['cos_min'] for s in seeds])}, mean {fmt_ms(cm)}, entropy "
        f"drop {fmt_ms([s['c']['entropy_drop_default'] for s in seeds])}",
        _cell(verdict_alignment(cm)),
    )
    for name, label in (("lam0", "λ = 0"), ("uniform", "uniform π")):
        x = c[name]
        row(
            f"c. {label}: no focus (seed 0)",
            f"entropy drop {x['entropy_drop']:.4f} nats, top query's attention on "
            f"token 0 ≤ {x['top_query_on_top_max']:.3f}, focus detected: "
            f"{x['focus_detected']}",
            _cell(verdict_no_focus(x["entropy_drop"], x["focus_detected"])),
        )
    # d: dilution
    toks = list(d["sign_change_t"])
    fl = ", ".join(
        f"{k}: t={v:.0f}" if v is not None else f"{k}: none"
        for k, v in d["sign_change_t"].items()
    )
    fl_sp = ", ".join(
        f"{k}: {fmt_ms([s['d']['sign_change_t'][k] for s in seeds], '.1f')}"
        for k in toks
    )
    flags = [[s["d"]["sign_change_t"][k] is not None for k in toks] for s in seeds]
    dil = d["dilution"]
    dil_t = "not detected" if dil is None else f"t∈[{dil[0]:.0f}, {dil[1]:.0f}]"
    row(
        f"d. dilution (seed 0: {dil_t}): low-frequency u₁ coordinates turn negative "
        "in cycle 1",
        f"seed 0: {fl}; {sn}: {fl_sp}",
        _cell(verdict_every(flags, "sign change by the end of cycle 1")),
    )
    drop = ", ".join(
        f"q{i}: {x:.2f} → {y:.2f}"
        for i, (x, y) in enumerate(
            zip(d["attention_on_0_at_focus_end"], d["attention_on_0_min_in_cycle1"])
        )
        if i > 0
    )
    q = range(1, len(d["attention_on_0_at_focus_end"]))
    ends = [s["d"]["attention_on_0_at_focus_end"] for s in seeds]
    mins = [s["d"]["attention_on_0_min_in_cycle1"] for s in seeds]
    drop_sp = ", ".join(
        f"q{i}: {fmt_ms([x[i] for x in ends], '.2f')} → "
        f"{fmt_ms([x[i] for x in mins], '.2f')}"
        for i in q
    )
    dflags = [
        [
            s["d"]["attention_on_0_at_focus_end"][i]
            - s["d"]["attention_on_0_min_in_cycle1"][i]
            >= 0.1
            for i in q
        ]
        for s in seeds
    ]
    row(
        "d. low-frequency queries' attention on token 0, focus end → cycle-1 minimum",
        f"seed 0: {drop}; {sn}: {drop_sp}",
        _cell(verdict_every(dflags, "a drop of ≥ 0.1")),
    )
    # e: superseded
    er = ", ".join(
        f"δ={r['delta']:g}: "
        + (f"{r['onset']:.0f}" if r["onset"] is not None else "no growth")
        + f" (σ₂ at t1 {r['sv2_final']:.3g}, d ln σ₂/dt late {r['late_rate']:.1e})"
        for r in e["rows"]
    )
    row(
        f"e. σ₂(W_E) growth onset, π = {tuple(e['pi_base'])} ± δ (seed 0)",
        er,
        superseded_cell("e", sad),
    )
    # f: next cycle
    if "f" in res:
        f = res["f"]
        cyc2 = ", ".join(
            f"{s['stage']} [{s['t_start']:.0f}, {s['t_end']:.0f}]"
            for s in f["stages"]
            if s["cycle"] == 2
        )
        found = [
            [x["stage"] for x in s["f"]["stages"] if x["cycle"] == 2] for s in seeds
        ]
        growth = [s["f"]["sv3_final"] / s["f"]["sv3_at_400"] for s in seeds]

        def start(s, name):
            x = next(
                (x for x in s["f"]["stages"] if x["cycle"] == 2 and x["stage"] == name),
                None,
            )
            return None if x is None else x["t_start"]

        starts = ", ".join(
            f"{k}: {fmt_ms([start(s, k) for s in seeds], '.0f')}"
            for k in ("focus", "dilution", "asymmetry_lifting")
        )
        row(
            f"f. next cycle (t ≤ {res.get('long_t1', 1500):g}, {f['solver']})",
            f"seed 0 ({f['steps']} steps, {f['rejected']} rejected): cycle 2: "
            f"{cyc2 or 'none'}; σ₃ {f['sv3_at_400']:.3g} (t=400) → "
            f"{f['sv3_final']:.3g}; query 0 on token 0 at t1: "
            f"{f['top_query_on_0_final']:.2f}; {sn}: cycle-2 starts {starts}; "
            f"σ₃ growth {fmt_ms(growth, '.1f')}×; query 0 on token 0 at t1 "
            f"{fmt_ms([s['f']['top_query_on_0_final'] for s in seeds], '.2f')}",
            _cell(verdict_cycle2(found, growth)),
        )
    rec = recurrence_row()
    if rec is not None:
        row(*rec)
    # g: ablations
    near = [s["g_default"]["time_near_H_pi"] for s in seeds]
    x = g["eps_0.001"]
    row(
        "g. factorised (default): unigram plateau",
        f"seed 0: time with ∣L−H(π)∣ < 1% of log d − H(π): {x['time_near_H_pi']:.1f}; "
        f"entropy drop {x['entropy_drop']:.3f}; stages: {', '.join(x['stages'])}; "
        f"{sn}: time {fmt_ms(near, '.1f')}",
        _cell(verdict_plateau_time(min(near), expect_plateau=True)),
    )
    x = g["unfactorised"]
    row(
        "g. unfactorised W_A: no unigram plateau (seed 0)",
        f"time with ∣L−H(π)∣ < 1% of log d − H(π): {x['time_near_H_pi']:.1f}; entropy "
        f"drop {x['entropy_drop']:.3f}; stages: {', '.join(x['stages']) or 'none'}",
        _cell(verdict_plateau_time(x["time_near_H_pi"], expect_plateau=False)),
    )
    x = g["residual"]
    row(
        "g. residual: no focus (seed 0)",
        f"time with ∣L−H(π)∣ < 1% of log d − H(π): {x['time_near_H_pi']:.1f}; entropy "
        f"drop {x['entropy_drop']:.3f}; stages: {', '.join(x['stages']) or 'none'}",
        _cell(verdict_no_focus(x["entropy_drop"], "focus" in x["stages"])),
    )
    # 3: Newton from the plateau state (superseded)
    if "critical" in res:
        k = res["critical"]
        att = [
            q + kk
            for q, kk in zip(
                k["unstable_block_weights"]["W_Q"], k["unstable_block_weights"]["W_K"]
            )
        ]
        measured = (
            f"∣∇L∣ {k['grad_norms'][0]:.1e} → "
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
            f"{k['linear_rel_error'][-1]:.1e} at t = {k['ts'][-1]:g}"
        )
        t_pl = k["t_plateau"]
    else:
        measured, t_pl = "not run (--critical)", 40.0
    row(
        f"3. critical point near the plateau (Newton from t = {t_pl:g}, seed 0)",
        measured,
        superseded_cell("3", sad),
    )
    return "\n".join(lines) + "\n"


def plot(cfg: Config, res: dict, *, out: Path = OUT, path: Path | None = None) -> None:
    """One panel per claim, from the saved runs."""
    from gflow.plotting import plt, save_figure

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
    save_figure(fig, path or out / "markov_cycle.png")


def write_docs(text: str, path: Path = DOC) -> None:
    """Replace the block between the table markers in docs/markov_cycle.md."""
    _docs.replace_block(path, "<!-- table:start -->", "<!-- table:end -->", text)


def run_line(
    uptime: str,
    loads: tuple[float, ...],
    walls: dict[str, float],
    seeds: tuple[int, ...],
) -> str:
    """The generated line next to the command: wall times, the seeds of the claims
    table (``Config.seeds``; the two other blocks state theirs) and the load at the
    start (``loads``: the 1- and 5-minute load averages, the larger of those at the
    start and the end; said when either is above 1.5)."""
    parts = ", ".join(f"{k} {v / 60:.1f} min" for k, v in walls.items())
    total = sum(walls.values())
    text = (
        f"Last full regeneration: `{CMD}` took {total / 60:.1f} minutes ({parts}); "
        f"`uptime` at the start: `{uptime}`. The claims table's rows on the default "
        f"flow ran from init seeds {', '.join(map(str, seeds))}, its ablations from "
        "seed 0; the t = 10 000 and robustness blocks state their own seeds."
    )
    if max(loads) > 1.5:
        text += (
            " The load average was above 1.5 (1 and 5 minutes: "
            + ", ".join(f"{x:.2f}" for x in loads)
            + "): the two cores were shared with other jobs; idle cores are faster."
        )
    return text + "\n"


def _import(name: str):
    """Another experiment script, imported by name (``experiments.<name>``)."""
    return importlib.import_module(f"experiments.{name}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--skip-long", action="store_true", help="skip claim f (t=1500)")
    p.add_argument("--skip-runs", action="store_true", help="reuse the saved runs")
    p.add_argument(
        "--critical",
        action="store_true",
        help="run row 3 (Newton; on with --write-docs)",
    )
    p.add_argument("--seeds", type=int, default=5, help="init seeds 0..n-1 (default 5)")
    p.add_argument("--only", nargs="*", default=(), help="integrate only these runs")
    p.add_argument(
        "--write-docs",
        action="store_true",
        help=f"update {DOC} (this table, markov_cycles_long, markov_robustness)",
    )
    args = p.parse_args()
    uptime, loads = _docs.uptime(), os.getloadavg()[:2]
    print(f"start: {uptime}", flush=True)
    t0 = time.perf_counter()
    walls: dict[str, float] = {}
    cfg = Config(long=not args.skip_long, seeds=tuple(range(args.seeds)))
    if not args.skip_runs:
        run(cfg, only=tuple(args.only))
    crit = critical() if (args.critical or args.write_docs) else None
    if args.only:
        return
    res = measure(cfg)
    res["long_t1"] = cfg.long_t1
    if crit is None and (OUT / "critical.json").exists():
        crit = read_json(OUT / "critical.json")
    if crit is not None:
        res["critical"] = crit
    sad = saddle_rows()
    res["saddle_source"] = sad.get("source")
    write_json(OUT / "summary.json", res)
    text = table(res, sad)
    (OUT / "table.md").write_text(text)
    plot(cfg, res)
    print(text, flush=True)
    walls["markov_cycle"] = time.perf_counter() - t0
    print(f"markov_cycle: {walls['markov_cycle']:.0f} s", flush=True)
    if not args.write_docs:
        return
    FIG.parent.mkdir(parents=True, exist_ok=True)
    plot(cfg, res, path=FIG)
    write_docs(text + f"\n![markov_cycle](figures/{FIG.name})\n")
    # the other generated blocks of the page, from scratch (their own results dirs
    # under ours, so that nothing saved before is reused)
    t = time.perf_counter()
    _import("markov_cycles_long").main(
        ["--write-docs", "--out", str(OUT / "cycles_long")]
    )
    walls["markov_cycles_long"] = time.perf_counter() - t
    t = time.perf_counter()
    _import("markov_robustness").main(
        ["--write-docs", "--out", str(OUT / "robustness")]
    )
    walls["markov_robustness"] = time.perf_counter() - t
    total = time.perf_counter() - t0
    # the load at the end too: other jobs may have started during the run
    loads = tuple(max(a, b) for a, b in zip(loads, os.getloadavg()[:2]))
    _docs.replace_block(
        DOC, RUN_START, RUN_END, run_line(uptime, loads, walls, cfg.seeds)
    )
    print(f"total wall time {total:.0f} s ({total / 60:.1f} min); {walls}", flush=True)


if __name__ == "__main__":
    main()
