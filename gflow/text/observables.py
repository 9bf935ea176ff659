"""Text observables: the attention rows of chosen query tokens.

They can run inside a jitted training loop (``observables=`` of ``run_optimizer``) or,
cheaper to compile, afterwards on the saved parameter snapshots
(``observe_snapshots``): the loop then only holds the loss gradient.

Definition (the text analogue of the population attention a_ik of MODEL.md §4). For a
window n of the fixed sample let a_n be the last position's attention over its s
positions and w_n[k] = Σ_j a_nj [x_nj = k] the attention mass on key *type* k. The
attention row of a query type q is the average of w_n over the windows whose last
token is q:

    A_q[k] = mean_{n : x_{n,s} = q} w_n[k]          (a distribution over the d types)

Its entropy H(A_q), its mass on the k most frequent types and on q itself are what the
paper plots for a query token. Queries with no window in the sample get NaN.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from gflow.analysis.observables import entropy, singular_values
from gflow.array_types import Model
from gflow.problems.model import AttentionModel
from gflow.text.counts import type_attention_counts, window_log_counts
from gflow.text.positional import PositionalAttentionModel
from gflow.text.tokenize import UNK, Vocabulary


def window_attention(
    model: AttentionModel | PositionalAttentionModel, contexts: Int[Array, "n s"]
) -> Float[Array, "n s"]:
    """The last position's attention over the positions of every window."""
    if isinstance(model, PositionalAttentionModel):
        return jax.vmap(model.attention)(contexts)
    emb = model.W_E[contexts]  # [n, s, m]
    q = emb[:, -1] @ model.W_A  # [n, m]
    scores = model.tau * jnp.einsum("nm,nsm->ns", q, emb)
    return jax.nn.softmax(scores, axis=-1)


def type_attention(
    attn: Float[Array, "n s"], contexts: Int[Array, "n s"], d: int
) -> Float[Array, "n d"]:
    """w_n[k] = Σ_j a_nj [x_nj = k]: attention mass per key type."""
    return jax.vmap(lambda a, c: jnp.zeros(d, a.dtype).at[c].add(a))(attn, contexts)


def query_rows(
    w: Float[Array, "n d"], contexts: Int[Array, "n s"], queries: Int[Array, " q"]
) -> Float[Array, "q d"]:
    """A_q: the mean of w_n over the windows whose last token is q (NaN if none)."""
    match = (contexts[:, -1][:, None] == queries[None, :]).astype(w.dtype)  # [n, q]
    count = match.sum(axis=0)
    rows = match.T @ w  # [q, d]
    return jnp.where(count[:, None] > 0, rows / jnp.maximum(count, 1)[:, None], jnp.nan)


class TextObservables(eqx.Module):
    """Observables of a text run on a fixed sample of windows (arrays traced).

    Returns a dict with
        attention_rows [q, d]: A_q for the tracked queries;
        query_entropy, query_on_top1, query_on_topk, query_on_self [q];
        attention_entropy: mean over windows of H(w_n);
        attention_on_top: mean over windows of w_n[most frequent type];
        sv_W_E, sv_W_P, sv_W_A [n_sv]: leading singular values.
    """

    contexts: Int[Array, "n s"]
    log_counts: Float[Array, "n d"] | None
    queries: Int[Array, " q"]
    top: Int[Array, " k"]
    n_sv: int = eqx.field(static=True, default=4)
    n_sample: int = eqx.field(static=True, default=-1)

    def __init__(
        self,
        windows: Int[ArrayLike, "n s1"],
        queries: Int[ArrayLike, " q"] | Sequence[int],
        top: Int[ArrayLike, " k"] | Sequence[int],
        *,
        n_sv: int = 4,
        d_vocab: int | None = None,
        row_windows: Int[ArrayLike, "r s1"] | None = None,
    ):
        """Args: windows int [n, s+1] (the targets are dropped); queries int [q];
        top int [k], the ids of the k most frequent types (top[0] the most);
        d_vocab: given, w_n is computed in the counts form (no scatter; not for
        positional models, which fall back to the per-position form);
        row_windows: more windows [r, s+1] that the query rows (and only they) are
        also averaged over (``query_windows``: rare queries end few sample windows);
        the means over all windows stay over ``windows``."""
        windows = np.asarray(windows)
        self.n_sample = windows.shape[0]
        if row_windows is not None:
            windows = np.concatenate([windows, np.asarray(row_windows, windows.dtype)])
        self.contexts = jnp.asarray(windows[:, :-1], dtype=jnp.int32)
        self.log_counts = (
            None
            if d_vocab is None
            else jnp.asarray(window_log_counts(windows, d_vocab))
        )
        self.queries = jnp.asarray(queries, dtype=jnp.int32)
        self.top = jnp.asarray(top, dtype=jnp.int32)
        if self.top.ndim != 1 or self.top.shape[0] < 1:
            raise ValueError("top must list at least one token id")
        self.n_sv = n_sv

    def __call__(
        self, model: AttentionModel | PositionalAttentionModel
    ) -> dict[str, Float[Array, "..."]]:
        base = model.base if isinstance(model, PositionalAttentionModel) else model
        d = base.d_vocab
        if self.log_counts is not None and model is base:
            w = type_attention_counts(model, self.log_counts, self.contexts[:, -1])
        else:
            attn = window_attention(model, self.contexts)
            w = type_attention(attn, self.contexts, d)  # [n, d]
        rows = query_rows(w, self.contexts, self.queries)  # [q, d]
        q_idx = jnp.arange(self.queries.shape[0])
        k = self.n_sv
        return {
            "attention_rows": rows,
            "query_entropy": entropy(rows),
            "query_on_top1": rows[:, self.top[0]],
            "query_on_topk": rows[:, self.top].sum(axis=1),
            "query_on_self": rows[q_idx, self.queries],
            "attention_entropy": jnp.mean(entropy(w[: self.n_sample])),
            "attention_on_top": jnp.mean(w[: self.n_sample, self.top[0]]),
            "sv_W_E": singular_values(base.W_E)[:k],
            "sv_W_P": singular_values(base.W_P)[:k],
            "sv_W_A": singular_values(base.W_A)[:k],
        }


