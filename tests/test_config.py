"""Property-based tests: every configuration either validates or names what is wrong."""

import dataclasses
import json

import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gflow.cli import UsageError, load_config_file
from gflow.runs import SOLVERS, FlowConfig

FIELDS = {f.name for f in dataclasses.fields(FlowConfig)}
anyfloat = st.floats(allow_nan=True, allow_infinity=True)


@settings(max_examples=300, deadline=None)
@given(
    t1=anyfloat,
    init_scale=anyfloat,
    lam=anyfloat,
    rtol=anyfloat,
    tau=anyfloat,
    d_model=st.integers(-3, 64),
    num_saves=st.integers(-3, 1000),
    solver=st.sampled_from([*SOLVERS, "rk99", ""]),
    pi=st.lists(st.one_of(st.floats(-1, 2), st.just(float("nan"))), max_size=6),
)
def test_flow_config_validates_or_names_the_field(
    t1, init_scale, lam, rtol, tau, d_model, num_saves, solver, pi
):
    try:
        cfg = FlowConfig(
            t1=t1,
            init_scale=init_scale,
            lam=lam,
            rtol=rtol,
            tau=tau,
            d_model=d_model,
            num_saves=num_saves,
            solver=solver,
            pi=tuple(pi),
        )
    except ValueError as e:
        msg = str(e)
        assert "\n" not in msg
        assert msg.split(":")[0].split("/")[0] in FIELDS | {"pi", "rtol"}, msg
        return
    # what validated is usable
    assert cfg.t1 > 0 and cfg.init_scale > 0 and 0 <= cfg.lam < 1 and cfg.tau > 0
    assert np.isclose(sum(cfg.pi), 1.0) and min(cfg.pi) >= 0
    assert cfg.chain().P.shape == (len(cfg.pi), len(cfg.pi))


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=40))
def test_malformed_config_files_give_one_line_usage_errors(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("cfg") / "c.json"
    path.write_text(text)
    try:
        data = load_config_file(path, FlowConfig)
    except UsageError as e:
        assert "\n" not in str(e) and str(path) in str(e)
    else:
        assert isinstance(data, dict) and set(data) <= FIELDS


def test_config_file_round_trip_and_unknown_keys(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"config": {"t1": 12.0, "lam": 0.3}}))
    assert load_config_file(path, FlowConfig) == {"t1": 12.0, "lam": 0.3}
    path.write_text(json.dumps({"t_one": 3}))
    with pytest.raises(UsageError, match="unknown settings t_one"):
        load_config_file(path, FlowConfig)
    with pytest.raises(UsageError, match="cannot read"):
        load_config_file(tmp_path / "missing.json", FlowConfig)


@pytest.mark.parametrize("lr", [0.0, -0.1])
def test_non_positive_step_sizes_are_refused(lr):
    import jax

    from gflow import AttentionModel, MarkovChain, PopulationLoss, run_optimizer

    model = AttentionModel.init(d_vocab=3, d_model=2, key=jax.random.key(0))
    loss = PopulationLoss(MarkovChain.from_lambda(pi=(0.5, 0.3, 0.2), lam=0.5))
    with pytest.raises(ValueError, match="learning_rate must be positive"):
        run_optimizer(
            loss, model, optax.inject_hyperparams(optax.sgd)(learning_rate=lr), steps=3
        )
    with pytest.raises(ValueError, match="learning_rate must be positive"):
        run_optimizer(loss, model, optax.sgd(0.1), steps=3, learning_rate=lr)


def test_a_flow_that_cannot_fit_in_memory_is_refused_up_front(monkeypatch):
    """Issue 33 point 2: ``--d-model 100000000`` hung before any progress; the
    estimate (oracle: the parameter count by hand) refuses it naming the option."""
    from gflow.runs import ConfigError

    cfg = FlowConfig()  # d = 4, m = 32: W_E, W_P 4·32 each, W_Q, W_K 32·32 each
    assert cfg.parameter_count() == 2 * 4 * 32 + 2 * 32 * 32
    assert FlowConfig(factorised=False).parameter_count() == 2 * 4 * 32 + 32 * 32
    want = 8 * cfg.parameter_count() * (FlowConfig.working_copies + cfg.num_saves)
    assert cfg.memory_bytes() == want
    lean = FlowConfig(save_params=False, x64=False)
    assert lean.memory_bytes() == 4 * cfg.parameter_count() * FlowConfig.working_copies
    with pytest.raises(ConfigError, match=r"d_model: .* GiB .*--d-model"):
        FlowConfig(d_model=100_000_000)
    with pytest.raises(ConfigError, match=r"num_saves: .* GiB"):
        FlowConfig(num_saves=100_000_000)
    # the machine's size decides: a 1 MiB machine refuses the default flow too
    memory = "gflow.runs.flow_run._physical_memory"
    monkeypatch.setattr(memory, lambda: 2**20)
    with pytest.raises(ConfigError, match="num_saves"):
        FlowConfig()
    monkeypatch.setattr(memory, lambda: None)  # unknown: it runs
    FlowConfig(d_model=100_000_000)


def test_euler_is_refused_up_front_in_one_line(capsys, tmp_path):
    """Diffrax's Euler has no error estimate: ``gflow flow --solver euler`` ended in
    a RuntimeError traceback from inside the solve; it is refused before any work,
    naming the solvers that have one."""
    from gflow.cli import main
    from gflow.runs import ConfigError

    with pytest.raises(ConfigError, match="solver: euler has no error estimate"):
        FlowConfig(solver="euler")
    FlowConfig(solver="heun")  # its neighbour with an estimate is accepted
    out = tmp_path / "run"
    assert main(["flow", "--solver", "euler", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "heun" in err[0] and not out.exists()
