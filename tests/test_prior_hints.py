"""The hint of a non-conjugate prior names only priors that would be accepted (issue 18,
finding 5): following it is never refused again.

Each relation below is a small model with one latent variable 't' read by a child in one
role; its prior is written wrongly, the error's hint is read, and every family it names is
substituted back into the model (with valid hyperparameters) and run through every stage of
``cemodel check``. Only ``run_stages`` runs here: no numba.
"""

import os
from pathlib import Path

os.environ.setdefault(
    "CEMODEL_CACHE", str(Path(__file__).resolve().parent.parent / ".cemodel_cache" / "tests")
)

import pytest  # noqa: E402

from cemodel.compiler import fitted_model, run_stages  # noqa: E402
from cemodel.errors import CemConjugacyError, CemError  # noqa: E402
from cemodel.expansion import uses_of  # noqa: E402
from cemodel.families import CHAIN_FAMILIES, FAMILIES, WRITABLE  # noqa: E402
from cemodel.terms import Use, conjugate_priors  # noqa: E402

STDLIB = Path(__file__).resolve().parent.parent / "stdlib_models"

HEAD = "model m\ndim N\ndim K = 3\ndim D = 2\nhyper pk = [0.2, 0.3, 0.5]\n"

# a prior with valid hyperparameters for every family a latent variable may have, for a
# scalar 't' and for a vector 't' of size D ("{D}")
PRIORS = {
    "Normal": "Normal(0, 1)",
    "Gamma": "Gamma(2, 1)",
    "Exponential": "Exponential(1)",
    "Beta": "Beta(1, 1)",
    "Bernoulli": "Bernoulli(0.5)",
    "Categorical": "Categorical(pk)",
    "Dirichlet": "Dirichlet(1.0, {D})",
    "MultivariateNormal": "MultivariateNormal(zeros({D}), eye({D}))",
    "Wishart": "Wishart(4, eye({D}))",
    "StickBreaking": "StickBreaking(1.0, {D})",
}

# (id, model body with {prior} for the prior of 't', the size of a vector 't', wrong priors)
RELATIONS = [
    ("poisson-rate", "t ~ {prior}\nplate p n in N:\n    observe y[n] ~ Poisson(t)\n", None,
     ["Beta", "Normal", "Bernoulli", "Categorical"]),
    ("poisson-rate-with-exposure",
     "t ~ {prior}\nplate p n in N:\n    data c[n] : real\n    observe y[n] ~ Poisson(c[n] * t)\n",
     None, ["Beta", "Normal"]),
    ("poisson-rate-selected-by-a-categorical",
     "pi ~ Dirichlet(1.0, K)\nplate comps k in K:\n    t[k] ~ {prior}\nplate p n in N:\n"
     "    z[n] ~ Categorical(pi)\n    observe y[n] ~ Poisson(t[z[n]])\n", None,
     ["Beta", "Normal"]),
    ("exponential-rate", "t ~ {prior}\nplate p n in N:\n    observe y[n] ~ Exponential(t)\n",
     None, ["Beta", "Normal", "Bernoulli"]),
    ("bernoulli-probability",
     "t ~ {prior}\nplate p n in N:\n    observe y[n] ~ Bernoulli(t)\n", None,
     ["Normal", "Gamma", "Exponential", "Bernoulli"]),
    ("binomial-probability",
     "t ~ {prior}\nplate p n in N:\n    observe y[n] ~ Binomial(10, t)\n", None,
     ["Normal", "Gamma", "Exponential"]),
    ("categorical-probabilities",
     "t ~ {prior}\nplate p n in N:\n    observe y[n] ~ Categorical(t)\n", "K",
     ["MultivariateNormal"]),
    ("normal-mean", "t ~ {prior}\nplate p n in N:\n    observe y[n] ~ Normal(t, 1)\n", None,
     ["Gamma", "Beta", "Exponential", "Bernoulli", "Categorical"]),
    ("normal-precision", "t ~ {prior}\nplate p n in N:\n    observe y[n] ~ Normal(0, t)\n",
     None, ["Normal", "Beta", "Bernoulli"]),
    ("gamma-rate", "t ~ {prior}\nplate p n in N:\n    observe y[n] ~ Gamma(2, t)\n", None,
     ["Normal", "Beta"]),
    ("mvn-mean",
     "t ~ {prior}\nplate p n in N:\n    observe y[n] ~ MultivariateNormal(t, eye(D))\n", "D",
     ["Dirichlet"]),
    ("mvn-precision-scale",
     "t ~ {prior}\nplate p n in N:\n    observe y[n] ~ MultivariateNormal(zeros(D), t * eye(D))\n",
     None, ["Normal", "Beta"]),
]


def model(body: str, family: str, size: str | None) -> str:
    return HEAD + body.format(prior=PRIORS[family].format(D=size or "D"))


def accepted(text: str) -> bool:
    try:
        run_stages(text, "m.cem")
    except CemError:
        return False
    return True


