"""Values a user gives cemodel (issue 19): options, ``--set`` settings, hyperparameters and
names. Each out-of-range value is refused with the option or name, what it takes and what was
found: on the command line with exit status 2, no traceback and no file written; from Python
with a ``CemError``. The rules live in one place (``cemodel.options``), read by the argparse
types and by the drivers alike.

One numba compile at most (``beta_bernoulli``, shared through the kernel cache); every other
case is refused before anything compiles.
"""

from __future__ import annotations

import numpy as np
import pytest

from cemodel.cli import main
from cemodel.errors import CemError, CemOptionError
from cemodel.options import RULES, check_workers
from cemodel.runtime.drivers import DRIVERS

from .conftest import STDLIB
from .test_drivers import BetaBernoulli
from .test_drivers import X as FLIPS

BETA_BERNOULLI = STDLIB / "beta_bernoulli.cem"
COINS = {"x": (np.random.default_rng(0).random(40) < 0.3).astype(np.int64)}


def run_cli(argv: list[str]) -> int:
    """``cemodel ARGV``'s exit status (argparse exits by SystemExit)."""
    try:
        return main([str(a) for a in argv])
    except SystemExit as exc:
        return exc.code


def refused(capsys, argv: list[str], *words: str) -> str:
    """Run the CLI; assert exit status 2, no traceback, and every word in the message."""
    status = run_cli(argv)
    captured = capsys.readouterr()
    err = captured.err
    assert status == 2, (status, captured.out, err)
    assert "Traceback" not in err and "Traceback" not in captured.out
    for word in words:
        assert word in err, (word, err)
    return err


@pytest.fixture
def coins(tmp_path):
    path = tmp_path / "coins.npz"
    np.savez(path, **COINS)
    return path


# -- options: one rule each, for the command line and the drivers --------------------------------

CLI_OPTIONS = [  # (arguments, the flag, what it takes)
    (["--max-iter", "0"], "--max-iter", "a whole number >= 1"),
    (["--max-iter", "-3"], "--max-iter", "a whole number >= 1"),
    (["--method", "svi", "--epochs", "0"], "--epochs", "a whole number >= 1"),
    (["--checkpoint-every", "0"], "--checkpoint-every", "a whole number >= 1"),
    (["--method", "svi", "--batch-size", "0"], "--batch-size", "a whole number >= 1"),
    (["--method", "svi", "--tau", "-20"], "--tau", "a finite number >= 0"),
    (["--method", "svi", "--kappa", "1.5"], "--kappa", "a number from 0 to 1"),
    (["--method", "svi", "--step-scale", "0"], "--step-scale", "a finite number > 0"),
    (["--seed", "-1"], "--seed", "a whole number from 0 to 4294967295"),
    (["--tol", "nan"], "--tol", "a finite number (below 0: never stop early)"),
    (["--tol", "inf"], "--tol", "a finite number (below 0: never stop early)"),
    (["--max-iter", "2.5"], "--max-iter", "a whole number >= 1"),
    (["--gibbs-sweeps", "0"], "--gibbs-sweeps", "a whole number >= 1"),
    (["--method", "svi+", "--effective-batch-size", "-1"], "--effective-batch-size",
     "a finite number > 0"),
    (["--dask", "banana"], "--dask", "local:N with N >= 1 worker processes"),
    (["--dask", "local:0"], "--dask", "local:N with N >= 1 worker processes"),
]


@pytest.mark.parametrize("args, flag, expected", CLI_OPTIONS,
                         ids=[" ".join(case[0]) for case in CLI_OPTIONS])
def test_the_command_line_refuses_an_option_out_of_range(args, flag, expected, coins, tmp_path,
                                                          capsys):
    out = tmp_path / "post.npz"
    err = refused(capsys, ["fit", BETA_BERNOULLI, "--data", coins, *args, "-o", out],
                  f"argument {flag}: expected {expected}, found '{args[-1]}'")
    assert "usage: cemodel fit" in err
    assert not out.exists()


