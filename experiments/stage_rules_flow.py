"""The new stage rules on the paper's one-layer model (issue 55, "Done when" 2).

For seeds 0-9: the gradient flow of the population loss (``gflow flow``'s model,
solver and tolerances) to t1 = 1000, and full-batch GD at eta = 0.25 on the same
loss for 4000 steps (t = 1000 on the shared clock), each read by
``detect_stages`` (docs/stage_rules.md). A seed counts when cycle 1 shows
condensation, focus onto the top token, dilution from it and sigma_2(W_E)
lifting, all closed. Prints a markdown table; with ``--uniform`` the same on the
uniform-pi chain, where the paper's cycle-1 rules must report nothing.

    PYTHONPATH=$PWD python experiments/stage_rules_flow.py [--seeds 10] [--uniform]

With ``--write-docs`` the table goes into docs/stage_rules.md (its block for the
chain, or for the uniform pi).
"""

from __future__ import annotations

import argparse
import datetime
import os
import time
import warnings
from pathlib import Path

import jax
import numpy as np
import optax

import gflow
from experiments import _docs

DOC = Path(__file__).resolve().parents[1] / "docs" / "stage_rules.md"

CYCLE_ONE = ("condensation", "focus", "dilution", "asymmetry_lifting")
PAPER_PI = (0.75, 0.19, 0.05, 0.01)


def cycle_one(stages) -> dict[str, str]:
    """Per cycle-1 paper stage: "closed", "provisional" or "-" (absent)."""
    out = {}
    for name in CYCLE_ONE:
        found = [s for s in stages if s.stage == name and s.cycle == 1]
        out[name] = (
            "-" if not found else ("provisional" if found[0].provisional else "closed")
        )
    keys = {s.stage: s.key for s in stages if s.cycle == 1 and s.key is not None}
    out["keys"] = ",".join(f"{k}:{v}" for k, v in sorted(keys.items()))
    return out


def run(seed: int, pi, t1: float, eta: float):
    chain = gflow.MarkovChain.from_lambda(pi=pi, lam=0.5)
    model = gflow.AttentionModel.init(
        d_vocab=len(pi), d_model=32, init_scale=1e-3, key=jax.random.key(seed)
    )
    loss = gflow.PopulationLoss(chain)
    obs = gflow.StageObservables(chain)
    flow = gflow.solve_flow(
        loss, model, t1=t1, ts=np.linspace(0, t1, 401), observables=obs
    )
    steps = int(round(t1 / eta))
    gd = gflow.run_optimizer(
        loss,
        model,
        optax.inject_hyperparams(optax.sgd)(learning_rate=eta),
        steps=steps,
        save_every=max(steps // 400, 1),
        observables=obs,
    )
    pi_arr = np.asarray(pi, float)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = {
            "flow": cycle_one(gflow.detect_stages(flow, pi=pi_arr)),
            f"GD eta={eta:g}": cycle_one(gflow.detect_stages(gd, pi=pi_arr)),
        }
    said = {str(w.message).split(":")[0] for w in caught}
    return rows, said


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--t1", type=float, default=1000.0)
    p.add_argument("--eta", type=float, default=0.25)
    p.add_argument("--uniform", action="store_true", help="the uniform-pi chain")
    p.add_argument("--write-docs", action="store_true", help="into docs/stage_rules.md")
    a = p.parse_args(argv)
    jax.config.update("jax_enable_x64", True)
    pi = (0.25,) * 4 if a.uniform else PAPER_PI
    start = time.time()
    lines = [
        f"`PYTHONPATH=$PWD python experiments/stage_rules_flow.py --seeds {a.seeds}"
        + (" --uniform" if a.uniform else "")
        + f"` ({datetime.date.today().isoformat()}): pi = {pi}, lambda = 0.5, the "
        f"flow to t1 = {a.t1:g} and GD at eta = {a.eta:g} to the same t, seeds "
        f"0-{a.seeds - 1}; each cell is the cycle-1 stage as the rules report it.",
        "",
        "| seed | method | " + " | ".join(CYCLE_ONE) + " | keys |",
        "|---" * (len(CYCLE_ONE) + 3) + "|",
    ]
    full, warned = {}, set()
    for seed in range(a.seeds):
        rows, said = run(seed, pi, a.t1, a.eta)
        warned |= said
        for method, row in rows.items():
            ok = all(row[n] == "closed" for n in CYCLE_ONE)
            full[method] = full.get(method, 0) + int(ok)
            cells = " | ".join(row[n] for n in CYCLE_ONE)
            lines.append(f"| {seed} | {method} | {cells} | {row['keys'] or '-'} |")
    lines.append("")
    for method, n in full.items():
        lines.append(
            f"- {method}: cycle 1 complete and closed in {n} of {a.seeds} seeds"
        )
    for who in sorted(warned):
        lines.append(f"- {who} warned that the cycle-1 rules report nothing")
    load = os.getloadavg()[0]
    lines.append(
        f"- took {time.time() - start:.0f} s (load {load:.2f})"
        if load <= 1.5
        else f"- not timed: a load average of {load:.2f} (above 1.5)"
    )
    text = "\n".join(lines) + "\n"
    print(text)
    if a.write_docs:
        tag = "stage_rules_uniform" if a.uniform else "stage_rules_flow"
        _docs.replace_block(
            DOC, f"<!-- {tag}:start -->", f"<!-- {tag}:end -->", text, append=True
        )


if __name__ == "__main__":
    main()
