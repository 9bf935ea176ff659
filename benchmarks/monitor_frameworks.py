"""The stage monitor's overhead in each framework's loop (issue 32): JAX/Equinox,
PyTorch, Hugging Face transformers and Flax nnx, side by side in one process.

Question: what does observing every 10 steps add to a training step of a 2-layer
GPT-style model in each framework, measured the same way?

Command:  PYTHONPATH=$PWD python benchmarks/monitor_frameworks.py [--quick]
          [--write-docs]
Runtime:  about 6 min on 2 cores (``--quick``: about 1.5 min).
Writes:   benchmarks/results/monitor_frameworks.json and .md (the table of
          docs/monitor.md's "Cost in each framework"); ``--write-docs`` puts it there.

The model, the same in every framework: 2 layers, 4 heads, width 64, MLP 256 (GELU),
pre-LayerNorm, residual stream, learned positions, a vocabulary of 64, float32,
trained with AdamW (learning rate 1e-3) on the next-token loss of every position of
batches of 32 sequences of 65 tokens of a Markov chain with a Zipf stationary
distribution (a pool of 16 batches drawn beforehand, cycled). JAX: ``gflow.Transformer``
(values, MLP, LayerNorm, residual) with an ``eqx.filter_jit`` step and
``gflow.Monitor``; PyTorch: ``nn.MultiheadAttention`` blocks, ``TorchMonitor``
(hooks); Hugging Face: ``GPT2LMHeadModel`` built from a configuration (dropout 0,
the default sdpa attention), ``TorchMonitor`` (switched to eager for the probe);
Flax: ``nnx.MultiHeadAttention`` blocks, an ``nnx.jit`` step, ``FlaxMonitor``. The
probe: 32 sequences of 65 tokens, fixed. One more JAX row observes with the
edge-of-stability signal on (``update=``, ``AdamEdge``: three more probe-loss passes
in the observation's jitted call; the update is the step's last one, which costs
what the next one would).

Timing: per framework, the step and the observation run once untimed (compiling
what compiles); then one step alone and one observation alone are timed (medians of
30), and loops of ``steps`` steps without the monitor and with it at every = 10 are
interleaved over ``repeats`` repeats. The overhead is the median over the repeats of
with / without - 1 (each repeat's pair of loops runs back to back, so a change of
the machine's load moves both); the prediction is (observation / step) / 10.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"
V, S, B, M, H, FF = 64, 64, 32, 64, 4, 256
EVERY = 10
#: the data's key (``jax.random.key``) and every framework's initialisation seed
#: (one timed configuration: a cost, not a result that varies with the draw)
SEED = 0


def _data():
    import jax

    from gflow import MarkovChain

    pi = 1.0 / np.arange(1, V + 1)
    chain = MarkovChain.from_lambda(pi=pi / pi.sum(), lam=0.5)
    keys = jax.random.split(jax.random.key(SEED), 17)
    pool = [np.asarray(chain.sample(key=k, batch=B, length=S + 1)) for k in keys[:16]]
    probe = np.asarray(chain.sample(key=keys[16], batch=B, length=S + 1))
    return pool, probe


# -- each framework: (step(k) -> None, observe(monitor, k) -> None, Monitor class) --


def _jax(pool, *, edge: bool = False):
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import optax

    from gflow import Monitor, Transformer, sequence_loss
    from gflow.analysis import AdamEdge

    model = Transformer.init(
        d_vocab=V,
        d_model=M,
        n_layers=2,
        n_heads=H,
        key=jax.random.key(SEED),
        init_scale=0.02,
        d_ff=FF,
        value=True,
        layernorm=True,
        residual=True,
        max_len=S,
        dtype=jnp.float32,
    )
    opt = optax.adamw(1e-3)
    state = opt.init(eqx.filter(model, eqx.is_inexact_array))
    batches = [jnp.asarray(b) for b in pool]

    @eqx.filter_jit
    def train(model, state, tokens):
        loss, grads = eqx.filter_value_and_grad(sequence_loss)(model, tokens)
        updates, state = opt.update(grads, state, model)
        return eqx.apply_updates(model, updates), state, updates

    box = [model, state, None]

    def step(k):
        box[0], box[1], box[2] = train(box[0], box[1], batches[k % 16])

    def sync():
        jax.block_until_ready(box)

    def extra():  # the edge signal along the last update (the cost is the same)
        return {"update": box[2], "edge": AdamEdge(1e-3), "opt_state": box[1]}

    return step, sync, lambda: box[0], Monitor, (extra if edge else dict)


def _torch_gpt():
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(M), nn.LayerNorm(M)
            self.attn = nn.MultiheadAttention(M, H, batch_first=True)
            self.mlp = nn.Sequential(nn.Linear(M, FF), nn.GELU(), nn.Linear(FF, M))

        def forward(self, x, mask):
            y = self.ln1(x)
            x = x + self.attn(y, y, y, attn_mask=mask, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(V, M), nn.Embedding(S, M)
            self.blocks = nn.ModuleList([Block(), Block()])
            self.ln, self.out = nn.LayerNorm(M), nn.Linear(M, V)

        def forward(self, x):
            z = self.tok(x) + self.pos(torch.arange(x.shape[1]))
            mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
            for block in self.blocks:
                z = block(z, mask)
            return self.out(self.ln(z))

    return GPT()


def _torch_loop(model, pool, loss_of):
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = [torch.tensor(b, dtype=torch.long) for b in pool]

    def step(k):
        loss = loss_of(model, batches[k % 16])
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def _pytorch(pool):
    import torch

    from gflow.monitor.pytorch import TorchMonitor

    torch.manual_seed(SEED)
    model = _torch_gpt()

    def loss_of(model, batch):
        logits = model(batch[:, :-1])
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, V), batch[:, 1:].reshape(-1)
        )

    return (
        _torch_loop(model, pool, loss_of),
        lambda: None,
        lambda: model,
        TorchMonitor,
        dict,
    )


def _huggingface(pool):
    import torch
    import transformers

    from gflow.monitor.pytorch import TorchMonitor

    torch.manual_seed(SEED)
    config = transformers.GPT2Config(
        vocab_size=V,
        n_positions=S + 1,
        n_embd=M,
        n_layer=2,
        n_head=H,
        n_inner=FF,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = transformers.GPT2LMHeadModel(config)

    def loss_of(model, batch):
        return model(input_ids=batch, labels=batch).loss

    return (
        _torch_loop(model, pool, loss_of),
        lambda: None,
        lambda: model,
        TorchMonitor,
        dict,
    )


def _flax(pool):
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    from gflow.monitor.flax_nnx import FlaxMonitor

    class Block(nnx.Module):
        def __init__(self, rngs):
            self.ln1, self.ln2 = (
                nnx.LayerNorm(M, rngs=rngs),
                nnx.LayerNorm(M, rngs=rngs),
            )
            self.attn = nnx.MultiHeadAttention(H, M, decode=False, rngs=rngs)
            self.up, self.down = (
                nnx.Linear(M, FF, rngs=rngs),
                nnx.Linear(FF, M, rngs=rngs),
            )

        def __call__(self, x, mask):
            x = x + self.attn(self.ln1(x), mask=mask)
            return x + self.down(jax.nn.gelu(self.up(self.ln2(x))))

    class GPT(nnx.Module):
        def __init__(self, rngs):
            self.tok, self.pos = nnx.Embed(V, M, rngs=rngs), nnx.Embed(S, M, rngs=rngs)
            self.blocks = nnx.List([Block(rngs), Block(rngs)])
            self.ln, self.out = nnx.LayerNorm(M, rngs=rngs), nnx.Linear(M, V, rngs=rngs)

        def __call__(self, x):
            z = self.tok(x) + self.pos(jnp.arange(x.shape[-1]))
            mask = nnx.make_causal_mask(x)
            for block in self.blocks:
                z = block(z, mask)
            return self.out(self.ln(z))

    model = GPT(nnx.Rngs(SEED))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    batches = [jnp.asarray(b) for b in pool]

    @nnx.jit
    def train(model, optimizer, batch):
        def loss_fn(model):
            logits = model(batch[:, :-1])
            return optax.softmax_cross_entropy_with_integer_labels(
                logits, batch[:, 1:]
            ).mean()

        grads = nnx.grad(loss_fn)(model)
        optimizer.update(model, grads)

    def step(k):
        train(model, optimizer, batches[k % 16])

    def sync():
        jax.block_until_ready(nnx.state(model))

    return step, sync, lambda: model, FlaxMonitor, dict


FRAMEWORKS = {
    "JAX (Equinox)": _jax,
    "JAX (Equinox), with the edge signal": lambda pool: _jax(pool, edge=True),
    "PyTorch": _pytorch,
    "Hugging Face": _huggingface,
    "Flax nnx": _flax,
}


def _loop(step, sync, model, steps, monitor=None, probe=None, extra=dict) -> float:
    start = time.perf_counter()
    for k in range(steps):
        step(k)
        if monitor is not None and (k + 1) % monitor.every == 0:
            monitor.observe(k + 1, model(), probe, **extra())
    sync()
    if monitor is not None:
        monitor.close()
    return time.perf_counter() - start


def measure(name, make, pool, probe, *, steps, repeats, tmp) -> dict:
    step, sync, model, Monitor, extra = make(pool)
    n = [0]

    def monitor(every):
        n[0] += 1
        return Monitor(Path(tmp) / f"{name}-{n[0]}", every=every, verbose=False)

    _loop(step, sync, model, 3, monitor(1), probe, extra)  # compile, untimed
    one_step, one_obs = [], []
    m = monitor(1)
    for k in range(30):
        t0 = time.perf_counter()
        step(k)
        sync()
        one_step.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        m.observe(k, model(), probe, **extra())
        one_obs.append(time.perf_counter() - t0)
    m.close()
    base, timed, loads = [], [], []
    for _ in range(repeats):
        base.append(_loop(step, sync, model, steps))
        timed.append(_loop(step, sync, model, steps, monitor(EVERY), probe, extra))
        loads.append(os.getloadavg()[0])
    step_ms, obs_ms = 1e3 * np.median(one_step), 1e3 * np.median(one_obs)
    return {
        "framework": name,
        "step_ms": float(step_ms),
        "observation_ms": float(obs_ms),
        "loop_without_s": float(np.median(base)),
        "loop_with_s": float(np.median(timed)),
        # the median of the repeats' paired ratios: a drift of the machine's load
        # moves both loops of a repeat, not the ratio
        "overhead": float(np.median(np.asarray(timed) / np.asarray(base)) - 1),
        "overhead_per_repeat": (np.asarray(timed) / np.asarray(base) - 1).tolist(),
        "predicted": float(obs_ms / step_ms / EVERY),
        "load_after_repeats": loads,
    }


def run(*, quick: bool = False) -> dict:
    import jax
    import torch

    steps, repeats = (100, 2) if quick else (150, 6)
    pool, probe = _data()
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load_start = list(os.getloadavg())
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [
            measure(name, make, pool, probe, steps=steps, repeats=repeats, tmp=tmp)
            for name, make in FRAMEWORKS.items()
        ]
    record = {
        "started": started,
        "runtime_s": time.perf_counter() - t0,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "jax": jax.__version__,
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
        },
        "load_average_start": load_start,
        "steps": steps,
        "repeats": repeats,
        "every": EVERY,
        "seed": SEED,
        "rows": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "monitor_frameworks.json").write_text(json.dumps(record, indent=2))
    (RESULTS / "monitor_frameworks.md").write_text(table(record))
    return record


def _span(row: dict) -> str:
    """The range of a row's per-repeat overheads (older records have none)."""
    each = row.get("overhead_per_repeat")
    if not each:
        return "–"
    return f"{100 * min(each):+.1f}% to {100 * max(each):+.1f}%"


