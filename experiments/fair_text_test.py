"""The fair text test of the paper's rows (issue 30 point 4), over seeds, with its
control.

Question: trained on enough windows that every one of the paper's rows ends
training windows as a query (10⁴ windows of TinyStories, BPE 4000), does the
gradient flow itself take a row through the paper's four steps (dilute, focus on
whitespace, dilute, focus on itself), and in how many seeds? And does the row
detector (``gflow.text.row_phases``) report the same moves on the same corpus with
its words shuffled, where the order carries nothing?

Each cell is one ``gflow text`` run (the command is printed on the page): the
paper's one-layer model (width 32, context 32, init 1e-3, float64), the flow with
the default solver at rtol 1e-5 to ``t1``, saves every ``t1 / 100``. The prefix
mode (▁ glued to the next word, as GPT-2's tokenizers do) is the default; the
isolated mode (▁ its own piece) costs about 80 minutes a seed on the 2 cores and
runs with ``--mode isolated``. The control is the corpus with its words shuffled
(``experiments/shuffled_corpus.py``, shuffle seed 0: every word, hence every
prefix-mode piece and its frequency, kept).

Per tracked row and seed the page lists the moves (F focus on, D dilution from, the
key, the start time), counts the paper's four steps shown in order (the longest
common subsequence with D, F▁, D, Fself, as ``experiments/natural_text.py``), and
counts the seeds with a focus, with a dilution, and with a focus followed by a
dilution from the same key (the two halves of one cycle).

Command:
    PYTHONPATH=$PWD python experiments/fair_text_test.py            # runs + page
    PYTHONPATH=$PWD python experiments/fair_text_test.py --doc-only # the page
    PYTHONPATH=$PWD python experiments/fair_text_test.py --quick    # smoke run
    options: --mode isolated, --text-seeds 0,1, --control-seeds 0

Resumable: each run is a ``gflow text`` run directory under
``experiments/results/fair_text/`` (``<mode>[-shuffled]-seed<N>-t<t1>``); a
finished one (its ``flow.json`` says success) is read back, an interrupted one is
resumed by ``gflow text``. Runtime: 17-20 min a prefix seed with both cores to
itself, about 30 min pinned to one core.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import time
from pathlib import Path

import numpy as np

from experiments import _docs
from experiments.natural_text import in_order
from experiments.shuffled_corpus import shuffled_words

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
CORPUS = DATA / "tinystories" / "sample.txt"
OUT = ROOT / "experiments" / "results" / "fair_text"
DOC = ROOT / "docs" / "practical_models.md"
START, END = "<!-- fair_text:start -->", "<!-- fair_text:end -->"


@dataclasses.dataclass(frozen=True)
class Settings:
    """One whitespace mode of the test: the ``gflow text`` options and the seeds."""

    mode: str = "prefix"
    windows: int = 10_000
    vocab_size: int = 4000
    t1: float = 1800.0
    dt: float = 0.25  # the clock's unit step: steps = t1 / dt; saves every t1 / 100
    track: tuple[str, ...] = ("▁", "▁the", "▁a", "▁full", "▁been", "▁continue")
    text_seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    control_seeds: tuple[int, ...] = (0, 1, 2)
    shuffle_seed: int = 0
    max_chars: int | None = None
    tag: str = ""

    def rows(self) -> tuple[str, ...]:
        """The tracked rows as the mode spells them (isolated: words without ▁)."""
        if self.mode == "prefix":
            return self.track
        return tuple(r.lstrip("▁") or r for r in self.track)


#: The isolated mode's horizon: its rows leave the saddle by t ≈ 200.
ISOLATED = Settings(mode="isolated", t1=1000.0, text_seeds=(0,), control_seeds=())
QUICK = Settings(
    windows=256,
    vocab_size=300,
    t1=20.0,
    track=("▁", "▁the", "▁a"),
    text_seeds=(0,),
    control_seeds=(0,),
    max_chars=20_000,
    tag="-quick",
)


def run_name(s: Settings, control: bool, seed: int) -> str:
    return f"{s.mode}{'-shuffled' if control else ''}-seed{seed}-t{s.t1:g}{s.tag}"


def shuffled_path(s: Settings, root: Path) -> Path:
    """The control corpus, written once (outside git: results/ is ignored)."""
    path = root / f"corpus-shuffled-seed{s.shuffle_seed}{s.tag}.txt"
    if not path.exists():
        text = CORPUS.read_text()
        if s.max_chars:
            text = text[: s.max_chars]
        root.mkdir(parents=True, exist_ok=True)
        path.write_text(shuffled_words(text, s.shuffle_seed) + "\n")
    return path


def argv(s: Settings, corpus: Path, seed: int, out: Path) -> list[str]:
    """The ``gflow text`` command line of one cell (without ``gflow text``)."""
    args = [
        "--corpus", str(corpus),
        "--tokenizer", "bpe",
        "--vocab-size", str(s.vocab_size),
        "--windows", str(s.windows),
        "--whitespace", s.mode,
        "--track", ",".join(s.rows()),
        "--method", "flow",
        "--lr", f"{s.dt:g}",
        "--steps", str(round(s.t1 / s.dt)),
        "--opt-steps", "0",
        "--seed", str(seed),
        "--out", str(out),
    ]  # fmt: skip
    if s.max_chars:
        args += ["--max-chars", str(s.max_chars)]
    return args


def finished(out: Path) -> bool:
    flow = out / "flow.json"
    return (
        flow.exists()
        and (out / "row_phases.json").exists()
        and json.loads(flow.read_text())["status"] == "success"
    )


def run(s: Settings, root: Path = OUT) -> None:
    """Every cell not yet finished, through ``gflow text`` itself."""
    from gflow.cli import main as gflow

    cells = [(False, seed) for seed in s.text_seeds]
    cells += [(True, seed) for seed in s.control_seeds]
    if not CORPUS.exists():
        raise SystemExit(f"no corpus at {CORPUS} (../shared/data is needed)")
    for control, seed in cells:
        out = root / run_name(s, control, seed)
        if finished(out):
            print(f"  {out.name}: read back", flush=True)
            continue
        corpus = shuffled_path(s, root) if control else CORPUS
        start = time.perf_counter()
        print(f"  {out.name}: gflow text {' '.join(argv(s, corpus, seed, out))}")
        code = gflow(["text", *argv(s, corpus, seed, out)])
        if code:
            raise SystemExit(f"gflow text failed on {out.name} (exit status {code})")
        cost = {
            "wall_s": time.perf_counter() - start,
            # the process's peak so far: an upper bound on this run's
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
            "load": _docs.uptime(),
        }
        (out / "cost.json").write_text(json.dumps(cost) + "\n")


# -- reading the runs ----------------------------------------------------------------


def read_cell(out: Path) -> dict | None:
    """One finished run: its rows' moves, loss, first move and cost (None: not
    finished)."""
    if not finished(out):
        return None
    flow = json.loads((out / "flow.json").read_text())
    moves = json.loads((out / "row_phases.json").read_text())["flow"]
    with np.load(out / "flow_metrics.npz") as z:
        loss = (float(z["loss"][0]), float(z["loss"][-1]))
    starts = [m["t_start"] for row in moves.values() for m in row]
    cost = out / "cost.json"
    return {
        "seed": flow["info"]["seed"],
        "moves": moves,
        "loss": loss,
        "first_move": min(starts) if starts else None,
        "grad_evals": flow["stats"]["grad_evals"],
        "t_reached": flow["stats"]["t_reached"],
        "wall_s": flow["stats"]["wall_s"],
        "cost": json.loads(cost.read_text()) if cost.exists() else None,
    }


def cells(s: Settings, control: bool, root: Path = OUT) -> list[dict]:
    seeds = s.control_seeds if control else s.text_seeds
    found = (read_cell(root / run_name(s, control, seed)) for seed in seeds)
    return [c for c in found if c is not None]


def halves(moves: list[dict]) -> bool:
    """A focus on a key followed, later, by a dilution from the same key."""
    for i, m in enumerate(moves):
        if m["phase"] == "focus":
            for later in moves[i + 1 :]:
                if later["phase"] == "dilution" and later["key"] == m["key"]:
                    return True
    return False


def row_counts(runs: list[dict], row: str) -> dict:
    """Over the seeds that track ``row``: how many focus, dilute, show both halves,
    and how many of the paper's four steps each shows in order."""
    per_seed = [r["moves"][row] for r in runs if row in r["moves"]]
    return {
        "seeds": len(per_seed),
        "focus": sum(any(m["phase"] == "focus" for m in p) for p in per_seed),
        "dilution": sum(any(m["phase"] == "dilution" for m in p) for p in per_seed),
        "halves": sum(halves(p) for p in per_seed),
        "in_order": [in_order(p) for p in per_seed],
    }


