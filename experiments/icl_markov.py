"""In-context Markov chains (issue 30, point 1): does a 2-layer attention-only
transformer go uniform → unigram → bigram and build a statistical induction head?

Question: Edelman, Edelman, Goel, Malach and Tsilivis (NeurIPS 2024, arXiv
2402.11004) train transformers on ICL-MC (``gflow.InContextMarkov``: a fresh
Dirichlet(α) transition matrix per sequence) and see three phases: uniform
predictions, a plateau at the in-context unigram predictor, then a fast transition
to the Bayes-optimal in-context bigram predictor, carried by a layer-0
previous-token head and a layer-1 head that attends to the positions following the
current token. This script trains ``gflow.Transformer`` (2 layers × 1 head, residual
stream, value/output maps, learned positions, no MLP or LayerNorm) with AdamW on
fresh batches, several seeds, and records the held-out loss, the KL distance to each
strategy (``gflow.analysis.strategy_distances``) and the head labels
(``gflow.analysis.induction_labels``).

Command:
    PYTHONPATH=$PWD nice -n 10 python experiments/icl_markov.py            # full
    PYTHONPATH=$PWD nice -n 10 python experiments/icl_markov.py --quick    # smoke
    PYTHONPATH=$PWD python experiments/icl_markov.py --doc-only            # doc

Runtime: the full run is 5 seeds × 3000 AdamW steps of batch 64 (about 12 min of
2 shared cores, taken at a load too high to publish as a timing); ``--quick`` is
2 seeds × 60 steps, dominated by compilation (tens of seconds), so its test is slow.

Outputs: ``experiments/results/icl_markov/results.json`` (configuration, machine
load, the strategy losses, per seed the curves and the phase times), the figure
``docs/figures/icl_markov.png`` and the generated block of docs/icl_markov.md.
``--quick`` writes to ``experiments/results/icl_markov_quick/`` and leaves the doc
alone. Each finished seed is saved as ``seed-<s>.json`` and is read back, not
recomputed, by a rerun with the same configuration (resumable).

Phase times (precise): every ``every`` steps the model's KL distance to each
strategy is measured on one held-out batch; the model *reaches the unigram phase* at
the first recorded step at which the unigram strategy is its nearest (smallest KL),
and *the bigram phase* at the first at which the bigram strategy is; the plateau is
the difference. (A loss threshold such as "within 10% of the unigram-bigram gap of
the bigram loss" is not reached in the steps that fit: the trained models end about
0.03 nats above the bigram strategy's loss.)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments import _docs
from gflow import AdamW, InContextMarkov, Transformer
from gflow.analysis import induction_labels, strategy_distances
from gflow.problems import STRATEGIES

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "results" / "icl_markov"
DOC = ROOT / "docs" / "icl_markov.md"
FIGURE = ROOT / "docs" / "figures" / "icl_markov.png"
START, END = "<!-- icl_markov:start -->", "<!-- icl_markov:end -->"


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything that defines the experiment (module docstring)."""

    states: int = 3
    alpha: float = 1.0
    length: int = 100
    d_model: int = 16
    init_scale: float = 0.02
    batch: int = 64
    steps: int = 3000
    every: int = 50
    lr: float = 3e-3
    warmup: int = 100
    weight_decay: float = 0.0
    eval_batch: int = 256
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)


QUICK = Config(length=20, steps=60, every=10, eval_batch=32, seeds=(0, 1))


def build(cfg: Config, key):
    """The initial model: 2 layers × 1 head, residual, values, positions."""
    return Transformer.init(
        d_vocab=cfg.states,
        d_model=cfg.d_model,
        n_layers=2,
        n_heads=1,
        key=key,
        init_scale=cfg.init_scale,
        value=True,
        residual=True,
        max_len=cfg.length,
    )


def causal_loss(model, tokens):
    """Next-token cross-entropy at every position, mean over batch and positions."""
    logits = jax.vmap(model.causal_logits)(tokens)[:, :-1]
    log_p = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(log_p, tokens[:, 1:, None], axis=-1).mean()


