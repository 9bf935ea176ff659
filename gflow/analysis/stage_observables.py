"""Stage observables of a Markov population run, evaluated inside jit (issue 3).

``StageObservables(chain)`` is the observable set that ``gflow flow`` records and that
``detect_stages`` reads: singular values and effective ranks of W_E, W_P, W_A; the
alignment of W_E's top left singular vector with π; the norms of W_Q, W_K, W_A; the
population attention matrix and its π-weighted entropy; every token's coordinates on
W_E's top singular directions; the alignment of Φ with ππᵀ; and the loss measured
against H(π) and the Bayes optimum. The loss and |∇L| are recorded by every run.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, Real

from gflow.analysis.observables import entropy
from gflow.problems.losses import population_attention, population_logits
from gflow.problems.markov import MarkovChain
from gflow.problems.model import AttentionModel


def effective_rank(sv: Float[ArrayLike, " k"]) -> Float[Array, ""]:
    """exp of the entropy of σ/Σσ (Roy & Vetterli): 1 for rank one, k for k equal σ."""
    total = jnp.sum(sv)
    p = sv / jnp.where(total > 0, total, 1.0)
    return jnp.exp(entropy(p))


def cosine(a: Float[ArrayLike, "..."], b: Float[ArrayLike, "..."]) -> Float[Array, ""]:
    """Cosine of the angle between two arrays seen as flat vectors."""
    a, b = a.ravel(), b.ravel()
    return a @ b / (jnp.linalg.norm(a) * jnp.linalg.norm(b))


def token_coordinates(
    W_E: Float[ArrayLike, "d m"], pi: Float[ArrayLike, " d"], k: int
) -> Float[Array, "d k"]:
    """Each token's embedding coordinate on W_E's top ``k`` right singular directions.

    Column j is W_E v_j = σ_j u_j. Singular vectors have no sign of their own; the
    sign is fixed so that the π-weighted sum of the coordinates along each direction
    is positive (so the most frequent tokens sit on the positive side). The same rule
    applies at every saved time, so the coordinates are comparable over time as long
    as that sum does not cross zero; ``align_signs`` fixes the rest afterwards.
    """
    U, S, _ = jnp.linalg.svd(W_E, full_matrices=False)
    coords = U[:, :k] * S[:k]  # [d, k]
    sign = jnp.sign(pi @ coords)
    return coords * jnp.where(sign == 0, 1.0, sign)


def align_signs(coords: Real[np.ndarray, "n d k"]) -> Float[np.ndarray, "n d k"]:
    """Flip the time series of coordinates [n, d, k] so each direction is continuous.

    Direction j at time i is flipped when it points away from its (already aligned)
    value at time i - 1: the sign of a singular vector is a convention, its continuity
    in time is what makes the coordinates comparable.
    """
    out = np.array(coords, dtype=float, copy=True)
    for i in range(1, out.shape[0]):
        dots = np.sum(out[i] * out[i - 1], axis=0)  # [k]
        out[i] *= np.where(dots < 0, -1.0, 1.0)
    return out


class StageObservables(eqx.Module):
    """Every stage observable of a Markov population run, as one dict per model.

    Keys: ``attention`` [d, d], ``attention_on_top`` [d], ``attention_entropy``;
    ``sv_W_E``, ``sv_W_P``, ``sv_W_A`` and ``erank_W_E``, ``erank_W_P``,
    ``erank_W_A``; ``cos_u1_pi`` (|cos| of u₁(W_E) with π); ``norm_W_Q``,
    ``norm_W_K`` (equal to ``norm_W_Q`` when unfactorised), ``norm_W_A`` (Frobenius);
    ``cos_Phi_pipi`` (cosine of Φ with ππᵀ); ``coords`` [d, k] (``token_coordinates``);
    ``unigram_gap`` = L - H(π) and ``bayes_gap`` = L - L*. Arrays are fields, hence
    traced: a new chain with the same d does not recompile.
    """

    pi: Float[Array, " d"]
    P: Float[Array, "d d"]
    unigram_loss: Float[Array, ""]
    bayes_loss: Float[Array, ""]
    k: int = eqx.field(static=True, default=3)

    def __init__(self, chain: MarkovChain, k: int = 3):
        self.pi = jnp.asarray(chain.pi)
        self.P = jnp.asarray(chain.P)
        self.unigram_loss = jnp.asarray(chain.unigram_loss)
        self.bayes_loss = jnp.asarray(chain.bayes_loss)
        self.k = min(int(k), len(chain.pi))

    def __call__(self, model: AttentionModel) -> dict[str, Float[Array, "..."]]:
        dtype = model.W_E.dtype
        pi, P = self.pi.astype(dtype), self.P.astype(dtype)
        attn = population_attention(model, pi)  # [d, d]
        logits = population_logits(model, pi)  # [d, d]
        logp = jax.nn.log_softmax(logits, axis=-1)
        loss = -jnp.sum(pi[:, None] * P * logp)
        U, S_E, _ = jnp.linalg.svd(model.W_E, full_matrices=False)
        S_P = jnp.linalg.svd(model.W_P, compute_uv=False)
        S_A = jnp.linalg.svd(model.W_A, compute_uv=False)
        W_K = model.W_Q if model.W_K is None else model.W_K
        return {
            "attention": attn,
            "attention_on_top": attn[:, jnp.argmax(pi)],
            "attention_entropy": jnp.sum(pi * entropy(attn)),
            "sv_W_E": S_E,
            "sv_W_P": S_P,
            "sv_W_A": S_A,
            "erank_W_E": effective_rank(S_E),
            "erank_W_P": effective_rank(S_P),
            "erank_W_A": effective_rank(S_A),
            "cos_u1_pi": jnp.abs(U[:, 0] @ pi) / jnp.linalg.norm(pi),
            "norm_W_Q": jnp.linalg.norm(model.W_Q),
            "norm_W_K": jnp.linalg.norm(W_K),
            "norm_W_A": jnp.linalg.norm(model.W_A),
            "cos_Phi_pipi": cosine(model.Phi, jnp.outer(pi, pi)),
            "coords": token_coordinates(model.W_E, pi, self.k),
            "unigram_gap": loss - self.unigram_loss.astype(dtype),
            "bayes_gap": loss - self.bayes_loss.astype(dtype),
        }


def sequence_attention(
    model: AttentionModel, context: Int[Array, " s"]
) -> Float[Array, "s s"]:
    """Causal attention rows of a sequence model: row q is query position q's weights
    on positions 0..q (``AttentionModel.attention``); the last row is what the
    model's last position uses."""
    return model.attention(context)
