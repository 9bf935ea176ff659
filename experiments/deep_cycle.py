"""Deep models (issue 14): does the focus–dilution cycle survive depth and heads?

Question: the one-layer attention model goes condensation → focus → dilution →
asymmetry lifting (docs/markov_cycle.md). For the paper's model deepened
(``gflow.Transformer`` with 1, 2 or 4 layers × 1, 2 or 4 heads, width 16, no value
matrix, MLP, LayerNorm, residual or positions: the model ``gflow train`` trains by
default), on the default Markov chain (context s = 64) and on TinyStories (word
tokens, 64 kept types plus ``<unk>``), which heads show which stage, in which order
and when; does the cycle repeat; and when do SGD on fresh minibatches and AdamW
(warmup + cosine) leave small-step full-batch GD on a fixed sample, the flow's
stand-in, when all three start from the same initial model?

Command:
    PYTHONPATH=$PWD python experiments/deep_cycle.py            # the full run
    PYTHONPATH=$PWD python experiments/deep_cycle.py --quick    # a smoke run
    PYTHONPATH=$PWD python experiments/deep_cycle.py --doc-only # rewrite the doc

Runtime: the full run (2 data sets × 9 architectures × 3 methods × 3 seeds, and
the η/2 check) takes about 17 min on 2 cores (the measured time and load are in
docs/deep_models.md); ``--quick`` (one small architecture, 2 seeds, 40 steps, both
data sets) about 30 s, 15 s with ``--datasets markov``.

Outputs: ``experiments/results/deep_cycle/results.json`` (configuration, machine,
load averages, runtime and, per run, the held-out loss and per-head entropy curves,
the per-head stages and the departure times) and ``summary.md`` (the tables); the
full run also rewrites the block between the markers of docs/deep_models.md.
``--quick`` writes to ``experiments/results/deep_cycle_quick/`` and leaves the doc
alone.

Methods, from one initial model per seed (init scale 0.02, float32):

- ``gd``: gradient descent with a small constant step on one fixed sample of
  ``gd_sample`` sequences (full batch): the flow's stand-in on that sample;
- ``sgd``: the same step size on a fresh minibatch of ``batch`` sequences per step
  (new Markov sequences; random windows of the training part of the text);
- ``adamw``: AdamW (β₁ = 0.9, weight decay 0.01) on fresh minibatches, the step size
  rising linearly over the first 10% of the steps, then a cosine decay to 0.

Every run takes the same number of steps; the clock is t = Σ η_k (the shared clock of
gflow), so ``gd`` and ``sgd`` share their times and AdamW's t is the sum of its
learning rates. Every run records, on one held-out sample (the same for every run),
the last-position loss (``eval_batch`` sequences) and ``HeadObservables``
(``obs_batch`` of them), and ``gflow.detect_head_stages`` finds the per-head stages
on the saved trajectory (with ``unigram_gap`` = held-out loss − unigram loss, so that
condensation ends where the loss has closed 95% of its gap to the unigram plateau).
A run *leaves* GD at the first saved t at which its held-out loss differs from GD's
(same seed, GD's curve interpolated at that t) by more than ``loss_tol`` nats, or
one of its heads' entropy by more than ``entropy_tol`` nats; it leaves *for good*
at the first saved t from which the difference stays past the threshold at every
later save (``departure``). For the architectures in ``step_check`` the first
seed's GD is run again at η/2 with twice the steps, saved at the same times: how far
GD at η is from its own flow.

Compiled programs are reused: the optimizers are built once, models, keys and data
are traced, so each (data set, architecture, method) compiles once and its seeds
reuse the program.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from experiments import _docs
from gflow import (
    SGD,
    AdamW,
    HeadObservables,
    MarkovChain,
    MarkovStream,
    SequenceLoss,
    Transformer,
    detect_head_stages,
    sequence_loss,
)
from gflow.dynamics import Trajectory, minibatch_segment
from gflow.runs import read_json, write_json

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "data" / "tinystories" / "sample.txt"
OUT = ROOT / "experiments" / "results" / "deep_cycle"
DOC = ROOT / "docs" / "deep_models.md"
START, END = "<!-- deep_cycle:start -->", "<!-- deep_cycle:end -->"
METHODS = ("gd", "sgd", "adamw")
STAGE_LETTERS = {
    "condensation": "C",
    "focus": "F",
    "dilution": "D",
    "asymmetry_lifting": "A",
}


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything that defines the experiment (module docstring)."""

    datasets: tuple[str, ...] = ("markov", "tinystories")
    layers: tuple[int, ...] = (1, 2, 4)
    heads: tuple[int, ...] = (1, 2, 4)
    d_model: int = 16
    init_scale: float = 0.02
    seeds: tuple[int, ...] = (0, 1, 2)
    context: int = 64
    batch: int = 32
    gd_sample: int = 128
    eval_batch: int = 256
    obs_batch: int = 64
    steps: int = 480
    num_saves: int = 41
    lr: float = 0.5
    adamw_lr: float = 0.01
    warmup: float = 0.1
    weight_decay: float = 0.01
    vocab_size: int = 64
    max_chars: int = 400_000
    held_out_fraction: float = 0.1
    loss_tol: float = 0.05
    entropy_tol: float = 0.1
    #: architectures whose first seed's GD is rerun at η/2 (twice the steps)
    step_check: tuple[tuple[int, int], ...] = ((1, 1), (2, 2))

    @property
    def save_every(self) -> int:
        return self.steps // (self.num_saves - 1)

    def architectures(self) -> list[tuple[int, int]]:
        return [
            (n_layers, n_heads) for n_layers in self.layers for n_heads in self.heads
        ]


