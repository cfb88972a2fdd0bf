"""Damaged result files through the command line (issue 19 item 7 and the harness): a
posterior ``.npz`` through ``summarize`` and ``plot``, a points file through ``plot --data``
and a checkpoint through ``fit --resume``, each cut short, with bytes flipped, empty, or a
well-formed archive of the wrong arrays (strings, NaN, empty, other shapes, a meta record of
the wrong form). Each command ends with status 0, or 2 and a message naming the file; never
a traceback. The seeds are real files of a Poisson mixture fit (MF and SVI checkpoints).

``derandomize=True`` makes every run check the same files; ``CEMODEL_FUZZ_SCALE=10`` checks
ten times as many (locally). Last long run: see ``LONG_RUN`` below.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import STDLIB
from .test_user_values import run_cli

POISSON = STDLIB / "poisson_mixture.cem"
SCALE = int(os.environ.get("CEMODEL_FUZZ_SCALE", "1"))
# CEMODEL_FUZZ_SCALE=10 python -m pytest -q -n 0 tests/test_fuzz_results.py (2026-11-26):
LONG_RUN = ("920 damaged files (600 posteriors through summarize, 120 posteriors or points "
            "through plot, 200 MF or SVI checkpoints through fit --resume): all clean, 59 s")


def fuzz(examples: int) -> settings:
    return settings(max_examples=examples * SCALE, deadline=None, derandomize=True,
                    database=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                          HealthCheck.too_slow,
                                                          HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> Path:
    """A Poisson mixture's data, its posterior, MF and SVI checkpoints and 2-D points."""
    d = tmp_path_factory.mktemp("seeds")
    np.savez(d / "counts.npz", x=np.random.default_rng(7).poisson(np.repeat([2.0, 9.0, 25.0],
                                                                            20)))
    np.savez(d / "points.npz", x=np.random.default_rng(1).normal(size=(30, 2)))
    fit = ["fit", POISSON, "--data", d / "counts.npz", "--quiet"]
    assert run_cli([*fit, "--max-iter", "4", "--checkpoint", d / "mf.ckpt",
                    "-o", d / "post.npz"]) == 0
    assert run_cli([*fit, "--method", "svi", "--epochs", "2", "--batch-size", "16",
                    "--checkpoint", d / "svi.ckpt", "-o", d / "svi.npz"]) == 0
    return d


# -- damage ------------------------------------------------------------------------------------

HOSTILE = [np.array([]), np.array(["a", "bc"]), np.array([np.nan, np.inf, -np.inf]),
           np.zeros((2, 3, 4)), np.array(3.0), np.array([True, False]), np.array([1 + 2j]),
           np.arange(5), np.full(3, -1.0), np.zeros((0, 2)), np.ones((5, 2)), np.ones((3, 1)),
           np.array([1e308, -1e308]), np.zeros(3, dtype=np.uint8), np.array(["x"])]
HOSTILE_JSON = [None, "x", [], {}, 1e308, -1, 0, True, [1, "a"], {"a": 1}, [[]], 2.5]


@st.composite
def damaged_bytes(draw, original: bytes) -> bytes:
    """``original`` cut short (down to nothing) or with a few bytes flipped."""
    if draw(st.booleans()):
        return original[:draw(st.integers(0, len(original) - 1))]
    data = bytearray(original)
    for _ in range(draw(st.integers(1, 4))):
        data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
    return bytes(data)


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


@st.composite
def wrong_arrays(draw, original: bytes) -> bytes:
    """The archive ``original`` with arrays dropped, replaced by hostile ones or added."""
    with np.load(io.BytesIO(original)) as archive:
        arrays = {k: archive[k] for k in archive.files}
    names = sorted(arrays)
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["drop", "replace", "add"]))
        if action == "drop" and arrays:
            del arrays[draw(st.sampled_from(sorted(arrays)))]
        elif action == "replace" and arrays:
            arrays[draw(st.sampled_from(sorted(arrays)))] = draw(st.sampled_from(HOSTILE))
        else:
            name = draw(st.sampled_from([*names, "elbo", "pi.alpha", "w.mean", "beta.alpha",
                                         "z.p", "mu.precision", "state.zz", "x"]))
            arrays[name] = draw(st.sampled_from(HOSTILE))
    return _npz(arrays)


@st.composite
def wrong_meta(draw, original: bytes) -> bytes:
    """The checkpoint ``original`` with its meta record's entries dropped or of the wrong
    kind (top level, progress or scalars), or not JSON at all."""
    with np.load(io.BytesIO(original)) as archive:
        arrays = {k: archive[k] for k in archive.files}
    meta = json.loads(str(arrays["meta"]))
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["meta", "progress", "scalars"]))
        record = meta if where == "meta" or not isinstance(meta.get(where), dict) else \
            meta[where]
        key = draw(st.sampled_from(sorted(record) + ["extra"]))
        if draw(st.booleans()):
            record.pop(key, None)
        else:
            record[key] = draw(st.sampled_from(HOSTILE_JSON))
    text = json.dumps(meta) if draw(st.integers(0, 9)) else "{not json"
    arrays["meta"] = np.array(text)
    return _npz(arrays)


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


OTHER_FILES = [b"", _npy(np.arange(3.0)), _npy(np.array(["a"])), b"\xff\xfe not text",
               b"elbo\n1.0\n", b"PK\x05\x06" + bytes(18)]  # the last: an empty zip


