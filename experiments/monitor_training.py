"""The stage monitor in a real training loop, and a learning-rate reaction (issue 15).

Question: a small ``gflow.Transformer`` trained on TinyStories word tokens with AdamW
and a warmup-cosine step size, ``gflow.Monitor`` watching it every 10 steps on a
fixed probe batch of held-out windows: does the monitor report condensation, the
heads' focus and their dilution as training goes? And does reacting to the first
reported dilution, by halving the rest of the step-size schedule, change the
held-out loss, over 3 seeds with the same initial model and the same minibatches in
both arms?

Command:
    PYTHONPATH=$PWD python experiments/monitor_training.py            # the full run
    PYTHONPATH=$PWD python experiments/monitor_training.py --quick    # a smoke run
    PYTHONPATH=$PWD python experiments/monitor_training.py --doc-only # redraw, rewrite

Runtime: the full run (3 seeds × 2 arms of 1500 steps) takes under 2 minutes on 2
cores (the measured time and load are in docs/monitor.md); ``--quick`` (16-type
vocabulary, context 32, 200 steps, 3 seeds × 2 arms) about 10-15 s.

Outputs: ``experiments/results/monitor_training/`` with ``results.json``
(configuration, machine, load averages, runtime and, per run, its events, the
offline stages on the same signals, the held-out loss every ``eval_every`` steps,
the step sizes taken, the multiplier in force and the clock),
``monitors/seed<s>_<arm>/`` (each run's monitor directory: config.json,
metrics.csv, events.jsonl), ``monitor.png`` (the main run's monitor figure, also
copied to docs/figures/monitor_training.png) and ``summary.md``; the full run
rewrites the block between the markers of docs/monitor.md. ``--quick`` writes to
``experiments/results/monitor_training_quick/`` and leaves the doc and the figure
alone. ``--out DIR`` writes elsewhere (and leaves the doc alone too). A run
replaces the ``monitors/`` folder of its output directory.

Setup:

- data: ``gflow.runs.train.prepare`` on the first ``max_chars`` characters of
  TinyStories (word tokens, the ``vocab_size`` most frequent types plus ``<unk>``)
  gives the vocabulary and the minibatch stream (random windows of ``seq_len`` + 1
  tokens, fresh every step). ``prepare`` holds nothing out (its ``eval_tokens`` are
  windows of the same tokens the stream draws from), so the held-out windows come
  from the ``held_chars`` characters that follow, encoded with the same vocabulary:
  ``eval_batch`` + ``probe_batch`` evenly spaced windows, of which ``probe_batch``
  evenly spread ones are the monitor's probe and the rest the held-out loss's.
  The probe is 128 windows: the monitor's observation costs about two train steps
  there, and its cost grows faster than the probe (measured: 256 windows cost
  about 8× what 64 do).
- model: ``gflow.runs.train.init_model`` (``layers`` × ``heads``, width
  ``d_model``, residual streams, pre-LayerNorm, learned positions, no value matrix
  or MLP), float32, init scale ``init_scale``, one initial model per seed shared by
  both arms. Chosen by measurement: the paper's model deepened (no residual,
  LayerNorm or positions; ``gflow train``'s default) stalls near the unigram loss
  on these data, its first-layer heads collapse onto ``<unk>`` while the loss
  condenses (before the focus rule opens), and the monitor saw no dilution in
  any of the tried runs; with residual, LayerNorm and positions every seed tried
  showed condensation, focus and dilution, and the held-out loss went well below
  the unigram loss.
- training: AdamW (β₁ = 0.9, weight decay ``weight_decay``) on the last-position
  loss (``gflow.sequence_loss``), step size η_k = m_k · s(k), s the warmup-cosine
  schedule (linear warmup over ``warmup`` of the steps to ``lr``, cosine to 0) and
  m_k the reaction's multiplier, a traced scalar argument of the one jitted train
  step (both arms and every seed run the same compiled program: ``train_traces``
  in results.json counts its traces). The batch of step k is drawn with key
  fold_in(key(seed), k): the same batches in both arms.
- clock: t = Σ η_k over the steps taken, the step sizes the train step returns
  (m_k included), passed to the monitor as ``t=``.
- monitor: ``gflow.Monitor(every=10)``, observing the model before step k at every
  k divisible by 10 (k = 0 included, and the end); default thresholds
  (``StageDetector()``), default top and tracked tokens (from the probe).
- reaction (arm ``halve``): at the first dilution event of any head, the multiplier
  drops from 1 to ``reaction`` (0.5) for the rest of the run, so the rest of the
  cosine is halved; the ``baseline`` arm keeps m = 1. Halving rather than holding:
  holding the step size at its current value would stop the cosine's decay and
  raise every later step above the schedule, a larger change made for no measured
  reason; halving keeps the schedule's shape, so the arms differ in one number.
  The two arms are identical up to the first dilution (same program, same batches,
  m = 1), so a seed without a dilution gives two identical runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import shutil
import sys
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments import _docs
from gflow import AdamW, Monitor, detect_head_stages, sequence_loss
from gflow.runs import read_json, write_json
from gflow.runs.train import TrainConfig, init_model, prepare
from gflow.text import TOKENIZERS, fixed_sample, load_corpus

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "data" / "tinystories" / "sample.txt"
OUT = ROOT / "experiments" / "results" / "monitor_training"
DOC = ROOT / "docs" / "monitor.md"
FIGURE = ROOT / "docs" / "figures" / "monitor_training.png"
START, END = "<!-- monitor_training:start -->", "<!-- monitor_training:end -->"
ARMS = ("baseline", "halve")


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything that defines the experiment (module docstring)."""

    vocab_size: int = 64
    max_chars: int = 400_000
    held_chars: int = 100_000
    seq_len: int = 64
    batch: int = 32
    eval_batch: int = 2048
    eval_every: int = 50
    probe_batch: int = 128
    layers: int = 2
    heads: int = 2
    d_model: int = 16
    residual: bool = True
    layernorm: bool = True
    positions: bool = True
    d_ff: int | None = None
    init_scale: float = 0.02
    lr: float = 0.01
    warmup: float = 0.1
    weight_decay: float = 0.01
    steps: int = 1500
    every: int = 10
    seeds: tuple[int, ...] = (0, 1, 2)
    main_seed: int = 0
    reaction: float = 0.5

    def train_config(self, seed: int) -> TrainConfig:
        return TrainConfig(
            data=str(CORPUS),
            vocab_size=self.vocab_size,
            max_chars=self.max_chars,
            layers=self.layers,
            heads=self.heads,
            d_model=self.d_model,
            residual=self.residual,
            layernorm=self.layernorm,
            max_len=self.seq_len if self.positions else None,
            d_ff=self.d_ff,
            init_scale=self.init_scale,
            optimizer="adamw",
            lr=self.lr,
            schedule="warmup-cosine",
            warmup=self.warmup,
            weight_decay=self.weight_decay,
            steps=self.steps,
            batch=self.batch,
            seq_len=self.seq_len,
            eval_batch=self.eval_batch,
            segments=1,
            seed=seed,
        )