QUICK = Config(
    layers=(2,),
    heads=(2,),
    d_model=4,
    seeds=(0, 1),
    context=8,
    batch=8,
    gd_sample=8,
    eval_batch=16,
    obs_batch=8,
    steps=40,
    num_saves=5,
    max_chars=20_000,
    step_check=(),
)


class EvalObservables(eqx.Module):
    """``HeadObservables`` on the first sequences of the held-out sample, and the
    held-out loss on all of it (a forward pass only: the run's own ``loss`` and
    ``grad_norm`` are taken on the observables' smaller sample)."""

    heads: HeadObservables
    held_out: jax.Array

    def __call__(self, model):
        return {
            **self.heads(model),
            "held_out_loss": sequence_loss(model, self.held_out),
        }


class FixedStream(eqx.Module):
    """The stream of full-batch GD: the same sample at every step, whatever the key."""

    tokens: jax.Array

    def __call__(self, key):
        return self.tokens


@dataclasses.dataclass(frozen=True)
class Data:
    """One data set: a sampler of fixed GD samples, a minibatch stream, the held-out
    sample and its references."""

    name: str
    d_vocab: int
    gd_sample: object  # seed -> int32 [gd_sample, s + 1]
    stream: eqx.Module  # key -> int32 [batch, s + 1]
    held_out: np.ndarray  # int32 [eval_batch, s + 1]
    unigram_loss: float
    bayes_loss: float | None
    description: str


def markov_data(
    cfg: Config,
    chain: MarkovChain | None = None,
    *,
    name: str = "markov",
    description: str = "MarkovChain.default(): π = (0.75, 0.19, 0.05, 0.01), λ = 0.5",
) -> Data:
    """Samples of ``chain`` (default: the paper's) as a data set of the runs."""
    chain = MarkovChain.default() if chain is None else chain
    length = cfg.context + 1
    held = chain.sample(key=jax.random.key(10_000), batch=cfg.eval_batch, length=length)

    def gd_sample(seed):
        key = jax.random.fold_in(jax.random.key(seed), 1)
        return chain.sample(key=key, batch=cfg.gd_sample, length=length)

    return Data(
        name,
        chain.d,
        gd_sample,
        MarkovStream(chain, batch=cfg.batch, length=length),
        np.asarray(held),
        chain.unigram_loss,
        chain.bayes_loss,
        description,
    )


def text_data(cfg: Config, path: Path = CORPUS) -> Data:
    """TinyStories word tokens; the last ``held_out_fraction`` of the tokens is held
    out (the evaluation sample), the rest trains (GD samples and the stream)."""
    from gflow.text import TOKENIZERS, Vocabulary, load_corpus

    tokens = TOKENIZERS["word"](load_corpus(path, max_chars=cfg.max_chars))
    vocab = Vocabulary.build(tokens, cfg.vocab_size)
    return corpus_data(
        cfg,
        "tinystories",
        vocab,
        vocab.encode(tokens),
        lambda n, top: (
            f"{path.name}: {n} word tokens ({cfg.max_chars} characters), "
            f"{len(vocab)} types ({cfg.vocab_size} + <unk>), most frequent {top!r}"
        ),
    )


def corpus_data(cfg: Config, name: str, vocab, ids, describe) -> Data:
    """A tokenised corpus (``ids`` of ``vocab``) as a data set of the runs: the last
    ``held_out_fraction`` of the tokens is held out (the evaluation sample), the
    rest trains (GD samples and the stream). ``describe(n_tokens, top)``: the
    description, given the most frequent token."""
    from gflow.text import WindowStream, fixed_sample

    cut = int(len(ids) * (1 - cfg.held_out_fraction))
    train, held = ids[:cut], ids[cut:]
    freq = np.bincount(train, minlength=len(vocab)) / len(train)
    unigram = float(-np.sum(freq[freq > 0] * np.log(freq[freq > 0])))
    held_out = fixed_sample(held, length=cfg.context, num=cfg.eval_batch)
    stream = WindowStream(train, length=cfg.context, batch=cfg.batch)

    def gd_sample(seed):
        key = jax.random.fold_in(jax.random.key(seed), 1)
        return WindowStream(train, length=cfg.context, batch=cfg.gd_sample)(key)

    top = vocab.tokens[int(np.argmax(freq))]
    return Data(
        name,
        len(vocab),
        gd_sample,
        stream,
        held_out,
        unigram,
        None,
        describe(len(ids), top),
    )


