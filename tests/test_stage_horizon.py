"""The stage detectors do not depend on the horizon (issue 34 point 4).

A run's closed stages (``provisional`` False) are the same on every longer run of
the same flow: the detector reads, for each stage, only data up to the time that
closed it. Checked on prefixes of one long trajectory (a flow integrated to t1 has
the same saved points as the first part of a longer one), on constructed signals
with known closing times, and (slow) on the default flow run to each horizon.
"""

from pathlib import Path

import numpy as np
import pytest

from gflow.analysis import Stage, StageDetector, detect_head_stages, detect_stages
from gflow.dynamics import Trajectory

PI = np.array([0.75, 0.19, 0.05, 0.01])
HORIZONS = (1500.0, 3000.0, 6000.0, 10000.0)


def _long_flow():
    """The default flow to t = 10⁴ at 401 saved times (tests/test_stages.py)."""
    data = np.load(Path(__file__).parent / "data" / "markov_flow_t10000.npz")
    metrics = {k: data[k] for k in data.files if k != "t"}
    return Trajectory(t=data["t"], metrics=metrics, final=None)


def _prefix(traj, t1):
    keep = np.asarray(traj.t) <= t1
    metrics = {k: np.asarray(v)[keep] for k, v in traj.metrics.items()}
    return Trajectory(t=np.asarray(traj.t)[keep], metrics=metrics, final=None)


def _key(s: Stage):
    return (s.stage, s.cycle, s.layer, s.head, s.t_start, s.t_end)


def _assert_closed_stages_persist(runs):
    """Every closed stage of a shorter run is a closed stage of each longer one."""
    for i, short in enumerate(runs):
        closed = {_key(s) for s in short if not s.provisional}
        for longer in runs[i + 1 :]:
            kept = {_key(s) for s in longer if not s.provisional}
            assert closed <= kept, (closed - kept, longer)


def test_the_default_flow_closes_the_same_stages_on_every_horizon():
    """Prefixes t1 = 1500, 3000, 6000, 10⁴ of the default flow: what a shorter run
    closed, a longer one keeps; the t1 = 3000 run's third-cycle dilution and its
    second cycle (cut at σ₃'s lull, which ends at 4500) are provisional."""
    traj = _long_flow()
    runs = {t1: detect_stages(_prefix(traj, t1), pi=PI) for t1 in HORIZONS}
    _assert_closed_stages_persist([runs[t1] for t1 in HORIZONS])
    cycle_one = [
        ("condensation", 1, 0.0, 25.0),
        ("focus", 1, 75.0, 100.0),
        ("dilution", 1, 100.0, 150.0),
        ("asymmetry_lifting", 1, 125.0, 350.0),
    ]
    runs = {t1: [s for s in stages if s.is_paper_stage] for t1, stages in runs.items()}
    for t1, stages in runs.items():
        closed = [(s.stage, s.cycle, s.t_start, s.t_end) for s in stages]
        closed = [c for c, s in zip(closed, stages) if not s.provisional]
        assert closed[:4] == cycle_one, t1
    at_3000 = runs[3000.0]
    # at the default margin (0.05) t1 = 3000 shows a third cycle's focus and
    # dilution, both provisional: gone on the longer runs
    assert [s.stage for s in at_3000 if s.cycle == 3] == ["focus", "dilution"]
    assert all(s.provisional for s in at_3000 if s.cycle >= 2)
    # at 10⁴ cycle 2's focus is closed (query 1's self-attention turns back by
    # 0.18 after t = 1735); its dilution and lifting run into the last data
    two = {s.stage: s for s in runs[10000.0] if s.cycle == 2}
    assert not two["focus"].provisional and two["focus"].t_end == 1750.0
    assert two["dilution"].provisional and two["asymmetry_lifting"].provisional
    # every closed stage ends well inside its horizon
    for t1, stages in runs.items():
        assert all(s.t_end < t1 - 100 for s in stages if not s.provisional)