def test_an_option_out_of_range_is_refused_before_the_model_is_read(tmp_path, capsys):
    # argparse checks the values first: nothing is compiled for a command that cannot run
    refused(capsys, ["fit", tmp_path / "missing.cem", "--data", "x.npz", "--max-iter", "0"],
            "--max-iter")


API_OPTIONS = [  # (method, options, the words of the message)
    ("mf", {"max_iter": 0}, "max_iter: expected a whole number >= 1, found 0"),
    ("mf", {"max_iter": -3}, "max_iter: expected a whole number >= 1, found -3"),
    ("mf", {"max_iter": 10.0}, "max_iter: expected a whole number >= 1, found 10.0"),
    ("mf", {"max_iter": True}, "max_iter: expected a whole number >= 1, found True"),
    ("mf", {"tol": float("nan")}, "tol: expected a finite number (below 0: never stop"),
    ("mf", {"seed": -1}, "seed: expected a whole number from 0 to 4294967295, found -1"),
    ("mf", {"checkpoint_every": 0}, "checkpoint_every: expected a whole number >= 1"),
    ("mf", {"max_local_iter": 0}, "max_local_iter: expected a whole number >= 1"),
    ("mf", {"local_tol": float("inf")}, "local_tol: expected a finite number (below 0: always"),
    ("svi", {"epochs": 0}, "epochs: expected a whole number >= 1, found 0"),
    ("svi", {"batch_size": 0}, "batch_size: expected a whole number >= 1 (or None: all"),
    ("svi", {"tau": -20}, "tau: expected a finite number >= 0, found -20"),
    ("svi", {"kappa": -0.5}, "kappa: expected a number from 0 to 1, found -0.5"),
    ("svi", {"step_scale": float("inf")}, "step_scale: expected a finite number > 0"),
    ("svi", {"seed": 2**32}, "seed: expected a whole number from 0 to 4294967295"),
    ("svi", {"tol": float("nan")}, "tol: expected a finite number (below 0: never stop"),
    ("svi", {"window": 0}, "window: expected a whole number >= 1"),
    ("svi", {"patience": 0}, "patience: expected a whole number >= 1"),
    ("svi", {"checkpoint_every": 0}, "checkpoint_every: expected a whole number >= 1"),
    ("svi", {"gibbs_burn_in": -1}, "gibbs_burn_in: expected a whole number >= 0"),
    ("svi+", {"effective_batch_size": 0.0}, "effective_batch_size: expected a finite number > 0"),
    ("svi-avg", {"epochs": 0}, "epochs: expected a whole number >= 1"),
    ("ssvi-a", {"tau": float("nan")}, "tau: expected a finite number >= 0"),
]


@pytest.mark.parametrize("method, options, words", API_OPTIONS,
                         ids=[f"{m}-{next(iter(o))}={next(iter(o.values()))}"
                              for m, o, _ in API_OPTIONS])
def test_the_drivers_refuse_an_option_out_of_range(method, options, words, compiled):
    with pytest.raises(CemOptionError) as info:
        DRIVERS[method].run(compiled("beta_bernoulli"), COINS, **options)
    assert words in info.value.message


def test_klc_refuses_its_options_out_of_range():
    from cemodel.runtime.drivers import klc

    class Model:
        METHODS = {"klc": "yes"}

    for options, words in [({"max_iter": 0}, "max_iter: expected a whole number >= 1"),
                           ({"gtol": float("nan")}, "gtol: expected a finite number"),
                           ({"seed": -2}, "seed: expected a whole number from 0")]:
        with pytest.raises(CemOptionError, match=words):
            klc.fit(Model(), {}, **options)


