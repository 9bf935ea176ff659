"""The monitor's reduction of attention to per-head signals, against a loop over
layers, heads, sequences and query rows written here (issue 58, point 1).

``gflow.attention_signals`` is the arithmetic every framework's monitor shares
(the JAX, PyTorch, Hugging Face and Flax monitors all reduce through it), so the
tests that compare those monitors with each other cannot see a mistake in it. Here
the attention is random and causal, of 2 layers × 2 heads over 5 contexts of 6
tokens, with the rows of the last 4 query positions only: which rows are queries,
which keys hold the top or the query's own token, and which queries are tracked
are each read by hand. The JAX monitor's unigram gap, on a probe whose first and
last columns differ, is its loss minus the targets' smoothed unigram loss.
"""

import jax
import numpy as np

import gflow

L, H, B, S, R = 2, 2, 5, 6, 4
TOP, TRACKED = 1, np.array([0, 2])


def _probe():
    rng = np.random.default_rng(4)
    tokens = rng.integers(0, 4, size=(B, S + 1))
    attn = rng.random((L, H, B, R, S))
    for i in range(R):  # query row i sits at position S - R + i: keys 0 .. it
        attn[..., i, S - R + i + 1 :] = 0.0
    return tokens, attn / attn.sum(-1, keepdims=True)


def _by_hand(tokens, attn):
    ctx = tokens[:, :-1]
    on_top = np.zeros((L, H))
    tracked_on_top = np.zeros((L, H, len(TRACKED)))
    on_self = np.zeros((L, H))
    n_top, n_tracked, n_self = 0, np.zeros(len(TRACKED)), 0
    for b in range(B):
        for i in range(R):
            q = ctx[b, S - R + i]  # the query row's own token
            row = attn[:, :, b, i, :]  # [L, H, S]
            mass_top = row[..., ctx[b] == TOP].sum(-1)
            mass_self = row[..., ctx[b] == q].sum(-1)
            if q == TOP:
                on_top += mass_top
                n_top += 1
            for k, t in enumerate(TRACKED):
                if q == t:
                    tracked_on_top[..., k] += mass_top
                    n_tracked[k] += 1
            if q in TRACKED:
                on_self += mass_self
                n_self += 1
    assert n_top and n_self and n_tracked.all()  # every mean has occurrences
    last = attn[..., -1, :]  # [L, H, B, S]
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(last > 0, last * np.log(last), 0.0)
    return {
        "head_entropy": -plogp.sum(-1).mean(-1),
        "head_on_top": on_top / n_top,
        "head_tracked_on_top": tracked_on_top / n_tracked,
        "head_self": on_self / n_self,
    }


def test_the_per_head_signals_read_their_own_rows_and_keys():
    """Entropy of the last query row, mass on the top token's keys from the top
    token's rows and from each tracked token's rows, and mass on the query's own
    token from the tracked rows: each equals the hand loop.

    Catches the query rows taken from the start of the context instead of its
    end, and the same-token mask with its query and key axes swapped."""
    tokens, attn = _probe()
    got = gflow.attention_signals(attn, tokens, top=TOP, tracked=TRACKED).as_dict()
    for name, want in _by_hand(tokens, attn).items():
        np.testing.assert_allclose(got[name], want, rtol=1e-12, err_msg=name)


def test_the_jax_monitors_unigram_gap_scores_the_targets(tmp_path):
    """The JAX monitor's ``unigram_gap`` is its probe loss minus the cross-entropy
    of the probe's targets (last tokens) under the add-one smoothed frequencies of
    its context tokens, computed here; the probe's sequences start with 0 and end
    with 3, so scoring another column would show.

    Catches the unigram loss scored on the first token instead of the target."""
    tokens = np.array([[0, 1, 2, 1, 3], [0, 2, 2, 1, 3], [0, 1, 1, 2, 3]])
    model = gflow.AttentionModel.init(
        d_vocab=4, d_model=4, init_scale=0.5, key=jax.random.key(0)
    )
    with gflow.Monitor(tmp_path, every=1, verbose=False) as monitor:
        monitor.observe(0, model, tokens)
    traj, _, _ = gflow.load_monitor(tmp_path)
    counts = np.bincount(tokens[:, :-1].ravel(), minlength=4) + 1.0
    unigram = -np.mean(np.log(counts / counts.sum())[tokens[:, -1]])
    gap = traj.metrics["unigram_gap"][0]
    np.testing.assert_allclose(gap, traj.metrics["loss"][0] - unigram, rtol=1e-6)
