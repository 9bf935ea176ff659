"""The new stage rules on the paper's one-layer model (issue 55, "Done when" 2).

For seeds 0-9: the gradient flow of the population loss (``gflow flow``'s model,
solver and tolerances) to t1 = 1000, and full-batch GD at eta = 0.25 on the same
loss for 4000 steps (t = 1000 on the shared clock), each read by
``detect_stages`` (docs/stage_rules.md). A seed counts when cycle 1 shows
condensation, focus onto the top token, dilution from it and sigma_2(W_E)
lifting, all closed. Prints a markdown table; with ``--uniform`` the same on the
uniform-pi chain, where the paper's cycle-1 rules must report nothing.

    PYTHONPATH=$PWD python experiments/stage_rules_flow.py [--seeds 10] [--uniform]
"""

from __future__ import annotations

import argparse
import time
import warnings

import jax
import numpy as np
import optax

import gflow

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
    a = p.parse_args(argv)
    jax.config.update("jax_enable_x64", True)
    pi = (0.25,) * 4 if a.uniform else PAPER_PI
    start = time.time()
    print(f"pi = {pi}, lambda = 0.5, t1 = {a.t1:g}, seeds 0-{a.seeds - 1}\n")
    print("| seed | method | " + " | ".join(CYCLE_ONE) + " | keys |")
    print("|---" * (len(CYCLE_ONE) + 3) + "|")
    full = {}
    for seed in range(a.seeds):
        rows, said = run(seed, pi, a.t1, a.eta)
        for method, row in rows.items():
            ok = all(row[n] == "closed" for n in CYCLE_ONE)
            full[method] = full.get(method, 0) + int(ok)
            cells = " | ".join(row[n] for n in CYCLE_ONE)
            print(f"| {seed} | {method} | {cells} | {row['keys']} |")
        for s in sorted(said):
            print(f"<!-- seed {seed}: warning from {s} -->")
    print()
    for method, n in full.items():
        print(f"- {method}: complete closed cycle 1 in {n} of {a.seeds} seeds")
    print(f"- took {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
