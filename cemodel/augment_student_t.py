"""Stage 2½ (part of ``cemodel.augment``): Student's t through its Gamma scale mixture.

An observed ``y ~ StudentT(ν, μ, τ)`` is not conjugate as written: its log density
−(ν+1)/2 · ln(1 + τ(y − μ)²/ν) is linear in no statistic of μ or τ. It is the marginal of a
Normal whose precision is scaled by a Gamma variable (Andrews & Mallows 1974; Bishop 2006
§2.3.7):

    StudentT(y; ν, μ, τ) = ∫ Normal(y; μ, λτ) Gamma(λ; ν/2, ν/2) dλ.

This stage introduces, for each such y, the latent ``y_scale`` = λ (Gamma(ν/2, ν/2), one per
element of y's plates, so local where y is) and rewrites y's factor to Normal(μ, λ·τ). The
rest is the general rules: a product of independent Gamma factors as a Normal precision is
conjugate to each of them (its log density reads E[ln λ] + E[ln τ] and E[λ]·E[τ]), so
q(λ_n) = Gamma(ν/2 + 1/2, ν/2 + E[τ]·E[(y_n − μ)²]/2) and μ, τ see the data weighted by E[λ_n]
(the EM algorithm for the t of Liu & Rubin 1995, in its variational form). The ELBO is that of
the augmented model, a lower bound on the t model's log evidence. ν must be known: it is the
shape and rate of λ's prior, which no conjugate factor provides.
"""

from __future__ import annotations

from dataclasses import replace

from .errors import CemConjugacyError
from .model import (
    Introduced,
    Model,
    PlateIndex,
    RBin,
    RConst,
    RExpr,
    RVar,
    VarDef,
    expr_vars,
)

STUDENT_T = "StudentT"


def scale_mixtures(model: Model) -> Model:
    """Every observed StudentT as a Normal with an introduced Gamma precision scale; a
    StudentT whose ν depends on a random variable is refused at ν's place."""
    variables: list[VarDef] = []
    introduced: list[Introduced] = []
    taken: set[str] = set()
    for var in model.variables:
        if var.family != STUDENT_T:
            variables.append(var)
            continue
        nu, mean, precision = var.args
        _refuse_random_nu(model, var, nu)
        name = model.fresh_name(f"{var.name}_scale", taken)
        span = var.span
        half_nu = RBin("/", nu, RConst(2.0, span), span)
        scale = VarDef(name, var.plates, "Gamma", (half_nu, half_nu), False, (), None, span,
                       var.dist_span)
        ref = RVar(name, tuple(PlateIndex(p, span) for p in var.plates), span)
        normal = replace(var, family="Normal", args=(mean, RBin("*", ref, precision, span)))
        variables += [scale, normal]
        introduced.append(Introduced(
            name, var.name, None,
            f"{var.name} ~ StudentT(ν, μ, τ) is a Normal(μ, {name}·τ) whose precision scale "
            f"{name} ~ Gamma(ν/2, ν/2) is integrated out (Gamma scale mixture); {name} holds "
            f"it, one per element of {var.name} (q = Gamma)",
        ))
    return model.with_introduced(variables, introduced)


def _refuse_random_nu(model: Model, var: VarDef, nu: RExpr) -> None:
    """ν is the shape and rate of λ's prior Gamma(ν/2, ν/2), which enter its density through
    ln Γ(ν/2): no family's statistics make that conjugate."""
    found = expr_vars(nu)
    if found:
        other = found[0][0]
        raise CemConjugacyError(
            f"not conjugate: the degrees of freedom ν of StudentT '{var.name}' depend on the "
            f"random variable '{other}'; ν must be known (it enters through ln Γ(ν/2), which "
            "is linear in no sufficient statistic)",
            getattr(nu, "span", var.span), model.source,
            hint="give ν as a number, a hyperparameter (hyper nu = 4.0) or data; to choose it, "
                 "fit a few values (hypers={'nu': 8.0}) and compare their ELBOs",
        )
