"""gflow.Monitor (issue 15): the default Markov GD run seen online (focus inside the
flow's window), agreement with the offline rules, every attending model, the files
(incremental, surviving SIGKILL, resumable), callbacks, TensorBoard and the report."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gflow
from gflow import AttentionModel, MarkovChain, Monitor, Transformer
from gflow.analysis import HeadObservables
from gflow.monitor import read_rows

CHAIN = MarkovChain.default()
ETA = 0.25
#: The default flow's focus window: the rise of the π-weighted excess on the top
#: token (docs/stage_rules.md); the entropy fall the rule read before is [62, 94]
#: (docs/markov_cycle.md).
DOCUMENTED_FOCUS = (58.5, 88.5)


@eqx.filter_jit
def _gd_step(model):
    grads = jax.grad(gflow.population_loss)(model, CHAIN)
    return jax.tree.map(lambda p, g: p - ETA * g, model, grads)


def _probe(batch=128, seed=1):
    return CHAIN.sample(key=jax.random.key(seed), batch=batch, length=33)


def _init():
    return AttentionModel.init(d_vocab=4, d_model=32, key=jax.random.key(0))


def _markov_gd(monitor, t1, *, start=0, observe_from=0):
    """The default Markov GD run (η = 0.25, population loss) to ``t1`` with the
    monitor observing from step ``observe_from`` on."""
    model, probe = _init(), _probe()
    for k in range(int(round(t1 / ETA)) + 1):
        if k >= observe_from:
            monitor.observe(k, model, probe, t=k * ETA)
        model = _gd_step(model)
    return model


@pytest.fixture(scope="module")
def flow_focus():
    """The focus window of the default flow itself (Tsit5, StageObservables)."""
    traj = gflow.solve_flow(
        gflow.PopulationLoss(CHAIN),
        _init(),
        t1=200.0,
        ts=np.linspace(0, 200, 401),
        observables=gflow.StageObservables(CHAIN),
    )
    (focus,) = [s for s in gflow.detect_stages(traj) if s.name == "focus"]
    return focus.t_start, focus.t_end


@pytest.fixture(scope="module")
def markov_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("mon") / "markov"
    with Monitor(out, every=4, verbose=False) as mon:
        _markov_gd(mon, 200.0)
    return out, mon


def _event(events, name, layer=0, head=0, cycle=1):
    found = [
        e
        for e in events
        if (e.stage, e.layer, e.head, e.cycle) == (name, layer, head, cycle)
    ]
    assert len(found) == 1, (name, events)
    return found[0]


@pytest.mark.slow
def test_focus_lies_in_the_flows_window(markov_run, flow_focus):
    assert np.allclose(flow_focus, DOCUMENTED_FOCUS, atol=1.0)
    _, mon = markov_run
    delay = mon.every * ETA  # one observation interval on the clock
    focus = _event(mon.events, "focus")
    assert flow_focus[0] - delay <= focus.t_start <= flow_focus[1] + delay
    cond = _event(mon.events, "condensation", -1, -1)
    assert cond.t_start < focus.t_start < _event(mon.events, "dilution").t_start
    lift = _event(mon.events, "asymmetry_lifting", -1, -1)  # σ₂(W_E), t ≈ 124-338
    assert focus.t_start < lift.t_start < 200


@pytest.mark.slow  # CI's slow steps: keeps the default run within 3 minutes
def test_online_events_agree_with_the_offline_rules(markov_run):
    _, mon = markov_run
    dt = mon.every * ETA
    offline = mon.offline_stages()
    for e in mon.events:
        if e.layer < 0 and e.stage == "asymmetry_lifting":
            continue  # the embedding's lifting: test_online_stages checks it
        if not e.is_paper_stage:
            continue  # the named moves: test_online_stages checks their agreement
        (match,) = [
            s
            for s in offline
            if (s.name, s.layer, s.head, s.cycle) == (e.stage, e.layer, e.head, e.cycle)
        ]
        delay = mon.detector.delay(dt) if e.stage == "condensation" else dt
        assert match.t_start - delay <= e.t_start <= match.t_end + delay, (e, match)


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """The default Markov GD run to t = 20 (80 steps, 21 observations): what the
    files must hold does not depend on the run's length."""
    out = tmp_path_factory.mktemp("mon") / "short"
    with Monitor(out, every=4, verbose=False) as mon:
        _markov_gd(mon, 20.0)
    return out, mon