def test_every_prefix_keeps_the_closed_stages_of_the_shorter_ones():
    """Prefixes every 250 time units of the same flow, and of the head rules on
    its signals seen as one head (no W_A singular values: one σ column)."""
    traj = _long_flow()
    ends = np.arange(250.0, 10001.0, 250.0)
    _assert_closed_stages_persist(
        [detect_stages(_prefix(traj, e), pi=PI) for e in ends]
    )
    m = traj.metrics
    attn = np.asarray(m["attention"])
    top_excess = attn[:, :, 0] - PI[0]  # [n, q]: each query's excess on top
    self_excess = np.einsum("nii->ni", attn) - PI  # [n, q]: on itself
    w = PI[1:] / PI[1:].sum()
    every = np.zeros((traj.t.size, 1, 1, 5))
    every[:, 0, 0, 0] = top_excess @ PI
    every[:, 0, 0, 1] = self_excess[:, 1:] @ PI[1:]
    tracked = np.zeros((traj.t.size, 1, 1, 5))
    tracked[:, 0, 0, 0] = top_excess[:, 1:] @ w
    tracked[:, 0, 0, 1] = self_excess[:, 1:] @ w
    heads = dict(
        loss=m["loss"],
        unigram_gap=m["unigram_gap"],
        sv_W_E=m["sv_W_E"],
        head_entropy=np.asarray(m["attention_entropy"])[:, None, None],
        head_key_excess=every,
        head_tracked_key_excess=tracked,
        head_top_query_excess=top_excess[:, 0][:, None, None],
        sv_W_A=np.asarray(m["sv_W_E"])[:, None, None, :],
    )
    full = Trajectory(t=traj.t, metrics=heads, final=None)
    _assert_closed_stages_persist([detect_head_stages(_prefix(full, e)) for e in ends])


def _sig(t, centre, width):
    return 1.0 / (1.0 + np.exp(-(t - centre) / width))


def test_a_growth_closes_when_the_next_singular_value_has_doubled():
    """σ₂ = e^{0.05 (t-100)} capped, σ₃ doubles at a known time t₃ after σ₂'s end:
    the growth is open on every horizon before t₃ and closed, with the same span,
    on every horizon after it. Growth edges as in tests/test_stages.py."""
    det = StageDetector()
    t = np.arange(0.0, 1000.0, 0.5)
    g = 1e-3 * np.exp(0.05 * np.clip(t - 100.0, 0, None))
    sv2 = g / (1 + g)
    sv3 = 1e-3 * np.exp(0.02 * np.clip(t - 600.0, 0, None))  # x2 at 600 + ln2/0.02
    t3 = 600.0 + np.log(2.0) / 0.02
    full = det.closed_growth(t, sv2, next_sv=sv3)
    assert full[2] and full[:2] == det.growth(t, sv2)
    for t1 in (400.0, 600.0, t3 - 1.0):
        k = t <= t1
        got = det.closed_growth(t[k], sv2[k], next_sv=sv3[k])
        assert not got[2], t1
    for t1 in (t3 + 1.0, 800.0):
        k = t <= t1
        assert det.closed_growth(t[k], sv2[k], next_sv=sv3[k]) == full
    # without the next singular value nothing confirms the end
    assert not det.closed_growth(t, sv2)[2]


def test_a_lull_keeps_the_growth_open_until_the_next_one_starts():
    """ln σ₂ grows, pauses (rate below a quarter of its peak) and grows again at
    t = 600; σ₃ starts only after that. Before 600 the growth ends at the lull but
    is provisional; the full run ends it after the second phase, closed."""
    det = StageDetector()
    t = np.arange(0.0, 1500.0, 0.5)
    logs = np.log(1e-3) + np.log(10.0) * _sig(t, 200.0, 20.0)
    logs += np.log(20.0) * _sig(t, 600.0, 40.0)
    sv3 = 1e-3 * np.exp(0.02 * np.clip(t - 1000.0, 0, None))
    k = t <= 500.0
    early = det.closed_growth(t[k], np.exp(logs[k]), next_sv=sv3[k])
    full = det.closed_growth(t, np.exp(logs), next_sv=sv3)
    assert not early[2] and full[2]
    assert early[1] < 400.0 < 600.0 < full[1]
    assert early[0] == full[0]


