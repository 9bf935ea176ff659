"""Natural text as the paper ran it: do the paper's rows go dilute → focus on
whitespace → dilute → focus on itself, under the flow and under AdamW? (issue 16)

Question: on WikiText-2 (valid) and TinyStories (the local copies in ../shared/data),
with a BPE vocabulary whose whitespace piece ▁ stands alone, which of the four
phases does each of the paper's rows show ("continue" on WikiText; "the", ",", "a",
"full", "been" on TinyStories; ▁ itself), when, and over seeds, under

- the flow proxy: full-batch GD at a small step on the fixed sample, its step
  checked against 2/λ_max along the run (``--sharpness-checks``) and against the
  gradient flow itself (seed 0, float64, the stabilised RKC2 solver: the flow is
  stiff right after the escape), and
- AdamW with warmup-cosine on fresh minibatches over the whole corpus, the
  paper's practical setting (a rare row such as "continue" never ends a window of
  the 512-window sample, so only minibatches over the corpus train its query)?

Each claim gets a verdict: reproduced (every seed shows the whole sequence),
partly (some of it, in order), not.

Command:  PYTHONPATH=$PWD python experiments/natural_text.py [--write-docs] [--quick]
Runtime:  about 25 min on 2 cores (GD and the flow are most of it);
          --quick (1 seed, shorter runs) about 3 min, for a smoke test.
Outputs:  experiments/results/natural_text/<corpus>/ and <corpus>_flow/ (``gflow
          text`` run directories: figures, rows, row_phases.json, stages), and
          findings.md; ``--write-docs`` rewrites the block between the
          ``natural_text`` markers of docs/natural_text.md. Interrupted, it
          resumes: every finished run is read back.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import time
from pathlib import Path

import numpy as np

from experiments import _docs

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "experiments" / "results" / "natural_text"
DOC = ROOT / "docs" / "natural_text.md"
START, END = "<!-- natural_text:start -->", "<!-- natural_text:end -->"
CORPORA = {
    "wikitext": DATA / "wikitext2" / "valid.txt",
    "tinystories": DATA / "tinystories" / "sample.txt",
}
#: The paper's rows on each corpus (MODEL.md §7), and the whitespace piece.
ROWS = {
    "wikitext": ("▁", "continue"),
    "tinystories": ("▁", "the", ",", "a", "full", "been"),
}
#: The paper's sequence for a row: dilute, focus on whitespace, dilute, focus on
#: itself (a dilution from any key).
TARGET = (("dilution", None), ("focus", "▁"), ("dilution", None), ("focus", "self"))


@dataclasses.dataclass(frozen=True)
class Settings:
    """The experiment's settings; the rest are ``TextConfig`` defaults."""

    vocab_size: int = 4000  # "continue" is a piece of WikiText valid from ~4000
    windows: int = 256
    lr: float = 0.0125  # λ_max peaks near 55 right after the escape (t ≈ 40-110)
    horizon: float = 400.0
    seeds: int = 3
    adamw_lr: float = 3e-3
    adamw_steps: int = 3000
    batch: int = 64
    num_saves: int = 200
    sharpness_checks: int = 16
    flow_horizon: float = 200.0  # seed 0's flow, the proxy's check
    flow_rtol: float = 1e-4

    def flow_config(self, cfg):
        """Seed 0's gradient flow itself (RKC2, float64) to ``flow_horizon``."""
        return dataclasses.replace(
            cfg,
            method="flow",
            solver="rkc2",
            lr=1.0,
            steps=round(self.flow_horizon),
            rtol=self.flow_rtol,
            atol=self.flow_rtol * 1e-2,
            seeds=1,
            opt_steps=0,
            sharpness_checks=0,
            num_saves=round(self.flow_horizon),
            x64=True,
        )

    def text_config(self, corpus: str):
        """The ``gflow text`` configuration of one corpus."""
        from gflow.runs.text import TextConfig

        return TextConfig(
            corpus=str(CORPORA[corpus]),
            tokenizer="bpe",
            whitespace="isolated",
            vocab_size=self.vocab_size,
            windows=self.windows,
            method="gd",
            lr=self.lr,
            steps=round(self.horizon / self.lr),
            optimizer="adamw",
            opt_lr=self.adamw_lr,
            opt_steps=self.adamw_steps,
            batch=self.batch,
            schedule="warmup-cosine",
            seeds=self.seeds,
            track=tuple(ROWS[corpus]),
            num_queries=0,
            num_saves=self.num_saves,
            sharpness_checks=self.sharpness_checks,
        )


