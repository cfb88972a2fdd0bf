"""`cemodel check` shows every stdlib model's complete conditionals; non-conjugacy is refused."""

from pathlib import Path

import pytest

from cemodel.check import check_report
from cemodel.compiler import read_source, run_stages
from cemodel.errors import CemConjugacyError

REPO = Path(__file__).resolve().parents[1]
MODELS = sorted(p.stem for p in (REPO / "stdlib_models").glob("*.cem"))


def report(name: str) -> str:
    text, filename = read_source(REPO / "stdlib_models" / f"{name}.cem")
    return check_report(run_stages(text, filename).plan)


@pytest.mark.parametrize("name", MODELS)
def test_every_latent_has_a_conditional(name):
    text, filename = read_source(REPO / "stdlib_models" / f"{name}.cem")
    stages = run_stages(text, filename)
    out = check_report(stages.plan)
    for var in stages.model.latents:
        assert f"q({var.name}" in out, var.name
    assert "global steps (--method):" in out
    assert "local steps (--local)" in out
    assert "mf       yes" in out


@pytest.mark.parametrize("name, expected", [
    ("lda", ["α_v = eta + Σ_{d,n} [w[d, n] = v]·q(z[d, n] = k)",
             "α_v = alpha + Σ_{n} q(z[d, n] = v)",
             "log q(z[d, n] = v) = E[log theta[d]]_v + E[log beta[v]]_{w[d, n]} + const",
             "theta[d] ~ Dirichlet  [local in plates docs]",
             "beta[k] ~ Dirichlet  [global in plates topics]"]),
    ("beta_bernoulli", ["a = a + Σ_{n} x[n]", "b = b + Σ_{n} 1 - Σ_{n} x[n]"]),
    ("gamma_poisson", ["shape = a + Σ_{n} x[n]", "rate = b + Σ_{n} 1"]),
    ("normal_normal", ["precision = t0 + Σ_{n} tau", "precision·mean = t0·m0 + Σ_{n} tau·x[n]"]),
    ("gmm", ["dof = nu0 + Σ_{n} q(z[n] = k)", "precision_vi = P0_vi + Σ_{n} "
             "E[Lambda[k]]_vi·q(z[n] = k)"]),
    # an index that is data keeps its indicator at the target's own index (it was dropped:
    # "shape = a + Σ_{n} x[n]", as if every point belonged to every group)
    ("hierarchical_poisson", ["shape = a + Σ_{n} x[n]·[group[n] = g]",
                              "rate = E[beta] + Σ_{n} e[n]·[group[n] = g]"]),
])
def test_conditionals_read_as_math(name, expected):
    out = report(name)
    for line in expected:
        assert line in out


def test_gamma_prior_on_normal_mean_is_refused():
    source = """model bad
dim N
mu ~ Gamma(1.0, 1.0)
plate obs n in N:
    observe y[n] ~ Normal(mu, 1.0)
"""
    with pytest.raises(CemConjugacyError) as info:
        run_stages(source, "bad.cem")
    message = str(info.value)
    assert message.startswith("bad.cem:5:27:")
    assert "'mu'" in message and "mu -> y" in message  # the variable and the edge
    assert "Gamma" in message and "E[x²]" in message  # the family mismatch
    assert "hint: give 'mu' a prior from: Normal" in message  # what would make it conjugate
    assert "observe y[n] ~ Normal(mu, 1.0)" in message and "^^" in message


def test_methods_report_only_what_is_implemented():
    out = report("lda")
    assert "svi      yes" in out and "svi+     yes" in out
    assert "ssvi     yes" in out and "ssvi-a   yes" in out
    # GMM: MVN and Wishart globals have V(β, λ) (runtime.ssvi_matrix); KLC-CG does not apply
    gmm = report("gmm")
    assert "ssvi     yes" in gmm and "klc      no: 'mu' and 'Lambda' are not d-separated" in gmm


@pytest.mark.parametrize("name, step, expected", [
    ("lda", "exact", "no: local 'z' depends on local 'theta'"),
    ("lda", "gibbs", "yes: samples z with theta integrated out"),
    ("lda", "cvb0", "yes: updates q(z) with theta integrated out"),
    ("gmm", "exact", "yes: given the globals each local depends only on data"),
    ("gmm", "gibbs", "yes: samples z"),
    ("gamma_poisson", "gibbs", "no: the item has no categorical local to sample"),
    ("hmm", "gibbs", "no: 'z' is a MarkovChain, a chain whose steps depend on each other"),
])
def test_check_lists_local_steps_and_why(name, step, expected):
    out = report(name)
    line = next(x for x in out.split("\n") if x.strip().startswith(step + " ")
                and "local steps" in out[:out.index(x)])
    assert expected in line, line


def test_local_step_refusals_name_the_reason():
    source = """model hmmish
dim N
dim K = 2
pi ~ Dirichlet(1.0, K)
mu ~ Normal(0.0, 1.0)
plate points n in N:
    z[n] ~ Categorical(pi)
    x[n] ~ Normal(mu, 1.0)
    observe y[n] ~ Normal(x[n], 1.0)
"""
    out = check_report(run_stages(source, "h.cem").plan)
    assert "gibbs    no: local 'x' is a Normal" in out
    source = """model two_plates
dim N
dim M
mu ~ Normal(0.0, 1.0)
plate a i in N:
    observe x[i] ~ Normal(mu, 1.0)
plate b j in M:
    observe y[j] ~ Normal(mu, 1.0)
"""
    out = check_report(run_stages(source, "two.cem").plan)
    assert "svi      no: the model has no single data plate" in out


@pytest.mark.parametrize("model, sets, expected", [
    ("poisson_mixture", ["b=-1", "K=4"],
     "error: --set b=-1: the rate of Gamma must be positive, found -1 (in "
     "poisson_mixture.cem:18:24: rate[k] ~ Gamma(a, b))\n  hint: give --set b a positive value"),
    ("poisson_mixture", ["alpha=1e-30"],
     "error: --set alpha=1e-30: the a of Dirichlet must be at least 2.22e-16"),
    ("gmm", ["K=3", "D=2", "nu0=1"],  # neither alone: the dof of a 2 × 2 Wishart
     "error: --set D=2 --set nu0=1: the dof of Wishart must be above D − 1 = 1 for a 2 × 2 "
     "scale, found 1 (in gmm.cem:24:25: Lambda[k] ~ Wishart(nu0, W0))"),
    ("gmm", ["K=2", "K=4"], "error: --set K is given twice: --set K=2 and --set K=4"),
])
def test_check_refuses_set_values_as_it_refuses_the_files(capsys, model, sets, expected):
    """`hyper b = -1.0` in the file was refused with its line and column, `--set b=-1` passed
    `check` (the fit refused it later); a repeated --set kept the last silently."""
    from cemodel.cli import main

    argv = ["check", str(REPO / "stdlib_models" / f"{model}.cem")]
    assert main([*argv, *(a for s in sets for a in ("--set", s))]) == 2
    err = capsys.readouterr().err
    assert err.startswith(expected), err
    assert main([*argv, "--set", "K=3", "--set", "D=2", "--set", "nu0=2"] if model == "gmm"
                else [*argv, "--set", "b=1"]) == 0
