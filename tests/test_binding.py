"""Tests for cemodel.runtime.binding (data binding and validation) and runtime.numeric."""

import math

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.special as sps
from numpy.testing import assert_allclose, assert_array_equal

from cemodel.errors import CemDataError
from cemodel.runtime import numeric
from cemodel.runtime.binding import BoundData, bind_data
from cemodel.runtime.hypers import check_hyper_names, hyper_value


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

# Linear regression with one observed of each scalar support and a few event shapes.
DENSE = {
    "model": "dense",
    "dims": {"N": _dim(), "P": _dim(), "K": _dim(3), "Q": _dim(2)},
    "plates": {"points": {"dim": "N", "parent": None, "ragged": False}},
    "observed": {
        "y": {"plates": ["points"], "support": "real", "shape": []},
        "b": {"plates": ["points"], "support": "binary", "shape": []},
        "c": {"plates": ["points"], "support": "count", "shape": []},
        "t": {"plates": ["points"], "support": "positive", "shape": []},
        "u": {"plates": ["points"], "support": "unit", "shape": []},
        "z": {"plates": ["points"], "support": "category", "shape": [], "categories": "K"},
        "v": {"plates": ["points"], "support": "vector", "shape": ["Q"]},
        "p": {"plates": ["points"], "support": "simplex", "shape": ["K"]},
        "S": {"plates": [], "support": "spd", "shape": ["Q", "Q"]},
        "g": {"plates": [], "support": "real", "shape": []},
    },
    "covariates": {
        "X": {"plates": ["points"], "kind": "vector", "shape": ["P"]},
        "n": {"plates": ["points"], "kind": "int", "shape": []},
    },
}

# A ragged plate that is not a bag of words: a real observation and a vector covariate.
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


def _dense_data(n=6, rng=None):
    rng = rng or np.random.default_rng(0)
    A = rng.normal(size=(2, 2))
    p = rng.dirichlet(np.ones(3), size=n)
    return {
        "y": rng.normal(size=n),
        "b": rng.integers(0, 2, size=n),
        "c": rng.poisson(3.0, size=n),
        "t": rng.gamma(2.0, size=n),
        "u": rng.uniform(0.1, 0.9, size=n),
        "z": rng.integers(0, 3, size=n),
        "v": rng.normal(size=(n, 2)),
        "p": p,
        "S": A @ A.T + 2 * np.eye(2),
        "g": 1.5,
        "X": rng.normal(size=(n, 4)),
        "n": rng.integers(-3, 3, size=n),
    }


def _ragged_data():
    rng = np.random.default_rng(1)
    lengths = [3, 0, 2, 5]
    return {
        "y": [rng.normal(size=m) for m in lengths],
        "x": [rng.normal(size=(m, 2)) for m in lengths],
    }


# ---------------------------------------------------------------------------------------------
# Bag of words
# ---------------------------------------------------------------------------------------------


def _unique_tokens(counts):
    """Token lists with one id per nonzero entry (for a 0/1 matrix these are the same data)."""
    return [list(np.flatnonzero(row)) for row in counts]


@pytest.mark.parametrize(
    "make",
    [
        lambda m: sp.csr_matrix(m),
        lambda m: sp.csr_array(m),
        lambda m: sp.coo_matrix(m),
        lambda m: sp.csc_array(m),
        lambda m: np.asarray(m),
        lambda m: np.asarray(m, dtype=np.float32),
        lambda m: _unique_tokens(m),
        lambda m: tuple(np.array(t, dtype=np.int32) for t in _unique_tokens(m)),
    ],
    ids=["csr_matrix", "csr_array", "coo", "csc", "dense", "dense_f32", "lists", "tuple_i32"],
)
def test_bag_of_words_forms_agree(make):
    binary = (COUNTS > 0).astype(int)
    ref = bind_data(LDA, {"w": sp.csr_matrix(binary)})
    got = bind_data(LDA, {"w": make(binary)})
    assert got.dims == ref.dims == {"K": 20, "V": 5, "D": 4}
    assert got.n_items == ref.n_items == {"topics": 20, "docs": 4, "tokens": 6}
    for key in ("w", "tokens_ptr", "tokens_weight"):
        assert_array_equal(got.arrays[key], ref.arrays[key])
    assert_array_equal(ref.arrays["tokens_ptr"], [0, 2, 2, 5, 6])
    assert_array_equal(ref.arrays["w"], [0, 2, 0, 1, 3, 4])