def test_files_hold_what_the_monitor_saw(short_run):
    out, mon = short_run
    traj, events, cfg = gflow.load_monitor(out)
    assert events == mon.events
    assert all(type(e) is gflow.Stage and e.is_event for e in events)
    lines = (out / "events.jsonl").read_text().splitlines()
    assert lines == [json.dumps(e.to_dict()) for e in mon.events]
    mine = mon.trajectory()
    np.testing.assert_array_equal(traj.t, mine.t)
    assert traj.t.size == 20 // (4 * ETA) + 1
    for k, v in mine.metrics.items():
        np.testing.assert_allclose(traj.metrics[k], v, rtol=1e-15, err_msg=k)
    assert cfg["every"] == 4 and cfg["probe_shape"] == [128, 33]
    assert cfg["top"] == 0 and 0 not in cfg["tracked"]
    np.testing.assert_array_equal(traj.metrics["step"], np.arange(0, 81, 4))


@pytest.mark.slow
def test_report_renders_a_monitor_directory(markov_run, tmp_path):
    out, mon = markov_run
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "gflow",
            "report",
            str(out),
            "--out",
            str(tmp_path / "r.html"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    page = (tmp_path / "r.html").read_text()
    assert "Monitor events" in page and "monitor.png" in page
    assert page.count("<tr>") >= len(mon.events) + 1
    assert (out / "monitor.png").stat().st_size > 10_000


def test_observe_only_every_few_steps(tmp_path):
    mon = Monitor(tmp_path / "m", every=5, verbose=False)
    model, probe = _init(), _probe(batch=8)
    for k in range(12):
        assert mon.observe(k, model, probe) == []
    mon.close()
    _, rows = read_rows(tmp_path / "m")
    np.testing.assert_array_equal(rows[:, 0], [0, 5, 10])
    np.testing.assert_array_equal(rows[:, 1], [0.0, 5.0, 10.0])  # t = step


class LastRowModel(eqx.Module):
    """A user's model with the protocol only: last-row attention, no W_E."""

    emb: jax.Array
    q: jax.Array

    def attention(self, context):
        e = self.emb[context]
        return jax.nn.softmax(e @ self.q @ e[-1])

    def __call__(self, context):
        e = self.emb[context]
        return self.attention(context) @ e @ self.emb.T


def _models():
    k = jax.random.key(3)
    return {
        "attention": AttentionModel.init(d_vocab=4, d_model=8, init_scale=0.5, key=k),
        "transformer": Transformer.init(
            d_vocab=4, d_model=8, n_layers=2, n_heads=2, init_scale=0.5, key=k
        ),
        "positional": gflow.PositionalAttentionModel.init(
            context_length=32, d_vocab=4, d_model=8, init_scale=0.5, key=k
        ),
        "user": LastRowModel(
            jax.random.normal(k, (4, 8)), jax.random.normal(jax.random.key(4), (8, 8))
        ),
    }


@pytest.mark.slow
@pytest.mark.parametrize("name", ["attention", "transformer", "positional", "user"])
def test_every_attending_model(name, tmp_path):
    model = _models()[name]
    assert isinstance(model, gflow.Attending)
    probe = _probe(batch=16)
    with Monitor(tmp_path / name, every=1, verbose=False) as mon:
        mon.observe(0, model, probe)
        mon.observe(1, model, probe)
    traj, _, cfg = gflow.load_monitor(tmp_path / name)
    layers, heads = (2, 2) if name == "transformer" else (1, 1)
    assert traj.metrics["head_entropy"].shape == (2, layers, heads)
    assert ("sv_W_A" in traj.metrics) == (name != "user")
    assert ("sv_W_E" in traj.metrics) == (name in ("attention", "transformer"))
    # the probe loss is the mean cross-entropy of the last position
    logits = jax.vmap(model)(probe[:, :-1])
    ce = -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(16), probe[:, -1]])
    np.testing.assert_allclose(traj.metrics["loss"][0], ce, rtol=1e-12)


