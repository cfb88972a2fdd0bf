"""Numerically hostile but valid-looking inputs: each fits finitely or is refused clearly.

Every case runs batch mean field (``fit``), SVI (``fit_svi``) and SSVI-A (``fit_ssvi_a``) on
a compiled stdlib model. A case that fits must leave an all-finite ELBO trace and all-finite
posterior arrays; a case that cannot fit must raise a ``CemError`` whose message says what is
wrong (the expected substrings are in the table). Never NaN, inf, a NumPy warning or an
internal exception. pytest turns warnings into errors (pyproject.toml), so a RuntimeWarning
from an overflow fails the case as well.
"""

import numpy as np
import pytest

from cemodel.errors import CemDataError, CemError

METHODS = ("mf", "svi", "ssvi-a")


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _counts(docs: int, vocab: int, seed: int = 0, scale: int = 3) -> np.ndarray:
    return _rng(seed).integers(0, scale, (docs, vocab))


def _empty_rows() -> np.ndarray:
    x = _counts(6, 8)
    x[[1, 4]] = 0
    return x


def _points(n: int, d: int = 2, scale: float = 1.0, seed: int = 0) -> np.ndarray:
    rng = _rng(seed)
    centres = np.array([[-4.0] * d, [4.0] * d])
    return (centres[rng.integers(0, 2, n)] + rng.normal(size=(n, d))) * scale


def _constant_feature() -> np.ndarray:
    x = _points(30)
    x[:, 1] = 2.5
    return x


def _binary(n: int, p: int, seed: int = 0) -> np.ndarray:
    return _rng(seed).integers(0, 2, (n, p))


