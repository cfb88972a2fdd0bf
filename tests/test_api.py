"""The Python API (cemodel.Model, Fit) and the scikit-learn estimator (CemEstimator)."""

from __future__ import annotations

import copy
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import sparse
from scipy.special import digamma, logsumexp, softmax

pytest.importorskip("sklearn")
from sklearn.base import clone  # noqa: E402
from sklearn.exceptions import NotFittedError  # noqa: E402
from sklearn.model_selection import GridSearchCV  # noqa: E402
from sklearn.pipeline import Pipeline  # noqa: E402
from sklearn.preprocessing import FunctionTransformer  # noqa: E402
from sklearn.utils.validation import check_is_fitted  # noqa: E402

import cemodel  # noqa: E402
from cemodel.api import CemEstimator, Fit, Model, topic_structure  # noqa: E402
from cemodel.errors import CemError  # noqa: E402
from cemodel.evaluation import (  # noqa: E402
    completion_log_likelihood_per_word,
    topics_from_dirichlet,
)


def _corpus(seed: int = 0, D: int = 90) -> sparse.csr_matrix:
    """Three topics over disjoint blocks of 10 words (plus a little noise), 40 tokens a doc."""
    rng = np.random.default_rng(seed)
    topics = np.full((3, 30), 0.002)
    for k in range(3):
        topics[k, 10 * k:10 * (k + 1)] = 1.0
    topics /= topics.sum(axis=1, keepdims=True)
    theta = rng.dirichlet(np.full(3, 0.2), D)
    return sparse.csr_matrix(np.stack([rng.multinomial(40, t @ topics) for t in theta]))


def _points(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.normal(c, 0.5, (40, 2)) for c in ([0, 0], [5, 0], [0, 5])])


@pytest.fixture(scope="module")
def X():
    return _corpus()


@pytest.fixture(scope="module")
def lda(X):
    return CemEstimator(model="lda", K=3, max_iter=50).fit(X)


@pytest.fixture(scope="module")
def gmm():
    return CemEstimator(model="stdlib_models/gmm.cem", K=3).fit(_points())


def test_the_package_exports_the_api():
    assert cemodel.Model is Model and cemodel.CemEstimator is CemEstimator
    path = Path(__file__).resolve().parents[1] / "stdlib_models" / "lda.cem"
    assert cemodel.compile(path).fit is Model("lda").module.fit  # one module per source
    with pytest.raises(AttributeError):
        cemodel.no_such_name  # noqa: B018


def test_item_locals_are_the_declared_ones_not_introduced_ones():
    """A Pólya-Gamma ω or Student-t's scale is the method's, not a feature of an item."""
    assert Model("logistic_regression").item_locals == ()
    assert Model("robust_regression").item_locals == ()
    assert Model("lda").item_locals == ("theta",)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 2))
    est = CemEstimator(model="logistic_regression", max_iter=5,
                       fit_options={"tol": 0.0}).fit({"x": x, "y": (x[:, 0] > 0).astype(int)})
    with pytest.raises(CemError, match="no local variable per item"):
        est.transform({"x": x})
    with pytest.raises(KeyError, match="no posterior mean of 'y_omega'"):
        est.result_.mean("y_omega")


@pytest.mark.parametrize("method", ["mf", "klc", "svi"])
def test_estimator_max_iter_is_each_method_s_count(method):
    """max_iter is the iterations of the batch methods (mf, klc), the epochs of the others."""
    options = {"batch_size": 10} if method == "svi" else {"tol": 0.0}
    est = CemEstimator(model="poisson_mixture", method=method, max_iter=3, fit_options=options)
    assert est.fit(np.random.default_rng(0).poisson(3, 50)).result_.iterations == 3


