"""A fuzzed command line (issue 18): malformed values for every option of every command.

The options are discovered from ``gflow.cli.main.build_parser()``, so a new option is
fuzzed without touching this file, or fails here until it has a strategy (an unknown
argparse
type) or a valid range (a number whose valid values are not the default). For each
drawn malformed value, ``gflow.cli.main.main`` runs in process and must: return 2, print
exactly one line on stderr that names the option (or the field it sets), print no
traceback, and leave nothing behind in a fresh ``--out`` directory. Everything is
validated before any JAX compilation, so each example costs milliseconds; while fuzzing,
the commands' runs are replaced by a stub that fails the example at once, so a value
that is wrongly accepted fails fast (and can never start a long run).
"""

import argparse
import contextlib
import dataclasses
import io
import json
import math
import re
import types
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gflow.cli import (
    build_parser,
    coordinator_address,
    floats,
    main,
    out_dir,
    out_file,
    run_dir_arg,
)
from gflow.dynamics import OPTIMIZERS
from gflow.runs import (
    METHODS,
    NO_ERROR_ESTIMATE,
    SCHEDULES,
    SOLVERS,
    TRAINING,
    FlowConfig,
    SweepConfig,
)
from gflow.runs.text import MODELS, OPTIMIZER_NAMES, TOKENIZER_NAMES, TextConfig
from gflow.runs.train import TrainConfig
from gflow.text import WHITESPACE_MODES

