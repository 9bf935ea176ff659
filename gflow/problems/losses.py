"""Losses of the attention model: the exact population loss and sampled sequence losses.

Both use the d×d forms M = W_E W_P and Φ = W_E W_A W_Eᵀ where they are cheaper than
gathering m-dimensional embeddings at every position (MODEL.md §2). A sampled sequence
then enters only through its token-type counts: positions of the same type share a
score, so attention over s positions is attention over d types weighted by counts,
exactly as the population loss weights them by π.

Token ids are checked. Concrete tokens (outside jit, or closed over by a jitted
function) holding an id outside 0 .. d_vocab−1 raise a ValueError naming the id,
its row and position (``check_token_ids``). Traced tokens cannot raise: there one bad id
makes the loss NaN (``nan_unless_valid``, a ``jnp.where`` on the validity of the
batch), so a flow or optimizer run ends ``diverged``, and good ids give the same
bits, loss and gradient, as without the check (one comparison and one reduction over
the tokens, no host sync).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, PyTree, Real

from gflow.problems.cross_entropy import head_cross_entropy
from gflow.problems.markov import MarkovChain
from gflow.problems.model import AttentionModel


def check_token_ids(
    tokens: Int[ArrayLike, "*shape"], d_vocab: int | None, *, name: str = "tokens"
) -> None:
    """ValueError naming the first id of concrete ``tokens`` outside 0 .. d_vocab−1.

    Args:
        tokens: int [batch, s+1] (reported as batch row and position) or int [n], a
            token stream (reported as its position). Traced tokens pass unchecked
            (``nan_unless_valid`` guards them inside jit).
        d_vocab: the vocabulary size d, or None to check only that ids are >= 0.
        name: what the tokens are, for the message.
    """
    if isinstance(tokens, jax.core.Tracer):
        return
    ids = np.asarray(tokens)
    if not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(f"{name} must be integer token ids, got dtype {ids.dtype}")
    bad = ids < 0 if d_vocab is None else (ids < 0) | (ids >= d_vocab)
    if not bad.any():
        return
    at = tuple(int(i) for i in np.argwhere(bad)[0])
    if len(at) == 2:
        role = "the target" if at[1] == ids.shape[1] - 1 else "context"
        where = f"batch row {at[0]}, position {at[1]} ({role})"
    else:
        where = f"position {', '.join(map(str, at))}"
    valid = (
        "be >= 0"
        if d_vocab is None
        else f"lie in 0 .. {d_vocab - 1} (d_vocab = {d_vocab})"
    )
    raise ValueError(
        f"{name}: token id {int(ids[at])} at {where} is out of range: ids must "
        f"{valid}; {int(bad.sum())} of {ids.size} ids are out of range (encode the "
        "data with the model's vocabulary)"
    )


def nan_unless_valid(
    loss: Float[Array, ""], tokens: Int[ArrayLike, "*shape"], d_vocab: int
) -> Float[Array, ""]:
    """``loss``, or NaN when traced ``tokens`` hold an id outside 0 .. d_vocab−1;
    concrete tokens are returned unchanged (``check_token_ids`` raises for them).

    The NaN is subtracted outside the gradient (``loss − sg(where(valid, 0, nan))``):
    a good batch keeps the bits of the loss (x − 0 = x, −0 included) and of its
    gradient, whose cotangent stays the constant 1 that XLA folds as without the
    guard. A bad batch's gradient is the unchecked one; the NaN loss is what the
    flow and optimizer loops read as a divergence.
    """
    if not isinstance(tokens, jax.core.Tracer):
        return loss
    valid = jnp.all((tokens >= 0) & (tokens < d_vocab))
    nan = jnp.full((), jnp.nan, loss.dtype)
    return loss - jax.lax.stop_gradient(jnp.where(valid, jnp.zeros_like(nan), nan))


def _vocab_size(model, tokens) -> int:
    """d: ``model.d_vocab``, or the width of the logits after ``tokens[0, :-1]``."""
    d = getattr(model, "d_vocab", None)
    if d is None:
        d = eqx.filter_eval_shape(model, jnp.asarray(tokens)[0, :-1]).shape[-1]
    return int(d)


def _type_forms(
    model: AttentionModel,
) -> tuple[Float[ArrayLike, "d d"], Float[ArrayLike, "d d"]]:
    """(Φ, M): Φ = (W_E W_Q)(W_E W_K)ᵀ, d·m² work instead of m³ for W_Q W_Kᵀ first."""
    if model.W_K is None:
        return model.Phi, model.M
    return (model.W_E @ model.W_Q) @ (model.W_E @ model.W_K).T, model.M


def population_attention(
    model: AttentionModel, pi: Real[ArrayLike, " d"]
) -> Float[Array, "d d"]:
    """a_ik = π_k exp(τΦ_ik) / Σ_l π_l exp(τΦ_il): query i's attention on key type k."""
    pi = jnp.asarray(pi, dtype=model.W_E.dtype)
    log_pi = jnp.where(pi > 0, jnp.log(jnp.where(pi > 0, pi, 1.0)), -jnp.inf)
    Phi, _ = _type_forms(model)
    return jax.nn.softmax(model.tau * Phi + log_pi[None, :], axis=-1)


