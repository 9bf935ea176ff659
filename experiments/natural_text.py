"""Does focus → dilution → focus appear for mid-frequency tokens on natural text?

Question: on WikiText-2 and TinyStories (the local copies in ../shared/data), with a
word-level vocabulary, does the attention row of mid-frequency query tokens go
focus (onto the most frequent type) → dilution → focus again, as on the Markov model
(MODEL.md §6-7)? How do small-step GD (the flow's stand-in) and Adam differ?

Command (one corpus per process; the two can run side by side):
    PYTHONPATH=$PWD python experiments/natural_text.py run --corpus tinystories
    PYTHONPATH=$PWD python experiments/natural_text.py run --corpus wikitext
    PYTHONPATH=$PWD python experiments/natural_text.py report
Runtime: ~2 min per corpus on 2 shared cores at load 4-5 (float32).
Writes: experiments/results/natural_text/<corpus>/ (a ``gflow text`` run directory:
config, metrics, attention rows, heat maps) and, from ``report``, summary.json with
the per-query pattern numbers, printed as a table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "experiments" / "results" / "natural_text"
CORPORA = {
    "tinystories": DATA / "tinystories" / "sample.txt",
    "wikitext": DATA / "wikitext2" / "valid.txt",
}
#: Tokens the paper names (MODEL.md §7), tracked when they are in the vocabulary.
NAMED = {"tinystories": ("the", ",", "a"), "wikitext": ("the", ",")}


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    """One corpus' run; the rest of the settings are ``TextConfig`` defaults."""

    corpus: str = "tinystories"
    vocab_size: int = 200
    windows: int = 512
    context: int = 32
    d_model: int = 32
    init_scale: float = 1e-3
    lr: float = 0.5
    steps: int = 2000
    adam_lr: float = 2e-3
    adam_steps: int = 600
    num_saves: int = 100


def run(cfg: ExperimentConfig, *, key: int = 0):
    """Run GD and Adam on one corpus and write a ``gflow text`` run directory."""
    from gflow.plotting.text import plot_attention_rows, plot_text_summary
    from gflow.runs.text_files import write_text_run
    from gflow.runs.text_run import TextConfig, prepare, run_text

    tcfg = TextConfig(
        corpus=str(CORPORA[cfg.corpus]),
        vocab_size=cfg.vocab_size,
        windows=cfg.windows,
        context=cfg.context,
        d_model=cfg.d_model,
        init_scale=cfg.init_scale,
        lr=cfg.lr,
        steps=cfg.steps,
        opt_lr=cfg.adam_lr,
        opt_steps=cfg.adam_steps,
        num_saves=cfg.num_saves,
        seed=key,
    )
    probe = prepare(tcfg)
    named = tuple(t for t in NAMED[cfg.corpus] if t in probe.vocab.tokens)
    tcfg = dataclasses.replace(tcfg, track=named)
    data = prepare(tcfg)
    runs = run_text(tcfg, data)
    out = write_text_run(OUT / cfg.corpus, tcfg, data, runs)
    for name in runs:
        plot_attention_rows(out, name)
    plot_text_summary(out, list(runs))
    return out


def pattern(t, on_top, rows, q, top_id, *, margin=0.05):
    """Focus / dilution / refocus numbers of one query's attention row over time.

    focus: the peak of the mass on the most frequent type, above its start by
    ``margin``; dilution: after the peak it falls by ``margin`` or more; refocus:
    after the dilution minimum, the largest mass on any one other type (itself
    included) rises by ``margin`` or more.
    """
    i_peak = int(np.nanargmax(on_top))
    peak, start = float(on_top[i_peak]), float(on_top[0])
    after = on_top[i_peak:]
    i_min = i_peak + int(np.nanargmin(after))
    dip = float(on_top[i_min])
    others = rows.copy()
    others[:, top_id] = -np.inf
    best = others.max(axis=1)  # [n_t], largest mass on one other type
    i_best = i_min + int(np.nanargmax(best[i_min:]))
    return {
        "start_on_top": start,
        "peak_on_top": peak,
        "t_peak": float(t[i_peak]),
        "min_on_top_after_peak": dip,
        "t_min": float(t[i_min]),
        "end_on_top": float(on_top[-1]),
        "best_other_at_min": float(best[i_min]),
        "best_other_later": float(best[i_best]),
        "best_other_type": int(np.argmax(others[i_best])),
        "t_best_other": float(t[i_best]),
        "self_end": float(rows[-1, q]),
        "focus": peak >= start + margin,
        "dilution": peak >= start + margin and dip <= peak - margin,
        "refocus": bool(best[i_best] >= best[i_min] + margin and i_best > i_min),
    }