FUZZ = settings(
    max_examples=10,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

# A tiny valid configuration per command: a malformed value is appended to it (argparse
# keeps the last value of an option). Were a malformed value accepted, the run that
# follows stays small.
CORPUS_WORDS = ["the", "cat", "sat", "on", "mat", "dog", "ran"]


def _base(command, ws):
    return {
        "flow": [
            "flow",
            "--t1",
            "1",
            "--num-saves",
            "2",
            "--segments",
            "1",
            "--no-params",
            "--d-model",
            "2",
        ],
        "sweep": ["sweep", "--lrs", "0.5,0.25", "--t1", "1", "--num-saves", "2"],
        "compare": ["compare", "--lr", "0.5", "--t1", "1", "--num-saves", "2"],
        "text": [
            "text",
            "--corpus",
            str(ws / "corpus.txt"),
            "--vocab-size",
            "4",
            "--context",
            "3",
            "--windows",
            "8",
            "--steps",
            "2",
            "--adam-steps",
            "0",
            "--num-saves",
            "2",
            "--num-queries",
            "0",
        ],
        "train": [
            "train",
            "--steps",
            "2",
            "--num-saves",
            "2",
            "--segments",
            "1",
            "--seq-len",
            "3",
            "--batch",
            "2",
            "--eval-batch",
            "2",
            "--d-model",
            "2",
            "--layers",
            "1",
            "--heads",
            "1",
        ],
        "report": ["report", str(ws / "rundir")],
        "": ["report", str(ws / "rundir")],  # global options come before a command
    }[command]


def _positive(x):
    return math.isfinite(x) and x > 0


def _unit(x):
    return 0 <= x < 1


# Valid values of the numeric options whose valid range is not the default (a finite
# number > 0 for floats, an integer >= 1 for ints). Keys: (command or "*", flag). The
# bounds against the base configurations: sweep's step sizes 0.5, 0.25 need t1 >= 0.5,
# its t1 = 1 needs step sizes <= 1; likewise compare's --lr 0.5 and --t1 1.
VALID = {
    ("*", "--seed"): lambda n: 0 <= n < 2**32,
    ("*", "--num-saves"): lambda n: n >= 2,
    ("*", "--beta"): _unit,
    ("*", "--eps"): lambda x: math.isfinite(x) and x >= 0,
    ("flow", "--lam"): _unit,
    ("flow", "--atol"): lambda x: math.isfinite(x) and x >= 0,
    ("flow", "--pi"): lambda p: (
        len(p) >= 2
        and all(math.isfinite(x) and x >= 0 for x in p)
        and abs(sum(p) - 1) <= 1e-3  # off by less: ambiguous, not drawn
    ),
    ("sweep", "--t1"): lambda x: _positive(x) and x >= 0.5,
    ("sweep", "--processes"): lambda n: 1 <= n <= 2,  # the base sweep has 2 step sizes
    ("sweep", "--lrs"): lambda lrs: (
        len(lrs) >= 1
        and all(_positive(x) and x <= 1 for x in lrs)
        and len(set(lrs)) == len(lrs)
    ),
    ("compare", "--t1"): lambda x: _positive(x) and x >= 0.5,
    ("compare", "--lr"): lambda x: _positive(x) and x <= 1,
    ("text", "--opt-steps"): lambda n: n >= 0,  # alias --adam-steps
    ("text", "--batch"): lambda n: n >= 0,  # alias --adam-batch
    ("text", "--num-queries"): lambda n: n >= 0,
    ("text", "--row-windows"): lambda n: n >= 0,
    ("text", "--sharpness-checks"): lambda n: n >= 0,
    ("text", "--warmup"): _unit,
    ("text", "--final-lr"): lambda x: math.isfinite(x) and x >= 0,
    ("text", "--weight-decay"): lambda x: math.isfinite(x) and x >= 0,
    ("text", "--clip"): lambda x: math.isfinite(x) and x >= 0,
    ("text", "--seeds"): lambda n: 1 <= n <= 2**32,  # seed 0 + seeds - 1 < 2**32
    # the base text run is the one-layer attention model: one layer, one head
    ("text", "--layers"): lambda n: n == 1,
    ("text", "--heads"): lambda n: n == 1,
    ("train", "--warmup"): _unit,
    ("train", "--lam"): _unit,
    ("train", "--pi"): lambda p: VALID["flow", "--pi"](p) and len(p) >= 2,
    ("train", "--weight-decay"): lambda x: math.isfinite(x) and x >= 0,
    # the base run has 2 steps, width 2 and 1 head, and its context is 3 tokens
    ("train", "--segments"): lambda n: 1 <= n <= 2,
    ("train", "--max-len"): lambda n: n >= 3,
    ("train", "--heads"): lambda n: n in (1, 2),
    ("train", "--batch"): lambda n: n >= 0,  # 0: the full sample (adamw has one)
    ("train", "--d-model"): lambda n: n >= 1,
    ("train", "--vocab-size"): lambda n: n >= 2,
    # a training sweep: seed 0 + seeds - 1 < 2**32; distinct step sizes > 0
    ("train", "--seeds"): lambda n: 1 <= n <= 2**32,
    ("train", "--lrs"): lambda lrs: (
        len(lrs) >= 1 and all(_positive(x) for x in lrs) and len(set(lrs)) == len(lrs)
    ),
    # the base train and text runs have one member (one seed): one process at most
    ("train", "--processes"): lambda n: n == 1,
    ("text", "--processes"): lambda n: n == 1,
}
DEFAULT_VALID = {float: _positive, int: lambda n: n >= 1, floats: None}

# Options that take a name from a fixed set (checked by gflow, not by argparse choices)
NAMES = {
    ("flow", "--solver"): set(SOLVERS) - NO_ERROR_ESTIMATE,
    ("text", "--solver"): set(SOLVERS) - NO_ERROR_ESTIMATE,
    ("text", "--tokenizer"): set(TOKENIZER_NAMES),
    ("text", "--whitespace"): set(WHITESPACE_MODES),
    ("text", "--method"): set(METHODS),
    ("text", "--model"): set(MODELS),
    ("text", "--optimizer"): set(OPTIMIZER_NAMES),
    ("text", "--schedule"): set(SCHEDULES),
    ("train", "--optimizer"): set(OPTIMIZERS),
    ("train", "--schedule"): set(SCHEDULES),
    ("train", "--tokenizer"): set(TOKENIZER_NAMES),
    ("train", "--whitespace"): set(WHITESPACE_MODES),
    ("train", "--model"): set(MODELS),  # the base run has one layer and one head
    ("train", "--method"): set(TRAINING),
    ("train", "--solver"): set(SOLVERS) - NO_ERROR_ESTIMATE,
    ("sweep", "--optimizer"): set(OPTIMIZERS),
    ("sweep", "--reference"): {"flow", "modified", "central"},
    ("compare", "--optimizer"): set(OPTIMIZERS),
    ("compare", "--reference"): {"flow", "central"},
}


def _valid(command, flags, kind):
    """The valid range of an option, found under any of its names (aliases)."""
    for key in [(c, f) for f in flags for c in (command, "*")]:
        if key in VALID:
            return VALID[key]
    if DEFAULT_VALID.get(kind) is None:
        pytest.fail(f"no valid range for {command} {flags[-1]}: add it to VALID")
    return DEFAULT_VALID[kind]


def _actions():
    """(command, action) for every option and positional of every command."""
    parser = build_parser()
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += [
                    (name, a)
                    for a in sub._actions
                    if not isinstance(a, argparse._HelpAction)
                ]
        elif not isinstance(action, argparse._HelpAction):
            out.append(("", action))
    return out


ACTIONS = _actions()


def _id(item):
    command, action = item
    return f"{command or 'gflow'} {(action.option_strings or [action.dest])[-1]}"


# -- drawn strings -------------------------------------------------------------------

_EDGES = [
    "0",
    "-0",
    "0.0",
    "-1",
    "-2.5",
    "-1e-300",
    "1e-400",
    "-1e300",
    "nan",
    "NaN",
    "-nan",
    "inf",
    "-inf",
    "Infinity",
    "1",
    "2",
    "0.5",
    "1.5",
    "3",
    "1e3",
    "2e30",
    str(2**32),
    str(2**63),
    str(2**70),
    str(-(2**63)),
]
_JUNK = [
    "",
    " ",
    "abc",
    "x1",
    "1,2",
    "1;2",
    "0x10",
    "1e",
    "1.2.3",
    "--",
    "one",
    "½",
    "٣",
    "1 2",
    "True",
    "None",
    "[1]",
    "{}",
    "0.1.",
    "+-1",
    "1e+",
    "١٢",
]
_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")),
    max_size=12,
)  # argv strings hold no NUL, surrogates or control characters


