"""The semantic-mutant harness (issue 58, point 2): hand-written one-line bugs.

mutmut (``tests/mutation/score.py``) mutates operators and constants blindly; the
bugs listed in ``tests/mutation/semantic_mutants.json`` are the ones people make
and that keep every shape (a transposed mask, a dropped 1/2, t0 ignored, a cache key
that ignores an input, a random stream folded in with the wrong index, an off-by-one
in the saves). This command plants each one alone in a scratch copy of the checkout
and asks whether the default suite notices:

    python -m tests.mutation.semantic [--only ID,...] [--limit N] [--jobs 2]

1. The committed tree (``git archive HEAD``, read once at the start: others'
   uncommitted edits in the checkout neither break the baseline nor leak into a
   mutant) is unpacked into a temporary folder; the copy's own ``gflow`` is
   imported there (``PYTHONPATH`` points at it, ahead of the editable install;
   checked before anything runs).
2. The unmutated default suite runs in the copy and must pass (its result is kept
   while the tracked files are unchanged), then two control mutants that must be
   caught.
3. Each mutant is planted alone (its file rewritten in a per-worker copy, restored
   afterwards; no bytecode is written, so no stale ``.pyc`` can hide it) and runs
   first against the test files most related to its module (``RELATED``, with
   the invariant files of issue 58 that read it): those are part of the default
   suite, so a mutant they kill the default suite kills. Only a survivor runs the
   whole default suite (``python -m pytest -n JOBS -q -x -p no:cacheprovider``:
   ``--jobs 1`` leaves the other core to whoever else uses the machine).
4. Each result (killed, by which test and in which phase / survived / timeout) is
   written at once to ``tests/mutation/results/semantic.json`` (gitignored), keyed
   by the mutant and the committed content of its file, so a rerun skips the
   mutants done; a quick survivor is tried again when its quick test files
   change, a survivor of the whole suite when the committed tree does.
5. The score table goes into docs/testing.md between the markers
   ``<!-- semantic_mutants:start -->`` and ``<!-- semantic_mutants:end -->``;
   mutants judged equivalent are listed, with their argument, in ``EQUIVALENT``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIST = Path(__file__).with_name("semantic_mutants.json")
RESULTS = Path(__file__).with_name("results") / "semantic.json"
DOC = ROOT / "docs" / "testing.md"
START, END = "<!-- semantic_mutants:start -->", "<!-- semantic_mutants:end -->"
COMMAND = "python -m tests.mutation.semantic"
# + -n JOBS; without the list's own check, which a planted mutant fails by design
# (its original no longer occurs in the copy)
FULL = [
    "-m",
    "pytest",
    "-q",
    "-x",
    "-p",
    "no:cacheprovider",
    "--ignore=tests/test_semantic_mutants.py",
]
QUICK = ["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"]

#: The test files most related to each mutated module: the quick kill.
# issue 58's invariant files, listed first where they are the quicker kill (pytest
# stops at the first failure)
_CAUSAL = "test_invariants.py"  # causality, the clock, block identity
_MODELS = "test_invariants_models.py"  # the Transformer against NumPy
_KEYS = "test_invariants_keys.py"  # cache keys, minibatch pieces, checkpoints
_SOLVERS = "test_invariants_solvers.py"  # every solver's order and estimate
_SWEEPS = "test_invariants_sweeps.py"  # a sweep against a constructed reference
_TEXT = "test_invariants_text.py"  # the full-batch loop against closed forms
_MONITOR = "test_invariants_monitor.py"  # the monitor's reduction, by hand
_STAGES = "test_invariants_stages.py"  # stage rules reading the right input

RELATED = {
    "gflow/problems/transformer.py": [_MODELS, "test_transformer.py", _CAUSAL],
    "gflow/problems/model.py": ["test_model.py", "test_losses.py", _CAUSAL],
    "gflow/problems/losses.py": ["test_losses.py", "test_cross_entropy.py", _CAUSAL],
    "gflow/problems/markov.py": ["test_data.py", "test_losses.py"],
    "gflow/dynamics/flow.py": ["test_flow.py", _CAUSAL],
    "gflow/dynamics/optimizer_run.py": ["test_optim.py", _CAUSAL],
    "gflow/dynamics/optimizer_step.py": [_KEYS, "test_optim.py", _CAUSAL],
    "gflow/dynamics/minibatch.py": [_KEYS, "test_minibatch.py"],
    "gflow/dynamics/schedules.py": ["test_schedules.py", "test_optim.py", _CAUSAL],
    "gflow/dynamics/solvers/rkc.py": [
        _SOLVERS,
        "test_solvers.py",
        "test_stabilised.py",
    ],
    "gflow/dynamics/solvers/rock4.py": [_SOLVERS, "test_stabilised.py"],
    "gflow/dynamics/solvers/exprb.py": [_SOLVERS, "test_stabilised.py"],
    "gflow/dynamics/solvers/split.py": [
        _SOLVERS,
        "test_split_rkc.py",
        "test_stabilised.py",
    ],
    "gflow/dynamics/solvers/stall.py": [_SOLVERS, "test_flow_diagnostics.py"],
    "gflow/analysis/stages.py": [_STAGES, "test_stages.py"],
    "gflow/analysis/head_stages.py": [_STAGES, "test_head_observables.py"],
    "gflow/analysis/online_stages.py": [_STAGES, "test_online_stages.py"],
    "gflow/analysis/key_classes.py": ["test_key_classes.py"],
    "gflow/analysis/compare.py": [_SWEEPS, "test_compare.py"],
    "gflow/analysis/sweep_compare.py": [_SWEEPS, "test_optimizer_odes.py"],
    "gflow/analysis/sharpness.py": [
        _SWEEPS,
        "test_compare.py",
        "test_preconditioned_sharpness.py",
    ],
    "gflow/runs/checkpoint.py": [_KEYS, "test_checkpoint.py"],
    "gflow/runs/program_cache.py": [_KEYS, "test_program_cache.py"],
    "gflow/monitor/reduce.py": [_MONITOR, "test_monitor_core.py"],
    "gflow/monitor/signals.py": [_MONITOR, "test_monitor_core.py"],
    "gflow/analysis/head_observables.py": [
        _MONITOR,
        "test_monitor_core.py",
        "test_public_api.py",
        "test_train_methods.py",
    ],
    "gflow/text/windows.py": [_TEXT, "test_text_data.py", "test_token_ids.py"],
    "gflow/text/counts.py": [_TEXT, "test_text_model.py"],
    "gflow/text/fullbatch.py": [
        _TEXT,
        "test_text_model.py",
        "test_text_optimizers.py",
    ],
}

#: Two mutants every run must see caught (the harness itself is checked).
CONTROLS = [
    {
        "id": "control-loss-sign",
        "file": "gflow/problems/losses.py",
        "original": "return -jnp.sum(pi[:, None] * P * logp)",
        "replacement": "return jnp.sum(pi[:, None] * P * logp)",
        "why": "control: the population loss negated",
    },
    {
        "id": "control-flow-ascent",
        "file": "gflow/dynamics/flow.py",
        "original": "return jax.flatten_util.ravel_pytree(",
        "replacement": "return -jax.flatten_util.ravel_pytree(",
        "why": "control: the flow climbs the loss",
    },
]

#: Mutants judged equivalent (id -> the argument); they leave the score's total.
EQUIVALENT: dict[str, str] = {
    "flow-final-index": (
        "`final` is the solve's `SubSaveAt(t1=True)` output, whose leading axis"
        " has exactly one entry (the state at t1), so `final[0]` and `final[-1]`"
        " are the same array"
    ),
    "losses-blocked-threshold": (
        "dense=True and dense=False only choose between the d×d and the gathered"
        " form of the same loss (`_use_dense` has no other caller), so swapping"
        " them changes the cost and the last bits, never the value a test can"
        " hold to a tolerance"
    ),
}

QUICK_TIMEOUT, FULL_TIMEOUT = 900, 1800
#: pytest-xdist workers of the whole default suite (``--jobs``)
WORKERS = 2
_lock = threading.Lock()


def load_mutants(path: Path = LIST) -> list[dict]:
    return json.loads(path.read_text())["mutants"]


def plant(text: str, mutant: dict) -> str:
    """``text`` with the mutant's original replaced (ValueError unless it occurs
    exactly once)."""
    n = text.count(mutant["original"])
    if n != 1:
        raise ValueError(
            f"{mutant['id']}: original occurs {n} times in {mutant['file']}"
        )
    return text.replace(mutant["original"], mutant["replacement"])


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


#: The commit every copy, key and baseline of this invocation reads (``main`` sets
#: it once; None: the checkout's HEAD now).
COMMIT: str | None = None


def _git(*args: str) -> bytes:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, check=True
    ).stdout


def head() -> str:
    return COMMIT or _git("rev-parse", "HEAD").decode().strip()


def committed_text(file: str) -> str:
    """``file`` as committed (at ``head()``)."""
    return _git("show", f"{head()}:{file}").decode()


def quick_tests_key(mutant: dict) -> str:
    """The mutant's quick test files and their committed text: a quick survivor is
    tried on them again when they change."""
    names = RELATED.get(mutant["file"], [])
    return _digest(*names, *(committed_text(f"tests/{n}") for n in names))


def mutant_key(mutant: dict) -> str:
    """What a stored result holds for: the mutant and its file's committed text."""
    return _digest(
        mutant["original"], mutant["replacement"], committed_text(mutant["file"])
    )


