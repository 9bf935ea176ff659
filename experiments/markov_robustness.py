"""Do the plateau and the stage order C→F→D→A survive other chains, λ and large ε?

Question (issue 13.5): the cycle-1 stages of docs/markov_cycle.md were measured on one
chain and one seed. Over five initialisation seeds each, do they hold (a) for three
other transition matrices P with the same stationary π = (0.75, 0.19, 0.05, 0.01),
(b) for λ ∈ {0.25, 0.5, 0.75} and (c) for initial scales ε from 1e-3 (the default) up
to 1/√m (m = d_model = 32), and where do the unigram plateau and the stage order
disappear as ε grows (the paper's small-initialisation assumption)?

The other chains are P = λ·Q + (1 − λ)·1πᵀ with λ = 0.5 (the default's mixing with a
fresh draw from π) and Q a stochastic matrix with stationary π that is not the
identity: Q = D_π⁻¹F for a coupling F ≥ 0 whose row and column sums are both π, so
that πQ = 1ᵀF = π (``other_chains``):

- ``ring``: Metropolis on the ring 0-1-2-3-0 (reversible, sparse): propose a
  neighbour with probability 1/2 each, accept with min(1, π_j/π_i);
- ``metropolis``: Metropolis with a uniform proposal among the other tokens
  (reversible, dense; the rare tokens almost never repeat);
- ``sinkhorn``: F a random positive matrix scaled by Sinkhorn to marginals (π, π)
  (not reversible, dense; fixed seed).

Measured per flow (population loss, float64, ``StiffSwitch``, t1 = 3000, dt = 0.5
between saved times): the cycle-1 stage times of
``gflow.detect_stages``, the escape time (loss halfway from L(0) to H(π)), the
plateau length (time with ∣L − H(π)∣ < 1% of (log d − H(π)), the measure of claim g
in docs/markov_cycle.md, where the plateau-free ablations give 0.5-2), the minimum
π-weighted attention entropy and the low-frequency queries' smallest mean attention
on the top token (dilution's depth), both up to the end of cycle 1's asymmetry
lifting, the smallest σ₂/σ₁ of W_E before that lifting starts (condensation to rank
one), every query's attention on the top token at the end of that lifting, and
whether the order C→F→D→A holds: all
four stages found, condensation ends before focus starts, and the starts of focus,
dilution and asymmetry lifting are in this order. Each configuration reports
mean ± sample sd over the seeds and k/n seeds with the order; the plateau counts as
present when it lasts at least ``Config.min_plateau`` (10) in every seed.

Command (from the repository root):

    PYTHONPATH=$PWD python experiments/markov_robustness.py [--quick] [--write-docs]

Runtime: about 2 minutes on two shared cores, 50 flows (one compilation, ~15 s,
serves every flow: the chain and the initial model are data; a flow takes 1-3 s);
``--quick`` runs one seed per configuration into results_quick.json (a smoke run:
with --write-docs it would put its one-seed table into the document).

Why t1 = 3000: cycle 1 of the default ends by t ≈ 340, but for the weaker chains
(the three others and λ = 0.25) σ₂(W_E) grows slowly and its growth ends at
t ≈ 800-2300; the stage starts are the same at t1 = 1500, 3000 and 6000 (seed 0),
and so are the ends except where a signal keeps falling slowly (the focus of the
``sinkhorn`` chain: its end moved from 758 to 981 to 1070 under the rules before
issue 34). ``detect_stages`` now marks such a stage ``provisional`` (the run ends
before the data close it); the block lists, per configuration, the cycle-1 stages
that are provisional at t1 and in how many seeds.

Writes
experiments/results/markov_robustness/results.json (one entry per flow, saved as each
finishes and reused on a rerun, so an interrupted run loses at most one flow),
table.md and markov_robustness_eps.png; with --write-docs the figure goes to
docs/figures/ and the table replaces the block between ``<!-- robustness:start -->``
and ``<!-- robustness:end -->`` of docs/markov_cycle.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from experiments import _docs  # noqa: E402
from gflow.analysis import (  # noqa: E402
    StageObservables,
    detect_stages,
    embed_rank_one,
    rank_one_critical_point,
    saddle_rate,
    split_hessian,
)
from gflow.dynamics import solve_flow  # noqa: E402
from gflow.dynamics.solvers import StiffSwitch  # noqa: E402
from gflow.problems import AttentionModel, MarkovChain, PopulationLoss  # noqa: E402
from gflow.runs import read_json, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "results" / "markov_robustness"
DOC = ROOT / "docs" / "markov_cycle.md"
FIGS = ROOT / "docs" / "figures"
START, END = "<!-- robustness:start -->", "<!-- robustness:end -->"
CMD = "PYTHONPATH=$PWD python experiments/markov_robustness.py --write-docs"
PI = (0.75, 0.19, 0.05, 0.01)
ORDER = ("condensation", "focus", "dilution", "asymmetry_lifting")
#: bump when ``measure`` changes: saved flows with another version are run again
MEASURE_VERSION = 3
#: the per-flow numbers the table summarises, in column order
QUANTITIES = (
    "escape",
    "plateau",
    "condensation_end",
    "focus_start",
    "focus_end",
    "dilution_start",
    "dilution_end",
    "asymmetry_lifting_start",
    "asymmetry_lifting_end",
    "min_entropy",
    "rank_one",
    "low_on_top",
)
#: the stage-time columns of the first table; the rest go to the second
TIMES = QUANTITIES[2:9]
FORMATS = {
    "escape": ".1f",
    "plateau": ".1f",
    "min_entropy": ".3f",
    "rank_one": ".4f",
    "low_on_top": ".2f",
}


@dataclasses.dataclass(frozen=True)
class Config:
    """The configurations, seeds and flow settings of the experiment."""

    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    d_model: int = 32
    eps: tuple[float, ...] = (1e-3, 1e-2, 3e-2, 0.1, 1 / math.sqrt(32))
    lams: tuple[float, ...] = (0.25, 0.5, 0.75)
    chain_lam: float = 0.5
    t1: float = 3000.0
    num_saves: int = 6001
    rtol: float = 1e-6
    atol: float = 1e-8
    min_plateau: float = 10.0
    sinkhorn_seed: int = 0
    #: the second initial scale of every other chain: its plateau's slope in ln(1/ε)
    slope_eps: float = 1e-2


def _coupling_chain(F: np.ndarray) -> np.ndarray:
    """Q = D_π⁻¹F for a coupling F whose row and column sums are π."""
    return F / F.sum(axis=1, keepdims=True)


def sinkhorn_coupling(pi, *, seed: int, iters: int = 10_000) -> np.ndarray:
    """A random positive d × d matrix scaled to row and column sums π (float64)."""
    pi = np.asarray(pi, float)
    # log-normal entries: a structured coupling, not one close to ππᵀ
    F = np.exp(2.0 * np.random.default_rng(seed).normal(size=(pi.size, pi.size)))
    for _ in range(iters):
        F *= (pi / F.sum(axis=1))[:, None]
        F *= (pi / F.sum(axis=0))[None, :]
        if np.abs(F.sum(axis=1) - pi).max() < 1e-16:
            break
    return F


def metropolis(pi, proposal: np.ndarray) -> np.ndarray:
    """The Metropolis chain of a symmetric proposal: Q_ij = R_ij min(1, π_j/π_i)."""
    pi = np.asarray(pi, float)
    Q = proposal * np.minimum(1.0, pi[None, :] / pi[:, None])
    np.fill_diagonal(Q, 0.0)
    np.fill_diagonal(Q, 1.0 - Q.sum(axis=1))
    return Q


def other_chains(pi=PI, *, lam: float = 0.5, seed: int = 0) -> dict[str, np.ndarray]:
    """Three transition matrices P = λQ + (1 − λ)1πᵀ with stationary π (module
    docstring); Q is not the identity, so P differs from the default λI + (1 − λ)1πᵀ.
    """
    pi = np.asarray(pi, float)
    d = pi.size
    ring = np.zeros((d, d))
    for i in range(d):
        ring[i, (i + 1) % d] = ring[i, (i - 1) % d] = 0.5
    uniform = (np.ones((d, d)) - np.eye(d)) / (d - 1)
    qs = {
        "ring": metropolis(pi, ring),
        "metropolis": metropolis(pi, uniform),
        "sinkhorn": _coupling_chain(sinkhorn_coupling(pi, seed=seed)),
    }
    return {k: lam * q + (1.0 - lam) * np.outer(np.ones(d), pi) for k, q in qs.items()}


def _default_P():
    return MarkovChain.from_lambda(pi=PI, lam=0.5).P


def configurations(cfg: Config) -> dict[str, dict]:
    """Name -> {"P": [d, d] list, "eps": ε, "label": text} of every configuration."""
    default = _default_P()
    out = {"default": {"P": default, "eps": cfg.eps[0], "label": "default"}}
    for name, P in other_chains(PI, lam=cfg.chain_lam, seed=cfg.sinkhorn_seed).items():
        out[f"chain_{name}"] = {"P": P, "eps": cfg.eps[0], "label": f"P = {name}"}
    for lam in cfg.lams:
        if lam != 0.5:
            P = MarkovChain.from_lambda(pi=PI, lam=lam).P
            out[f"lam_{lam:g}"] = {"P": P, "eps": cfg.eps[0], "label": f"λ = {lam:g}"}
    for e in cfg.eps[1:]:
        label = "ε = 1/√m" if math.isclose(e, 1 / math.sqrt(cfg.d_model)) else None
        out[f"eps_{e:.4g}"] = {"P": default, "eps": e, "label": label or f"ε = {e:g}"}
    for name in [k for k in out if k.startswith(("chain_", "lam_"))]:
        out[f"{name}_eps{cfg.slope_eps:g}"] = {
            "P": out[name]["P"],
            "eps": cfg.slope_eps,
            "label": f"{out[name]['label']}, ε = {cfg.slope_eps:g}",
        }
    return {k: {**v, "P": np.asarray(v["P"], float).tolist()} for k, v in out.items()}


def _stage(stages, name):
    return next((s for s in stages if s.name == name and s.cycle == 1), None)


def order_holds(stages) -> bool:
    """C→F→D→A in cycle 1: all four found, condensation ends before focus starts,
    and focus, dilution and asymmetry lifting start in this order."""
    c, f, d, a = (_stage(stages, n) for n in ORDER)
    if None in (c, f, d, a):
        return False
    return c.t_end <= f.t_start <= d.t_start <= a.t_start


def measure(traj, chain: MarkovChain) -> dict:
    """The per-flow numbers (module docstring) from a trajectory with
    StageObservables."""
    t = np.asarray(traj.t, float)
    loss = np.asarray(traj.metrics["loss"], float)
    h, log_d = chain.unigram_loss, math.log(chain.d)
    stages = detect_stages(traj, pi=chain.pi)
    mid = 0.5 * (loss[0] + h)
    below = loss <= mid
    near = np.abs(loss - h) < 0.01 * (log_d - h)
    entropy = np.asarray(traj.metrics["attention_entropy"], float)
    lift = _stage(stages, "asymmetry_lifting")
    t_cycle1 = t[-1] if lift is None else lift.t_end  # the entropy's cycle-1 minimum
    t_lift = t[-1] if lift is None else lift.t_start
    sv = np.asarray(traj.metrics["sv_W_E"], float)  # [n, k]
    top = int(np.argmax(chain.pi))
    low = np.arange(chain.d) != top
    on_top = np.asarray(traj.metrics["attention_on_top"], float)[:, low].mean(axis=1)
    res = {
        "status": traj.status,
        "loss0": float(loss[0]),
        "escape": float(t[np.argmax(below)]) if below.any() else None,
        "plateau": float(np.sum(near) * (t[1] - t[0])),
        "min_entropy": float(np.min(entropy[t <= t_cycle1])),
        # condensation to rank one: the smallest σ₂/σ₁ of W_E before the lifting
        "rank_one": float(np.min(sv[t <= t_lift, 1] / sv[t <= t_lift, 0])),
        # dilution's depth: the low-frequency queries' mean attention on the top token
        "low_on_top": float(np.min(on_top[t <= t_cycle1])),
        # every query's attention on the top token at the end of cycle 1 [d]
        "on_top_end": np.asarray(traj.metrics["attention_on_top"], float)[
            int(np.argmin(np.abs(t - t_cycle1)))
        ].tolist(),
        "final_loss": float(loss[-1]),
        "order": order_holds(stages),
        "stages": [s.to_dict() for s in stages],
    }
    for name in ORDER:
        s = _stage(stages, name)
        if name != "condensation":
            res[f"{name}_start"] = None if s is None else s.t_start
        res[f"{name}_end"] = None if s is None else s.t_end
    return res


def run_one(P, eps: float, seed: int, cfg: Config) -> dict:
    """Integrate one flow to cfg.t1 and measure it."""
    chain = MarkovChain(P)
    model = AttentionModel.init(
        d_vocab=chain.d, d_model=cfg.d_model, init_scale=eps, key=jax.random.key(seed)
    )
    start = time.perf_counter()
    traj = solve_flow(
        PopulationLoss(chain),
        model,
        t1=cfg.t1,
        ts=np.linspace(0.0, cfg.t1, cfg.num_saves),
        solver=StiffSwitch(),
        rtol=cfg.rtol,
        atol=cfg.atol,
        observables=StageObservables(chain),
        progress=False,
    )
    wall = time.perf_counter() - start
    return {
        **measure(traj, chain),
        "steps": int(traj.stats["num_steps"]),
        "wall_s": wall,
    }


def _spec(conf: dict, seed: int, cfg: Config) -> dict:
    """What a saved result depends on: a changed spec is measured again."""
    return {
        "measure_version": MEASURE_VERSION,
        "P": conf["P"],
        "eps": conf["eps"],
        "seed": seed,
        "d_model": cfg.d_model,
        "t1": cfg.t1,
        "num_saves": cfg.num_saves,
        "rtol": cfg.rtol,
        "atol": cfg.atol,
    }


def run(
    cfg: Config, path: Path, *, only: tuple[str, ...] = (), argv: list[str] = ()
) -> dict:
    """Every flow not yet in ``path`` (results.json), saved after each one."""
    saved = read_json(path) if path.exists() else {}
    runs = saved.setdefault("runs", {})
    sessions = saved.setdefault("sessions", [])
    session = {"uptime_at_start": _docs.uptime(), "argv": list(argv), "flows": 0}
    index = len(sessions)  # appended with its first flow
    for name, conf in configurations(cfg).items():
        if only and name not in only:
            continue
        for seed in cfg.seeds:
            key, spec = f"{name}/seed{seed}", _spec(conf, seed, cfg)
            if key in runs and runs[key]["spec"] == spec:
                continue
            res = run_one(conf["P"], conf["eps"], seed, cfg)
            runs[key] = {"spec": spec, "session": index, **res}
            if session["flows"] == 0:
                sessions.append(session)
            session["flows"] += 1
            write_json(path, saved)
            print(
                f"{key}: {res['status']}, {res['steps']} steps, {res['wall_s']:.1f} s, "
                f"order {res['order']}, plateau {res['plateau']:.1f}",
                flush=True,
            )
    return saved


def _keys(cfg: Config, saved: dict) -> list[str]:
    """The saved flows that belong to ``cfg`` (their spec matches)."""
    runs = saved.get("runs", {})
    return [
        f"{name}/seed{s}"
        for name, conf in configurations(cfg).items()
        for s in cfg.seeds
        if runs.get(f"{name}/seed{s}", {}).get("spec") == _spec(conf, s, cfg)
    ]


def summarize(values) -> dict:
    """Mean ± sample sd of the values that are not None, with their count n and the
    total; sd is None for fewer than two values."""
    x = np.array([v for v in values if v is not None], float)
    return {
        "mean": float(x.mean()) if x.size else None,
        "sd": float(x.std(ddof=1)) if x.size > 1 else None,
        "n": int(x.size),
        "total": len(values),
    }


def count(flags) -> tuple[int, int]:
    """k of n: how many flags are true."""
    flags = list(flags)
    return sum(bool(f) for f in flags), len(flags)


def summary(cfg: Config, saved: dict) -> dict:
    """Per configuration: every quantity's mean ± sd, k/n with the order, plateau."""
    out = {}
    keys = set(_keys(cfg, saved))
    for name, conf in configurations(cfg).items():
        rows = [
            saved["runs"][f"{name}/seed{s}"]
            for s in cfg.seeds
            if f"{name}/seed{s}" in keys
        ]
        if not rows:
            continue
        s = {q: summarize([r[q] for r in rows]) for q in QUANTITIES}
        k, n = count(r["order"] for r in rows)
        kp, _ = count(r["plateau"] >= cfg.min_plateau for r in rows)
        ends = np.array([r["on_top_end"] for r in rows])  # [seeds, d]
        out[name] = {
            "label": conf["label"],
            "on_top_end": [summarize(list(col)) for col in ends.T],
            "eps": conf["eps"],
            **s,
            "order": [k, n],
            "plateau_present": [kp, n],
            "status": sorted({r["status"] for r in rows}),
        }
    return out