def test_a_move_is_closed_by_its_reversal_or_a_final_window():
    det = StageDetector()
    t = np.arange(0.0, 100.0, 1.0)
    x = 1.0 - _sig(t, 30.0, 2.0) + 0.5 * _sig(t, 70.0, 2.0)  # a fall, then a rise
    ((t0, t1, amp, closed),) = det.closed_moves(t, x, sign=-1)
    assert closed  # the rise of 0.5 confirms the fall's end
    k = t <= 60.0  # before the rise: the same fall, still open
    assert det.closed_moves(t[k], x[k], sign=-1) == [(t0, t1, amp, False)]
    # ... unless the window ends at a final time
    win = det.closed_moves(t[k], x[k], sign=-1, window=(0, 60.0), closed_end=True)
    assert win == [(t0, t1, amp, True)]
    # the threshold is the range so far: an early dip of 0.15 counts (0.2 × 0.15 <
    # 0.1 ≤ 0.15) even though the whole run's range is 1.4
    y = np.r_[1.0 - 0.15 * np.sin(np.linspace(0, np.pi, 20)), 1.0 + 0.4 * t[:80] / 79]
    y[-40:] -= 1.4 * np.linspace(0, 1, 40)
    falls = det.closed_moves(np.arange(y.size, dtype=float), y, sign=-1)
    assert len(falls) == 2 and falls[0][3] and not falls[1][3]
    assert falls[0][2] == pytest.approx(0.15, abs=0.01)


def test_provisional_reads_back_and_is_written_only_when_true():
    s = Stage("focus", 1.0, 2.0, 1, provisional=True)
    assert s.to_dict()["provisional"] is True
    assert Stage.from_dict(s.to_dict()) == s
    assert "provisional" not in Stage("focus", 1.0, 2.0, 1).to_dict()
    with pytest.raises(ValueError, match="never provisional"):
        Stage(
            "focus",
            1.0,
            1.0,
            1,
            0,
            0,
            onset=0.5,
            step=3,
            signal="s",
            value=1.0,
            reference=2.0,
            threshold=0.1,
            provisional=True,
        )


def _seed_result(res: dict, load: float = 0.5) -> dict:
    return res | {"steps": 100, "load": load}


def test_the_table_over_seeds_counts_the_check_and_spreads_the_starts():
    """experiments/stage_horizon.py's summary over seeds, on the stored default
    flow (401 saved times, seen as seed 0) and two edited copies: one where a
    closed stage of t1 = 6000 is missing at 10⁴ (the check fails), one whose
    starts are moved and whose focus 2 is missing."""
    import copy

    from experiments import stage_horizon as sh

    one = sh.analyse(_long_flow(), PI, HORIZONS)
    assert one["check"] and "heads" not in one
    assert list(one["runs"]) == ["1500", "3000", "6000", "10000"]
    assert one["closed_at_t1"] == 5  # C, F, D, A of cycle 1 and focus 2
    assert one["starts"]["focus 2"] == {"t": 625.0, "provisional": False}
    broken = copy.deepcopy(one)
    broken["runs"]["10000"] = broken["runs"]["10000"][1:]  # condensation dropped
    broken["check"] = sh.consistent(list(broken["runs"].values()))
    broken["closed_at_t1"] = 4
    assert not broken["check"]
    moved = copy.deepcopy(one)
    moved["starts"]["focus 1"]["t"] = 85.0
    moved["starts"]["asymmetry_lifting 1"] |= {"t": 150.0, "provisional": True}
    del moved["starts"]["focus 2"]
    seeds = {"0": one, "1": broken, "2": moved}
    summ = sh.summarize(seeds)
    assert summ["n"] == 3 and summ["check"] == 2
    f1 = summ["focus 1"]
    assert (f1["median"], f1["min"], f1["max"]) == (75.0, 75.0, 85.0)
    assert summ["asymmetry_lifting 1"]["provisional"] == 1
    assert summ["focus 2"]["found"] == 2
    res = {
        "t1": 10000.0,
        "dt": 25.0,
        "sample_key": 1,
        "seconds": 12.0,
        "uptime_at_start": "load average: 0.50, 0.40, 0.30",
        "seeds": {k: _seed_result(v, 0.5 + int(k)) for k, v in seeds.items()},
        "summary": summ,
    }
    text = sh.render(res)
    assert "init seeds 0, 1, 2," in text and "wall time" not in text
    assert "not timed: a load average above 1.5" in text  # seed 2 at 2.50
    assert "at each seed's start: 0.50, 1.50, 2.50" in text
    quiet = {k: v | {"load": 1.0} for k, v in res["seeds"].items()}
    assert "wall time 12 s" in sh.render(res | {"seeds": quiet})
    assert sh.gone(one["runs"]) == ["focus 3 (t1 = 3000)", "dilution 3 (t1 = 3000)"]
    assert "| 1 | False | 4 | 75 (closed) |" in text
    assert (
        "| 2 | True | 5 | 85 (closed) | 100 (closed) | 150 (provisional) | none "
        "| focus 3 (t1 = 3000); dilution 3 (t1 = 3000) |" in text
    )
    assert "focus 1 75 [75, 85] (0 of 3 provisional)" in text
    assert "focus 2 625 [625, 625] (0 of 2 provisional, found in 2)" in text
    assert "The check holds in **2 of 3** seeds." in text