@pytest.mark.parametrize("name", sorted(RULES))
def test_the_command_line_and_the_drivers_read_one_rule(name):
    """The argparse type and the drivers' check refuse the same values, in the same words."""
    rule = RULES[name]
    bad = (rule.high + 1 if rule.high is not None else rule.low - 1 if rule.low is not None
           else float("nan"))
    with pytest.raises(CemOptionError) as parsed:
        rule.parse(str(int(bad) if rule.whole else bad))
    with pytest.raises(CemOptionError) as checked:
        rule.check(int(bad) if rule.whole else bad)
    assert parsed.value.message.split(", found")[0] == f"expected {rule.number}"
    assert checked.value.message.startswith(f"{name}: expected {rule.number}")
    good = 0.5 if rule.low is None else rule.low + 1 if rule.above else rule.low
    assert rule.check(good) == good


def test_a_valid_value_reaches_the_fit_unchanged(compiled):
    """Checking converts nothing: the same fit with and without the options spelled out."""
    module = compiled("beta_bernoulli")
    plain = DRIVERS["svi"].run(module, COINS, epochs=3, batch_size=10, seed=4)
    spelled = DRIVERS["svi"].run(module, COINS, epochs=np.int64(3), batch_size=np.int32(10),
                                 seed=np.uint32(4), kappa=0.5, tau=1, step_scale=1.0)
    # (κ = 0.5, τ = 1: the small-data default, svi.small_data_defaults)
    np.testing.assert_array_equal(plain.elbo, spelled.elbo)


# -- Dask: the cluster and the scheduler --------------------------------------------------------


def test_a_dask_cluster_spec_is_checked_once_for_both():
    assert check_workers("local:3") == 3
    for spec in ("banana", "local:", "local:0", "local:-1", "local:²", 4):
        with pytest.raises(CemOptionError, match="expected local:N with N >= 1"):
            check_workers(spec)


def test_an_unreachable_scheduler_is_a_clean_error(coins, tmp_path, capsys):
    pytest.importorskip("distributed")
    import dask

    out = tmp_path / "post.npz"
    # the connection timeout is Dask's (30 s by default): short here
    with dask.config.set({"distributed.comm.timeouts.connect": "0.2s"}):
        refused(capsys, ["fit", BETA_BERNOULLI, "--data", coins, "--scheduler",
                         "tcp://127.0.0.1:1", "-o", out, "--quiet"],
                "cannot reach the Dask scheduler at tcp://127.0.0.1:1", "hint:")
    assert not out.exists()


def test_a_scheduler_address_dask_cannot_read_is_a_clean_error():
    pytest.importorskip("distributed")
    from cemodel import distributed

    with pytest.raises(CemError, match="cannot reach the Dask scheduler at banana"):
        distributed.fit(str(BETA_BERNOULLI), COINS, client="banana")


# -- --set: dimensions and hyperparameters (the same check for the CLI and the API) -----------

SETTINGS = [  # (command, model, setting, the words of the message)
    ("check", "gap_nmf", "alpha=inf", "--set alpha: a hyperparameter takes a finite number, "
     "found inf"),
    ("check", "linear_regression", "c=1e400", "--set c: 1e400 is beyond the largest number"),
    ("check", "linear_regression", "b0=inf", "--set b0: a hyperparameter takes a finite number"),
    ("check", "beta_bernoulli", "a=nan", "--set a: a hyperparameter takes a finite number, "
     "found nan"),
    ("check", "beta_bernoulli", "N=-inf", "--set N: a dimension takes a whole number >= 1, "
     "found -inf"),
    ("compile", "poisson_mixture", "K=2.5", "--set K: a dimension takes a whole number >= 1, "
     "found 2.5"),
    ("check", "poisson_mixture", "K=0", "--set K: a dimension takes a whole number >= 1, "
     "found 0"),
    ("graph", "lda", "K=nan", "--set K: a dimension takes a whole number >= 1, found nan"),
    ("graph", "lda", "K=inf", "--set K: a dimension takes a whole number >= 1, found inf"),
    ("check", "lda", "alpha=x", "--set alpha: expected a number, found 'x'"),
]


@pytest.mark.parametrize("command, model, setting, words", SETTINGS,
                         ids=[f"{c}-{m}-{s}" for c, m, s, _ in SETTINGS])