def test_get_params_set_params_clone_round_trip(lda):
    params = dict(model="lda", K=4, method="svi", local="cvb0", max_iter=3, seed=7,
                  hypers={"alpha": 0.5}, learn=("alpha",), settings=None,
                  fit_options={"batch_size": 30}, score_by="elbo")
    est = CemEstimator(**params)
    assert est.get_params() == params
    assert est.set_params(K=6, hypers={"eta": 0.1}) is est
    assert est.K == 6 and est.hypers == {"eta": 0.1}
    twin = clone(est)
    assert twin is not est and twin.get_params() == est.get_params()
    assert twin.hypers is not est.hypers  # deep-copied, as clone does
    with pytest.raises(NotFittedError):
        check_is_fitted(twin)
    with pytest.raises(NotFittedError):
        twin.transform(np.ones((2, 30)))
    fitted_twin = clone(lda)  # a clone of a fitted estimator is unfitted
    assert not hasattr(fitted_twin, "result_") and fitted_twin.get_params() == lda.get_params()
    # a Model as the model parameter is shared, not recompiled
    model = Model("lda")
    assert clone(CemEstimator(model=model)).model is model


def test_lda_fit_transform_score(lda, X):
    check_is_fitted(lda)
    assert isinstance(lda.result_, Fit) and lda.result_.converged
    assert lda.module_ is lda.model_.module and lda.n_features_in_ == 30
    theta = lda.transform(X)
    assert theta.shape == (90, 3)
    np.testing.assert_allclose(theta.sum(axis=1), 1.0)
    assert list(lda.get_feature_names_out()) == ["theta0", "theta1", "theta2"]
    # every topic is one block of words; documents go to the topic of their dominant block
    topics = topics_from_dirichlet(lda.result_["beta.alpha"])
    block = topics.reshape(3, 3, 10).sum(axis=2).argmax(axis=1)
    assert sorted(block) == [0, 1, 2]
    dense = X.toarray().reshape(90, 3, 10).sum(axis=2)
    assert np.mean(block[theta.argmax(axis=1)] == dense.argmax(axis=1)) > 0.95
    # score: -log perplexity by document completion, the cemodel.evaluation convention
    held_out = _corpus(seed=1, D=30)
    expected = completion_log_likelihood_per_word(topics, 0.1, held_out, seed=0)
    assert lda.score(held_out) == pytest.approx(expected)
    assert -np.log(30) < lda.score(held_out) < 0  # better than uniform over the words
    assert np.isfinite(lda.set_params(score_by="elbo").score(held_out))
    lda.set_params(score_by="auto")
    with pytest.raises(ValueError, match="features"):
        lda.transform(np.ones((2, 31)))


def test_lda_transform_is_the_e_step_at_fixed_topics(lda, X):
    # the proportions satisfy the LDA E-step's fixed point for the fitted E[log beta]
    inference = lda.model_.infer({"w": X}, lda.result_, local_tol=1e-12, max_local_iter=10000)
    gamma = inference["theta.alpha"]
    counts = X.toarray()
    phi = np.exp(digamma(gamma) - digamma(gamma.sum(1, keepdims=True)))[:, :, None] \
        * np.exp(lda.result_["E[log beta]"])[None]
    phi /= phi.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(gamma, 0.1 + np.einsum("dw,dkw->dk", counts, phi), rtol=1e-6)


def test_transform_keeps_the_globals_fixed(lda, X):
    state = copy.deepcopy(lda.result_.state)
    posterior = copy.deepcopy(lda.result_.posterior)
    theta = lda.transform(X)
    lda.score(X[:20])
    for name, value in state.items():
        np.testing.assert_array_equal(lda.result_.state[name], value)
    for name, value in posterior.items():
        np.testing.assert_array_equal(lda.result_.posterior[name], value)
    # items are independent given the globals: a subset gets the same proportions
    np.testing.assert_allclose(lda.transform(X[10:25]), theta[10:25], rtol=1e-12)


