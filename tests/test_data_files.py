"""Tests for cemodel.data: reading data files for the command line."""

import gzip

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal

from cemodel.data import describe_binding, load_data
from cemodel.errors import CemDataError
from cemodel.runtime.binding import bind_data


def _dim(default=None, ragged_over=None):
    return {"default": default, "ragged_over": ragged_over}


LDA = {
    "model": "lda",
    "dims": {"K": _dim(20), "V": _dim(), "D": _dim(), "N": _dim(ragged_over="D")},
    "plates": {
        "topics": {"dim": "K", "parent": None, "ragged": False},
        "docs": {"dim": "D", "parent": None, "ragged": False},
        "tokens": {"dim": "N", "parent": "docs", "ragged": True},
    },
    "observed": {
        "w": {"plates": ["docs", "tokens"], "support": "category", "shape": [],
              "categories": "V"},
    },
    "covariates": {},
}

REGRESSION = {
    "model": "regression",
    "dims": {"N": _dim(), "P": _dim()},
    "plates": {"points": {"dim": "N", "parent": None, "ragged": False}},
    "observed": {"y": {"plates": ["points"], "support": "real", "shape": []}},
    "covariates": {"X": {"plates": ["points"], "kind": "vector", "shape": ["P"]}},
}

GMM = {
    "model": "gmm",
    "dims": {"N": _dim(), "D": _dim(), "K": _dim(3)},
    "plates": {"points": {"dim": "N", "parent": None, "ragged": False}},
    "observed": {"x": {"plates": ["points"], "support": "vector", "shape": ["D"]}},
    "covariates": {},
}

POISSON = {
    "model": "poisson",
    "dims": {"N": _dim()},
    "plates": {"points": {"dim": "N", "parent": None, "ragged": False}},
    "observed": {"c": {"plates": ["points"], "support": "count", "shape": []}},
    "covariates": {},
}

RAGGED = {
    "model": "ragged",
    "dims": {"G": _dim(), "M": _dim(ragged_over="G"), "P": _dim()},
    "plates": {
        "groups": {"dim": "G", "parent": None, "ragged": False},
        "items": {"dim": "M", "parent": "groups", "ragged": True},
    },
    "observed": {"y": {"plates": ["groups", "items"], "support": "real", "shape": []}},
    "covariates": {"x": {"plates": ["groups", "items"], "kind": "vector", "shape": ["P"]}},
}

COUNTS = np.array([[1, 0, 2, 0, 0], [0, 0, 0, 0, 0], [3, 1, 0, 1, 0], [0, 0, 0, 0, 7]])


def _bow_equal(data):
    got = bind_data(LDA, data)
    ref = bind_data(LDA, {"w": COUNTS})
    assert got.dims == ref.dims
    for key in ("w", "tokens_ptr", "tokens_weight"):
        assert_array_equal(got.arrays[key], ref.arrays[key])


def _write_docword(path, counts, opener=open):
    rows, cols = np.nonzero(counts)
    with opener(path, "wt") as f:
        f.write(f"{counts.shape[0]}\n{counts.shape[1]}\n{len(rows)}\n")
        for r, c in zip(rows, cols, strict=True):
            f.write(f"{r + 1} {c + 1} {counts[r, c]}\n")


# ---------------------------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------------------------


def test_npz_named_arrays(tmp_path):
    rng = np.random.default_rng(0)
    y, X = rng.normal(size=5), rng.normal(size=(5, 2))
    path = tmp_path / "reg.npz"
    np.savez(path, y=y, X=X)
    data = load_data(path, REGRESSION)
    assert set(data) == {"y", "X"}
    bound = bind_data(REGRESSION, data)
    assert_allclose(bound.arrays["X"], X)
    assert_allclose(bound.arrays["y"], y)


def test_npz_compressed_and_str_path(tmp_path):
    path = tmp_path / "reg.npz"
    np.savez_compressed(path, y=np.ones(3), X=np.zeros((3, 2)))
    assert set(load_data(str(path), REGRESSION)) == {"y", "X"}


@pytest.mark.parametrize("kind", ["csr_matrix", "csr_array", "coo_array"])
def test_npz_sparse_matrix(tmp_path, kind):
    path = tmp_path / "bow.npz"
    sp.save_npz(path, getattr(sp, kind)(COUNTS))
    data = load_data(path, LDA)
    assert list(data) == ["w"] and sp.issparse(data["w"])
    _bow_equal(data)