def _fmt(s: dict, spec: str = ".0f") -> str:
    if s["mean"] is None:
        return "–"
    text = f"{s['mean']:{spec}}"
    if s["sd"] is not None:
        text += f" ± {s['sd']:{spec}}"
    if s["n"] < s["total"]:
        text += f" ({s['n']}/{s['total']})"
    return text


LETTERS = {"condensation": "C", "focus": "F", "dilution": "D", "asymmetry_lifting": "A"}


def provisional_line(cfg: Config, saved: dict) -> str:
    """The cycle-1 stages that are provisional at t1, per configuration, in k/n
    seeds."""
    keys = set(_keys(cfg, saved))
    parts = []
    for name, conf in configurations(cfg).items():
        rows = [
            saved["runs"][f"{name}/seed{s}"]
            for s in cfg.seeds
            if f"{name}/seed{s}" in keys
        ]
        found: dict[str, int] = {}
        for r in rows:
            for st in r["stages"]:
                if st["cycle"] == 1 and st.get("provisional"):
                    found[st["stage"]] = found.get(st["stage"], 0) + 1
        if found:
            cells = ", ".join(
                f"{LETTERS[k]} {found[k]}/{len(rows)}" for k in LETTERS if k in found
            )
            parts.append(f"{conf['label']}: {cells}")
    return (
        "Provisional cycle-1 stages at t1 (`Stage.provisional`: the run ends before "
        "the data close them, so their ends, and for a lifting the stages after it, "
        "may still move with a longer horizon): "
        + ("; ".join(parts) if parts else "none")
        + ".\n"
    )


