"""Vowpal Wabbit's online LDA (``--lda``, Hoffman et al. 2010, C++, float32) as a peer of
``lda_svi.py``, through its python package (``pip install vowpalwabbit``, 9.11.x).

Input: one line per training document, ``| j:n_dj ...`` with the word's column index j as the
feature name. VW hashes feature names, but a name that is an integer is its own hash in the
default namespace (namespace hash 0), masked to ``-b`` bits: with 2^b >= V every word j is
weight row j, no two words collide (``check_hashing`` asks VW for every j). The weight table
has 2^b rows, so VW's LDA has 2^b "words" (the rows past V are never seen; their initial mass
decays away with every step): ``-b`` is the smallest that holds the vocabulary.

Output: VW's ``--readable_model`` lists, for every row j, λ_jk = weight + ``lda_rho`` (its
save_load adds rho), K values per line: the topic-word Dirichlet parameters (unnormalised),
word-major. ``read_readable_model`` turns the first V rows into a K x V matrix; normalising
each topic's row gives the posterior-mean topics the other rows are scored with.

Timing: the text is parsed into VW's cache file by a first, untimed run (one pass of the same
learner: VW keeps the parsed examples in the cache keyed by its label type, so a cache written
by another reduction is not read back); the timed run reads the cache (``--cache_file``, no
``-d``) for ``--passes`` epochs. The ``Workspace`` constructor runs the whole fit (pyvw starts
VW's driver when ``--passes`` is given); its wall time, including VW's set-up of 2^b x K
weights, is the fit's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

VERSION_PREFIX = "9.11"


@dataclass(frozen=True)
class Schedule:
    """ρ_t = learning_rate (initial_t + t)^-power_t, t = 1, 2, ... minibatches over all passes
    (VW's ``example_t`` starts at ``--initial_t``); None fields: VW's defaults (learning rate
    0.5, power_t 0.5, initial_t 0)."""

    learning_rate: float | None = None
    power_t: float | None = None
    initial_t: float | None = None

    def arguments(self) -> list[str]:
        pairs = (("-l", self.learning_rate), ("--power_t", self.power_t),
                 ("--initial_t", self.initial_t))
        return [item for flag, value in pairs if value is not None
                for item in (flag, repr(float(value)))]


@dataclass(frozen=True)
class Fit:
    lam: np.ndarray  # K x V, λ from the readable model
    seconds: float  # wall time of the timed run
    cpu_seconds: float  # the process's CPU time over it (all VW threads)
    api_difference: float  # max |λ readable - (get_weight + rho)| / max λ: the two reads agree


def bits_for(n_words: int) -> int:
    """The smallest ``-b`` with 2^b >= n_words."""
    return max(1, (n_words - 1).bit_length())


def check_hashing(n_words: int, bits: int) -> None:
    """Every word index j hashes to weight row j (so no two words share a row)."""
    from vowpalwabbit import Workspace

    workspace = Workspace(arg_list=["-b", str(bits), "--quiet"])
    try:
        space = workspace.hash_space(" ")
        rows = np.array([workspace.hash_feature(str(j), space) for j in range(n_words)])
    finally:
        workspace.finish()
    if not np.array_equal(rows, np.arange(n_words)):
        moved = np.flatnonzero(rows != np.arange(n_words))
        raise AssertionError(f"VW hashes word {moved[0]} to row {rows[moved[0]]} with -b {bits}")


def write_examples(X, path: Path) -> None:
    """The documents of the CSR count matrix ``X`` in VW's text format, one line each."""
    indptr, indices, data = X.indptr, X.indices, X.data
    with open(path, "w", encoding="ascii") as handle:
        for row in range(X.shape[0]):
            span = slice(indptr[row], indptr[row + 1])
            handle.write("|" + "".join(f" {j}:{int(n)}" for j, n in
                                       zip(indices[span], data[span], strict=True)) + "\n")


def read_readable_model(path: Path, n_topics: int, n_words: int) -> np.ndarray:
    """λ (K x V) from a ``--readable_model`` file of ``--lda K``: header lines (``Version``,
    ``bits:``, ``options:``, ...), then ``j λ_j1 ... λ_jK`` for every weight row j; rows
    j >= V (hash slots no word uses) are dropped. Raises if a word's row is missing."""
    lam = np.full((n_topics, n_words), np.nan)
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            fields = line.split()
            if len(fields) != n_topics + 1 or not fields[0].isdigit() or ":" in line:
                continue
            j = int(fields[0])
            if j < n_words:
                lam[:, j] = [float(value) for value in fields[1:]]
    missing = np.flatnonzero(np.isnan(lam[0]))
    if missing.size:
        raise ValueError(f"{path}: no line for {missing.size} words (first: {missing[0]})")
    return lam


def topics(lam: np.ndarray) -> np.ndarray:
    """Posterior-mean topics: each topic's λ normalised over the V words."""
    return lam / lam.sum(axis=1, keepdims=True)


def fit(X_train, k: int, epochs: int, batch_size: int, alpha: float, eta: float,
        schedule: Schedule, seed: int, folder: Path, memory=None) -> Fit:
    """Cache the documents (untimed), then fit ``epochs`` passes from the cache (timed)."""
    from vowpalwabbit import Workspace

    n_docs, n_words = X_train.shape
    bits = bits_for(n_words)
    check_hashing(n_words, bits)
    text, cache, readable = folder / "train.vw", folder / "train.cache", folder / "lambda.txt"
    write_examples(X_train, text)
    learner = ["--lda", str(k), "--lda_alpha", repr(alpha), "--lda_rho", repr(eta),
               "--lda_D", str(n_docs), "--minibatch", str(batch_size), "-b", str(bits),
               "--random_seed", str(seed), "--holdout_off", "--quiet", *schedule.arguments()]
    Workspace(arg_list=[*learner, "-d", str(text), "-c", "--cache_file", str(cache),
                        "--passes", "1"]).finish()  # parse once into the cache: not timed
    if memory is not None:
        memory.start()
    start, cpu = time.perf_counter(), time.process_time()
    workspace = Workspace(arg_list=[*learner, "--cache_file", str(cache),
                                    "--passes", str(epochs), "--readable_model", str(readable)])
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    if memory is not None:
        memory.stop()
    by_api = np.array([[workspace.get_weight(j, t) for j in range(n_words)] for t in range(k)])
    workspace.finish()  # writes the readable model
    lam = read_readable_model(readable, k, n_words)
    difference = float(np.abs(lam - (by_api + eta)).max() / lam.max())
    return Fit(lam, seconds, cpu, difference)