def _numbers():
    return st.one_of(
        st.sampled_from(_EDGES),
        st.integers(-(2**70), 2**70).map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
    )


def _scalar_strings():
    return st.one_of(_numbers(), st.sampled_from(_JUNK), _TEXT)


def _list_strings():
    item = st.one_of(_numbers(), st.sampled_from(["", " ", "a", "0.5", "0.25"]))
    lists = st.lists(item, min_size=1, max_size=5)
    repeated = st.sampled_from(["0.5", "0.25", "0.1"]).map(lambda x: f"{x},{x}")
    return st.one_of(
        lists.map(",".join),
        repeated,
        st.sampled_from(["", ",", "0.5,", ",0.5", "0.5,,0.25", "0.5;0.25", "0.5 0.25"]),
        _TEXT,
    )


def _converts(kind, text):
    """argparse's conversion of ``text``, or None where argparse refuses it."""
    try:
        return kind(text)
    except (ValueError, TypeError, argparse.ArgumentTypeError):
        return None


def _strategy(command, action, ws):
    """A strategy of malformed argv tails for ``action``: (argv, words that may name
    the option, fresh_out: whether the base --out must stay fresh)."""
    flag = (action.option_strings or [None])[-1]
    names = {action.dest, action.dest.upper()}
    if flag:
        names |= {flag, flag.lstrip("-").replace("-", "_")}

    def tail(value):
        return [flag, value] if flag else [value]

    kind = str if action.type is None else action.type
    if action.nargs == 0:  # flags such as --no-params, --float64: no value allowed
        return st.tuples(
            st.builds(lambda v: [f"{flag}={v}"], _TEXT),
            st.just(names),
        )
    missing = st.just([flag]) if flag else st.nothing()  # an option without its value
    if action.choices is not None:
        bad = st.one_of(
            _TEXT, st.sampled_from([c.upper() for c in action.choices] + ["", " "])
        ).filter(lambda v: v not in action.choices)
        values = bad.map(tail)
    elif kind in (int, float, floats):
        valid = _valid(command, action.option_strings, kind)
        drawn = _list_strings() if kind is floats else _scalar_strings()

        def malformed(text):
            value = _converts(kind, text)
            return value is None or not valid(value)

        values = drawn.filter(malformed).map(tail)
    elif kind is out_dir:
        values = st.sampled_from(
            [str(ws / "file"), str(ws / "file" / "sub"), "", "  "]
        ).map(tail)
    elif kind is out_file:
        values = st.sampled_from(
            [str(ws / "emptydir"), str(ws / "file" / "sub.html"), ""]
        ).map(tail)
    elif kind is run_dir_arg:
        values = st.sampled_from(
            [
                str(ws / "nope"),
                str(ws / "file"),
                "",
                str(ws / "emptydir"),
                str(ws / "badjson"),
                str(ws / "notobject"),
            ]
        ).map(tail)
    elif kind is Path and flag == "--config":
        values = st.sampled_from(
            [
                str(ws / "nope.json"),
                str(ws / "emptydir"),
                "",
                str(ws / "file"),
                str(ws / "badjson" / "config.json"),
                str(ws / "notobject/config.json"),
            ]
        ).map(tail)
    elif kind is str and flag == "--data":  # 'markov' or a readable, non-empty text
        values = st.sampled_from(
            [
                str(ws / "nope.txt"),
                "",
                str(ws / "emptydir"),
                str(ws / "empty.txt"),
                "MARKOV",
                "wikitext",
            ]
        ).map(tail)
    elif kind is str and flag == "--corpus":
        values = st.sampled_from(
            [
                str(ws / "nope.txt"),
                "",
                str(ws / "emptydir"),
                str(ws / "empty.txt"),
                str(ws / "file"),
                "wikitext",
                "tinystories",
            ]
        ).map(tail)
    elif kind is str and flag == "--tokenizer-file":  # not a file, or not for word
        values = st.sampled_from(
            [str(ws / "nope.json"), str(ws / "emptydir"), "", str(ws / "file")]
        ).map(tail)
    elif kind is str and flag == "--track":  # tokens the corpus does not have
        word = st.text(alphabet="bdefgkqvwxyz", min_size=1, max_size=6)
        values = (
            st.lists(word, min_size=1, max_size=3)
            .filter(lambda words: not set(words) & set(CORPUS_WORDS))
            .map(",".join)
            .map(tail)
        )
    elif kind is coordinator_address:  # not HOST:PORT (port 1..65535) or auto
        values = st.one_of(
            st.sampled_from(
                [
                    "",
                    " ",
                    "localhost",
                    "localhost:",
                    ":1234",
                    "host:0",
                    "host:65536",
                    "host:12a",
                    "host:-1",
                    "a b:1",
                    "AUTO",
                ]
            ),
            _TEXT.filter(lambda v: _converts(coordinator_address, v) is None),
        ).map(tail)
    elif kind is str and (command, flag) in NAMES:
        known = NAMES[command, flag]
        bad = st.one_of(_TEXT, st.sampled_from([k.upper() for k in known] + [""]))
        values = bad.filter(lambda v: v not in known).map(tail)
    else:
        pytest.fail(
            f"no fuzz strategy for {command} {flag or action.dest} (type {kind!r}): "
            "add one to tests/test_cli_fuzz.py"
        )
    return st.tuples(st.one_of(values, missing), st.just(names))