def _eps_rows(cfg: Config, saved: dict) -> dict[float, list[dict]]:
    """ε -> the seeds' runs of the default chain at that initial scale."""
    keys = set(_keys(cfg, saved))
    out = {}
    for name, conf in configurations(cfg).items():
        if name == "default" or name.startswith("eps_"):
            runs = [saved["runs"].get(f"{name}/seed{s}") for s in cfg.seeds]
            if all(f"{name}/seed{s}" in keys for s in cfg.seeds):
                out[conf["eps"]] = runs
    return out


def durations(cfg: Config, saved: dict) -> dict:
    """How long cycle 1's focus, dilution and asymmetry lifting last against
    ln(1/ε), on the default chain at the initial scales whose stage order holds in
    every seed: per stage the durations (end − start) at each ε and, per seed, the
    least-squares slope in ln(1/ε), summarised over the seeds."""
    by_eps = {
        e: runs
        for e, runs in sorted(_eps_rows(cfg, saved).items())
        if all(r["order"] for r in runs)
    }
    eps = list(by_eps)
    x = np.log(1 / np.asarray(eps, float))
    out = {"eps": eps, "stages": {}}
    for stage in ORDER[1:]:
        d = np.array(
            [[r[f"{stage}_end"] - r[f"{stage}_start"] for r in by_eps[e]] for e in eps]
        )  # [eps, seeds]
        slopes = [np.polyfit(x, d[:, k], 1)[0] for k in range(d.shape[1])]
        out["stages"][stage] = {
            "duration": [summarize(list(row)) for row in d],
            "slope": summarize(slopes) if len(eps) >= 2 else None,
        }
    return out