@pytest.mark.slow
def test_attention_model_signals_equal_its_transformer_form():
    """The same attention read through the [s, s] and [l, h, s, s] protocols."""
    model = _models()["attention"]
    obs = HeadObservables.default(_probe(batch=16), 4)
    a, b = obs(model), obs(Transformer.from_attention_model(model))
    for k in ("head_entropy", "head_on_top", "head_tracked_on_top", "head_self"):
        np.testing.assert_allclose(a[k], b[k], rtol=1e-12, atol=1e-15, err_msg=k)
    np.testing.assert_allclose(a["sv_W_A"], b["sv_W_A"][..., :8], rtol=1e-10)


def test_a_model_without_the_protocol_is_refused(tmp_path):
    class NoAttention(eqx.Module):
        w: jax.Array

        def __call__(self, context):
            return self.w[context[-1]]

    assert not isinstance(NoAttention(jnp.ones((4, 4))), gflow.Attending)
    mon = Monitor(tmp_path / "x", verbose=False)
    with pytest.raises(TypeError, match="attending"):
        mon.observe(0, NoAttention(jnp.ones((4, 4))), _probe(batch=4))

    class WrongShape(NoAttention):
        def attention(self, context):
            return jnp.ones((2, 2))

    with pytest.raises(ValueError, match="expected"):
        Monitor(tmp_path / "y", verbose=False).observe(
            0, WrongShape(jnp.ones((4, 4))), _probe(batch=4)
        )


@pytest.mark.slow
def test_bad_arguments_are_refused(tmp_path, unchecked):
    with pytest.raises(ValueError, match="every"):
        Monitor(tmp_path / "a", every=0)
    with pytest.raises(TypeError, match="on_event"):
        Monitor(tmp_path / "a", on_event=[1])
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError):
        Monitor(tmp_path / "file")
    mon = Monitor(tmp_path / "b", verbose=False)
    model = _init()
    with pytest.raises(ValueError, match="tokens"):
        mon.observe(0, model, jnp.zeros((4,), int))
    mon.observe(0, model, _probe(batch=4))
    with pytest.raises(ValueError, match="changed shape"):
        mon.observe(10, model, _probe(batch=5))
    with pytest.raises(ValueError, match="increase"):
        mon.observe(0, model, _probe(batch=4))
    with pytest.raises(TypeError, match="integer"):
        mon.observe(1.5, model, _probe(batch=4))
    mon.close()
    with pytest.raises(ValueError, match="closed"):
        mon.observe(20, model, _probe(batch=4))
    with pytest.raises(ValueError, match="lie in"):
        Monitor(tmp_path / "c", top=7, verbose=False).observe(0, model, _probe(batch=4))


def _example(out, *, start=0, every=4, **kwargs):
    """The core of docs/monitor.md's "Monitor a training loop" example, shorter:
    GD observed from step ``start`` on to t = 25 (condensation included)."""
    model, probe = _init(), _probe(batch=16)
    with Monitor(out, every=every, **kwargs) as monitor:
        for step in range(101):
            if step >= start:
                monitor.observe(step, model, probe, t=ETA * step)
            model = _gd_step(model)
    return monitor


def _files(out):
    return [(out / name).read_bytes() for name in ("metrics.csv", "events.jsonl")]


def _said(capsys) -> list[str]:
    """The monitor's lines about its directory (not its events) since the last."""
    return [
        line
        for line in capsys.readouterr().err.splitlines()
        if line.startswith("[gflow monitor]") and " a monitor" in line
    ]


@pytest.mark.slow  # CI's slow steps: keeps the default run within 3 minutes
def test_the_example_run_twice_into_one_directory_replaces_its_monitor(
    tmp_path, capsys
):
    out = tmp_path / "runs" / "monitor-markov"
    first = _example(out)
    assert [e.stage for e in first.events] == ["condensation"]
    files = _files(out)
    _said(capsys)
    # the same loop again: same configuration, observed again from step 0
    second = _example(out)
    assert _said(capsys) == [
        f"[gflow monitor] {out}: holds a monitor of this configuration; replacing "
        "it: observed again from step 0"
    ]
    assert second.events == first.events
    assert _files(out) == files  # the same rows and events, once each


@pytest.mark.slow  # CI's slow steps: keeps the default run within 3 minutes
def test_a_loop_restarted_without_resume_continues_a_matching_monitor(tmp_path, capsys):
    whole = _example(tmp_path / "whole", verbose=False)
    out = tmp_path / "restarted"
    _example(out, verbose=False)
    restarted = _example(out, start=40)  # from a checkpoint at step 40
    (line,) = _said(capsys)
    kept = "continuing it from step 40 (10 earlier observations kept and replayed)"
    assert line.endswith(kept)
    assert restarted.events == whole.events
    assert _files(out) == _files(tmp_path / "whole")