def test_the_command_line_refuses_a_setting_out_of_range(command, model, setting, words,
                                                         tmp_path, capsys):
    out = tmp_path / ("out.dot" if command == "graph" else "out.py")
    extra = ["-o", out] if command != "check" else []
    refused(capsys, [command, STDLIB / f"{model}.cem", "--set", setting, *extra], words)
    assert not out.exists()


@pytest.mark.parametrize("model, settings, words", [
    ("gap_nmf", {"alpha": float("inf")}, "--set alpha: a hyperparameter takes a finite number"),
    ("linear_regression", {"b0": float("nan")}, "--set b0: a hyperparameter takes a finite"),
    ("lda", {"K": float("nan")}, "--set K: a dimension takes a whole number >= 1, found nan"),
    ("beta_bernoulli", {"N": float("-inf")}, "--set N: a dimension takes a whole number"),
    ("lda", {"K": "20"}, "--set K: expected a number, found '20'"),
    ("lda", {"K": [20]}, "--set K: expected a number, found [20]"),
])
def test_the_api_refuses_the_same_settings(model, settings, words):
    import cemodel

    with pytest.raises(CemOptionError) as info:
        cemodel.Model(model, **settings)
    assert words in info.value.message
    with pytest.raises(CemOptionError):
        cemodel.compile(STDLIB / f"{model}.cem", **settings)


# -- a prior that cannot be represented, and a fit that stops being finite (item 0) ----------

OUT_OF_RANGE = "expected 0 or a magnitude from 1e-150 to 1e150"


@pytest.mark.parametrize("model, setting", [
    ("poisson_mixture", "alpha=1e308"), ("poisson_mixture", "a=1e308"),
    ("linear_regression", "c=1e308"), ("linear_regression", "a0=1e308"),
    ("linear_regression", "c=1e-320"), ("linear_regression", "b0=1e-320"),
])
def test_a_hyperparameter_whose_prior_cannot_be_represented_is_refused(model, setting, tmp_path,
                                                                        capsys):
    """These fitted to NaN everywhere, printed 'ELBO nan', wrote the NaNs and exited 0."""
    name, value = setting.split("=")
    data = tmp_path / "data.npz"
    np.savez(data, x=np.arange(6))
    out = tmp_path / "post.npz"
    refused(capsys, ["fit", STDLIB / f"{model}.cem", "--data", data, "--set", setting,
                     "--max-iter", "5", "-o", out], f"--set {name}: {OUT_OF_RANGE}",
            f"found {float(value)!r}")
    assert not out.exists()
    import cemodel

    with pytest.raises(CemOptionError, match=f"--set {name}: {OUT_OF_RANGE}"):
        cemodel.Model(model, **{name: float(value)})


@pytest.mark.parametrize("hypers, found", [({"a": 1e308}, "found 1e+308"),
                                           ({"b": 1e-320}, "found 1e-320"),
                                           ({"a": -1e151}, "found -1e+151")])
def test_the_fit_refuses_the_same_hyperparameters_from_python(hypers, found, compiled):
    name = next(iter(hypers))
    with pytest.raises(CemOptionError) as info:
        DRIVERS["mf"].run(compiled("beta_bernoulli"), COINS, hypers=hypers)
    assert f"hyperparameter '{name}': {OUT_OF_RANGE}" in info.value.message
    assert found in info.value.message


def test_a_model_file_hyperparameter_out_of_range_is_refused_at_its_line(tmp_path, capsys):
    path = tmp_path / "huge.cem"
    path.write_text(BETA_BERNOULLI.read_text().replace("hyper a = 2.0", "hyper a = 1e200"))
    err = refused(capsys, ["check", path], f"huge.cem:8:11: error: hyperparameter 'a': "
                  f"{OUT_OF_RANGE}", "found 1e+200", "hint:")
    assert "hyper a = 1e200" in err