def plateau_slopes(cfg: Config, saved: dict) -> dict:
    """Per chain (the default and every other one): the plateau's growth per unit
    ln(1/ε) between ε = ``cfg.eps[0]`` and ``cfg.slope_eps``, seed by seed
    (summarised), against 1/c from the chain's unigram saddle (``saddle_rate``):
    W_Q and W_K leave the saddle like ε e^{ct}, so the plateau lasts ln(1/ε)/c plus
    a constant (docs/markov_saddle.md §1)."""
    confs, keys = configurations(cfg), set(_keys(cfg, saved))
    pairs = {"default": ("default", f"eps_{cfg.slope_eps:.4g}")}
    for name in confs:
        if name.startswith(("chain_", "lam_")) and "_eps" not in name:
            pairs[name] = (name, f"{name}_eps{cfg.slope_eps:g}")
    dx = math.log(cfg.slope_eps / cfg.eps[0])  # ln(1/ε₀) − ln(1/ε₁)
    out = {}
    for name, (lo, hi) in pairs.items():
        if hi not in confs:
            continue
        both = [
            (saved["runs"][f"{lo}/seed{s}"], saved["runs"][f"{hi}/seed{s}"])
            for s in cfg.seeds
            if f"{lo}/seed{s}" in keys and f"{hi}/seed{s}" in keys
        ]
        if not both:
            continue
        slopes = [(a["plateau"] - b["plateau"]) / dx for a, b in both]
        c = saddle_rate(MarkovChain(np.asarray(confs[lo]["P"], float)))
        out[name] = {
            "label": confs[lo]["label"],
            "slope": summarize(slopes),
            "c": float(c),
        }
    return out