def test_gmm_transform_and_score_are_the_exact_e_step(gmm):
    fit = gmm.result_
    x = np.random.default_rng(5).normal(2.0, 3.0, (25, 2))
    # log q(z_n = k) ∝ E[log pi_k] + E[log N(x_n | mu_k, Lambda_k)], by hand
    Lam, mu, mumu = fit["E[value Lambda]"], fit["E[value mu]"], fit["E[outer mu]"]
    second = (np.einsum("ni,nj->nij", x, x)[:, None] - np.einsum("ni,kj->nkij", x, mu)
              - np.einsum("ki,nj->nkij", mu, x) + mumu[None])
    log_r = (fit["E[log pi]"] + 0.5 * fit["E[logdet Lambda]"] - np.log(2 * np.pi)
             - 0.5 * np.einsum("kij,nkij->nk", Lam, second))
    np.testing.assert_allclose(gmm.transform(x), softmax(log_r, axis=1), atol=1e-12)
    # the held-out ELBO per point at the optimal q(z): mean log Σ_k exp(log_r)
    assert gmm.score(x) == pytest.approx(logsumexp(log_r, axis=1).mean(), rel=1e-10)
    assert list(gmm.get_feature_names_out()) == ["z0", "z1", "z2"]
    assert topic_structure(gmm.model_.stages.model) is None
    with pytest.raises(CemError, match="needs a topic model"):
        clone(gmm).set_params(score_by="perplexity").fit(x).score(x)


def test_pipeline_and_grid_search_over_k_pick_the_true_k(X):
    pipe = Pipeline([("counts", FunctionTransformer(accept_sparse=True)),
                     ("lda", CemEstimator(model="lda", max_iter=50))])
    search = GridSearchCV(pipe, {"lda__K": [1, 3, 8]}, cv=3).fit(X)
    assert search.best_params_ == {"lda__K": 3}
    scores = search.cv_results_["mean_test_score"]
    assert scores[0] < scores[1] - 0.3  # one topic is far worse
    assert search.best_estimator_.transform(X[:5]).shape == (5, 3)


def test_methods_local_steps_and_refusals(X):
    model = Model("stdlib_models/lda.cem")
    data = {"w": X}
    fit = model.fit(data, "svi", local="cvb0", dims={"K": 3}, epochs=2, batch_size=30,
                    learn=("alpha",))
    assert (fit.method, fit.local) == ("svi", "cvb0") and len(fit.elbo) == 2
    assert fit.expectation("log beta") is fit["E[log beta]"] is fit.expectation("E[log beta]")
    np.testing.assert_allclose(fit.mean("beta").sum(axis=1), 1.0)
    assert fit.hypers["alpha"] != 0.1  # learned
    assert "method='svi'" in repr(fit) and fit.seconds > 0
    with pytest.raises(KeyError, match="available: E.log beta., E.log theta."):
        fit.expectation("E[value beta]")
    with pytest.raises(CemError, match="local step 'exact' does not apply to this model: "
                                       "local 'z' depends on local 'theta'"):
        model.fit(data, local="exact")
    with pytest.raises(CemError, match="expected one of mf, svi, svi\\+, svi-avg, ssvi-a, ssvi"):
        model.fit(data, "svii")
    with pytest.raises(CemError, match="needs effective_batch_size"):
        model.fit(data, "svi+")
    gmm = Model("gmm")
    assert gmm.methods["klc"].startswith("no")
    with pytest.raises(CemError, match="method 'klc' does not apply to this model: 'mu' and "
                                       "'Lambda' are not d-separated"):
        gmm.fit({"x": _points()}, "klc")
    with pytest.raises(CemError, match="local 'z' depends on local 'theta'"):
        CemEstimator(model="lda", local="exact").fit(X)
    with pytest.raises(CemError, match="pass X as a dict"):
        CemEstimator(model="linear_regression").fit(np.ones((5, 2)))


def test_a_fitted_estimator_pickles(lda, X):
    again = pickle.loads(pickle.dumps(lda))
    assert again.module_ is lda.module_ and hasattr(lda, "module_")
    np.testing.assert_array_equal(again.transform(X[:5]), lda.transform(X[:5]))


def test_a_fit_result_lists_its_names_and_suggests_one_for_a_slip(compiled):
    result = compiled("beta_bernoulli").fit({"x": np.array([1, 0, 1])})
    assert list(result.keys())[:2] == ["p.a", "p.b"] and "p.a" in result
    with pytest.raises(KeyError, match=r"no 'p.alpha' .*did you mean 'p.a'\?.*it holds: p.a, p.b"):
        result["p.alpha"]