def report():
    """Pattern numbers for every corpus and run found under OUT."""
    from gflow.runs.files import read_json
    from gflow.runs.trajectory_files import load_trajectory

    summary = {}
    for corpus in CORPORA:
        run_dir = OUT / corpus
        if not (run_dir / "config.json").exists():
            continue
        cfg = read_json(run_dir / "config.json")
        vocab = [r["token"] for r in read_json(run_dir / "vocab.json")]
        summary[corpus] = {"unk_frequency": cfg["unk_frequency"], "runs": {}}
        for name in ("gd", "adam"):
            if not (run_dir / f"{name}.json").exists():
                continue
            traj = load_trajectory(run_dir, name=name)
            with np.load(run_dir / f"{name}_rows.npz") as f:
                t, rows, queries = f["t"], f["rows"], f["queries"]
            m = traj.metrics
            res = {
                "loss_start": float(m["loss"][0]),
                "loss_end": float(m["loss"][-1]),
                "t_end": float(t[-1]),
                "wall_s": read_json(run_dir / f"{name}.json")["stats"].get("wall_s"),
                "entropy_start": float(m["attention_entropy"][0]),
                "entropy_min": float(np.nanmin(m["attention_entropy"])),
                "entropy_end": float(m["attention_entropy"][-1]),
                "queries": {},
            }
            for j, q in enumerate(queries):
                p = pattern(t, m["query_on_top1"][:, j], rows[:, j], int(q), 0)
                p["best_other_type"] = vocab[p["best_other_type"]]
                res["queries"][vocab[int(q)]] = p
            summary[corpus]["runs"][name] = res
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    for corpus, s in summary.items():
        print(f"\n== {corpus} (unknown token: {s['unk_frequency']:.1%} of tokens)")
        for name, r in s["runs"].items():
            print(
                f"{name}: loss {r['loss_start']:.3f} -> {r['loss_end']:.3f} at "
                f"t={r['t_end']:g}; mean window entropy {r['entropy_start']:.3f} -> "
                f"min {r['entropy_min']:.3f} -> end {r['entropy_end']:.3f}"
            )
            for tok, p in r["queries"].items():
                print(
                    f"  {tok!r:>8}: on top {p['start_on_top']:.2f} -> peak "
                    f"{p['peak_on_top']:.2f} (t={p['t_peak']:g}) -> min "
                    f"{p['min_on_top_after_peak']:.2f} (t={p['t_min']:g}) -> end "
                    f"{p['end_on_top']:.2f}; best other {p['best_other_type']!r} "
                    f"{p['best_other_at_min']:.2f} -> {p['best_other_later']:.2f} "
                    f"(t={p['t_best_other']:g}); self at end {p['self_end']:.2f}; "
                    f"focus={p['focus']} dilution={p['dilution']} "
                    f"refocus={p['refocus']}"
                )
    return summary


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--corpus", choices=sorted(CORPORA), required=True)
    r.add_argument("--steps", type=int, default=ExperimentConfig.steps)
    r.add_argument("--adam-steps", type=int, default=ExperimentConfig.adam_steps)
    sub.add_parser("report")
    args = p.parse_args()
    if args.cmd == "report":
        report()
        return
    if not DATA.is_dir():
        raise SystemExit(f"shared data not found at {DATA}")
    cfg = ExperimentConfig(
        corpus=args.corpus, steps=args.steps, adam_steps=args.adam_steps
    )
    print(run(cfg))


if __name__ == "__main__":
    main()
