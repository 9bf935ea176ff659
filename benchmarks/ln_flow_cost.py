"""Where the gradient flow's cost goes on the ladder's LayerNorm rungs (issue 57,
point 2: measure first).

The ladder's rungs 4 (+pre-LN), 7 (+value, MLP 64, positions) and 8 (rung 7 at
init 0.02) (docs/practical_models.md: 2 layers x 2 heads, width 16, context 32,
residual stream, init 1e-3 on rungs 4 and 7), on ``--sequences`` sequences of the
paper's chain (the issue's smallest sample, 1 024), float64, model key
``--seed``. Per rung, in one process:

- the price of one evaluation: the gradient of the sample loss (the flow's vector
  field), the same gradient computed in float32 inside the float64 integration
  (parameters cast down, the result cast back up, both casts timed) with its
  relative error, and one Hessian-vector product; compiled once before timing,
  compile and run timed apart, each the minimum of ``--repeats`` calls;
- the stiffness at the initialisation: λ_max of the sample loss's Hessian
  (Lanczos, 40 iterations), the smallest spread any LayerNorm reads
  (``gflow.analysis.smallest_layernorm_sigma``) against sqrt(eps) = 3.2e-3, and
  the norm of the block the loss is scale-invariant in
  (``scale_invariant_norm``); from λ_max, Tsit5's stability bound on the
  evaluations per unit of flow time (6 evaluations a step of at most 3.3/λ_max);
- the default solver over a short start (``--t1``): its gradient evaluations per
  unit time, against that bound.

The bound at the initialisation is not the bound over a run (λ_max moves along
t); it says what a unit of time costs where every run starts.

Command:  PYTHONPATH=$PWD python -m benchmarks.ln_flow_cost [--sequences 1024]
Runtime:  about 5 min on 2 cores (most of it the short flows).
Writes:   benchmarks/results/ln_flow_cost.json.
"""

from __future__ import annotations

import argparse
import os
import time

import jax

if __name__ == "__main__":
    jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from gflow import MarkovChain, SequenceLoss, Transformer, solve_flow  # noqa: E402
from gflow.analysis import (  # noqa: E402
    max_eigenvalue,
    scale_invariant_norm,
    smallest_layernorm_sigma,
)

from .common import save  # noqa: E402

#: the ladder's LayerNorm rungs as ``Transformer.init`` settings
RUNGS = {
    "4 +pre-LN": dict(init_scale=1e-3),
    "7 +positions": dict(init_scale=1e-3, value=True, d_ff=64, max_len=32),
    "8 init 0.02": dict(init_scale=0.02, value=True, d_ff=64, max_len=32),
}
#: Tsit5's real stability interval ends near 3.3 (h λ_max)
TSIT5_STABILITY = 3.3


def _time(fn, args, repeats: int) -> dict:
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(*args))
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        runs.append(time.perf_counter() - t0)
    return {"compile_s": compile_s, "min_s": float(min(runs))}


def _relative(a, b) -> float:
    pairs = zip(jax.tree.leaves(a), jax.tree.leaves(b))
    num = sum(float(jnp.sum((x - y) ** 2)) for x, y in pairs)
    den = sum(float(jnp.sum(y**2)) for y in jax.tree.leaves(b))
    return float(np.sqrt(num / den))


def _invariant_norm(model) -> float | None:
    """The norm of the exactly invariant block; None where there is none (rung
    4 has no value matrices: its loss is only nearly scale-invariant)."""
    try:
        return float(scale_invariant_norm(model))
    except ValueError:
        return None