def test_a_fit_of_another_model_is_refused_and_sizes_are_the_fit_s(tmp_path):
    """A fit of another model surfaced as "unknown hyperparameter 'a'"; now it is refused
    naming both. A fit's sizes are its own: a K = 3 fit used with the model whose file (or
    Model(K=...)) says K = 4 is read at K = 3, as the fit's dims say."""
    from cemodel import load_result
    from cemodel.errors import CemError

    points = _points()
    three, four = Model("gmm", K=3), Model("gmm", K=4)
    fit = three.fit({"x": points}, max_iter=20)
    loaded = load_result(fit.save(tmp_path / "fit3.npz"), four)
    assert loaded.dims["K"] == 3
    inferred = four.infer({"x": points}, loaded)
    assert inferred.posterior["z.probs"].shape == (len(points), 3)
    counts = Model("poisson_mixture").fit({"x": np.arange(60) % 7}, max_iter=5)
    with pytest.raises(CemError, match="the fit is of model 'poisson_mixture'"):
        three.infer({"x": points}, counts)
    raw = Model("poisson_mixture").module.fit({"x": np.arange(60) % 7}, max_iter=5)
    with pytest.raises(CemError, match="hyperparameters .* are not this model's"):
        three.infer({"x": points}, raw)


def test_new_data_that_disagrees_with_the_fit_names_the_fit_not_dims():
    """Sizes new items are read with are the fit's: an error names the fit, and its hint
    does not ask to change dims the user never gave (or score does not take)."""
    from cemodel.errors import CemError

    rng = np.random.default_rng(0)
    X = rng.poisson(0.8, (40, 30))
    lda = Model("lda", K=3)
    fit = lda.fit({"w": X}, max_iter=3)
    for call in (lambda: lda.infer({"w": X[:5, :-1]}, fit),
                 lambda: lda.score(fit, {"w": X[:5, :-1]})):
        with pytest.raises(CemError, match="'V' is 30 from the fit but 29 from data 'w'") as e:
            call()
        assert "dims" not in str(e.value.hint) and "V=30" in e.value.hint
    user, item = rng.integers(0, 6, 60), rng.integers(0, 5, 60)
    pmf = Model("pmf", K=2)
    ratings = pmf.fit({"y": rng.normal(size=60), "user": user, "item": item}, max_iter=3)
    with pytest.raises(CemError, match=r"ids in \[0, U=6\), found 6") as e:
        pmf.score(ratings, {"y": np.array([0.1]), "user": np.array([6]), "item": np.array([0])})
    assert "the fit's" in e.value.hint and "dims" not in e.value.hint
    gmm = Model("gmm", K=2)
    points = gmm.fit({"x": rng.normal(size=(50, 2))}, max_iter=3)
    with pytest.raises(CemError, match="data: expected a mapping .* found ndarray"):
        gmm.sample_posterior_predictive(points, 2, 0, data=rng.normal(size=(5, 2)), new=True)


@pytest.mark.parametrize("call, usage", [
    (lambda m, fit, data: m.infer(fit, data), r"model.infer\(data, fit\)"),
    (lambda m, fit, data: m.score(data, fit), r"model.score\(fit, heldout\)"),
    (lambda m, fit, data: m.sample_posterior_predictive(data, 5), "sample_posterior_predictive"),
    (lambda m, fit, data: m.posterior_draws(data), r"posterior_draws\(fit"),
])
def test_arguments_in_the_wrong_order_are_a_clear_error(call, usage):
    """infer takes (data, fit) and score (fit, heldout): swapped, a dict where the fit
    belongs was an AttributeError traceback."""
    from cemodel.errors import CemError

    model = Model("gmm", K=2)
    data = {"x": _points()}
    fit = model.fit(data, max_iter=3)
    with pytest.raises(CemError, match="expected a fit .*found dict") as error:
        call(model, fit, data)
    assert re.search(usage, error.value.hint or "")


def test_estimator_scores_token_lists_as_their_count_matrix():
    """The estimator's perplexity score reads the documents as Model.score does (the bound
    data), so token-id lists score as their count matrix; they were refused as 'X_test'."""
    counts = np.random.default_rng(0).poisson(0.8, (60, 30))
    tokens = [np.repeat(np.arange(30), row) for row in counts]
    est = CemEstimator(model="lda", K=3, max_iter=10).fit(counts)
    assert est.score(tokens[:10]) == pytest.approx(est.score(counts[:10]), rel=1e-12)
