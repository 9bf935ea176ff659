"""Do the detected stages depend on the horizon, and does the head-wise rule find
the flow's lifting?

Question (issue 34 point 4): the default flow's stages to t1 = 3000 ended with a
third dilution that the run to t1 = 10⁴ did not have, and a focus end moved with t1.
With the causal rules of ``gflow.analysis.stages`` (a stage is closed once the data
fix it, else ``provisional``), are the closed stages of the runs to t1 = 1500, 3000,
6000 and 10⁴ the same? And on the same one-layer run, observed through
``HeadObservables`` (a probe of sampled sequences, as ``gflow.Monitor`` sees it), do
``detect_head_stages``' global lifting (σ₂(W_E)) and the head's own (σ₂(W_A)) match
the flow's lifting?

One flow of the default chain (ε = 1e-3, init seed 0, float64, the default solver,
dt = 5: 2001 saved times) to t = 10⁴ records ``StageObservables`` and
``HeadObservables`` (256 sequences of 65 tokens from the chain, sample key 1, top
token 0, tracked tokens 1-3); the runs to the shorter horizons are its prefixes (a
flow integrated to t1 saves the same points, up to the solver's step choices, which
tests/test_stage_horizon.py's slow test checks with separate runs).

Command (from the repository root):

    PYTHONPATH=$PWD python experiments/stage_horizon.py [--write-docs]

Runtime: about 1 minute on two shared cores (one compilation, one flow). Writes
experiments/results/stage_horizon/summary.json; with --write-docs the block between
``<!-- horizon:start -->`` and ``<!-- horizon:end -->`` of docs/markov_cycle.md.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from experiments import _docs  # noqa: E402
from gflow.analysis import (  # noqa: E402
    HeadObservables,
    StageObservables,
    detect_head_stages,
    detect_stages,
)
from gflow.dynamics import Trajectory, solve_flow  # noqa: E402
from gflow.problems import PopulationLoss  # noqa: E402
from gflow.runs import SOLVERS, FlowConfig, write_json  # noqa: E402

OUT = Path("experiments/results/stage_horizon")
DOC = Path("docs/markov_cycle.md")
CMD = "PYTHONPATH=$PWD python experiments/stage_horizon.py --write-docs"
HORIZONS = (1500.0, 3000.0, 6000.0, 10000.0)
T1, DT, SEED, SAMPLE_KEY = 10000.0, 5.0, 0, 1


class _Both:
    """StageObservables and HeadObservables in one dict (the head's sv_W_A
    [1, 1, m] replaces the one-layer [m]; detect_stages does not read it)."""

    def __init__(self, stage, head):
        self.stage, self.head = stage, head

    def __call__(self, model):
        return {**self.stage(model), **self.head(model)}


def run() -> dict:
    cfg = FlowConfig(t1=T1, num_saves=int(T1 / DT) + 1, seed=SEED)
    chain = cfg.chain()
    probe = chain.sample(key=jax.random.key(SAMPLE_KEY), batch=256, length=65)
    head_obs = HeadObservables(probe, 0, [1, 2, 3])
    start = time.time()
    traj = solve_flow(
        PopulationLoss(chain),
        cfg.model(),
        t1=cfg.t1,
        ts=np.linspace(0.0, cfg.t1, cfg.num_saves),
        solver=SOLVERS[cfg.solver](),
        rtol=cfg.rtol,
        atol=cfg.atol,
        max_steps=cfg.max_steps,
        observables=_Both(StageObservables(chain), head_obs),
        progress=False,
    )
    seconds = time.time() - start
    t = np.asarray(traj.t)
    out = {"seconds": seconds, "steps": int(traj.stats["num_steps"]), "runs": {}}
    for t1 in HORIZONS:
        keep = t <= t1
        view = Trajectory(
            t=t[keep],
            metrics={k: np.asarray(v)[keep] for k, v in traj.metrics.items()},
            final=None,
        )
        out["runs"][str(int(t1))] = [
            s.to_dict() for s in detect_stages(view, pi=chain.pi)
        ]
    metrics = {k: v for k, v in traj.metrics.items() if k != "unigram_gap"}
    heads = Trajectory(t=t, metrics=metrics, final=None)
    out["heads"] = [s.to_dict() for s in detect_head_stages(heads)]
    return out


def _span(s) -> str:
    mark = " (provisional)" if s.get("provisional") else ""
    return f"{s['stage']} {s['cycle']} [{s['t_start']:g}, {s['t_end']:g}]{mark}"


def render(res: dict, load: str) -> str:
    lines = [
        f"`{CMD}` (init seed {SEED}, probe sample key {SAMPLE_KEY}; one flow to "
        f"t = {T1:g}, dt = {DT:g}, {res['steps']} solver steps; "
        + (
            f"{res['seconds']:.0f} s with compilation"
            if res["load"] <= 1.5
            else f"not timed: load average {res['load']:.2f}"
        )
        + f"; `uptime` at the start: `{load}`).",
        "",
        "Stages of the prefixes of the flow (`detect_stages`):",
        "",
    ]
    rows = [(t1, "; ".join(_span(s) for s in st)) for t1, st in res["runs"].items()]
    lines.append(_docs.table(["t1", "stages"], rows))
    runs = list(res["runs"].values())
    ok = all(
        {
            (s["stage"], s["cycle"], s["t_start"], s["t_end"])
            for s in a
            if not s.get("provisional")
        }
        <= {
            (s["stage"], s["cycle"], s["t_start"], s["t_end"])
            for s in b
            if not s.get("provisional")
        }
        for i, a in enumerate(runs)
        for b in runs[i + 1 :]
    )
    lines += [
        "",
        f"Every closed stage of a shorter run is a closed stage of each longer "
        f"run: **{ok}**.",
        "",
        "`detect_head_stages` on the same run through `HeadObservables` (the loss "
        "rate ends condensation, no H(π) given); global = the paper's lifting from "
        "σ₂(W_E), L0H0 = the head's own σ(W_A) growth:",
        "",
    ]
    rows = [
        (
            "global" if s["layer"] < 0 else f"L{s['layer']}H{s['head']}",
            _span(s),
        )
        for s in res["heads"]
    ]
    lines.append(_docs.table(["where", "stage"], rows))
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--write-docs", action="store_true")
    args = p.parse_args(argv)
    load, load1 = _docs.uptime(), os.getloadavg()[0]
    res = run()
    res["load"] = load1
    OUT.mkdir(parents=True, exist_ok=True)
    write_json(OUT / "summary.json", res)
    text = render(res, load)
    print(text)
    if args.write_docs:
        _docs.replace_block(DOC, "<!-- horizon:start -->", "<!-- horizon:end -->", text)


if __name__ == "__main__":
    main()
