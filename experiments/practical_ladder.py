"""The ladder (issue 30 point 2): does the focus–dilution cycle survive, one change
at a time, from the paper's one-layer model to a GPT block?

Question: starting from the paper's model in ``gflow.Transformer`` form (one layer,
one head, no value, no residual, no LayerNorm, no MLP, no positions, init ε = 1e-3),
add one ingredient per rung: (1) heads, (2) layers, (3) residual stream,
(4) pre-LayerNorm, (5) value/output, (6) MLP, (7) learned positions, (8) init
scale 0.02. On each rung, which fraction of the heads shows focus, dilution,
asymmetry lifting and a second cycle (``gflow.detect_head_stages`` on the held-out
per-head observables), under full-batch GD on a fixed sample (the flow's stand-in),
minibatch SGD and AdamW with warmup-cosine, on the paper's Markov chain and on
in-context Markov chains (ICL-MC, ``gflow.InContextMarkov``)? And on which key class
does each head end (the most frequent token, the previous position, the first
position, the position after an earlier copy of the current token)?

Command:
    PYTHONPATH=$PWD python experiments/practical_ladder.py              # the run
    PYTHONPATH=$PWD python experiments/practical_ladder.py --quick      # smoke run
    PYTHONPATH=$PWD python experiments/practical_ladder.py --doc-only   # the page

Resumable: each (data, rung, method, seed) run is cached as one JSON file under
``experiments/results/practical_ladder/runs/`` and skipped when present; the page
docs/ladder_entropy_rule.md (the old entropy rule's blocks, superseded by the
stage rules of docs/stage_rules.md and kept for the record) is rewritten from the
cache. Runtime and the load are
recorded in ``summary.json`` and on the page.

The methods, clock, held-out observables, stage detection and departures are those
of ``experiments/deep_cycle.py`` (its module docstring), on which this script is
built; only the rungs, the ICL-MC data set and the key classes are new.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from experiments import _docs
from experiments import deep_cycle as dc
from gflow import (
    HeadObservables,
    InContextMarkov,
    OnlineStageDetector,
    SequenceLoss,
    Transformer,
)
from gflow.analysis import ONLINE_SIGNALS
from gflow.problems import MarkovChain

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "results" / "practical_ladder"
DOC = ROOT / "docs" / "ladder_entropy_rule.md"  # the old rule's record
START, END = "<!-- practical_ladder:start -->", "<!-- practical_ladder:end -->"
CONTROL = ("<!-- practical_controls:start -->", "<!-- practical_controls:end -->")
TEXT = ("<!-- practical_text:start -->", "<!-- practical_text:end -->")
TEXT_CONTROL = (
    "<!-- practical_text_controls:start -->",
    "<!-- practical_text_controls:end -->",
)
FIGURE = ROOT / "docs" / "figures" / "practical_ladder.png"
TEXT_FIGURE = ROOT / "docs" / "figures" / "practical_ladder_text.png"
TEXT_CONTROL_FIGURE = ROOT / "docs" / "figures" / "practical_ladder_text_controls.png"
#: each cell against its control (the i.i.d. ladder; the shuffled text ladder)
VS_CONTROL_FIGURE = ROOT / "docs" / "figures" / "practical_ladder_vs_control.png"
TEXT_VS_CONTROL_FIGURE = (
    ROOT / "docs" / "figures" / "practical_ladder_text_vs_control.png"
)
#: The vocabulary of the BPE corpora (``--text``): 128 pieces, of which about 60 are
#: the corpus's characters, so the merges make the common words and ▁-word pieces.
TEXT_VOCAB = 128

#: (name, the Transformer.init settings of the rung): each adds one change.
RUNGS = (
    ("0 paper", {}),
    ("1 +heads", {"n_heads": 2}),
    ("2 +layers", {"n_heads": 2, "n_layers": 2}),
    ("3 +residual", {"n_heads": 2, "n_layers": 2, "residual": True}),
    ("4 +pre-LN", {"n_heads": 2, "n_layers": 2, "residual": True, "layernorm": True}),
    (
        "5 +value/output",
        {
            "n_heads": 2,
            "n_layers": 2,
            "residual": True,
            "layernorm": True,
            "value": True,
        },
    ),
    (
        "6 +MLP",
        {
            "n_heads": 2,
            "n_layers": 2,
            "residual": True,
            "layernorm": True,
            "value": True,
            "d_ff": 64,
        },
    ),
    (
        "7 +positions",
        {
            "n_heads": 2,
            "n_layers": 2,
            "residual": True,
            "layernorm": True,
            "value": True,
            "d_ff": 64,
            "max_len": "context",
        },
    ),
    (
        "8 init 0.02",
        {
            "n_heads": 2,
            "n_layers": 2,
            "residual": True,
            "layernorm": True,
            "value": True,
            "d_ff": 64,
            "max_len": "context",
            "init_scale": 0.02,
        },
    ),
)
KEY_CLASSES = ("top token", "previous", "first", "after copy")


@dataclasses.dataclass(frozen=True)
class Config(dc.Config):
    datasets: tuple[str, ...] = ("markov", "icl-markov")
    rungs: tuple[str, ...] = tuple(name for name, _ in RUNGS)
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    init_scale: float = 1e-3
    context: int = 32
    gd_sample: int = 64
    eval_batch: int = 128
    obs_batch: int = 32
    steps: int = 600
    num_saves: int = 41
    states: int = 3
    alpha: float = 1.0
    tag: str = "full"  # the cache folder under experiments/results/practical_ladder


QUICK = Config(
    tag="quick",
    rungs=("0 paper", "3 +residual"),
    d_model=4,
    seeds=(0, 1),
    context=8,
    batch=8,
    gd_sample=8,
    eval_batch=16,
    obs_batch=8,
    steps=40,
    num_saves=5,
    step_check=(),
)


class ICLStream(eqx.Module):
    """Fresh in-context Markov sequences for each key."""

    task: InContextMarkov
    batch: int = eqx.field(static=True)
    length: int = eqx.field(static=True)

    def __call__(self, key):
        return self.task.sample(key=key, batch=self.batch, length=self.length)


def icl_data(cfg: Config) -> dc.Data:
    task = InContextMarkov(states=cfg.states, alpha=cfg.alpha)
    length = cfg.context + 1
    held = task.sample(key=jax.random.key(10_000), batch=cfg.eval_batch, length=length)
    losses = task.strategy_losses(length, key=jax.random.key(10_001), samples=4000)

    def gd_sample(seed):
        key = jax.random.fold_in(jax.random.key(seed), 1)
        return task.sample(key=key, batch=cfg.gd_sample, length=length)

    return dc.Data(
        "icl-markov",
        cfg.states,
        gd_sample,
        ICLStream(task, cfg.batch, length),
        np.asarray(held),
        float(losses.of("unigram")[1]),  # the in-context unigram at the last position
        float(losses.of("bigram")[1]),
        f"InContextMarkov(states={cfg.states}, alpha={cfg.alpha}): rows Dirichlet(α)",
    )


def iid_data(cfg: Config) -> dc.Data:
    """The control: tokens drawn i.i.d. from the paper's π (its chain at λ = 0), so
    no context helps and a focus or dilution found there is one found on nothing."""
    return dc.markov_data(
        cfg,
        MarkovChain.from_lambda(pi=MarkovChain.default().pi, lam=0.0),
        name="markov-iid",
        description="control: i.i.d. tokens from π = (0.75, 0.19, 0.05, 0.01) (λ = 0)",
    )


def uniform_data(cfg: Config) -> dc.Data:
    """The second control: the paper's chain with π uniform (λ = 0.5). The context
    helps (a token repeats with probability λ + (1 - λ)/4), but no token is more
    frequent than another, so the paper's focus on the most frequent token has
    nothing to gather on; for the paper's model the gradient at θ ≈ 0 vanishes
    (MODEL.md: σ₀ = |π| |π - 1/d| = 0)."""
    return dc.markov_data(
        cfg,
        MarkovChain.from_lambda(pi=UNIFORM_PI, lam=0.5),
        name="markov-uniform",
        description="control: the paper's chain with π uniform, λ = 0.5",
    )


UNIFORM_PI = (0.25, 0.25, 0.25, 0.25)
#: The Markov controls of ``--controls`` and the data set each controls.
MARKOV_CONTROLS = {"markov-iid": "markov", "markov-uniform": "markov"}


#: The subword corpora of ``--text``: name -> (file under ../shared/data, whitespace
#: mode). ``prefix`` glues ▁ to the next word as GPT-2's tokenisers do; ``isolated``
#: keeps it a piece of its own, the last token of about half the windows.
CORPORA = {
    "tinystories-bpe-prefix": ("tinystories/sample.txt", "prefix"),
    "tinystories-bpe-isolated": ("tinystories/sample.txt", "isolated"),
    "wikitext-bpe-prefix": ("wikitext2/valid.txt", "prefix"),
    "wikitext-bpe-isolated": ("wikitext2/valid.txt", "isolated"),
}
DATA_ROOT = ROOT.parent / "shared" / "data"

#: The text controls of ``--text-controls``: a corpus of CORPORA with its pieces in a
#: random order (a fixed permutation of the whole piece sequence, from
#: ``numpy.random.default_rng(SHUFFLE_SEED)``). The unigram frequencies are the
#: corpus's, but the context says nothing about the next piece, so the Bayes loss is
#: the unigram loss and no attention pattern helps: a focus or dilution found there
#: is the detector firing on nothing.
SHUFFLED = {
    "tinystories-bpe-isolated-shuffled": "tinystories-bpe-isolated",
    "tinystories-bpe-prefix-shuffled": "tinystories-bpe-prefix",
}
SHUFFLE_SEED = 0


def bpe_data(cfg: Config, name: str) -> dc.Data:
    """A corpus cut by a BPE tokeniser of ``cfg.vocab_size`` pieces trained on it
    (offline), in the whitespace mode of ``CORPORA[name]``; held out and sampled
    as ``deep_cycle.corpus_data`` does with words. A name of ``SHUFFLED``: its
    corpus with the pieces permuted before the split."""
    from gflow.text import SubwordTokenizer, Vocabulary, load_corpus

    shuffled = name in SHUFFLED
    file, whitespace = CORPORA[SHUFFLED.get(name, name)]
    text = load_corpus(DATA_ROOT / file, max_chars=cfg.max_chars)
    tok = SubwordTokenizer.train(
        text, kind="bpe", vocab_size=cfg.vocab_size, whitespace=whitespace
    )
    pieces = tok(text)
    vocab = Vocabulary.build(pieces, tok.vocab_size)
    ids = vocab.encode(pieces)
    if shuffled:
        ids = np.asarray(ids)[np.random.default_rng(SHUFFLE_SEED).permutation(len(ids))]
    share = np.bincount(ids, minlength=len(vocab)).max() / len(ids)
    return dc.corpus_data(
        cfg,
        name,
        vocab,
        ids,
        lambda n, top: (
            f"{file}, {n} BPE pieces ({cfg.max_chars} characters, "
            f"{len(vocab)} pieces, ▁ {whitespace}), most frequent {top!r} "
            f"({share:.0%} of all pieces)"
            + (
                f"; control: pieces in a random order (permutation seed {SHUFFLE_SEED})"
                if shuffled
                else ""
            )
        ),
    )


def load_data(cfg: Config) -> dict[str, dc.Data]:
    out = {}
    for name in cfg.datasets:
        if name == "markov":
            out[name] = dc.markov_data(cfg)
        elif name == "markov-iid":
            out[name] = iid_data(cfg)
        elif name == "markov-uniform":
            out[name] = uniform_data(cfg)
        elif name == "icl-markov":
            out[name] = icl_data(cfg)
        elif name in CORPORA or name in SHUFFLED:
            file = DATA_ROOT / CORPORA[SHUFFLED.get(name, name)][0]
            if not file.exists():
                print(f"skipping {name}: {file} is absent")
                continue
            out[name] = bpe_data(cfg, name)
        else:
            raise ValueError(f"unknown data set {name!r}")
    return out


def model_settings(cfg, rung: str) -> dict:
    """The ``TrainConfig`` model settings of a rung (``cfg``: any configuration
    with ``context`` and ``init_scale``): its ``Transformer.init`` settings by
    gflow train's names."""
    settings = _settings(cfg, rung)
    return {
        "layers": settings.get("n_layers", 1),
        "heads": settings.get("n_heads", 1),
        "d_ff": settings.get("d_ff"),
        "value": settings.get("value", False),
        "layernorm": settings.get("layernorm", False),
        "residual": settings.get("residual", False),
        "max_len": settings.get("max_len"),
        "init_scale": settings["init_scale"],
    }


