"""A table of malformed .cem sources: each is refused with its own located, clear error.

Every case is a small complete model with exactly one mistake. Driving all the stages
(parse, build, conjugacy analysis, plan) must raise the expected ``CemError`` subclass at the
expected line and column, rendered as ``bad.cem:LINE:COL: error: ...``, the source line and a
caret under the mistake, never a Python traceback.
"""

import os
from pathlib import Path

os.environ.setdefault(
    "CEMODEL_CACHE", str(Path(__file__).resolve().parent.parent / ".cemodel_cache" / "tests")
)

import pytest  # noqa: E402

from cemodel.compiler import run_stages  # noqa: E402
from cemodel.errors import (  # noqa: E402
    CemConjugacyError,
    CemError,
    CemModelError,
    CemSourceError,
    CemSyntaxError,
)

HEAD = ("model m", "dim N")  # lines 1-2 of most cases
BB = ("p ~ Beta(1, 1)", "plate trials n in N:", "    observe x[n] ~ Bernoulli(p)")
LDA_HEAD = ("model m", "dim K = 3", "dim V = 10", "dim D", "dim N[D]")


def src(*lines: str) -> str:
    return "\n".join(lines) + "\n"


# (id, source, error class, line, column, substring of the message, substring of the hint)
CASES = [
    # -- syntax ------------------------------------------------------------------------------
    ("missing-colon-after-plate",
     src(*HEAD, "p ~ Beta(1, 1)", "plate trials n in N", "    observe x[n] ~ Bernoulli(p)"),
     CemSyntaxError, 4, 20, "expected ':'", "a plate header ends with ':'"),
    ("plate-body-not-indented",
     src(*HEAD, "p ~ Beta(1, 1)", "plate trials n in N:", "# the trials", "",
         "observe x[n] ~ Bernoulli(p)"),
     CemSyntaxError, 7, 1, "unexpected 'observe'; expected an indented block",
     "indent the plate's statements under its header"),
    ("plate-without-its-name",
     src(*HEAD, "p ~ Beta(1, 1)", "plate n in N:", "    observe x[n] ~ Bernoulli(p)"),
     CemSyntaxError, 4, 12, "unexpected 'N'", "'plate NAME i in K:'"),
    ("tabs-mixed-with-spaces",  # a tab is 8 columns: the body looked aligned, and was not
     src(*HEAD, *BB, "\tobserve y[n] ~ Bernoulli(p)"),
     CemSyntaxError, 6, 2, "unexpected indentation", "tabs and spaces are mixed"),
    ("a-non-ascii-name",
     src(*HEAD, "μ ~ Beta(1, 1)", *BB[1:]),
     CemSyntaxError, 3, 1, "unexpected character 'μ'", "names are ASCII"),
    ("equals-instead-of-tilde",
     src(*HEAD, "p = Beta(1, 1)", *BB[1:]),
     CemSyntaxError, 3, 3, "unexpected '='", "use '~'"),
    ("unclosed-parenthesis",
     src(*HEAD, "p ~ Beta(1, 1", *BB[1:]),
     CemSyntaxError, 3, 9, "'(' is never closed", "add the missing ')'"),
    ("unclosed-parenthesis-at-end-of-file",
     src(*HEAD, "p ~ Beta(1, 1)", "plate trials n in N:", "    observe x[n] ~ Bernoulli(p"),
     CemSyntaxError, 5, 29, "'(' is never closed", "')'"),
    ("unclosed-bracket",
     src(*HEAD, "p ~ Beta(1, 1)", "plate trials n in N:", "    observe x[n ~ Bernoulli(p)"),
     CemSyntaxError, 5, 17, "unexpected '~'", None),
    ("stray-indentation",
     src(*HEAD, "p ~ Beta(1, 1)", "  q ~ Beta(1, 1)", *BB[1:]),
     CemSyntaxError, 4, 3, "unexpected indentation", "only the body of a plate is indented"),
    ("inconsistent-dedent",
     src(*HEAD, *BB, "  observe y[n] ~ Bernoulli(p)"),
     CemSyntaxError, 6, 1, "indentation matches no enclosing block", "indent it exactly"),
    ("braces-instead-of-indentation",
     src(*HEAD, "p ~ Beta(1, 1)", "plate trials n in N {", "    observe x[n] ~ Bernoulli(p)",
         "}"),
     CemSyntaxError, 4, 21, "unexpected character '{'", "':' and indentation"),
    ("semicolon",
     src(*HEAD, "p ~ Beta(1, 1);", *BB[1:]),
     CemSyntaxError, 3, 15, "unexpected character ';'", "no ';' is needed"),
    ("plate-with-empty-body",
     src(*HEAD, *BB, "plate more m in N:", "# nothing here"),
     CemSyntaxError, 6, 19, "unexpected end of file", None),
    ("number-too-large",
     src(*HEAD, "hyper a = 1e400", *BB),
     CemSyntaxError, 3, 11, "the number 1e400 is too large", "1.8e308"),
    ("fractional-dimension",
     src(*HEAD, "dim K = 2.5", *BB),
     CemSyntaxError, 3, 10, "unexpected '.5'", None),
    # -- names and declarations -------------------------------------------------------------
    ("unknown-distribution",
     src("model m", "dim K = 3", "dim N", "p ~ Dirichlett(1.0, K)", "plate rolls n in N:",
         "    observe x[n] ~ Categorical(p)"),
     CemModelError, 4, 5, "unknown distribution 'Dirichlett'", "did you mean 'Dirichlet'?"),
    ("wrong-number-of-arguments",
     src(*HEAD, "p ~ Beta(1)", *BB[1:]),
     CemModelError, 3, 5, "Beta takes 2 argument(s), got 1", "write Beta(a, b)"),
    ("unknown-name",
     src(*HEAD, "prob ~ Beta(1, 1)", "plate trials n in N:", "    observe x[n] ~ Bernoulli(prb)"),
     CemModelError, 5, 30, "unknown name 'prb'", "did you mean 'prob'?"),
    ("unknown-dimension",
     src(*HEAD, "p ~ Beta(1, 1)", "plate trials n in M:", "    observe x[n] ~ Bernoulli(p)"),
     CemModelError, 4, 19, "unknown dimension 'M'", "dim M"),
    ("unknown-dimension-in-dirichlet",
     src("model m", "dim K = 3", "dim N", "p ~ Dirichlet(1.0, KK)", "plate rolls n in N:",
         "    observe x[n] ~ Categorical(p)"),
     CemModelError, 4, 20, "second argument of Dirichlet(a, K) is a dimension",
     "did you mean 'K'?"),
    ("unknown-data-type",
     src("model m", "dim P = 2", "dim N", "w ~ MultivariateNormal(zeros(P), eye(P))",
         "plate points n in N:", "    data c[n] : vectr(P)",
         "    observe y[n] ~ Normal(dot(c[n], w), 1)"),
     CemModelError, 6, 17, "unknown data type 'vectr'", "did you mean 'vector'?"),
    ("duplicate-declaration",
     src(*HEAD, "p ~ Beta(1, 1)", "p ~ Beta(2, 2)", *BB[1:]),
     CemModelError, 4, 1, "'p' is declared twice", None),
    ("duplicate-plate",
     src(*HEAD, *BB, "plate trials m in N:", "    observe y[m] ~ Bernoulli(p)"),
     CemModelError, 6, 1, "plate 'trials' is declared twice", None),
    ("redeclared-builtin",
     src(*HEAD, "hyper eye = 3", *BB),
     CemModelError, 3, 1, "'eye' is a built-in function", None),
    ("dim-inside-plate",
     src(*HEAD, "p ~ Beta(1, 1)", "plate trials n in N:", "    dim Q",
         "    observe x[n] ~ Bernoulli(p)"),
     CemModelError, 5, 5, "'dim' declarations belong at the top level", None),
    ("no-model-line",
     src("dim N", *BB),
     CemModelError, 1, 1, "does not name its model", "start it with 'model NAME'"),
    ("model-observes-nothing",
     src(*HEAD, "p ~ Beta(1, 1)", "plate trials n in N:", "    x[n] ~ Bernoulli(p)"),
     CemModelError, 1, 1, "the model observes nothing", "observe x ~"),
    ("cycle",
     src(*HEAD, "a ~ Normal(b, 1)", "b ~ Normal(a, 1)", "plate points n in N:",
         "    observe x[n] ~ Normal(a, 1)"),
     CemModelError, 3, 1, "cycle: a -> b -> a", None),
    ("latent-poisson",
     src(*HEAD, "r ~ Gamma(1, 1)", "k ~ Poisson(r)", "plate points n in N:",
         "    observe x[n] ~ Poisson(r)"),
     CemModelError, 4, 1, "a Poisson variable must be observed", "observe k"),
    ("hyper-unknown-function",
     src("model m", "dim D = 2", "dim N", "hyper P0 = ey(D)",
         "mu ~ MultivariateNormal(zeros(D), P0)", "plate points n in N:",
         "    observe x[n] ~ MultivariateNormal(mu, eye(D))"),
     CemModelError, 4, 12, "unknown function 'ey' in a hyperparameter", "did you mean 'eye'?"),
    ("non-positive-hyperparameter",
     src(*HEAD, "hyper a = 0", "p ~ Beta(a, 1)", *BB[1:]),
     CemModelError, 4, 10, "the a of Beta must be positive, found 0", "'a' is set on line 3"),
    ("zero-precision",
     src(*HEAD, "mu ~ Normal(0, 1)", "plate points n in N:", "    observe y[n] ~ Normal(mu, 0)"),
     CemModelError, 5, 31, "the precision of Normal must be positive, found 0", None),
    # a sign the constants and the supports fix (the fit failed later, at a log of −2 or
    # with "left its domain")
    ("negative-factor-of-a-rate",
     src(*HEAD, "r ~ Gamma(1, 1)", "plate points n in N:", "    observe x[n] ~ Poisson(-2.0 * r)"),
     CemModelError, 5, 28, "the rate of Poisson must be positive, and this expression never is",
     "drop the sign"),
    ("negative-precision-through-a-variable",
     src(*HEAD, "t ~ Gamma(1, 1)", "plate points n in N:",
         "    observe y[n] ~ Normal(0.0, 0.0 - t)"),
     CemModelError, 5, 32, "the precision of Normal must be positive, and this", None),
    ("matrix-literal",
     src("model m", "dim N", "hyper W = [[1.0, 0.0], [0.0, 1.0]]", "p ~ Beta(1, 1)",
         "plate trials n in N:", "    observe x[n] ~ Bernoulli(p)"),
     CemModelError, 3, 12, "vector literals hold numbers (a matrix is not written as a "
     "literal)", "eye(D) * x"),
    ("log-of-a-constant-below-one",  # log(0.5) < 0 was not read as a constant
     src(*HEAD, "r ~ Gamma(log(0.5), 1.0)", "plate points n in N:",
         "    observe x[n] ~ Poisson(r)"),
     CemModelError, 3, 11, "the shape of Gamma must be positive, found -0.693147", None),
    ("overflowing-constant",
     src(*HEAD, "r ~ Gamma(1.0, exp(1000.0))", "plate points n in N:",
         "    observe x[n] ~ Poisson(r)"),
     CemModelError, 3, 16, "the rate of Gamma must be finite, found inf", None),
    ("negative-definite-precision",
     src("model m", "dim P = 2", "dim N", "w ~ MultivariateNormal(zeros(P), eye(P) * -1.0)",
         "plate points n in N:", "    observe y[n] ~ MultivariateNormal(w, eye(P))"),
     CemModelError, 4, 34, "the precision of MultivariateNormal must be positive definite, "
     "and this matrix never is", "eye(n) scaled by a positive number is"),
    ("wishart-dof-below-its-dimension",
     src("model m", "dim P = 2", "dim N", "L ~ Wishart(1.0, eye(P))",
         "plate points n in N:", "    observe y[n] ~ MultivariateNormal(zeros(P), L)"),
     CemModelError, 4, 13, "the dof of Wishart must be above D − 1 = 1 for a 2 × 2 scale, "
     "found 1", "a dof of at least 2"),
    ("division-by-zero",
     src(*HEAD, "hyper a = 1 / 0", *BB),
     CemModelError, 3, 15, "division by zero", "always 0"),
    ("hyper-uses-random-variable",
     src(*HEAD, "hyper b = p", *BB),
     CemModelError, 3, 11, "unknown name 'p' in a hyperparameter", "hyperparameters may use"),
    ("unknown-function-in-argument",
     src(*HEAD, "mu ~ Normal(0, 1)", "plate points n in N:",
         "    observe x[n] ~ Normal(sqr(mu), 1)"),
     CemModelError, 5, 27, "unknown function 'sqr'", None),
    # -- plates and indices -----------------------------------------------------------------
    ("declared-with-missing-plate-index",
     src(*LDA_HEAD, "plate topics k in K:", "    beta[k] ~ Dirichlet(0.1, V)",
         "plate docs d in D:", "    theta[d] ~ Dirichlet(0.1, K)",
         "    plate tokens n in N[d]:", "        z[n] ~ Categorical(theta[d])",
         "        observe w[d, n] ~ Categorical(beta[z[d, n]])"),
     CemModelError, 11, 9, "must be indexed by exactly their indices", "write z[d, n]"),
    ("indices-on-unplated-variable",
     src(*HEAD, "p ~ Beta(1, 1)", "plate trials n in N:", "    observe x[n] ~ Bernoulli(p[n])"),
     CemModelError, 5, 30, "'p' has 0 index(es) (none), but 1 given", None),
    ("missing-index",
     src("model m", "dim K = 3", "dim N", "plate comps k in K:", "    mu[k] ~ Normal(0, 1)",
         "plate points n in N:", "    observe x[n] ~ Normal(mu, 1)"),
     CemModelError, 7, 27, "'mu' has 1 index(es) (k), but 0 given", None),
    ("index-of-unrelated-plate",
     src("model m", "dim K = 3", "dim N", "plate comps k in K:", "    mu[k] ~ Normal(0, 1)",
         "plate points n in N:", "    observe x[n] ~ Normal(mu[n], 1)"),
     CemModelError, 7, 30, "index 'n' runs over plate 'points' (N)", None),
    ("index-not-in-scope",
     src("model m", "dim K = 3", "dim N", "plate comps k in K:", "    mu[k] ~ Normal(0, 1)",
         "plate points n in N:", "    observe x[n] ~ Normal(mu[j], 1)"),
     CemModelError, 7, 30, "'j' is not the index of an enclosing plate", None),
    ("plate-index-used-as-value",
     src(*HEAD, "mu ~ Normal(0, 1)", "plate points n in N:", "    observe x[n] ~ Normal(n, 1)"),
     CemModelError, 5, 27, "'n' is a plate index", None),
    ("ragged-plate-without-index",
     src("model m", "dim K = 3", "dim D", "dim N[D]", "plate docs d in D:",
         "    theta[d] ~ Dirichlet(0.1, K)", "    plate tokens n in N:",
         "        observe w[d, n] ~ Categorical(theta[d])"),
     CemModelError, 7, 23, "write it as N[index]", None),
    ("ragged-plate-wrong-index",
     src("model m", "dim K = 3", "dim D", "dim N[D]", "plate docs d in D:",
         "    theta[d] ~ Dirichlet(0.1, K)", "    plate tokens n in N[n]:",
         "        observe w[d, n] ~ Categorical(theta[d])"),
     CemModelError, 7, 25, "indexed by the index of the plate that directly encloses it", None),
    ("plate-without-size",
     src(*HEAD, "p ~ Beta(1, 1)", "plate trials n:", "    observe x[n] ~ Bernoulli(p)"),
     CemModelError, 4, 1, "plate 'trials' needs a size", None),
    # -- shapes -----------------------------------------------------------------------------
    ("categorical-index-shape-mismatch",
     src("model m", "dim K = 3", "dim J = 4", "dim N", "pi ~ Dirichlet(1.0, J)",
         "plate comps k in K:", "    rate[k] ~ Gamma(1, 1)", "plate points n in N:",
         "    z[n] ~ Categorical(pi)", "    observe x[n] ~ Poisson(rate[z[n]])"),
     CemModelError, 10, 33, "shape mismatch: 'z' takes J values but plate 'comps'", None),
    ("mvn-mean-precision-size-mismatch",
     src("model m", "dim D = 2", "dim N", "hyper m0 = zeros(D)", "hyper P0 = eye(3)",
         "mu ~ MultivariateNormal(m0, P0)", "plate points n in N:",
         "    observe x[n] ~ MultivariateNormal(mu, eye(D))"),
     CemModelError, 6, 1, "shape mismatch: mean has length (D) but precision is (3, 3)", None),
    ("scalar-where-vector-required",
     src(*HEAD, "plate points n in N:", "    observe x[n] ~ Categorical(0.5)"),
     CemModelError, 4, 32, "the p of Categorical must be a vector", None),
    ("vector-where-scalar-required",
     src(*HEAD, "mu ~ Normal(0, 1)", "plate points n in N:",
         "    observe x[n] ~ Normal(mu, [1, 2])"),
     CemModelError, 5, 31, "the precision of Normal must be a scalar", None),
    ("hyper-shape-mismatch",
     src("model m", "dim D = 2", "dim N", "hyper v = [1, 2, 3]", "hyper b = v * eye(D)", *BB),
     CemModelError, 5, 11, "shape mismatch: (3) and (D, D)", None),
    ("dot-of-scalars",
     src(*HEAD, "mu ~ Normal(0, 1)", "plate points n in N:",
         "    observe x[n] ~ Normal(dot(mu, mu), 1)"),
     CemModelError, 5, 27, "dot() takes two vectors of the same length", None),
    # -- conjugacy --------------------------------------------------------------------------
    ("gamma-prior-on-normal-mean",
     src(*HEAD, "mu ~ Gamma(1, 1)", "plate points n in N:", "    observe y[n] ~ Normal(mu, 1)"),
     CemConjugacyError, 5, 27, "edge mu -> y", "Normal"),
    ("latent-in-denominator",
     src(*HEAD, "mu ~ Normal(0, 1)", "plate points n in N:",
         "    observe y[n] ~ Normal(1 / mu, 1)"),
     CemConjugacyError, 5, 31, "a latent variable in a denominator", "divide only by constants"),
    ("variable-enters-term-twice",
     src(*HEAD, "mu ~ Normal(0, 1)", "plate points n in N:",
         "    observe y[n] ~ Normal(mu * mu, 1)"),
     CemConjugacyError, 5, 5, "'mu' enters one term of Normal 'y' twice", None),
    ("nonlinear-function-of-latent",
     src(*HEAD, "mu ~ Normal(0, 1)", "plate points n in N:",
         "    observe y[n] ~ Normal(exp(mu), 1)"),
     CemConjugacyError, 5, 27, "not linear in the statistics of latent 'mu'", None),
    ("latent-gamma-shape",
     src(*HEAD, "t ~ Gamma(1, 1)", "plate points n in N:", "    observe y[n] ~ Gamma(t, 1)"),
     CemConjugacyError, 5, 26, "the shape of Gamma 'y' depends on latent 't'",
     "make the shape a constant"),
    ("normal-prior-on-bernoulli-probability",
     src(*HEAD, "t ~ Normal(0, 1)", "plate points n in N:", "    observe y[n] ~ Bernoulli(t)"),
     CemConjugacyError, 5, 30, "edge t -> y", "Beta"),
    # -- names the generated code uses itself (in one Python scope) --------------------------
    ("hyper-named-like-a-kernel-variable",
     src(*HEAD, "hyper elbo = 1.0", "lam ~ Gamma(elbo, 1.0)", "plate items n in N:",
         "    observe y[n] ~ Poisson(lam)"),
     CemModelError, 3, 7, "'elbo' is a name the generated code uses itself", "rename 'elbo'"),
    ("data-named-like-the-runtime-weights",
     src(*HEAD, "lam ~ Gamma(1.0, 1.0)", "plate items n in N:",
         "    data item_weight[n] : real", "    observe y[n] ~ Poisson(item_weight[n] * lam)"),
     CemModelError, 5, 10, "'item_weight' is a name the generated code uses itself",
     "rename 'item_weight'"),
    ("plate-whose-weights-clash",
     src(*LDA_HEAD, "hyper alpha = 0.1", "plate topics k in K:", "    beta[k] ~ Dirichlet(0.1, V)",
         "plate docs d in D:", "    theta[d] ~ Dirichlet(alpha, K)",
         "    plate item n in N[d]:", "        z[d, n] ~ Categorical(theta[d])",
         "        observe w[d, n] ~ Categorical(beta[z[d, n]])"),
     CemModelError, 11, 11, "'item' gives the identifier 'item_weight'", "rename 'item'"),
    ("two-names-that-make-one-identifier",
     src(*LDA_HEAD, "hyper tokens_ptr = 0.1", "plate topics k in K:",
         "    beta[k] ~ Dirichlet(0.1, V)", "plate docs d in D:",
         "    theta[d] ~ Dirichlet(tokens_ptr, K)", "    plate tokens n in N[d]:",
         "        z[d, n] ~ Categorical(theta[d])",
         "        observe w[d, n] ~ Categorical(beta[z[d, n]])"),
     CemModelError, 6, 7, "'tokens_ptr' is also made from another of the model's names",
     "rename 'tokens_ptr'"),
]