def plateau_line(slopes: dict, cfg: Config) -> str:
    """``plateau_slopes`` in one paragraph: per chain the measured slope, 1/c and
    their ratio, and how many chains are within 5%."""
    if not slopes:
        return ""
    parts, within = [], 0
    for v in slopes.values():
        ratio = v["slope"]["mean"] * v["c"]
        within += abs(ratio - 1) <= 0.05
        parts.append(
            f"{v['label']}: {_fmt(v['slope'], '.2f')} against 1/c = "
            f"{1 / v['c']:.2f} ({ratio:.3f})"
        )
    return (
        f"Plateau growth per unit ln(1/ε), from ε = {cfg.slope_eps:g} to "
        f"{cfg.eps[0]:g} (per seed, mean ± sd), against 1/c of each chain's unigram "
        "saddle (`saddle_rate`; ratio slope · c): "
        + "; ".join(parts)
        + f". {within} of {len(slopes)} chains within 5%.\n"
    )


def rank_one_rate(P) -> dict:
    """The saddle the asymmetry lifting escapes: the critical point where the
    width-1 (rank-one) flow of chain ``P`` stalls after cycle 1, and its unstable
    transverse eigenvalue −λ₁ (the Hessian's most negative eigenvalue across the
    rank-one manifold, at width 2). An escape from a distance ∝ ε takes about
    ln(1/ε)/λ₁, so the lifting's duration should grow by 1/λ₁ per unit ln(1/ε)."""
    import diffrax

    chain = MarkovChain(np.asarray(P, float))
    crit, norms = rank_one_critical_point(chain, t1=3000.0, solver=diffrax.Tsit5())
    loss = PopulationLoss(chain)
    sp = split_hessian(loss, embed_rank_one(crit, d_model=2))
    return {
        "lambda1": -float(np.min(sp["transverse"])),
        "grad_norm": float(norms[-1]),
        "loss": float(loss(crit)),
    }


