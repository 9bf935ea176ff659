"""The paper's figures (gflow/plotting/paper.py) on a short real flow; their data."""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from gflow import plotting
from gflow.analysis import Stage, detect_stages
from gflow.dynamics import Trajectory
from gflow.runs import FlowConfig, run_flow

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def flow():
    """ε = 1e-2 reaches dilution by t = 100 (docs/markov_cycle.md); m = 8 keeps the
    snapshots small."""
    cfg = FlowConfig(t1=100.0, d_model=8, init_scale=1e-2, num_saves=101)
    traj = run_flow(cfg, progress=False)
    pi = np.asarray(cfg.chain().pi)
    # the paper's stages (the named moves, here the entropy fall, are apart)
    return traj, [s for s in detect_stages(traj, pi=pi) if s.is_paper_stage], pi


def _png(path):
    assert path.stat().st_size > 1000
    assert path.read_bytes()[:8] == PNG
    return path


def _without_params(traj):
    return dataclasses.replace(traj, params=None)


@pytest.mark.slow
def test_singular_values_figure_and_data(flow, tmp_path):
    traj, stages, _ = flow
    out = plotting.plot_singular_values(traj, tmp_path / "sv.png", stages=stages)
    assert _png(out) == tmp_path / "sv.png"
    svs = plotting.block_singular_values(traj)
    assert set(svs) == {"W_P", "W_Q", "W_K", "W_QK"}
    assert svs["W_QK"].shape == (len(traj), 8)
    # W_QK's singular values are those the flow recorded for W_A
    np.testing.assert_allclose(svs["W_QK"], traj.metrics["sv_W_A"], rtol=1e-8)
    np.testing.assert_allclose(svs["W_P"], traj.metrics["sv_W_P"], rtol=1e-8)
    assert np.all(np.diff(svs["W_Q"], axis=1) <= 0)  # decreasing along k
    with pytest.raises(ValueError, match="save_params=True"):
        plotting.plot_singular_values(_without_params(traj), tmp_path / "x.png")
    with pytest.raises(ValueError, match="k must be"):
        plotting.plot_singular_values(traj, tmp_path / "x.png", k=0)
    with pytest.raises(TypeError, match="Trajectory"):
        plotting.block_singular_values({"t": traj.t})


@pytest.mark.slow
def test_attention_heatmaps_at_the_stage_boundaries(flow, tmp_path):
    traj, stages, _ = flow
    assert [s.name for s in stages] == ["condensation", "focus", "dilution"]
    _png(plotting.plot_attention_heatmaps(traj, stages, tmp_path / "a.png"))
    marks = plotting.stage_boundaries(traj, stages)
    assert [label for label, _ in marks][0] == "t0"
    assert marks[-1] == ("end", len(traj) - 1)
    assert len({i for _, i in marks}) == len(marks)
    attn = traj.metrics["attention"][[i for _, i in marks]]
    np.testing.assert_allclose(attn.sum(-1), 1.0, atol=1e-12)  # rows sum to 1
    # at t0 every query attends as π; after focus query 0 sits on token 0
    np.testing.assert_allclose(attn[0], np.tile(flow[2], (4, 1)), atol=1e-3)
    assert attn[-1][0, 0] > 0.95
    bad = dataclasses.replace(
        traj, metrics={"loss": traj.metrics["loss"], "attention": np.ones((3, 4))}
    )
    with pytest.raises(ValueError, match=r"\[n, d, d\]"):
        plotting.plot_attention_heatmaps(bad, stages, tmp_path / "x.png")
    no_attention = dataclasses.replace(traj, metrics={"loss": traj.metrics["loss"]})
    with pytest.raises(ValueError, match="StageObservables"):
        plotting.plot_attention_heatmaps(no_attention, stages, tmp_path / "x.png")