def train_argv(cfg: Config, data: str, rung: str, method: str, seed: int) -> list:
    """The ``gflow train`` command line of one cell of the ladder: the rung's model
    (``Transformer.init`` settings as flags), the data set, the method with its
    step size, schedule and sample, the steps, saves and seed of ``cfg``.

    ``gflow train`` draws its own samples and batches from the seed (a fixed sample
    from its own key, fresh minibatches, a held-out sample), so its numbers are
    another draw of the same cell, not the cached run's. The i.i.d. control is the
    chain at λ = 0; the BPE corpora train their tokeniser as the ladder does. The
    shuffled-text controls have no command line (gflow train does not shuffle a
    corpus): a ValueError says so."""
    if data in SHUFFLED:
        raise ValueError(
            f"{data} is a control of this experiment only: gflow train does not "
            "shuffle a corpus"
        )
    argv = ["train", "--model", "transformer", "--d-model", str(cfg.d_model)]
    for key, value in model_settings(cfg, rung).items():
        if isinstance(value, bool):
            argv += [f"--{key}"] if value else []
        elif value is not None:
            argv += ["--" + key.replace("_", "-"), str(value)]
    if data in ("markov", "markov-iid", "markov-uniform"):
        argv += ["--data", "markov"] + (["--lam", "0"] if data == "markov-iid" else [])
        if data == "markov-uniform":
            argv += ["--pi", ",".join(map(str, UNIFORM_PI))]
    elif data == "icl-markov":
        argv += ["--data", data, "--states", str(cfg.states), "--alpha", str(cfg.alpha)]
    else:
        file, whitespace = CORPORA[data]
        argv += ["--data", os.path.relpath(DATA_ROOT / file), "--tokenizer", "bpe"]
        argv += ["--whitespace", whitespace, "--vocab-size", str(cfg.vocab_size)]
        argv += ["--max-chars", str(cfg.max_chars)]
    argv += {
        "gd": ["--method", "gd", "--lr", str(cfg.lr), "--windows", str(cfg.gd_sample)],
        "sgd": ["--optimizer", "sgd", "--lr", str(cfg.lr), "--batch", str(cfg.batch)],
        "adamw": [
            "--optimizer",
            "adamw",
            "--lr",
            str(cfg.adamw_lr),
            "--schedule",
            "warmup-cosine",
            "--warmup",
            str(cfg.warmup),
            "--weight-decay",
            str(cfg.weight_decay),
            "--batch",
            str(cfg.batch),
        ],
    }[method]
    argv += ["--seq-len", str(cfg.context), "--eval-batch", str(cfg.eval_batch)]
    argv += ["--steps", str(cfg.steps), "--num-saves", str(cfg.num_saves)]
    return argv + ["--seed", str(seed)]