# -- the workspace -------------------------------------------------------------------


class Accepted(Exception):
    """A malformed value got past validation: the command started its run."""


def _refuse_to_run(*args, **kwargs):
    raise Accepted("the command started its run: the malformed value was accepted")


# What each command runs once its settings are validated: while fuzzing, reaching one
# fails the example at once (instead of after a compilation and a run).
RUNS = [
    ("gflow.runs.flow_run", "run_flow"),
    ("gflow.runs.sweep_run", "run_sweep_members"),
    ("gflow.dynamics.optimizer_run", "run_optimizer"),
    ("gflow.runs.text.run", "run_text"),
    ("gflow.runs.train.run", "run_train"),
]


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """Files the strategies point at; the working directory while fuzzing (a default
    run directory, were one made, lands here). The commands' runs are replaced by
    `_refuse_to_run`."""
    ws = tmp_path_factory.mktemp("fuzz")
    rng = __import__("random").Random(0)
    (ws / "corpus.txt").write_text(
        " ".join(" ".join(rng.choices(CORPUS_WORDS, k=6)) + "." for _ in range(60))
    )
    (ws / "file").write_text("keep me")
    (ws / "empty.txt").write_text("")
    (ws / "emptydir").mkdir()
    (ws / "badjson").mkdir()
    (ws / "badjson" / "config.json").write_text("{t1: 3")
    (ws / "notobject").mkdir()
    (ws / "notobject" / "config.json").write_text("[1, 2]")
    (ws / "rundir").mkdir()
    (ws / "rundir" / "config.json").write_text(json.dumps({"command": "flow"}))
    with pytest.MonkeyPatch.context() as mp:
        for module, name in RUNS:
            mp.setattr(f"{module}.{name}", _refuse_to_run)
        mp.chdir(ws)
        yield ws