def load_data(cfg: Config) -> dict[str, Data]:
    out = {}
    for name in cfg.datasets:
        if name == "markov":
            out[name] = markov_data(cfg)
        elif name == "tinystories":
            if not CORPUS.exists():
                print(f"skipping tinystories: {CORPUS} is absent", flush=True)
                continue
            out[name] = text_data(cfg)
        else:
            raise ValueError(f"unknown data set {name!r}")
    return out


def optimizers(cfg: Config) -> dict:
    """(optimizer, learning rate for the clock) per method, built once: the same
    objects for every run, so that their programs are compiled once per shape."""
    import optax

    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=cfg.adamw_lr,
        warmup_steps=max(1, round(cfg.warmup * cfg.steps)),
        decay_steps=cfg.steps,
    )
    sgd = SGD().transform(cfg.lr)
    return {
        "gd_half": (SGD().transform(cfg.lr / 2), cfg.lr / 2),
        "gd": (sgd, cfg.lr),
        "sgd": (sgd, cfg.lr),
        "adamw": (AdamW(weight_decay=cfg.weight_decay).transform(schedule), schedule),
    }


def run_one(cfg, data, init, opts, method, seed, obs, eval_loss) -> Trajectory:
    """One method from the seed's initial model; the program is shared by seeds."""
    optimizer, lr = opts[method]
    full = method.startswith("gd")
    stream = FixedStream(data.gd_sample(seed)) if full else data.stream
    more = 2 if method == "gd_half" else 1  # η/2: twice the steps, same saves
    traj, _ = minibatch_segment(
        eval_loss,
        init,
        optimizer,
        stream,
        batch_loss=sequence_loss,
        key=jax.random.fold_in(jax.random.key(seed), 2),
        steps=more * cfg.steps,
        save_every=more * cfg.save_every,
        learning_rate=lr,
        observables=obs,
    )
    return traj


def _interp(t, t_ref, x_ref):
    """x_ref (over t_ref, leading axis) at the times t, per trailing entry."""
    x_ref = np.asarray(x_ref, float).reshape(len(t_ref), -1)
    return np.stack(
        [np.interp(t, t_ref, x_ref[:, j]) for j in range(x_ref.shape[1])], 1
    )


def departure(run: dict, gd: dict, *, loss_tol: float, entropy_tol: float) -> dict:
    """When the run ``run`` leaves the GD run ``gd`` (saved records with ``t``,
    ``loss`` and ``head_entropy``; module docstring); None where it never does.

    ``loss`` / ``entropy``: the first saved t past the threshold; ``loss_for_good``
    / ``entropy_for_good``: the first saved t from which the difference stays past
    it at every later save; ``leaves`` and ``leaves_for_good``: the earlier of the
    two. Times after GD's last saved time are not compared.
    """
    t = np.asarray(run["t"], float)
    gd_t = np.asarray(gd["t"], float)
    inside = t <= gd_t[-1] + 1e-9
    t = t[inside]
    loss = np.asarray(run["loss"], float)[inside]
    d_loss = np.abs(loss - _interp(t, gd_t, gd["loss"])[:, 0])
    ent = np.asarray(run["head_entropy"], float)[inside].reshape(len(t), -1)
    d_ent = np.abs(ent - _interp(t, gd_t, gd["head_entropy"])).max(axis=1)

    def first(mask):
        return float(t[np.argmax(mask)]) if mask.any() else None

    def for_good(mask):
        stays = np.flip(np.logical_and.accumulate(np.flip(mask)))
        return first(stays)

    past_loss, past_ent = ~(d_loss <= loss_tol), ~(d_ent <= entropy_tol)
    out = {
        "loss": first(past_loss),
        "entropy": first(past_ent),
        "loss_for_good": for_good(past_loss),
        "entropy_for_good": for_good(past_ent),
        "max_loss_diff": float(np.nanmax(d_loss)),
        "max_entropy_diff": float(np.nanmax(d_ent)),
    }
    pairs = {
        "leaves": ("loss", "entropy"),
        "leaves_for_good": ("loss_for_good", "entropy_for_good"),
    }
    for key, parts in pairs.items():
        times = [out[k] for k in parts if out[k] is not None]
        out[key] = min(times) if times else None
    return out


