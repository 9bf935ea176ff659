"""Stiffness the user can see (issue 31, point 5): the progress lines, the watched step
size, and the report of a flow that ran out of steps, checked against a dense
eigensolver on a tiny stiff problem."""

import re

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gflow import solve_flow
from gflow.analysis import dense_hessian
from gflow.dynamics.solvers import (
    StallReport,
    Watched,
    WatchState,
    hessian_top,
    progress_line,
    stall_report,
    suggest,
)

# a rotated diagonal: H = Rᵀ diag(λ) R plus a quartic, so the Hessian is dense and
# moves along the flow
LAMBDAS = np.array([3000.0, 400.0, 2.0, 1.0, 0.5, 0.25])
R = np.linalg.qr(np.random.default_rng(0).normal(size=(6, 6)))[0]


class _Stiff(eqx.Module):
    def __call__(self, model):
        z = jnp.asarray(R) @ model["x"]
        return 0.5 * jnp.sum(jnp.asarray(LAMBDAS) * z**2) + 0.05 * jnp.sum(z**4)


MODEL = {"x": jnp.ones(6)}


def test_max_steps_report_matches_dense_hessian():
    """Tsit5 runs out of steps on λ_max = 3000: the report's t, step size and top
    eigenvalues are those of the last state (dense eigh), its h·λ_max is at Tsit5's
    stability limit, and it names the stiff method and the budget that would do."""
    tr = solve_flow(_Stiff(), MODEL, t1=10.0, solver=diffrax.Tsit5(), max_steps=200)
    assert tr.status == "max_steps"
    d = tr.diagnosis
    assert isinstance(d, StallReport)
    assert d.t_reached == tr.stats["t_reached"] < 10.0
    assert (d.steps, d.max_steps, d.solver, d.method) == (200, 200, "Tsit5", "Tsit5")
    exact = np.linalg.eigvalsh(np.asarray(dense_hessian(_Stiff(), tr.final)))[::-1]
    np.testing.assert_allclose(d.eigenvalues, exact, rtol=1e-9)
    assert d.lambda_max == pytest.approx(exact[0], rel=1e-9)
    # stability-limited: h·λ_max between 1 and Tsit5's real stability bound ≈ 3.4
    assert 1.0 < d.stiffness < 3.5
    assert 0 < d.smallest_step <= d.last_step
    assert "a stiff method" in d.suggestions[0]
    need = int(re.search(r"max_steps=([\d,]+)", d.message)[1].replace(",", ""))
    assert need == 200 + np.ceil((10.0 - d.t_reached) / d.last_step)
    assert f"{d.t_reached:.6g}" in d.message and "3000" in d.message


@pytest.mark.slow
def test_default_solver_is_not_stalled_and_reports_nothing():
    tr = solve_flow(_Stiff(), MODEL, t1=10.0, max_steps=300)
    assert tr.status == "success" and tr.diagnosis is None


def test_watched_changes_nothing_and_records_the_step():
    """Fixed steps h = 0.01: Watched(Tsit5) gives Tsit5's bits and records h."""

    def solve(solver):
        return diffrax.diffeqsolve(
            diffrax.ODETerm(lambda t, y, a: -jnp.asarray(LAMBDAS[2:]) * y),
            solver,
            t0=0.0,
            t1=1.0,
            dt0=0.01,
            y0=jnp.ones(4),
            saveat=diffrax.SaveAt(t1=True, solver_state=True),
        )

    plain = solve(diffrax.Tsit5())
    watched = solve(Watched(diffrax.Tsit5(), 0.0, 1.0))
    np.testing.assert_array_equal(plain.ys, watched.ys)
    st = watched.solver_state
    assert isinstance(st, WatchState) and int(st.count) == 100
    assert float(st.last_step) == pytest.approx(0.01, rel=1e-9)
    assert float(st.smallest_step) == pytest.approx(0.01, rel=1e-6)


def _watched_lines(capsys, **options) -> list[int]:
    """The step counts of the progress lines of 100 fixed steps of h = 0.01."""
    diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, y, a: -jnp.asarray(LAMBDAS[2:]) * y),
        Watched(diffrax.Tsit5(), 0.0, 1.0, show=True, **options),
        t0=0.0,
        t1=1.0,
        dt0=0.01,
        y0=jnp.ones(4),
    )
    jax.effects_barrier()
    err = capsys.readouterr().err
    return [int(s) for s in re.findall(r"step (\d+)\n", err)]


def test_progress_lines_come_by_step_count_and_by_wall_clock(capsys):
    """The step-count lines double (refresh 8: steps 8, 16, 32, 64); with
    every_s = 0 a line also comes at every check_every-th step (a slow solve is
    never silent for long); every_s < 0 is refused."""
    assert _watched_lines(capsys, refresh=8, every_s=1e9) == [8, 16, 32, 64]
    got = _watched_lines(capsys, refresh=8, every_s=0.0, check_every=30)
    assert got == [0, 8, 16, 30, 32, 60, 64, 90]
    with pytest.raises(ValueError, match="every_s"):
        Watched(diffrax.Tsit5(), 0.0, 1.0, every_s=-1.0)


@pytest.mark.slow
def test_progress_lines_show_t_step_and_method(capsys):
    """The progress lines name the method in use (AutoSwitch: Tsit5, then EXPRB32 on
    this stiff problem: the switch is a line) with t and h; the stall report
    follows them."""
    tr = solve_flow(_Stiff(), MODEL, t1=10.0, max_steps=120, progress=True)
    err = capsys.readouterr().err
    lines = re.findall(r"t = (\S+) / 10 \(\S+%\)  h = (\S+)  (\w+)", err)
    assert lines and "EXPRB32" in {m for _, _, m in lines}
    assert all(0 <= float(t) <= tr.stats["t_reached"] for t, _, _ in lines)
    assert all(float(h) > 0 for _, h, _ in lines)
    # the switch to EXPRB32 is shown with the solver's ρ, near λ_max = 3000
    rho = float(re.search(r"EXPRB32  ρ ≈ (\S+)", err)[1])
    assert 300 < rho < 3500
    if tr.status != "success":
        assert "the flow stopped at" in err


