"""Where the standard block's flow stiffens, and why (issue 31, point 1).

Question: along the gradient flow of the issue's standard block (``gflow.Transformer``,
2 layers, 2 heads, width 16, value/output, pre-LayerNorm, residual, MLP 32, learned
positions (max_len 64: 5 504 parameters), init 0.02, 64 sequences of length 33 from
``MarkovChain.default()``, float64, last-position loss), what are the Hessian's top
eigenvalues against t, how many are stiff, and which part of the model makes them:
the same flow with LayerNorm off, with positions off, and on a larger sample (256
sequences, harder to memorise)? Each variant also records the smallest standard
deviation of a LayerNorm's input over positions and sequences (LayerNorm's Hessian
grows like 1/σ² as σ → 0) and the loss.

Command:  nice -n 10 python experiments/stiff_spectrum.py [--variants base no_ln ...]
          [--t1 6] [--max-steps 1500]
          the base block through its stiff phase (about 17 min on one core):
          python experiments/stiff_spectrum.py --variants base --t1 4 \
            --max-steps 100000 --saves 33 --tag _t4 --progress
Runtime:  about 3-6 min per variant on 2 shared cores (the default solver's flow
          until t1 or max_steps, then 40 Lanczos steps at each of 25 saves).
Writes:   runs/stiff_spectrum/<variant><tag>.json (t, loss, top eigenvalues,
          LayerNorm input σ, the parameters' norm, the solve's statistics and its
          StallReport) and docs/figures/stiff_spectrum<tag>.png.
Seeds:    sample key 0, model key 1 (jax.random.key), Lanczos key 2.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax

if __name__ == "__main__":
    jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "runs" / "stiff_spectrum"
FIGURE = ROOT / "docs" / "figures" / "stiff_spectrum.png"

VARIANTS = {
    "base": dict(layernorm=True, positions=True, batch=64),
    "no_ln": dict(layernorm=False, positions=True, batch=64),
    "no_pos": dict(layernorm=True, positions=False, batch=64),
    "batch256": dict(layernorm=True, positions=True, batch=256),
    # the same block on in-context Markov chains (3 states, Dirichlet(1) rows):
    # the data of the practical ladder and of the stand-in's block row
    "icl": dict(layernorm=True, positions=True, batch=64, data="icl-markov"),
}


def problem(*, layernorm=True, positions=True, batch=64, seed=0, data="markov"):
    """(loss, model) of the standard block (or a variant of it); ``data``: the
    paper's chain ("markov") or in-context Markov chains ("icl-markov", 3 states,
    Dirichlet(1) rows)."""
    from gflow import InContextMarkov, MarkovChain, SequenceLoss, Transformer

    if data == "markov":
        source = MarkovChain.default()
        d = source.d
    elif data == "icl-markov":
        source = InContextMarkov(states=3, alpha=1.0)
        d = source.states
    else:
        raise ValueError(f"data must be markov or icl-markov, got {data!r}")
    tokens = source.sample(key=jax.random.key(seed), batch=batch, length=33)
    model = Transformer.init(
        d_vocab=d,
        d_model=16,
        n_layers=2,
        n_heads=2,
        key=jax.random.key(seed + 1),
        init_scale=0.02,
        d_ff=32,
        value=True,
        layernorm=layernorm,
        residual=True,
        max_len=64 if positions else None,
        dtype=jnp.float64,
    )
    return SequenceLoss(tokens, d_vocab=d), model


def ln_input_sigma(model, tokens) -> float:
    """The smallest σ of any LayerNorm's input over sequences and positions (inf
    without LayerNorm): the scale LayerNorm divides by."""

    def one(context):
        x = model.W_E[context]
        if model.W_pos is not None:
            x = x + model.W_pos[: context.shape[0]]
        sig = []
        for block in model.blocks:
            if block.ln_attn is not None:
                sig.append(jnp.min(jnp.std(x, axis=-1)))
            x, _ = block(x, model.tau, model.residual)
        if model.ln_final is not None:
            sig.append(jnp.std(x[-1]))
        return jnp.min(jnp.stack(sig)) if sig else jnp.inf

    return float(jnp.min(jax.vmap(one)(jnp.asarray(tokens[:, :-1]))))


def run(
    name: str,
    *,
    t1: float,
    max_steps: int,
    saves: int = 25,
    k: int = 10,
    tag: str = "",
    progress: bool = False,
):
    from gflow import solve_flow
    from gflow.analysis import extreme_eigenpairs, flatten

    loss, model = problem(**VARIANTS[name])
    start = time.perf_counter()
    tr = solve_flow(
        loss,
        model,
        t1=t1,
        ts=np.linspace(0.0, t1, saves),
        max_steps=max_steps,
        save_params=True,
        progress=progress,
    )
    solve_s = time.perf_counter() - start
    rows = []
    for i, t in enumerate(tr.t):
        m = tr.snapshot(i)
        evals, _ = extreme_eigenpairs(loss, m, key=jax.random.key(2), iters=40)
        top = np.sort(np.asarray(evals))[::-1][:k]
        rows.append(
            {
                "t": float(t),
                "loss": float(tr.metrics["loss"][i]),
                "top": top.tolist(),
                "lambda_min": float(np.min(np.asarray(evals))),
                "ln_sigma": ln_input_sigma(m, loss.tokens),
                "param_norm": float(np.linalg.norm(flatten(m)[0])),
            }
        )
        print(
            f"{name} t={t:.3f} loss={rows[-1]['loss']:.4f} top={top[:5].round(1)} "
            f"sigma={rows[-1]['ln_sigma']:.3g}",
            flush=True,
        )
    d = tr.diagnosis
    record = {
        "variant": name,
        "settings": VARIANTS[name],
        "t1": t1,
        "max_steps": max_steps,
        "status": tr.status,
        "stats": tr.stats,
        "solve_s": solve_s,
        "rows": rows,
        "stall": None if d is None else d.message,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}{tag}.json").write_text(json.dumps(record, indent=1))
    return record


def plot(names, tag: str = ""):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = [OUT / f"{n}{tag}.json" for n in names if (OUT / f"{n}{tag}.json").exists()]
    if not paths:  # never overwrite the published figure with an empty one
        raise SystemExit(
            f"no records {names} with tag {tag!r} in {OUT}: run them first"
        )
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for path in paths:
        name = path.stem[: len(path.stem) - len(tag)] if tag else path.stem
        rec = json.loads(path.read_text())
        t = [r["t"] for r in rec["rows"]]
        top = np.array([r["top"] for r in rec["rows"]])
        (line,) = axes[0].semilogy(t, top[:, 0], label=f"{name}: λ₁")
        for j in range(1, min(5, top.shape[1])):
            axes[0].semilogy(
                t,
                np.maximum(top[:, j], 1e-3),
                color=line.get_color(),
                alpha=0.35,
                lw=0.8,
            )
        axes[1].semilogy(
            t, [r["ln_sigma"] for r in rec["rows"]], label=name, color=line.get_color()
        )
    axes[0].set(
        xlabel="flow time t",
        ylabel="Hessian eigenvalues (top 5)",
        title="λ₁ (bold) and λ₂…λ₅ (faint)",
    )
    # LayerNorm divides by sqrt(σ² + ε): below sqrt(ε) its factor stops growing
    axes[1].axhline(np.sqrt(1e-5), color="0.5", ls=":", lw=1, label="√ε (ε = 1e-5)")
    axes[1].set(xlabel="flow time t", ylabel="smallest LayerNorm input σ")
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    out = FIGURE.with_name(f"{FIGURE.stem}{tag}{FIGURE.suffix}")
    fig.savefig(out, dpi=120)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variants", nargs="+", default=list(VARIANTS))
    p.add_argument("--t1", type=float, default=6.0)
    p.add_argument("--max-steps", type=int, default=1500)
    p.add_argument("--saves", type=int, default=25)
    p.add_argument(
        "--tag",
        default="",
        help="appended to the names of the records and the figure (a longer run "
        "beside the default one, e.g. _t20)",
    )
    p.add_argument(
        "--progress", action="store_true", help="the solver's progress lines"
    )
    p.add_argument("--plot-only", action="store_true")
    a = p.parse_args()
    if not a.plot_only:
        for name in a.variants:
            run(
                name,
                t1=a.t1,
                max_steps=a.max_steps,
                saves=a.saves,
                tag=a.tag,
                progress=a.progress,
            )
    plot(list(VARIANTS), tag=a.tag)


if __name__ == "__main__":
    main()