def test_bag_of_words_counts_layout_and_dtypes():
    for value in (sp.csr_matrix(COUNTS), COUNTS, COUNTS.astype(float)):
        bound = bind_data(LDA, {"w": value})
        assert isinstance(bound, BoundData)
        w, ptr, weight = (bound.arrays[k] for k in ("w", "tokens_ptr", "tokens_weight"))
        assert w.dtype == np.int64 and ptr.dtype == np.int64 and weight.dtype == np.float64
        assert all(a.flags.c_contiguous for a in (w, ptr, weight))
        assert_array_equal(ptr, [0, 2, 2, 5, 6])
        assert_array_equal(w, [0, 2, 0, 1, 3, 4])
        assert_array_equal(weight, [1, 2, 3, 1, 1, 7])
        assert bound.n_items["tokens"] == 6


def test_sparse_zeros_dropped_duplicates_summed_rows_sorted():
    # entries out of order, an explicit zero and a duplicate (0, 2)
    rows = np.array([2, 0, 0, 2, 0, 3, 2])
    cols = np.array([3, 2, 0, 1, 2, 4, 0])
    vals = np.array([1.0, 1.0, 1.0, 0.0, 1.0, 7.0, 3.0])
    mat = sp.coo_matrix((vals, (rows, cols)), shape=(4, 5))
    bound = bind_data(LDA, {"w": mat})
    assert_array_equal(bound.arrays["tokens_ptr"], [0, 2, 2, 4, 5])
    assert_array_equal(bound.arrays["w"], [0, 2, 0, 3, 4])
    assert_array_equal(bound.arrays["tokens_weight"], [1, 2, 3, 1, 7])
    assert mat.nnz == 7  # the caller's matrix is not modified


def test_token_lists_with_repeats_give_unit_weights_with_the_same_counts():
    tokens = [[2, 0, 2], [], [0, 0, 0, 1, 3], [4] * 7]
    bound = bind_data(LDA, {"w": tokens}, dims={"V": 5})
    ptr, w, weight = (bound.arrays[k] for k in ("tokens_ptr", "w", "tokens_weight"))
    assert_array_equal(ptr, [0, 3, 3, 8, 15])
    assert_array_equal(weight, np.ones(15))
    counts = np.zeros((4, 5))
    rows = np.repeat(np.arange(4), np.diff(ptr))
    np.add.at(counts, (rows, w), weight)
    assert_array_equal(counts, COUNTS)


def test_token_lists_with_weights_are_the_count_matrix():
    """'tokens_weight' beside lists of ids gives each id its count (CSR parts of a count
    matrix); its lengths and values are checked, and a count matrix takes no weights."""
    rows, ids = np.nonzero(COUNTS)
    lists = [ids[rows == d] for d in range(4)]
    counts = [COUNTS[d, ids[rows == d]] for d in range(4)]
    got = bind_data(LDA, {"w": lists, "tokens_weight": counts})
    ref = bind_data(LDA, {"w": COUNTS})
    for key in ("w", "tokens_ptr", "tokens_weight"):
        assert_array_equal(got.arrays[key], ref.arrays[key])
    short = [c[:1] for c in counts]
    with pytest.raises(CemDataError, match=r"'tokens_weight': expected 2 counts at docs\[0\]"):
        bind_data(LDA, {"w": lists, "tokens_weight": short})
    with pytest.raises(CemDataError, match="'tokens_weight': expected a list of 4 arrays"):
        bind_data(LDA, {"w": lists, "tokens_weight": counts[:3]})
    bad = [c.astype(float) for c in counts]
    bad[2][1] = 0.5
    with pytest.raises(CemDataError, match=r"'tokens_weight': expected counts.*found 0\.5 at "
                                           r"docs\[2\], tokens\[1\]"):
        bind_data(LDA, {"w": lists, "tokens_weight": bad})
    with pytest.raises(CemDataError, match="'tokens_weight'.*found an array of shape"):
        bind_data(LDA, {"w": COUNTS, "tokens_weight": counts})


def test_category_dim_inferred_from_largest_id():
    bound = bind_data(LDA, {"w": [[0, 1], [6]]})
    assert bound.dims["V"] == 7
    assert bind_data(LDA, {"w": [[0, 1], [6]]}, dims={"V": 100}).dims["V"] == 100