#: (read back?, wall seconds) of every run of this invocation, for the findings.
RUNS: list[tuple[bool, float]] = []

QUICK = Settings(
    lr=0.05, horizon=200.0, seeds=1, adamw_steps=600, num_saves=50, flow_horizon=20.0
)


def run_dir(cfg, out: Path) -> Path:
    """Run (or resume) one ``gflow text`` configuration into ``out``."""
    from gflow.plotting import plot_attention_rows, plot_text_summary
    from gflow.runs.text import (
        RunPieces,
        prepare,
        run_text,
        write_text_run,
        write_text_start,
    )

    if (out / "tokenizer.json").exists():  # resume with the run's own pieces
        cfg = dataclasses.replace(cfg, tokenizer_file=str(out / "tokenizer.json"))
    data = prepare(cfg)
    write_text_start(out, cfg, data)
    last = data.sample[:, -2]  # the query of each training window
    ends = {data.vocab.tokens[q]: int((last == q).sum()) for q in data.queries}
    (out / "sample_ends.json").write_text(json.dumps(ends, ensure_ascii=False) + "\n")
    start = time.perf_counter()

    def report(name, traj, resumed):
        how = "read back" if resumed else f"{traj.stats['wall_s']:.1f} s"
        print(f"  {out.name}/{name}: {traj.status} ({how})", flush=True)
        RUNS.append((resumed, traj.stats["wall_s"]))

    runs = run_text(cfg, data, pieces=RunPieces(out, cfg, data), report=report)
    write_text_run(out, runs)
    for name in cfg.run_names(cfg.seed):  # the first seed's figures
        plot_attention_rows(out, name)
    plot_text_summary(out, list(cfg.run_names(cfg.seed)))
    print(f"  {out.name}: {time.perf_counter() - start:.1f} s", flush=True)
    return out


# -- reading the runs ----------------------------------------------------------------


def _matches(move: dict, want: tuple) -> bool:
    phase, key = want
    if move["phase"] != phase:
        return False
    return key is None or (move["self"] if key == "self" else move["key"] == key)


def in_order(moves: list[dict], target=TARGET) -> int:
    """How many steps of ``target`` the moves show in order (the longest common
    subsequence of the two)."""
    n, m = len(moves), len(target)
    best = np.zeros((n + 1, m + 1), int)
    for i in range(n):
        for j in range(m):
            best[i + 1, j + 1] = (
                best[i, j] + 1
                if _matches(moves[i], target[j])
                else max(best[i, j + 1], best[i + 1, j])
            )
    return int(best[n, m])


def short(moves: list[dict]) -> str:
    """Moves as "F▁ D▁ Fself": F focus on, D dilution from, the key after."""
    if not moves:
        return "–"
    return " ".join(
        ("F" if m["phase"] == "focus" else "D") + ("self" if m["self"] else m["key"])
        for m in moves
    )


def verdict(counts: list[int], full: int = len(TARGET)) -> str:
    if counts and all(c == full for c in counts):
        return "reproduced"
    return "partly" if max(counts, default=0) >= 2 else "not"


def proxy_until(info: dict) -> float | None:
    """The last checked time before GD's η·λ_max first exceeds 1 (None: never)."""
    check = info.get("stability")
    if not check:
        return None
    t, ratio = np.asarray(check["t"]), np.asarray(check["stability_ratio"])
    over = np.flatnonzero(ratio > 0.5)  # η·λ_max/2 > 1/2
    if over.size == 0:
        return None
    return float(t[over[0] - 1]) if over[0] > 0 else 0.0


def _time(values: list[float]) -> str:
    if not values:
        return "–"
    x = np.asarray(values)
    return f"{x.mean():.4g}" + (f" ± {x.std(ddof=1):.2g}" if x.size > 1 else "")


