"""What one gradient of the fair test's text loss costs, and what that allows in 30
minutes (issue 31, point 4).

The fair text test's isolated mode (docs/integrators.md, "A text flow at the scale
of the fair test") flows the one-layer model on 10⁴ windows of TinyStories (BPE
4000, d = 3 763 types, context 32, width 32, float64) to t = 1000 and needs 19 563
gradient evaluations (its Krylov products counted as two each). This benchmark
times, in one process, the pieces that cost sets:

- ``grad``: the gradient of ``gflow.text.TextLoss`` (the gathered form, which
  TextLoss picks at d > 8 s, with its output layer by row blocks:
  ``gflow.problems.cross_entropy``), as the flow's vector field evaluates it;
- ``hvp``: one Hessian-vector product (``jax.jvp`` of that gradient), as the
  exponential and Chebyshev steps evaluate them (counted as two evaluations);
- ``grad_plain``, ``hvp_plain``: the same with the output layer written plainly
  (``log_softmax`` over [n, d] logits, then a gather), the form before the blocks;
- ``head``: the gradient of the output layer alone, written plainly
  (cross-entropy of O·W_P over the d types: three [n, m]×[m, d] products);
- ``product``: one [n, m]×[m, d] product, reduced to a scalar inside the program
  (its result never leaves XLA);
- ``grad_f32``, ``hvp_f32``: the gradient and the product evaluated in float32
  inside the float64 integration (the parameters cast down, the result cast back
  up, both casts timed), with the float32 gradient's relative error against the
  float64 one at the same point (issue 57, point 5: a cheaper gradient).

From these it projects the flow's time: 19 563 evaluations at one gradient's cost
each, and at the cost of EXPRB32's mix (a step of 18 evaluations is 2 gradients
and 8 Hessian-vector products), against the 30 minutes of the issue.

Windows are drawn at random from a Zipf law over d types, since the cost depends
only on the shapes (n, s, d, m), not on which tokens they hold. Every program is
compiled once before timing; compile and run are timed separately; each time is
the minimum of ``--repeats`` calls, with the median beside it; the 1-minute load is
recorded at the start and the end.

Command:  PYTHONPATH=$PWD python -m benchmarks.text_scale_cost [--windows 10000]
Runtime:  about 1 min on 2 cores.
Writes:   benchmarks/results/text_scale_cost.json.
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

from gflow import AttentionModel  # noqa: E402
from gflow.text import TextLoss  # noqa: E402

from .common import save  # noqa: E402

#: The flow of the fair test's isolated mode to t = 1000 (docs/integrators.md).
FLOW_EVALS = 19_563
#: The issue's budget for that flow.
BUDGET_S = 30 * 60


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
    return {
        "compile_s": compile_s,
        "min_s": float(min(runs)),
        "median_s": float(np.median(runs)),
    }


def run(*, windows: int, vocab: int, context: int, width: int, repeats: int) -> dict:
    rng = np.random.default_rng(0)
    p_tok = 1.0 / np.arange(1, vocab + 1)
    tokens = rng.choice(vocab, size=(windows, context + 1), p=p_tok / p_tok.sum())
    model = AttentionModel.init(
        d_vocab=vocab, d_model=width, init_scale=1e-3, key=jax.random.key(0)
    )
    loss = TextLoss(tokens, d_vocab=vocab)
    params, static = eqx.partition(model, eqx.is_inexact_array)

    target = jnp.asarray(tokens[:, -1])
    context = jnp.asarray(tokens[:, :-1])

    def head(o, w_p):
        logp = jax.nn.log_softmax(o @ w_p, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, target[:, None], axis=-1))

    def plain(m):  # the same loss with its output layer written plainly
        return head(jax.vmap(m.features)(context), m.W_P)

    def field_of(loss_fn):
        return lambda p: jax.grad(lambda q: loss_fn(eqx.combine(q, static)))(p)

    def hvp_of(loss_fn):
        return lambda p, v: jax.jvp(field_of(loss_fn), (p,), (v,))[1]

    field = field_of(loss)
    out = jnp.asarray(rng.standard_normal((windows, width)) * 1e-3)
    v = field(params)

    def down(tree):
        return jax.tree_util.tree_map(lambda x: x.astype(jnp.float32), tree)

    def up(tree):
        return jax.tree_util.tree_map(lambda x: x.astype(jnp.float64), tree)

    static32 = jax.tree_util.tree_map(
        lambda x: x.astype(jnp.float32) if eqx.is_inexact_array(x) else x, static
    )
    loss32 = TextLoss(tokens, d_vocab=vocab)

    def field32(p):  # float64 in, float64 out, the gradient in float32
        g = jax.grad(lambda q: loss32(eqx.combine(q, static32)))(down(p))
        return up(g)

    def hvp32(p, w):
        g = lambda q: jax.grad(lambda r: loss32(eqx.combine(r, static32)))(q)  # noqa: E731
        return up(jax.jvp(g, (down(p),), (down(w),))[1])

    def rel_error(a, b):
        num = sum(
            jnp.sum((x - y) ** 2)
            for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))
        )
        den = sum(jnp.sum(y**2) for y in jax.tree.leaves(b))
        return float(jnp.sqrt(num / den))

    load0 = os.getloadavg()[0]
    rows = {
        "grad": _time(field, (params,), repeats),
        "grad_plain": _time(field_of(plain), (params,), repeats),
        "hvp": _time(hvp_of(loss), (params, v), repeats),
        "hvp_plain": _time(hvp_of(plain), (params, v), repeats),
        "head": _time(jax.grad(head, (0, 1)), (out, model.W_P), repeats),
        "product": _time(lambda o, w: jnp.sum(o @ w), (out, model.W_P), repeats),
        "grad_f32": _time(field32, (params,), repeats),
        "hvp_f32": _time(hvp32, (params, v), repeats),
    }
    load1 = os.getloadavg()[0]
    # the float32 gradient's error where the flow starts and one unit along -grad
    # (a point off the initialisation's symmetric scale)
    moved = jax.tree_util.tree_map(lambda x, g: x - 10.0 * g, params, v)
    f32_error = [rel_error(field32(q), field(q)) for q in (params, moved)]
    grad_s = rows["grad"]["min_s"]
    # an EXPRB32 step, the incumbent through most of that flow, counts 18
    # evaluations: 2 gradients and 8 Hessian-vector products (two evaluations each)
    per_eval_s = (2 * grad_s + 8 * rows["hvp"]["min_s"]) / 18
    result = {
        "shape": {
            "windows": windows,
            "vocab": vocab,
            "context": context,
            "width": width,
            "dtype": "float64",
        },
        "repeats": repeats,
        "load_start": load0,
        "load_end": load1,
        "rows": rows,
        "hvp_over_grad": rows["hvp"]["min_s"] / grad_s,
        "grad_speedup": rows["grad_plain"]["min_s"] / grad_s,
        "hvp_speedup": rows["hvp_plain"]["min_s"] / rows["hvp"]["min_s"],
        "head_over_grad": rows["head"]["min_s"] / grad_s,
        "product_gflops": 2 * windows * width * vocab / rows["product"]["min_s"] / 1e9,
        "gradients_in_budget": int(BUDGET_S // grad_s),
        "flow_evals": FLOW_EVALS,
        "flow_s_at_grad_cost": FLOW_EVALS * grad_s,
        "flow_s_mixed": FLOW_EVALS * per_eval_s,
        "f32_grad_speedup": grad_s / rows["grad_f32"]["min_s"],
        "f32_hvp_speedup": rows["hvp"]["min_s"] / rows["hvp_f32"]["min_s"],
        "f32_relative_error": f32_error,
        "flow_s_f32": FLOW_EVALS
        * (2 * rows["grad_f32"]["min_s"] + 8 * rows["hvp_f32"]["min_s"])
        / 18,
    }
    return result


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--windows", type=int, default=10_000)
    p.add_argument("--vocab", type=int, default=3_763)
    p.add_argument("--context", type=int, default=32)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args(argv)
    if min(args.windows, args.vocab, args.context, args.width, args.repeats) < 1:
        p.error("--windows, --vocab, --context, --width and --repeats must be >= 1")
    result = run(**vars(args))
    print(
        f"blocked output layer: gradient {result['grad_speedup']:.2f}x, "
        f"HVP {result['hvp_speedup']:.2f}x faster than the plain form"
    )
    for name, row in result["rows"].items():
        print(
            f"{name:8s} {1e3 * row['min_s']:8.1f} ms (median "
            f"{1e3 * row['median_s']:.1f}; compile {row['compile_s']:.1f} s)"
        )
    print(
        f"hvp/grad {result['hvp_over_grad']:.2f}, head/grad "
        f"{result['head_over_grad']:.2f}, product {result['product_gflops']:.1f} "
        f"GFLOP/s; {result['gradients_in_budget']} gradients in 30 min; the flow's "
        f"{FLOW_EVALS} evaluations: {result['flow_s_at_grad_cost'] / 60:.0f} min at "
        f"one gradient each, {result['flow_s_mixed'] / 60:.0f} min with the Krylov "
        f"products at their cost; load {result['load_start']:.2f}-"
        f"{result['load_end']:.2f}"
    )
    print(
        f"float32 inside float64: gradient {result['f32_grad_speedup']:.2f}x, HVP "
        f"{result['f32_hvp_speedup']:.2f}x faster; relative error of the gradient "
        + ", ".join(f"{e:.1e}" for e in result["f32_relative_error"])
        + f"; the flow's evaluations at that mix: {result['flow_s_f32'] / 60:.0f} min"
    )
    save("text_scale_cost", result)


if __name__ == "__main__":
    main()