def damaged(original: bytes, *kinds) -> st.SearchStrategy[bytes]:
    return st.one_of(st.sampled_from(OTHER_FILES), damaged_bytes(original),
                     *(kind(original) for kind in kinds))


# -- the check ---------------------------------------------------------------------------------


def ends_cleanly(capsys, argv: list, path: Path) -> int:
    """Run the CLI: status 0, or 2 with an error naming ``path``; never a traceback."""
    status = run_cli(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, err
    assert status in (0, 2), (status, err)
    if status == 2:
        assert err.startswith("error: ") and str(path) in err, err
    return status


@given(data=st.data())
@fuzz(60)
def test_a_damaged_posterior_through_summarize(seeds, capsys, data):
    original = (seeds / "post.npz").read_bytes()
    path = seeds / "damaged_post.npz"
    path.write_bytes(data.draw(damaged(original, wrong_arrays)))
    ends_cleanly(capsys, ["summarize", path], path)


@given(data=st.data())
@fuzz(12)
def test_a_damaged_posterior_or_points_file_through_plot(seeds, capsys, data):
    post, points = seeds / "post.npz", seeds / "points.npz"
    if data.draw(st.booleans()):  # the posterior damaged
        post = seeds / "damaged_post.npz"
        post.write_bytes(data.draw(damaged((seeds / "post.npz").read_bytes(), wrong_arrays)))
        # (a Poisson mixture has no 2-D clusters for points: --data would be refused itself)
        argv = ["plot", post, "-o", seeds / "plot.svg"]
        target = post
    else:  # the points: read and then refused, as the posterior has no 2-D clusters
        points = seeds / "damaged_points.npz"
        points.write_bytes(data.draw(damaged((seeds / "points.npz").read_bytes(),
                                             wrong_arrays)))
        argv = ["plot", post, "--data", points, "-o", seeds / "plot.svg"]
        target = points
    ends_cleanly(capsys, argv, target)


@given(data=st.data())
@fuzz(20)
def test_a_damaged_checkpoint_through_fit_resume(seeds, capsys, data):
    method = data.draw(st.sampled_from(["mf", "svi"]))
    original = (seeds / f"{method}.ckpt").read_bytes()
    path = seeds / "damaged.ckpt"
    path.write_bytes(data.draw(damaged(original, wrong_arrays, wrong_meta)))
    length = ["--max-iter", "6"] if method == "mf" else ["--epochs", "3", "--batch-size", "16"]
    ends_cleanly(capsys, ["fit", POISSON, "--data", seeds / "counts.npz", "--quiet",
                          "--method", method, *length, "--resume", path,
                          "-o", seeds / "out.npz"], path)


# -- item 7: the cases of the issue, each a regression test ---------------------------------------


@pytest.mark.parametrize("case, words", [
    ("empty", "the file is empty"),
    ("not a zip", "it is not an .npz archive"),
    ("elbo of strings", "'elbo' holds <U1 values, expected real numbers"),
    ("no arrays", "has no 'elbo' array"),
    ("truncated", "it is not an .npz archive (or it is cut short)"),
])
@pytest.mark.parametrize("command", ["summarize", "plot", "plot --data"])
def test_a_damaged_result_file_is_named_with_what_is_wrong(seeds, tmp_path, capsys, case,
                                                           words, command):
    path = tmp_path / "bad.npz"
    good = (seeds / "post.npz").read_bytes()
    path.write_bytes({"empty": b"", "not a zip": b"elbo,1\n2,3\n",
                      "elbo of strings": _npz({"elbo": np.array(["a", "b"])}),
                      "no arrays": _npz({}), "truncated": good[:len(good) // 2]}[case])
    argv = {"summarize": ["summarize", path],
            "plot": ["plot", path, "-o", tmp_path / "p.svg"],
            "plot --data": ["plot", seeds / "post.npz", "--data", path, "-o",
                            tmp_path / "p.svg"]}[command]
    if command == "plot --data":
        # a readable file: the posterior (a Poisson mixture) has no 2-D clusters to draw on
        words = {"elbo of strings": "this posterior has none",
                 "no arrays": "this posterior has none"}.get(case, words)
    assert ends_cleanly(capsys, argv, path) == 2
    assert zipfile.is_zipfile(seeds / "post.npz")
    assert not (tmp_path / "p.svg").exists()
    run_cli(argv)
    assert words in capsys.readouterr().err


@pytest.mark.parametrize("method", ["mf", "svi"])
def test_a_truncated_checkpoint_is_named_not_a_zip_error(seeds, tmp_path, capsys, method):
    """Issue 19 item 6: --resume of a cut checkpoint ended in zipfile.BadZipFile."""
    path = tmp_path / "cut.ckpt"
    good = (seeds / f"{method}.ckpt").read_bytes()
    path.write_bytes(good[:len(good) * 2 // 3])
    batch = [] if method == "mf" else ["--batch-size", "16"]
    argv = ["fit", POISSON, "--data", seeds / "counts.npz", "--quiet", "--method", method,
            *batch, "--resume", path, "-o", tmp_path / "out.npz"]
    assert ends_cleanly(capsys, argv, path) == 2
    run_cli(argv)
    assert f"error: resume: cannot read the checkpoint {path}: " in capsys.readouterr().err
    assert not (tmp_path / "out.npz").exists()