def add_departures(results: dict) -> None:
    """``departure`` of every sgd and adamw run from the gd run of its seed."""
    cfg = results["config"]
    gd = {
        (r["data"], r["layers"], r["heads"], r["seed"]): r
        for r in results["runs"]
        if r["method"] == "gd"
    }
    for r in results["runs"]:
        if r["method"] != "gd":
            ref = gd[(r["data"], r["layers"], r["heads"], r["seed"])]
            r["departure"] = departure(
                r, ref, loss_tol=cfg["loss_tol"], entropy_tol=cfg["entropy_tol"]
            )


def summarise(traj: Trajectory, data: Data, method: str) -> dict:
    """The saved curves and the per-head stages of one run: ``stages`` holds the
    closed ones only (a provisional stage, which a longer run could move, is kept
    apart in ``provisional`` and not counted); an AdamW run that collapses (a
    head's entropy below 0.05 nats) or ends above its start is ``left_out`` and
    its stages are not counted (``stage_controls.collapsed``), its final
    query-to-key map summarised in ``final_map``."""
    from experiments import stage_controls  # it imports this module

    metrics = dict(traj.metrics)
    metrics["unigram_gap"] = np.asarray(metrics["held_out_loss"]) - data.unigram_loss
    traj = dataclasses.replace(traj, metrics=metrics)
    stages = detect_head_stages(traj)
    held = dataclasses.replace(
        traj, metrics=metrics | {"loss": metrics["held_out_loss"]}
    )
    left_out = stage_controls.collapsed(held, "adamw" if method == "adamw" else "gd")
    return {
        "status": traj.status,
        "t": np.asarray(traj.t).tolist(),
        "loss": np.asarray(metrics["held_out_loss"]).tolist(),
        "head_entropy": np.asarray(metrics["head_entropy"]).tolist(),
        "head_on_top": np.asarray(metrics["head_on_top"]).tolist(),
        "sv_W_A_1": np.asarray(metrics["sv_W_A"])[..., 0].tolist(),
        "stages": []
        if left_out
        else [s.to_dict() for s in stages if not s.provisional],
        "provisional": [s.to_dict() for s in stages if s.provisional],
        "left_out": left_out,
        "final_map": stage_controls.final_map(traj) if left_out else None,
    }


def _init_fn(cfg: Config, d_vocab: int, n_layers: int, n_heads: int):
    return eqx.filter_jit(
        lambda key: Transformer.init(
            d_vocab=d_vocab,
            d_model=cfg.d_model,
            n_layers=n_layers,
            n_heads=n_heads,
            key=key,
            init_scale=cfg.init_scale,
            dtype=jnp.float32,
        )
    )


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "devices": [str(d) for d in jax.devices()],
        "jax": jax.__version__,
    }


def run(cfg: Config, *, log=print) -> dict:
    """Every (data set, architecture, method, seed); the results as one dict."""
    start = time.perf_counter()
    began = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    loads = [list(os.getloadavg())]
    opts = optimizers(cfg)
    datasets = load_data(cfg)
    results = {"data": {}, "runs": [], "step_check": []}
    for name, data in datasets.items():
        results["data"][name] = {
            "description": data.description,
            "d_vocab": data.d_vocab,
            "unigram_loss": data.unigram_loss,
            "bayes_loss": data.bayes_loss,
        }
        small = data.held_out[: cfg.obs_batch]
        eval_loss = SequenceLoss(small)
        heads = HeadObservables.default(small, data.d_vocab)
        obs = EvalObservables(heads, jnp.asarray(data.held_out))
        results["data"][name]["top"] = int(heads.top)
        results["data"][name]["tracked"] = np.asarray(heads.tracked).tolist()
        for n_layers, n_heads in cfg.architectures():
            init_fn = _init_fn(cfg, data.d_vocab, n_layers, n_heads)
            group = time.perf_counter()
            for seed in cfg.seeds:
                init = init_fn(jax.random.key(seed))
                trajs, walls = {}, {}
                for m in METHODS:
                    t0 = time.perf_counter()
                    trajs[m] = run_one(cfg, data, init, opts, m, seed, obs, eval_loss)
                    walls[m] = time.perf_counter() - t0
                for method, traj in trajs.items():
                    rec = {
                        "data": name,
                        "layers": n_layers,
                        "heads": n_heads,
                        "method": method,
                        "seed": seed,
                        "wall_s": walls[method],
                        **summarise(traj, data, method),
                    }
                    results["runs"].append(rec)
                if seed == cfg.seeds[0] and (n_layers, n_heads) in cfg.step_check:
                    half = run_one(
                        cfg, data, init, opts, "gd_half", seed, obs, eval_loss
                    )
                    results["step_check"].append(
                        {
                            "data": name,
                            "layers": n_layers,
                            "heads": n_heads,
                            "seed": seed,
                            "eta": summarise(trajs["gd"], data, "gd"),
                            "half": summarise(half, data, "gd"),
                        }
                    )
            loads.append(list(os.getloadavg()))
            log(
                f"{name} L={n_layers} H={n_heads}: {time.perf_counter() - group:.1f} s"
                f" (load {loads[-1][0]:.2f})"
            )
    results["runtime_s"] = time.perf_counter() - start
    results["began"] = began
    results["load_averages"] = loads
    results["machine"] = machine()
    results["config"] = dataclasses.asdict(cfg)
    add_departures(results)
    return results