def test_npz_dense_count_matrix(tmp_path):
    path = tmp_path / "bow.npz"
    np.savez(path, w=COUNTS)
    _bow_equal(load_data(path, LDA))


def test_npz_flat_ragged_with_ptr(tmp_path):
    rng = np.random.default_rng(1)
    ptr = np.array([0, 3, 3, 5])
    y, x = rng.normal(size=5), rng.normal(size=(5, 2))
    path = tmp_path / "ragged.npz"
    np.savez(path, y=y, x=x, items_ptr=ptr)
    bound = bind_data(RAGGED, load_data(path, RAGGED))
    assert_array_equal(bound.arrays["items_ptr"], ptr)
    assert_allclose(bound.arrays["x"], x)
    assert_allclose(bound.arrays["y"], y)


def test_npz_bad_ptr(tmp_path):
    path = tmp_path / "ragged.npz"
    np.savez(path, y=np.zeros(5), x=np.zeros((5, 2)), items_ptr=np.array([0, 3, 2, 5]))
    with pytest.raises(CemDataError, match="items_ptr.*non-decreasing"):
        load_data(path, RAGGED)
    np.savez(path, y=np.zeros(4), x=np.zeros((5, 2)), items_ptr=np.array([0, 3, 5]))
    with pytest.raises(CemDataError, match="'y'.*5 entries"):
        load_data(path, RAGGED)


def test_npz_flat_ids_with_weights_are_the_count_matrix(tmp_path):
    """A bag of words saved as CSR parts (ids, offsets, counts) binds as its count matrix:
    'tokens_weight' is each id's count, not dropped; a plate that is no bag of words has no
    counts, so its weights are refused."""
    rows, ids = np.nonzero(COUNTS)
    ptr = np.r_[0, np.cumsum(np.bincount(rows, minlength=COUNTS.shape[0]))]
    path = tmp_path / "bow.npz"
    np.savez(path, w=ids, tokens_ptr=ptr, tokens_weight=COUNTS[rows, ids].astype(float))
    _bow_equal(load_data(path, LDA))
    np.savez(path, y=np.zeros(5), x=np.zeros((5, 2)), items_ptr=np.array([0, 3, 5]),
             items_weight=np.ones(5))
    with pytest.raises(CemDataError, match="unknown data 'items_weight'.*plate items holds"):
        bind_data(RAGGED, load_data(path, RAGGED))
    np.savez(path, w=ids, tokens_ptr=ptr, tokens_weight=np.ones(3))
    with pytest.raises(CemDataError, match="'tokens_weight' is stored flat.*expected 6 entries"):
        load_data(path, LDA)


def test_npy_single_variable(tmp_path):
    x = np.random.default_rng(2).normal(size=(7, 3))
    path = tmp_path / "x.npy"
    np.save(path, x)
    data = load_data(path, GMM)
    assert_array_equal(data["x"], x)
    assert bind_data(GMM, data).dims == {"N": 7, "D": 3, "K": 3}


def test_npy_needs_a_single_variable_model(tmp_path):
    path = tmp_path / "y.npy"
    np.save(path, np.ones(3))
    with pytest.raises(CemDataError, match="(?s)y.npy.*several named arrays.*npz"):
        load_data(path, REGRESSION)