def test_hessian_top_matches_eigh():
    """8 Lanczos steps on a 12×12 matrix: each Ritz value lies within its bound of
    an eigenvalue (dense eigh), and the top one is a lower bound on λ_max."""
    a = np.random.default_rng(1).normal(size=(12, 12))
    H = a + a.T
    theta, bounds = hessian_top(lambda v: jnp.asarray(H) @ v, jnp.ones(12), 8)
    exact = np.linalg.eigvalsh(H)
    theta, bounds = np.asarray(theta), np.asarray(bounds)
    assert np.all(np.diff(theta) <= 0) and theta[0] <= exact[-1] + 1e-9
    gaps = np.min(np.abs(theta[:, None] - exact[None, :]), axis=1)
    assert np.all(gaps <= bounds + 1e-9)
    assert gaps[0] < 1e-2 * abs(exact[-1])  # the extreme end converges first


_FIELDS = dict(
    status="max_steps",
    solver="AutoSwitch",
    method="Tsit5",
    t0=0.0,
    t1=5.0,
    t_reached=1.0,
    steps=10,
    rejected=3,
    max_steps=10,
    grad_evals=61,
    last_step=1e-10,
    smallest_step=1e-10,
    solver_rho=None,
)


def test_suggestions_for_an_accuracy_limited_stall():
    """h·λ_max ≪ 1 with a step far below t: a looser rtol and a look at the flow,
    no stiff method, and the step budget the remaining horizon needs."""
    d = StallReport(
        eigenvalues=(2.0, 1.0),
        bounds=(0.0, 0.0),
        lanczos_iters=2,
        suggestions=(),
        **_FIELDS,
    )
    out = suggest(d)
    assert d.lambda_max == 2.0 and d.num_stiff() == 2 and d.stiffness == 2e-10
    assert not any("stiff method" in s for s in out)
    assert any("looser rtol" in s for s in out)
    assert any("collapsed" in s for s in out)
    assert any("max_steps=40,000,000,010" in s for s in out)


def test_suggestions_for_a_wide_stiff_spectrum():
    """Exponential steps with six eigenvalues within 10× of λ_max: RKC2 is named."""
    lam = (900.0, 800.0, 500.0, 300.0, 200.0, 100.0, 1.0)
    d = StallReport(
        eigenvalues=lam,
        bounds=(0.0,) * 7,
        lanczos_iters=7,
        suggestions=(),
        **{**_FIELDS, "method": "EXPRB32", "last_step": 0.02, "smallest_step": 0.01},
    )
    assert d.num_stiff() == 6
    assert suggest(d)[0].startswith("solver=RKC2()")


def test_suggestions_for_an_outlier_over_a_band_on_rkc2_steps():
    """RKC2 steps with λ₁ 50× above λ₂: SplitRKC2 is named first, with the ratio;
    not where the top two are close."""
    fields = {**_FIELDS, "solver": "RKC2", "method": "RKC2", "last_step": 0.01}
    d = StallReport(
        eigenvalues=(5e6, 1e5, 5e4),
        bounds=(0.0,) * 3,
        lanczos_iters=3,
        suggestions=(),
        **fields,
    )
    assert suggest(d)[0].startswith("solver=SplitRKC2(): λ_max = 5e+06 sits 50×")
    close = StallReport(
        eigenvalues=(5e6, 1e6),
        bounds=(0.0,) * 2,
        lanczos_iters=2,
        suggestions=(),
        **fields,
    )
    assert not any("SplitRKC2" in s for s in suggest(close))


def test_suggestions_for_a_switch_stuck_on_explicit_steps():
    """AutoSwitch ending on Tsit5 steps at h·λ_max = 3.3: a solver that stays stiff."""
    d = StallReport(
        eigenvalues=(3300.0, 10.0),
        bounds=(0.0, 0.0),
        lanczos_iters=2,
        suggestions=(),
        **{**_FIELDS, "last_step": 1e-3, "smallest_step": 1e-3},
    )
    assert d.stiffness == pytest.approx(3.3)
    assert suggest(d)[0].startswith("a solver that stays stiff")
    assert "EXPRB32()" in suggest(d)[0]


@pytest.mark.slow
def test_stall_report_from_a_matvec():
    """A report from a plain matvec has its λ and counts, and its suggestions."""
    d = stall_report(
        matvec=lambda v: jnp.asarray([2.0, 1.0]) * v,
        n=2,
        dtype=jnp.float64,
        **_FIELDS,
    )
    assert d.eigenvalues == pytest.approx((2.0, 1.0)) and d.lanczos_iters == 2
    assert d.suggestions == suggest(d)
    assert d.lambda_max == pytest.approx(2.0) and d.num_stiff() == 2
    assert "max_steps=40,000,000,010" in d.message


def test_progress_line_format():
    line = progress_line(2.5, 0.0, 10.0, 1e-3, "EXPRB32", 7676.0, 400)
    assert line == "t = 2.5 / 10 (25.0%)  h = 1.00e-03  EXPRB32  ρ ≈ 7.68e+03  step 400"
    assert "ρ" not in progress_line(1.0, 0.0, 2.0, 0.1, "Tsit5", float("nan"), 3)


def test_jax_is_float64():
    assert jax.config.jax_enable_x64
