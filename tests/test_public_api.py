"""Every public name is exercised: the guard, and oracle tests for names no other
test file used.

The guard reads the exports (``__all__`` of ``gflow`` and of each sub-package) and
fails for a name that no test file imports from gflow (or reaches as ``gflow.X`` /
``module.X``) and then uses outside the import: add a test that checks its effect.
"""

import ast
import dataclasses
import importlib
import json
import pkgutil
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gflow
from gflow import (
    AttentionModel,
    FlowReference,
    GradientField,
    MarkovChain,
    ModifiedFlowReference,
    attention_entropy,
    population_logits,
    population_loss,
    singular_values,
    stationary_distribution,
)
from gflow.dynamics import StepClock, run_core
from gflow.dynamics.references import at_times, evaluate_along, union_times
from gflow.dynamics.solvers import RKC2, RKCState
from gflow.text import HUB_CORPORA, TOKENIZERS, load_corpus, query_rows

TESTS = Path(__file__).parent


def _exports() -> dict[str, set[str]]:
    """module name -> its ``__all__``, for gflow and every sub-package."""
    out = {"gflow": set(gflow.__all__)}
    for info in pkgutil.walk_packages(gflow.__path__, "gflow."):
        if info.ispkg:
            module = importlib.import_module(info.name)
            out[info.name] = set(getattr(module, "__all__", ()))
    return out