def seeds(record: dict) -> str:
    """The seed statement (records from before the seed was kept used 0, the only
    seed the script has had)."""
    seed = record.get("seed", 0)
    return (
        f"Seed {seed}, one configuration: the 16 training batches and the probe "
        f"from `jax.random.key({seed})`; the models from `jax.random.key({seed})` "
        f"(JAX), `torch.manual_seed({seed})` (PyTorch, Hugging Face) and "
        f"`nnx.Rngs({seed})` (Flax)."
    )


def table(record: dict) -> str:
    loads = [x for r in record["rows"] for x in r["load_after_repeats"]]
    lines = [
        f"Run {record['started']}, {record['machine']['cpus']} CPUs (jax "
        f"{record['machine']['jax']}, torch {record['machine']['torch']} on "
        f"{record['machine']['torch_threads']} threads), load average "
        f"{record['load_average_start'][0]:.2f} at the start and "
        f"{min(loads):.2f}-{max(loads):.2f} after the repeats; {record['steps']} "
        f"steps × {record['repeats']} interleaved repeats per framework, observing "
        f"every {record['every']}; {record['runtime_s']:.0f} s in all. "
        + seeds(record),
        "",
        "| framework | one step (ms) | one observation (ms) | loop without (s) "
        "| loop with (s) | overhead (repeats' range) "
        "| predicted (obs / step / every) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in record["rows"]:
        lines.append(
            f"| {r['framework']} | {r['step_ms']:.2f} | {r['observation_ms']:.2f} | "
            f"{r['loop_without_s']:.2f} | {r['loop_with_s']:.2f} | "
            f"{100 * r['overhead']:+.1f}% ({_span(r)}) | {100 * r['predicted']:.1f}% |"
        )
    return "\n".join(lines) + "\n"


DOC = Path(__file__).resolve().parent.parent / "docs" / "monitor.md"
START, END = "<!-- monitor_frameworks:start -->", "<!-- monitor_frameworks:end -->"


def write_docs() -> None:
    """Put results/monitor_frameworks.md into docs/monitor.md."""
    record = json.loads((RESULTS / "monitor_frameworks.json").read_text())
    text = (
        "`PYTHONPATH=$PWD python benchmarks/monitor_frameworks.py --write-docs` "
        "(the module docstring says what is measured). " + table(record)
    )
    doc = DOC.read_text()
    i, j = doc.index(START) + len(START), doc.index(END)
    DOC.write_text(doc[:i] + "\n" + text + doc[j:])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--write-docs", action="store_true")
    p.add_argument("--doc-only", action="store_true", help="do not measure")
    args = p.parse_args(argv)
    if not args.doc_only:
        print(table(run(quick=args.quick)))
    if args.write_docs or args.doc_only:
        write_docs()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