def summarise(corpus: str, root: Path = OUT) -> dict:
    """Per row and arm: each seed's moves, how much of the paper's sequence they
    show, the times of the first seed's moves over the seeds that share them; the
    flow proxy's validity; its check against the flow; the stages over seeds."""
    from gflow.runs import read_json

    out = root / corpus
    cfg = read_json(out / "config.json")["config"]
    phases = read_json(out / "row_phases.json")
    ends = read_json(out / "sample_ends.json")
    seeds = list(range(cfg["seed"], cfg["seed"] + cfg["seeds"]))
    names = {"flow proxy": "gd", "AdamW": "adamw"}
    suffix = (lambda s: f"_s{s}") if cfg["seeds"] > 1 else (lambda s: "")
    rows = {}
    for row in ROWS[corpus]:
        for arm, base in names.items():
            per_seed = [phases.get(base + suffix(s), {}).get(row) for s in seeds]
            if any(p is None for p in per_seed):
                continue  # not tracked (not in the vocabulary)
            patterns = [short(p) for p in per_seed]
            first = per_seed[0]
            same = [p for p in per_seed if short(p) == patterns[0]]
            times = [_time([p[i]["t_start"] for p in same]) for i in range(len(first))]
            counts = [in_order(p) for p in per_seed]
            rows[f"{row}|{arm}"] = {
                "row": row,
                "ends": ends.get(row),
                "arm": arm,
                "patterns": patterns,
                "shared": len(same),
                "times": times,
                "in_order": counts,
                "verdict": verdict(counts) if row != "▁" else "no claim",
            }
    proxy = {}
    for s in seeds:
        info = read_json(out / f"gd{suffix(s)}.json")["info"]
        check = info.get("stability", {})
        proxy[s] = {
            "until": proxy_until(info),
            "max_ratio": check.get("max_stability_ratio"),
        }
    flow = root / f"{corpus}_flow"
    flowcheck = None
    if (flow / "row_phases.json").exists():
        flowcheck = flow_check(out, flow, "gd" + suffix(seeds[0]))
        for row, moves in flowcheck["flow_moves"].items():
            if row in ROWS[corpus]:
                rows[f"{row}|flow"] = {
                    "row": row,
                    "ends": ends.get(row),
                    "arm": "flow (seed 0)",
                    "patterns": [short(moves)],
                    "shared": 1,
                    "times": [f"{m['t_start']:.4g}" for m in moves],
                    "in_order": [in_order(moves)],
                    "verdict": (
                        verdict([in_order(moves)]) if row != "▁" else "no claim"
                    ),
                }
    stages = read_json(out / "stages_summary.json") if cfg["seeds"] > 1 else None
    return {
        "corpus": corpus,
        "seeds": seeds,
        "d": read_json(out / "config.json")["d_vocab"],
        "rows": rows,
        "proxy": proxy,
        "flow": flowcheck,
        "stages": stages,
        "lr": cfg["lr"],
    }


def flow_check(out: Path, flow: Path, name: str) -> dict:
    """Seed 0's flow proxy against seed 0's gradient flow, both read up to the
    flow's end with the same rules: which rows move in either run (a row that moves
    in neither agrees trivially, so it is counted apart), how many of those make
    the same moves, the largest difference of their start times, the flow's own
    moves and its cost."""
    from gflow.runs import read_json
    from gflow.text import row_phases

    tokens = [r["token"] for r in read_json(out / "vocab.json")]

    def moves(run_dir, run, t_end):
        with np.load(run_dir / f"{run}_rows.npz") as f:
            t, rows, queries = f["t"], f["rows"], f["queries"]
        keep = t <= t_end * (1 + 1e-9)
        return {
            tokens[q]: row_phases(t[keep], rows[keep, j], tokens, int(q))
            for j, q in enumerate(queries)
        }

    with np.load(flow / "flow_rows.npz") as f:
        t_end = float(f["t"][-1])
    a, b = moves(out, name, t_end), moves(flow, "flow", t_end)
    equal = [row for row in a if short(a[row]) == short(b[row])]
    moving = [row for row in a if a[row] or b[row]]
    dts = [
        abs(x["t_start"] - y["t_start"])
        for row in equal
        for x, y in zip(a[row], b[row])
    ]
    stats = read_json(flow / "flow.json")["stats"]
    return {
        "t_end": t_end,
        "equal_rows": equal,
        "moving_rows": moving,
        "rows": len(a),
        "max_dt": max(dts, default=0.0),
        "gd_moves": {row: short(m) for row, m in a.items()},
        "flow_moves": b,
        "grad_evals": stats.get("grad_evals"),
        "wall_s": stats.get("wall_s"),
    }


def _first(settings: Settings) -> str:
    """The run-name suffix of the first seed (none for a single seed)."""
    return "_s0" if settings.seeds > 1 else ""