@pytest.mark.slow
def test_gflow_flow_to_each_horizon_closes_the_same_stages():
    """The default flow run to t1 = 1500, 3000, 6000, 10⁴ on one grid (dt = 5,
    so every run's saved times are a prefix of the longest's): the closed stages
    of each run are closed stages of every longer one, to the same saved time."""
    from gflow.runs import FlowConfig, run_flow

    runs = []
    for t1 in HORIZONS:
        cfg = FlowConfig(t1=t1, num_saves=int(t1 / 5) + 1, save_params=False)
        runs.append(detect_stages(run_flow(cfg), pi=cfg.chain().pi))
    _assert_closed_stages_persist(runs)
    closed = [
        (s.stage, s.cycle) for s in runs[-1] if not s.provisional and s.is_paper_stage
    ]
    assert closed == [
        ("condensation", 1),
        ("focus", 1),
        ("dilution", 1),
        ("asymmetry_lifting", 1),
        ("focus", 2),
    ]


@pytest.mark.slow
def test_the_head_rules_find_the_flows_lifting_on_the_one_layer_run():
    """The default flow to t = 600 (dt = 5) observed through StageObservables and
    HeadObservables (256 sampled sequences, key 1): detect_head_stages' global
    lifting (σ₂(W_E)) is detect_stages' lifting, and the head's own σ₂(W_A)
    growth is another, later one (it starts after σ₂(W_E)'s ends)."""
    import jax

    from gflow.analysis import HeadObservables, StageObservables
    from gflow.dynamics import solve_flow
    from gflow.problems import PopulationLoss
    from gflow.runs import SOLVERS, FlowConfig

    cfg = FlowConfig(t1=600.0, num_saves=121)
    chain = cfg.chain()
    probe = chain.sample(key=jax.random.key(1), batch=256, length=65)
    stage_obs, head_obs = StageObservables(chain), HeadObservables(probe, 0, [1, 2, 3])
    traj = solve_flow(
        PopulationLoss(chain),
        cfg.model(),
        t1=cfg.t1,
        ts=np.linspace(0.0, cfg.t1, cfg.num_saves),
        solver=SOLVERS[cfg.solver](),
        observables=lambda model: {**stage_obs(model), **head_obs(model)},
        progress=False,
    )
    flow = detect_stages(traj, pi=chain.pi)
    (flow_lift,) = [s for s in flow if s.cycle == 1 and s.is_paper_stage][3:]
    assert flow_lift.stage == "asymmetry_lifting"
    metrics = {k: v for k, v in traj.metrics.items() if k != "unigram_gap"}
    heads = detect_head_stages(Trajectory(t=traj.t, metrics=metrics, final=None))
    glob = [s for s in heads if s.stage == "asymmetry_lifting" and s.cycle == 1]
    own = [s for s in heads if s.stage == "head_lifting" and s.cycle == 1]
    assert len(glob) == 1 and len(own) == 1
    assert (glob[0].t_start, glob[0].t_end) == (flow_lift.t_start, flow_lift.t_end)
    assert own[0].t_start > glob[0].t_end