def _settings(cfg: Config, rung: str) -> dict:
    settings = dict(dict(RUNGS)[rung])
    if settings.get("max_len") == "context":
        settings["max_len"] = cfg.context
    settings.setdefault("init_scale", cfg.init_scale)
    return settings


def _init_fn(cfg: Config, d_vocab: int, rung: str):
    settings = _settings(cfg, rung)
    return eqx.filter_jit(
        lambda key: Transformer.init(
            d_vocab=d_vocab, d_model=cfg.d_model, key=key, dtype=jnp.float32, **settings
        )
    )


@jax.jit
def _class_mass(attention, tokens, top):
    """Mass per key class and its chance under uniform causal attention, per head:
    attention [b, l, h, n, n], tokens [b, n]; returns ([4, l, h], [4])."""
    n = tokens.shape[1]
    i = jnp.arange(n)[:, None]
    j = jnp.arange(n)[None, :]
    causal = (j <= i).astype(attention.dtype)
    prev_tok = jnp.concatenate([jnp.full_like(tokens[:, :1], -1), tokens[:, :-1]], 1)
    masks = jnp.stack(
        [
            (tokens[:, None, :] == top) * causal,  # key is the top token
            jnp.broadcast_to(j == i - 1, (tokens.shape[0], n, n)) * causal,
            jnp.broadcast_to(j == 0, (tokens.shape[0], n, n)) * causal,
            (prev_tok[:, None, :] == tokens[:, :, None]) * causal,  # after a copy
        ]
    ).astype(attention.dtype)  # [4, b, n, n]
    rows = slice(1, n)  # queries with at least two keys
    mass = jnp.einsum("blhij,cbij->clh", attention[..., rows, :], masks[:, :, rows])
    mass = mass / (tokens.shape[0] * (n - 1))
    chance = jnp.einsum("cbij,ij->c", masks[:, :, rows], causal[rows] / (i[rows] + 1))
    return mass, chance / (tokens.shape[0] * (n - 1))