def hinted(text: str) -> list[str]:
    """The families the error's hint names ([] when it names none)."""
    with pytest.raises(CemConjugacyError) as info:
        run_stages(text, "bad.cem")
    hint = info.value.hint
    assert hint is not None, str(info.value)
    assert str(info.value).splitlines()[-1] == "  hint: " + hint  # the rendered form is kept
    lead = "give 't' a prior from: "
    if not hint.startswith(lead):
        return []
    return hint[len(lead):].split(", ")


def test_the_table_has_a_prior_for_every_family_a_latent_may_have():
    latent = {f.name for f in FAMILIES.values() if f.name in WRITABLE and f.variational}
    # a chain (Markov, Gaussian) runs along a plate of sequences: no relation here reads one
    assert latent - CHAIN_FAMILIES == set(PRIORS)


def test_a_beta_prior_on_a_poisson_rate_is_pointed_to_gamma():
    text = HEAD + "t ~ Beta(1, 1)\nplate p n in N:\n    observe y[n] ~ Poisson(t)\n"
    assert hinted(text) == ["Exponential", "Gamma"]  # not Normal or Bernoulli (refused)


def test_a_normal_prior_on_a_bernoulli_probability_is_pointed_to_beta():
    text = HEAD + "t ~ Normal(0, 1)\nplate p n in N:\n    observe y[n] ~ Bernoulli(t)\n"
    assert hinted(text) == ["Beta"]  # not Gamma or Exponential (refused)


@pytest.mark.parametrize(("body", "size", "wrong"), [
    pytest.param(body, size, wrong, id=f"{name}-{wrong}")
    for name, body, size, wrongs in RELATIONS for wrong in wrongs
])
def test_every_hinted_prior_is_accepted(body, size, wrong):
    assert not accepted(model(body, wrong, size))
    families = hinted(model(body, wrong, size))
    assert families, "every relation here has a conjugate prior"
    for family in families:
        assert accepted(model(body, family, size)), f"the hint's {family} is refused"


@pytest.mark.parametrize(("body", "size", "wrong"), [
    pytest.param(body, size, wrongs[0], id=name) for name, body, size, wrongs in RELATIONS
])
def test_the_hint_names_every_prior_that_is_accepted(body, size, wrong):
    """The other direction: a family left out of the hint is one that would be refused."""
    good = sorted(f for f in PRIORS if accepted(model(body, f, size)))
    assert hinted(model(body, wrong, size)) == good


def test_a_variable_no_family_serves_in_all_its_roles_is_told_so():
    """A rate (E[log x], E[x]) that is also a mean (E[x²]): no family provides all three."""
    body = ("t ~ {prior}\nplate p n in N:\n    observe y[n] ~ Poisson(t)\n"
            "    observe w[n] ~ Normal(t, 1)\n")
    assert not any(accepted(model(body, f, None)) for f in PRIORS)
    for wrong in ("Gamma", "Normal", "Beta"):
        with pytest.raises(CemConjugacyError) as info:
            run_stages(model(body, wrong, None), "bad.cem")
        assert info.value.hint is not None and "prior from" not in info.value.hint
        assert "no family in cemodel" in info.value.hint and "'t'" in info.value.hint


def test_the_supports_narrow_the_families_that_provide_the_statistics():
    """E[x] alone is provided by Normal, Bernoulli, Gamma and Exponential; read as a positive
    parameter, only the families whose values are positive qualify."""
    assert conjugate_priors(0, [Use("t", "value", "real")]) == (
        "Bernoulli", "Exponential", "Gamma", "Normal")
    assert conjugate_priors(0, [Use("t", "value", "positive")]) == ("Exponential", "Gamma")
    assert conjugate_priors(0, [Use("t", "log", "unit"), Use("t", "log1m", "unit")]) == ("Beta",)
    assert conjugate_priors(0, [Use("t", "log", "positive"), Use("t", "value", "real"),
                                Use("t", "square", "real")]) == ()


@pytest.mark.parametrize("path", sorted(STDLIB.glob("*.cem")), ids=lambda p: p.stem)
def test_the_rule_names_the_prior_of_every_latent_of_a_correct_model(path):
    """Every stdlib model is accepted, so the prior of each of its latent variables (and each
    member of a joint block) is among the families the hint would name for it: the reads'
    domains (through products, sums, dot products, selections, chains, blocks) agree with
    what the compiler accepts."""
    model = fitted_model(path.read_text(), path.name)
    variables = [*model.latents, *(m for b in model.blocks for m in (b.mean, b.precision))]
    for var in (v for v in variables if v.family in WRITABLE):
        family = FAMILIES[var.family]
        named = conjugate_priors(family.event_rank, uses_of(model, var.name))
        assert not CHAIN_FAMILIES & set(named)  # a chain is a sequence, never a prior to name
        if family.name in CHAIN_FAMILIES:  # its emissions read one step, as of a step family
            assert named in (("Categorical",), ("MultivariateNormal",)), named
            continue
        assert family.name in named, (var.name, uses_of(model, var.name))