def durations_line(dur: dict, rate: dict | None = None) -> str:
    """The durations of ``durations`` in one paragraph, with a verdict per stage:
    "grows" when the slope is at least 5 per unit ln(1/ε) and two sd from zero;
    with ``rate`` (``rank_one_rate``) the lifting's slope against 1/λ₁."""
    if len(dur["eps"]) < 2:
        return ""
    eps = " / ".join(f"{e:g}" for e in dur["eps"])
    parts = []
    for stage, v in dur["stages"].items():
        sl = v["slope"]
        grows = sl["mean"] >= 5 and (sl["sd"] is None or sl["mean"] > 2 * sl["sd"])
        parts.append(
            f"{stage.replace('_', ' ')} "
            + " / ".join(_fmt(x) for x in v["duration"])
            + f", slope {_fmt(sl, '.1f')} per unit ln(1/ε) "
            + ("(grows)" if grows else "(about constant)")
        )
    text = (
        f"Stage durations (end − start, cycle 1, default chain) at ε = {eps}, the "
        "initial scales where the order holds in every seed, with the per-seed "
        "least-squares slope against ln(1/ε): " + "; ".join(parts) + "."
    )
    lift = dur["stages"].get("asymmetry_lifting", {}).get("slope")
    if rate is not None and lift is not None:
        lam = rate["lambda1"]
        ratio = lift["mean"] * lam
        text += (
            " The lifting as a saddle escape: at the critical point where the "
            f"rank-one flow stalls (∣∇L∣ {rate['grad_norm']:.0e}, L = "
            f"{rate['loss']:.5f}) the unstable transverse eigenvalue is −λ₁ with "
            f"λ₁ = {lam:.4g}, so 1/λ₁ = {1 / lam:.1f} per unit ln(1/ε) against the "
            f"measured {lift['mean']:.1f}: slope · λ₁ = {ratio:.3f} "
            + ("(within 5%)." if abs(ratio - 1) <= 0.05 else "(off by more than 5%).")
        )
    return text + "\n"


def _verdict(row: dict) -> str:
    k, n = row["order"]
    kp, _ = row["plateau_present"]
    plateau = "present" if kp == n else "absent" if kp == 0 else f"present {kp}/{n}"
    return f"order {k}/{n}; plateau {plateau}"