def key_classes(model, tokens, top: int, *, excess: float = 0.1) -> dict:
    """Per layer and head, the key class whose mass exceeds its chance under
    uniform causal attention by the most, if by at least ``excess`` (of the row's
    mass), else ``diffuse``; with the masses and chances themselves."""
    contexts = jnp.asarray(tokens[:, :-1])
    attention = jax.vmap(model.attention)(contexts)  # [b, l, h, n, n]
    if attention.ndim != 5:
        attention = attention.reshape(contexts.shape[0], 1, 1, *attention.shape[-2:])
    mass, chance = (np.asarray(x) for x in _class_mass(attention, contexts, top))
    over = mass - chance[:, None, None]  # [class, layer, head]
    labels = [
        [
            KEY_CLASSES[int(np.argmax(over[:, layer, head]))]
            if over[:, layer, head].max() >= excess
            else "diffuse"
            for head in range(over.shape[2])
        ]
        for layer in range(over.shape[1])
    ]
    return {"labels": labels, "mass": mass.tolist(), "chance": chance.tolist()}


#: The rungs pooled in the control tables: without a residual stream, and with one.
RUNG_GROUPS = (("0-2", ("0", "1", "2")), ("3-8", tuple("345678")))


def online_events(traj) -> list[dict]:
    """The online detector (``OnlineStageDetector``, default rules) read one save
    at a time along a run, as a monitor with ``every`` = one save interval would:
    the events it reports. The probe loss is the held-out loss."""
    m = traj.metrics
    detector = OnlineStageDetector()
    names = [k for k in ONLINE_SIGNALS if k != "loss"]
    for i, t in enumerate(np.asarray(traj.t)):
        signals = {k: np.asarray(m[k][i]) for k in names}
        signals["loss"] = float(m["held_out_loss"][i])
        for k in ("sv_W_A", "sv_W_E", "unigram_gap"):
            if k in m:
                signals[k] = np.asarray(m[k][i])
        if not np.all(np.isfinite(signals["head_entropy"])):
            break  # a diverged run: the detector reads no further
        detector.update(i, float(t), signals)
    return [e.to_dict() for e in detector.events]


def online_table(runs: list[dict]) -> str:
    """Per data set and method, heads with a focus and with a dilution (cycle 1)
    by the online detector and by the offline one, pooled over the rungs 0-2 (no
    residual) and 3-8; only runs that recorded the online events."""
    rows = []
    for data in sorted({r["data"] for r in runs}):
        for method in dc.METHODS:
            for label, rungs in RUNG_GROUPS:
                group = [
                    r
                    for r in runs
                    if (r["data"], r["method"]) == (data, method)
                    and r["rung"].split()[0] in rungs
                    and "online" in r
                ]
                if not group:
                    continue
                cells = []
                for stage in ("focus", "dilution"):
                    k_on = k_off = n = 0
                    for r in group:
                        offline = _head_stages(r)
                        n += len(offline)
                        k_off += sum((stage, 1) in st for st in offline.values())
                        k_on += len(
                            {
                                (e["layer"], e["head"])
                                for e in r["online"]
                                if e["event"] == stage and e["cycle"] == 1
                            }
                        )
                    cells += [f"{k_on}/{n}", f"{k_off}/{n}"]
                rows.append([data, method, label, len(group), *cells])
    return _docs.table(
        [
            "data",
            "method",
            "rungs",
            "runs",
            "focus: online",
            "focus: offline",
            "dilution: online",
            "dilution: offline",
        ],
        rows,
    )


def _path(cfg: Config, data: str, rung: str, method: str, seed: int) -> Path:
    name = f"{data}_{rung.split()[0]}_{method}_{seed}.json"
    return OUT / cfg.tag / "runs" / name