def test_csv_with_header(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("a,b,c\n1,2,3\n4,5,6.5\n")
    data = load_data(path, GMM)
    assert_array_equal(data["x"], [[1, 2, 3], [4, 5, 6.5]])


def test_csv_without_header_and_one_column(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("1.5,2\n3,-4e-1\n")
    assert_array_equal(load_data(path, GMM)["x"], [[1.5, 2], [3, -0.4]])
    path = tmp_path / "c.csv"
    path.write_text("count\n1\n0\n4\n\n")
    data = load_data(path, POISSON)
    assert data["c"].shape == (3,)
    assert_array_equal(bind_data(POISSON, data).arrays["c"], [1, 0, 4])


@pytest.mark.parametrize(("text", "pattern"), [
    ("NA\n1\n2\n3\n0\n", r"found 'NA' on line 1, column 1"),  # not a header: a missing marker
    (",0.5\n1.0,2.0\n3.0,4.0\n", "found an empty field on line 1, column 1"),
    ("1\t2\n3\t4\n", r"found '1\\t2' on line 1, column 1.*\n.*tabs or ';'"),
    ("1;2\n", "found '1;2' on line 1, column 1"),
    ("1\n2\nNA\n3\n", "found 'NA' on line 3, column 1"),  # 1-based lines, not numpy's rows
    ("x\n\n1\n\n2,3\n", "found 2 fields on line 5 but 1 on line 3"),
    ("x,y\n1,2,3\n", r"line 1 \('x,y'\) was taken as a header of names, 2 of them, but the "
                     "rows have 3 numbers"),
    ("a,b\n", r"line 1 \('a,b'\) was taken as a header of names, and no rows"),
])
def test_csv_takes_only_a_row_of_names_as_header_and_names_lines(tmp_path, text, pattern):
    """A first row is a header only when its fields are names: one with a missing marker,
    an empty field or another separator is data, refused with its line (never dropped)."""
    path = tmp_path / "x.csv"
    path.write_text(text)
    with pytest.raises(CemDataError, match=pattern):
        load_data(path, GMM)


@pytest.mark.parametrize(("text", "pattern"), [
    ("2\n3\n2\n1 1 1\n1 2 2.5\n", "whole numbers.*found 2.5 on line 5, column 3"),
    ("2\n3\n2\n\n1 1 1\n2 x 1\n", "found 'x' on line 6, column 2"),
    ("2\n3\n2\n\n1 1 1\n2 9 1\n", r"wordID in \[1, 3\].*found 9 on line 6"),
])
def test_docword_errors_name_the_file_line(tmp_path, text, pattern):
    path = tmp_path / "docword.x.txt"
    path.write_text(text)
    with pytest.raises(CemDataError, match=pattern):
        load_data(path, LDA)


def test_csv_needs_a_single_variable_model(tmp_path):
    path = tmp_path / "reg.csv"
    path.write_text("1,2\n")
    with pytest.raises(CemDataError, match="reg.csv"):
        load_data(path, REGRESSION)


def test_mtx(tmp_path):
    path = tmp_path / "bow.mtx"
    scipy.io.mmwrite(path, sp.coo_matrix(COUNTS))
    _bow_equal(load_data(path, LDA))


def test_mtx_dense_array_for_single_variable(tmp_path):
    path = tmp_path / "x.mtx"
    x = np.arange(6.0).reshape(3, 2)
    scipy.io.mmwrite(path, x)
    assert_array_equal(load_data(path, GMM)["x"], x)


@pytest.mark.parametrize("gz", [False, True])
def test_uci_docword(tmp_path, gz):
    path = tmp_path / ("docword.test.txt" + (".gz" if gz else ""))
    _write_docword(path, COUNTS, gzip.open if gz else open)
    data = load_data(path, LDA)
    assert data["w"].shape == COUNTS.shape
    _bow_equal(data)


def test_uci_docword_duplicate_lines_are_summed(tmp_path):
    path = tmp_path / "docword.dup.txt"
    path.write_text("2\n3\n3\n1 1 1\n1 1 2\n2 3 4\n")
    bound = bind_data(LDA, load_data(path, LDA))
    assert_array_equal(bound.arrays["tokens_weight"], [3, 4])
    assert_array_equal(bound.arrays["w"], [0, 2])


def test_sparse_file_needs_a_bag_of_words_model(tmp_path):
    path = tmp_path / "m.npz"
    sp.save_npz(path, sp.csr_matrix(COUNTS))
    with pytest.raises(CemDataError, match="(?s)m.npz.*bag-of-words"):
        load_data(path, REGRESSION)
    # a single dense variable takes the matrix (bound as dense)
    data = load_data(path, POISSON)
    with pytest.raises(CemDataError, match="'c'"):
        bind_data(POISSON, data)  # 2-D where 1-D is expected


# ---------------------------------------------------------------------------------------------
# Bad files
# ---------------------------------------------------------------------------------------------


def _garbage(path, content=b"\x00\x01not a real file\xff" * 10):
    path.write_bytes(content)
    return path


def _truncated_npz(path):
    np.savez(path, y=np.arange(1000.0), X=np.zeros((1000, 2)))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _damaged_npz(path):
    np.savez_compressed(path, y=np.arange(1000.0), X=np.zeros((1000, 2)))
    data = bytearray(path.read_bytes())
    data[200:400] = b"\x00" * 200  # inside the first member's compressed data
    path.write_bytes(bytes(data))
    return path


def _npz_with_objects(path):
    np.savez(path, y=np.array([1, "a", None], dtype=object))
    return path


def _npy_with_objects(path):
    np.save(path, np.array([1, None], dtype=object), allow_pickle=True)
    return path


def _truncated_npy(path):
    np.save(path, np.arange(1000.0))
    path.write_bytes(path.read_bytes()[:200])
    return path


@pytest.mark.parametrize(
    ("filename", "make", "spec", "pattern"),
    [
        ("bad.npz", _garbage, REGRESSION, "not a zip archive"),
        ("trunc.npz", _truncated_npz, REGRESSION, "npz archive"),
        ("damaged.npz", _damaged_npz, REGRESSION, "could not read"),
        ("obj.npz", _npz_with_objects, REGRESSION, "Python objects"),
        ("empty.npz", lambda p: np.savez(p) or p, REGRESSION, "empty"),
        ("bad.npy", _garbage, GMM, ".npy header"),
        ("trunc.npy", _truncated_npy, GMM, "could not read"),
        ("obj.npy", _npy_with_objects, GMM, "Python objects"),
        ("bad.csv", lambda p: p.write_text("1,2\n3,x\n") and p, GMM, "numbers separated"),
        ("ragged.csv", lambda p: p.write_text("1,2\n3\n") and p, GMM, "numbers separated"),
        ("empty.csv", lambda p: p.write_text("\n") and p, GMM, "empty"),
        ("head.csv", lambda p: p.write_text("a,b\n") and p, GMM, "no rows"),
        ("bin.csv", lambda p: _garbage(p, b"\xff\xfe\x00\x81" * 8), GMM, "could not read"),
        ("bad.mtx", _garbage, LDA, "MatrixMarket"),
        ("docword.bad.txt", lambda p: p.write_text("x\ny\nz\n") and p, LDA, "first three"),
        ("docword.nnz.txt", lambda p: p.write_text("2\n3\n5\n1 1 1\n") and p, LDA, "NNZ=5"),
        ("docword.id.txt", lambda p: p.write_text("2\n3\n1\n1 4 1\n") and p, LDA,
         "wordID in \\[1, 3\\].*found 4 on line 4"),
        ("docword.zero.txt", lambda p: p.write_text("2\n3\n1\n0 1 1\n") and p, LDA, "docID"),
        ("docword.neg.txt", lambda p: p.write_text("2\n3\n1\n1 1 -2\n") and p, LDA,
         "non-negative"),
        ("docword.cols.txt", lambda p: p.write_text("2\n3\n1\n1 1\n") and p, LDA, "3 numbers"),
        ("docword.text.txt", lambda p: p.write_text("2\n3\n1\n1 a 1\n") and p, LDA,
         "found 'a' on line 4, column 2"),
        ("docword.gz.txt.gz", _garbage, LDA, "could not read"),
        ("data.json", lambda p: p.write_text("{}") and p, LDA, "unsupported format '.json'"),
        ("noext", lambda p: p.write_text("1") and p, LDA, "unsupported format"),
    ],
)
def test_bad_files(tmp_path, filename, make, spec, pattern):
    path = tmp_path / filename
    make(path)
    with pytest.raises(CemDataError, match=pattern) as err:
        load_data(path, spec)
    assert filename in str(err.value)


def test_missing_file(tmp_path):
    path = tmp_path / "nope.npz"
    with pytest.raises(CemDataError, match="nope.npz' not found") as err:
        load_data(path, LDA)
    assert ".npz" in err.value.hint


def test_directory_is_not_a_file(tmp_path):
    with pytest.raises(CemDataError, match="directory"):
        load_data(tmp_path, LDA)


# ---------------------------------------------------------------------------------------------
# describe_binding
# ---------------------------------------------------------------------------------------------


def test_describe_binding():
    text = describe_binding(LDA)
    assert text.startswith("w (observed, category ids in [0, V))")
    assert "(D × V)" in text and "save_npz" in text and "docword" in text
    text = describe_binding(REGRESSION)
    assert "y (observed, real numbers): an array of shape (N,)" in text
    assert "X (covariate, real vectors): an array of shape (N, P)" in text
    text = describe_binding(RAGGED)
    assert "items_ptr" in text and "(M_d, P)" in text
    assert describe_binding({"observed": {}, "covariates": {}}) == "The model takes no data."