#: the smoke path: the smallest settings found whose probe shows the paper's
#: stages under the information gate (two consecutive observations of the probe
#: loss 0.02 nats below the unigram loss): with 16 pieces, 16 probe windows and
#: 200 steps the gap only dipped below it once per run and no stage was reported
QUICK = Config(
    vocab_size=32,
    max_chars=20_000,
    held_chars=10_000,
    seq_len=32,
    batch=16,
    eval_batch=64,
    eval_every=10,
    probe_batch=64,
    steps=300,
)


# ------------------------------------------------------------------- the data


@dataclasses.dataclass(frozen=True)
class Data:
    d_vocab: int
    stream: eqx.Module  # key -> int32 [batch, seq_len + 1]
    held_out: np.ndarray  # int32 [eval_batch, seq_len + 1]
    probe: np.ndarray  # int32 [probe_batch, seq_len + 1]
    unigram_loss: float
    description: str


def load_data(cfg: Config) -> Data:
    """The stream from ``prepare`` (the first ``max_chars`` characters) and the
    held-out windows from the ``held_chars`` characters after them."""
    data = prepare(cfg.train_config(cfg.main_seed))
    text = load_corpus(CORPUS, max_chars=cfg.max_chars + cfg.held_chars)
    rest = text[cfg.max_chars :]
    rest = rest[rest.find("\n") + 1 :] if "\n" in rest else rest  # a whole line on
    held = data.vocab.encode(TOKENIZERS["word"](rest))
    n = cfg.eval_batch + cfg.probe_batch
    both = fixed_sample(held, length=cfg.seq_len, num=n)
    is_probe = np.zeros(n, bool)
    is_probe[np.linspace(0, n - 1, cfg.probe_batch).round().astype(int)] = True
    train_ids = np.asarray(data.stream.ids)
    top = data.vocab.tokens[int(np.argmax(data.vocab.counts))]
    return Data(
        data.d_vocab,
        data.stream,
        both[~is_probe],
        both[is_probe],
        data.references["unigram_loss"],
        f"{CORPUS.name}: {len(train_ids)} training word tokens (the first "
        f"{cfg.max_chars} characters), {len(held)} held-out ones (the next "
        f"{cfg.held_chars}); {data.d_vocab} types ({cfg.vocab_size} + <unk>), most "
        f"frequent {top!r}",
    )