def run(cfg: Config, *, log=print) -> dict:
    """Every (data, rung, method, seed) not cached yet; returns the summary."""
    start = time.perf_counter()
    began = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    loads = [list(os.getloadavg())]
    opts = dc.optimizers(cfg)
    computed = 0
    for name, data in load_data(cfg).items():
        small = data.held_out[: cfg.obs_batch]
        eval_loss = SequenceLoss(small)
        heads = HeadObservables.default(small, data.d_vocab)
        obs = dc.EvalObservables(heads, jnp.asarray(data.held_out))
        for rung in cfg.rungs:
            init_fn = _init_fn(cfg, data.d_vocab, rung)
            group = time.perf_counter()
            for seed in cfg.seeds:
                todo = [
                    m
                    for m in dc.METHODS
                    if not _path(cfg, name, rung, m, seed).exists()
                ]
                if not todo:
                    continue
                init = init_fn(jax.random.key(seed))
                for method in todo:
                    t0 = time.perf_counter()
                    traj = dc.run_one(
                        cfg, data, init, opts, method, seed, obs, eval_loss
                    )
                    keys = key_classes(
                        traj.final, data.held_out[: cfg.obs_batch], int(heads.top)
                    )
                    rec = {
                        "data": name,
                        "rung": rung,
                        "method": method,
                        "seed": seed,
                        "wall_s": time.perf_counter() - t0,
                        **dc.summarise(traj, data, method),
                        "online": online_events(traj),
                        "key_classes": keys["labels"],
                        "key_mass": {"mass": keys["mass"], "chance": keys["chance"]},
                    }
                    path = _path(cfg, name, rung, method, seed)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(json.dumps(rec))
                    computed += 1
            loads.append(list(os.getloadavg()))
            log(
                f"{name} {rung}: {time.perf_counter() - group:.1f} s "
                f"(load {loads[-1][0]:.2f})",
                flush=True,
            )
    summary = {
        "began": began,
        "runtime_s": time.perf_counter() - start,
        "computed": computed,
        "load_averages": loads,
        "machine": dc.machine(),
        "config": dataclasses.asdict(cfg),
        "data": {
            name: {"description": d.description, "unigram_loss": d.unigram_loss}
            for name, d in load_data(cfg).items()
        },
    }
    folder = _path(cfg, "x", "0 x", "x", 0).parent.parent
    previous = folder / "summary.json"
    if previous.exists():  # a resumed run: keep the earlier sessions' time
        old = json.loads(previous.read_text())
        summary["sessions"] = old.get("sessions", []) + [old["runtime_s"]]
    previous.write_text(json.dumps(summary, indent=1))
    return summary


# ------------------------------------------------------------------- the page


def _runs(cfg: Config) -> list[dict]:
    folder = _path(cfg, "x", "0 x", "x", 0).parent
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def _wilson(k: int, n: int) -> tuple[float, float]:
    """The 95% Wilson interval of k successes in n."""
    if n == 0:
        return (math.nan, math.nan)
    z, p = 1.96, k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def _head_stages(run: dict) -> dict[tuple[int, int], set[tuple[str, int]]]:
    """(layer, head) -> {(stage, cycle)} of a run's head-wise stages."""
    heads = np.asarray(run["head_entropy"])
    out = {
        (lay, h): set() for lay in range(heads.shape[1]) for h in range(heads.shape[2])
    }
    for s in run["stages"]:
        if s.get("layer") is None or s["layer"] < 0:
            continue
        out[(s["layer"], s["head"])].add((s["stage"], s["cycle"]))
    return out


def most_common(classes: list[str]) -> str:
    """The most common key class and its count, every tied class named (in the
    order of ``KEY_CLASSES``, then *diffuse*), so that a tie reads the same in
    every process (a set's order of strings does not)."""
    if not classes:
        return "—"
    top = max(map(classes.count, classes))
    order = [*KEY_CLASSES, "diffuse"]
    tied = sorted({c for c in classes if classes.count(c) == top}, key=order.index)
    each = " each" if len(tied) > 1 else ""
    return f"{' / '.join(tied)} ({top}/{len(classes)}{each})"


def cell_table(runs: list[dict]) -> tuple[str, list[dict]]:
    cells = {}
    for r in runs:
        cells.setdefault((r["data"], r["rung"], r["method"]), []).append(r)
    rows, records = [], []
    for (data, rung, method), group in sorted(cells.items()):
        per_head = [st for r in group for st in _head_stages(r).values()]
        n = len(per_head)
        counts = {
            "focus": sum(("focus", 1) in st for st in per_head),
            "dilution": sum(("dilution", 1) in st for st in per_head),
            "lifting": sum(("asymmetry_lifting", 1) in st for st in per_head),
            "cycle 2": sum(any(c >= 2 for _, c in st) for st in per_head),
        }
        classes = [c for r in group for row in r["key_classes"] for c in row]
        diverged = sum(r["status"] != "success" for r in group)

        def cell(k, n=n):
            lo, hi = _wilson(k, n)
            return f"{k}/{n} [{lo:.2f}, {hi:.2f}]"

        rows.append(
            [data, rung, method, len(group)]
            + [cell(counts[k]) for k in ("focus", "dilution", "lifting", "cycle 2")]
            + [most_common(classes), diverged]
        )
        records.append(
            {"data": data, "rung": rung, "method": method, "heads": n, **counts}
        )
    header = [
        "data",
        "rung",
        "method",
        "seeds",
        "focus (heads, 95% CI)",
        "dilution",
        "lifting",
        "a second cycle",
        "key class at the end (most common)",
        "diverged runs",
    ]
    return _docs.table(header, rows), records