# ---------------------------------------------------------------- the tables


def _fmt(x, digits=3):
    return "—" if x is None else f"{x:.{digits}g}"


def _heads_with(stages, name, cycle=None):
    return {
        (s["layer"], s["head"])
        for s in stages
        if s["stage"] == name and (cycle is None or s["cycle"] == cycle)
    }


def _order(stages) -> str:
    """The stages in time order with their start times, e.g. ``C–16 F01@36
    D01@54`` (C–t: condensation ends at t; digits: layer and head; /k: cycle k)."""
    parts = []
    for s in stages:
        if s["stage"] not in STAGE_LETTERS:  # a named move, not a paper stage
            continue
        letter = STAGE_LETTERS[s["stage"]]
        if s["layer"] < 0:
            parts.append(f"{letter}–{s['t_end']:.3g}")
        else:
            cyc = f"/{s['cycle']}" if s["cycle"] > 1 else ""
            parts.append(f"{letter}{s['layer']}{s['head']}{cyc}@{s['t_start']:.3g}")
    return " ".join(parts) or "none"


def _median(xs):
    xs = [x for x in xs if x is not None]
    return float(np.median(xs)) if xs else None


def _group(results):
    groups = {}
    for r in results["runs"]:
        key = (r["data"], r["layers"], r["heads"], r["method"])
        groups.setdefault(key, []).append(r)
    return groups


