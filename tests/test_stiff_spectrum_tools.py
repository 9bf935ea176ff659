"""The stiff-spectrum experiment's measure of LayerNorm's collapse: the smallest
LayerNorm input σ against a numpy recomputation."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from experiments.stiff_spectrum import ln_input_sigma
from gflow import Transformer


def _tiny(layernorm=True):
    return Transformer.init(
        d_vocab=3,
        d_model=4,
        n_layers=2,
        key=jax.random.key(0),
        init_scale=0.5,
        layernorm=layernorm,
        residual=True,
        max_len=8,
        dtype=jnp.float64,
    )


def test_ln_input_sigma_is_the_smallest_std_of_any_layernorm_input():
    model = _tiny()
    tokens = np.array([[0, 1, 2, 1, 0, 2], [2, 2, 1, 0, 0, 1]])
    want = np.inf
    # a block compiled once (both blocks, both contexts), not run op by op
    run_block = eqx.filter_jit(lambda block, x: block(x, model.tau, model.residual)[0])
    for context in tokens[:, :-1]:  # recompute block by block, by hand
        x = np.asarray(model.W_E)[context] + np.asarray(model.W_pos)[: len(context)]
        for block in model.blocks:
            want = min(want, np.std(x, axis=-1).min())
            x = np.asarray(run_block(block, jnp.asarray(x)))
        want = min(want, np.std(x[-1]))
    assert np.isclose(ln_input_sigma(model, tokens), want, rtol=1e-9)
    # without LayerNorm there is nothing to divide by
    assert ln_input_sigma(_tiny(layernorm=False), tokens) == np.inf


def test_tsit5_bound_is_six_evaluations_per_stable_step_over_the_saved_spectra():
    from experiments.stiff_spectrum import tsit5_bound

    # λ_max = 340 then 680 (linear in t over [0, 2]): ∫ λ dt = 1020, steps ≥ 300
    rows = [{"t": 0.0, "top": [340.0, 1.0]}, {"t": 2.0, "top": [680.0, 2.0]}]
    assert np.isclose(tsit5_bound(rows), 6 * 1020 / 3.4)


def test_segmented_runs_compare_and_make_their_block(tmp_path, monkeypatch):
    """Two hand-made finished runs: the comparison sums their segments, measures the
    distance between their final states, and the block names both with Tsit5's
    bound over the first run's spectra."""
    import json

    import equinox as eqx

    import experiments.stiff_spectrum as ss

    monkeypatch.setattr(ss, "OUT", tmp_path)
    monkeypatch.setattr(
        ss, "problem", lambda **kw: (None, {"w": jnp.ones(4, jnp.float64)})
    )
    monkeypatch.setattr(ss, "VARIANTS", {"base": {}})
    states = {"_a": jnp.ones(4), "_b": jnp.array([1.0, 1.0, 1.0, 1.02])}
    for tag, solver in (("_a", "auto-rkc2"), ("_b", "split")):
        folder = tmp_path / f"base{tag}"
        folder.mkdir()
        seg = {
            "num_steps": 5,
            "num_rejected_steps": 1,
            "grad_evals": 100,
            "wall_s": 2.0,
        }
        rows = [
            {"t": 0.0, "loss": 1.0, "top": [3400.0]},
            {"t": 1.0, "loss": 0.5, "top": [3400.0]},
        ]
        log = {"solver": solver, "rtol": 1e-6, "segments": [seg, seg], "rows": rows}
        (folder / "segments.json").write_text(json.dumps(log))
        eqx.tree_serialise_leaves(folder / "checkpoint.eqx", {"w": states[tag]})
    out = ss.compare("base", ["_a", "_b"])
    assert out["runs"]["_a"]["grad_evals"] == 200
    assert np.isclose(
        out["relative_distance"]["_a vs _b"], 0.02 / np.linalg.norm(states["_b"])
    )
    block = ss.t20_block("base", windows=())
    assert (
        "| _a | the previous default" in block and "| 200 | 30× |" in block
    )  # Tsit5: 6 · 3400 / 3.4 = 6000 evaluations, 30× the 200
    assert "distance to _b" in block


def test_standin_icl_row_at_the_latest_common_segment_end(tmp_path, monkeypatch):
    """The stand-in row of the in-context block from two hand-made segmented runs,
    one ahead of the other: it is taken at their latest common end (t = 2), counts
    only the segments up to it, measures the distance between the states kept
    there, and bounds GD by t·max λ_max/2 steps over the spectra up to t."""
    import json

    import equinox as eqx

    import experiments.stiff_spectrum as ss
    from benchmarks.standin_icl import block, record

    monkeypatch.setattr(ss, "OUT", tmp_path)
    monkeypatch.setattr(
        ss, "problem", lambda **kw: (None, {"w": jnp.ones(4, jnp.float64)})
    )
    monkeypatch.setattr(ss, "VARIANTS", {"icl": {"data": "icl-markov"}})
    lams = [10.0, 1e3, 4e4, 1e9]  # at t = 0, 1, 2, 3 (t = 3 only in the flow)
    for tag, ends in (("_f", 3), ("_r", 2)):
        folder = tmp_path / f"icl{tag}"
        (folder / "states").mkdir(parents=True)
        segs = [
            {"t0": k, "t1": k + 1.0, "grad_evals": 100 * (k + 1)} for k in range(ends)
        ]
        rows = [{"t": float(k), "top": [lams[k]]} for k in range(ends + 1)]
        log = {
            "solver": "default" if tag == "_f" else "split",
            "rtol": 1e-6 if tag == "_f" else 1e-8,
            "segment": 1.0,
            "settings": {"data": "icl-markov"},
            "segments": segs,
            "rows": rows,
        }
        (folder / "segments.json").write_text(json.dumps(log))
        for k in range(1, ends + 1):
            w = jnp.ones(4) * (1.0 + (1e-4 * k if tag == "_f" else 0.0))
            eqx.tree_serialise_leaves(folder / "states" / f"t{k:.3f}.eqx", {"w": w})
    rec = record("icl", "_f", "_r")
    assert rec["t"] == 2.0
    assert rec["flow"]["grad_evals"] == 300 and rec["reference"]["grad_evals"] == 300
    assert np.isclose(rec["distance"], 2e-4) and rec["within_delta"]
    assert rec["gd_bound_steps"] == 2.0 * 4e4 / 2
    assert np.isclose(rec["ratio"], 4e4 / 300)
    # η = 1e-3 passes 1 at t = 1 (1e3) and 2 at t = 2 (4e4); η = 1e-6 never
    assert rec["crossings"]["0.001"] == [1.0, 2.0]
    assert rec["crossings"]["1e-06"] == [None, None]
    text = block(rec)
    assert "**133× cheaper**" in text and "the issue asks for t = 50" in text