def _resumed() -> str:
    """How much of this invocation was read back from an earlier one."""
    back = [w for r, w in RUNS if r]
    if not back:
        return ""
    return (
        f"; {len(back)} of {len(RUNS)} runs read back from an earlier invocation, "
        f"whose runs took {sum(back) / 60:.1f} min"
    )


def findings(settings: Settings, results: dict, wall: float, load: str) -> str:
    """The findings block of docs/natural_text.md, from ``summarise``'s output."""
    s = settings
    lines = [
        "Generated by `PYTHONPATH=$PWD python experiments/natural_text.py "
        f"--write-docs` in {wall / 60:.1f} min (load average {load}){_resumed()}. "
        f"Settings: BPE, V = {s.vocab_size} pieces, ▁ isolated; s = 32, "
        f"N = {s.windows} windows (+32 per tracked row), m = 32, ε = 1e-3, float32; "
        f"{s.seeds} seeds. **Flow proxy**: full-batch GD at η = {s.lr} to "
        f"t = {s.horizon:g} ({round(s.horizon / s.lr)} steps), λ_max checked at "
        f"{s.sharpness_checks} saves. **Flow**: seed 0's gradient flow itself to "
        f"t = {s.flow_horizon:g} (float64, RKC2). **AdamW**: warmup-cosine to peak "
        f"{s.adamw_lr} (10 % warmup, final 0), weight decay 0.01, {s.adamw_steps} "
        f"steps of {s.batch} fresh windows from the whole corpus (its clock "
        "t = Σ η_k ends near 4.5).",
        "",
        "Moves of each row's largest entry (`gflow.text.row_phases`): F = focus on, "
        "D = dilution from, then the key; one pattern per seed; times (t_start) of "
        "the first seed's moves as mean ± sd over the seeds with the same pattern; "
        "(ends) = how many of the N training windows end at the row's query; "
        "in order = how many of the paper's four steps (D, F▁, D, Fself) the seed "
        "shows in order.",
        "",
    ]
    for corpus, r in results.items():
        lines += [
            f"**{corpus}** (d = {r['d']})",
            "",
            "| row (ends) | run | moves per seed | same | times | in order | verdict |",
            "| --- | --- | --- | ---: | --- | --- | --- |",
        ]
        order = {a: i for i, a in enumerate(("flow (seed 0)", "flow proxy", "AdamW"))}
        by_row = sorted(
            r["rows"].values(),
            key=lambda v: (ROWS[corpus].index(v["row"]), order[v["arm"]]),
        )
        for v in by_row:
            pats = " / ".join(f"`{p}`" for p in v["patterns"])
            lines.append(
                f"| {v['row']} ({v['ends']}) | {v['arm']} | {pats} | {v['shared']}/"
                f"{len(v['patterns'])} | {', '.join(v['times']) or '–'} | "
                f"{', '.join(map(str, v['in_order']))} of 4 | {v['verdict']} |"
            )
        until = [p["until"] for p in r["proxy"].values()]
        ratios = [p["max_ratio"] for p in r["proxy"].values()]
        lines += [
            "",
            "Flow proxy valid (η·λ_max ≤ 1 at every check) up to t = "
            + ", ".join("end" if u is None else f"{u:g}" for u in until)
            + " (per seed); largest η·λ_max/2 "
            + ", ".join(f"{x:.2f}" for x in ratios if x is not None)
            + ".",
        ]
        if r["flow"]:
            h = r["flow"]
            differ = [row for row in h["gd_moves"] if row not in h["equal_rows"]]
            moving = h["moving_rows"]
            agree = [row for row in h["equal_rows"] if row in moving]
            still = [row for row in h["gd_moves"] if row not in moving]
            lines.append(
                f"Against the flow itself (seed 0, RKC2 at rtol {s.flow_rtol:g}, "
                f"float64, to t = {h['t_end']:g}: {h['grad_evals']} gradients, "
                f"{h['wall_s']:.0f} s; both read to that time): "
                f"rows that move in either run: {len(moving)}, of which "
                f"{len(agree)} make the same moves"
                + (
                    f" ({', '.join(agree)}), their start times within {h['max_dt']:.3g}"
                    if agree
                    else ""
                )
                + f"; {len(still)} of the {h['rows']} rows move in neither"
                + (f" ({', '.join(still)})" if still else "")
                + "".join(
                    f"; {row}: GD `{h['gd_moves'][row]}`, flow "
                    f"`{short(h['flow_moves'][row])}`"
                    for row in differ
                )
                + "."
            )
        if r["stages"]:
            from gflow.runs.text import SeedSummary, stages_table

            table = stages_table(SeedSummary.from_json(r["stages"]))
            lines += ["", "```", table, "```"]
        lines.append("")
    return "\n".join(lines)