# ------------------------------------------------------------------ the runs


class Trainer:
    """The one jitted train step (and held-out loss) shared by every run."""

    def __init__(self, cfg: Config):
        self.schedule = optax.warmup_cosine_decay_schedule(
            init_value=0.0,
            peak_value=cfg.lr,
            warmup_steps=max(1, round(cfg.warmup * cfg.steps)),
            decay_steps=cfg.steps,
        )
        # AdamW at learning rate 1 gives the direction -(adam + λ·w); the step below
        # scales it by η_k = m · s(k), which is optax.adamw at learning rate η_k.
        self.direction = AdamW(weight_decay=cfg.weight_decay).transform(1.0)
        self.traces = 0
        self.step = eqx.filter_jit(self._step)
        self.held_out_loss = eqx.filter_jit(sequence_loss)

    def _step(self, model, opt_state, stream, step, key, multiplier):
        self.traces += 1  # runs only while tracing
        tokens = stream(key)
        loss, grads = eqx.filter_value_and_grad(sequence_loss)(model, tokens)
        params = eqx.filter(model, eqx.is_inexact_array)
        updates, opt_state = self.direction.update(grads, opt_state, params)
        eta = (self.schedule(step) * multiplier).astype(jnp.float32)
        updates = jax.tree.map(lambda u: (eta * u).astype(u.dtype), updates)
        return eqx.apply_updates(model, updates), opt_state, eta, loss

    def init_state(self, model):
        return self.direction.init(eqx.filter(model, eqx.is_inexact_array))


def run_arm(cfg, data, trainer, model, seed, arm, out_dir, *, log=print) -> dict:
    """One run: train ``cfg.steps`` steps with the monitor on; its record."""
    state = {"multiplier": 1.0, "reaction": None}
    key = jax.random.key(seed)

    def react(event):
        if arm == "halve" and event.stage == "dilution" and state["reaction"] is None:
            state["multiplier"] = cfg.reaction
            state["reaction"] = {
                "step": event.step,
                "t": event.t_start,
                "layer": event.layer,
                "head": event.head,
                "multiplier": cfg.reaction,
            }

    opt_state = trainer.init_state(model)
    t, etas, multipliers = 0.0, [], []
    obs_steps, obs_t, eval_steps, held, train_loss = [], [], [], [], []
    start = time.perf_counter()
    monitor_s = 0.0
    with Monitor(out_dir, every=cfg.every, on_event=react, verbose=False) as monitor:
        for k in range(cfg.steps + 1):
            if k % cfg.every == 0:
                m0 = time.perf_counter()
                monitor.observe(k, model, data.probe, t=t)
                monitor_s += time.perf_counter() - m0
                obs_steps.append(k)
                obs_t.append(t)
            if k % cfg.eval_every == 0 or k == cfg.steps:
                eval_steps.append(k)
                held.append(float(trainer.held_out_loss(model, data.held_out)))
            if k == cfg.steps:
                break
            multipliers.append(state["multiplier"])
            model, opt_state, eta, loss = trainer.step(
                model,
                opt_state,
                data.stream,
                jnp.asarray(k, jnp.int32),
                jax.random.fold_in(key, k),
                jnp.asarray(state["multiplier"], jnp.float32),
            )
            eta = float(eta)
            etas.append(eta)
            t += eta
            train_loss.append(float(loss))
        events = [e.to_dict() for e in monitor.events]  # results.json's records
        offline = offline_stages(monitor, data.unigram_loss)
    wall = time.perf_counter() - start
    paper = [e for e in events if e["event"] in _LETTERS]  # the named moves apart
    names = " ".join(_event_label(e) for e in paper) or "no event"
    log(
        f"seed {seed} {arm}: held-out loss {held[-1]:.4f}, {names}"
        + (
            f"; reacted at step {state['reaction']['step']}"
            if state["reaction"]
            else ""
        )
        + f" ({wall:.1f} s, monitor {monitor_s:.1f} s)"
    )
    return {
        "seed": seed,
        "arm": arm,
        "monitor_dir": str(Path(out_dir).name),
        "events": events,
        "offline_stages": offline,
        "reaction": state["reaction"],
        "steps": obs_steps,
        "t": obs_t,
        "eval_steps": eval_steps,
        "held_out_loss": held,
        "train_loss": train_loss,
        "eta": etas,
        "multiplier": multipliers,
        "t_final": t,
        "wall_s": wall,
        "monitor_s": monitor_s,
    }


