"""Empirical Bayes (fit(..., learn=...)): hyperparameters that maximise the ELBO given q."""

import textwrap

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.special import digamma

from cemodel import runtime as rt
from cemodel.compiler import compile_model
from cemodel.errors import CemDataError

from .helpers import never_decreases


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    root = tmp_path_factory.mktemp("eb")

    def make(name, source, **settings):
        path = root / f"{name}.cem"
        path.write_text(textwrap.dedent(source))
        return compile_model(path, settings)

    return make


def test_symmetric_dirichlet_fixed_point_matches_the_gradient_condition():
    rng = np.random.default_rng(0)
    E_log = np.log(rng.dirichlet(np.full(6, 0.7), 500))
    a = rt.learn_symmetric_dirichlet(2.0, E_log)
    grad = 500 * 6 * (digamma(6 * a) - digamma(a)) + E_log.sum()
    assert abs(grad) < 1e-6 * 500
    assert a == pytest.approx(0.7, rel=0.1)


def test_dirichlet_multinomial_concentration_is_recovered(build):
    mod = build("polya", """
        model polya
        dim K = 5
        dim D
        dim N[D]
        hyper alpha = 1.0
        plate docs d in D:
            theta[d] ~ Dirichlet(alpha, K)
            plate tokens n in N[d]:
                observe x[d, n] ~ Categorical(theta[d])
        """)
    rng = np.random.default_rng(1)
    counts = np.array([rng.multinomial(300, rng.dirichlet(np.full(5, 0.4))) for _ in range(800)])
    res = mod.fit({"x": sp.csr_matrix(counts.astype(float))}, learn=("alpha",), max_iter=200,
                  tol=1e-10)
    assert mod.LEARNABLE == ("alpha",)
    assert res.hypers["alpha"] == pytest.approx(0.4, rel=0.1)
    assert never_decreases(res.elbo)


def test_gamma_rate_of_group_rates_is_recovered(build):
    mod = build("rates", """
        model rates
        dim G
        dim N
        hyper a = 3.0
        hyper b = 1.0
        plate groups g in G:
            lam[g] ~ Gamma(a, b)
        plate obs n in N:
            data group[n] : int
            observe y[n] ~ Poisson(lam[group[n]])
        """)
    rng = np.random.default_rng(2)
    rates = rng.gamma(3.0, 1.0 / 0.5, 400)  # shape 3, rate 0.5
    group = np.repeat(np.arange(400), 60)
    y = rng.poisson(rates[group])
    res = mod.fit({"y": y, "group": group}, learn=("b",), max_iter=300, tol=1e-12)
    assert res.hypers["b"] == pytest.approx(0.5, rel=0.1)
    assert res.hypers["a"] == 3.0


@pytest.mark.long
def test_lda_learns_alpha_and_eta_with_a_monotone_bound(compiled):
    """With warm-started local steps every update, the learning included, is an improvement."""
    from .test_mf_elbo import lda_corpus

    lda = compiled("lda", K=4)
    res = lda.fit({"w": lda_corpus(3)}, learn="alpha,eta", max_iter=40, tol=0.0,
                  warm_start=True)
    assert set(res.hypers) == {"alpha", "eta"}
    assert res.hypers["alpha"] != 0.1 and res.hypers["eta"] != 0.01
    assert never_decreases(res.elbo)


def test_restarted_local_steps_keep_the_bound_monotone(compiled):
    """The default restarts each document from its prior (as scikit-learn's batch LDA); the
    restart guard keeps a restart only if it is at least as good as the previous state, so
    the bound never decreases, also while alpha and eta move."""
    from .test_mf_elbo import lda_corpus

    res = compiled("lda", K=4).fit({"w": lda_corpus(3)}, learn="alpha,eta", max_iter=40,
                                   tol=0.0)
    assert never_decreases(res.elbo)


def test_unknown_learnable_is_a_clear_error(compiled):
    from .test_mf_elbo import lda_corpus

    with pytest.raises(CemDataError, match="learnable: eta, alpha"):
        compiled("lda", K=4).fit({"w": lda_corpus(3)}, learn=("beta",), max_iter=2)


def test_cli_learn_prints_the_learned_values(tmp_path, capsys):
    from cemodel.cli import main

    rng = np.random.default_rng(5)
    data = tmp_path / "x.npz"
    np.savez(data, x=rng.poisson(4.0, 200))
    code = main(["fit", "stdlib_models/gamma_poisson.cem", "--data", str(data), "--learn", "b",
                 "-o", str(tmp_path / "p.npz"), "--quiet"])
    assert code == 0
    assert "learned: b = " in capsys.readouterr().out


def _lda_corpus_with_known_hypers(seed, K, V, D, n, alpha, eta):
    rng = np.random.default_rng(seed)
    beta = rng.dirichlet(np.full(V, eta), K)
    theta = rng.dirichlet(np.full(K, alpha), D)
    X = np.zeros((D, V), dtype=np.int64)
    cdf = np.cumsum(beta, axis=1)
    for d in range(D):
        z = rng.choice(K, n, p=theta[d])
        words = np.minimum((rng.random(n)[:, None] > cdf[z]).sum(axis=1), V - 1)
        np.add.at(X[d], words, 1)
    return X


@pytest.mark.long
def test_lda_recovers_alpha_and_eta_within_ten_percent(compiled):
    """Data from LDA with α = 0.3, η = 0.03 (five well-separated topics of 300 words, 1000
    documents of 1000 tokens); empirical Bayes from the file's defaults (0.1, 0.01), the best
    bound of three restarts, as one would run it. The MF estimates are biased where topics
    overlap (assignments then look more certain than they are), so the topics are distinct."""
    X = _lda_corpus_with_known_hypers(0, K=5, V=300, D=1000, n=1000, alpha=0.3, eta=0.03)
    lda = compiled("lda", K=5)
    fits = [lda.fit({"w": X}, learn=("alpha", "eta"), max_iter=400, tol=1e-9, seed=seed,
                    warn_decrease=False) for seed in range(3)]
    best = max(fits, key=lambda r: r.elbo[-1])
    assert best.hypers["alpha"] == pytest.approx(0.3, rel=0.1)
    assert best.hypers["eta"] == pytest.approx(0.03, rel=0.1)


@pytest.mark.long
def test_cli_stochastic_learn_prints_the_learned_values(tmp_path, capsys):
    from cemodel.cli import main

    X = _lda_corpus_with_known_hypers(1, K=3, V=40, D=60, n=50, alpha=0.3, eta=0.1)
    data = tmp_path / "w.npz"
    sp.save_npz(data, sp.csr_matrix(X))
    code = main(["fit", "stdlib_models/lda.cem", "--data", str(data), "--set", "K=3",
                 "--method", "svi", "--local", "cvb0", "--learn", "alpha,eta", "--epochs", "2",
                 "--batch-size", "20", "-o", str(tmp_path / "p.npz"), "--quiet"])
    assert code == 0
    out = capsys.readouterr().out
    assert "learned: " in out and "alpha = " in out and "eta = " in out