def _snapshot(ws):
    return {
        str(p.relative_to(ws)): p.stat().st_size if p.is_file() else None
        for p in ws.rglob("*")
        if not p.relative_to(ws).parts[0].startswith(("out-", "cfg-"))
    }


def _run(argv):
    """(exit status, stderr) of ``gflow.cli.main.main(argv)`` in process."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        status = main(argv)
    return status, err.getvalue()


_counter = iter(range(10**9))


def _check_refused(ws, argv, names, out):
    before = _snapshot(ws)
    status, err = _run(argv)
    lines = err.strip().splitlines()
    assert status == 2, (argv, status, err)
    assert "Traceback" not in err, err
    assert len(lines) == 1, (argv, err)
    line = lines[0]
    assert re.match(r"gflow( \w+)?: error: ", line), line
    assert any(name in line for name in names), (argv, line, names)
    assert not out.exists() or not any(out.iterdir()), (argv, list(out.iterdir()))
    assert _snapshot(ws) == before, argv  # nothing else written or changed


def _sampled(items, keep_every=6):
    """Every ``keep_every``-th item (and each command's first) in the default run,
    the rest marked slow: the whole fuzz took a quarter of the default suite's
    3 minutes; CI runs it all in a slow step."""
    seen, out = set(), []
    for i, item in enumerate(items):
        command = item[0]
        fast = i % keep_every == 0 or command not in seen
        seen.add(command)
        marks = () if fast else (pytest.mark.slow,)
        out.append(pytest.param(item, marks=marks, id=_id(item)))
    return out


@pytest.mark.parametrize("item", _sampled(ACTIONS))
def test_malformed_option_value_is_one_line_exit_2(ws, item):
    command, action = item
    strategy = _strategy(command, action, ws)

    @FUZZ
    @given(drawn=strategy)
    def check(drawn):
        tail, names = drawn
        out = ws / f"out-{next(_counter)}"
        base = _base(command, ws)
        if action.option_strings and action.option_strings[-1] == "--resume":
            argv = [command, *tail]  # --resume refuses other settings
        elif command in ("", "report"):
            argv = [*tail, *base] if command == "" else [*base, *tail]
            if not action.option_strings:  # report's RUN_DIR replaces the base's
                argv = ["report", *tail]
        else:
            argv = [*base, "--out", str(out), *tail]
        _check_refused(ws, ["--quiet", *argv], names, out)

    check()


# -- config files --------------------------------------------------------------------

# Valid values of config fields, for drawing out-of-range ones (keys: field, or
# (class name, field)); a numeric field's default is a finite number > 0 / an integer
# >= 1, and a text field without an entry here fails the test.
FIELD_VALID = {
    "pi": VALID["flow", "--pi"],
    "lam": _unit,
    "beta": _unit,
    "eps": lambda x: math.isfinite(x) and x >= 0,
    "atol": VALID["flow", "--atol"],
    "seed": VALID["*", "--seed"],
    "num_saves": VALID["*", "--num-saves"],
    "solver": lambda s: s in SOLVERS and s not in NO_ERROR_ESTIMATE,
    "optimizer": lambda s: s in OPTIMIZERS,
    "reference": lambda s: s in ("flow", "modified"),
    "lrs": lambda lrs: (
        len(lrs) >= 1
        and all(_positive(x) and x <= 60.0 for x in lrs)  # the default t1
        and len(set(lrs)) == len(lrs)
    ),
    ("SweepConfig", "t1"): lambda x: _positive(x) and x >= 0.4,  # default lrs
    # TrainConfig against its defaults: 300 steps, width 16, 2 heads, context 64
    ("TrainConfig", "data"): lambda s: s == "markov",  # a drawn path does not exist
    ("TrainConfig", "schedule"): lambda s: s in SCHEDULES,
    ("TrainConfig", "warmup"): _unit,
    ("TrainConfig", "weight_decay"): lambda x: math.isfinite(x) and x >= 0,
    ("TrainConfig", "heads"): lambda n: n in (1, 2, 4, 8, 16),
    ("TrainConfig", "d_model"): lambda n: n >= 2 and n % 2 == 0,
    ("TrainConfig", "segments"): lambda n: 1 <= n <= 300,
    ("TrainConfig", "max_len"): lambda n: n >= 64,
    ("TrainConfig", "vocab_size"): lambda n: n >= 2,  # with the word tokeniser
    ("TrainConfig", "tokenizer"): lambda s: s in TOKENIZER_NAMES,  # vocab_size 64 fits
    ("TrainConfig", "whitespace"): lambda s: s in WHITESPACE_MODES,
    ("TrainConfig", "model"): lambda s: s == "transformer",  # two layers, two heads
    ("TrainConfig", "method"): lambda s: s in TRAINING,  # flow: float64 by itself
    ("TrainConfig", "batch"): lambda n: n >= 0,  # 0: full batch (adamw has one)
    ("TrainConfig", "rtol"): _positive,
    # TextConfig (a run's config.json, for --resume) against its defaults: the word
    # tokeniser, the one-layer model, GD and full-batch Adam
    ("TextConfig", "corpus"): lambda s: s != "",  # a missing file fails later
    ("TextConfig", "tokenizer"): lambda s: s in TOKENIZER_NAMES,
    ("TextConfig", "whitespace"): lambda s: s in WHITESPACE_MODES,
    ("TextConfig", "tokenizer_file"): lambda s: False,  # only with bpe / unigram
    ("TextConfig", "method"): lambda s: s in METHODS,
    ("TextConfig", "model"): lambda s: s in MODELS,
    ("TextConfig", "optimizer"): lambda s: s in OPTIMIZER_NAMES,
    ("TextConfig", "schedule"): lambda s: s in SCHEDULES,
    ("TextConfig", "warmup"): _unit,
    ("TextConfig", "atol"): _positive,
    ("TextConfig", "final_lr"): lambda x: math.isfinite(x) and x >= 0,
    ("TextConfig", "weight_decay"): lambda x: math.isfinite(x) and x >= 0,
    ("TextConfig", "clip"): lambda x: math.isfinite(x) and x >= 0,
    ("TextConfig", "opt_steps"): lambda n: n >= 0,
    ("TextConfig", "batch"): lambda n: n >= 0,
    ("TextConfig", "num_queries"): lambda n: n >= 0,
    ("TextConfig", "row_windows"): lambda n: n >= 0,
    ("TextConfig", "sharpness_checks"): lambda n: n >= 0,
    ("TextConfig", "seeds"): lambda n: 1 <= n <= 2**32,
    ("TextConfig", "layers"): lambda n: n == 1,
    ("TextConfig", "heads"): lambda n: n == 1,
    ("TextConfig", "d_ff"): lambda n: False,  # a part of --model transformer only
    ("TextConfig", "track"): lambda v: all(isinstance(x, str) for x in v),
}
_JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    _TEXT,
)
_JSON = st.recursive(
    _JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(_TEXT, inner, max_size=3)
    ),
    max_leaves=6,
)


def _optional(hint):
    """``X`` for ``X | None``, else None."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and (
        type(None) in args
    ):
        (inner,) = [a for a in args if a is not type(None)]
        return inner
    return None