def _cells(row: dict, quantities) -> str:
    return " | ".join(_fmt(row[q], FORMATS.get(q, ".0f")) for q in quantities)


def table(cfg: Config, summ: dict) -> str:
    """Two markdown tables, one row per configuration: the cycle-1 stage times, then
    the plateau, the structure and the verdict."""
    lines = [
        "| configuration | C end | F start | F end | D start | D end | A start | "
        "A end | order |",
        "|" + "---|" * 9,
    ]
    for row in summ.values():
        k, n = row["order"]
        lines.append(f"| {row['label']} | {_cells(row, TIMES)} | {k}/{n} |")
    lines += [
        "",
        "| configuration | escape | plateau | min entropy | min σ₂/σ₁(W_E) before A "
        "| low queries on top, min | verdict |",
        "|" + "---|" * 7,
    ]
    rest = ("escape", "plateau", "min_entropy", "rank_one", "low_on_top")
    for row in summ.values():
        lines.append(f"| {row['label']} | {_cells(row, rest)} | {_verdict(row)} |")
    d = len(next(iter(summ.values()))["on_top_end"])
    lines += [
        "",
        "| configuration | " + " | ".join(f"query {i}" for i in range(d)) + " |",
        "|" + "---|" * (d + 1),
    ]
    for row in summ.values():
        cells = " | ".join(_fmt(x, ".2f") for x in row["on_top_end"])
        lines.append(f"| {row['label']} | {cells} |")
    return "\n".join(lines) + "\n"


def plot(cfg: Config, summ: dict, path: Path) -> None:
    """Stage starts, escape and plateau length against ε, mean ± sd over the seeds."""
    from gflow.plotting import plt, save_figure

    rows = [summ["default"]] + [summ[k] for k in summ if k.startswith("eps_")]
    eps = np.array([r["eps"] for r in rows])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for q, label in (
        ("escape", "escape"),
        ("focus_start", "focus start"),
        ("dilution_start", "dilution start"),
        ("asymmetry_lifting_start", "lifting start"),
    ):
        m = np.array([np.nan if r[q]["mean"] is None else r[q]["mean"] for r in rows])
        sd = np.array([r[q]["sd"] or 0.0 for r in rows])
        axes[0].errorbar(eps, m, yerr=sd, marker="o", capsize=3, label=label)
    axes[0].set_xscale("log")
    axes[0].set_xlabel("ε (init scale)")
    axes[0].set_ylabel("t")
    axes[0].set_title("cycle-1 stage starts (mean ± sd over seeds)")
    axes[0].legend(fontsize=7)
    m = np.array([r["plateau"]["mean"] for r in rows])
    sd = np.array([r["plateau"]["sd"] or 0.0 for r in rows])
    axes[1].errorbar(eps, m, yerr=sd, marker="o", capsize=3, label="plateau length")
    axes[1].axhline(cfg.min_plateau, color="k", ls="--", lw=1, label="present above")
    order = [r["order"][0] / r["order"][1] for r in rows]
    ax2 = axes[1].twinx()
    ax2.plot(eps, order, "s:", color="C3", label="fraction with C→F→D→A")
    ax2.set_ylim(-0.05, 1.05)
    axes[1].set_xscale("log")
    axes[1].set_xlabel("ε (init scale)")
    axes[1].set_title("plateau length; stage order")
    axes[1].legend(fontsize=7, loc="upper right")
    ax2.legend(fontsize=7, loc="center right")
    fig.tight_layout()
    save_figure(fig, path)


def _load1(session: dict) -> float:
    """The 1-minute load average in a session's ``uptime`` line."""
    return float(session["uptime_at_start"].split("load average:")[1].split(",")[0])