@pytest.mark.slow
def test_embedding_pca(flow, tmp_path):
    traj, stages, _ = flow
    _png(plotting.plot_embedding_pca(traj, tmp_path / "pca.png", stages=stages))
    coords, ratio = plotting.embedding_pca(traj, k=3)
    assert coords.shape == (len(traj), 4, 3)
    assert np.all(ratio >= 0) and ratio.sum() <= 1 + 1e-12
    assert np.all(np.diff(ratio) <= 0)
    # condensation makes W_E rank one: one axis carries almost all the variance
    assert ratio[0] > 0.99
    # the coordinates are centred over all rows and times
    np.testing.assert_allclose(coords.reshape(-1, 3).mean(0), 0.0, atol=1e-12)
    with pytest.raises(ValueError, match="k must lie"):
        plotting.embedding_pca(traj, k=9)
    with pytest.raises(ValueError, match="save_params=True"):
        plotting.embedding_pca(_without_params(traj))


@pytest.mark.slow
def test_row_norms(flow, tmp_path):
    traj, stages, pi = flow
    _png(plotting.plot_row_norms(traj, tmp_path / "n.png", pi=pi, stages=stages))
    norms = plotting.row_norms(traj)
    np.testing.assert_allclose(
        norms[-1], np.linalg.norm(np.asarray(traj.final.W_E), axis=1), rtol=1e-12
    )
    # stage I: token i's embedding grows ∝ π_i, so the most frequent row is largest
    assert np.argmax(norms[20]) == 0
    with pytest.raises(ValueError, match="probability vector of length d = 4"):
        plotting.plot_row_norms(traj, tmp_path / "x.png", pi=[0.5, 0.5])


@pytest.mark.slow
def test_entropy_cycles_and_extrema(flow, tmp_path):
    traj, stages, _ = flow
    _png(plotting.plot_entropy_cycles(traj, stages, tmp_path / "e.png"))
    ((t_min, v_min, kind),) = plotting.entropy_extrema(
        traj.t, traj.metrics["attention_entropy"]
    )
    assert kind == "min"
    assert v_min == traj.metrics["attention_entropy"].min()
    focus = next(s for s in stages if s.name == "focus")
    assert t_min >= focus.t_end
    # a known zigzag: down, up, down
    t = np.arange(7.0)
    x = np.array([1.0, 0.5, 0.2, 0.6, 0.9, 0.4, 0.3])
    assert plotting.entropy_extrema(t, x) == [(2.0, 0.2, "min"), (4.0, 0.9, "max")]
    assert plotting.entropy_extrema(t[:2], x[:2]) == []
    with pytest.raises(ValueError, match="same length"):
        plotting.entropy_extrema(t, x[:3])


@pytest.mark.slow
def test_paper_figures_skip_what_the_run_lacks(flow, tmp_path):
    traj, stages, pi = flow
    names = {p.name for p in plotting.paper_figures(tmp_path, traj, stages, pi=pi)}
    assert names == {
        "paper_entropy.png",
        "paper_attention.png",
        "paper_singular_values.png",
        "paper_pca.png",
        "paper_row_norms.png",
    }
    out = plotting.paper_figures(tmp_path / "np", _without_params(traj), [], pi=pi)
    assert {p.name for p in out} == {"paper_entropy.png", "paper_attention.png"}
    assert all(_png(p) for p in out)


@pytest.mark.slow
def test_unfactorised_run_has_no_W_K_panel(flow):
    traj, _, _ = flow
    p = traj.params  # stacked snapshots: W_Q stands in for an unfactorised W_A
    stacked = SimpleNamespace(W_E=p.W_E, W_Q=p.W_Q, W_K=None, W_P=p.W_P)
    one = dataclasses.replace(traj, params=stacked)
    assert set(plotting.block_singular_values(one)) == {"W_P", "W_Q", "W_QK"}


def test_stage_boundaries_deduplicate_nearby_times():
    t = np.linspace(0.0, 10.0, 11)
    traj = Trajectory(t=t, metrics={"loss": t}, final=None)
    stages = [Stage("focus", 2.1, 4.0, 1), Stage("dilution", 1.9, 5.0, 1)]
    assert plotting.stage_boundaries(traj, stages) == [
        ("t0", 0),
        ("focus 1", 2),
        ("end", 10),
    ]
