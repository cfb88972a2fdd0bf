"""Command-line option values, fuzzed: every option of ``cemodel fit`` (each rule of
``cemodel.options.RULES`` it has as a flag, and ``--method``, ``--local``, ``--cg``,
``--threads``, ``--dask``, ``--learn``, ``--collapse``) and ``--set`` on ``check``, ``compile``,
``graph`` and ``fit``, drawn from numbers of every kind (0, negative, huge, tiny, inf, nan,
fractions where whole numbers are expected, text, empty). The CLI runs in-process; it must exit
0 or 2, print no traceback, and on 2 say ``error:`` (argparse: ``cemodel fit: error:``) and
write no output file.

Fits run ``beta_bernoulli`` on 40 coin flips (a few ms each once its kernels are cached); an
iteration count is always capped by a later ``--max-iter 3`` or ``--epochs 2`` (the drawn
method's; argparse still checks the drawn value first), so a valid huge count cannot run long.
``derandomize=True`` checks the same cases every run; ``CEMODEL_FUZZ_SCALE=10`` checks ten
times as many.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
from collections import Counter

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cemodel.cli import main
from cemodel.options import RULES

from .conftest import STDLIB

SCALE = int(os.environ.get("CEMODEL_FUZZ_SCALE", "1"))
EXAMPLES = {"fit": 40, "set": 30}  # cases per test in the short profile
OUTCOMES: Counter[str] = Counter()

NUMBERS = ["0", "-0", "1", "-1", "2", "3", "0.5", "2.5", "-2.5", "1e-3", "0.999", "1.0",
           "10", "256", "1000", "4294967295", "4294967296", "1e12", "99999999999999999999",
           "1e308", "-1e308", "1e400", "1e-320", "5e-324", "inf", "-inf", "nan", "Infinity",
           "", " ", "abc", "1,5", "1_000", "0x10", "1e", "--", "٣", "True", "None", " 7 "]
FIT_FLAGS = ["max_iter", "epochs", "tol", "batch_size", "kappa", "tau", "step_scale",
             "effective_batch_size", "seed", "checkpoint_every", "gibbs_sweeps",
             "gibbs_burn_in"]
CHOICES = {  # the other flags of fit and some values for each, valid or not
    "--method": ["mf", "svi", "svi+", "ssvi-a", "ssvi", "klc", "svi-avg", "MF", "", "banana"],
    "--local": ["mf", "exact", "gibbs", "cvb0", "none"],
    "--cg": ["fr", "pr", "hs", "none", "xx"],
    "--threads": ["0", "-1", "1", "2", "3", "999", "1.5", "nan", ""],
    "--dask": ["banana", "local:0", "local:-1", "local:x", "local:", "tcp://x", "", "local:1.5"],
    "--learn": ["a", "a,b", "b,a,a", "c", "", ",", "N", "p"],
    "--collapse": ["p", "", "q", "x", ","],
    "--start": ["seeds", "random", "prior", "", "3", "Random"],
}
ITERATION_FLAGS = {"max_iter", "epochs", "gibbs_sweeps"}  # capped after the drawn value

# models for --set: every dimension and hyperparameter of each, and names they lack
SET_MODELS = {
    "beta_bernoulli": ["N", "a", "b"],
    "poisson_mixture": ["K", "N", "alpha", "a", "b"],
    "gap_nmf": ["K", "F", "T", "a", "b", "alpha", "c"],
    "lda": ["K", "V", "D", "N", "alpha", "eta"],
    "linear_regression": ["P", "N", "c", "a0", "b0"],
}
OTHER_NAMES = ["k", "Z", "", "a b", "=", "p", "x"]


def fuzz_settings(name: str) -> settings:
    return settings(max_examples=EXAMPLES[name] * SCALE, deadline=None, derandomize=True,
                    database=None, suppress_health_check=[HealthCheck.too_slow,
                                                          HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz_options")
    np.savez(path / "coins.npz",
             x=(np.random.default_rng(0).random(40) < 0.3).astype(np.int64))
    return path


_RUN = itertools.count()


def run_cli(argv: list[str], out) -> tuple[int, str]:
    """Run ``cemodel ARGV`` in-process: (exit status, stderr); asserts the contract."""
    stdout, stderr = io.StringIO(), io.StringIO()
    threads = numba.get_num_threads()
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            status = main(argv)
    except SystemExit as exc:  # argparse
        status = exc.code
    finally:
        numba.set_num_threads(threads)  # --threads sets it for the process
    err = stderr.getvalue()
    assert status in (0, 2), (argv, status, err)
    assert "Traceback" not in err + stdout.getvalue(), (argv, err)
    if status == 2:
        first = err.strip().splitlines()[-1] if "usage:" in err else err
        assert "error:" in first, (argv, err)
        assert not out.exists(), (argv, "an output file was written by a failed command")
    return status, err


def _value(draw, name: str | None = None) -> str:
    """A value for option ``name``: one its rule allows half the time, else any number or
    text."""
    rule = RULES.get(name or "")
    if rule is not None and draw(st.booleans()):
        low = rule.low if rule.low is not None else -1e3
        high = rule.high if rule.high is not None else low + 1e3
        if rule.whole:
            return str(draw(st.integers(int(low), int(min(high, low + 300)))))
        value = draw(st.floats(low, high, exclude_min=rule.above))
        return draw(st.sampled_from([repr(value), f"{value:g}", f"{value:.3e}"]))
    return draw(st.sampled_from(NUMBERS) if draw(st.integers(0, 4)) else
                st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=8))


_STOCHASTIC = ("svi", "svi+", "ssvi-a", "ssvi", "svi-avg")


def _takes(name: str, method: str, local: str) -> bool:
    """Does ``cemodel fit --method METHOD --local LOCAL`` take the flag of ``name``? (Another
    method's flag is refused with exit 2: drawn now and then, not as the rule.)"""
    if name in ("max_iter", "tol"):
        return method in ("mf", "klc")
    if name in ("epochs", "batch_size", "kappa", "tau", "step_scale"):
        return method in _STOCHASTIC
    if name == "effective_batch_size":
        return method in ("svi+", "ssvi-a", "ssvi", "svi-avg")
    if name in ("gibbs_sweeps", "gibbs_burn_in"):
        return local == "gibbs"
    return name == "seed"  # checkpoint_every needs --checkpoint: always another's here


@st.composite
def fit_arguments(draw) -> list[str]:
    method = draw(st.sampled_from(CHOICES["--method"]))
    local = draw(st.sampled_from(CHOICES["--local"]))
    own = [n for n in FIT_FLAGS if _takes(n, method, local)] or ["seed"]
    names = draw(st.lists(st.sampled_from(own), min_size=1, max_size=3, unique=True))
    if draw(st.integers(0, 4)) == 0:  # now and then a flag of another method
        names.append(draw(st.sampled_from([n for n in FIT_FLAGS if n not in names])))
    args: list[str] = ["--method", method, "--local", local]
    for name in names:
        args += [RULES[name].flag, _value(draw, name)]
    others = sorted(set(CHOICES) - {"--method", "--local"})
    for flag in draw(st.lists(st.sampled_from(others), max_size=2, unique=True)):
        args += [flag, draw(st.sampled_from(CHOICES[flag]))]
    if draw(st.integers(0, 3)) == 0:
        args += ["--set", f"{draw(st.sampled_from(['a', 'b', 'N', 'q']))}="
                          f"{draw(st.sampled_from(NUMBERS + ['0.5', '2', '7.5']))}"]
    if draw(st.integers(0, 4)) == 0:
        args += ["--quiet"]
    # the counts capped with the flags the drawn method and local step take
    caps = ["--epochs", "2"] if method in _STOCHASTIC else ["--max-iter", "3"]
    return args + caps + (["--gibbs-sweeps", "2"] if local == "gibbs" else [])


@fuzz_settings("fit")
@given(fit_arguments())
def test_fit_options_exit_0_or_2_without_a_traceback(workdir, args):
    out = workdir / f"post{next(_RUN)}.npz"
    argv = ["fit", str(STDLIB / "beta_bernoulli.cem"), "--data", str(workdir / "coins.npz"),
            *args, "-o", str(out)]
    if "--quiet" not in args:
        argv.append("--quiet")  # the progress lines only slow the run
    status, _ = run_cli(argv, out)
    OUTCOMES["fit"] += 1
    OUTCOMES[f"fit:{status}"] += 1
    out.unlink(missing_ok=True)


@st.composite
def set_arguments(draw) -> tuple[str, str, list[str]]:
    command = draw(st.sampled_from(["check", "compile", "graph"]))
    model = draw(st.sampled_from(sorted(SET_MODELS)))
    sets: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        names = SET_MODELS[model] if draw(st.integers(0, 3)) else OTHER_NAMES
        name = draw(st.sampled_from(names))
        form = draw(st.integers(0, 9))
        value = draw(st.sampled_from(NUMBERS) if draw(st.booleans()) else st.sampled_from(
            ["1", "2", "5", "17", "0.5", "3.25", "1e-3", "1e3", "1e150", "1e-150"]))
        sets += ["--set", f"{name}={value}" if form else draw(st.sampled_from(
            [name, f"{name}=", f"={value}", f"{name}=={value}", f"{name}:{value}"]))]
    return command, model, sets


@fuzz_settings("set")
@given(set_arguments())
def test_set_values_exit_0_or_2_without_a_traceback(workdir, case):
    command, model, sets = case
    suffix = {"check": ".txt", "compile": ".py", "graph": ".dot"}[command]
    out = workdir / f"out{next(_RUN)}{suffix}"
    argv = [command, str(STDLIB / f"{model}.cem"), *sets]
    if command != "check":
        argv += ["-o", str(out)]
    status, _ = run_cli(argv, out)
    OUTCOMES["set"] += 1
    OUTCOMES[f"set:{status}"] += 1
    out.unlink(missing_ok=True)


def test_enough_option_cases_were_checked():
    """Run after the fuzz tests (file order): every case counted, and both outcomes seen, for
    each fuzz test that ran in this process (xdist may send the two to different workers)."""
    ran = [kind for kind in EXAMPLES if OUTCOMES[kind]]
    if not ran:
        pytest.skip("the fuzz tests of this file did not run in this process")
    for kind in ran:
        assert OUTCOMES[kind] >= EXAMPLES[kind] * SCALE // 2, OUTCOMES
        assert OUTCOMES[f"{kind}:0"] > 0 and OUTCOMES[f"{kind}:2"] > 0, OUTCOMES
    print(f"option cases checked: {dict(sorted(OUTCOMES.items()))}")
