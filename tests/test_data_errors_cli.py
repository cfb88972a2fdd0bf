"""Malformed data files given to ``cemodel fit``: refused before any kernel runs.

Each case must exit with status 2 and a message on stderr naming the variable or the file,
what was expected and what was found; never a traceback, and no output (not even a
temporary file) may be left in the output directory.
"""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("CEMODEL_CACHE", str(REPO / ".cemodel_cache" / "tests"))

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from cemodel.cli import main  # noqa: E402

MODELS = REPO / "stdlib_models"


# -- writers: each makes one malformed data file in ``folder`` and returns its path ----------


def _npz(name, **arrays):
    def write(folder: Path) -> Path:
        path = folder / name
        np.savez(path, **arrays)
        return path

    return write


def _raw(name, content: bytes):
    def write(folder: Path) -> Path:
        path = folder / name
        path.write_bytes(content)
        return path

    return write


def _garbage_member(folder: Path) -> Path:
    """A real zip archive whose member is not an .npy array."""
    path = folder / "corrupt.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", b"\x93NUMPY this is not an array header")
    return path


def _truncated(folder: Path) -> Path:
    path = folder / "truncated.npz"
    np.savez(path, x=np.arange(200.0))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _two_columns_npy(folder: Path) -> Path:
    path = folder / "counts.npy"
    np.save(path, np.ones((4, 2)))
    return path


def _missing(folder: Path) -> Path:
    return folder / "does_not_exist.npz"


# (id, model, writer, extra arguments, substrings stderr must contain)
CASES = [
    ("negative-count", "lda", _npz("neg.npz", w=np.array([[1, -2, 0], [0, 1, 1]])), [],
     ["data 'w'", "expected counts", "found -2", "docs[0]"]),
    ("word-past-vocabulary", "lda",
     _npz("ids.npz", w=np.array([0, 1, 2, 3, 12]), tokens_ptr=np.array([0, 3, 5])),
     ["--set", "V=10"],
     ["data 'w'", "expected category ids in [0, V=10)", "found 12", "docs[1]"]),
    ("count-matrix-wider-than-vocabulary", "lda", _npz("wide.npz", w=np.ones((3, 12))),
     ["--set", "V=10"],
     ["dimension 'V'", "10 from dims['V'] (--set V=...)", "12 from data 'w'"]),
    ("lda-wrong-ndim", "lda", _npz("cube.npz", w=np.zeros((2, 3, 4))), [],
     ["data 'w'", "expected a (D × V) matrix of counts", "found an array of shape (2, 3, 4)"]),
    ("lda-missing-variable", "lda", _npz("ptr_only.npz", tokens_ptr=np.array([0, 2, 3])), [],
     ["missing data for 'w'", "the model expects: w"]),
    ("nan", "gmm", _npz("nan.npz", x=np.array([[0.0, 1.0], [np.nan, 2.0]])), [],
     ["data 'x'", "missing only as a whole", "some of its entries missing and others given",
      "points[1]"]),
    ("inf", "gmm", _npz("inf.npz", x=np.array([[0.0, 1.0], [2.0, np.inf]])), [],
     ["data 'x'", "expected finite real vectors", "found inf", "points[1]"]),
    ("wrong-ndim", "gmm", _npz("flat.npz", x=np.zeros(5)), [],
     ["data 'x'", "expected a 2-dimensional array with axes (points, D)",
      "found an array of shape (5,)"]),
    ("columns-conflict-with-set", "gmm", _npz("points.npz", x=np.zeros((5, 2))),
     ["--set", "D=3"],
     ["dimension 'D'", "3 from dims['D'] (--set D=...)", "2 from data 'x'"]),
    ("unknown-variable-name", "gmm", _npz("other.npz", points=np.zeros((5, 2))), [],
     ["unknown data 'points'", "the model expects: x"]),
    ("misspelled-variable", "beta_bernoulli", _npz("caps.npz", X=np.zeros(4)), [],
     ["unknown data 'X'", "the model expects: x", "did you mean 'x'?"]),
    ("not-binary", "beta_bernoulli", _npz("coin.npz", x=np.array([0.0, 1.0, 2.0])), [],
     ["data 'x'", "expected binary values (0 or 1)", "found 2", "trials[2]"]),
    ("no-observations", "beta_bernoulli", _npz("none.npz", x=np.zeros(0)), [],
     ["dimension 'N'", "must be at least 1", "found 0 from data 'x'"]),
    ("non-integer-count", "gamma_poisson", _npz("rates.npz", x=np.array([0.0, 1.5, 2.0])), [],
     ["data 'x'", "expected counts (non-negative whole numbers)", "found 1.5",
      "observations[1]"]),
    ("text-values", "gamma_poisson", _npz("text.npz", x=np.array(["1", "2"])), [],
     ["data 'x'", "expected numbers", "found text"]),
    ("python-objects", "gamma_poisson",
     _npz("objects.npz", x=np.array([1, "a", None], dtype=object)), [],
     ["objects.npz", "holds Python objects", "expected numeric arrays"]),
    ("negative-count-csv", "gamma_poisson", _raw("counts.csv", b"x\n1\n-3\n"), [],
     ["data 'x'", "expected counts", "found -3", "observations[1]"]),
    ("csv-with-text", "gamma_poisson", _raw("words.csv", b"x\n1\nabc\n"), [],
     ["words.csv", "expected a table of numbers", "found 'abc' on line 3, column 1"]),
    ("npy-two-columns", "gamma_poisson", _two_columns_npy, [],
     ["data 'x'", "expected a 1-dimensional array with axes (observations)",
      "found an array of shape (4, 2)"]),
    ("empty-npz", "gamma_poisson", _raw("empty.npz", b""), [],
     ["empty.npz", "expected a NumPy .npz archive", "not a zip archive"]),
    ("empty-csv", "gamma_poisson", _raw("empty.csv", b""), [],
     ["empty.csv", "the CSV file is empty", "expected numbers"]),
    ("corrupt-npz", "gamma_poisson", _garbage_member, [],
     ["corrupt.npz", "could not read it as a NumPy .npz archive"]),
    ("truncated-npz", "gamma_poisson", _truncated, [],
     ["truncated.npz", "expected a NumPy .npz archive", "not a zip archive"]),
    ("unsupported-extension", "gamma_poisson", _raw("data.json", b'{"x": [1, 2]}'), [],
     ["data.json", "unsupported format '.json'", "expected .npz, .npy, .csv"]),
    ("missing-file", "gamma_poisson", _missing, [],
     ["does_not_exist.npz", "not found", "expected one of .npz"]),
    ("category-past-k", "dirichlet_categorical", _npz("rolls.npz", x=np.array([0, 5, 6])), [],
     ["data 'x'", "expected category ids in [0, K=6)", "found 6", "rolls[2]"]),
    ("negative-category", "dirichlet_categorical", _npz("neg_rolls.npz", x=np.array([0, -1])),
     [], ["data 'x'", "expected category ids", "found -1", "rolls[1]"]),
]