def population_logits(
    model: AttentionModel, pi: Real[ArrayLike, " d"]
) -> Float[Array, "d d"]:
    """f_i = Σ_k a_ik M_k: the logits after query i in an infinitely long context."""
    M = model.M
    f = population_attention(model, pi) @ M  # [d, d]
    return f + M if model.residual else f


def population_loss(model: AttentionModel, chain: MarkovChain) -> Float[Array, ""]:
    """The exact s→∞ loss L = Σ_i π_i Σ_j P_ij (−log softmax(f_i)_j) (MODEL.md §4)."""
    dtype = model.W_E.dtype
    P = jnp.asarray(chain.P, dtype=dtype)
    pi = jnp.asarray(chain.pi, dtype=dtype)
    logp = jax.nn.log_softmax(population_logits(model, pi), axis=-1)
    return -jnp.sum(pi[:, None] * P * logp)


#: From this vocabulary on, the gathered last-token loss of an ``AttentionModel``
#: takes its output layer by row blocks (``gflow.problems.cross_entropy``): text
#: vocabularies, where the [n, d] logits dominate a gradient. Below it the plain
#: form is kept (Markov chains, d of a few to a few tens).
BLOCKED_MIN_VOCAB = 256


def _use_dense(model: AttentionModel, dense: bool | None) -> bool:
    # The d×d form costs s·d per sequence to count token types (no parameters
    # involved) and d² (last position) or s·d² (all positions) for the logits,
    # against m² + s·m and s·s·m for the gathered form: it wins while d ≤ m.
    return model.d_vocab <= model.d_model if dense is None else dense


def _log_counts(counts):
    # log n with log 0 = −inf: a type absent from the context gets no attention
    return jnp.where(counts > 0, jnp.log(jnp.where(counts > 0, counts, 1.0)), -jnp.inf)


def _type_major(tokens, d, dtype):
    # one-hot with the type axis first, [d, ...]: the reductions over the d types then
    # run across contiguous sequences instead of along a short last axis
    return jax.nn.one_hot(tokens, d, dtype=dtype, axis=0)


def _dense_loss(model, Phi, M, query, counts, target):
    """Mean cross-entropy from the d×d forms, by token type; all arrays [d, n].

    All positions that hold type k share the score τΦ_{qk} of a query q, so the
    softmax over positions is a softmax over the d types weighted by n_k, the count of
    type k among the positions attended to: a_k = n_k exp(τΦ_{qk}) / Σ_l n_l
    exp(τΦ_{ql}). The parameters enter only through matrix products (no gather or
    scatter of Φ or M, which vmapped over a sweep's members became batched gathers).
    """
    scores = model.tau * (Phi.T @ query) + _log_counts(counts)  # [d, n]
    logits = M.T @ jax.nn.softmax(scores, axis=0)  # [d, n]
    if model.residual:
        logits = logits + M.T @ query
    return -jnp.sum(jax.nn.log_softmax(logits, axis=0) * target) / target.shape[1]


def _last_loss_dense(model, Phi, M, context, target):
    """The last-position loss: the query is x_s, the counts those of x_1..x_s."""
    d, dtype = model.d_vocab, M.dtype
    counts = jnp.sum(_type_major(context, d, dtype), axis=-1)  # [d, b]
    query = _type_major(context[:, -1], d, dtype)  # [d, b]
    return _dense_loss(model, Phi, M, query, counts, _type_major(target, d, dtype))


def _causal_loss_dense(model, Phi, M, context, target):
    """Every position: query x_i, the counts those of x_1..x_i; flattened [d, b·s]."""
    d, dtype = model.d_vocab, M.dtype
    onehot = _type_major(context, d, dtype)  # [d, b, s]
    counts = jnp.cumsum(onehot, axis=-1).reshape(d, -1)  # [d, b·s]
    target = _type_major(target, d, dtype).reshape(d, -1)
    return _dense_loss(model, Phi, M, onehot.reshape(d, -1), counts, target)


def _causal_logits_gathered(model, context):
    s = context.shape[0]
    emb = model.W_E[context]  # [s, m]
    scores = model.tau * (emb @ model.W_A) @ emb.T  # [s, s]
    mask = jnp.tril(jnp.ones((s, s), dtype=bool))
    attn = jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)
    out = attn @ emb  # [s, m]
    if model.residual:
        out = out + emb
    return out @ model.W_P


def _cross_entropy(logits, target):
    return -jnp.take_along_axis(
        jax.nn.log_softmax(logits, axis=-1), target[..., None], axis=-1
    )[..., 0]


