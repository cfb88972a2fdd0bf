"""Refusals of a logistic link that cemodel cannot augment (issue 20, item 1): each at its
file:line:col with the source line, a caret and what would make it work; and the forms
that do apply (offsets, random intercepts, a categorical-selected weight vector) compile."""

import pytest

from cemodel.compiler import run_stages
from cemodel.errors import CemConjugacyError, CemError

HEAD = ("model m", "dim N", "dim P = 2", "dim G = 3")
W = "w ~ MultivariateNormal(zeros(P), eye(P))"


def src(*lines: str) -> str:
    return "\n".join(lines) + "\n"


def observe(expr: str, *latents: str, family: str = "Bernoulli({})") -> str:
    return src(*HEAD, W, *latents, "plate obs n in N:", "    data x[n] : vector(P)",
               "    data g[n] : int", "    observe y[n] ~ " + family.format(expr))


# (id, source, line, column, substring of the message, substring of the hint)
CASES = [
    ("product-of-latents", observe("logistic(dot(x[n], w) * s)", "s ~ Normal(0, 1)"),
     10, 39, "it multiplies two latent variables", "dot(x[n], w), not dot(v, w)"),
    ("square-of-a-latent", observe("logistic(s * s)", "s ~ Normal(0, 1)"),
     10, 39, "it multiplies two latent variables", "known quantities only"),
    ("dot-of-two-latents",
     observe("logistic(dot(v, w))", "v ~ MultivariateNormal(zeros(P), eye(P))"),
     10, 39, "it multiplies two latent variables", None),
    ("gamma-in-the-predictor", observe("logistic(dot(x[n], w) + s)", "s ~ Gamma(1, 1)"),
     10, 54, "'s' has a Gamma prior", "give 's' a Normal or MultivariateNormal prior"),
    ("exp-of-a-latent", observe("logistic(exp(s))", "s ~ Normal(0, 1)"),
     10, 39, "exp() of a latent variable is not linear", "move the variable out"),
    ("divided-by-a-latent", observe("logistic(1.0 / s)", "s ~ Normal(0, 1)"),
     10, 39, "a latent variable divides it", "divide by a known quantity"),
    ("part-of-the-probability", observe("0.5 * logistic(dot(x[n], w))"),
     9, 36, "must be the whole probability", "Bernoulli(logistic(eta))"),
    ("in-a-normal-mean", observe("logistic(dot(x[n], w))", family="Normal({}, 1.0)"),
     9, 27, "not in an observed Normal", None),
    ("latent-bernoulli", src(*HEAD, W, "plate obs n in N:", "    data x[n] : vector(P)",
                             "    z[n] ~ Bernoulli(logistic(dot(x[n], w)))",
                             "    observe y[n] ~ Normal(z[n], 1.0)"),
     8, 22, "not in a latent Bernoulli", "observe y[n] ~ Bernoulli(logistic(eta))"),
    ("logistic-of-logistic", observe("logistic(logistic(dot(x[n], w)))"),
     9, 39, "a logistic of a logistic", "write the linear predictor alone"),
    ("binomial-trials-an-expression",
     src(*HEAD, W, "plate obs n in N:", "    data x[n] : vector(P)", "    data m[n] : real",
         "    observe y[n] ~ Binomial(2 * m[n], logistic(dot(x[n], w)))"),
     9, 29, "the n of Binomial must be a number", "declare it as data"),
]


@pytest.mark.parametrize(("text", "line", "col", "message", "hint"),
                         [pytest.param(*case[1:], id=case[0]) for case in CASES])
def test_refused_with_place_and_remedy(text, line, col, message, hint):
    with pytest.raises(CemError) as info:
        run_stages(text, "bad.cem")
    exc = info.value
    assert type(exc) is CemConjugacyError, f"{type(exc).__name__}: {exc}"
    assert (exc.span.line, exc.span.column) == (line, col), str(exc)
    assert message in exc.message, exc.message
    if hint is not None:
        assert exc.hint is not None and hint in exc.hint, exc.hint
    shown = str(exc).splitlines()
    assert shown[0].startswith(f"bad.cem:{line}:{col}: error: not ")
    assert shown[1] == "    " + text.splitlines()[line - 1]
    assert set(shown[2].strip()) == {"^"}


@pytest.mark.parametrize("predictor", [
    "logistic(dot(x[n], w))",
    "logistic(dot(x[n], w) + b[g[n]] - 1.5)",  # offset and a random intercept
    "logistic(2.0 * (dot(x[n], w) + s) / 3.0)",  # known scales
    "logistic(dot(x[n], v[z[n]]))",  # a categorical-selected weight vector
])
def test_linear_predictors_are_augmented(predictor):
    latents = ("s ~ Normal(0, 1)", "pi ~ Dirichlet(1.0, G)", "plate groups k in G:",
               "    b[k] ~ Normal(0, 1)", "    v[k] ~ MultivariateNormal(zeros(P), eye(P))")
    text = src(*HEAD, W, *latents, "plate obs n in N:", "    data x[n] : vector(P)",
               "    data g[n] : int", "    z[n] ~ Categorical(pi)",
               f"    observe y[n] ~ Bernoulli({predictor})")
    model = run_stages(text, "ok.cem").model
    assert [item.name for item in model.introduced] == ["y_omega"]
    assert model.var("y").family == "Bernoulli·PG"
    assert model.var("y_omega").family == "PolyaGamma"


def test_check_lists_each_omega_with_its_conditional():
    """`cemodel check` lists the introduced ω with why, and q(ω) = PG(b, c) with b of its
    count (1, n, y + r) and c² = E[η²] as a sum of the predictor's statistics."""
    from pathlib import Path

    from cemodel.check import check_report

    path = Path(__file__).resolve().parents[1] / "stdlib_models" / "logistic_regression.cem"
    report = check_report(run_stages(path.read_text(), path.name).plan)
    assert "introduced by cemodel (to make the model conditionally conjugate):" in report
    assert "  y_omega: y ~ Bernoulli(logistic(η)) is Gaussian in η given a Pólya-Gamma " in report
    assert "y_omega[n] ~ PolyaGamma  [introduced, local in plates points]" in report
    assert "    q(y_omega[n]) = PolyaGamma(1, c)\n        c² = Σ_{j,l} x[n]_j·x[n]_l·E[w wᵀ]_jl" \
        in report
    counts = src("model m", "dim N", "hyper r = 2.0", "w ~ Normal(0, 1)", "plate obs n in N:",
                 "    data m[n] : real",
                 "    observe y[n] ~ Binomial(m[n], logistic(w))",
                 "    observe k[n] ~ NegativeBinomial(r, logistic(-w))")
    report = check_report(run_stages(counts, "counts.cem").plan)
    assert "q(y_omega[n]) = PolyaGamma(m[n], c)" in report
    assert "q(k_omega[n]) = PolyaGamma(k[n] + r, c)" in report