def run_seed(cfg: Config, seed: int) -> dict:
    """Train one seed; the held-out curves and phase times (module docstring)."""
    task = InContextMarkov(states=cfg.states, alpha=cfg.alpha)
    k_init, k_eval, k_data = jax.random.split(jax.random.key(seed), 3)
    model = build(cfg, k_init)
    held = task.sample(key=k_eval, batch=cfg.eval_batch, length=cfg.length)
    schedule = optax.linear_schedule(0.0, cfg.lr, cfg.warmup)
    opt = AdamW(weight_decay=cfg.weight_decay).plain(schedule)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    state = opt.init(params)

    def step(carry, key):
        params, state = carry
        tokens = task.sample(key=key, batch=cfg.batch, length=cfg.length)
        loss, grads = jax.value_and_grad(
            lambda p: causal_loss(eqx.combine(p, static), tokens)
        )(params)
        updates, state = opt.update(grads, state, params)
        return (optax.apply_updates(params, updates), state), loss

    @jax.jit
    def chunk(params, state, keys):
        (params, state), _ = jax.lax.scan(step, (params, state), keys)
        return params, state

    @jax.jit
    def observe(params):
        m = eqx.combine(params, static)
        return jax.vmap(m.causal_logits)(held), jax.vmap(m.attention)(held)

    rows = []
    keys = jax.random.split(k_data, cfg.steps).reshape(-1, cfg.every)
    logits, attn = observe(params)

    def record(t, logits, attn):
        d = strategy_distances(task, logits, held)
        lab = induction_labels(attn, held)
        rows.append(
            {
                "step": t,
                "loss": d.loss,
                "kl": list(d.as_tuple()),
                "previous": lab.previous[:, 0].tolist(),
                "after_copy": lab.after_copy[:, 0].tolist(),
                "chance": lab.after_copy_chance,
            }
        )

    record(0, logits, attn)
    for c in range(keys.shape[0]):
        params, state = chunk(params, state, keys[c])
        logits, attn = observe(params)
        record((c + 1) * cfg.every, logits, attn)
    # the strategies' own losses on the held-out batch: the levels U and B
    q = task.strategy_probabilities(held)[:, :, :-1]
    target = jax.nn.one_hot(held[:, 1:], cfg.states)
    levels = [float(v) for v in -(target[None] * jnp.log(q)).sum(-1).mean((1, 2))]
    return {"seed": seed, "rows": rows, "levels": levels} | phases(rows)


def phases(rows: list[dict]) -> dict:
    """The first recorded steps at which the unigram, then the bigram strategy is
    the model's nearest (smallest KL), and the plateau between them."""

    def first(i):
        hits = [r["step"] for r in rows if int(np.argmin(r["kl"])) == i]
        return hits[0] if hits else None

    t_u, t_b = first(1), first(2)
    plateau = t_b - t_u if t_u is not None and t_b is not None else None
    return {"t_unigram": t_u, "t_bigram": t_b, "plateau": plateau}


def run(cfg: Config, out: Path) -> dict:
    """Every seed (read back where already saved), the strategy losses, the load."""
    out.mkdir(parents=True, exist_ok=True)
    fingerprint = json.dumps(dataclasses.asdict(cfg), sort_keys=True)
    task = InContextMarkov(states=cfg.states, alpha=cfg.alpha)
    losses = task.strategy_losses(cfg.length, key=jax.random.key(12345), samples=4000)
    seeds, started = [], time.time()
    for seed in cfg.seeds:
        path = out / f"seed-{seed}.json"
        if path.exists():
            saved = json.loads(path.read_text())
            if saved.get("config") == fingerprint:
                seeds.append(saved["result"])
                continue
        result = run_seed(cfg, seed)
        path.write_text(json.dumps({"config": fingerprint, "result": result}))
        seeds.append(result)
    results = {
        "config": dataclasses.asdict(cfg),
        "strategy_losses": dataclasses.asdict(losses),
        "seeds": seeds,
        "seconds": time.time() - started,
        "load": _docs.uptime(),
        "cpus": os.cpu_count(),
    }
    (out / "results.json").write_text(json.dumps(results, indent=1))
    return results


def mean_sd(values) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "—"
    sd = float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0
    return f"{np.mean(vals):.0f} ± {sd:.0f} ({len(vals)}/{len(list(values))})"