#: Tracked files whose edits leave the baseline's result valid: this harness, its
#: list and its check, and the page the table is written into.
_NOT_IN_TREE_KEY = (
    "tests/mutation/",
    "tests/test_semantic_mutants.py",
    "docs/testing.md",
    ".gitignore",
)


def tree_key() -> str:
    """The committed files' content (what the baseline's result holds for)."""
    h = hashlib.sha256()
    for line in _git("ls-tree", "-r", head()).decode().splitlines():
        meta, path = line.split("\t", 1)
        if not path.startswith(_NOT_IN_TREE_KEY):
            h.update(f"{path} {meta.split()[2]}\n".encode())  # path and blob id
    return h.hexdigest()[:16]


def load_results() -> dict:
    if RESULTS.exists():
        return json.loads(RESULTS.read_text())
    return {"baseline": None, "controls": {}, "mutants": {}}


def save_results(results: dict) -> None:
    with _lock:
        if results.get("runs") and "t0" in results["runs"][-1]:
            run = results["runs"][-1]
            run["seconds"] = round(time.time() - run["t0"])
            run["load_after"] = [round(x, 2) for x in os.getloadavg()]
        RESULTS.parent.mkdir(exist_ok=True)
        tmp = RESULTS.with_suffix(".tmp")
        tmp.write_text(json.dumps(results, indent=1))
        tmp.replace(RESULTS)


