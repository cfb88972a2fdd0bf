"""Same algorithm, same answer: compiled models against scikit-learn."""

import warnings

import numpy as np
import pytest

sklearn = pytest.importorskip("sklearn")
from sklearn.decomposition import LatentDirichletAllocation  # noqa: E402
from sklearn.metrics import adjusted_rand_score  # noqa: E402
from sklearn.mixture import BayesianGaussianMixture  # noqa: E402

from cemodel.datasets import load_reuters  # noqa: E402
from cemodel.evaluation import (  # noqa: E402
    completion_perplexity,
    split_documents,
    topics_from_dirichlet,
    topics_from_sklearn,
)


def test_lda_batch_vb_matches_sklearn_perplexity(compiled):
    """Held-out perplexity (document completion, computed one way for both) within 3%.

    Both start from random topics (sklearn's and cemodel's default for LDA); the
    perplexity of one run moves by a few percent with the random start alone, so each
    side is the mean over the same three seeds.
    """
    K, alpha, eta, iters = 10, 0.1, 0.01, 60
    X, _ = load_reuters()
    train, test = split_documents(X, test_fraction=0.2, seed=0)
    lda = compiled("lda", K=K)
    assert lda.DEFAULT_START == "random"
    ours, theirs = [], []
    for seed in range(3):
        res = lda.fit({"w": train}, hypers={"alpha": alpha, "eta": eta}, max_iter=iters,
                      tol=1e-6, seed=seed)
        ours.append(completion_perplexity(topics_from_dirichlet(res["beta.alpha"]), alpha, test))
        model = LatentDirichletAllocation(
            n_components=K, learning_method="batch", doc_topic_prior=alpha,
            topic_word_prior=eta, max_iter=iters, random_state=seed, n_jobs=1,
        ).fit(train)
        theirs.append(completion_perplexity(topics_from_sklearn(model), alpha, test))
    assert np.all(np.isfinite(ours)) and np.all(np.isfinite(theirs))
    gap = abs(np.mean(ours) - np.mean(theirs)) / np.mean(theirs)
    assert gap < 0.03, (ours, theirs)


def test_gmm_finds_the_same_clusters_as_sklearn(compiled):
    rng = np.random.default_rng(11)
    centres = np.array([[0.0, 0.0], [8.0, 0.0], [0.0, 8.0], [8.0, 8.0]])
    truth = rng.integers(0, 4, 600)
    cov = np.array([[1.0, 0.4], [0.4, 0.6]])
    x = centres[truth] + rng.multivariate_normal(np.zeros(2), cov, 600)
    res = compiled("gmm", K=4).fit({"x": x}, max_iter=200, tol=1e-8, seed=0)
    ours = res["z.probs"].argmax(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sklearn's convergence chatter is not ours to test
        theirs = BayesianGaussianMixture(
            n_components=4, covariance_type="full", weight_concentration_prior_type=
            "dirichlet_distribution", weight_concentration_prior=1.0, max_iter=500,
            random_state=0,
        ).fit(x).predict(x)
    assert adjusted_rand_score(truth, ours) >= 0.95
    assert adjusted_rand_score(truth, theirs) >= 0.95
    assert adjusted_rand_score(ours, theirs) >= 0.95