def _used_names(tree: ast.Module) -> set[str]:
    """Names a test file imports from gflow and then uses (or reaches as attributes).

    ``from gflow... import X`` followed by a use of ``X``, or ``gflow.X`` /
    ``alias.X`` for an imported gflow module, counts; the import alone does not.
    """
    imported, module_aliases = {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gflow"):
            for a in node.names:
                imported[a.asname or a.name] = a.name
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("gflow"):
                    module_aliases.add((a.asname or a.name).split(".")[0])
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in imported:
            used.add(imported[node.id])
        elif isinstance(node, ast.Attribute):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and (
                root.id in module_aliases or root.id in imported
            ):
                used.add(node.attr)
    return used


def test_every_export_is_used_by_a_test():
    used = set()
    for path in TESTS.glob("test_*.py"):
        used |= _used_names(ast.parse(path.read_text()))
    missing = {
        module: sorted(names - used)
        for module, names in _exports().items()
        if names - used
    }
    assert not missing, f"exports that no test uses (add a test of each): {missing}"


def test_the_guard_sees_uses_and_ignores_bare_imports():
    tree = ast.parse(
        "from gflow import a, b\nimport gflow.text as gt\nimport gflow\n"
        "a(1)\ngt.c\ngflow.solvers.d()\n"
    )
    assert _used_names(tree) == {"a", "c", "d", "solvers"}


# --- oracle tests for names no other test file used ---------------------------------


@pytest.fixture(scope="module")
def small():
    chain = MarkovChain.from_lambda(pi=(0.6, 0.3, 0.1), lam=0.5)
    model = AttentionModel.init(
        d_vocab=3, d_model=3, init_scale=0.7, key=jax.random.key(3)
    )
    return chain, model


def _numpy_attention(model, pi):
    phi = np.asarray(model.Phi) * model.tau
    w = np.asarray(pi)[None, :] * np.exp(phi - phi.max(axis=1, keepdims=True))
    return w / w.sum(axis=1, keepdims=True)


def test_stationary_distribution_of_a_two_state_chain():
    a, b = 0.3, 0.1  # P(0 -> 1) = a, P(1 -> 0) = b: π = (b, a) / (a + b)
    pi = stationary_distribution(np.array([[1 - a, a], [b, 1 - b]]))
    np.testing.assert_allclose(pi, [0.25, 0.75], rtol=1e-12)
    with pytest.raises(ValueError, match="reducible"):
        stationary_distribution(np.eye(2))


def test_singular_values_match_numpy_in_decreasing_order():
    W = np.random.default_rng(0).normal(size=(4, 3))
    np.testing.assert_allclose(
        singular_values(jnp.asarray(W)), np.linalg.svd(W, compute_uv=False), rtol=1e-12
    )
    # a constructed rank-one matrix has one nonzero singular value, |u| |v|
    u, v = np.arange(1.0, 5.0), np.array([2.0, 0.0, 1.0])
    sv = np.asarray(singular_values(jnp.asarray(np.outer(u, v))))
    assert sv[0] == pytest.approx(np.linalg.norm(u) * np.linalg.norm(v), rel=1e-12)
    np.testing.assert_allclose(sv[1:], 0.0, atol=1e-12)


def test_attention_entropy_against_numpy_and_at_uniform_scores(small):
    chain, model = small
    a = _numpy_attention(model, chain.pi)
    expected = -np.sum(chain.pi * np.sum(a * np.log(a), axis=1))
    assert float(attention_entropy(model, chain.pi)) == pytest.approx(expected, 1e-12)
    # with W_A = 0 every query's attention is π itself: the entropy is H(π)
    flat = eqx.tree_at(lambda m: m.W_Q, model, jnp.zeros_like(model.W_Q))
    h_pi = -np.sum(chain.pi * np.log(chain.pi))
    assert float(attention_entropy(flat, chain.pi)) == pytest.approx(h_pi, 1e-12)


def test_population_logits_are_attention_weighted_rows_of_M(small):
    chain, model = small
    a = _numpy_attention(model, chain.pi)
    M = np.asarray(model.M)
    np.testing.assert_allclose(population_logits(model, chain.pi), a @ M, rtol=1e-10)
    res = AttentionModel(model.W_E, model.W_Q, model.W_K, model.W_P, residual=True)
    np.testing.assert_allclose(population_logits(res, chain.pi), a @ M + M, rtol=1e-10)
    # and the population loss is their cross-entropy against P, weighted by π
    f = a @ M
    logp = f - np.log(np.exp(f).sum(axis=1, keepdims=True))
    expected = -np.sum(chain.pi[:, None] * np.asarray(chain.P) * logp)
    assert float(population_loss(model, chain)) == pytest.approx(expected, rel=1e-10)


def test_gradient_field_is_minus_the_finite_difference_gradient(small):
    chain, model = small
    params, static = eqx.partition(model, eqx.is_inexact_array)
    field = GradientField(lambda m: population_loss(m, chain), static)
    v = field(0.0, params, None)
    h = 1e-6
    for i in [(0, 0), (1, 2), (2, 1)]:

        def at(x, i=i):
            return float(population_loss(eqx.combine(x, static), chain))

        plus = eqx.tree_at(lambda p: p.W_E, params, params.W_E.at[i].add(h))
        minus = eqx.tree_at(lambda p: p.W_E, params, params.W_E.at[i].add(-h))
        fd = (at(plus) - at(minus)) / (2 * h)
        assert float(v.W_E[i]) == pytest.approx(-fd, rel=1e-6, abs=1e-9)


class _Quadratic(eqx.Module):
    """L = ½ Σ_ij a_ij W_E[i, j]², a diagonal quadratic in W_E only."""

    a: jax.Array

    def __call__(self, model):
        return 0.5 * jnp.sum(self.a * model.W_E**2)


@pytest.mark.slow  # in CI's slow run (.ci/run): keeps the default suite under 3 min
def test_flow_and_modified_flow_references_are_the_closed_forms(small):
    """Flow: W(t) = e^{-a t} W(0); GD's modified flow: e^{-(a + η a²/2) t} W(0)."""
    _, model = small
    a = jnp.asarray(np.linspace(0.5, 2.0, model.W_E.size).reshape(model.W_E.shape))
    loss = _Quadratic(a)
    w0 = np.asarray(model.W_E)
    lrs = np.array([0.2, 0.1])
    times = [np.arange(6) * lr for lr in lrs]
    for ref, rate in (
        (FlowReference(), lambda lr: a),
        (ModifiedFlowReference(), lambda lr: a + 0.5 * lr * a**2),
    ):
        trajs = ref.solve(loss, model, times, lrs)
        assert len(trajs) == 2
        for tr, t, lr in zip(trajs, times, lrs):
            np.testing.assert_allclose(tr.t, t)
            expected = np.exp(-np.asarray(rate(lr))[None] * t[:, None, None]) * w0
            np.testing.assert_allclose(tr.params.W_E, expected, rtol=1e-8)
            # the reference records the original loss, not the modified one
            np.testing.assert_allclose(
                tr.metrics["loss"],
                0.5 * np.sum(a * expected**2, axis=(1, 2)),
                rtol=1e-8,
            )
            np.testing.assert_array_equal(tr.params.W_Q[-1], model.W_Q)


def test_member_mesh_spans_the_local_devices_on_one_axis():
    mesh = gflow.member_mesh()
    assert mesh.axis_names == ("members",)
    assert list(mesh.devices.ravel()) == jax.devices()
    assert gflow.member_mesh(jax.devices()[:1]).size == 1


def test_rkc_state_after_the_cold_start():
    """init runs ``init_power_iters`` products (2 evaluations each) and f(y0): ρ of
    f(y) = -A y with A = diag(1, 4, 9) is 9, and f0 is -A y0."""
    import diffrax

    A = jnp.asarray([1.0, 4.0, 9.0])
    term = diffrax.ODETerm(lambda t, y, args: -A * y)
    y0 = jnp.asarray([1.0, 1.0, 1.0])
    state = RKC2(init_power_iters=60).init(term, 0.0, 1.0, y0, None)
    assert isinstance(state, RKCState)
    assert float(state.rho) == pytest.approx(9.0, rel=1e-6)
    assert int(state.num_evals) == 1 + 2 * 60
    np.testing.assert_allclose(state.f0, -A * y0)
    assert int(state.max_stages) == 0


def test_hub_corpora_refuse_to_download_unless_asked():
    assert {"wikitext", "tinystories"} <= set(HUB_CORPORA)
    for name in HUB_CORPORA:
        with pytest.raises(ValueError, match="download=True") as e:
            load_corpus(name)
        assert "\n" not in str(e.value)


def test_tokenizer_table_splits_as_named():
    text = "The cat, the Cat."
    assert TOKENIZERS["word"](text) == ["The", "cat", ",", "the", "Cat", "."]
    assert TOKENIZERS["word-lower"](text) == ["the", "cat", ",", "the", "cat", "."]
    assert TOKENIZERS["byte"]("a b") == ["a", "<0x20>", "b"]
    assert TOKENIZERS["byte"]("é") == ["<0xc3>", "<0xa9>"]


def test_query_rows_average_the_windows_of_each_query():
    w = jnp.asarray([[1.0, 0.0], [0.0, 1.0], [0.2, 0.8]])  # [n windows, d]
    contexts = jnp.asarray([[0, 2], [1, 2], [2, 0]])  # last tokens 2, 2, 0
    rows = np.asarray(query_rows(w, contexts, jnp.asarray([2, 0, 1])))
    np.testing.assert_allclose(rows[0], [0.5, 0.5])  # mean of windows 0 and 1
    np.testing.assert_allclose(rows[1], [0.2, 0.8])  # window 2 alone
    assert np.all(np.isnan(rows[2]))  # no window ends in token 1


def test_sub_packages_are_reached_as_attributes():
    """``gflow.text`` and ``gflow.dynamics.references`` are the packages themselves,
    their names the ones the modules define."""
    assert gflow.text is importlib.import_module("gflow.text")
    assert gflow.text.Vocabulary.__module__ == "gflow.text.tokenize"
    references = importlib.import_module("gflow.dynamics.references")
    assert gflow.dynamics.references is references
    assert references.FlowReference is FlowReference


def test_union_times_merge_round_off_and_at_times_restrict_to_a_member():
    union = union_times([np.arange(4) * 0.1, np.array([0.0, 0.1 + 0.2, 0.6])])
    np.testing.assert_allclose(union, [0.0, 0.1, 0.2, 0.3, 0.6])
    assert len(union) == 5  # 0.1 + 0.2 and 3 * 0.1 differ by round-off only
    w = np.arange(5.0)[:, None] * np.ones((5, 2))  # [n, 2]: row i is i
    traj = gflow.Trajectory(
        t=union, metrics={"loss": np.arange(5.0)}, final=None, params={"w": w}
    )
    member = at_times(traj, union, np.array([0.0, 0.3, 0.6]))
    np.testing.assert_array_equal(member.metrics["loss"], [0.0, 3.0, 4.0])
    np.testing.assert_array_equal(member.params["w"][:, 0], [0.0, 3.0, 4.0])
    np.testing.assert_allclose(member.t, [0.0, 0.3, 0.6])


def test_evaluate_along_recomputes_the_loss_and_gradient_norm_of_each_snapshot():
    w = jnp.asarray([[3.0, 4.0], [0.0, 1.0]])  # two snapshots [n, 2]
    traj = gflow.Trajectory(
        t=np.array([0.0, 1.0]),
        metrics={"loss": np.zeros(2)},
        final=None,
        params={"w": w},
    )
    out = evaluate_along(traj, lambda m: 0.5 * jnp.sum(m["w"] ** 2))
    np.testing.assert_allclose(out.metrics["loss"], [12.5, 0.5])
    np.testing.assert_allclose(out.metrics["grad_norm"], [5.0, 1.0])  # |∇L| = |w|
    with pytest.raises(ValueError, match="save_params"):
        evaluate_along(dataclasses.replace(traj, params=None), lambda m: 0.0)


def test_run_core_with_a_constant_clock_is_gradient_descent_in_closed_form():
    """L = ½ a w²: w_k = (1 − η a)^k w_0 and t_k = k η; saves every 2 steps."""
    import optax

    a, eta, w0 = 2.0, 0.1, jnp.asarray([1.0, -2.0])
    t, metrics, snaps, final, bad = run_core(
        w0,
        None,
        optax.sgd(eta).init(w0),
        lambda w: 0.5 * a * jnp.sum(w**2),
        optax.sgd(eta),
        StepClock(eta),
        None,
        steps=6,
        save_every=2,
        save_params=True,
        blowup=1e6,
    )
    np.testing.assert_allclose(t, [0.0, 0.2, 0.4, 0.6], rtol=1e-12)
    k = np.array([0, 2, 4, 6])
    expected = (1 - eta * a) ** k[:, None] * np.asarray(w0)
    np.testing.assert_allclose(snaps, expected, rtol=1e-12)
    np.testing.assert_allclose(final, expected[-1], rtol=1e-12)
    np.testing.assert_allclose(metrics["loss"], 0.5 * a * (expected**2).sum(1))
    assert int(bad) == -1
    # a schedule is called with the step; None reads the injected learning rate
    assert StepClock(lambda k: 0.5 / (k + 1))(jnp.asarray(3), None) == 0.125
    state = optax.inject_hyperparams(optax.sgd)(learning_rate=0.3).init(w0)
    assert float(StepClock()(jnp.asarray(0), state)) == pytest.approx(0.3)


def test_text_figures_are_drawn_from_the_saved_files(tmp_path):
    """``plot_attention_rows`` and ``plot_text_summary`` read only the run's files
    (written here by hand): a PNG each, under the names ``gflow text`` uses, and no
    figure left open."""
    from gflow.plotting import plot_attention_rows, plot_text_summary, plt
    from gflow.runs import write_json

    n, d = 4, 3
    write_json(tmp_path / "vocab.json", [{"token": s} for s in ("a", "b", "c")])
    write_json(tmp_path / "config.json", {"queries": ["b"], "top": ["a"]})
    write_json(tmp_path / "gd.json", {"status": "success"})
    rows = np.full((n, 1, d), 1 / d)
    np.savez(tmp_path / "gd_rows.npz", t=np.arange(n), rows=rows, queries=[1])
    metrics = dict(
        t=np.arange(n),
        loss=np.linspace(1, 0.5, n),
        attention_entropy=np.ones(n),
        query_entropy=np.ones((n, 1)),
        query_on_top1=np.full((n, 1), 0.3),
        query_on_self=np.full((n, 1), 0.2),
        sv_W_E=np.ones((n, 2)),
    )
    np.savez(tmp_path / "gd_metrics.npz", **metrics)
    rows_png = plot_attention_rows(tmp_path, "gd")
    summary_png = plot_text_summary(tmp_path, ["gd"])
    assert rows_png == tmp_path / "attention_rows_gd.png"
    assert summary_png == tmp_path / "text_summary.png"
    for path in (rows_png, summary_png):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plt.get_fignums() == []


@pytest.mark.slow  # plot_monitor's default test is in test_figures_render.py (3.6 s)
def test_monitor_figure_of_a_short_monitored_run(tmp_path):
    from gflow.plotting import plot_monitor

    chain = MarkovChain.from_lambda(pi=(0.6, 0.3, 0.1), lam=0.5)
    model = AttentionModel.init(d_vocab=3, d_model=4, key=jax.random.key(0))
    probe = chain.sample(key=jax.random.key(1), batch=8, length=6)
    with gflow.Monitor(tmp_path / "mon", every=1, verbose=False) as mon:
        for step in range(3):
            mon.observe(step, model, probe, t=0.5 * step)
    out = plot_monitor(tmp_path / "mon")
    assert out == tmp_path / "mon" / "monitor.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- gflow.runs, gflow.runs.text and gflow.runs.train -------------------------------


def test_json_files_round_trip_and_a_torn_last_line_is_dropped(tmp_path):
    from gflow.runs import complete_lines, read_json, read_jsonl, write_json

    write_json(tmp_path / "a.json", {"x": [1, 2.5], "s": "é"})
    assert read_json(tmp_path / "a.json") == {"x": [1, 2.5], "s": "é"}
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 0}\n{"step": 1}\n{"st')  # killed mid-write
    assert complete_lines(log) == ['{"step": 0}', '{"step": 1}']
    assert read_jsonl(log) == [{"step": 0}, {"step": 1}]


def test_environment_records_versions_and_this_machine(tmp_path):
    import platform

    from gflow.runs import environment, read_json, write_json

    env = environment()
    assert env.python == platform.python_version()
    assert env.devices == [str(d) for d in jax.devices()]
    assert env.versions["jax"] == jax.__version__
    assert env.x64 == bool(jax.config.jax_enable_x64)
    # written as the object of its fields, wherever a document holds it
    write_json(tmp_path / "env.json", {"environment": env})
    assert read_json(tmp_path / "env.json")["environment"] == dataclasses.asdict(env)


def test_a_name_table_checks_and_builds_by_name():
    from gflow.runs import NAMES, SOLVERS, ConfigError, NameTable

    table = NameTable("shape", {"square": lambda s: s * s, "label": None})
    assert list(table) == ["square", "label"] and len(table) == 2
    assert table.build("square", 3) == 9
    with pytest.raises(ConfigError, match="field: unknown shape 'circle'; choose "):
        table.check("field", "circle")
    with pytest.raises(TypeError, match="a name only"):
        table.build("label")
    assert NAMES["solver"] is SOLVERS


def test_a_config_made_of_settings_has_their_options_and_reads_its_json():
    from gflow.runs import AbstractConfig, ConfigError, Option, setting

    @dataclasses.dataclass(frozen=True)
    class Toy(AbstractConfig):
        rate: float = setting(0.5, "a rate")
        sizes: tuple[int, ...] = setting((1, 2), "sizes")
        hidden: str = setting("x")  # no help: not an option

        def check(self):
            if self.rate <= 0:
                raise ConfigError(f"rate: must be > 0, got {self.rate}")

    opts = Toy.options()
    assert all(isinstance(o, Option) for o in opts)
    assert [(o.path, o.flag, o.default) for o in opts] == [
        ("rate", "--rate", 0.5),
        ("sizes", "--sizes", (1, 2)),
    ]
    assert opts[1].parse("3,4") == (3, 4)
    back = Toy.from_json({"rate": 0.25, "sizes": [5]})
    assert back == Toy(rate=0.25, sizes=(5,))
    assert Toy.from_json(back.to_json()) == back
    with pytest.raises(ConfigError, match="rate: must be > 0"):
        Toy.from_json({"rate": -1.0})
    with pytest.raises(ConfigError, match="unknown settings nope"):
        Toy.from_json({"nope": 1})


def test_a_job_splits_into_its_units_and_runs_in_its_context(tmp_path):
    from gflow.runs import (
        AbstractConfig,
        AbstractJob,
        ConfigError,
        Context,
        RunDirectory,
        RunFacts,
        Units,
        setting,
    )
    from gflow.runs.train import TrainJob, TrainRun

    @dataclasses.dataclass(frozen=True)
    class N(AbstractConfig):
        n: int = setting(3, "units")

    class Count(AbstractJob):
        command, config_type, help, description, splits = "count", N, "", "", True

        def units(self, cfg):
            return Units(cfg.n, "--n")

        def plan(self, cfg):
            return cfg

        def run(self, plan, directory, context):
            return plan

        def write(self, result, directory):
            return result

        def summary(self, result):
            return f"{result.n} units"

    job = Count()
    job.check_processes(N(), 3, "--processes", resumed=False)  # one unit each
    with pytest.raises(ConfigError, match="2 process.*--n"):
        job.check_processes(N(), 5, "--processes", resumed=False)
    result = job.run(job.plan(N(n=4)), RunDirectory(tmp_path), Context())
    assert job.summary(result) == "4 units"
    assert Context().main and job.succeeded(result) and job.facts(N()) == RunFacts()
    assert TrainJob.command == "train" and TrainJob.config_type is TrainRun


def test_a_members_job_succeeds_when_every_member_did():
    from gflow.runs import Member, MembersResult
    from gflow.runs.train import TrainConfig, TrainJob

    ok = gflow.Trajectory(t=np.zeros(1), metrics={"loss": np.zeros(1)}, final=None)
    diverged = dataclasses.replace(ok, status="diverged")
    cfg = TrainConfig()
    members = [Member(f"train_s{i}", i, cfg, None, ok) for i in range(2)]
    assert TrainJob().succeeded(MembersResult(None, tuple(members)))
    members[1] = dataclasses.replace(members[1], trajectory=diverged)
    assert not TrainJob().succeeded(MembersResult(None, tuple(members)))


def _seed_stages(t0):
    from gflow.runs import StagesEntry

    entry = {
        "available": True,
        "stages": [{"stage": "focus", "t_start": t0, "t_end": t0 + 1.0}],
    }
    return StagesEntry.from_json(entry)  # a stage without a cycle is of the first


def test_stage_times_over_seeds_are_summarised_and_tabled():
    from gflow.runs import StagesEntry
    from gflow.runs.text import SeedSummary, stages_table, summarise_seeds

    unavailable = StagesEntry.from_json({"why": "nan"})
    groups = {"gd": {0: _seed_stages(1.0), 1: _seed_stages(3.0), 2: unavailable}}
    out = summarise_seeds(groups, [0, 1, 2])
    (row,) = out.runs["gd"].stages
    assert row.found == 2 and row.stage == "focus"
    assert row.t_start.per_seed == (1.0, 3.0, None)
    assert row.t_start.mean == pytest.approx(2.0)
    assert row.t_end.mean == pytest.approx(3.0)
    assert out.runs["gd"].unavailable == {"2": "nan"}
    # stages_summary.json is the summary as JSON, and reads back as it
    assert SeedSummary.from_json(json.loads(json.dumps(dataclasses.asdict(out)))) == out
    table = stages_table(out)
    assert table.splitlines()[0].startswith("stage times over 3 seeds")
    assert "2/3" in table and "2 ± " in table


def test_train_data_of_a_markov_run_has_the_held_out_sequences():
    from gflow.runs.train import TrainConfig, TrainData, prepare

    cfg = TrainConfig(eval_batch=4, seq_len=8)
    data = prepare(cfg)
    assert isinstance(data, TrainData)
    assert data.eval_tokens.shape == (4, 9)
    assert 0 <= data.eval_tokens.min() and data.eval_tokens.max() < data.d_vocab


@pytest.mark.slow  # one GD run's compilation
def test_a_text_run_by_hand_writes_the_files_gflow_text_writes(tmp_path):
    from gflow.runs import load_run
    from gflow.runs.text import (
        TextConfig,
        prepare,
        run_text,
        write_text_run,
        write_text_start,
    )
    from tests.test_text_cli import _story

    corpus = _story(tmp_path / "story.txt")
    cfg = TextConfig(
        corpus=str(corpus),
        vocab_size=12,
        context=4,
        windows=16,
        d_model=4,
        steps=4,
        opt_steps=0,
    )
    data = prepare(cfg)
    out = write_text_start(tmp_path / "run", cfg, data)
    assert (out / "config.json").exists() and (out / "vocab.json").exists()
    runs = run_text(cfg, data)
    assert [m.name for m in runs] == list(cfg.run_names(cfg.seed))
    runs = write_text_run(out, runs)
    assert all(m.stages is not None for m in runs)  # the stages.json entries
    back = load_run(out)
    for m in runs:
        np.testing.assert_allclose(
            back[m.name].metrics["loss"], m.trajectory.metrics["loss"]
        )


def test_probe_unigram_loss_is_the_add_one_unigram_of_the_contexts_on_the_last_tokens():
    """Closed form: contexts [0, 0, 1] and [0, 2, 2] over d = 4 give add-one counts
    (4, 2, 3, 1) / 10; the last tokens 1 and 3 score -(ln 0.2 + ln 0.1) / 2."""
    from gflow.monitor import probe_unigram_loss

    tokens = np.array([[0, 0, 1, 1], [0, 2, 2, 3]])
    want = -(np.log(0.2) + np.log(0.1)) / 2
    assert float(probe_unigram_loss(tokens, 4)) == pytest.approx(want, rel=1e-6)