@pytest.mark.parametrize(
    ("text", "error", "line", "col", "message", "hint"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_malformed_source(text, error, line, col, message, hint):
    with pytest.raises(CemError) as info:
        run_stages(text, "bad.cem")
    exc = info.value
    assert type(exc) is error, f"{type(exc).__name__}: {exc}"
    assert (exc.span.line, exc.span.column) == (line, col), str(exc)
    assert message in exc.message
    if hint is not None:
        assert exc.hint is not None and hint in exc.hint, exc.hint

    rendered = str(exc)
    assert rendered.startswith(f"bad.cem:{line}:{col}: error: "), rendered
    assert "Traceback" not in rendered
    shown = rendered.splitlines()
    assert shown[1] == "    " + text.splitlines()[line - 1]
    pad = "".join(c if c == "\t" else " " for c in text.splitlines()[line - 1][:col - 1])
    assert shown[2].startswith("    " + pad + "^")  # a tab before the caret is kept
    assert set(shown[2].strip()) == {"^"}
    if hint is not None:
        assert shown[-1].startswith("  hint: ")


def test_table_size_and_coverage():
    assert len(CASES) >= 25
    assert len({case[0] for case in CASES}) == len(CASES)
    kinds = {case[2] for case in CASES}
    assert kinds == {CemSyntaxError, CemModelError, CemConjugacyError}
    # every case is a different mistake: no two give the same message at the same place
    assert len({(case[3], case[4], case[5]) for case in CASES}) == len(CASES)


def test_non_conjugate_message_names_variable_edge_and_remedy():
    text = src(*HEAD, "mu ~ Gamma(1, 1)", "plate points n in N:",
               "    observe y[n] ~ Normal(mu, 1)")
    with pytest.raises(CemConjugacyError) as info:
        run_stages(text, "bad.cem")
    exc = info.value
    assert "'mu'" in exc.message
    assert "mu -> y" in exc.message
    assert "Gamma" in exc.message
    assert exc.hint is not None and "Normal" in exc.hint and "'mu'" in exc.hint


def test_a_file_s_encoding_is_read_or_located(tmp_path):
    """An editor's UTF-8 byte-order mark is not part of the text; a file in another encoding
    is refused at the line and column of its first byte that is not UTF-8."""
    from cemodel.compiler import read_source

    text = src(*HEAD, *BB)
    bom = tmp_path / "bom.cem"
    bom.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert read_source(bom) == (text, "bom.cem")
    latin = tmp_path / "latin.cem"
    latin.write_bytes(src(*HEAD, "p ~ Beta(1, 1)  # caf\xe9", *BB[1:]).encode("latin-1"))
    with pytest.raises(CemError, match=r"latin.cem:3:22: the model file is not UTF-8 \(byte "
                                       r"0xe9\)"):
        read_source(latin)


def test_errors_are_source_errors_with_the_file_name():
    """The rendered form names the file passed to ``run_stages``, whatever it is."""
    with pytest.raises(CemSourceError) as info:
        run_stages(src(*HEAD, "p ~ Beta(1)", *BB[1:]), "models/coin.cem")
    assert str(info.value).startswith("models/coin.cem:3:5: error: ")


def test_every_stdlib_model_still_compiles():
    """The table's mistakes are mistakes: the correct stdlib models pass every stage."""
    root = Path(__file__).resolve().parent.parent / "stdlib_models"
    for path in sorted(root.glob("*.cem")):
        stages = run_stages(path.read_text(), path.name)
        assert stages.model.latents


@pytest.mark.parametrize("name", ["tau", "kappa", "rho", "step", "theta", "state", "trace",
                                  "value", "total", "scale"])
def test_names_the_generated_code_does_not_share_a_scope_with_are_accepted(name):
    """Only a real clash is refused: the SVI options kappa, tau and the like are names of
    fit_svi's, but a hyperparameter of that name is read as s.<name> there."""
    stages = run_stages(src(*HEAD, f"hyper {name} = 1.0", f"lam ~ Gamma({name}, 1.0)",
                            "plate items n in N:", "    observe y[n] ~ Poisson(lam)"), "ok.cem")
    assert [h.name for h in stages.model.hypers] == [name]


def test_a_hyperparameter_named_like_an_svi_option_fits_exactly(tmp_path):
    """kappa and tau are fit_svi's step-size options and hyperparameters here: both fits give
    the exact Gamma-Poisson posterior (one full-batch SVI step with rho = 1 is exact)."""
    import numpy as np

    from cemodel.compiler import compile_model

    path = tmp_path / "named.cem"
    path.write_text(src(*HEAD, "hyper kappa = 2.0", "hyper tau = 3.0", "lam ~ Gamma(kappa, tau)",
                        "plate items n in N:", "    observe y[n] ~ Poisson(lam)"))
    module = compile_model(path)
    y = np.array([1.0, 4.0, 2.0, 0.0])
    for result in (module.fit({"y": y}), module.fit_svi({"y": y}, batch_size=4, epochs=1,
                                                        kappa=0.5, tau=0.0)):
        assert result["lam.shape"] == pytest.approx(2.0 + y.sum())
        assert result["lam.rate"] == pytest.approx(3.0 + len(y))


def test_data_named_like_a_constant_is_read_as_the_data(tmp_path):
    """The constant 1 of Dirichlet(1.0, K) is a known quantity cemodel names 'c'; data called
    'c' must still be the data (it was overwritten by the constant: the rate was 1 + N)."""
    import numpy as np

    from cemodel.compiler import compile_model

    path = tmp_path / "exposure.cem"
    path.write_text(src(*HEAD, "dim K = 2", "lam ~ Gamma(1.0, 1.0)", "pi ~ Dirichlet(1.0, K)",
                        "plate items n in N:", "    z[n] ~ Categorical(pi)",
                        "    data c[n] : real", "    observe y[n] ~ Poisson(c[n] * lam)"))
    c = np.array([2.0, 0.5, 3.0, 1.5])
    result = compile_model(path).fit({"y": np.array([1.0, 0.0, 4.0, 2.0]), "c": c})
    assert result["lam.shape"] == pytest.approx(1.0 + 7.0)
    assert result["lam.rate"] == pytest.approx(1.0 + c.sum())


def test_an_indexed_hyperparameter_points_to_per_element_data():
    text = ("model m\ndim K = 3\nhyper m0 = [-4.0, 0.0, 4.0]\nplate comps k in K:\n"
            "    mu[k] ~ Normal(m0[k], 0.01)\n")
    with pytest.raises(CemModelError) as info:
        run_stages(text, "m.cem", {})
    text = info.value.render()
    assert "m.cem:5:20" in text and "'m0' takes no indices" in text
    assert "declare it as data in plate comps ('data m0[k] : real')" in text


def test_a_literal_vector_against_a_dimension_says_how_to_write_it():
    text = ("model m\ndim K = 3\ndim N\nhyper v = [1.0, 2.0, 3.0]\np ~ Dirichlet(v)\n"
            "plate comps k in K:\n    lam[k] ~ Gamma(1.0, 1.0)\nplate obs n in N:\n"
            "    z[n] ~ Categorical(p)\n    observe y[n] ~ Poisson(lam[z[n]])\n")
    with pytest.raises(CemModelError) as info:
        run_stages(text, "m.cem", {})
    assert "'z' takes 3 values but plate 'comps' of 'lam' has K elements" in str(info.value)
    assert "declare the hyperparameter over K (ones(K)" in info.value.hint


def test_a_hyperparameter_scaling_a_positive_variable_is_checked_positive():
    """Poisson(c * lam), lam a Gamma: the rate has c's sign, so a fit given c = -2 (by
    hypers= or --set) is refused naming c, as a hyperparameter that is the rate itself
    is; a product with a real-valued factor is left alone (its sign is not c's)."""
    from cemodel.codegen.lowering import lower
    from cemodel.compiler import run_stages

    scaled = "\n".join(("model m", "dim N", "hyper c = 2.0", "hyper d = 1.0",
                        "lam ~ Gamma(1.0, 1.0)", "mu ~ Normal(0.0, 1.0)",
                        "plate points n in N:", "    observe y[n] ~ Poisson(c * lam)",
                        "    observe x[n] ~ Normal(d * mu, 1.0)")) + "\n"
    domains = lower(run_stages(scaled, "m.cem").plan).hyper_domains
    assert domains.get("c") == "positive"
    assert "d" not in domains


def test_a_dimension_used_nowhere_is_left_out_and_named(tmp_path):
    """`dim G` with no default that nothing mentions: check passed and fit stopped at
    "dimension 'G' is not set", which no data could set. Now the model leaves it out, check
    names it, the fit runs, and --set G is refused with the reason."""
    import numpy as np

    from cemodel.check import check_report
    from cemodel.compiler import apply_settings, read_source, run_stages

    path = tmp_path / "u.cem"
    path.write_text(src(*HEAD, "dim G", "dim K = 3", *BB))
    stages = run_stages(*read_source(path))
    assert [d.name for d in stages.model.dims] == ["N", "K"]  # K has a default: kept
    assert "dim G (u.cem:3): declared and used nowhere, left out" in check_report(stages.plan)
    with pytest.raises(CemError, match="dimension 'G' is declared and used nowhere in the "
                                       "model, so its size would change nothing"):
        apply_settings(stages.model, {"G": 3})
    import cemodel

    module = cemodel.compile(path)
    fit = module.fit({"x": np.array([0, 1, 1, 0, 1])}, max_iter=5)
    assert np.isfinite(fit.elbo[-1])
    with pytest.raises(CemError, match=r"dims\['G'\]: dimension 'G' is declared and used "
                                       "nowhere in the model"):
        module.fit({"x": np.array([0, 1, 1, 0, 1])}, dims={"G": 3})
