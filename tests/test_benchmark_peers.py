"""The LDA benchmarks' converters of peer outputs to topics in the count matrix's word order:
BigARTM's Phi (a frame indexed by token) and Vowpal Wabbit's readable model (word-major λ).
Neither peer is needed: the inputs are written here in the peers' formats."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import sparse

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import _bigartm  # noqa: E402
import _vw  # noqa: E402
import bigartm_driver  # noqa: E402

pd = pytest.importorskip("pandas")


def test_bigartm_phi_rows_go_to_their_columns():
    # ARTM lists tokens in its own order and drops words no training document has
    lam = np.arange(1.0, 13.0).reshape(3, 4)  # K = 3 topics, V = 4 words
    order = ["2", "0", "3"]  # word 1 missing
    frame = pd.DataFrame(lam[:, [2, 0, 3]].T, index=order, columns=["t0", "t1", "t2"])
    phi = bigartm_driver.phi_in_column_order(frame, 4)
    expected = lam.copy()
    expected[:, 1] = 0.0
    np.testing.assert_array_equal(phi, expected)
    assert np.allclose(_bigartm.topics(phi).sum(axis=1), 1.0)


def test_bigartm_uci_file_is_one_based_and_complete(tmp_path):
    X = sparse.csr_matrix(np.array([[0, 2, 0], [1, 0, 3]]))
    _bigartm.write_uci(X, tmp_path)
    lines = (tmp_path / "docword.train.txt").read_text().split("\n")
    assert lines[:3] == ["2", "3", "3"]
    triples = {tuple(map(int, line.split())) for line in lines[3:] if line}
    assert triples == {(1, 2, 2), (2, 1, 1), (2, 3, 3)}
    assert (tmp_path / "vocab.train.txt").read_text().split() == ["0", "1", "2"]


def test_vw_readable_model_is_word_major(tmp_path):
    # VW writes header lines, then "j lambda_j1 .. lambda_jK" for every one of the 2^b rows
    lam = np.array([[5.0, 1.0, 0.5], [0.25, 2.0, 7.0]])  # K = 2, V = 3
    rows = [f"{j} " + " ".join(f"{v:g}" for v in lam[:, j]) + " " for j in range(3)]
    header = ["Version 9.11.9", "Id ", "Min label:0", "bits:2", "lda:2", "0 ngram:",
              "options: --lda 2 --lda_rho 0.01", "Checksum: 1"]
    path = tmp_path / "lambda.txt"
    path.write_text("\n".join([*header, *rows, "3 9 9 "]) + "\n")  # row 3: an unused slot
    read = _vw.read_readable_model(path, 2, 3)
    np.testing.assert_array_equal(read, lam)
    np.testing.assert_allclose(_vw.topics(read), lam / lam.sum(axis=1, keepdims=True))
    path.write_text("\n".join([*header, *rows[:2]]) + "\n")
    with pytest.raises(ValueError, match="no line for 1 words"):
        _vw.read_readable_model(path, 2, 3)


def test_vw_examples_and_bits(tmp_path):
    X = sparse.csr_matrix(np.array([[0, 2, 0], [0, 0, 0], [1, 0, 3]]))
    _vw.write_examples(X, tmp_path / "train.vw")
    assert (tmp_path / "train.vw").read_text().split("\n") == ["| 1:2", "|", "| 0:1 2:3", ""]
    assert [_vw.bits_for(v) for v in (2, 3, 4, 5, 3012, 4096, 4097)] == [1, 2, 2, 3, 12, 12, 13]
    assert _vw.Schedule().arguments() == []
    assert _vw.Schedule(1.0, 0.7, 10.0).arguments() == ["-l", "1.0", "--power_t", "0.7",
                                                         "--initial_t", "10.0"]


def test_lda_svi_kernel_timer_tells_minibatches_from_the_elbo_pass(compiled):
    """lda_svi.py's KernelTimer finds the local step's ``items`` by name: when the kernels'
    leading arguments changed (shares) it read a bool there and every cemodel row failed."""
    import os

    before = dict(os.environ)
    import lda_svi

    # importing it must leave the thread settings alone: numba refuses a NUMBA_NUM_THREADS
    # changed after its threads started, in every later test of the process
    assert dict(os.environ) == before
    lda = compiled("lda", K=3)
    rng = np.random.default_rng(0)
    X = sparse.csr_matrix(rng.poisson(1.0, (40, 12)))
    with lda_svi.KernelTimer(lda, X.shape[0]) as timer:
        lda.fit_svi({"w": X}, epochs=2, batch_size=10, seed=0)
    assert timer.calls["local_step (minibatches)"] == 8
    assert timer.calls["local_step (ELBO, all documents)"] >= 2