def offline_stages(monitor: Monitor, unigram_loss: float) -> list[dict]:
    """The offline rules (``detect_head_stages``, relative thresholds, the whole
    run) on the monitor's signals, with condensation ended where the probe loss has
    closed 95% of its gap to the unigram loss (as experiments/deep_cycle.py)."""
    traj = monitor.trajectory()
    metrics = dict(traj.metrics)
    metrics["unigram_gap"] = np.asarray(metrics["loss"]) - unigram_loss
    traj = dataclasses.replace(traj, metrics=metrics)
    return [st.to_dict() for st in detect_head_stages(traj)]


def same_until_reaction(base: dict, halve: dict) -> bool:
    """Whether the two arms took the same steps (bit for bit) up to the reaction:
    the same step sizes and training losses before it, the same held-out losses
    and events at the observations up to it (the whole run when it never came)."""
    stop = halve["reaction"]["step"] if halve["reaction"] else len(base["eta"])
    seen = [i for i, k in enumerate(base["eval_steps"]) if k <= stop]
    return (
        base["eta"][:stop] == halve["eta"][:stop]
        and base["train_loss"][:stop] == halve["train_loss"][:stop]
        and [base["held_out_loss"][i] for i in seen]
        == [halve["held_out_loss"][i] for i in seen]
        and [e for e in base["events"] if e["step"] <= stop]
        == [e for e in halve["events"] if e["step"] <= stop]
    )


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "devices": [str(d) for d in jax.devices()],
        "jax": jax.__version__,
    }


def run(cfg: Config, out: Path, *, log=print) -> dict:
    """Every (seed, arm); the results as one dict. The monitor directories go to
    ``out/monitors`` (emptied first)."""
    start = time.perf_counter()
    began = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    loads = [list(os.getloadavg())]
    data = load_data(cfg)
    trainer = Trainer(cfg)
    monitors = out / "monitors"
    if monitors.exists():
        shutil.rmtree(monitors)
    runs = []
    for seed in cfg.seeds:
        model = init_model(cfg.train_config(seed), data.d_vocab)
        pair = {}
        for arm in ARMS:
            name = f"seed{seed}_{arm}"
            pair[arm] = run_arm(
                cfg, data, trainer, model, seed, arm, monitors / name, log=log
            )
            loads.append(list(os.getloadavg()))
        pair["halve"]["same_as_baseline_until_reaction"] = same_until_reaction(
            pair["baseline"], pair["halve"]
        )
        runs += [pair[arm] for arm in ARMS]
    return {
        "config": dataclasses.asdict(cfg),
        "data": {
            "description": data.description,
            "d_vocab": data.d_vocab,
            "unigram_loss": data.unigram_loss,
        },
        "runs": runs,
        "train_traces": trainer.traces,
        "began": began,
        "runtime_s": time.perf_counter() - start,
        "load_averages": loads,
        "machine": machine(),
    }