def doc_text(
    cfg: Config, saved: dict, summ: dict, command: str, figure: str | None = None
) -> str:
    """The block of docs/markov_cycle.md."""
    keys = _keys(cfg, saved)
    walls = [saved["runs"][k]["wall_s"] for k in keys]
    used = [saved["runs"][k].get("session") for k in keys]
    loads = "; ".join(
        f"`{s['uptime_at_start']}` ({used.count(i)} flows)"
        for i, s in enumerate(saved["sessions"])
        if i in used
    )
    pis = ", ".join(f"{p:g}" for p in PI)
    chains = other_chains(PI, lam=cfg.chain_lam, seed=cfg.sinkhorn_seed)
    mats = "\n".join(
        f"- `{k}`: P = "
        + np.array2string(np.asarray(P), precision=4, separator=", ").replace("\n", "")
        for k, P in chains.items()
    )
    return (
        f"`{command}` ({len(cfg.seeds)} seed{'s' * (len(cfg.seeds) > 1)} per "
        "configuration: "
        f"{', '.join(map(str, cfg.seeds))}; population loss, float64, StiffSwitch, "
        f"t1 = {cfg.t1:g}, {cfg.num_saves} saved times; {len(walls)} flows, "
        + (
            f"{sum(walls):.0f} s of integration with compilation"
            if all(
                _load1(saved["sessions"][i]) <= 1.5 for i in set(used) if i is not None
            )
            else "not timed: load average above 1.5"
        )
        + "; `uptime` at the start "
        f"of each session that ran flows: {loads}).\n\n"
        f"π = ({pis}) in every row; m = {cfg.d_model}; λ = 0.5 and ε = 1e-3 unless "
        "the row says otherwise. Times in flow-time units, mean ± sample sd over the "
        "seeds ((k/n) when a stage was found in k seeds only); C, F, D, A = "
        "condensation, focus, dilution, asymmetry lifting of cycle 1; escape = loss "
        "halfway from L(0) to H(π); plateau = time with ∣L − H(π)∣ < 1% of "
        f"(log d − H(π)), present when ≥ {cfg.min_plateau:g}; min entropy = the "
        "smallest π-weighted attention entropy (nats) up to the end of cycle 1's "
        "asymmetry lifting (up to t1 when none is found); order k/n = seeds in "
        "which all four stages are found, C ends before F starts and F, D, A start "
        "in this order. Third table: each query's attention on token 0 at the end "
        "of cycle 1's asymmetry lifting (at t1 when none is found).\n\n"
        + table(cfg, summ)
        + "\n"
        + provisional_line(cfg, saved)
        + "\n"
        + durations_line(durations(cfg, saved), rank_one_rate(_default_P()))
        + "\n"
        + plateau_line(plateau_slopes(cfg, saved), cfg)
        + f"\nThe other chains (P = {cfg.chain_lam:g}·Q + {1 - cfg.chain_lam:g}·1πᵀ, "
        "πP = π to 1e-12: tests/test_markov_robustness.py):\n\n"
        + mats
        + "\n"
        + (f"\n![markov_robustness_eps]({figure})\n" if figure else "")
    )


def write_docs(doc: Path, text: str) -> None:
    """Put ``text`` in the robustness block of ``doc``, appending the section (heading
    and markers) at the end of the document the first time."""
    if START not in doc.read_text():
        body = doc.read_text().rstrip("\n")
        doc.write_text(f"{body}\n\n## Robustness (issue 13.5)\n\n{START}\n{END}\n")
    _docs.replace_block(doc, START, END, text)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one seed (results_quick.json)")
    p.add_argument("--write-docs", action="store_true", help=f"update {DOC.name}")
    p.add_argument("--only", nargs="*", default=(), help="only these configurations")
    p.add_argument("--out", type=Path, default=OUT, help="results directory")
    p.add_argument("--doc", type=Path, default=DOC, help="document to update")
    p.add_argument("--figures", type=Path, default=FIGS, help="figure directory")
    args = p.parse_args(argv)
    cfg = Config(seeds=(0,)) if args.quick else Config()
    suffix = "_quick" if args.quick else ""
    print(f"start: {_docs.uptime()}", flush=True)
    argv = sys.argv[1:] if argv is None else list(argv)
    path = args.out / f"results{suffix}.json"
    saved = run(cfg, path, only=tuple(args.only), argv=argv)
    summ = summary(cfg, saved)
    write_json(args.out / f"summary{suffix}.json", summ)
    text = table(cfg, summ)
    (args.out / f"table{suffix}.md").write_text(text)
    print(text)
    figure = None
    if "default" in summ and any(k.startswith("eps_") for k in summ):
        # the quick run's figure stays with its results, the full one goes to docs/
        in_docs = args.write_docs and not args.quick
        fig_dir = args.figures if in_docs else args.out
        plot(cfg, summ, fig_dir / f"markov_robustness_eps{suffix}.png")
        if in_docs:
            figure = f"figures/markov_robustness_eps{suffix}.png"
    if args.write_docs:
        command = CMD + (" --quick" * args.quick)
        write_docs(args.doc, doc_text(cfg, saved, summ, command, figure))


if __name__ == "__main__":
    main()
