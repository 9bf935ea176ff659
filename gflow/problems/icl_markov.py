"""In-context Markov chains (ICL-MC; Edelman, Edelman, Goel, Malach and Tsilivis,
"The Evolution of Statistical Induction Heads", NeurIPS 2024, arXiv 2402.11004).

Each sequence draws its own transition matrix P (k × k), every row i.i.d.
Dirichlet(α·1) (α the concentration of each entry; α = 1 is uniform on the simplex),
the first state uniform on {0..k-1}, then x_{t+1} ~ P[x_t]. A learner sees only the
context, so the best it can do is the posterior predictive of the next state.

Three in-context predictors of x_{t+1} from x_1..x_t (``STRATEGIES``):

- ``uniform``: q(j) = 1/k (loss ln k at every position);
- ``unigram``: q(j) = (c_j + α) / (t + kα), c_j = #{u ≤ t : x_u = j}. This is the
  paper's unigram strategy (predict from the frequencies of the states seen so far),
  written as a posterior mean: it is the Bayes predictive of a model in which the
  states are i.i.d. from one unknown distribution p ~ Dirichlet(α·1), whose posterior
  after t draws is Dirichlet(α + c), of mean (c + α)/(t + kα). It is not Bayes-optimal
  for ICL-MC (it ignores the order), and it is the predictor a model that attends
  uniformly over the context and copies the tokens computes (with α → 0);
- ``bigram``: q(j) = (n_{x_t j} + α) / (n_{x_t ·} + kα), n_ij = #{u < t : x_u = i,
  x_{u+1} = j}: the posterior mean of the row P[x_t] given the transitions seen (row
  i's posterior is Dirichlet(α + n_i·)). Since the rows are independent a priori and
  x_1 is uniform, this is the exact posterior predictive, so it is the Bayes-optimal
  predictor: no predictor has a lower expected loss at any position.

Expected losses (nats), ``strategy_losses``: for a sequence of ``length`` = s + 1
tokens, the predictions of x_{t+1} from x_1..x_t for t = 1..s, averaged over t
(``mean``) and at t = s (``last``). Exact values come from enumerating all k^(s+1)
sequences with their prior probability (the Dirichlet-multinomial marginal)

    P(x_1..x_n) = (1/k) Π_i [Γ(kα) / Γ(kα + n_i·)] Π_j Γ(α + n_ij) / Γ(α),

where that fits in ``exact_limit`` sequences; otherwise by Monte Carlo over sampled
sequences, each position's loss replaced by its conditional expectation given the
context (Σ_j q_B(j) · (−log q(j)) with q_B the bigram posterior predictive, the true
conditional law of x_{t+1}), with a standard error over the sequences.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PRNGKeyArray

#: the in-context predictors, in the order of every strategy axis
STRATEGIES = ("uniform", "unigram", "bigram")


@dataclasses.dataclass(frozen=True)
class StrategyLosses:
    """Expected next-token cross-entropy (nats) of each strategy in ``STRATEGIES``.

    Fields:
        length: tokens per sequence (s + 1; predictions at t = 1..s).
        mean: loss averaged over the s predictions, one per strategy.
        last: loss of the last prediction (x_{s+1} from x_1..x_s).
        mean_se, last_se: standard errors (zeros when ``exact``).
        exact: computed by full enumeration (else Monte Carlo).
        samples: sequences enumerated or sampled.
    """

    length: int
    mean: tuple[float, float, float]
    last: tuple[float, float, float]
    mean_se: tuple[float, float, float]
    last_se: tuple[float, float, float]
    exact: bool
    samples: int

    def of(self, name: str) -> tuple[float, float]:
        """(mean, last) of the strategy ``name``."""
        if name not in STRATEGIES:
            raise ValueError(f"unknown strategy {name!r}; choose from {STRATEGIES}")
        i = STRATEGIES.index(name)
        return self.mean[i], self.last[i]


class InContextMarkov(eqx.Module):
    """The ICL-MC task: a fresh Dirichlet(α) transition matrix per sequence.

    Fields:
        states: number of states k (>= 2), also the vocabulary size.
        alpha: Dirichlet concentration α > 0 of every entry of a row.
    """

    states: int = eqx.field(static=True)
    alpha: float = eqx.field(static=True, default=1.0)

    def __check_init__(self):
        if not isinstance(self.states, int) or self.states < 2:
            raise ValueError(f"states must be an integer >= 2, got {self.states}")
        if not (isinstance(self.alpha, (int, float)) and self.alpha > 0):
            raise ValueError(f"alpha must be a positive number, got {self.alpha}")

    def matrices(self, *, key: PRNGKeyArray, batch: int) -> Float[Array, "b k k"]:
        """``batch`` transition matrices, rows i.i.d. Dirichlet(α·1)."""
        k = self.states
        return jax.random.dirichlet(key, jnp.full((k,), float(self.alpha)), (batch, k))

    def sample(
        self,
        *,
        key: PRNGKeyArray,
        batch: int,
        length: int,
        return_matrices: bool = False,
    ) -> Int[Array, "b n"] | tuple[Int[Array, "b n"], Float[Array, "b k k"]]:
        """``batch`` sequences of ``length`` states, int32 [batch, length], each from
        its own matrix (returned too, [batch, k, k], with ``return_matrices``)."""
        for name, v in (("batch", batch), ("length", length)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v}")
        tokens, P = _sample(self, key, batch, length)
        return (tokens, P) if return_matrices else tokens

    def strategy_probabilities(
        self, tokens: Int[Array, "b n"]
    ) -> Float[Array, "3 b n k"]:
        """Each strategy's predictive distribution of the state after every prefix:
        entry [:, :, t] predicts x_{t+1} from x_0..x_t (0-based), in ``STRATEGIES``
        order."""
        k, a = self.states, float(self.alpha)
        onehot = jax.nn.one_hot(tokens, k)  # [b, n, k]
        n = tokens.shape[1]
        uniform = jnp.full(onehot.shape, 1.0 / k)
        seen = jnp.cumsum(onehot, axis=1)  # [b, n, k]: counts of x_0..x_t
        t = jnp.arange(1, n + 1)[None, :, None]
        unigram = (seen + a) / (t + k * a)
        # transitions x_{u} → x_{u+1} with u + 1 <= t, accumulated: [b, n, k, k]
        pairs = jnp.einsum("bui,buj->buij", onehot[:, :-1], onehot[:, 1:])
        trans = jnp.concatenate(
            [jnp.zeros_like(pairs[:, :1]), jnp.cumsum(pairs, axis=1)], axis=1
        )
        row = jnp.einsum("btij,bti->btj", trans, onehot)  # counts out of x_t
        bigram = (row + a) / (row.sum(-1, keepdims=True) + k * a)
        return jnp.stack([uniform, unigram, bigram])

    def sequence_probability(self, tokens: Int[Array, "b n"]) -> Float[Array, " b"]:
        """The prior-marginal probability of each whole sequence (the
        Dirichlet-multinomial formula of the module docstring)."""
        k, a = self.states, float(self.alpha)
        onehot = jax.nn.one_hot(tokens, k)
        n_ij = jnp.einsum("bui,buj->bij", onehot[:, :-1], onehot[:, 1:])
        lg = jax.scipy.special.gammaln
        log_p = (
            -math.log(k)
            + jnp.sum(lg(k * a) - lg(k * a + n_ij.sum(-1)), axis=-1)
            + jnp.sum(lg(a + n_ij) - lg(a), axis=(-1, -2))
        )
        return jnp.exp(log_p)

    def strategy_losses(
        self,
        length: int,
        *,
        key: PRNGKeyArray | None = None,
        samples: int = 20_000,
        exact_limit: int = 2**16,
    ) -> StrategyLosses:
        """Expected losses of ``STRATEGIES`` on sequences of ``length`` tokens.

        Args:
            length: tokens per sequence, s + 1 >= 2 (predictions at t = 1..s).
            key: PRNG key of the Monte Carlo estimate (needed when k^length exceeds
                ``exact_limit``).
            samples: sequences of the Monte Carlo estimate.
            exact_limit: largest number of sequences enumerated exactly.
        """
        if not isinstance(length, int) or length < 2:
            raise ValueError(f"length must be an integer >= 2, got {length}")
        k = self.states
        if k**length <= exact_limit:
            tokens = jnp.asarray(
                list(itertools.product(range(k), repeat=length)), dtype=jnp.int32
            )
            mean, last = _enumerated_losses(self, tokens)
            zero = (0.0, 0.0, 0.0)
            return StrategyLosses(
                length,
                _triple(mean),
                _triple(last),
                zero,
                zero,
                True,
                int(tokens.shape[0]),
            )
        if key is None:
            raise ValueError(
                f"k^length = {k}^{length} sequences exceed exact_limit = "
                f"{exact_limit}: pass key= for the Monte Carlo estimate"
            )
        if not isinstance(samples, int) or samples < 2:
            raise ValueError(f"samples must be an integer >= 2, got {samples}")
        per_mean, per_last = _sampled_losses(self, key, samples, length)  # [3, N]
        root = math.sqrt(samples)
        return StrategyLosses(
            length,
            _triple(per_mean.mean(-1)),
            _triple(per_last.mean(-1)),
            _triple(per_mean.std(-1, ddof=1) / root),
            _triple(per_last.std(-1, ddof=1) / root),
            False,
            samples,
        )

    def bayes_limit(self) -> float:
        """The loss of a predictor that knows P: E H(Dirichlet(α·1) row) =
        ψ(kα + 1) − ψ(α + 1), the limit of the bigram loss as t → ∞."""
        k, a = self.states, float(self.alpha)
        dg = jax.scipy.special.digamma
        return float(dg(k * a + 1.0) - dg(a + 1.0))


@eqx.filter_jit
def _sample(task: InContextMarkov, key, batch: int, length: int):
    """Tokens [batch, length] and their matrices [batch, k, k] (one program)."""
    k_mat, k_first, k_steps = jax.random.split(key, 3)
    P = task.matrices(key=k_mat, batch=batch)
    first = jax.random.randint(k_first, (batch,), 0, task.states)
    logP = jnp.log(P)  # [b, k, k]
    rows = jnp.arange(batch)

    def step(x, key_t):
        nxt = jax.random.categorical(key_t, logP[rows, x], axis=-1)
        return nxt, nxt

    keys = jax.random.split(k_steps, max(length - 1, 1))[: length - 1]
    _, rest = jax.lax.scan(step, first, keys)  # [n - 1, b]
    tokens = jnp.concatenate([first[None], rest], axis=0).T.astype(jnp.int32)
    return tokens, P


@eqx.filter_jit
def _enumerated_losses(task: InContextMarkov, tokens):
    """Prior-weighted mean and last-position losses over all sequences ``tokens``."""
    weight = task.sequence_probability(tokens)  # [N], sums to 1
    probs = task.strategy_probabilities(tokens)[:, :, :-1]  # [3, N, s, k]
    target = jax.nn.one_hot(tokens[:, 1:], task.states)
    loss = -jnp.sum(target * jnp.log(probs), axis=-1)  # [3, N, s]
    mean = jnp.einsum("n,gn->g", weight, loss.mean(-1))
    return mean, jnp.einsum("n,gn->g", weight, loss[:, :, -1])


@eqx.filter_jit
def _sampled_losses(task: InContextMarkov, key, samples: int, length: int):
    """Per sampled sequence, each position's expected loss given its context (the
    bigram posterior predictive is the law of the next state), mean and last."""
    tokens = task.sample(key=key, batch=samples, length=length)
    probs = task.strategy_probabilities(tokens)[:, :, :-1]  # [3, N, s, k]
    truth = probs[2]
    loss = -jnp.sum(truth[None] * jnp.log(probs), axis=-1)  # [3, N, s]
    return loss.mean(-1), loss[:, :, -1]


def _triple(x) -> tuple[float, float, float]:
    x = np.asarray(x, dtype=float)
    return (float(x[0]), float(x[1]), float(x[2]))