# ---------------------------------------------------------------- the tables

_LETTERS = {
    "condensation": "C",
    "focus": "F",
    "dilution": "D",
    "asymmetry_lifting": "A",
}


def _event_label(e) -> str:
    where = "" if e["layer"] < 0 else f"{e['layer']}{e['head']}"
    cyc = f"/{e['cycle']}" if e["cycle"] > 1 else ""
    return f"{_LETTERS[e['event']]}{where}{cyc}@{e['step']}"


def second_half_mean(r: dict) -> float:
    """Mean held-out loss over its evaluations in the second half of the steps."""
    steps = np.asarray(r["eval_steps"])
    return float(np.mean(np.asarray(r["held_out_loss"])[steps >= steps[-1] / 2]))


def _run(results, seed, arm):
    return next(r for r in results["runs"] if r["seed"] == seed and r["arm"] == arm)


def _offline_match(e: dict, stages: list[dict]) -> str:
    """The offline stage (``Monitor.offline_stages``, the whole run's signals) of the
    same name, layer, head and cycle as the online event, as [t_start, t_end]."""
    for st in stages:
        same = (st["stage"], st["layer"], st["head"], st["cycle"])
        if same == (e["event"], e["layer"], e["head"], e["cycle"]):
            return f"[{st['t_start']:.3g}, {st['t_end']:.3g}]"
    return "none"