def figure(records: list[dict], cfg: Config, path: Path | None = None) -> None:
    from gflow.plotting import plt, save_figure

    datas = sorted({r["data"] for r in records})
    methods = [m for m in dc.METHODS if any(r["method"] == m for r in records)]
    rungs = [r for r in cfg.rungs if any(x["rung"] == r for x in records)]
    stages = ("focus", "dilution", "lifting", "cycle 2")
    fig, axes = plt.subplots(
        len(datas),
        len(methods),
        figsize=(3.2 * len(methods), 2.9 * len(datas)),
        squeeze=False,
        sharey=True,
    )
    for a, data in enumerate(datas):
        for b, method in enumerate(methods):
            ax = axes[a][b]
            grid = np.full((len(rungs), len(stages)), np.nan)
            for i, rung in enumerate(rungs):
                for r in records:
                    if (r["data"], r["rung"], r["method"]) == (data, rung, method):
                        grid[i] = [r[s] / r["heads"] for s in stages]
            ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
            ax.set_xticks(range(len(stages)), stages, rotation=30, fontsize=8)
            ax.set_yticks(range(len(rungs)), rungs, fontsize=8)
            ax.set_title(f"{data}, {method}", fontsize=9)
            for i in range(len(rungs)):
                for j in range(len(stages)):
                    if np.isfinite(grid[i, j]):
                        shade = "w" if grid[i, j] < 0.6 else "k"
                        ax.text(
                            j,
                            i,
                            f"{grid[i, j]:.1f}",
                            ha="center",
                            va="center",
                            fontsize=7,
                            color=shade,
                        )
    fig.suptitle(
        "Fraction of heads showing each stage, rung by rung (printed in each cell)",
        fontsize=10,
    )
    save_figure(fig, path or FIGURE)


def page(cfg: Config, path: Path | None = None, flags: str = "") -> str:
    """The generated block of ``cfg``'s runs; ``flags``: the command's own (for
    the block's command line), its figure drawn to ``path``."""
    path = path or FIGURE
    runs = _runs(cfg)
    folder = _path(cfg, "x", "0 x", "x", 0).parent.parent
    summary = json.loads((folder / "summary.json").read_text())
    table, records = cell_table(runs)
    figure(records, cfg, path)
    loads = [x[0] for x in summary["load_averages"]]
    sessions = summary.get("sessions", []) + [summary["runtime_s"]]
    c = summary["config"]
    example = (next(iter(summary["data"])), cfg.rungs[-1])  # the last rung
    lines = [
        f"`PYTHONPATH=$PWD python experiments/practical_ladder.py{flags}` "
        "(resumable; `--doc-only` rewrites this block from the cache). "
        f"Last session began {summary['began']}; {len(runs)} runs, "
        f"{sum(sessions):.0f} s of computing over {len(sessions)} session(s) on "
        f"{summary['machine']['cpus']} CPUs (jax {summary['machine']['jax']}), "
        f"1-minute load {min(loads):.2f}-{max(loads):.2f} (the machine was shared).",
        "",
        f"Settings: width {c['d_model']}, context {c['context']}, float32; init "
        f"ε = {c['init_scale']} (rung 8: 0.02); {c['steps']} steps per run; GD and "
        f"SGD at η = {c['lr']} (t = {c['lr'] * c['steps']:.0f}), GD on a fixed sample "
        f"of {c['gd_sample']} sequences, SGD on fresh batches of {c['batch']}; AdamW "
        f"peak {c['adamw_lr']}, warmup {c['warmup']:.0%}, cosine to 0, weight decay "
        f"{c['weight_decay']}; held-out observables on {c['obs_batch']} sequences. "
        f"Seeds {sorted({r['seed'] for r in runs})} (model init and data). Data: "
        + "; ".join(f"{k}: {v['description']}" for k, v in summary["data"].items())
        + ".",
        "",
        "Each cell counts heads (all layers and heads of all seeds) with the stage "
        "found by `detect_head_stages`; the bracket is the 95% Wilson interval of "
        "that fraction. *Key class*: the class of keys receiving the largest mass "
        "above its chance under uniform causal attention (by at least 0.1 of the "
        "row's mass; else *diffuse*), at the end of the run.",
        "",
        table,
        "",
        f"![fraction of heads per stage, rung by rung](figures/{path.name})",
    ]
    if example[0] in SHUFFLED:  # a control of this experiment: no command line
        return "\n".join(lines) + "\n"
    lines += [
        "",
        "Every cell runs from the command line too, as `gflow train` with the "
        "rung's flags (`train_argv`; its own draws of the samples and batches, so "
        f"another draw of the cell), e.g. rung {example[1]!r} under AdamW on "
        f"`{example[0]}`, seed {cfg.seeds[0]}:",
        "",
        "```bash",
        "gflow " + " ".join(train_argv(cfg, *example, "adamw", cfg.seeds[0])),
        "```",
    ]
    return "\n".join(lines) + "\n"


def control_comparison(runs: list[dict], controls: list[dict]) -> str:
    """Each shuffled corpus against its corpus: heads with a focus and with a
    dilution per method, pooled over the rungs 0-2 (no residual) and 3-8, with
    95% Wilson intervals."""
    _, real = cell_table(runs)
    _, ctrl = cell_table(controls)

    def pooled(records, data, method, rungs, key):
        rows = [
            r
            for r in records
            if r["data"] == data
            and r["method"] == method
            and r["rung"].split()[0] in rungs
        ]
        k, n = sum(r[key] for r in rows), sum(r["heads"] for r in rows)
        lo, hi = _wilson(k, n)
        return f"{k}/{n} [{lo:.2f}, {hi:.2f}]"

    lines = [
        "| corpus | method | rungs | focus: text | focus: shuffled | dilution: text "
        "| dilution: shuffled |",
        "|---|---|---|---|---|---|---|",
    ]
    for control, corpus in SHUFFLED.items():
        for method in dc.METHODS:
            for label, rungs in RUNG_GROUPS:
                cells = [
                    pooled(records, data, method, rungs, key)
                    for key in ("focus", "dilution")
                    for records, data in ((real, corpus), (ctrl, control))
                ]
                lines.append(
                    f"| {corpus} | {method} | {label} | " + " | ".join(cells) + " |"
                )
    return "\n".join(lines)


