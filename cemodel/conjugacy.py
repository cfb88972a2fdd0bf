"""Stage 3: Model -> factors expanded into monomials, and complete conditionals.

Every ``x ~ F(args)`` statement is a factor. Its log density (a sum of terms
over views of its operands, see ``families.base``) is expanded, substituting
each argument expression, into a sum of *monomials*: a coefficient times a
product of slots, each slot either a sufficient statistic of one latent
variable (``Stat``) or a known quantity computed from hyperparameters and
data (``Known``). Tensor indices are einsum letters, summed.

Variational message passing (Winn & Bishop 2005): the complete conditional of
a latent variable v is in its variational family with natural parameter

    λ_v[stat] = Σ over monomials containing Stat(v, stat):  coef · Π E[other slots]

which is the prior's term plus one message per child. The model is
conditionally conjugate exactly when every monomial holds each latent
variable at most once, through one of its family's statistics; anything else
is refused here with the variable, the relation and the reason.

A categorical index ``beta[z]`` is a gate: a term touching gated operands is
multiplied by onehot(z)_g once, and the gated operands take index g.
"""

from __future__ import annotations

from .expansion import Expander
from .families import FAMILIES
from .missing import PRESENT, missing_rule
from .model import (
    Model,
    VarDef,
)
from .terms import (
    Analysis,
    Conditional,
    Factor,
    Known,
    Message,
    Monomial,
)


def expand_factor(model: Model, var: VarDef) -> Factor:
    expander = Expander(model, var)
    monomials = expander.expand()
    if var.observed and missing_rule(model, var) == "yes":  # a missing entry drops its terms
        mask = Known(PRESENT, (expander.child_ref,), (), var.plates)
        monomials = [Monomial(m.coef, (*m.slots, mask)) for m in monomials]
    return Factor(
        var.name, var.family, var.plates, tuple(monomials),
        tuple(sorted(expander.index_dims.items())), tuple(sorted(expander.gates.items())),
        var.span,
    )


def analyse(model: Model) -> Analysis:
    """Expand every factor and collect each latent variable's complete conditional."""
    factors = tuple(expand_factor(model, var) for var in model.variables)
    conditionals = []
    for var in model.latents:
        family = FAMILIES[var.family]
        messages = []
        for fi, factor in enumerate(factors):
            for mi, monomial in enumerate(factor.monomials):
                for stat in monomial.stats_of(var.name):
                    messages.append(Message(fi, mi, stat))
        conditionals.append(Conditional(var.name, family.variational or "", family.stats,
                                        tuple(messages)))
    return Analysis(model, factors, tuple(conditionals))