# (id, stdlib model, data, fit keywords, expected): expected is None for "fits finitely",
# else the substrings of the CemError message that refuses it. Every model is compiled once
# with its defaults (K = 20 topics, 5 Gaussian and 100 Bernoulli components); other sizes are
# passed as dims at fit time, which compiles nothing new.
CASES = [
    # -- topic models ----------------------------------------------------------------------
    ("lda-empty-documents", "lda", {"w": _empty_rows()}, {}, None),
    ("lda-all-documents-empty", "lda", {"w": np.zeros((4, 6), dtype=int)}, {}, None),
    ("lda-word-never-seen", "lda",
     {"w": [np.array([0, 1, 1, 2]), np.array([2, 3]), np.array([0])]}, {"dims": {"V": 50}},
     None),
    ("lda-more-topics-than-documents", "lda", {"w": _counts(3, 10)}, {"dims": {"K": 40}},
     None),
    ("lda-one-topic", "lda", {"w": _counts(5, 6)}, {"dims": {"K": 1}}, None),
    ("lda-one-word-vocabulary", "lda", {"w": np.array([[4], [1], [7]])}, {}, None),
    ("lda-single-token", "lda", {"w": [np.array([5])]}, {}, None),
    ("lda-huge-counts", "lda", {"w": _counts(5, 8) * 10**9}, {}, None),
    ("lda-tiny-and-huge-hypers", "lda", {"w": _counts(6, 8)},
     {"hypers": {"alpha": 1e-8, "eta": 1e8}, "dims": {"K": 3}}, None),
    ("lda-huge-and-tiny-hypers", "lda", {"w": _counts(6, 8)},
     {"hypers": {"alpha": 1e8, "eta": 1e-8}}, None),
    ("lda-counts-overflow", "lda", {"w": np.full((3, 4), 1e308)}, {},
     ["data 'w'", "the total count overflows"]),
    # -- Gaussian mixture ------------------------------------------------------------------
    ("gmm-more-components-than-points", "gmm", {"x": _points(2)}, {}, None),
    ("gmm-single-point", "gmm", {"x": _points(1)}, {"dims": {"K": 3}}, None),
    ("gmm-duplicated-points", "gmm", {"x": np.tile([[1.5, -2.0]], (20, 1))}, {}, None),
    ("gmm-constant-feature", "gmm", {"x": _constant_feature()}, {}, None),
    ("gmm-tiny-scale", "gmm", {"x": _points(40, scale=1e-8)}, {}, None),
    ("gmm-huge-scale", "gmm", {"x": _points(40, scale=1e8)}, {"dims": {"K": 3}}, None),
    ("gmm-huge-scale-more-components", "gmm", {"x": _points(40, scale=1e8)}, {}, None),
    ("gmm-tiny-and-huge-hypers", "gmm", {"x": _points(40)},
     {"hypers": {"alpha": 1e-8, "P0": np.eye(2) * 1e8}}, None),
    ("gmm-scale-beyond-float-precision", "gmm", {"x": _points(40, scale=1e20)}, {},
     ["not positive definite", "scale too far from the prior"]),
    ("gmm-squares-overflow", "gmm", {"x": _points(40, scale=1e200)}, {},
     ["data 'x'", "sum of squares", "overflows", "at points["]),
    # -- Bernoulli mixture -----------------------------------------------------------------
    ("bernoulli-all-ones", "bernoulli_mixture", {"x": np.ones((10, 4), dtype=int)}, {}, None),
    ("bernoulli-all-zeros", "bernoulli_mixture", {"x": np.zeros((10, 4), dtype=int)}, {},
     None),
    ("bernoulli-one-hot-rows", "bernoulli_mixture", {"x": np.eye(6, dtype=bool)}, {}, None),
    ("bernoulli-single-point", "bernoulli_mixture", {"x": _binary(1, 5)}, {}, None),
    ("bernoulli-tiny-and-huge-hypers", "bernoulli_mixture", {"x": _binary(12, 5)},
     {"hypers": {"alpha": 1e-8, "a": 1e8, "b": 1e-8}, "dims": {"K": 4}}, None),
    # -- conjugate pairs -------------------------------------------------------------------
    ("poisson-all-zero-counts", "gamma_poisson", {"x": np.zeros(20, dtype=int)}, {}, None),
    ("poisson-huge-counts", "gamma_poisson", {"x": np.full(5, 10**15)}, {}, None),
    ("poisson-single-count", "gamma_poisson", {"x": np.array([3])}, {}, None),
    ("poisson-tiny-and-huge-hypers", "gamma_poisson", {"x": np.arange(10)},
     {"hypers": {"a": 1e-8, "b": 1e8}}, None),
    ("poisson-counts-overflow", "gamma_poisson", {"x": np.array([1e308, 1e308, 1.0])}, {},
     ["data 'x'", "sum", "overflows", "at observations[0]"]),
    ("poisson-mixture-all-zero", "poisson_mixture", {"x": np.zeros(15, dtype=int)}, {}, None),
    ("poisson-mixture-duplicates", "poisson_mixture", {"x": np.full(12, 7)}, {}, None),
    ("poisson-mixture-huge-counts", "poisson_mixture",
     {"x": np.array([0, 1, 10**12, 10**12, 5])}, {}, None),
    ("normal-tiny-scale", "normal_normal", {"x": _rng().normal(size=20) * 1e-8}, {}, None),
    ("normal-huge-scale", "normal_normal", {"x": _rng().normal(size=20) * 1e8}, {}, None),
    ("normal-single-point", "normal_normal", {"x": np.array([3.0])}, {}, None),
    ("normal-tiny-and-huge-hypers", "normal_normal", {"x": _rng().normal(size=20)},
     {"hypers": {"t0": 1e-8, "tau": 1e8}}, None),
    ("normal-squares-overflow", "normal_normal", {"x": np.array([1.0, 2e154, 3.0])}, {},
     ["data 'x'", "sum of squares", "overflows", "at observations[1]"]),
    ("categorical-one-category-seen", "dirichlet_categorical", {"x": np.full(30, 2)}, {}, None),
    ("categorical-single-roll", "dirichlet_categorical", {"x": np.array([5])}, {}, None),
    ("categorical-tiny-hyper", "dirichlet_categorical", {"x": np.arange(6)},
     {"hypers": {"alpha": 1e-8}}, None),
    ("categorical-huge-hyper", "dirichlet_categorical", {"x": np.arange(6)},
     {"hypers": {"alpha": 1e8}}, None),
    # -- hyperparameters outside their domain, given at fit time -----------------------------
    ("categorical-zero-hyper", "dirichlet_categorical", {"x": np.arange(6)},
     {"hypers": {"alpha": 0.0}}, ["hyperparameter 'alpha'", "expected positive numbers"]),
    ("poisson-negative-hyper", "gamma_poisson", {"x": np.arange(10)},
     {"hypers": {"b": -1.0}}, ["hyperparameter 'b'", "expected positive numbers"]),
    ("gmm-indefinite-hyper", "gmm", {"x": _points(20)}, {"hypers": {"W0": -np.eye(2)}},
     ["hyperparameter 'W0'", "symmetric positive-definite", "smallest eigenvalue -1"]),
    # a concentration below 2^-52 is 0 once held as α − 1: refused, not a division by zero
    ("categorical-vanishing-concentration", "dirichlet_categorical", {"x": np.arange(6)},
     {"hypers": {"alpha": 1e-17}}, ["hyperparameter 'alpha'", "at least 2.22e-16"]),
    ("categorical-tiny-concentration", "dirichlet_categorical", {"x": np.arange(6)},
     {"hypers": {"alpha": 1e-15}}, None),
]


def _run(module, method: str, data, options: dict):
    if method == "mf":
        return module.fit(data, max_iter=20, **options)
    stochastic = {"epochs": 2, "batch_size": 4, **options}
    if method == "svi":
        return module.fit_svi(data, **stochastic)
    return module.fit_ssvi_a(data, **stochastic)


def _assert_finite(result, label: str) -> None:
    assert len(result.elbo) > 0, label
    assert np.all(np.isfinite(result.elbo)), f"{label}: ELBO trace {result.elbo}"
    for key, value in result.posterior.items():
        assert np.all(np.isfinite(value)), f"{label}: posterior {key!r} = {value}"
    for key, value in result.state.items():
        assert np.all(np.isfinite(value)), f"{label}: state {key!r}"