def test_zero_and_the_ends_of_the_range_are_representable(compiled):
    """The range refuses nothing a fit can represent: 0, 1e-150 and 1e150 fit finitely."""
    module = compiled("beta_bernoulli")
    for hypers in ({"a": 1e150, "b": 1e150}, {"a": 1.0, "b": 1e-10}):  # shapes: >= 2**-52
        fit = DRIVERS["mf"].run(module, COINS, hypers=hypers)
        assert np.all(np.isfinite(fit.elbo))
    from cemodel.options import check_hyper_values

    check_hyper_values("h", np.array([0.0, 1e-150, -1e150, 1e150, -3.0]))


# the drivers' guard, on the plain-numpy fake of tests/test_drivers.py (no compile)


class GoesNaN(BetaBernoulli):
    """The fake coin whose q(p) becomes NaN at its ``at``-th update after the start, or whose
    ELBO becomes NaN at its ``elbo_at``-th evaluation."""

    def __init__(self, at: int | None = None, elbo_at: int | None = None) -> None:
        super().__init__({"svi-avg": "yes"})
        self.at, self.elbo_at, self.updates, self.elbos = at, elbo_at, -1, 0

    def update_p(self, s, data_scale, expect=True):
        super().update_p(s, data_scale, expect)
        self.updates += 1
        if self.at is not None and self.updates >= self.at:
            s.lam_p_log[...] = np.nan
            self.refresh(s)

    def elbo_of_globals(self, s):
        self.elbos += 1
        value = super().elbo_of_globals(s)
        return np.nan if self.elbo_at is not None and self.elbos >= self.elbo_at else value


@pytest.mark.parametrize("method, model, options, words", [
    ("mf", lambda: GoesNaN(at=2), {"tol": 0.0},
     "the fit stopped at iteration 2: q(p) is not finite"),
    ("mf", lambda: GoesNaN(elbo_at=2), {"tol": 0.0},
     "the fit stopped at iteration 2: the ELBO is not finite"),
    ("svi", lambda: GoesNaN(elbo_at=2), {"epochs": 4, "batch_size": 10},
     "the fit stopped at epoch 2: the ELBO is not finite"),
    ("svi-avg", lambda: GoesNaN(elbo_at=3), {"epochs": 4, "batch_size": 10},
     "the fit stopped at epoch 3: the ELBO is not finite"),
    ("svi", lambda: GoesNaN(at=5), {"epochs": 4, "batch_size": 10},
     "SVI step 5: q(p) left its domain"),
])
def test_a_fit_that_stops_being_finite_stops_with_the_variable_and_the_iteration(
        method, model, options, words):
    with pytest.raises(CemError) as info:
        DRIVERS[method].run(model(), {"x": FLIPS}, **options)
    assert words in info.value.message


def test_a_finite_fit_passes_the_guard():
    """The same fake, never NaN, fits to convergence."""
    fit = DRIVERS["mf"].run(GoesNaN(), {"x": FLIPS}, max_iter=50)
    assert fit.converged and np.all(np.isfinite(fit.elbo))


def test_the_command_line_writes_nothing_when_the_fit_stops_being_finite(compiled, coins,
                                                                          tmp_path, capsys,
                                                                          monkeypatch):
    """A generated module whose q(p) turns NaN at the second iteration (the fault put into
    its global update): exit status 2, the variable and the iteration, no posterior file."""
    import dataclasses

    import cemodel.compiler

    module = compiled("beta_bernoulli")
    (real,) = module.GLOBALS
    count = {"updates": 0}

    def update(s, scale, expect=True):
        real.update(s, scale, expect)
        count["updates"] += 1
        if count["updates"] >= 2:  # iteration 2 (the start calls the update directly)
            getattr(s, real.lam[0])[...] = np.nan
            getattr(s, real.E[0])[...] = np.nan

    class Faulty:
        GLOBALS = (dataclasses.replace(real, update=update),)

        def __getattr__(self, name):
            return getattr(module, name)

    monkeypatch.setattr(cemodel.compiler, "compile_stages", lambda stages: Faulty())
    out = tmp_path / "post.npz"
    err = refused(capsys, ["fit", BETA_BERNOULLI, "--data", coins, "--tol", "0", "-o", out],
                  "the fit stopped at iteration 2: q(p) is not finite (NaN or inf)", "hint:")
    assert "nan" not in capsys.readouterr().out.lower() + err.split("error:")[0].lower()
    assert not out.exists()