def short(moves: list[dict]) -> str:
    """Moves as "Fself@936 (0.07→0.47) D▁the@972 (0.47→0.34)": the start time and
    the row's mass on the key before and after; "–" for none."""
    if not moves:
        return "–"
    return " ".join(
        ("F" if m["phase"] == "focus" else "D")
        + ("self" if m["self"] else m["key"])
        + f"@{m['t_start']:g} ({m['mass_before']:.2f}→{m['mass_after']:.2f})"
        for m in moves
    )


def _count(k: int, n: int) -> str:
    return f"{k}/{n}" if n else "–"


def block(s: Settings, root: Path = OUT) -> str:
    """The page's generated block: the runs, then the rows on the text against the
    rows on the control."""
    text, control = cells(s, False, root), cells(s, True, root)
    if not text:
        return "No finished run of the fair test yet.\n"
    lines = [
        f"Generated by `PYTHONPATH=$PWD python experiments/fair_text_test.py"
        f"{'' if s.mode == 'prefix' else ' --mode ' + s.mode}` "
        f"({len(text)} seed(s) of the text: {[c['seed'] for c in text]}; "
        f"{len(control)} of the control: {[c['seed'] for c in control]}). Each "
        "cell is",
        "",
        "    gflow text " + " ".join(argv(s, Path("CORPUS"), 0, Path("RUN"))),
        "",
        "with its own `--seed` (another initial model on the same windows); CORPUS "
        "is the TinyStories sample or, for the control, the same with its words "
        f"shuffled (shuffle seed {s.shuffle_seed}). The runs:",
        "",
    ]
    runs_table = []
    for name, group in (("text", text), ("shuffled", control)):
        for c in group:
            peak = c["cost"]["peak_rss_gb"] if c["cost"] else None
            runs_table.append(
                [
                    name,
                    c["seed"],
                    f"{c['t_reached']:g}",
                    f"{c['loss'][0]:.4f} → {c['loss'][1]:.4f}",
                    "–" if c["first_move"] is None else f"{c['first_move']:g}",
                    f"{c['grad_evals']:,}".replace(",", " "),
                    f"{c['wall_s'] / 60:.1f}"
                    + ("" if peak is None else f" (peak RSS ≤ {peak:.2f} GB)"),
                ]
            )
    lines.append(
        _docs.table(
            [
                "corpus",
                "seed",
                "t reached",
                "loss",
                "first row move (t)",
                "gradient evaluations",
                "runtime (min)",
            ],
            runs_table,
        )
    )
    lines += [
        "",
        "Runtimes are context, not timings: they were taken with other jobs "
        "sharing the 2 cores (the long runs pinned one per core).",
        "",
        "Per tracked row, seeds of the text against seeds of the control: with a "
        "focus, with a dilution, with a focus followed by a dilution from the same "
        "key (the two halves of one cycle), and how many of the paper's four steps "
        "(D, F▁, D, Fself) each text seed shows in order:",
        "",
    ]
    rows_table = []
    for row in s.rows():
        a, b = row_counts(text, row), row_counts(control, row)
        rows_table.append(
            [
                row,
                _count(a["focus"], a["seeds"]),
                _count(b["focus"], b["seeds"]),
                _count(a["dilution"], a["seeds"]),
                _count(b["dilution"], b["seeds"]),
                _count(a["halves"], a["seeds"]),
                _count(b["halves"], b["seeds"]),
                ", ".join(map(str, a["in_order"])) or "–",
                _count(sum(k == 4 for k in a["in_order"]), a["seeds"]),
            ]
        )
    lines.append(
        _docs.table(
            [
                "row",
                "focus (text)",
                "focus (control)",
                "dilution (text)",
                "dilution (control)",
                "focus then dilution (text)",
                "(control)",
                "steps in order, per text seed",
                "seeds with all four",
            ],
            rows_table,
        )
    )
    lines += [
        "",
        "Each seed's moves (F focus on, D dilution from; @ the start t; the row's "
        "mass on the key before → after the move):",
        "",
    ]
    moves_table = []
    for name, group in (("text", text), ("shuffled", control)):
        for row in s.rows():
            per = [short(c["moves"].get(row, [])) for c in group]
            if group:
                moves_table.append(
                    [row, name]
                    + [" / ".join(f"s{c['seed']}: {p}" for c, p in zip(group, per))]
                )
    lines.append(_docs.table(["row", "corpus", "moves per seed"], moves_table))
    return "\n".join(lines) + "\n"


