"""StudentT where its scale mixture does not apply: each refused at its place with what would
make it work (the checks of tests/test_source_errors.py), and the forms the hints point to
accepted."""

import pytest

from cemodel.compiler import run_stages
from cemodel.errors import CemConjugacyError, CemModelError

from .test_source_errors import src
from .test_source_errors import test_malformed_source as check_refused

HEAD = ("model m", "dim N", "mu ~ Normal(0.0, 0.01)", "plate points n in N:")

# (id, source, error class, line, column, substring of the message, substring of the hint)
CASES = [
    ("latent-degrees-of-freedom",
     src(*HEAD[:3], "nu ~ Gamma(2.0, 0.1)", *HEAD[3:], "    observe y[n] ~ StudentT(nu, mu, 1.0)"),
     CemConjugacyError, 6, 29, "the degrees of freedom ν of StudentT 'y' depend on the random "
     "variable 'nu'", "hyper nu = 4.0"),
    ("selected-latent-degrees-of-freedom",
     src("model m", "dim N", "dim K = 2", "mu ~ Normal(0.0, 0.01)", "pi ~ Dirichlet(1.0, K)",
         "plate comps k in K:", "    nu[k] ~ Gamma(2.0, 0.1)", "plate points n in N:",
         "    z[n] ~ Categorical(pi)", "    observe y[n] ~ StudentT(nu[z[n]], mu, 1.0)"),
     CemConjugacyError, 10, 29, "depend on the random variable 'nu'", "or data"),
    ("latent-student-t",
     src(*HEAD[:2], "mu ~ StudentT(3.0, 0.0, 0.01)", *HEAD[3:],
         "    observe y[n] ~ Normal(mu, 1.0)"),
     CemModelError, 3, 1, "a StudentT variable must be observed",
     "a latent lam ~ Gamma(nu / 2, nu / 2) and Normal(mean, lam * precision)"),
    ("negative-degrees-of-freedom",
     src(*HEAD, "    observe y[n] ~ StudentT(-1.0, mu, 1.0)"),
     CemModelError, 5, 29, "the nu of StudentT must be positive", None),
    ("student-t-without-precision",
     src(*HEAD, "    observe y[n] ~ StudentT(3.0, mu)"),
     CemModelError, 5, 20, "StudentT takes 3 argument(s), got 2",
     "StudentT(nu, mean, precision)"),
    ("normal-prior-on-student-t-precision",
     src(*HEAD[:3], "s ~ Normal(0.0, 1.0)", *HEAD[3:], "    observe y[n] ~ StudentT(3.0, mu, s)"),
     CemConjugacyError, 6, 38, "'s' in the precision of Normal 'y' needs E[log x]",
     "Exponential, Gamma"),
    ("vector-student-t-mean",
     src("model m", "dim N", "dim P", "w ~ MultivariateNormal(zeros(P), eye(P))",
         "plate points n in N:", "    observe y[n] ~ StudentT(3.0, w, 1.0)"),
     CemModelError, 6, 34, "the mean of StudentT must be a scalar", None),
]


@pytest.mark.parametrize(("text", "error", "line", "col", "message", "hint"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_student_t_refusals(text, error, line, col, message, hint):
    check_refused(text, error, line, col, message, hint)


@pytest.mark.parametrize("text", [
    # the degrees of freedom as data, one per point
    src("model m", "dim N", "mu ~ Normal(0.0, 0.01)", "plate points n in N:",
        "    data nu[n] : real", "    observe y[n] ~ StudentT(nu[n], mu, 1.0)"),
    # the latent t of the hint, written as its scale mixture
    src("model m", "dim N", "lam ~ Gamma(1.5, 1.5)", "mu ~ Normal(0.0, lam * 0.01)",
        "plate points n in N:", "    observe y[n] ~ Normal(mu, 1.0)"),
], ids=["data-nu", "latent-scale-mixture"])
def test_the_forms_the_hints_name_are_accepted(text):
    assert run_stages(text, "ok.cem").plan.methods[0] == ("mf", "yes")