def event_table(r: dict) -> str:
    rows = [
        "| event | layer | head | cycle | step | t (reported) | t_onset | signal | "
        "reference → value | offline stage [t_start, t_end] |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in r["events"]:
        where = ("all", "all") if e["layer"] < 0 else (e["layer"], e["head"])
        rows.append(
            f"| {e['event'].replace('_', ' ')} | {where[0]} | {where[1]} | "
            f"{e['cycle']} | {e['step']} | {e['t']:.4g} | {e['t_onset']:.4g} | "
            f"{e['signal']} | {e['reference']:.4g} → {e['value']:.4g} | "
            f"{_offline_match(e, r['offline_stages'])} |"
        )
    return "\n".join(rows) + "\n"


def reaction_rows(results: dict) -> list[dict]:
    """Per seed: the first dilution, and both arms' end and second-half losses."""
    out = []
    for seed in results["config"]["seeds"]:
        base, halve = _run(results, seed, "baseline"), _run(results, seed, "halve")
        out.append(
            {
                "seed": seed,
                "reaction": halve["reaction"],
                "end": (base["held_out_loss"][-1], halve["held_out_loss"][-1]),
                "half": (second_half_mean(base), second_half_mean(halve)),
            }
        )
    return out


def _pm(xs) -> str:
    xs = np.asarray(xs, float)
    sd = float(np.std(xs, ddof=1)) if len(xs) > 1 else float("nan")
    return f"{np.mean(xs):.4f} ± {sd:.4f}"


def verdict(results: dict) -> str:
    """Helps / hurts / within seed noise, from the per-seed paired differences d
    (halve − baseline, same initial model and batches) against two yardsticks:

    - run-to-run noise, 2 × the baseline's seed-to-seed sd: *helps* (*hurts*) when
      the mean of d is below −2 sd (above 2 sd) and no seed's d goes the other way
      by more than 2 sd; otherwise *within seed noise*;
    - the spread of the effect itself: whether every d has the same sign and their
      mean exceeds twice its standard error (sd(d) / √seeds).
    """
    rows = reaction_rows(results)
    reacted = [r for r in rows if r["reaction"] is not None]
    if not reacted:
        return (
            "No seed reported a dilution, so the reaction never fired: both arms are "
            "the same runs and the experiment says nothing about it."
        )
    parts = []
    for label, key in (("At the end", "end"), ("Over the second half", "half")):
        diff = np.array([r[key][1] - r[key][0] for r in rows])
        noise = 2 * float(np.std([r[key][0] for r in rows], ddof=1))
        mean = float(diff.mean())
        se = float(np.std(diff, ddof=1) / np.sqrt(len(diff)))
        against = bool(np.any(np.sign(mean) * diff < -noise))
        word = "within seed noise"
        if abs(mean) > noise and not against:
            word = "helps" if mean < 0 else "hurts"
        consistent = bool(np.all(diff > 0) or np.all(diff < 0)) and abs(mean) > 2 * se
        parts.append(
            f"{label}: mean difference {mean:+.4f} nats (per seed "
            f"{', '.join(f'{d:+.4f}' for d in diff)}; lower with the reaction in "
            f"{int(np.sum(diff < 0))}/{len(diff)} seeds); against the run-to-run "
            f"noise (2 × the baseline's seed-to-seed sd = {noise:.4f}) the reaction "
            f"**{word}**; against the spread of its own effect over the seeds (2 × "
            f"standard error = {2 * se:.4f}, every seed the same sign: "
            f"{'yes' if np.all(diff > 0) or np.all(diff < 0) else 'no'}) the "
            f"effect is {'' if consistent else 'not '}established"
        )
    return (
        f"**Verdict.** The reaction fired in {len(reacted)}/{len(rows)} seeds. "
        "Held-out loss, halve − baseline (negative: the reaction lowers the loss). "
        + ". ".join(parts)
        + ". Three seeds are few: a shared sign happens by chance one time in four."
    )


def reaction_table(results: dict) -> str:
    rows = [
        "| seed | first dilution (reaction) | held-out loss at the end: baseline | "
        "halve | halve − baseline | mean over the second half: baseline | halve | "
        "halve − baseline |",
        "|---|---|---|---|---|---|---|---|",
    ]
    table = reaction_rows(results)
    for r in table:
        x = r["reaction"]
        when = "none"
        if x is not None:
            when = f"step {x['step']}, t = {x['t']:.3g} (L{x['layer']}H{x['head']})"
        rows.append(
            f"| {r['seed']} | {when} | {r['end'][0]:.4f} | {r['end'][1]:.4f} | "
            f"{r['end'][1] - r['end'][0]:+.4f} | {r['half'][0]:.4f} | "
            f"{r['half'][1]:.4f} | {r['half'][1] - r['half'][0]:+.4f} |"
        )

    def col(key, i):
        return [r[key][i] for r in table]

    def dif(key):
        return [r[key][1] - r[key][0] for r in table]

    rows.append(
        f"| mean ± sd | | {_pm(col('end', 0))} | {_pm(col('end', 1))} | "
        f"{_pm(dif('end'))} | {_pm(col('half', 0))} | {_pm(col('half', 1))} | "
        f"{_pm(dif('half'))} |"
    )
    return "\n".join(rows) + "\n"


def summary(results: dict, figure: str | None, command: str, where: str) -> str:
    cfg = results["config"]
    loads = np.asarray(results["load_averages"])
    main = _run(results, cfg["main_seed"], "baseline")
    counts = {
        name: sum(e["event"] == name for e in main["events"]) for name in _LETTERS
    }
    matched = sum(
        _offline_match(e, main["offline_stages"]) != "none" for e in main["events"]
    )
    walls = [r["wall_s"] for r in results["runs"]]
    mon = [r["monitor_s"] for r in results["runs"]]
    fig = f"![the main run's monitor]({figure})\n\n" if figure else ""
    halves = [r for r in results["runs"] if r["arm"] == "halve"]
    same = sum(r["same_as_baseline_until_reaction"] for r in halves)
    return (
        f"(generated by `{command}`; results in `{where}`)\n\n"
        f"Run began {results['began']}; total runtime "
        f"**{results['runtime_s']:.0f} s** ({len(results['runs'])} runs, "
        f"compilation and data included; per run {min(walls):.1f}–{max(walls):.1f} s, "
        f"of which the monitor's observations {min(mon):.1f}–{max(mon):.1f} s) on "
        f"{results['machine']['cpus']} CPUs ({results['machine']['platform']}, jax "
        f"{results['machine']['jax']}); 1-minute load average "
        f"{loads[:, 0].min():.2f}–{loads[:, 0].max():.2f} over the run (sampled "
        f"before and after each run). The train step was traced "
        f"{results['train_traces']} time(s) for all the runs.\n\n"
        f"Settings: {results['data']['description']}; unigram loss "
        f"{results['data']['unigram_loss']:.3f}. `gflow.Transformer` "
        f"{cfg['layers']} layers × {cfg['heads']} heads, width {cfg['d_model']}, "
        f"init scale {cfg['init_scale']}, float32; AdamW (β₁ 0.9, weight decay "
        f"{cfg['weight_decay']}) on the last-position loss, fresh batches of "
        f"{cfg['batch']} windows of {cfg['seq_len']} + 1 tokens, {cfg['steps']} "
        f"steps, warmup-cosine to peak {cfg['lr']} (warmup {cfg['warmup']:.0%}); "
        f"clock t = Σ η_k of the steps taken (t = {main['t_final']:.4g} at the end "
        f"of the main run). Monitor every {cfg['every']} steps on "
        f"{cfg['probe_batch']} held-out windows, default thresholds; held-out loss "
        f"on {cfg['eval_batch']} other held-out windows every {cfg['eval_every']} "
        "steps. Seeds "
        f"{list(cfg['seeds'])}; main run: seed {cfg['main_seed']}, baseline arm.\n\n"
        f"{fig}"
        f"### Events of the main run (seed {cfg['main_seed']}, no reaction)\n\n"
        f"{counts['condensation']} condensation, {counts['focus']} focus, "
        f"{counts['dilution']} dilution, {counts['asymmetry_lifting']} asymmetry "
        f"lifting event(s); held-out loss {main['held_out_loss'][0]:.3f} → "
        f"{main['held_out_loss'][-1]:.3f} (minimum "
        f"{min(main['held_out_loss']):.3f}). {matched}/{len(main['events'])} "
        "online events have an offline stage of the same name, head and cycle "
        "(`detect_head_stages`: the offline rules, with their relative thresholds, "
        "on the same signals after the run, condensation ending where the probe "
        "loss has closed 95% of its gap to the unigram loss); the last column "
        "gives it."
        "\n\n"
        f"{event_table(main)}\n"
        "### The reaction: halve the rest of the schedule at the first dilution\n\n"
        f"Arm `halve` multiplies the step size by {cfg['reaction']} from the first "
        "reported dilution of any head on (the train step's traced multiplier); arm "
        "`baseline` does not. Same initial model and batches per seed: in "
        f"{same}/{len(halves)} seeds the two arms took bit-identical steps up to "
        "the reaction (same step sizes, training and held-out losses, events).\n\n"
        f"{reaction_table(results)}\n"
        f"{verdict(results)}\n"
    )


def write_doc(text: str, doc: Path) -> None:
    """Replace the generated block of the doc, and nothing else."""
    _docs.replace_block(doc, START, END, text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a small smoke run, no doc")
    p.add_argument("--out", type=Path, default=None, help="results folder")
    p.add_argument(
        "--doc-only",
        action="store_true",
        help="rewrite the doc from the saved results.json",
    )
    args = p.parse_args(argv)
    if not CORPUS.exists():
        print(f"skipping: the TinyStories sample {CORPUS} is absent", file=sys.stderr)
        return 0
    cfg = QUICK if args.quick else Config()
    out = args.out or (OUT.with_name(OUT.name + "_quick") if args.quick else OUT)
    out.mkdir(parents=True, exist_ok=True)
    if args.doc_only:
        results = read_json(out / "results.json")
    else:
        results = run(cfg, out)
        write_json(out / "results.json", results)
    main_dir = out / "monitors" / f"seed{cfg.main_seed}_baseline"
    if main_dir.is_dir():  # --doc-only redraws the figure from the saved monitor
        from gflow.plotting import plot_monitor

        plot_monitor(main_dir, out / "monitor.png")
    doc = not args.quick and args.out is None
    if doc:
        FIGURE.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / "monitor.png", FIGURE)
    figure = os.path.relpath(FIGURE, DOC.parent) if doc else "monitor.png"
    command = "PYTHONPATH=$PWD python experiments/monitor_training.py"
    command += " --quick" if args.quick else ""
    where = out.resolve()
    where = where.relative_to(ROOT) if where.is_relative_to(ROOT) else where
    text = summary(results, figure, command, f"{where}/")
    (out / "summary.md").write_text(text)
    if doc:
        write_doc(text, DOC)
    print(text)
    print(f"runtime {results['runtime_s']:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
