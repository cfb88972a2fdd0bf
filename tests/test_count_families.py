"""The observed count families Geometric, NegativeBinomial and Multinomial: exact conjugate
posteriors and log marginal likelihoods, a mixture of multinomials over count vectors under
every global step (KLC-CG included), and data outside their support refused."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import betaln, gammaln

from cemodel.compiler import compile_model, read_source, run_stages
from cemodel.errors import CemDataError, CemModelError

from .helpers import never_decreases

TOL = 1e-10


def _compile(tmp_path, text: str):
    path = tmp_path / "m.cem"
    path.write_text(text)
    return compile_model(path)


def _log_dirichlet_norm(alpha: np.ndarray) -> float:
    """log B(α) = Σ log Γ(α_k) − log Γ(Σ α_k)."""
    return float(np.sum(gammaln(alpha)) - gammaln(np.sum(alpha)))


def test_geometric_beta_is_exact(tmp_path):
    """Trials to the first success (1, 2, ...): q(p) = Beta(a + N, b + Σy − N), and the ELBO
    is the log marginal likelihood log B(a + N, b + Σy − N) − log B(a, b)."""
    model = _compile(tmp_path, "model geom\ndim N\nhyper a = 2.0\nhyper b = 3.0\n"
                               "p ~ Beta(a, b)\nplate obs n in N:\n"
                               "    observe y[n] ~ Geometric(p)\n")
    y = np.random.default_rng(0).geometric(0.3, 200)
    result = model.fit({"y": y}, max_iter=10)
    n, total = len(y), y.sum()
    assert result["p.a"] == pytest.approx(2.0 + n, rel=TOL)
    assert result["p.b"] == pytest.approx(3.0 + total - n, rel=TOL)
    evidence = betaln(2.0 + n, 3.0 + total - n) - betaln(2.0, 3.0)
    assert result.elbo[-1] == pytest.approx(evidence, rel=TOL)
    with pytest.raises(CemDataError, match=r"numbers of trials \(whole numbers ≥ 1\), found 0"):
        model.fit({"y": np.array([1, 0, 2])})


def test_negative_binomial_beta_is_exact(tmp_path):
    """Failures before the r-th success (numpy's negative_binomial(r, p)): q(p) =
    Beta(a + N r, b + Σy), ELBO = Σ log C(y + r − 1, y) + log B(a + N r, b + Σy) − log B(a, b)."""
    model = _compile(tmp_path, "model nb\ndim N\nhyper r = 2.5\n"
                               "p ~ Beta(1.0, 1.0)\nplate obs n in N:\n"
                               "    observe y[n] ~ NegativeBinomial(r, p)\n")
    y = np.random.default_rng(1).negative_binomial(2.5, 0.4, 150)
    result = model.fit({"y": y}, max_iter=10)
    n, total, r = len(y), y.sum(), 2.5
    assert result["p.a"] == pytest.approx(1.0 + n * r, rel=TOL)
    assert result["p.b"] == pytest.approx(1.0 + total, rel=TOL)
    base = np.sum(gammaln(y + r) - gammaln(r) - gammaln(y + 1.0))
    evidence = base + betaln(1.0 + n * r, 1.0 + total) - betaln(1.0, 1.0)
    assert result.elbo[-1] == pytest.approx(evidence, rel=TOL)


MULTINOMIAL_DIRICHLET = ("model mult\ndim V = 5\ndim D\nhyper alpha = 0.5\n"
                         "p ~ Dirichlet(alpha, V)\nplate docs d in D:\n"
                         "    data total[d] : int\n"
                         "    observe x[d] ~ Multinomial(total[d], p)\n")


def test_multinomial_dirichlet_is_exact(tmp_path):
    """Count vectors with their totals: q(p) = Dirichlet(α + Σ_d x_d), ELBO = Σ_d log
    multinomial coefficient + log B(α + Σ x) − log B(α); totals that do not add up are refused."""
    model = _compile(tmp_path, MULTINOMIAL_DIRICHLET)
    rng = np.random.default_rng(2)
    total = rng.integers(5, 30, 40)
    x = np.stack([rng.multinomial(t, [0.1, 0.2, 0.3, 0.25, 0.15]) for t in total])
    result = model.fit({"x": x, "total": total}, max_iter=10)
    posterior = 0.5 + x.sum(axis=0)
    np.testing.assert_allclose(result["p.alpha"], posterior, rtol=TOL)
    base = np.sum(gammaln(total + 1.0)) - np.sum(gammaln(x + 1.0))
    evidence = base + _log_dirichlet_norm(posterior) - _log_dirichlet_norm(np.full(5, 0.5))
    assert result.elbo[-1] == pytest.approx(evidence, rel=TOL)
    wrong = total.copy()
    wrong[3] += 1
    with pytest.raises(CemDataError, match=r"Multinomial data 'x' \(trials 'total'\): "
                       r".* adding up to \d+ with \d+ trials at docs\[3\]"):
        model.fit({"x": x, "total": wrong})


MIXTURE = """model mixture_of_count_vectors
dim K = 3
dim V = 12
dim D
pi ~ Dirichlet(1.0, K)
plate components k in K:
    phi[k] ~ Dirichlet(0.5, V)
plate docs d in D:
    data total[d] : int
    z[d] ~ Categorical(pi)
    observe x[d] ~ Multinomial(total[d], phi[z[d]])
"""


@pytest.fixture(scope="module")
def mixture_data():
    rng = np.random.default_rng(3)
    phi = rng.dirichlet(np.full(12, 0.3), 3)
    z = rng.integers(0, 3, 300)
    total = rng.integers(20, 60, 300)
    x = np.stack([rng.multinomial(t, phi[k]) for t, k in zip(total, z, strict=True)])
    return phi, z, {"x": x, "total": total}


def _matched_error(phi: np.ndarray, fitted: np.ndarray) -> float:
    """The largest |φ − φ̂| after matching each true component to its closest fitted one."""
    return max(np.abs(fitted - row).sum(axis=1).min() for row in phi)


@pytest.mark.parametrize("method", ["mf", "svi", "ssvi-a", "klc"])
def test_a_mixture_of_multinomials_recovers_its_components(tmp_path, mixture_data, method):
    phi, z, data = mixture_data
    model = _compile(tmp_path, MIXTURE)
    fit = getattr(model, {"mf": "fit", "svi": "fit_svi", "ssvi-a": "fit_ssvi_a",
                          "klc": "fit_klc"}[method])
    options = dict(max_iter=200) if method in ("mf", "klc") else dict(batch_size=100, epochs=30)
    result = fit(data, seed=0, **options)
    fitted = result["phi.alpha"] / result["phi.alpha"].sum(axis=1, keepdims=True)
    assert _matched_error(phi, fitted) < 0.1
    if method == "mf":
        assert never_decreases(result.elbo)


def test_a_latent_geometric_is_refused(tmp_path):
    path = tmp_path / "m.cem"
    path.write_text("model bad\np ~ Beta(1.0, 1.0)\ny ~ Geometric(p)\n")
    with pytest.raises(CemModelError, match="a Geometric variable must be observed"):
        run_stages(*read_source(path))


def test_an_unknown_distribution_lists_only_what_a_model_may_write(tmp_path):
    path = tmp_path / "m.cem"
    path.write_text("model bad\np ~ Beta(1.0, 1.0)\nobserve y ~ Qwxyz(p)\n")
    with pytest.raises(CemModelError) as info:
        run_stages(*read_source(path))
    text = str(info.value)
    assert "Multinomial" in text and "NegativeBinomial" in text and "Geometric" in text
    assert "split" not in text.lower()


def test_a_missing_multinomial_row_is_summed_out_not_checked(tmp_path):
    """A count vector given as NaN (or masked) is missing as a whole, as `check` says: it was
    refused as counts adding up to 0 against its trials. Its factor drops out, so the fit is
    the fit without that row (no local: exactly)."""
    model = _compile(tmp_path, MULTINOMIAL_DIRICHLET)
    rng = np.random.default_rng(5)
    total = rng.integers(5, 30, 20)
    x = np.stack([rng.multinomial(t, [0.1, 0.2, 0.3, 0.25, 0.15]) for t in total]).astype(float)
    holed = x.copy()
    holed[7] = np.nan
    kept = np.arange(20) != 7
    with_hole = model.fit({"x": holed, "total": total}, max_iter=5)
    without = model.fit({"x": x[kept], "total": total[kept]}, max_iter=5)
    np.testing.assert_allclose(with_hole["p.alpha"], without["p.alpha"], rtol=1e-12)
    assert with_hole.elbo[-1] == pytest.approx(without.elbo[-1], rel=1e-12)


def test_a_known_probability_of_zero_is_a_component_never_used(tmp_path):
    """Categorical(pi) with pi = (0.5, 0.5, 0) given (a left-to-right chain's A alike): log 0
    made every fit's ELBO NaN ("rescale the data"). Now 0 · log 0 adds 0: the third component
    takes no item and keeps its prior; a negative entry is refused naming pi."""
    model = _compile(tmp_path, "model fixedpi\ndim K = 3\ndim N\nhyper pi = full(K, 1.0 / K)\n"
                               "plate comps k in K:\n    rate[k] ~ Gamma(1.0, 0.1)\n"
                               "plate items n in N:\n    z[n] ~ Categorical(pi)\n"
                               "    observe x[n] ~ Poisson(rate[z[n]])\n")
    x = np.random.default_rng(0).poisson(np.repeat([2.0, 20.0], 50))
    fit = model.fit({"x": x}, hypers={"pi": [0.5, 0.5, 0.0]}, max_iter=50)
    assert np.isfinite(fit.elbo).all()
    assert fit.posterior["z.probs"][:, 2].max() == 0.0
    assert fit["rate.shape"][2] / fit["rate.rate"][2] == pytest.approx(10.0)
    with pytest.raises(CemDataError, match=r"hyperparameter 'pi': expected probabilities "
                                           r"\(in \[0, 1\]\), found -0.2 at \[2\]"):
        model.fit({"x": x}, hypers={"pi": [0.5, 0.7, -0.2]})