def test_whole_float_ids_accepted():
    bound = bind_data(LDA, {"w": [np.array([0.0, 3.0]), np.array([1.0])]})
    assert bound.arrays["w"].dtype == np.int64
    assert_array_equal(bound.arrays["w"], [0, 3, 1])


def test_empty_documents_and_empty_lists():
    bound = bind_data(LDA, {"w": [[], [1, 2], []]}, dims={"V": 3})
    assert_array_equal(bound.arrays["tokens_ptr"], [0, 0, 2, 2])
    assert bound.arrays["w"].dtype == np.int64


# ---------------------------------------------------------------------------------------------
# Dimensions
# ---------------------------------------------------------------------------------------------


def test_dims_user_override_and_defaults():
    bound = bind_data(LDA, {"w": COUNTS}, dims={"K": 7})
    assert bound.dims == {"K": 7, "V": 5, "D": 4}
    assert bound.n_items["topics"] == 7


def test_dims_conflict_with_user_value_names_both():
    with pytest.raises(CemDataError) as err:
        bind_data(LDA, {"w": sp.csr_matrix(np.ones((3, 120)))}, dims={"V": 100})
    msg = str(err.value)
    assert "'V'" in msg and "100" in msg and "120" in msg and "'w'" in msg


def test_dims_conflict_between_variables_names_both():
    data = _dense_data()
    data["X"] = data["X"][:5]
    with pytest.raises(CemDataError) as err:
        bind_data(DENSE, data)
    msg = str(err.value)
    assert "'N'" in msg and "'X'" in msg and "'y'" in msg and "5" in msg and "6" in msg


def test_dim_conflicting_with_model_default_is_an_error():
    data = _dense_data()
    data["v"] = np.zeros((6, 3))
    data["S"] = np.eye(3)
    with pytest.raises(CemDataError, match="'Q'.*default") as err:
        bind_data(DENSE, data)
    assert "'v'" in str(err.value)
    assert bind_data(DENSE, data, dims={"Q": 3}).dims["Q"] == 3


def test_undeterminable_dim_tells_how_to_pass_it():
    spec = {**LDA, "dims": {**LDA["dims"], "K": _dim()}}
    with pytest.raises(CemDataError) as err:
        bind_data(spec, {"w": COUNTS})
    rendered = str(err.value)
    assert "'K'" in rendered and "dims={'K'" in rendered and "--set K=" in rendered
    assert bind_data(spec, {"w": COUNTS}, dims={"K": 4}).dims["K"] == 4


@pytest.mark.parametrize(
    ("dims", "pattern"),
    [
        ({"K": 0}, "dims\\['K'\\].*at least 1.*0"),
        ({"K": 2.5}, "dims\\['K'\\].*whole number"),
        ({"k": 3}, "(?s)unknown dimension 'k'.*did you mean 'K'"),
        ({"N": 3}, "'N' is ragged"),
    ],
)
def test_bad_user_dims(dims, pattern):
    with pytest.raises(CemDataError, match=pattern):
        bind_data(LDA, {"w": COUNTS}, dims=dims)


def test_dim_from_data_must_be_positive():
    with pytest.raises(CemDataError, match="'D' must be at least 1"):
        bind_data(LDA, {"w": np.zeros((0, 4))})


# ---------------------------------------------------------------------------------------------
# Dense and ragged layouts
# ---------------------------------------------------------------------------------------------


def test_dense_layout():
    data = _dense_data()
    bound = bind_data(DENSE, data)
    assert bound.dims == {"N": 6, "P": 4, "K": 3, "Q": 2}
    assert bound.n_items == {"points": 6}
    arrays = bound.arrays
    expected_shapes = {
        "y": (6,), "b": (6,), "c": (6,), "t": (6,), "u": (6,), "z": (6,), "v": (6, 2),
        "p": (6, 3), "S": (1, 2, 2), "g": (1,), "X": (6, 4), "n": (6,),
    }
    for name, shape in expected_shapes.items():
        assert arrays[name].shape == shape, name
        assert arrays[name].flags.c_contiguous, name
        assert arrays[name].dtype == (np.int64 if name == "z" else np.float64), name
    assert_array_equal(arrays["c"], data["c"])
    assert_allclose(arrays["S"][0], data["S"])
    assert set(arrays) == set(expected_shapes)