# -- names: Python keywords (item 1) ---------------------------------------------------------

KEYWORD_MODEL = """model m
dim N
dim K = 2
hyper a = 2.0
hyper b = 3.0
plate comps k in K:
    p[k] ~ Beta(a, b)
plate trials n in N:
    data g[n] : int
    data c[n] : real
    observe x[n] ~ Normal(c[n] * 0.0 + 0.0, 1.0)
    observe y[n] ~ Bernoulli(p[g[n]])
"""
# the kinds of name the generated module uses bare: (kind, the name in KEYWORD_MODEL, the line
# and column of its declaration)
BARE = [("hyper", "a", 4, 7), ("data", "c", 10, 10), ("data used as an index", "g", 9, 10),
        ("observed", "y", 12, 13)]


def _rename(text: str, old: str, new: str) -> str:
    import re

    return re.sub(rf"\b{old}\b", new, text)


@pytest.mark.parametrize("kind, name, line, col", BARE, ids=[b[0] for b in BARE])
def test_a_python_keyword_is_refused_at_the_declaration_where_it_would_be_an_identifier(
        kind, name, line, col):
    """`observe elif[n]` crashed `check` with a SyntaxError from ast.parse: every keyword as
    each kind of name the generated module uses bare is now refused where it is declared."""
    import keyword

    from cemodel.compiler import run_stages
    from cemodel.errors import CemModelError

    assert run_stages(KEYWORD_MODEL, "m.cem").generated is not None
    for word in [*keyword.kwlist, "__debug__"]:
        with pytest.raises(CemModelError) as info:
            run_stages(_rename(KEYWORD_MODEL, name, word), "m.cem")
        error = info.value
        assert (error.span.line, error.span.column) == (line, col), (word, error.render())
        assert error.message.startswith(f"'{word}' is a ") and "identifier" in error.message
        assert error.hint == f"rename '{word}' (e.g. '{word}_')"


def test_the_command_line_reports_a_keyword_name_at_its_line(tmp_path, capsys):
    path = tmp_path / "coin.cem"
    path.write_text(BETA_BERNOULLI.read_text().replace("observe x[n]", "observe elif[n]"))
    err = refused(capsys, ["check", path], "coin.cem:13:13: error: 'elif' is a Python keyword",
                  "hint: rename 'elif' (e.g. 'elif_')")
    assert "SyntaxError" not in err


@pytest.mark.parametrize("kind, old", [("latent", "p"), ("dimension", "K"), ("plate", "comps"),
                                       ("plate index", "k"), ("soft keyword", "c")])
def test_a_keyword_the_module_never_uses_bare_stays_allowed(kind, old):
    """A latent `lambda` (a rate) is `lam_lambda_value` in the module and 'lambda.shape' in the
    posterior: nothing to refuse. Soft keywords (match, case, type, _) are identifiers."""
    from cemodel.compiler import run_stages

    words = ["match", "case", "type", "_"] if kind == "soft keyword" else ["lambda", "if"]
    for word in words:
        source = run_stages(_rename(KEYWORD_MODEL, old, word), "m.cem").generated.text
        compile(source, "<generated>", "exec")


# -- names: length (item 4) ------------------------------------------------------------------------


@pytest.mark.parametrize("length", [49, 3005, 100_000])
def test_a_name_longer_than_the_limit_is_refused_where_it_is_declared(length, tmp_path, capsys):
    """A 3,005-character name passed check and compile, then fit failed with 'OSError: File
    name too long' from numba's cache (100,000: a RuntimeError from llvmlite)."""
    from cemodel.syntax import NAME_LONGEST

    name = "v" * length
    path = tmp_path / "long.cem"
    path.write_text(BETA_BERNOULLI.read_text().replace("p ~", f"{name} ~")
                    .replace("Bernoulli(p)", f"Bernoulli({name})"))
    err = refused(capsys, ["check", path], f"long.cem:11:1: error: the name '{'v' * 20}...' is "
                  f"{length} characters long; names are at most {NAME_LONGEST}", "hint:")
    assert len(err) < 1000  # the line is shown as a window around the caret
    out = tmp_path / "long_vi.py"
    refused(capsys, ["compile", path, "-o", out], "names are at most")
    assert not out.exists()