def rung(name: str, *, sequences: int, seed: int, t1: float, repeats: int) -> dict:
    tokens = MarkovChain.default().sample(
        key=jax.random.key(10_000), batch=sequences, length=33
    )
    model = Transformer.init(
        d_vocab=4,
        d_model=16,
        n_layers=2,
        n_heads=2,
        layernorm=True,
        residual=True,
        key=jax.random.key(seed),
        dtype=jnp.float64,
        **RUNGS[name],
    )
    loss = SequenceLoss(tokens, d_vocab=4)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    static32 = jax.tree_util.tree_map(
        lambda x: x.astype(jnp.float32) if eqx.is_inexact_array(x) else x, static
    )

    def field(p):
        return jax.grad(lambda q: loss(eqx.combine(q, static)))(p)

    def field32(p):  # float64 in and out, the gradient in float32
        down = jax.tree_util.tree_map(lambda x: x.astype(jnp.float32), p)
        g = jax.grad(lambda q: loss(eqx.combine(q, static32)))(down)
        return jax.tree_util.tree_map(lambda x: x.astype(jnp.float64), g)

    def hvp(p, v):
        return jax.jvp(field, (p,), (v,))[1]

    v = field(params)
    rows = {
        "grad": _time(field, (params,), repeats),
        "grad_f32": _time(field32, (params,), repeats),
        "hvp": _time(hvp, (params, v), repeats),
    }
    lam, _ = max_eigenvalue(loss, model, key=jax.random.key(seed + 1))
    lam = float(lam)
    start = time.perf_counter()
    traj = solve_flow(loss, model, t1=t1, ts=np.array([0.0, t1]), progress=False)
    flow_s = time.perf_counter() - start
    evals = int(traj.stats.get("grad_evals", 0))
    bound = 6 * lam / TSIT5_STABILITY
    return {
        "rung": name,
        "rows": rows,
        "f32_grad_speedup": rows["grad"]["min_s"] / rows["grad_f32"]["min_s"],
        "f32_relative_error": _relative(jax.jit(field32)(params), v),
        "hvp_over_grad": rows["hvp"]["min_s"] / rows["grad"]["min_s"],
        "lambda_max": lam,
        "smallest_ln_sigma": float(smallest_layernorm_sigma(model, tokens[:, :-1])),
        "invariant_norm": _invariant_norm(model),
        "embedding_norm": float(
            jnp.sqrt(
                jnp.sum(model.W_E**2)
                + (0.0 if model.W_pos is None else jnp.sum(model.W_pos**2))
            )
        ),
        "tsit5_evals_per_unit_t": bound,
        "flow": {
            "t1": t1,
            "status": str(traj.status),
            "grad_evals": evals,
            "evals_per_unit_t": evals / t1,
            "wall_s_with_compile": flow_s,
            "below_tsit5_bound": bound / max(evals / t1, 1e-12),
        },
        "t300_at_tsit5_bound_h": 300 * bound * rows["grad"]["min_s"] / 3600,
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sequences", type=int, default=1024)
    p.add_argument("--seed", type=int, default=10)
    p.add_argument("--t1", type=float, default=0.5)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--rungs", default=",".join(RUNGS))
    args = p.parse_args(argv)
    names = args.rungs.split(",")
    if bad := [n for n in names if n not in RUNGS]:
        p.error(f"unknown rungs {bad}; choose from {list(RUNGS)}")
    if min(args.sequences, args.repeats) < 1 or not args.t1 > 0:
        p.error("--sequences and --repeats must be >= 1, --t1 > 0")
    load0 = os.getloadavg()[0]
    out = []
    for name in names:
        r = rung(
            name,
            sequences=args.sequences,
            seed=args.seed,
            t1=args.t1,
            repeats=args.repeats,
        )
        out.append(r)
        f = r["flow"]
        print(
            f"rung {name}: gradient {1e3 * r['rows']['grad']['min_s']:.1f} ms "
            f"(float32 inside: {r['f32_grad_speedup']:.2f}x faster, relative error "
            f"{r['f32_relative_error']:.1e}), HVP {r['hvp_over_grad']:.2f} gradients; "
            f"lambda_max {r['lambda_max']:.3g}, smallest LayerNorm sigma "
            f"{r['smallest_ln_sigma']:.2e} (sqrt(eps) 3.16e-03), |W_E, W_pos| "
            f"{r['embedding_norm']:.3g}, invariant block "
            + ("none" if r["invariant_norm"] is None else f"{r['invariant_norm']:.3g}")
            + f"; Tsit5 bound {r['tsit5_evals_per_unit_t']:.0f} "
            f"evaluations per unit t; the default solver to t = {f['t1']:g}: "
            f"{f['grad_evals']} evaluations ({f['evals_per_unit_t']:.0f} per unit t, "
            f"{f['below_tsit5_bound']:.1f}x below the bound, {f['status']}), "
            f"{f['wall_s_with_compile']:.0f} s with compile",
            flush=True,
        )
    load1 = os.getloadavg()[0]
    print(f"load {load0:.2f}-{load1:.2f}")
    save(
        "ln_flow_cost",
        {
            "sequences": args.sequences,
            "seed": args.seed,
            "repeats": args.repeats,
            "load_start": load0,
            "load_end": load1,
            "rungs": out,
        },
    )


if __name__ == "__main__":
    main()
