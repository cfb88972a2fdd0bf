"""SQUAREM over the local sweeps: the runtime's step (cemodel/runtime/extrapolation.py) and
which locals the compiler extrapolates (KernelPlan.extrapolated). The LDA sweeps against a
hand-written SQUAREM are in test_mf_elbo.py."""

import numpy as np
import pytest

from cemodel.codegen.lowering import lower
from cemodel.compiler import run_stages
from cemodel.runtime import extrapolation as ex

from .test_lowering import kplan


def test_step_is_minus_the_norm_ratio_and_at_most_minus_one():
    assert ex.squarem_step(4.0, 1.0) == -2.0
    assert ex.squarem_step(1.0, 4.0) == -1.0  # |α| < 1: the plain sweeps
    assert ex.squarem_step(1.0, 0.0) == -1.0  # no curvature: nothing to extrapolate
    assert ex.squarem_step(np.nan, 1.0) == -1.0
    assert ex.squarem_step(1.0, np.inf) == -1.0


def test_backtrack_halves_towards_minus_one_and_stops_there():
    assert ex.backtrack(-5.0) == -3.0
    assert ex.backtrack(-1.02) == -1.0
    steps, step = 0, -1e6
    while step < -1.0:
        step, steps = ex.backtrack(step), steps + 1
    assert steps < 30


def test_point_and_its_domain():
    first, middle, last = np.array([1.0, 2.0]), np.array([1.5, 1.0]), np.array([1.75, 0.5])
    out = np.empty(2)
    assert ex.squarem_point(first, middle, last, -2.0, out, -np.inf, np.inf)
    r, v = middle - first, last - 2 * middle + first
    np.testing.assert_allclose(out, first + 4.0 * r + 4.0 * v)
    assert not ex.squarem_point(first, middle, last, -2.0, out, 0.0, np.inf)  # out[1] = 0
    assert ex.squarem_point(first, middle, last, -1.0, out, -np.inf, np.inf)
    np.testing.assert_array_equal(out, last)  # α = −1: the plain two sweeps
    out_nan = np.empty(2)
    assert not ex.squarem_point(np.array([np.nan]), middle[:1], last[:1], -2.0, out_nan,
                                -np.inf, np.inf)


@pytest.mark.parametrize("a", [0.2, 0.5, 0.9, 0.999])
def test_one_cycle_solves_a_linear_contraction(a):
    """For F(x) = a·x + b, r = (a − 1)e and v = (a − 1)²e with e = s₀ − x*, so α = 1/(a − 1)
    lands on x* = b/(1 − a) exactly (for 0 ≤ a < 1, where α ≤ −1); the plain iteration needs
    ~log(1e-12)/log a sweeps."""
    b = 3.0
    s0 = np.array([10.0])
    s1, s2 = a * s0 + b, a * (a * s0 + b) + b
    r2, v2 = ex.squarem_norms(s0, s1, s2)
    step = ex.squarem_step(r2, v2)
    out = np.empty(1)
    ex.squarem_point(s0, s1, s2, step, out, -np.inf, np.inf)
    assert out[0] == pytest.approx(b / (1.0 - a), rel=1e-12)


# -- which locals -------------------------------------------------------------------------
_SCALED_FA = """model scaled_fa
dim P
dim N
dim K = 2
hyper nu = 4.0
plate outputs j in P:
    W[j] ~ {w}
    psi[j] ~ Gamma(1.0, 1.0)
plate points n in N:
    f[n] ~ {f}
    s[n] ~ Gamma(nu / 2, nu / 2)
    plate dims j2 in P:
        observe y[n, j2] ~ Normal({mean}, psi[j2] * s[n])
"""


def _extrapolated(text: str) -> tuple[str, ...]:
    return lower(run_stages(text, "scaled_fa.cem").plan).extrapolated


def test_which_locals_are_extrapolated():
    assert kplan("lda").extrapolated == ("theta",)
    assert kplan("gap_nmf").extrapolated == ("H",)  # a Gamma over an inner plate: 1-D rows
    assert kplan("gmm").extrapolated == ()  # no sweeps
    scalar = _SCALED_FA.format(w="Normal(0.0, 1.0)", f="Normal(0.0, 1.0)", mean="W[j2] * f[n]")
    assert _extrapolated(scalar) == ("f", "s")  # one number per item: Normal and Gamma boxes
    mvn = _SCALED_FA.format(w="MultivariateNormal(zeros(K), eye(K))",
                            f="MultivariateNormal(zeros(K), eye(K))", mean="dot(W[j2], f[n])")
    assert _extrapolated(mvn) == ()  # positive definite: not a box