def test_unplated_variable_accepts_leading_axis_of_one():
    data = _dense_data()
    data["S"] = data["S"][None]
    data["g"] = [2.0]
    bound = bind_data(DENSE, data)
    assert bound.arrays["S"].shape == (1, 2, 2) and bound.arrays["g"].tolist() == [2.0]


def test_simplex_renormalised_and_spd_symmetrised():
    data = _dense_data()
    data["p"] = data["p"] * (1 + 1e-9)
    data["S"] = data["S"] + np.array([[0.0, 1e-12], [0.0, 0.0]])
    bound = bind_data(DENSE, data)
    assert_allclose(bound.arrays["p"].sum(axis=-1), 1.0, rtol=0, atol=1e-15)
    assert_array_equal(bound.arrays["S"][0], bound.arrays["S"][0].T)


def test_general_ragged_plate():
    data = _ragged_data()
    bound = bind_data(RAGGED, data)
    assert bound.dims == {"G": 4, "P": 2}
    assert bound.n_items == {"groups": 4, "items": 10}
    assert_array_equal(bound.arrays["items_ptr"], [0, 3, 3, 5, 10])
    assert_array_equal(bound.arrays["items_weight"], np.ones(10))
    assert bound.arrays["x"].shape == (10, 2) and bound.arrays["y"].shape == (10,)
    assert_allclose(bound.arrays["x"][3:5], data["x"][2])
    assert_allclose(bound.arrays["y"], np.concatenate(data["y"]))


def test_general_ragged_plate_rejects_a_count_matrix():
    data = _ragged_data()
    data["y"] = sp.csr_matrix(np.ones((4, 3)))
    with pytest.raises(CemDataError, match="'y'.*ragged.*list"):
        bind_data(RAGGED, data)


# ---------------------------------------------------------------------------------------------
# Malformed data
# ---------------------------------------------------------------------------------------------


def _with(base, **changes):
    data = dict(base)
    for key, value in changes.items():
        if value is _DROP:
            data.pop(key)
        else:
            data[key] = value
    return data


_DROP = object()
_D = _dense_data()
_R = _ragged_data()
_nan_y = _D["y"].copy()
_nan_y[3] = np.nan