@pytest.mark.slow  # CI's slow steps: keeps the default run within 3 minutes
def test_another_configuration_starts_the_directory_afresh(tmp_path, capsys):
    out = tmp_path / "mon"
    _example(out, verbose=False)
    config = (out / "config.json").read_bytes()
    # resume=True on other signals (n_sv) is refused, the directory left as it was
    with pytest.raises(ValueError, match="other columns"):
        _example(out, n_sv=3, resume=True, verbose=False)
    assert (out / "config.json").read_bytes() == config
    _example(out, every=8, verbose=False)
    (line,) = _said(capsys)
    assert "another configuration (every 4 -> 8)" in line and "replacing" in line
    traj, _, cfg = gflow.load_monitor(out)
    assert cfg["every"] == 8 and traj.metrics["step"].tolist() == list(range(0, 101, 8))
    _example(out, every=8, resume=False, verbose=False)
    assert _said(capsys) == [
        f"[gflow monitor] {out}: held a monitor; replacing it (resume=False)"
    ]


def test_callbacks_see_every_event_in_order(tmp_path):
    seen, also = [], []
    mon = Monitor(tmp_path / "cb", every=8, on_event=seen.append, verbose=False)
    mon.on_event(also.append)
    _markov_gd(mon, 120.0)
    mon.close()
    assert seen == also == mon.events
    assert [e.stage for e in seen][:2] == ["condensation", "focus"]


_KILLED = """
import os, signal, jax
import gflow
from tests.test_monitor import _gd_step, _init, _probe, ETA
jax.config.update("jax_enable_x64", True)
model, probe = _init(), _probe()
mon = gflow.Monitor({out!r}, every=4, verbose=False)
for k in range(4 * 100):
    mon.observe(k, model, probe, t=k * ETA)
    if k == 4 * 99:  # the 100th observation is written: die without closing
        os.kill(os.getpid(), signal.SIGKILL)
    model = _gd_step(model)
"""


@pytest.mark.slow
def test_a_killed_loop_keeps_its_rows_and_events_and_resumes(tmp_path, markov_run):
    out = tmp_path / "killed"
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_KILLED.format(out=str(out)))],
        cwd=os.path.dirname(os.path.dirname(__file__)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    traj, events, _ = gflow.load_monitor(out)
    assert traj.t.size == 100  # nothing lost: every observation made is on disk
    _, full = markov_run
    assert events == [e for e in full.events if e.step <= 4 * 99]
    assert any(e.stage == "focus" for e in events)
    # a partial line (a writer killed mid-write) is skipped by the readers
    with open(out / "metrics.csv", "a") as f:
        f.write("400,100.0,1.3")
    with open(out / "events.jsonl", "a") as f:
        f.write('{"event": "fo')
    assert gflow.load_monitor(out)[0].t.size == 100
    assert gflow.load_monitor(out)[1] == events
    # restart from a checkpoint at step 300: rows from 300 on are dropped, the
    # rules replay the rest, and the run ends as the uninterrupted one did
    with Monitor(out, every=4, resume=True, verbose=False) as mon:
        _markov_gd(mon, 200.0, observe_from=300)
    assert mon.events == full.events
    traj, events, _ = gflow.load_monitor(out)
    assert events == full.events
    np.testing.assert_array_equal(traj.t, full.trajectory().t)


def test_tensorboard_scalars_match_the_csv(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import (
        EventAccumulator,
    )

    out = tmp_path / "tb"
    with Monitor(out, every=8, tensorboard=True, verbose=False) as mon:
        _markov_gd(mon, 100.0)
    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert "loss" in tags and "head_entropy_0_0" in tags
    traj, events, _ = gflow.load_monitor(out)
    loss = [s.value for s in acc.Scalars("loss")]
    np.testing.assert_allclose(loss, traj.metrics["loss"], rtol=1e-6)
    assert [s.step for s in acc.Scalars("loss")] == list(traj.metrics["step"])
    focus = acc.Scalars("event/focus/L0H0")
    assert [s.step for s in focus] == [e.step for e in events if e.stage == "focus"]