# Where a method answers a case differently from the others: batch MF fits the 1e8-scale
# mixture, but a stochastic step's Wishart update (Σ x xᵀ − 2 x μᵀ + μ μᵀ from a minibatch,
# mixed with the current λ) can lose positive definiteness to cancellation: then it is
# refused, naming the data scale as the cause. Whether a step does depends on the summation
# order of the sums (the generated loops' order) and, for SSVI-A, on its draws (the step
# reads the sampled μ_k), so these may also fit: EITHER.
EITHER = "either a finite fit or this refusal"
BY_METHOD = {
    ("gmm-huge-scale", "ssvi-a"): [EITHER, "scale too far from the prior's"],
    ("gmm-huge-scale-more-components", "svi"): [EITHER, "scale too far from the prior's"],
    ("gmm-huge-scale-more-components", "ssvi-a"): [EITHER, "scale too far from the prior's"],
}


def _params():
    for case in CASES:
        for method in METHODS:
            expected = BY_METHOD.get((case[0], method), case[4])
            yield pytest.param(method, *case[1:4], expected, id=f"{case[0]}-{method}")


@pytest.mark.parametrize(("method", "model", "data", "options", "expected"), list(_params()))
def test_hostile_input(compiled, method, model, data, options, expected):
    module = compiled(model)
    label = f"{model} {method}"
    if expected is None:
        _assert_finite(_run(module, method, data, options), label)
        return
    if expected[0] == EITHER:
        expected = expected[1:]
        try:
            _assert_finite(_run(module, method, data, options), label)
            return
        except CemError as exc:
            info = pytest.ExceptionInfo.from_exc_info((type(exc), exc, exc.__traceback__))
    else:
        with pytest.raises(CemError) as info:
            _run(module, method, data, options)
    message = str(info.value)
    assert isinstance(info.value, CemDataError), message
    for text in expected:
        assert text in message, f"{text!r} not in {message!r}"
    assert "Traceback" not in message


def test_table_size_and_coverage():
    assert len(CASES) >= 15
    assert len({case[0] for case in CASES}) == len(CASES)
    assert {case[1] for case in CASES} == {
        "lda", "gmm", "bernoulli_mixture", "gamma_poisson", "poisson_mixture",
        "normal_normal", "dirichlet_categorical",
    }
    assert sum(case[4] is not None for case in CASES) >= 3  # some are refused, not all fit


def test_hyper_value_checks_the_domain():
    """The runtime side of the hyperparameter domains the generated modules are to pass."""
    from cemodel.runtime import hyper_value

    assert hyper_value({"a": 2.0}, "a", 1.0, (), "positive") == 2.0
    assert np.array_equal(hyper_value({}, "W", np.eye(2), (2, 2), "spd"), np.eye(2))
    assert hyper_value({"p": 0.0}, "p", 1.0, (), "unit") == 0.0  # a probability of 0 is one
    rows = np.array([[0.2, 0.8], [1.0, 0.0]])
    assert np.array_equal(hyper_value({"A": rows}, "A", 0.0, (2, 2), "simplex"), rows)
    refused = [
        ({"a": 0.0}, (), "positive", "hyperparameter 'a': expected positive numbers, found 0"),
        ({"a": np.array([1.0, -1.0])}, (2,), "positive", "found -1 at [1]"),
        ({"a": -np.eye(2)}, (2, 2), "spd", "found a matrix with smallest eigenvalue -1"),
        ({"a": np.array([[1.0, 2.0], [0.0, 1.0]])}, (2, 2), "spd", "not symmetric"),
        ({"a": 1e-20}, (), "shape", "expected shapes of at least 2.22e-16"),
        ({}, (), "positive", "its default from the model file divides by zero"),
        ({"a": 1.5}, (), "unit", "expected probabilities (in [0, 1]), found 1.5"),
        ({"a": np.full(3, 0.5)}, (3,), "simplex", "summing to 1, found a sum of 1.5"),
        ({"a": np.eye(2) * 0.9}, (2, 2), "simplex", "found a sum of 0.9 (row [0])"),
        ({"a": np.array([1.2, -0.2])}, (2,), "simplex", "found -0.2 at [1]"),
    ]
    for hypers, shape, domain, text in refused:
        with pytest.raises(CemDataError) as info:
            hyper_value(hypers, "a", lambda: 1.0 / 0.0, shape, domain)
        assert text in str(info.value)


def test_whole_number_covariates_whose_squares_overflow_are_refused_up_front():
    """A whole-number covariate enters a mean as a real does: 1e200 passed binding and the fit
    stopped later with "q(w) is not finite", naming no data."""
    from cemodel.compiler import compile_stages, run_stages

    module = compile_stages(run_stages(
        "model ic\ndim N\nw ~ Normal(0.0, 1.0)\nplate obs n in N:\n    data k[n] : int\n"
        "    observe y[n] ~ Normal(w * k[n], 1.0)\n", "ic.cem"))
    k = np.arange(10.0)
    k[3] = 1e200
    with pytest.raises(CemDataError, match=r"data 'k': expected whole numbers whose sum of "
                                           r"squares is finite, found 1e\+200 at obs\[3\]"):
        module.fit({"k": k, "y": np.ones(10)})