@pytest.mark.parametrize(
    ("spec", "data", "dims", "name", "pattern"),
    [
        # bag of words
        (LDA, {"w": -COUNTS}, None, "w", "non-negative.*-1 at row 0"),
        (LDA, {"w": sp.csr_matrix(-COUNTS)}, None, "w", "non-negative.*-1 at row 0"),
        (LDA, {"w": COUNTS + 0.5}, None, "w", "whole.*1.5"),
        (LDA, {"w": sp.csr_matrix(COUNTS * 0.5)}, None, "w", "whole.*0.5 at row 0"),
        (LDA, {"w": [[0, 1], [4300]]}, {"V": 4258}, "w",
         r"\[0, V=4258\), found 4300 at docs\[1\], tokens\[0\]"),
        (LDA, {"w": [[0, -1]]}, None, "w", "non-negative.*-1 at docs\\[0\\], tokens\\[1\\]"),
        (LDA, {"w": [[0, 1.5]]}, None, "w", "whole.*1.5"),
        (LDA, {"w": [[0, np.nan]]}, None, "w", "nan"),
        (LDA, {"w": np.array([[1.0, np.inf]])}, None, "w", "inf"),
        (LDA, {"w": [np.array(["a", "b"])]}, None, "w", "text"),
        (LDA, {"w": [[[0, 1]]]}, None, "w", "1-dimensional.*shape \\(1, 2\\)"),
        (LDA, {"w": np.arange(3)}, None, "w", "shape \\(3,\\)"),
        (LDA, {"w": 3}, None, "w", "ragged"),
        (LDA, {}, None, "w", "missing data for 'w'"),
        (LDA, {"w": COUNTS, "ww": COUNTS}, None, "ww", "(?s)unknown data.*did you mean 'w'"),
        (LDA, {"w": COUNTS, "V": 5}, None, "V", "(?s)unknown data 'V'.*dimension.*dims="),
        # dense
        (DENSE, _with(_D, y=_nan_y), None, "y", "finite.*nan at points\\[3\\]"),
        (DENSE, _with(_D, y=np.full(6, np.inf)), None, "y", "inf at points\\[0\\]"),
        (DENSE, _with(_D, y=_D["y"][:, None]), None, "y",
         "expected a 1-dimensional array with axes \\(points\\)"),
        (DENSE, _with(_D, X=_D["X"][:, 0]), None, "X",
         "expected a 2-dimensional array with axes \\(points, P\\)"),
        (DENSE, _with(_D, v=np.zeros((6, 3))), None, "v", "'Q'"),
        (DENSE, _with(_D, X=np.zeros((6, 5))), {"P": 4}, "X", "'P' is 4.*but 5"),
        (DENSE, _with(_D, b=np.array([0, 1, 2, 0, 1, 0])), None, "b", "0 or 1.*2 at points"),
        (DENSE, _with(_D, t=np.array([1, 2, 0, 1, 1, 1.0])), None, "t", "positive.*found 0"),
        (DENSE, _with(_D, t=-_D["t"]), None, "t", "positive"),
        (DENSE, _with(_D, u=np.array([0.5, 0.5, 1.0, 0.2, 0.2, 0.2])), None, "u",
         "between 0 and 1.*found 1 at points\\[2\\]"),
        (DENSE, _with(_D, c=np.array([1, 2, -3, 0, 0, 0])), None, "c", "counts.*-3"),
        (DENSE, _with(_D, c=np.array([1, 2, 2.5, 0, 0, 0])), None, "c", "whole.*2.5"),
        (DENSE, _with(_D, n=np.array([1, 2, 2.5, 0, 0, 0])), None, "n", "whole.*2.5"),
        (DENSE, _with(_D, z=np.array([0, 1, 3, 0, 0, 0])), None, "z", "\\[0, K=3\\), found 3"),
        (DENSE, _with(_D, z=np.array([0, 1, 0.5, 0, 0, 0])), None, "z", "whole.*0.5"),
        (DENSE, _with(_D, y=np.array(["1", "2", "3", "4", "5", "6"])), None, "y", "text"),
        (DENSE, _with(_D, y=np.array([1, None, 2, 3, 4, 5], dtype=object)), None, "y",
         "objects"),
        (DENSE, _with(_D, y=np.ones(6, dtype=complex)), None, "y", "complex"),
        (DENSE, _with(_D, v=[[1.0, 2.0], [3.0]] + [[0.0, 0.0]] * 4), None, "v",
         "different lengths"),
        (DENSE, _with(_D, p=np.full((6, 3), 0.5)), None, "p", "summing to 1.5"),
        (DENSE, _with(_D, S=np.array([[1.0, 2.0], [0.0, 1.0]])), None, "S", "not symmetric"),
        (DENSE, _with(_D, S=np.array([[1.0, 2.0], [2.0, 1.0]])), None, "S", "eigenvalue -1"),
        (DENSE, _with(_D, g=[1.0, 2.0]), None, "g", "single value"),
        (DENSE, _with(_D, X=_DROP, n=_DROP), None, "X", "missing data for 'X', 'n'"),
        (DENSE, _with(_D, Y=_D["y"]), None, "Y", "(?s)unknown data 'Y'.*did you mean 'y'"),
        # general ragged
        (RAGGED, _with(_R, x=_R["x"][:3]), None, "x", "'G' is 4.*'y'.*but 3.*'x'"),
        (RAGGED, _with(_R, x=[*_R["x"][:3], np.zeros((4, 2))]), None, "x",
         "disagree on the length of plate items.*at groups\\[3\\]: 5 vs 4"),
        (RAGGED, _with(_R, x=[*_R["x"][:3], np.zeros((5, 3))]), None, "x",
         "same shape.*groups\\[3\\]"),
        (RAGGED, _with(_R, y=[*_R["y"][:3], np.array([1.0, 2, np.nan, 4, 5])]), None, "y",
         "nan at groups\\[3\\], items\\[2\\]"),
        (RAGGED, _with(_R, x=[*_R["x"][:3], np.array([[0, 0]] * 4 + [[0, np.inf]])]), None,
         "x", "inf at groups\\[3\\], items\\[4\\], entry \\[1\\]"),
    ],
)
def test_malformed_data(spec, data, dims, name, pattern):
    with pytest.raises(CemDataError, match=pattern) as err:
        bind_data(spec, data, dims)
    assert f"'{name}'" in str(err.value)


def test_data_must_be_a_mapping():
    with pytest.raises(CemDataError, match="mapping"):
        bind_data(LDA, [COUNTS])  # type: ignore[arg-type]


