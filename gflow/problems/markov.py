"""Markov-chain data: transition matrix, stationary π, sampler, reference losses."""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray

from gflow.array_types import RealVector

_ATOL = 1e-8  # tolerance on row sums and probabilities, in float64


def _entropy(p: np.ndarray) -> float:
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def _validate_distribution(name: str, p) -> np.ndarray:
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 1 or p.size < 2:
        raise ValueError(f"{name} must be a 1-D probability vector of length >= 2")
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise ValueError(
            f"{name} must have finite, non-negative entries, got {p.tolist()}"
        )
    if abs(p.sum() - 1.0) > 1e-6:
        raise ValueError(
            f"{name} must sum to 1, it sums to {p.sum():.8g}; normalise it"
        )
    return p / p.sum()


def stationary_distribution(P: Float[np.ndarray, "d d"]) -> Float[np.ndarray, " d"]:
    """The unique π with πP = π and Σπ = 1, in float64.

    Solves the linear system [Pᵀ - I; 1ᵀ] π = [0; 1] by least squares and checks that
    the solution is unique (an irreducible chain) and non-negative.
    """
    d = P.shape[0]
    A = np.vstack([P.T - np.eye(d), np.ones((1, d))])
    b = np.zeros(d + 1)
    b[-1] = 1.0
    pi, _, rank, _ = np.linalg.lstsq(A, b, rcond=None)
    if rank < d:
        raise ValueError(
            "P has more than one stationary distribution (it is reducible); "
            "give a chain in which every state reaches every other"
        )
    if np.any(pi < -1e-10):
        raise ValueError("the stationary distribution of P has negative entries")
    pi = np.clip(pi, 0.0, None)
    return pi / pi.sum()


class MarkovChain(eqx.Module):
    """A first-order Markov chain on d tokens with its stationary distribution.

    Fields:
        P: row-stochastic transition matrix, float64 [d, d]; P[i, j] = p(next=j | i).
        pi: stationary distribution, float64 [d].
    """

    P: Float[np.ndarray, "d d"]
    pi: Float[np.ndarray, " d"]

    def __init__(self, P: ArrayLike | Sequence[Sequence[float]]):
        P = np.asarray(P, dtype=np.float64)
        if P.ndim != 2 or P.shape[0] != P.shape[1] or P.shape[0] < 2:
            raise ValueError(
                f"P must be a square d x d matrix with d >= 2, got {P.shape}"
            )
        if not np.all(np.isfinite(P)) or np.any(P < 0):
            raise ValueError("P must have finite, non-negative entries")
        sums = P.sum(axis=1)
        if np.any(np.abs(sums - 1.0) > _ATOL):
            bad = int(np.argmax(np.abs(sums - 1.0)))
            raise ValueError(
                f"rows of P must sum to 1; row {bad} sums to {sums[bad]:.8g} "
                "(divide each row by its sum)"
            )
        self.P = P
        self.pi = stationary_distribution(P)

    @classmethod
    def from_lambda(cls, *, pi: RealVector, lam: float) -> MarkovChain:
        """P = λI + (1-λ)·1πᵀ: repeat the token with probability λ, else draw from π."""
        pi = _validate_distribution("pi", pi)
        if not 0.0 <= lam <= 1.0:
            raise ValueError(f"lam must lie in [0, 1], got {lam}")
        if lam == 1.0:
            raise ValueError("lam = 1 gives a reducible chain (tokens never change)")
        d = pi.size
        chain = cls(lam * np.eye(d) + (1.0 - lam) * np.outer(np.ones(d), pi))
        return chain

    @classmethod
    def default(cls) -> MarkovChain:
        """The default chain of MODEL.md §3: π = (0.75, 0.19, 0.05, 0.01), λ = 0.5."""
        return cls.from_lambda(pi=(0.75, 0.19, 0.05, 0.01), lam=0.5)

    @property
    def d(self) -> int:
        return self.P.shape[0]

    @property
    def unigram_loss(self) -> float:
        """H(π): the loss of the best predictor that ignores the context (nats)."""
        return _entropy(self.pi)

    @property
    def bayes_loss(self) -> float:
        """Σ_i π_i H(P_i·): the loss of the true next-token distribution (nats)."""
        return float(sum(p * _entropy(row) for p, row in zip(self.pi, self.P)))

    def sample(
        self, *, key: PRNGKeyArray, batch: int, length: int
    ) -> Int[Array, "b s1"]:
        """Sample ``batch`` sequences of ``length`` tokens, x₁ ~ π then P."""
        if batch < 1 or length < 1:
            raise ValueError(f"batch and length must be >= 1, got {batch}, {length}")
        log_P = jnp.log(jnp.asarray(self.P, dtype=jnp.float32))
        log_pi = jnp.log(jnp.asarray(self.pi, dtype=jnp.float32))
        return _sample(log_P, log_pi, key, batch, length)


@eqx.filter_jit
def _sample(log_P, log_pi, key, batch: int, length: int):
    """The chain's sampler, compiled once per shape (called eagerly, a scan over a
    new closure was traced and compiled again at every call)."""
    k0, k1 = jax.random.split(key)
    x0 = jax.random.categorical(k0, log_pi, shape=(batch,))

    def step(x, k):
        nxt = jax.random.categorical(k, log_P[x])
        return nxt, nxt

    keys = jax.random.split(k1, length - 1)
    _, rest = jax.lax.scan(step, x0, keys)  # [length-1, batch]
    return jnp.concatenate([x0[:, None], rest.T], axis=1).astype(jnp.int32)


class MarkovStream(eqx.Module):
    """Fresh minibatches of a chain: ``stream(key) -> tokens [batch, length]``.

    Each call samples new sequences (x₁ ~ π, then P), so an optimizer that draws
    ``stream(key_k)`` at step k sees SGD noise; ``chain.sample`` with one key gives
    the fixed sample of a full-batch run instead.
    """

    chain: MarkovChain
    batch: int = eqx.field(static=True)
    length: int = eqx.field(static=True)

    def __check_init__(self):
        if self.batch < 1 or self.length < 2:
            raise ValueError(
                f"need batch >= 1 and length >= 2, got {self.batch}, {self.length}"
            )

    def __call__(self, key: PRNGKeyArray) -> Int[Array, "b s1"]:
        return self.chain.sample(key=key, batch=self.batch, length=self.length)