def make_copy(dest: Path) -> Path:
    """The committed tree (at ``head()``) unpacked into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = _git("archive", "--format=tar", head())
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def _env(copy: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(copy) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def check_import(copy: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import gflow; print(gflow.__file__)"],
        cwd=copy,
        env=_env(copy),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not Path(out).resolve().is_relative_to(copy.resolve()):
        raise SystemExit(f"the copy imports gflow from {out}, not from {copy}")


_FAIL = re.compile(r"^(FAILED|ERROR) (\S+)", re.M)


def run_pytest(copy: Path, args: list[str], timeout: float) -> dict:
    """One pytest run in ``copy``: passed / failed (first failing test) / timeout."""
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, *args],
            cwd=copy,
            env=_env(copy),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"outcome": "timeout", "seconds": round(time.monotonic() - t0, 1)}
    seconds = round(time.monotonic() - t0, 1)
    if proc.returncode == 0:
        return {"outcome": "passed", "seconds": seconds}
    if proc.returncode == 5:  # pytest selected no test (all slow): nothing caught it
        return {"outcome": "passed", "seconds": seconds, "note": "no test selected"}
    found = _FAIL.search(proc.stdout)
    tail = (
        proc.stdout.strip().splitlines()[-1:] or proc.stderr.strip().splitlines()[-1:]
    )
    return {
        "outcome": "failed",
        "seconds": seconds,
        "by": found.group(2)
        if found
        else f"rc {proc.returncode}: {tail[0] if tail else ''}",
    }


def try_mutant(copy: Path, mutant: dict, *, full: bool) -> dict:
    """Plant ``mutant`` in ``copy``, run its quick tests (or the whole suite)."""
    path = copy / mutant["file"]
    original = path.read_text()
    path.write_text(plant(original, mutant))
    try:
        if full:
            r = run_pytest(copy, FULL + ["-n", str(WORKERS)], FULL_TIMEOUT)
        else:
            tests = [f"tests/{t}" for t in RELATED.get(mutant["file"], [])]
            if not tests:
                return {"outcome": "passed", "seconds": 0.0, "note": "no related tests"}
            r = run_pytest(copy, QUICK + tests, QUICK_TIMEOUT)
    finally:
        path.write_text(original)
    r["phase"] = "full" if full else "quick"
    if not full:
        r["tests"] = quick_tests_key(mutant)
    return r


def verdict(r: dict) -> str:
    names = {"failed": "killed", "timeout": "timeout", "passed": "survived"}
    return names[r["outcome"]]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated mutant ids")
    ap.add_argument("--limit", type=int, help="run at most N mutants not yet done")
    ap.add_argument("--jobs", type=int, default=2, help="quick checks in parallel")
    ap.add_argument("--table-only", action="store_true", help="only rewrite the table")
    args = ap.parse_args(argv)
    global COMMIT, WORKERS
    COMMIT, WORKERS = head(), max(1, args.jobs)

    mutants = load_mutants()
    for m in mutants:  # the list is valid for the committed tree
        plant(committed_text(m["file"]), m)
    results = load_results()
    if args.table_only:
        write_table(mutants, results)
        return 0
    chosen = mutants
    if args.only:
        want = args.only.split(",")
        unknown = set(want) - {m["id"] for m in mutants}
        if unknown:
            ap.error(f"unknown mutant ids: {sorted(unknown)}")
        chosen = [m for m in mutants if m["id"] in want]

    def done(m):
        r = results["mutants"].get(m["id"])
        if r is None or r.get("key") != mutant_key(m) or "verdict" not in r:
            return False
        # a survivor is tried again once the suite it survived has changed
        return r["verdict"] != "survived" or r.get("tree") == tree_key()

    # the mutants argued equivalent last: their runs only confirm the argument
    todo = sorted(
        (m for m in chosen if not done(m)), key=lambda m: m["id"] in EQUIVALENT
    )
    if args.limit is not None:
        todo = todo[: args.limit]
    # this invocation's entry, kept up to date at every save: an interrupted run
    # still reports its time and load
    results.setdefault("runs", []).append(
        {
            "started": time.strftime("%Y-%m-%d %H:%M"),
            "seconds": 0,
            "mutants": len(todo),
            "load_before": [round(x, 2) for x in os.getloadavg()],
            "load_after": None,
            "argv": sys.argv[1:] if argv is None else list(argv),
            "commit": COMMIT,
            "t0": time.time(),
        }
    )
    with tempfile.TemporaryDirectory(prefix="gflow-semantic-") as tmp:
        copies = [make_copy(Path(tmp) / f"copy{j}") for j in range(max(1, args.jobs))]
        check_import(copies[0])
        key = tree_key()
        base = results.get("baseline")
        if not base or base.get("tree") != key or base.get("outcome") != "passed":
            print("baseline: the default suite, unmutated ...", flush=True)
            base = run_pytest(copies[0], FULL + ["-n", str(WORKERS)], FULL_TIMEOUT)
            base |= {"tree": key}
            results["baseline"] = base
            save_results(results)
            print(f"baseline: {base}", flush=True)
            if base["outcome"] != "passed":
                raise SystemExit("the unmutated default suite does not pass")
        for c in CONTROLS:
            stored = results["controls"].get(c["id"])
            if stored and stored.get("key") == mutant_key(c):
                continue
            r = try_mutant(copies[0], c, full=False)
            if r["outcome"] == "passed":
                r = try_mutant(copies[0], c, full=True)
            r |= {"key": mutant_key(c), "verdict": verdict(r)}
            results["controls"][c["id"]] = r
            save_results(results)
            print(f"{c['id']}: {r}", flush=True)
            if r["verdict"] == "survived":
                raise SystemExit(
                    f"control mutant {c['id']} survived: the harness is broken"
                )

        free = list(copies)

        def quick(m):
            with _lock:
                copy = free.pop()
            try:
                prev = results["mutants"].get(m["id"])
                if (
                    prev
                    and prev.get("key") == mutant_key(m)
                    and prev.get("phase") == "quick"
                    and prev.get("tests") == quick_tests_key(m)
                ):
                    r = prev  # an earlier run's quick survivor: on to the suite
                else:
                    r = try_mutant(copy, m, full=False)
                    r["key"] = mutant_key(m)
                    if r["outcome"] != "passed":
                        r["verdict"] = verdict(r)
                    with _lock:
                        results["mutants"][m["id"]] = r
                    save_results(results)
                    print(f"{m['id']}: quick {r}", flush=True)
                return m, r
            finally:
                with _lock:
                    free.append(copy)

        with ThreadPoolExecutor(max_workers=len(copies)) as pool:
            survivors = [m for m, r in pool.map(quick, todo) if "verdict" not in r]
        for m in survivors:  # the whole suite, one at a time on WORKERS cores
            r = try_mutant(copies[0], m, full=True)
            r |= {"key": mutant_key(m), "verdict": verdict(r), "tree": key}
            results["mutants"][m["id"]] = r
            save_results(results)
            print(f"{m['id']}: full {r}", flush=True)
    save_results(results)
    write_table(mutants, results)
    return 0


def write_table(mutants: list[dict], results: dict) -> None:
    rows = {m["id"]: results["mutants"].get(m["id"]) for m in mutants}
    ran = {i: r for i, r in rows.items() if r and "verdict" in r}
    killed = [i for i, r in ran.items() if r["verdict"] in ("killed", "timeout")]
    quick = [i for i in killed if ran[i]["phase"] == "quick"]
    timeouts = [i for i, r in ran.items() if r["verdict"] == "timeout"]
    survived = [i for i, r in ran.items() if r["verdict"] == "survived"]
    equivalent = [i for i in survived if i in EQUIVALENT]
    live = [i for i in survived if i not in EQUIVALENT]
    total = len(ran) - len(equivalent)
    runs = results.get("runs", [])
    seconds = sum(r["seconds"] for r in runs)
    partial = len(ran) < len(mutants)
    by_id = {m["id"]: m for m in mutants}
    base = results.get("baseline") or {}
    controls = results.get("controls", {})
    lines = [
        START,
        "",
        f"    {COMMAND}",
        "",
        ("**Partial run: " if partial else "**")
        + f"{len(ran)} of {len(mutants)} mutants run"
        + (".** " if partial else ".** ")
        + f"Killed {len(killed)} of the {total} decided non-equivalent ones"
        + (f" ({100 * len(killed) / total:.0f}%)" if total else "")
        + f"; {len(quick)} by their module's own tests,"
        f" {len(killed) - len(quick)} only by the whole default suite"
        + (f", {len(timeouts)} by a timeout" if timeouts else "")
        + f"; {len(live)} survived, {len(equivalent)} judged equivalent.",
        "",
        f"Wall time {seconds / 60:.0f} min over {len(runs)} invocation(s) on 2 cores"
        + (
            " (load average before/after: "
            + "; ".join(
                f"{r['load_before'][0]:.1f}/{(r['load_after'] or [math.nan])[0]:.1f}"
                for r in runs
            )
            + ")"
            if runs
            else ""
        )
        + "; the unmutated default suite took"
        f" {base.get('seconds', float('nan')):.0f} s in the copy; the controls "
        + ", ".join(
            f"{c['id']} ({controls.get(c['id'], {}).get('verdict', 'not run')})"
            for c in CONTROLS
        )
        + ".",
        "",
    ]
    lines += [
        "| file | listed | killed by its tests | killed by the suite | survived"
        " | not decided |",
        "|---|---|---|---|---|---|",
    ]
    for file in sorted({m["file"] for m in mutants}):
        ids = [m["id"] for m in mutants if m["file"] == file]
        n_quick = sum(i in quick for i in ids)
        n_full = sum(i in killed for i in ids) - n_quick
        n_surv = sum(i in survived for i in ids)
        n_left = sum(i not in ran for i in ids)
        lines.append(
            f"| `{file.removeprefix('gflow/')}` | {len(ids)} | {n_quick} | {n_full}"
            f" | {n_surv} | {n_left} |"
        )
    lines.append("")
    pending = [i for i, r in rows.items() if r and "verdict" not in r]
    if pending:
        lines += [
            f"Not yet decided ({len(pending)}): these passed their module's own tests"
            " and wait for the whole default suite:",
            "",
            ", ".join(f"`{i}`" for i in pending) + ".",
            "",
        ]
    if live:
        lines += ["Survivors (the default suite does not notice these bugs):", ""]
        lines += [f"- `{i}` ({by_id[i]['file']}): {by_id[i]['why']}" for i in live]
        lines.append("")
    if equivalent:
        lines += ["Judged equivalent:", ""]
        lines += [f"- `{i}`: {EQUIVALENT[i]}" for i in equivalent]
        lines.append("")
    lines.append(END)
    text = DOC.read_text()
    block = "\n".join(lines)
    if START in text and END in text:
        head, rest = text.split(START, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n## Semantic mutants\n\n" + block + "\n"
    DOC.write_text(text)
    print(block)


if __name__ == "__main__":
    sys.exit(main())