def _wrong_type(hint):
    """JSON values that are not of the field type ``hint``."""
    if _optional(hint) is not None:
        return _wrong_type(_optional(hint)).filter(lambda v: v is not None)
    if hint is bool:
        return _JSON.filter(lambda v: not isinstance(v, bool))
    if hint is int:
        return _JSON.filter(lambda v: not isinstance(v, int) or isinstance(v, bool))
    if hint is float:
        return _JSON.filter(
            lambda v: not isinstance(v, (int, float)) or isinstance(v, bool)
        )
    if hint is str:
        return _JSON.filter(lambda v: not isinstance(v, str))
    if typing.get_origin(hint) is tuple or dataclasses.is_dataclass(hint):
        ok = (list,) if typing.get_origin(hint) is tuple else (dict,)
        bad_list = st.lists(_JSON_SCALARS, min_size=1, max_size=3).filter(
            lambda v: any(
                not isinstance(x, (int, float)) or x is True or x is False for x in v
            )
        )
        return st.one_of(_JSON.filter(lambda v: not isinstance(v, ok)), bad_list)
    pytest.fail(f"no wrong-type strategy for {hint!r}")


def _out_of_range(cls, name, hint):
    """JSON values of the field's type that the configuration must refuse."""
    hint = _optional(hint) or hint  # None is valid; the values of X are drawn
    valid = (
        FIELD_VALID.get((cls.__name__, name))
        or FIELD_VALID.get(name)
        or {float: _positive, int: lambda n: n >= 1}.get(hint)
    )
    if hint is bool or dataclasses.is_dataclass(hint):
        return st.nothing()  # every value of the right type is valid
    if valid is None:
        pytest.fail(f"no valid range for config field {name}: add it to FIELD_VALID")
    if hint is str:
        values = _TEXT
    elif typing.get_origin(hint) is tuple:
        values = st.lists(
            st.floats(allow_nan=True, allow_infinity=True) | st.integers(-3, 3),
            max_size=5,
        )
    elif hint is int:
        values = st.integers(-(2**70), 2**70) | st.sampled_from([0, -1, 1, 2**32])
    else:
        values = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
            [0, -1, 0.0, -0.0, float("nan"), float("inf"), -1e-300]
        )
    return values.filter(lambda v: not valid(v))


