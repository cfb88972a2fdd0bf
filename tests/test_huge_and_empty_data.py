"""Huge sizes and empty data (issue 19, items 8 and 11).

Item 8: ``--set K=1e12``, ``dim K = 99999999999`` in the source, or a UCI docword header
declaring W = 2e9 ended in a raw MemoryError from ``_prepare`` (K=1e30: numpy's ValueError;
a header declaring D = 2e9 documents had the reader killed for memory). Now ``_prepare``
states the arrays it is about to allocate and ``rt.check_memory`` refuses them first, naming
the dimension, its size and the memory; a sparse file's header is refused before it is read.

Item 11: a docword file holding only its header leaked numpy's "loadtxt: input contained no
data" UserWarning and fitted a zero matrix; now refused, naming the file.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from cemodel.cli import main
from cemodel.compiler import compile_stages, run_stages
from cemodel.data import load_data
from cemodel.errors import CemDataError
from cemodel.runtime.binding import BoundData
from cemodel.runtime.memory import check_memory, describe_bytes, physical_memory

from .conftest import STDLIB

POINTS = {"x": np.array([0, 1, 3, 2, 5, 4, 1, 0])}


def _assert_names(error: CemDataError, dimension: str, size: str) -> None:
    text = error.message
    assert f"dimension '{dimension}' is {size}" in text, text
    assert re.search(r"would need [\d.]+ (TiB|PiB|EiB)", text), text
    assert "more than this machine's memory" in text, text


def test_a_dimension_of_1e12_is_refused_before_allocating(compiled):
    module = compiled("poisson_mixture")
    with pytest.raises(CemDataError) as info:
        module.fit(POINTS, dims={"K": 10**12}, max_iter=2)
    _assert_names(info.value, "K", "1,000,000,000,000")


def test_a_dimension_in_the_source_is_refused_before_allocating():
    text = (STDLIB / "poisson_mixture.cem").read_text().replace("dim K = 3",
                                                                "dim K = 99999999999")
    module = compile_stages(run_stages(text, "huge.cem", {}))
    with pytest.raises(CemDataError) as info:
        module.fit(POINTS, max_iter=2)
    _assert_names(info.value, "K", "99,999,999,999")


@pytest.mark.parametrize("value", ["1e12", "1e30"])
def test_set_a_huge_dimension_exits_2(tmp_path, capsys, value):
    data = tmp_path / "points.npz"
    np.savez(data, **POINTS)
    out = tmp_path / "post.npz"
    assert main(["fit", str(STDLIB / "poisson_mixture.cem"), "--data", str(data), "--set",
                 f"K={value}", "--quiet", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: dimension 'K' is 1,000,000,000,000"), err
    assert "Traceback" not in err and not out.exists()


def test_the_message_names_the_largest_array_and_both_sizes():
    bound = BoundData({"K": 4, "V": 1000}, {}, {})
    check_memory(bound, {("K", "V"): 2, ("V",): 1}, limit=2 * 4 * 1000 * 8 + 1000 * 8)
    with pytest.raises(CemDataError) as info:
        check_memory(bound, {("K", "V"): 2, ("V",): 1}, limit=2 * 4 * 1000 * 8)
    assert info.value.message == (
        "dimension 'V' is 1,000: the model's arrays would need 70.3 KiB (those of shape "
        "(4, 1,000) alone 62.5 KiB), more than this machine's memory (62.5 KiB)")
    assert describe_bytes(3 * 2**40) == "3.0 TiB"
    assert physical_memory() is None or physical_memory() > 2**20


def _docword(path, head: str, body: str = ""):
    path.write_text(head + body)
    return path


@pytest.fixture
def lda_spec(compiled):
    return compiled("lda").SPEC


def test_a_docword_header_declaring_w_2e9_is_refused_before_allocating(tmp_path, compiled):
    lda = compiled("lda")
    path = _docword(tmp_path / "docword.wide.txt", "2\n2000000000\n2\n", "1 1 3\n2 5 1\n")
    with pytest.raises(CemDataError) as info:
        lda.fit(load_data(path, lda.SPEC), max_iter=2)
    _assert_names(info.value, "V", "2,000,000,000")


@pytest.mark.parametrize(("name", "head", "body", "found"), [
    ("docword.long.txt", "10000000000000\n20\n2\n", "1 1 3\n2 5 1\n",
     "the header declares D=10,000,000,000,000 documents; reading it would need about"),
    ("big.mtx", "%%MatrixMarket matrix coordinate integer general\n10000000000000 20 2\n",
     "1 1 3\n2 5 1\n", "the header declares 10,000,000,000,000 rows; reading it would need"),
])
def test_a_sparse_header_declaring_too_many_rows_is_refused_before_reading(
        tmp_path, lda_spec, name, head, body, found):
    path = _docword(tmp_path / name, head, body)
    with pytest.raises(CemDataError, match=re.escape(found)) as info:
        load_data(path, lda_spec)
    assert name in info.value.message and "more than this machine's memory" in info.value.message


@pytest.mark.parametrize(("head", "found"), [
    ("3\n5\n0\n", "the header says NNZ=0: no word counts, nothing to fit"),
    ("3\n5\n4\n", "the header says NNZ=4 entries, found none: the file holds only its header"),
    ("3\n5\n4\n\n  \n", "found none: the file holds only its header"),
])
def test_a_docword_file_of_only_its_header_is_refused(tmp_path, lda_spec, head, found):
    """(pytest turns the UserWarning numpy gave into an error, as a user's -W error would)"""
    path = _docword(tmp_path / "docword.empty.txt", head)
    with pytest.raises(CemDataError, match=re.escape(found)) as info:
        load_data(path, lda_spec)
    assert "docword.empty.txt" in info.value.message


def test_streaming_a_docword_file_without_entries_is_refused(tmp_path, compiled):
    from cemodel.streaming import open_model_source

    lda = compiled("lda")
    path = _docword(tmp_path / "docword.none.txt", "3\n5\n0\n")
    with pytest.raises(CemDataError, match="NNZ=0: no word counts") as info:
        open_model_source(lda, "docs", path)
    assert "docword.none.txt" in info.value.message


GROUPED = """model grouped
dim K = 2
dim G
dim N[G]
plate comps k in K:
    rate[k] ~ Gamma(1.0, 0.1)
plate groups g in G:
    pi[g] ~ Dirichlet(1.0, K)
    plate items n in N[g]:
        z[g, n] ~ Categorical(pi[g])
        observe x[g, n] ~ Poisson(rate[z[g, n]])
"""


def test_groups_without_points_fit_wherever_they_lie():
    """A ragged data plate whose last group, or every group, has no points: the seeds' features
    failed in np.add.reduceat (an IndexError traceback from `cemodel fit`). Every group empty
    leaves the prior: rate's mean a / b = 10 and an ELBO of 0 (no data, q = prior)."""
    module = compile_stages(run_stages(GROUPED, "grouped.cem", {}, None))
    empty = np.array([], dtype=np.int64)
    for groups in ([np.array([1, 2, 30]), empty], [empty, np.array([1, 2, 30]), empty]):
        result = module.fit({"x": groups}, max_iter=20)
        assert np.isfinite(result.elbo).all() and len(result.elbo) > 0
    prior = module.fit({"x": [empty] * 3}, max_iter=5)
    shape, rate = prior["rate.shape"], prior["rate.rate"]
    np.testing.assert_allclose(shape / rate, 10.0)
    assert abs(prior.elbo[-1]) < 1e-9


def test_a_chain_of_empty_sequences_fits_its_prior(compiled):
    """Every sequence of an HMM empty: the chain's seed steps reshaped zero steps into rows
    (a ValueError traceback); now nothing is seeded and q is the prior (ELBO 0). One empty
    sequence beside a full one fits as before."""
    module = compiled("hmm")
    empty = np.array([], dtype=np.int64)
    prior = module.fit({"x": [empty] * 3}, dims={"V": 3}, max_iter=5)
    assert abs(prior.elbo[-1]) < 1e-9
    mixed = module.fit({"x": [np.array([0, 1, 2, 1, 0]), empty]}, dims={"V": 3}, max_iter=5)
    assert np.isfinite(mixed.elbo).all()