@eqx.filter_jit
def _observe_one(observables, params, static):
    return observables(eqx.combine(params, static))


def observe_snapshots(
    observables: Callable[[Model], Mapping[str, ArrayLike]], snapshots: Model
) -> dict[str, np.ndarray]:
    """``observables`` at every saved time of a time-stacked model (outside the loop).

    One compiled evaluation of the unbatched observables, called once per snapshot
    (snapshots sliced in NumPy): this compiles several times faster than a vmapped
    or ``lax.map``-ped version, and compilation is what costs on a busy machine.

    Args:
        observables: ``fn(model) -> dict`` (e.g. ``TextObservables``).
        snapshots: a model whose array leaves carry a leading time axis [n_t, ...]
            (``Trajectory.params`` of a run that saved its parameters).

    Returns:
        dict name -> numpy array [n_t, ...].
    """
    params, static = eqx.partition(snapshots, eqx.is_inexact_array)
    params = jax.tree.map(np.asarray, params)
    n_t = jax.tree.leaves(params)[0].shape[0]
    outs = [
        _observe_one(observables, jax.tree.map(operator.itemgetter(i), params), static)
        for i in range(n_t)
    ]
    return {k: np.stack([np.asarray(o[k]) for o in outs]) for k in outs[0]}


def observe_saves(
    observables: Callable[[Model], Mapping[str, ArrayLike]], traj
) -> dict[str, np.ndarray]:
    """``observe_snapshots`` of a run's saved parameters (``traj.params``), each
    array at least float32 and NaN at the saves where the run's ``loss`` is not
    finite (after a divergence), as the run's own metrics are.

    How ``gflow text`` and ``gflow train`` observe a run that saved its
    parameters (full-batch GD, the flow, the full-batch optimizer)."""
    bad = ~np.isfinite(np.asarray(traj.metrics["loss"]))
    out = {}
    for k, v in observe_snapshots(observables, traj.params).items():
        v = v.astype(np.result_type(v.dtype, np.float32))
        v[bad] = np.nan
        out[k] = v
    return out


def default_queries(
    vocab: Vocabulary,
    windows: Int[ArrayLike, "n s1"],
    *,
    num: int = 4,
    min_windows: int = 8,
) -> list[int]:
    """A few mid-frequency word types: ranks spread geometrically over [5, d/4],
    each moved to the next rank whose type is a word (not punctuation or the
    unknown token) and ends at least ``min_windows`` windows of the sample."""
    last = np.asarray(windows)[:, -2]
    ends = np.bincount(last, minlength=len(vocab))
    d = len(vocab)
    hi = max(6, d // 4)
    chosen: list[int] = []
    for r in np.unique(np.geomspace(5, hi, num).round().astype(int)):
        for i in range(int(r), d):
            tok = vocab.tokens[i]
            if i in chosen or tok == UNK or not tok.isalpha():
                continue
            if ends[i] >= min_windows:
                chosen.append(i)
                break
    return chosen