def _config_documents(cls):
    """(JSON text, words that may name the problem) for malformed configs of cls."""
    hints = typing.get_type_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls)]

    def field_doc(name, value, nested=None):
        doc = {name: value}
        if cls is TextConfig and name != "corpus":  # the one setting without default
            doc = {"corpus": "corpus.txt", **doc}
        if nested:  # a nested FlowConfig field of a SweepConfig
            doc = {nested: doc}
        return json.dumps({"config": doc}), {name, nested or name}

    field = st.sampled_from(fields)
    wrong = field.flatmap(
        lambda n: _wrong_type(hints[n]).map(lambda v: field_doc(n, v))
    )
    ranged = field.flatmap(
        lambda n: _out_of_range(cls, n, hints[n]).map(lambda v: field_doc(n, v))
    )
    unknown = _TEXT.filter(lambda k: k not in fields and k != "config").map(
        lambda k: (json.dumps({k: 1}), {k})
    )
    not_json = st.one_of(
        st.sampled_from(["", "{", "{t1: 3}", "[1,", "{'t1': 3}", "t1=3", "\x00"]),
        _TEXT,
    ).filter(lambda t: not _parses(t))
    not_object = _JSON.filter(lambda v: not isinstance(v, dict)).map(
        lambda v: (json.dumps(v), set())
    )
    docs = [wrong, ranged, unknown, not_json.map(lambda t: (t, set())), not_object]
    nested = [
        f.name
        for f in dataclasses.fields(cls)
        if dataclasses.is_dataclass(hints[f.name])
    ]
    for outer in nested:
        inner_cls = hints[outer]
        inner = typing.get_type_hints(inner_cls)
        inner_fields = [f.name for f in dataclasses.fields(inner_cls)]
        docs.append(
            st.sampled_from(inner_fields).flatmap(
                lambda n, outer=outer, inner=inner, inner_cls=inner_cls: st.one_of(
                    _wrong_type(inner[n]), _out_of_range(inner_cls, n, inner[n])
                ).map(lambda v: field_doc(n, v, nested=outer))
            )
        )
    return st.one_of(*docs)


def _parses(text):
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


@pytest.mark.parametrize(
    "command, option, cls",
    [
        ("flow", "--config", FlowConfig),
        pytest.param("flow", "--resume", FlowConfig, marks=pytest.mark.slow),
        pytest.param("sweep", "--resume", SweepConfig, marks=pytest.mark.slow),
        ("train", "--resume", TrainConfig),
        pytest.param("text", "--resume", TextConfig, marks=pytest.mark.slow),
    ],
)
def test_malformed_config_file_is_one_line_exit_2(ws, command, option, cls):
    @settings(FUZZ, max_examples=50)
    @given(doc=_config_documents(cls))
    def check(doc):
        text, names = doc
        run = ws / f"cfg-{next(_counter)}"
        run.mkdir()
        (run / "config.json").write_text(text)
        out = ws / f"out-{next(_counter)}"
        if option == "--config":  # no other settings: options override the file
            argv = [command, "--out", str(out), "--config", str(run / "config.json")]
        else:
            argv = [command, "--resume", str(run)]
        _check_refused(ws, ["--quiet", *argv], {option, *names}, out)
        assert sorted(p.name for p in run.iterdir()) == ["config.json"]

    check()


def test_every_command_and_option_is_fuzzed():
    """The discovery above sees every command, and each option has a strategy."""
    commands = {command for command, _ in ACTIONS}
    assert commands == {"", "flow", "sweep", "compare", "text", "train", "report"}
    assert len(ACTIONS) > 60