def _fit_args(model: str, data: Path, out: Path, extra: list[str]) -> list[str]:
    return ["fit", str(MODELS / f"{model}.cem"), "--data", str(data), "-o", str(out),
            "--quiet", *extra]


@pytest.mark.parametrize(
    ("model", "writer", "extra", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_malformed_data_is_refused(tmp_path, capsys, model, writer, extra, expected):
    data_dir = tmp_path / "data"
    out_dir = tmp_path / "out"
    data_dir.mkdir()
    out_dir.mkdir()
    data = writer(data_dir)
    out = out_dir / "posterior.npz"

    status = main(_fit_args(model, data, out, extra))

    captured = capsys.readouterr()
    assert status == 2, captured.err
    assert captured.err.startswith("error: "), captured.err
    for text in expected:
        assert text in captured.err, f"{text!r} not in {captured.err!r}"
    assert "Traceback" not in captured.err
    assert "wrote" not in captured.out
    assert not out.exists()
    assert list(out_dir.iterdir()) == []  # no temporary file left behind either


def test_table_size():
    assert len(CASES) >= 12
    assert len({case[0] for case in CASES}) == len(CASES)
    assert {case[1] for case in CASES} == {
        "lda", "gmm", "beta_bernoulli", "gamma_poisson", "dirichlet_categorical",
    }


def test_subprocess_shows_no_traceback(tmp_path):
    data = _npz("nan.npz", x=np.array([[0.0, 1.0], [np.nan, 2.0]]))(tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "posterior.npz"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run(
        [sys.executable, "-m", "cemodel.cli", *_fit_args("gmm", data, out, [])],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "data 'x'" in proc.stderr
    assert "missing only as a whole" in proc.stderr
    assert "some of its entries missing" in proc.stderr
    assert not out.exists()
    assert list(out_dir.iterdir()) == []


def test_ragged_rows_as_python_objects_are_refused_with_the_flat_form_that_works(tmp_path,
                                                                                   capsys):
    """Sequences of different lengths in an .npz come as an object array, which is not read;
    the hint names the ragged plate and the form that is, and that form fits."""
    rows = [np.array([0, 1, 1, 2]), np.array([2, 2, 0]), np.array([1, 0, 0, 0, 2])]
    objects = np.empty(len(rows), dtype=object)
    objects[:] = rows
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "posterior.npz"
    bad = tmp_path / "objects.npz"
    np.savez(bad, x=objects)
    assert main(_fit_args("hmm", bad, out, ["--set", "K=2"])) == 2
    err = capsys.readouterr().err
    assert "holds Python objects" in err and "'steps_ptr'" in err and "x=np.concatenate" in err
    assert not out.exists()
    flat = tmp_path / "flat.npz"
    np.savez(flat, x=np.concatenate(rows), steps_ptr=np.r_[0, np.cumsum([len(r) for r in rows])])
    assert main(_fit_args("hmm", flat, out, ["--set", "K=2", "--max-iter", "3"])) == 0
    assert out.exists()