def sequence_loss(
    model: AttentionModel | PyTree,
    tokens: Int[ArrayLike, "b s1"],
    *,
    all_positions: bool = False,
    dense: bool | None = None,
) -> Float[Array, ""]:
    """Mean cross-entropy of sampled sequences.

    Args:
        model: the attention model, or any model with ``model(context) -> [d]``
            logits of the next token (and ``model.causal_logits(context) -> [s, d]``
            for ``all_positions``), e.g. ``gflow.Transformer``.
        tokens: int [batch, s+1]; context ``tokens[:, :-1]``, target ``tokens[:, -1]``.
        all_positions: the causal objective that predicts every next token (each
            position attends to itself and the positions before it). Off by default:
            the paper's objective is the last position only.
        dense: force the d×d form (True) or the gathered-embedding form (False);
            None picks the cheaper one. Both give the same loss. AttentionModel only.

    Raises:
        ValueError: for concrete tokens with an id outside 0 .. d_vocab−1, naming
            it and its row and position. Traced tokens (inside jit) with such an id
            give a NaN loss instead (``nan_unless_valid``), never a plausible
            number: a run on them ends ``diverged``.
    """
    if np.ndim(tokens) != 2 or np.shape(tokens)[1] < 2:
        raise ValueError(
            f"tokens must be int [batch, s+1] with s >= 1, got {np.shape(tokens)}"
        )
    d = _vocab_size(model, tokens)
    check_token_ids(tokens, d)
    tokens = jnp.asarray(tokens)
    loss = _sequence_loss(model, tokens, all_positions=all_positions, dense=dense)
    return nan_unless_valid(loss, tokens, d)


def _sequence_loss(model, tokens, *, all_positions, dense):
    """``sequence_loss`` on tokens already checked (or guarded)."""
    context, target = tokens[:, :-1], tokens[:, -1]
    if not isinstance(model, AttentionModel):
        if dense:
            raise ValueError("dense=True is the d×d form of the AttentionModel only")
        if all_positions:
            if not hasattr(model, "causal_logits"):
                raise ValueError(
                    f"all_positions needs {type(model).__name__}.causal_logits"
                )
            logits = jax.vmap(model.causal_logits)(context)  # [b, s, d]
            return jnp.mean(_cross_entropy(logits, tokens[:, 1:]))
        return jnp.mean(_cross_entropy(jax.vmap(model)(context), target))
    if _use_dense(model, dense):
        Phi, M = _type_forms(model)
        if all_positions:
            return _causal_loss_dense(model, Phi, M, context, tokens[:, 1:])
        return _last_loss_dense(model, Phi, M, context, target)
    if all_positions:
        logits = jax.vmap(lambda c: _causal_logits_gathered(model, c))(context)
        return jnp.mean(_cross_entropy(logits, tokens[:, 1:]))
    return last_token_loss(model, model.W_P, context, target)


def last_token_loss(model, W_P, context, target) -> Float[Array, ""]:
    """Mean last-token cross-entropy of a one-layer model whose logits are
    ``model.features(context) @ W_P``: its output layer by row blocks from
    ``BLOCKED_MIN_VOCAB`` on (``head_cross_entropy``), plainly below."""
    if W_P.shape[1] >= BLOCKED_MIN_VOCAB:
        return head_cross_entropy(jax.vmap(model.features)(context), W_P, target)
    return jnp.mean(_cross_entropy(jax.vmap(model)(context), target))


class PopulationLoss(eqx.Module):
    """``loss_fn(model)`` for the population loss of a chain; its arrays are traced."""

    chain: MarkovChain

    def __call__(self, model: AttentionModel) -> Float[Array, ""]:
        return population_loss(model, self.chain)


class SequenceLoss(eqx.Module):
    """``loss_fn(model)`` for a fixed batch of token sequences (full-batch flow).

    Construction checks the tokens: int [batch, s+1], every id >= 0 and, given
    ``d_vocab``, below it (a ValueError naming the id and its row and position).
    Called, it is ``sequence_loss``: inside jit its tokens are traced, so an id
    outside the model's vocabulary makes the loss NaN (the run ends ``diverged``).
    """

    tokens: Int[np.ndarray, "b s1"] | Int[Array, "b s1"]
    all_positions: bool = eqx.field(static=True, default=False)
    dense: bool | None = eqx.field(static=True, default=None)
    d_vocab: int | None = eqx.field(static=True, default=None, kw_only=True)

    def __check_init__(self):
        if np.ndim(self.tokens) != 2 or np.shape(self.tokens)[1] < 2:
            raise ValueError(
                "tokens must be int [batch, s+1] with s >= 1, got "
                f"{np.shape(self.tokens)}"
            )
        check_token_ids(self.tokens, self.d_vocab)

    def __call__(self, model: AttentionModel | PyTree) -> Float[Array, ""]:
        return sequence_loss(
            model, self.tokens, all_positions=self.all_positions, dense=self.dense
        )