def test_spd_and_simplex_accept_good_values():
    data = _dense_data()
    bound = bind_data(DENSE, data)
    assert_allclose(bound.arrays["p"], data["p"])


# ---------------------------------------------------------------------------------------------
# Hyperparameters
# ---------------------------------------------------------------------------------------------


def test_hyper_value_defaults_and_given():
    assert hyper_value({}, "alpha", 0.1, ()) == 0.1
    assert isinstance(hyper_value({"alpha": np.float32(2)}, "alpha", 0.1, ()), float)
    assert hyper_value({"alpha": 3}, "alpha", 0.1, ()) == 3.0
    vec = hyper_value({}, "m", 0.0, (3,))
    assert isinstance(vec, np.ndarray) and vec.dtype == np.float64 and vec.shape == (3,)
    mat = hyper_value({"W": np.eye(2, dtype=int)}, "W", np.eye(2), (2, 2))
    assert mat.dtype == np.float64 and mat.flags.writeable
    assert_array_equal(mat, np.eye(2))


@pytest.mark.parametrize(
    ("hypers", "default", "shape", "pattern"),
    [
        ({"a": [1.0, 2.0]}, 1.0, (), "expected a scalar, found an array of shape \\(2,\\)"),
        ({"a": 1.0}, np.zeros(3), (3,), "expected an array of shape \\(3,\\), found a scalar"),
        ({"a": np.eye(3)}, np.eye(2), (2, 2), "\\(2, 2\\).*\\(3, 3\\)"),
        ({"a": np.inf}, 1.0, (), "finite.*inf"),
        ({"a": [1.0, np.nan]}, np.zeros(2), (2,), "finite.*nan at \\[1\\]"),
        ({"a": "x"}, 1.0, (), "text"),
    ],
)
def test_hyper_value_errors(hypers, default, shape, pattern):
    with pytest.raises(CemDataError, match=pattern) as err:
        hyper_value(hypers, "a", default, shape)
    assert "hyperparameter 'a'" in str(err.value)


def test_check_hyper_names():
    check_hyper_names({"alpha": 1.0}, ["alpha", "eta"])
    with pytest.raises(CemDataError, match="unknown hyperparameter 'alhpa'") as err:
        check_hyper_names({"alhpa": 1.0}, ["alpha", "eta"])
    assert err.value.hint == "did you mean 'alpha'?"


# ---------------------------------------------------------------------------------------------
# numeric
# ---------------------------------------------------------------------------------------------


def _spd(rng, d, batch=()):
    A = rng.normal(size=(*batch, d, d))
    return A @ np.swapaxes(A, -1, -2) + d * np.eye(d)


def test_numeric_scalar_functions():
    x = np.array([0.3, 1.0, 4.5, 100.0])
    assert_allclose(numeric.gammaln(x), sps.gammaln(x))
    alpha = np.array([[0.5, 1.5, 2.0], [1.0, 1.0, 1.0]])
    assert_allclose(numeric.lgamma_sum(alpha), sps.gammaln([4.0, 3.0]))
    assert_allclose(numeric.lbeta(2.5, 3.5), sps.gammaln(2.5) + sps.gammaln(3.5) - sps.gammaln(6))
    n = np.array([10, 10, 50, 7])
    k = np.array([0, 3, 25, 7])
    assert_allclose(numeric.log_binom(n, k), np.log(sps.comb(n, k)), rtol=1e-12, atol=1e-12)
    assert isinstance(numeric.log_binom(5, 2), float)
    assert math.isclose(numeric.log_binom(5, 2), math.log(10))