def stage_table(results: dict) -> str:
    """One row per (data set, architecture, method), over the seeds."""
    cfg = results["config"]
    n_seeds = len(cfg["seeds"])
    rows = [
        "| data | L×H | method | held-out loss at the end (seeds) | condensation "
        "ends: t (median) | runs with "
        "a focus | heads that focus (of L·H, per seed) | first focus: t (median), "
        "(layer.head) | dilution (heads) | asymmetry lifting (heads) | cycle ≥ 2 | "
        "leaves GD first: t (median; by loss / by entropy) | leaves GD for good: "
        "t (median; by loss / by entropy) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (data, n_layers, n_heads, method), runs in _group(results).items():
        losses = ", ".join(f"{r['loss'][-1]:.3f}" for r in runs)
        focus_heads = [len(_heads_with(r["stages"], "focus")) for r in runs]
        firsts = []
        for r in runs:
            f = [s for s in r["stages"] if s["stage"] == "focus"]
            if f:
                first = min(f, key=lambda s: s["t_start"])
                firsts.append((first["t_start"], f"{first['layer']}.{first['head']}"))
        first = "—"
        if firsts:
            heads = sorted({h for _, h in firsts})
            first = f"{_median([t for t, _ in firsts]):.3g} ({', '.join(heads)})"
        dil = [len(_heads_with(r["stages"], "dilution")) for r in runs]
        lift = [len(_heads_with(r["stages"], "asymmetry_lifting")) for r in runs]
        second = sum(any(s["cycle"] > 1 for s in r["stages"]) for r in runs)
        leave = "— | —"
        if method != "gd":
            d = [r["departure"] for r in runs]

            def when(key, a, b, d=d):
                return (
                    f"{_fmt(_median([x[key] for x in d]))} "
                    f"({_fmt(_median([x[a] for x in d]))} / "
                    f"{_fmt(_median([x[b] for x in d]))}); "
                    f"{sum(x[key] is None for x in d)} never"
                )

            leave = (
                when("leaves", "loss", "entropy")
                + " | "
                + when("leaves_for_good", "loss_for_good", "entropy_for_good")
            )
        cond = _median(
            [s["t_end"] for r in runs for s in r["stages"] if s["layer"] < 0]
        )
        rows.append(
            f"| {data} | {n_layers}×{n_heads} | {method} | {losses} | {_fmt(cond)} | "
            f"{sum(n > 0 for n in focus_heads)}/{n_seeds} | "
            f"{', '.join(map(str, focus_heads))} | {first} | "
            f"{', '.join(map(str, dil))} | {', '.join(map(str, lift))} | "
            f"{second}/{n_seeds} | {leave} |"
        )
    return "\n".join(rows) + "\n"


def order_table(results: dict) -> str:
    """The stages of every run (seed by seed) in time order, with their times."""
    rows = [
        "| data | L×H | method | stages per seed, in order of their start (C–t: "
        "condensation, ending at t; F focus, D dilution, A asymmetry lifting, "
        "@t: start; digits: layer, head; /k: cycle k) |",
        "|---|---|---|---|",
    ]
    for (data, n_layers, n_heads, method), runs in _group(results).items():
        orders = "; ".join(f"s{r['seed']}: {_order(r['stages'])}" for r in runs)
        rows.append(f"| {data} | {n_layers}×{n_heads} | {method} | {orders} |")
    return "\n".join(rows) + "\n"


def step_table(results: dict) -> str:
    """GD at η against GD at η/2 (twice the steps) on the same saved times."""
    if not results.get("step_check"):
        return ""
    lr = results["config"]["lr"]
    rows = [
        f"| data | L×H | seed | max \\|Δ held-out loss\\| | max \\|Δ head entropy\\| | "
        f"stages at η = {lr:g} | stages at η = {lr / 2:g} |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in results["step_check"]:
        a, b = c["eta"], c["half"]
        d_loss = np.max(np.abs(np.subtract(a["loss"], b["loss"])))
        d_ent = np.max(np.abs(np.subtract(a["head_entropy"], b["head_entropy"])))
        rows.append(
            f"| {c['data']} | {c['layers']}×{c['heads']} | {c['seed']} | "
            f"{d_loss:.3g} | {d_ent:.3g} | {_order(a['stages'])} | "
            f"{_order(b['stages'])} |"
        )
    return (
        "### GD's step: η against η/2 (how close GD is to its flow)\n\n"
        + "\n".join(rows)
        + "\n\n"
    )


def headline(results: dict) -> str:
    """Counts over all runs, by depth and by method (every number from the run)."""
    runs = results["runs"]
    lines = []

    def count(pred, sel):
        chosen = [r for r in runs if sel(r)]
        return f"{sum(pred(r) for r in chosen)}/{len(chosen)}"

    def has(name):
        return lambda r: bool(_heads_with(r["stages"], name))

    for data in results["data"]:
        lines.append(f"- **{data}**:")
        for n_layers in results["config"]["layers"]:
            parts = []
            for method in METHODS:

                def sel(r, m=method, n=n_layers, d=data):
                    return r["data"] == d and r["layers"] == n and r["method"] == m

                parts.append(
                    f"{method} focus {count(has('focus'), sel)}, dilution "
                    f"{count(has('dilution'), sel)}, lifting "
                    f"{count(has('asymmetry_lifting'), sel)}, cycle 2 "
                    f"{count(lambda r: any(s['cycle'] > 1 for s in r['stages']), sel)}"
                )
            lines.append(f"  - {n_layers} layer(s): " + "; ".join(parts) + ".")
        mine = [r for r in runs if r["data"] == data]
        parts = []
        for method in METHODS:
            chosen = [r for r in mine if r["method"] == method]
            final = [r["loss"][-1] for r in chosen]
            rise = [r["loss"][-1] - min(r["loss"]) for r in chosen]
            t_min = [r["t"][int(np.argmin(r["loss"]))] for r in chosen]
            parts.append(
                f"{method} {np.median(final):.3f} (its loss ends ≥ 0.05 above its "
                f"own minimum in {sum(x >= 0.05 for x in rise)}/{len(chosen)}; "
                f"minimum at t = {min(t_min):.3g}–{max(t_min):.3g}, median "
                f"{np.median(t_min):.3g})"
            )
        lines.append(
            "  - held-out loss at the end, median over architectures and seeds: "
            + "; ".join(parts)
            + "."
        )
        for n_layers in [n for n in results["config"]["layers"] if n > 1]:
            parts = []
            for method in METHODS:
                chosen = [
                    r for r in mine if r["layers"] == n_layers and r["method"] == method
                ]
                per_layer = []
                for layer in range(n_layers):
                    total = sum(r["heads"] for r in chosen)
                    hit = sum(
                        sum(
                            1
                            for lh in _heads_with(r["stages"], "focus")
                            if lh[0] == layer
                        )
                        for r in chosen
                    )
                    per_layer.append(f"{hit}/{total}")
                parts.append(f"{method} " + ", ".join(per_layer))
            lines.append(
                f"  - {n_layers} layers, heads that focus in layer "
                f"{', '.join(map(str, range(n_layers)))} (all head counts and "
                "seeds): " + "; ".join(parts) + "."
            )
        up, several = bottom_up(mine)
        lines.append(
            f"  - runs in which heads of more than one layer focus: {several}; in "
            f"{up} of them each layer's first focus starts no earlier than the "
            "layer below's (bottom-up)."
        )
    return "\n".join(lines) + "\n"


def bottom_up(runs: list[dict]) -> tuple[int, int]:
    """(runs whose layers' first focus times rise with the layer, runs in which
    heads of at least two layers focus)."""
    up = several = 0
    for r in runs:
        firsts = {}
        for s in r["stages"]:
            if s["stage"] == "focus":
                layer = s["layer"]
                firsts[layer] = min(firsts.get(layer, np.inf), s["t_start"])
        if len(firsts) >= 2:
            several += 1
            times = [firsts[k] for k in sorted(firsts)]
            up += all(a <= b for a, b in zip(times, times[1:]))
    return up, several


def reading(results: dict) -> str:
    """How the stages were read: the rules, the provisional stages left out and the
    runs left out (every number from the run)."""
    runs = results["runs"]
    prov = {
        m: sum(
            s["stage"] in STAGE_LETTERS
            for r in runs
            if r["method"] == m
            for s in r.get("provisional", [])
        )
        for m in METHODS
    }
    out = [
        "Stages are read by `gflow.detect_head_stages` with the rules of "
        "[stage_rules.md](stage_rules.md): focus is the paper's (a head's excess "
        "attention on the most frequent token rising by the margin), dilution the "
        "tracked queries' excess on it falling back, and cycle 2 the rare queries "
        "on themselves; the other named moves (entropy fall, self, previous-token, "
        "first-position focus) are not counted here. Only closed stages are "
        "counted; the provisional ones (a longer run could move them) are left "
        "out: "
        + ", ".join(f"{m} {prov[m]}" for m in METHODS)
        + " paper stages over all runs."
    ]
    left = [r for r in runs if r.get("left_out")]
    if left:
        out.append(
            f"AdamW runs left out ({len(left)}; their stages are not counted): "
            + "; ".join(
                f"{r['data']} {r['layers']}×{r['heads']} s{r['seed']} "
                f"{r['left_out']} ({r['final_map']})"
                for r in left
            )
            + "."
        )
    else:
        out.append("No AdamW run collapsed or diverged.")
    return "\n\n".join(out)


def summary(results: dict) -> str:
    cfg = results["config"]
    loads = np.asarray(results["load_averages"])
    data_lines = "\n".join(
        f"- {name}: {d['description']}; unigram loss {d['unigram_loss']:.3f}"
        + (f", Bayes loss {d['bayes_loss']:.3f}" if d["bayes_loss"] else "")
        + f"; top token id {d['top']}, tracked ids {d['tracked']}."
        for name, d in results["data"].items()
    )
    return (
        f"Run began {results['began']}; total runtime "
        f"**{results['runtime_s'] / 60:.1f} min** (compilation included) on "
        f"{results['machine']['cpus']} CPUs ({results['machine']['platform']}, "
        f"jax {results['machine']['jax']}); 1-minute load average "
        f"{loads[:, 0].min():.2f}–{loads[:, 0].max():.2f} over the run (sampled "
        "after each architecture).\n\n"
        f"Settings: width {cfg['d_model']}, init scale {cfg['init_scale']}, "
        f"seeds {list(cfg['seeds'])}, context {cfg['context']}, {cfg['steps']} "
        f"steps per run saved every {cfg['steps'] // (cfg['num_saves'] - 1)}; gd on "
        f"a fixed sample of {cfg['gd_sample']} sequences and sgd on fresh batches "
        f"of {cfg['batch']}, both at η = {cfg['lr']} (t up to "
        f"{cfg['lr'] * cfg['steps']:g}); adamw at peak {cfg['adamw_lr']} "
        f"(warmup {cfg['warmup']:.0%}, cosine; t up to ≈ "
        f"{_adamw_t1(cfg):.3g}). Held-out sample: {cfg['eval_batch']} sequences "
        f"for the loss, the first {cfg['obs_batch']} for the head observables. "
        f"Departure thresholds: loss {cfg['loss_tol']} nats, head entropy "
        f"{cfg['entropy_tol']} nats.\n\n"
        f"{data_lines}\n\n"
        "### Stages by method and architecture (from the run)\n\n"
        f"{reading(results)}\n\n"
        f"{headline(results)}\n"
        "### Per (data, architecture, method), over the seeds\n\n"
        f"{stage_table(results)}\n"
        f"{step_table(results)}"
        "### Stage order, run by run\n\n"
        f"{order_table(results)}"
    )


#: the stages the figure counts per architecture, and how they are named there
FIGURE_STAGES = ("focus", "dilution", "asymmetry_lifting")
FIGURE = ROOT / "docs" / "figures" / "deep_models.png"


def head_fractions(results: dict) -> dict:
    """Per (data set, method): the architectures in run order and, per stage of
    ``FIGURE_STAGES``, the fraction of all heads over the seeds (L·H·seeds) that
    show it at least once (a head's own stage: the embedding's global asymmetry
    lifting is not a head's), and the fraction of runs with a cycle ≥ 2."""
    out = {}
    for (data, n_layers, n_heads, method), runs in _group(results).items():
        cell = out.setdefault((data, method), {"arch": [], "second": []})
        total = n_layers * n_heads * len(runs)
        cell["arch"].append(f"{n_layers}×{n_heads}")
        for name in FIGURE_STAGES:  # heads only: the embedding's lifting is global
            n = sum(
                sum(layer >= 0 for layer, _ in _heads_with(r["stages"], name))
                for r in runs
            )
            cell.setdefault(name, []).append(n / total)
        second = sum(any(s["cycle"] > 1 for s in r["stages"]) for r in runs)
        cell["second"].append(second / len(runs))
    return out


def figure(results: dict, path: Path) -> Path:
    """One panel per (data set, method): for each architecture, the fraction of
    heads (over the seeds) with a focus, a dilution and an asymmetry lifting, in
    the stage colours, and the fraction of runs with a second cycle (black)."""
    from gflow.plotting import RC, STAGE_COLOURS, plt, save_figure, settings_line

    fractions = head_fractions(results)
    datasets = list(dict.fromkeys(d for d, _ in fractions))
    methods = list(dict.fromkeys(m for _, m in fractions))
    cfg = results["config"]
    with plt.rc_context(RC):
        fig, axes = plt.subplots(
            len(datasets),
            len(methods),
            figsize=(7.0, 2.3 * len(datasets) + 0.7),
            sharey=True,
            squeeze=False,
        )
        for i, data in enumerate(datasets):
            for j, method in enumerate(methods):
                ax = axes[i, j]
                cell = fractions.get((data, method))
                if cell is None:
                    ax.set_visible(False)
                    continue
                x = np.arange(len(cell["arch"]))
                for k, name in enumerate(FIGURE_STAGES):
                    ax.plot(
                        x + 0.08 * (k - 1),
                        cell[name],
                        "o-",
                        ms=3.5,
                        lw=1,
                        color=STAGE_COLOURS[name],
                    )
                ax.plot(x, cell["second"], "k*", ms=6, ls="none")
                ax.set_xticks(x, cell["arch"], rotation=90)
                ax.set_ylim(-0.05, 1.05)
                ax.set_xlim(-0.5, len(x) - 0.5)
                ax.set_title(f"{data}, {method}", loc="left")
                ax.set_xlabel("layers × heads")
                if j == 0:
                    ax.set_ylabel("fraction of heads")
        handles = [
            plt.Line2D([], [], marker="o", ms=3.5, color=STAGE_COLOURS[n])
            for n in FIGURE_STAGES
        ] + [plt.Line2D([], [], marker="*", color="k", ls="none")]
        labels = [n.replace("_", " ") for n in FIGURE_STAGES] + ["cycle ≥ 2 (runs)"]
        fig.legend(handles, labels, loc="lower center", ncol=4, frameon=False)
        settings_line(
            fig,
            f"{len(cfg['seeds'])} seeds · {cfg['steps']} steps · width "
            f"{cfg['d_model']} · gd/sgd η = {cfg['lr']} · adamw peak "
            f"{cfg['adamw_lr']}",
        )
        save_figure(fig, path)
    return path


def _adamw_t1(cfg: dict) -> float:
    import optax

    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=cfg["adamw_lr"],
        warmup_steps=max(1, round(cfg["warmup"] * cfg["steps"])),
        decay_steps=cfg["steps"],
    )
    return float(sum(schedule(k) for k in range(cfg["steps"])))


def write_doc(text: str, doc: Path = DOC) -> None:
    """Replace the generated block of the doc (create the doc if it is absent)."""
    if doc.exists() and START in (old := doc.read_text()) and END in old:
        _docs.replace_block(doc, START, END, text)
        return
    doc.write_text(
        f"# Deep models: the stage cycle per head (issue 14)\n\n{START}\n{text}{END}\n"
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a small smoke run, no doc")
    p.add_argument("--out", type=Path, default=None, help="results folder")
    p.add_argument(
        "--doc-only",
        action="store_true",
        help="rewrite the doc from the saved results.json",
    )
    p.add_argument("--datasets", default=None, help="comma-separated subset")
    args = p.parse_args(argv)
    cfg = QUICK if args.quick else Config()
    if args.datasets:
        cfg = dataclasses.replace(cfg, datasets=tuple(args.datasets.split(",")))
    out = args.out or (OUT.with_name(OUT.name + "_quick") if args.quick else OUT)
    if args.doc_only:
        results = read_json(out / "results.json")
        add_departures(results)  # from the saved curves, with the saved thresholds
    else:
        results = run(cfg)
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "results.json", results)
    figure(results, out / "deep_models.png")
    text = summary(results)
    if not args.quick:
        FIGURE.parent.mkdir(parents=True, exist_ok=True)
        FIGURE.write_bytes((out / "deep_models.png").read_bytes())
        text += "\n![heads per stage, by architecture](figures/deep_models.png)\n"
    (out / "summary.md").write_text(text)
    if not args.quick:
        write_doc(text)
    print(text)
    print(f"runtime {results['runtime_s']:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