def beyond_control(
    runs: list[dict], controls: list[dict], pairs: dict[str, str]
) -> str:
    """Rung by rung, where each cell's fraction of heads with a focus or a dilution
    lies above (or below) its control's 95% Wilson interval: the figure's reading,
    as a table. ``pairs`` maps a control data set to the data set it controls."""
    _, real = cell_table(runs)
    _, ctrl = cell_table(controls)
    lines = [
        "| data | control | method | stage | rungs above the control's interval "
        "| rungs below it |",
        "|---|---|---|---|---|---|",
    ]
    for control, data in sorted(pairs.items(), key=lambda x: x[1]):
        for method in dc.METHODS:
            for stage in ("focus", "dilution"):
                above, below = [], []
                for r in real:
                    if (r["data"], r["method"]) != (data, method):
                        continue
                    match = [
                        c
                        for c in ctrl
                        if (c["data"], c["method"], c["rung"])
                        == (control, method, r["rung"])
                    ]
                    if not match or not r["heads"]:
                        continue
                    lo, hi = _wilson(match[0][stage], match[0]["heads"])
                    frac = r[stage] / r["heads"]
                    rung = int(r["rung"].split()[0])
                    if frac > hi:
                        above.append(rung)
                    elif frac < lo:
                        below.append(rung)
                if any((r["data"], r["method"]) == (data, method) for r in real):
                    lines.append(
                        f"| {data} | {control} | {method} | {stage} | "
                        f"{', '.join(map(str, sorted(above))) or 'none'} | "
                        f"{', '.join(map(str, sorted(below))) or 'none'} |"
                    )
    return "\n".join(lines)