def _seeds(text: str | None, default: tuple[int, ...]) -> tuple[int, ...]:
    if text is None:
        return default
    return tuple(int(x) for x in text.split(",") if x.strip())


def main(argv_=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--doc-only", action="store_true")
    p.add_argument("--mode", choices=("prefix", "isolated"), default="prefix")
    p.add_argument("--text-seeds", help="comma-separated (default: 0-4; isolated 0)")
    p.add_argument("--control-seeds", help="comma-separated (default: 0-2)")
    p.add_argument("--root", type=Path, default=OUT, help=argparse.SUPPRESS)
    a = p.parse_args(argv_)
    s = QUICK if a.quick else (ISOLATED if a.mode == "isolated" else Settings())
    if a.quick and a.mode == "isolated":
        s = dataclasses.replace(s, mode="isolated", track=("▁", "the", "a"))
    s = dataclasses.replace(
        s,
        text_seeds=_seeds(a.text_seeds, s.text_seeds),
        control_seeds=_seeds(a.control_seeds, s.control_seeds),
    )
    if not a.doc_only:
        run(s, a.root)
    text = block(s, a.root)
    if a.quick or a.mode != "prefix":
        print(text)  # the page keeps the prefix mode's full run
    else:
        _docs.publish(text, quick=False, doc=DOC, start=START, end=END)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