def test_numeric_matrices():
    rng = np.random.default_rng(3)
    M = _spd(rng, 3, (4,))
    assert_allclose(numeric.logdet(M), np.linalg.slogdet(M)[1])
    assert isinstance(numeric.logdet(M[0]), float)
    inv = numeric.inv(M)
    assert_allclose(inv @ M, np.broadcast_to(np.eye(3), M.shape), atol=1e-12)
    assert_array_equal(inv, np.swapaxes(inv, -1, -2))
    with pytest.raises(CemDataError, match="matrix.*positive-definite"):
        numeric.logdet(np.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(CemDataError, match="matrix.*singular"):
        numeric.inv(np.ones((2, 2)))


def test_wishart_lognorm():
    rng = np.random.default_rng(4)
    W = _spd(rng, 3)
    nu = 5.5
    want = 0.5 * nu * 3 * math.log(2) + 0.5 * nu * np.linalg.slogdet(W)[1] + sps.multigammaln(
        nu / 2, 3
    )
    assert_allclose(numeric.wishart_lognorm(nu, W), want, rtol=1e-12)
    batch = numeric.wishart_lognorm(np.array([nu, nu]), np.stack([W, W]))
    assert_allclose(batch, [want, want], rtol=1e-12)
    with pytest.raises(CemDataError, match="degrees of freedom"):
        numeric.wishart_lognorm(1.0, W)


def test_a_nonnegative_covariate_after_a_vector_one_is_a_scalar():
    """Found by the random-model generator (tests/test_random_models.py): a covariate the
    model takes the log of (an exposure `e[n]`) declared after a vector covariate `x[n]`
    inherited x's event shape (P,) and its scalar data were refused."""
    spec = {
        "model": "m",
        "dims": {"N": _dim(), "P": _dim(2)},
        "plates": {"items": {"dim": "N", "parent": None, "ragged": False}},
        "observed": {"c": {"plates": ["items"], "support": "count", "shape": [],
                           "categories": None}},
        "covariates": {"x": {"plates": ["items"], "kind": "vector", "shape": ["P"]},
                       "e": {"plates": ["items"], "kind": "real", "shape": [],
                             "nonnegative": True}},
    }
    bound = bind_data(spec, {"c": np.arange(5), "x": np.ones((5, 2)), "e": np.full(5, 0.5)})
    assert bound.arrays["e"].shape == (5,) and bound.arrays["x"].shape == (5, 2)


@pytest.mark.parametrize("key, hint", [
    ("a", "'a' is a hyperparameter: pass it as hypers={'a': ...} (--set a=...)"),
    ("rate", "'rate' is a latent variable, which the fit infers"),
    ("xx", "did you mean 'x'"),
])
def test_a_name_of_the_model_given_as_data_is_told_what_it_is(compiled, key, hint):
    """A hyperparameter or a latent given as data got only "unknown data" (a dimension was
    already told it is one)."""
    with pytest.raises(CemDataError, match=f"unknown data '{key}'") as info:
        compiled("gamma_poisson").fit({"x": np.arange(5), key: 1.0})
    assert hint in (info.value.hint or "")


def test_a_misspelled_ragged_offsets_array_is_suggested(compiled):
    """The flat form of ragged data names its offsets '<plate>_ptr': a typo got "unknown
    data 'step_ptr'; the model expects: x" and no hint."""
    hmm = compiled("hmm")
    flat = np.array([0, 1, 2, 1, 0, 2, 1])
    with pytest.raises(CemDataError, match="unknown data 'step_ptr'") as info:
        hmm.fit({"x": flat, "step_ptr": np.array([0, 3, 7])})
    assert "did you mean 'steps_ptr'" in (info.value.hint or "")
    with pytest.raises(CemDataError, match="unknown data 'seq_offsets_ptr'") as info:
        hmm.fit({"x": flat, "seq_offsets_ptr": np.array([0, 3, 7])})
    assert "a ragged plate's offsets are named after it: steps_ptr" in (info.value.hint or "")


def test_a_dict_may_hold_a_ragged_plate_flat_with_its_offsets(compiled):
    """The .npz layout (flat values and '<plate>_ptr') given to fit as a dict, as
    dict(np.load(path)) gives it, is the lists it stands for (it was refused: "unknown data
    'steps_ptr'", with the hint "did you mean 'steps_ptr'?")."""
    hmm = compiled("hmm")
    seqs = [np.array([0, 1, 2]), np.array([1, 0, 2, 1])]
    flat = {"x": np.concatenate(seqs), "steps_ptr": np.array([0, 3, 7])}
    by_lists = hmm.fit({"x": seqs}, max_iter=3, seed=0)
    by_flat = hmm.fit(flat, max_iter=3, seed=0)
    np.testing.assert_array_equal(by_flat.elbo, by_lists.elbo)
    with pytest.raises(CemDataError, match="data: 'steps_ptr' must be non-decreasing integer "
                                           "offsets starting at 0"):
        hmm.fit({"x": flat["x"], "steps_ptr": np.array([0, 5, 3, 7])})
    with pytest.raises(CemDataError, match="data: 'x' is stored flat for plate steps, so "
                                           "expected 8 entries"):
        hmm.fit({"x": flat["x"], "steps_ptr": np.array([0, 3, 8])})