def control_figure(
    runs: list[dict], controls: list[dict], pairs: dict[str, str], path: Path
) -> None:
    """Each cell against its control at a glance: per data set (a row of panels)
    and method (a column), the fraction of heads with a focus and with a dilution
    rung by rung, on the data (solid) and on its control (dashed, with its 95%
    Wilson band). ``pairs`` maps a control data set to the data set it
    controls; a cell is evidence of the cycle where its line leaves the control's
    band."""
    from gflow.plotting import plt, save_figure

    _, real = cell_table(runs)
    _, ctrl = cell_table(controls)
    pairs = {c: d for c, d in pairs.items() if any(r["data"] == d for r in real)}
    if not pairs:
        raise ValueError("no run of a data set that these controls control")
    methods = [m for m in dc.METHODS if any(r["method"] == m for r in real)]
    fig, axes = plt.subplots(
        len(pairs),
        len(methods),
        figsize=(3.3 * len(methods), 2.5 * len(pairs)),
        squeeze=False,
        sharex=True,
        sharey=True,
    )
    colours = {"focus": "tab:blue", "dilution": "tab:red"}
    for a, (control, data) in enumerate(sorted(pairs.items(), key=lambda x: x[1])):
        for b, method in enumerate(methods):
            ax = axes[a][b]
            for records, name, style in ((real, data, "-"), (ctrl, control, "--")):
                cells = sorted(
                    (r for r in records if (r["data"], r["method"]) == (name, method)),
                    key=lambda r: int(r["rung"].split()[0]),
                )
                x = [int(r["rung"].split()[0]) for r in cells]
                for stage, colour in colours.items():
                    frac = [r[stage] / r["heads"] for r in cells]
                    band = np.array([_wilson(r[stage], r["heads"]) for r in cells])
                    ax.plot(x, frac, style, color=colour, lw=1.4)
                    if len(cells) and style == "--":  # the control's band
                        ax.fill_between(
                            x, band[:, 0], band[:, 1], color=colour, alpha=0.12
                        )
            shared = sum(d == data for d in pairs.values()) > 1  # several controls
            ax.set_title(
                f"{data}, {method}" + (f"\nvs {control}" if shared else ""),
                fontsize=8,
            )
            ax.set_ylim(-0.03, 1.03)
            ax.set_xticks(range(len(RUNGS)))
            if a == len(pairs) - 1:
                ax.set_xlabel("rung", fontsize=8)
            if b == 0:
                ax.set_ylabel("fraction of heads", fontsize=8)
    handles = [plt.Line2D([], [], color=c, label=s) for s, c in colours.items()] + [
        plt.Line2D([], [], color="k", ls="-", label="data"),
        plt.Line2D([], [], color="k", ls="--", label="its control"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8)
    fig.suptitle(
        "Each cell against its control (band: the control's 95% Wilson interval "
        "over heads)",
        fontsize=10,
    )
    save_figure(fig, path)


def controls_page(cfg: Config) -> str:
    """The control block: the ladder's head counts on i.i.d. tokens."""
    runs = _runs(cfg)
    summary_path = _path(cfg, "x", "0 x", "x", 0).parent.parent / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    total = summary.get("runtime_s", 0.0) + sum(summary.get("sessions", []))
    loads = [x[0] for x in summary.get("load_averages", [[math.nan]])]
    seeds = sorted({r["seed"] for r in runs})
    table, _ = cell_table(runs)
    real = dataclasses.replace(
        cfg, datasets=("markov",), tag=cfg.tag.replace("-controls", "")
    )
    figure = ""
    if runs and any(r["data"] in MARKOV_CONTROLS.values() for r in _runs(real)):
        control_figure(_runs(real), runs, MARKOV_CONTROLS, VS_CONTROL_FIGURE)
        figure = (
            "\nRung by rung, the paper's chain against this control (the table "
            "lists the rungs where the chain's fraction lies outside the "
            "control's 95% interval):\n\n"
            "![each Markov cell against its two controls]"
            f"(figures/{VS_CONTROL_FIGURE.name})\n\n"
            + beyond_control(_runs(real), runs, MARKOV_CONTROLS)
            + "\n"
        )
    replayed = [r for r in _runs(real) + runs if "online" in r]
    if replayed:
        figure += (
            "\nThe online detector on the same runs (`OnlineStageDetector` with its "
            "default rules, read one save at a time, as a monitor observing every "
            f"save would: `online_events`; {len(replayed)} runs), against the "
            "offline detector: heads with a focus or a dilution in cycle 1, pooled "
            "over the rungs without a residual stream (0-2) and with one (3-8):\n\n"
            + online_table(replayed)
            + "\n"
        )
    return (
        "Generated by `PYTHONPATH=$PWD python experiments/practical_ladder.py "
        f"--controls` ({len(runs)} runs, seeds {seeds}; {total / 60:.1f} min of runs, "
        f"load average {min(loads):.2f}-{max(loads):.2f}). The same rungs, methods, "
        "steps and detector as the table above, on two controls. `markov-iid`: "
        "i.i.d. tokens from the paper's π (λ = 0): no context helps, so every head "
        "counted there as focusing or diluting is the detector firing on a move "
        "that carries no information. `markov-uniform`: the paper's chain with π "
        "uniform (λ = 0.5): the context helps, but no token is more frequent than "
        "another, so the paper's focus on the most frequent token has nothing to "
        "gather on (a head may still focus on the current or previous position; the "
        "key class says which).\n\n" + table + "\n" + figure
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--doc-only", action="store_true")
    p.add_argument(
        "--controls", action="store_true", help="the i.i.d. control data set only"
    )
    p.add_argument(
        "--text",
        action="store_true",
        help="TinyStories and WikiText cut by BPE in both whitespace modes only",
    )
    p.add_argument(
        "--text-controls",
        action="store_true",
        help="TinyStories cut by BPE in both modes with its pieces shuffled only",
    )
    p.add_argument("--rungs", help="comma-separated rung numbers (default: all)")
    p.add_argument("--seeds", help="comma-separated seeds (default: 0,1,2)")
    args = p.parse_args(argv)
    cfg = QUICK if args.quick else Config()
    if args.rungs:
        keep = {r.strip() for r in args.rungs.split(",")}
        cfg = dataclasses.replace(
            cfg, rungs=tuple(r for r in cfg.rungs if r.split()[0] in keep)
        )
    if args.seeds:
        cfg = dataclasses.replace(
            cfg, seeds=tuple(int(x) for x in args.seeds.split(","))
        )
    if args.controls:
        cfg = dataclasses.replace(
            cfg, datasets=tuple(MARKOV_CONTROLS), tag=cfg.tag + "-controls"
        )
        if not args.doc_only:
            run(cfg)
        _docs.publish(
            controls_page(cfg),
            quick=args.quick,
            doc=DOC,
            start=CONTROL[0],
            end=CONTROL[1],
        )
        return 0
    if args.text or args.text_controls:
        cfg = dataclasses.replace(
            cfg,
            datasets=tuple(SHUFFLED if args.text_controls else CORPORA),
            tag=cfg.tag + ("-text-controls" if args.text_controls else "-text"),
            vocab_size=TEXT_VOCAB,
            seeds=cfg.seeds if args.seeds or args.quick else (0, 1, 2),
            max_chars=20_000 if args.quick else 200_000,
        )
        if not args.doc_only:
            run(cfg)
        figure_path, flag, (start, end) = (
            (TEXT_CONTROL_FIGURE, " --text-controls", TEXT_CONTROL)
            if args.text_controls
            else (TEXT_FIGURE, " --text", TEXT)
        )
        text = page(cfg, figure_path, flag)
        if args.text_controls:
            real = dataclasses.replace(
                cfg, datasets=tuple(CORPORA), tag=cfg.tag.replace("-controls", "")
            )
            if _runs(real):
                figure_path = TEXT_VS_CONTROL_FIGURE
                control_figure(_runs(real), _runs(cfg), SHUFFLED, figure_path)
                text += (
                    "\nThe controls against their corpora (the block above this "
                    "one), heads pooled over the rungs without a residual stream "
                    "(0-2) and with one (3-8):\n\n"
                    + control_comparison(_runs(real), _runs(cfg))
                    + "\n\nRung by rung, each corpus against its shuffled "
                    "control (the figure; the table lists the rungs where the "
                    "corpus's fraction lies outside the control's 95% interval):"
                    "\n\n"
                    "![each text cell against its control]"
                    f"(figures/{figure_path.name})\n\n"
                    + beyond_control(_runs(real), _runs(cfg), SHUFFLED)
                    + "\n"
                )
        _docs.publish(text, quick=args.quick, doc=DOC, start=start, end=end)
        return 0
    if not args.doc_only:
        run(cfg)
    _docs.publish(page(cfg), quick=args.quick, doc=DOC, start=START, end=END)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