def render(results: dict) -> str:
    """The generated block of docs/icl_markov.md."""
    cfg = results["config"]
    sl = results["strategy_losses"]
    seeds = results["seeds"]
    lines = [
        f"Settings: k = {cfg['states']}, α = {cfg['alpha']}, length "
        f"{cfg['length']}, width {cfg['d_model']}, batch {cfg['batch']}, "
        f"{cfg['steps']} AdamW steps (lr {cfg['lr']}, linear warmup "
        f"{cfg['warmup']}, weight decay {cfg['weight_decay']}), init "
        f"{cfg['init_scale']}, held-out batch {cfg['eval_batch']}, seeds "
        f"{', '.join(str(s) for s in cfg['seeds'])}.",
        "",
        "Expected strategy losses (nats; Monte Carlo, 4000 sequences, key 12345, "
        "± standard error):",
        "",
        _docs.table(
            ["strategy", "mean over positions", "last position"],
            [
                [
                    name,
                    f"{sl['mean'][i]:.4f} ± {sl['mean_se'][i]:.4f}",
                    f"{sl['last'][i]:.4f} ± {sl['last_se'][i]:.4f}",
                ]
                for i, name in enumerate(STRATEGIES)
            ],
        ),
        "",
        "Per seed (steps; the final row's held-out loss, KL to each strategy and "
        "the head labels, layer 0 / layer 1):",
        "",
    ]
    rows = []
    for s in seeds:
        last = s["rows"][-1]
        rows.append(
            [
                s["seed"],
                s["t_unigram"] if s["t_unigram"] is not None else "—",
                s["t_bigram"] if s["t_bigram"] is not None else "—",
                s["plateau"] if s["plateau"] is not None else "—",
                f"{last['loss']:.4f}",
                " / ".join(f"{v:.3f}" for v in last["kl"]),
                " / ".join(f"{v:.2f}" for v in last["previous"]),
                " / ".join(f"{v:.2f}" for v in last["after_copy"])
                + f" (chance {last['chance']:.2f})",
            ]
        )
    lines.append(
        _docs.table(
            [
                "seed",
                "unigram reached",
                "bigram reached",
                "plateau",
                "final loss",
                "KL uniform / unigram / bigram",
                "previous-token mass",
                "after-copy mass",
            ],
            rows,
        )
    )
    lines += [
        "",
        "Over seeds (mean ± sd, seeds that reach the level / all): unigram reached "
        f"at {mean_sd([s['t_unigram'] for s in seeds])}, bigram at "
        f"{mean_sd([s['t_bigram'] for s in seeds])}, plateau "
        f"{mean_sd([s['plateau'] for s in seeds])} steps.",
        "",
        f"Compute: {len(seeds)} seeds × {cfg['steps']} AdamW steps of batch "
        f"{cfg['batch']} on {results['cpus']} shared cores (load at the end: "
        f"`{results['load']}`; too high to publish a timing).",
        "",
    ]
    return "\n".join(lines)


def figure(results: dict, path: Path) -> None:
    """KL to each strategy and the head labels against steps, every seed."""
    from gflow.plotting import plt, save_figure

    fig, axes = plt.subplots(1, 2, figsize=(7.0, 2.6), constrained_layout=True)
    colours = {"uniform": "tab:gray", "unigram": "tab:orange", "bigram": "tab:blue"}
    for s in results["seeds"]:
        t = [r["step"] for r in s["rows"]]
        for i, name in enumerate(STRATEGIES):
            kl = [max(r["kl"][i], 1e-4) for r in s["rows"]]
            label = name if s is results["seeds"][0] else None
            axes[0].plot(t, kl, color=colours[name], alpha=0.7, label=label)
        first = s is results["seeds"][0]
        axes[1].plot(
            t,
            [r["previous"][0] for r in s["rows"]],
            color="tab:green",
            alpha=0.7,
            label="layer 0: previous token" if first else None,
        )
        axes[1].plot(
            t,
            [r["after_copy"][1] for r in s["rows"]],
            color="tab:purple",
            alpha=0.7,
            label="layer 1: after a copy" if first else None,
        )
    axes[0].set_yscale("log")
    axes[0].set_xlabel("AdamW step")
    axes[0].set_ylabel("KL(strategy ‖ model) (nats)")
    axes[0].legend(frameon=False)
    axes[1].set_xlabel("AdamW step")
    axes[1].set_ylabel("attention mass")
    axes[1].set_ylim(0, 1.2)
    axes[1].legend(frameon=False, loc="upper left")
    cfg = results["config"]
    fig.suptitle(
        f"ICL-MC k = {cfg['states']}, α = {cfg['alpha']}, length {cfg['length']}: "
        f"{len(results['seeds'])} seeds"
    )
    save_figure(fig, path)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--doc-only", action="store_true", help="rewrite the doc")
    parser.add_argument("--out", type=Path, default=None, help="results folder")
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else Config()
    out = args.out or (OUT.with_name(OUT.name + "_quick") if args.quick else OUT)
    if args.doc_only:
        results = json.loads((out / "results.json").read_text())
    else:
        results = run(cfg, out)
    print(render(results))
    if not args.quick:
        figure(results, FIGURE)
        _docs.replace_block(DOC, START, END, render(results), append=True)


if __name__ == "__main__":
    main()
