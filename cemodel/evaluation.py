"""Held-out perplexity of topic models: the one convention every test, example and benchmark uses.

The convention is *document completion* with the topics held fixed at a point estimate:

1. **Split by document.** :func:`split_documents` puts a random ``test_fraction`` of the rows
   of the document-term count matrix (``seed`` fixed) in ``X_test`` and the rest in
   ``X_train``; the model is fitted on ``X_train`` only.
2. **Split every held-out document in two.** :func:`completion_split` expands each held-out
   document into its tokens (word id repeated ``count`` times), shuffles them with a fixed
   random generator (``numpy.random.default_rng(seed)``), and puts the first ``floor(n / 2)``
   tokens in the *observed* half and the remaining ``ceil(n / 2)`` in the *scored* half.
   Documents with fewer than 2 tokens are dropped from both halves (they would leave nothing
   to observe or nothing to score), so both halves have one row per kept document.
3. **Topics.** A K x V row-stochastic matrix: the posterior mean of the topics (for
   Dirichlet topics, the variational parameters normalised row by row:
   :func:`topics_from_dirichlet`; for scikit-learn, ``components_`` normalised:
   :func:`topics_from_sklearn`).
4. **Proportions from the observed half.** :func:`fit_proportions` runs the standard LDA
   variational E-step for each document with the topics fixed, the symmetric (or given)
   Dirichlet prior ``alpha`` on the proportions:
   ``phi_dwk ∝ exp(E[log theta_dk]) * topics[k, w]``,
   ``gamma_d = alpha + sum_w n_dw phi_dw``, starting from ``gamma_d = alpha + n_d / K`` and
   stopping a document when the mean absolute change of its ``gamma_d`` falls below ``tol``
   (1e-3) or after ``max_iter`` (100) updates. The point estimate is the posterior mean
   ``theta_d = gamma_d / sum_k gamma_dk``.
5. **Score the other half.**
   ``perplexity = exp(- sum_d sum_w n^scored_dw log(sum_k theta_dk topics[k, w]) / N^scored)``
   where ``N^scored`` is the total number of scored tokens
   (:func:`completion_perplexity`); :func:`completion_log_likelihood_per_word` is the
   exponent's negative, the mean log-likelihood per scored token. Lower perplexity is better;
   uniform topics give exactly V.

Everything takes plain arrays (a SciPy sparse or dense count matrix, a topic matrix and
``alpha``), never a model object, so cemodel and other libraries are scored identically.
Plain NumPy/SciPy, nothing compiled.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import sparse
from scipy.special import digamma

from .errors import CemDataError

__all__ = [
    "completion_log_likelihood_per_word",
    "completion_perplexity",
    "completion_split",
    "fit_proportions",
    "split_documents",
    "topics_from_dirichlet",
    "topics_from_sklearn",
]

_TINY = 1e-100  # added wherever we divide by a sum that could underflow to zero
_BLOCK_ELEMENTS = 1 << 22  # nonzeros x topics gathered at once in fit_proportions (~32 MB)


# ---------------------------------------------------------------------------------------------
# Splits
# ---------------------------------------------------------------------------------------------


def _as_counts(X: Any, name: str) -> sparse.csr_matrix:
    """Any 2-D count matrix as CSR, checked: finite, non-negative whole numbers."""
    try:
        matrix = sparse.csr_matrix(X)
    except (TypeError, ValueError) as exc:
        raise CemDataError(f"{name}: expected a 2-D document-term count matrix ({exc})") from None
    if matrix.ndim != 2:
        raise CemDataError(f"{name}: expected a 2-D document-term count matrix")
    data = matrix.data
    if data.size:
        if not np.issubdtype(data.dtype, np.number) or np.iscomplexobj(data):
            raise CemDataError(f"{name}: expected numeric counts, found dtype {data.dtype}")
        if not np.all(np.isfinite(data)) or np.any(data < 0) or np.any(data != np.round(data)):
            raise CemDataError(f"{name}: expected counts (non-negative whole numbers)")
    return matrix


def split_documents(X: Any, test_fraction: float = 0.2,
                    seed: int = 0) -> tuple[sparse.csr_matrix, sparse.csr_matrix]:
    """Randomly split the rows (documents) of a count matrix into (X_train, X_test).

    ``round(test_fraction * D)`` documents, at least one and at most ``D - 1``, chosen by
    ``numpy.random.default_rng(seed)``, go to ``X_test``; both parts keep the documents'
    original order, the column count and the dtype of the counts. Both are CSR.
    """
    matrix = _as_counts(X, "X")
    n_docs = matrix.shape[0]
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be strictly between 0 and 1, got {test_fraction}")
    if n_docs < 2:
        raise CemDataError(f"X: need at least 2 documents to split, found {n_docs}")
    n_test = min(max(int(round(test_fraction * n_docs)), 1), n_docs - 1)
    order = np.random.default_rng(seed).permutation(n_docs)
    test = np.sort(order[:n_test])
    train = np.sort(order[n_test:])
    return matrix[train], matrix[test]


def completion_split(X_test: Any,
                     seed: int = 0) -> tuple[sparse.csr_matrix, sparse.csr_matrix]:
    """Split every held-out document's tokens into an observed and a scored half.

    Each document's tokens (word id repeated ``count`` times) are shuffled by
    ``numpy.random.default_rng(seed)``; the first ``floor(n / 2)`` are observed, the other
    ``ceil(n / 2)`` scored. Documents with fewer than 2 tokens are dropped from both halves,
    so row ``i`` of each half is the ``i``-th document that has at least 2 tokens. Returns two
    float64 CSR matrices of the same shape (kept documents x V). Deterministic for a seed.
    """
    matrix = _as_counts(X_test, "X_test").astype(np.float64)
    matrix.sum_duplicates()
    matrix.eliminate_zeros()
    n_words = matrix.shape[1]
    lengths = np.asarray(matrix.sum(axis=1)).ravel().astype(np.int64)
    kept = np.flatnonzero(lengths >= 2)
    matrix = matrix[kept]
    lengths = lengths[kept]
    n_kept = len(kept)

    counts = matrix.data.astype(np.int64)
    entry_doc = np.repeat(np.arange(n_kept, dtype=np.int64), np.diff(matrix.indptr))
    token_doc = np.repeat(entry_doc, counts)
    token_word = np.repeat(matrix.indices.astype(np.int64), counts)
    keys = np.random.default_rng(seed).random(token_doc.size)
    order = np.lexsort((keys, token_doc))  # by document, then by the random key: a shuffle
    token_doc = token_doc[order]
    token_word = token_word[order]
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    rank = np.arange(token_doc.size, dtype=np.int64) - starts[token_doc]
    observed = rank < (lengths // 2)[token_doc]

    def build(mask: np.ndarray) -> sparse.csr_matrix:
        half = sparse.coo_matrix(
            (np.ones(int(mask.sum())), (token_doc[mask], token_word[mask])),
            shape=(n_kept, n_words),
        ).tocsr()
        half.sum_duplicates()
        return half

    return build(observed), build(~observed)


# ---------------------------------------------------------------------------------------------
# Topics
# ---------------------------------------------------------------------------------------------


def _normalise_rows(matrix: Any, name: str) -> np.ndarray:
    array = np.asarray(matrix, dtype=np.float64)
    if array.ndim != 2:
        raise CemDataError(f"{name}: expected a K x V matrix, found shape {array.shape}")
    if not np.all(np.isfinite(array)) or np.any(array < 0):
        raise CemDataError(f"{name}: expected finite non-negative entries")
    totals = array.sum(axis=1, keepdims=True)
    if np.any(totals <= 0):
        raise CemDataError(f"{name}: every row needs a positive sum")
    return array / totals


def topics_from_dirichlet(lam_or_alpha: Any) -> np.ndarray:
    """Posterior-mean topics of Dirichlet topics: each row of the parameters normalised.

    For cemodel's LDA, pass ``result["beta.alpha"]`` (K x V).
    """
    return _normalise_rows(lam_or_alpha, "topics")


def topics_from_sklearn(lda_model: Any) -> np.ndarray:
    """Posterior-mean topics of a fitted ``sklearn.decomposition.LatentDirichletAllocation``."""
    components = getattr(lda_model, "components_", None)
    if components is None:
        raise CemDataError("topics_from_sklearn: the model has no components_ (is it fitted?)")
    return _normalise_rows(components, "components_")


def _check_topics(topics: Any) -> np.ndarray:
    array = np.asarray(topics, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] < 1:
        raise CemDataError(f"topics: expected a K x V matrix, found shape {array.shape}")
    if not np.all(np.isfinite(array)) or np.any(array < 0):
        raise CemDataError("topics: expected finite non-negative entries")
    if not np.allclose(array.sum(axis=1), 1.0, rtol=0.0, atol=1e-6):
        raise CemDataError("topics: every row must sum to 1 (use topics_from_dirichlet or "
                           "topics_from_sklearn to normalise)")
    return array


def _check_alpha(alpha: Any, n_topics: int) -> np.ndarray:
    array = np.asarray(alpha, dtype=np.float64)
    if array.ndim == 0:
        array = np.full(n_topics, float(array))
    if array.shape != (n_topics,):
        raise CemDataError(f"alpha: expected a scalar or a vector of length {n_topics}, "
                           f"found shape {array.shape}")
    if not np.all(np.isfinite(array)) or np.any(array <= 0):
        raise CemDataError("alpha: expected positive numbers")
    return array


# ---------------------------------------------------------------------------------------------
# The E-step with fixed topics
# ---------------------------------------------------------------------------------------------


def _exp_dirichlet_expectation(gamma: np.ndarray) -> np.ndarray:
    """exp(E[log theta]) for theta ~ Dirichlet(gamma), row by row."""
    return np.exp(digamma(gamma) - digamma(gamma.sum(axis=1, keepdims=True)))


def _fit_block(counts: sparse.csr_matrix, topics: np.ndarray, topics_t: np.ndarray,
               alpha: np.ndarray, max_iter: int, tol: float) -> np.ndarray:
    """gamma for every document of one block of rows, each stopped on its own."""
    n_topics = topics.shape[0]
    lengths = np.asarray(counts.sum(axis=1)).ravel()
    gamma = alpha[None, :] + lengths[:, None] / n_topics
    active = np.flatnonzero(lengths > 0)  # an empty document keeps gamma = alpha
    for _ in range(max_iter):
        if active.size == 0:
            break
        rows = counts[active]
        exp_elog = _exp_dirichlet_expectation(gamma[active])
        entry_doc = np.repeat(np.arange(active.size), np.diff(rows.indptr))
        # sum_k exp(E[log theta_dk]) topics[k, w] for every nonzero (d, w)
        norm = np.einsum("ik,ik->i", exp_elog[entry_doc], topics_t[rows.indices]) + _TINY
        ratio = sparse.csr_matrix((rows.data / norm, rows.indices, rows.indptr),
                                  shape=rows.shape)
        new = alpha[None, :] + exp_elog * np.asarray(ratio @ topics_t)
        change = np.mean(np.abs(new - gamma[active]), axis=1)
        gamma[active] = new
        active = active[change >= tol]
    return gamma


def fit_proportions(topics: Any, alpha: Any, X_observed: Any, max_iter: int = 100,
                    tol: float = 1e-3) -> np.ndarray:
    """Posterior-mean topic proportions of each document with the topics held fixed.

    The standard LDA variational E-step per document d:
    ``phi_dw ∝ exp(E[log theta_d]) * topics[:, w]`` and ``gamma_d = alpha + sum_w n_dw phi_dw``,
    from ``gamma_d = alpha + n_d / K``, until the mean absolute change of ``gamma_d`` is below
    ``tol`` or after ``max_iter`` updates. Returns ``theta_d = gamma_d / sum(gamma_d)``
    (D x K). ``topics`` is K x V row-stochastic, ``alpha`` a positive scalar or K-vector,
    ``X_observed`` a D x V count matrix. A document with no tokens gets the prior mean.
    """
    topics = _check_topics(topics)
    n_topics, n_words = topics.shape
    alpha = _check_alpha(alpha, n_topics)
    counts = _as_counts(X_observed, "X_observed").astype(np.float64)
    if counts.shape[1] != n_words:
        raise CemDataError(f"X_observed: expected {n_words} columns (the topics' vocabulary), "
                           f"found {counts.shape[1]}")
    if max_iter < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter}")
    counts.sum_duplicates()
    topics_t = np.ascontiguousarray(topics.T)
    n_docs = counts.shape[0]
    gamma = np.empty((n_docs, n_topics))
    # Blocks of documents whose gathered nonzeros x K stay under _BLOCK_ELEMENTS.
    nnz_per_doc = np.diff(counts.indptr)
    budget = max(_BLOCK_ELEMENTS // n_topics, 1)
    start = 0
    while start < n_docs:
        cumulative = np.cumsum(nnz_per_doc[start:])
        stop = start + max(int(np.searchsorted(cumulative, budget, side="right")), 1)
        gamma[start:stop] = _fit_block(counts[start:stop], topics, topics_t, alpha,
                                       max_iter, tol)
        start = stop
    return gamma / (gamma.sum(axis=1, keepdims=True) + _TINY)


# ---------------------------------------------------------------------------------------------
# Scores
# ---------------------------------------------------------------------------------------------


def _scored_log_likelihood(topics: np.ndarray, theta: np.ndarray,
                           scored: sparse.csr_matrix) -> tuple[float, float]:
    """(sum of n_dw log p(w | theta_d, topics), number of scored tokens)."""
    entry_doc = np.repeat(np.arange(scored.shape[0]), np.diff(scored.indptr))
    total = 0.0
    step = max(_BLOCK_ELEMENTS // topics.shape[0], 1)
    topics_t = np.ascontiguousarray(topics.T)
    for begin in range(0, scored.nnz, step):
        end = min(begin + step, scored.nnz)
        prob = np.einsum("ik,ik->i", theta[entry_doc[begin:end]],
                         topics_t[scored.indices[begin:end]])
        with np.errstate(divide="ignore"):
            total += float(np.dot(scored.data[begin:end], np.log(prob)))
    return total, float(scored.data.sum())


def completion_log_likelihood_per_word(topics: Any, alpha: Any, X_test: Any, seed: int = 0,
                                       max_iter: int = 100, tol: float = 1e-3) -> float:
    """Mean log-likelihood per scored token under document completion (see the module doc).

    ``-log(completion_perplexity(...))``; ``-inf`` when a scored word has probability zero.
    """
    topics = _check_topics(topics)
    observed, scored = completion_split(X_test, seed=seed)
    if observed.shape[1] != topics.shape[1]:
        raise CemDataError(f"X_test: expected {topics.shape[1]} columns (the topics' "
                           f"vocabulary), found {observed.shape[1]}")
    if scored.shape[0] == 0:
        raise CemDataError("X_test: no held-out document has at least 2 tokens")
    theta = fit_proportions(topics, alpha, observed, max_iter=max_iter, tol=tol)
    total, n_tokens = _scored_log_likelihood(topics, theta, scored)
    return total / n_tokens


def completion_perplexity(topics: Any, alpha: Any, X_test: Any, seed: int = 0,
                          max_iter: int = 100, tol: float = 1e-3) -> float:
    """Held-out perplexity by document completion (the convention in the module doc).

    ``topics``: K x V row-stochastic (posterior mean); ``alpha``: the Dirichlet prior on the
    proportions (scalar or K-vector); ``X_test``: the held-out documents' counts.
    """
    return float(np.exp(-completion_log_likelihood_per_word(topics, alpha, X_test, seed=seed,
                                                            max_iter=max_iter, tol=tol)))
