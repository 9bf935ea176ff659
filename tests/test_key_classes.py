"""The key classes a head's mass moves onto (gflow.analysis.key_classes): the masks
and the excess over uniform causal attention against a loop written from the
definitions, the same numbers in NumPy, JAX and torch, and the labels."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gflow.analysis import (
    DIFFUSE,
    KEY_CLASSES,
    MOVE_NAMES,
    STAGE_NAMES,
    Stage,
    class_masks,
    key_excess,
    moved_onto,
    top_dominance,
)


def _loop_excess(attn, contexts, top, weights):
    """attn [l, h, b, r, s]: each class's mass minus its uniform causal share,
    averaged over the rows weighted by ``weights`` [b, r], by the definitions."""
    n_l, n_h, b, r, s = attn.shape
    out = np.zeros((n_l, n_h, len(KEY_CLASSES)))
    total = weights.sum()
    for n in range(b):
        x = contexts[n]
        for qi in range(r):
            i = s - r + qi  # the absolute query position
            if weights[n, qi] == 0:
                continue
            member = {
                "top": [x[j] == top for j in range(i + 1)],
                "self": [x[j] == x[i] and x[j] != top for j in range(i + 1)],
                "previous": [j == i - 1 for j in range(i + 1)],
                "first": [j == 0 for j in range(i + 1)],
                "induction": [j >= 1 and x[j - 1] == x[i] for j in range(i + 1)],
            }
            for c, name in enumerate(KEY_CLASSES):
                keys = [j for j in range(i + 1) if member[name][j]]
                base = len(keys) / (i + 1)
                mass = attn[:, :, n, qi, keys].sum(-1) if keys else 0.0
                out[:, :, c] += weights[n, qi] * (mass - base)
    return out / total


def _random_case(rng, b=3, s=6, r=6, d=3):
    contexts = rng.integers(0, d, size=(b, s))
    logits = rng.normal(size=(2, 2, b, r, s))
    q_pos = np.arange(s - r, s)[:, None]
    logits = np.where(np.arange(s)[None, :] <= q_pos, logits, -np.inf)
    attn = np.exp(logits - logits.max(-1, keepdims=True))
    return contexts, attn / attn.sum(-1, keepdims=True)


@pytest.mark.parametrize("rows", [6, 2])
def test_excess_matches_the_definitions(rows):
    rng = np.random.default_rng(0)
    contexts, attn = _random_case(rng, r=rows)
    weights = (rng.random((3, rows)) > 0.3).astype(float)
    masks = class_masks(np, contexts, rows, 1, float)
    assert masks.shape == (len(KEY_CLASSES), 3, rows, 6)
    got = key_excess(np, attn, masks, weights)
    np.testing.assert_allclose(
        got, _loop_excess(attn, contexts, 1, weights), atol=1e-12
    )


def test_uniform_causal_attention_has_no_excess_and_jax_agrees():
    rng = np.random.default_rng(1)
    contexts, _ = _random_case(rng)
    s = contexts.shape[1]
    uniform = np.tril(np.ones((s, s))) / np.arange(1, s + 1)[:, None]
    attn = np.broadcast_to(uniform, (2, 2, 3, s, s))
    ones = np.ones((3, s))
    np.testing.assert_allclose(
        key_excess(np, attn, class_masks(np, contexts, s, 0, float), ones),
        0.0,
        atol=1e-12,
    )
    _, attn = _random_case(rng)
    want = key_excess(np, attn, class_masks(np, contexts, s, 0, float), ones)

    @jax.jit  # the JAX path compiled, as in a monitor's program
    def excess(contexts, attn):
        masks = class_masks(jnp, contexts, s, 0, jnp.float32)
        return key_excess(jnp, attn, masks, jnp.ones((3, s)))

    got = excess(jnp.asarray(contexts), jnp.asarray(attn, jnp.float32))
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-5)


def test_torch_agrees_with_numpy():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    contexts, attn = _random_case(rng)
    want = key_excess(np, attn, class_masks(np, contexts, 6, 2, float), np.ones((3, 6)))
    ctx = torch.as_tensor(contexts)
    masks = class_masks(torch, ctx, 6, 2, torch.float64)
    got = key_excess(torch, torch.as_tensor(attn), masks, torch.ones(3, 6).double())
    np.testing.assert_allclose(got.numpy(), want, atol=1e-12)


def test_a_move_is_named_by_the_class_that_gained_most():
    before = np.zeros(len(KEY_CLASSES))
    after = before.copy()
    after[KEY_CLASSES.index("first")] = 0.4
    after[KEY_CLASSES.index("top")] = 0.1
    assert moved_onto(before, after, 0.1) == "first"
    # a gain below half the margin on every class: diffuse
    assert moved_onto(before, np.full(len(KEY_CLASSES), 0.04), 0.1) == DIFFUSE
    assert moved_onto(before, np.full(len(KEY_CLASSES), 0.05), 0.1) == "top"
    with pytest.raises(ValueError, match="entries"):
        moved_onto(before[:3], after[:3], 0.1)


def test_top_dominance_counts():
    assert top_dominance([0, 0, 0, 1, 1, 2], 0) == pytest.approx(1.5)
    assert top_dominance([3, 3, 3], 3) == np.inf  # no other token
    assert top_dominance([1, 2, 2], 0) == 0.0  # top absent
    assert top_dominance(np.array([[5, 5], [5, 6]]), 5) == pytest.approx(3.0)


def test_the_names_a_stage_may_carry():
    assert set(STAGE_NAMES).isdisjoint(MOVE_NAMES)
    for name in STAGE_NAMES + MOVE_NAMES:
        s = Stage(name, 0.0, 1.0, 1, key="top" if "focus" in name else None)
        assert s.is_paper_stage == (name in STAGE_NAMES)
        assert Stage.from_dict(s.to_dict()) == s
    with pytest.raises(ValueError, match="key must be"):
        Stage("focus", 0.0, 1.0, 1, key="elsewhere")