@pytest.mark.slow
def test_stage_horizon_over_two_seeds_is_resumable(tmp_path, capsys):
    """experiments/stage_horizon.py's collect on a short instance (t1 = 600,
    prefixes 300 and 600, seeds 0 and 1): one result per seed with the check, a
    rerun with a third seed flows only that one, other settings start over."""
    from experiments import stage_horizon as sh

    kw = dict(path=tmp_path / "seeds.json", t1=600.0, dt=5.0, horizons=(300.0, 600.0))
    res = sh.collect([0, 1], **kw)
    assert list(res["seeds"]) == ["0", "1"] and res["summary"]["check"] == 2
    assert "heads" in res["seeds"]["0"] and res["seeds"]["1"]["steps"] > 0
    assert "seed 0:" in capsys.readouterr().out
    again = sh.collect([0, 1, 2], **kw)
    out = capsys.readouterr().out
    assert "seed 2:" in out and "seed 0:" not in out
    assert again["seeds"]["0"] == res["seeds"]["0"]
    assert "The check holds in **3 of 3** seeds." in sh.render(again)


def _deep_adamw(steps: int, seed: int = 0):
    """A 2-layer, 2-head pre-LN block with MLP and positions (the ladder's rung 7
    at width 8, context 8) under AdamW with a constant step size on fresh batches of
    the paper's chain, observed every 10 steps on 32 held-out sequences; the run's
    unigram gap is the held-out loss minus H(π)."""
    import jax
    import jax.numpy as jnp
    import optax

    from gflow import HeadObservables, SequenceLoss, Transformer
    from gflow.dynamics import minibatch_segment
    from gflow.problems import MarkovChain, MarkovStream, sequence_loss

    chain = MarkovChain.default()
    held = chain.sample(key=jax.random.key(100), batch=32, length=9)
    model = Transformer.init(
        d_vocab=4,
        d_model=8,
        n_layers=2,
        n_heads=2,
        key=jax.random.key(seed),
        init_scale=1e-3,
        d_ff=16,
        value=True,
        layernorm=True,
        residual=True,
        max_len=8,
        dtype=jnp.float32,
    )
    traj, _ = minibatch_segment(
        SequenceLoss(held),
        model,
        optax.adamw(0.01, weight_decay=0.01),
        MarkovStream(chain, batch=16, length=9),
        batch_loss=sequence_loss,
        key=jax.random.key(seed + 1),
        steps=steps,
        save_every=10,
        learning_rate=0.01,
        observables=HeadObservables.default(held, 4),
    )
    metrics = dict(traj.metrics)
    metrics["unigram_gap"] = np.asarray(metrics["loss"]) - chain.unigram_loss
    return Trajectory(t=np.asarray(traj.t), metrics=metrics, final=None)


@pytest.fixture(scope="module")
def deep_adamw():
    return _deep_adamw(150)


@pytest.mark.slow  # its compile is 7.5 s; the default run keeps the one-layer prefixes
def test_a_deep_adamw_run_closes_the_same_stages_on_every_prefix(deep_adamw):
    """The stages closed by save s are the same whether the detector reads the run
    to s or to its end (every 5th save of a 150-step run with a constant step
    size): what a prefix closed, every longer prefix keeps."""
    n = deep_adamw.t.size
    runs = [
        detect_head_stages(_prefix(deep_adamw, deep_adamw.t[k])) for k in range(3, n, 3)
    ]
    runs.append(detect_head_stages(deep_adamw))
    _assert_closed_stages_persist(runs)
    assert any(not s.provisional for s in runs[-1] if s.layer >= 0)


@pytest.mark.slow
def test_a_longer_deep_adamw_run_keeps_the_closed_stages_of_every_prefix():
    run = _deep_adamw(1500)
    ends = run.t[20::10]
    _assert_closed_stages_persist([detect_head_stages(_prefix(run, e)) for e in ends])