@pytest.mark.parametrize("model", ["hierarchical_normal", "gmm_normal_wishart", "lda"])
def test_names_of_the_longest_length_give_file_names_the_file_system_takes(model):
    """The longest file name a fit writes is numba's cache of a kernel named after a joint
    block (update_MEAN_PRECISION), in a module named after the model, plus numba's suffixes
    and the temporary name it writes under: every name NAME_LONGEST long, it stays within
    255 bytes (the models with a block, and LDA's longest kernel prefix)."""
    import ast
    import re

    from cemodel.compiler import run_stages
    from cemodel.syntax import NAME_LONGEST, user_name_tokens

    text = (STDLIB / f"{model}.cem").read_text()
    tokens = user_name_tokens(text)
    names = list(dict.fromkeys(n for n, *_ in tokens))
    long = {n: (f"{n}_{i}_" + "q" * NAME_LONGEST)[:NAME_LONGEST] for i, n in enumerate(names)}
    for name, _, start, end in sorted(tokens, key=lambda tok: -tok[2]):
        text = text[:start] + long[name] + text[end:]
    text = re.sub(r"^model \w+", "model " + "m" * NAME_LONGEST, text, flags=re.M)
    source = run_stages(text, f"{model}.cem").generated.kernels_text()
    kernels = [node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)]
    stem = f"{'m' * NAME_LONGEST}_kernels_{'0' * 16}"  # compile_stages: MODEL_kernels_HASH16.py
    longest = max(len(f"{stem}.{k.name}-{k.lineno:06d}.py311.99.nbc.tmp.{'0' * 32}")
                  for k in kernels)
    assert longest <= 255


# -- the rest of the user-facing values ----------------------------------------------------------


def test_summarize_refuses_a_top_out_of_range(tmp_path, capsys):
    post = tmp_path / "post.npz"
    np.savez(post, elbo=np.array([-1.0]))
    refused(capsys, ["summarize", post, "--top", "0"],
            "argument --top: expected a whole number >= 1, found '0'")


def test_infer_refuses_its_options_out_of_range():
    import cemodel

    model = cemodel.Model(BETA_BERNOULLI)
    fit = model.fit(COINS)
    with pytest.raises(CemOptionError, match="max_local_iter: expected a whole number >= 1"):
        model.infer(COINS, fit, max_local_iter=0)
    with pytest.raises(CemOptionError, match="local_tol: expected a finite number"):
        model.infer(COINS, fit, local_tol=float("nan"))


@pytest.mark.parametrize("options, words", [
    ({"partitions": 0}, "partitions: expected a whole number >= 1 (or None: one per thread"),
    ({"retries": -1}, "retries: expected a whole number >= 0"),
])
def test_the_dask_layer_refuses_its_options_before_it_connects(options, words):
    pytest.importorskip("distributed")
    from cemodel import distributed

    with pytest.raises(CemOptionError) as info:  # no cluster is started for this
        distributed.fit(str(BETA_BERNOULLI), COINS, client="tcp://127.0.0.1:1", **options)
    assert words in info.value.message


def test_running_out_of_memory_is_a_clean_error(monkeypatch, capsys):
    """--set K=1e12 and a fit: numpy cannot allocate the arrays (an _ArrayMemoryError)."""
    import cemodel.cli

    def check(args):
        raise MemoryError("Unable to allocate 7.28 TiB for an array")

    monkeypatch.setattr(cemodel.cli, "cmd_check", check)
    refused(capsys, ["check", BETA_BERNOULLI], "error: not enough memory: Unable to allocate",
            "hint: a dimension (--set)")