def claims(results: dict, seeds: int) -> str:
    """One line per paper claim with its verdict and the numbers behind it."""
    arms = ("flow", "flow proxy", "AdamW")
    lines = [
        f"| paper claim | flow (seed 0) | flow proxy (GD, {seeds} seeds) | AdamW "
        f"({seeds} seeds) |",
        "| --- | --- | --- | --- |",
    ]

    def cell(corpus, row, arm):
        v = results.get(corpus, {}).get("rows", {}).get(f"{row}|{arm}")
        if v is None:
            return "not measured"
        return f"{v['verdict']} ({', '.join(map(str, v['in_order']))} of 4)"

    def line(claim, corpus, row):
        cells = " | ".join(cell(corpus, row, arm) for arm in arms)
        return f"| {claim} | {cells} |"

    if "wikitext" in results:
        lines.append(
            line(
                'WikiText "continue": dilute → focus on ▁ → dilute → focus on itself',
                "wikitext",
                "continue",
            )
        )
    if "tinystories" in results:
        for row in ROWS["tinystories"][1:]:
            lines.append(line(f'TinyStories "{row}": the same', "tinystories", row))

    def focus_on_space(arm):
        hits, total = 0, 0
        for r in results.values():
            for key, v in r["rows"].items():
                if not key.endswith(f"|{arm}") or v["row"] == "▁":
                    continue
                total += 1
                hits += all("F▁" in p.split() for p in v["patterns"])
        return f"{hits} of {total} rows (in every seed)"

    cells = " | ".join(focus_on_space(arm) for arm in arms)
    lines.append(f"| the rows focus on the very frequent whitespace piece | {cells} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write-docs", action="store_true")
    p.add_argument("--quick", action="store_true", help="1 seed, short runs")
    p.add_argument("--corpus", choices=sorted(CORPORA), action="append")
    args = p.parse_args(argv)
    if not DATA.is_dir():
        raise SystemExit(f"shared data not found at {DATA}")
    import os

    settings = QUICK if args.quick else Settings()
    out_root = OUT / "quick" if args.quick else OUT
    start = time.perf_counter()
    load = [os.getloadavg()[0]]
    corpora = args.corpus or sorted(CORPORA, reverse=True)
    configs = {c: settings.text_config(c) for c in corpora}
    for corpus, cfg in configs.items():  # float32 first, in a float32 process
        print(corpus, flush=True)
        run_dir(cfg, out_root / corpus)
        load.append(os.getloadavg()[0])
    import jax

    jax.config.update("jax_enable_x64", True)  # entry point: the flow in float64
    for corpus, cfg in configs.items():
        print(f"{corpus}: the flow", flush=True)
        run_dir(settings.flow_config(cfg), out_root / f"{corpus}_flow")
        load.append(os.getloadavg()[0])
    results = {c: summarise(c, root=out_root) for c in corpora}
    wall = time.perf_counter() - start
    text = "\n".join(
        [
            findings(settings, results, wall, " → ".join(f"{x:.2f}" for x in load)),
            "",
            "**Verdict per paper claim** (reproduced: every seed shows all four "
            "steps in order; partly: at least two in some seed; not: fewer):",
            "",
            claims(results, settings.seeds),
        ]
    )
    out_root.mkdir(parents=True, exist_ok=True)
    (out_root / "findings.md").write_text(text + "\n")
    (out_root / "summary.json").write_text(json.dumps(results, indent=2) + "\n")
    print(text)
    if args.write_docs and not args.quick:
        _docs.replace_block(DOC, START, END, text + "\n")
        figures = ROOT / "docs" / "figures"
        figures.mkdir(exist_ok=True)
        for corpus in results:  # the flow's rows and the first AdamW seed's
            for src, name in (
                (out_root / f"{corpus}_flow" / "attention_rows_flow.png", "flow"),
                (
                    out_root / corpus / f"attention_rows_adamw{_first(settings)}.png",
                    "adamw",
                ),
            ):
                if src.exists():
                    shutil.copy(src, figures / f"natural_text_{corpus}_{name}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
