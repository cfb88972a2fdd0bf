"""Stage 2½: Model -> Model with the latent variables that make it conditionally conjugate.

A count observed as ``y ~ Poisson(sum(r_k for k in K))`` is not conjugate as written:
ln(Σ_k r_k) is linear in no statistic of the terms. It is the sum of independent counts
c_k ~ Poisson(r_k) (the superposition property), and given y the split (c_1 … c_K) is
Multinomial(y, r / Σ r). With the split made a latent variable, each term enters only as
c_k ln r_k − r_k, which is linear in E[ln ·] and E[·] of every factor of a product r_k:
Gamma factors are conjugate (GaP-NMF, Hoffman et al. 2010; the SSVI paper's eq. 12).

This stage introduces, for each such y, the latent ``y_split`` (q = Multinomial(y, φ), one
per element of y's plates) and rewrites y's factor to ``Poisson·split`` (see
``cemodel.families.split``). Nothing is done by name: any observed Poisson whose rate is a
``sum(... for k in K)`` is split, whatever its terms. ``cemodel check`` lists what was
introduced. Each further augmentation has its own module, run first: a logistic link's
Pólya-Gamma variables (``cemodel.augment_logistic``) and an observed StudentT as a Normal
with a Gamma precision scale (``cemodel.augment_student_t``).
"""

from __future__ import annotations

from dataclasses import replace

from .augment_logistic import augment_logistic
from .augment_sticks import break_sticks
from .augment_student_t import scale_mixtures
from .errors import CemConjugacyError, Span
from .model import (
    Introduced,
    Model,
    PlateIndex,
    RExpr,
    RSum,
    RVar,
    VarDef,
    sub_exprs,
)


def augment(model: Model) -> Model:
    """Introduce the split counts of every observed Poisson whose rate is a sum; refuse a
    sum anywhere else (with the place and the reason). First the other augmentations:
    stick-breaking weights into their Beta sticks (``cemodel.augment_sticks``), logistic
    links (``cemodel.augment_logistic``), an observed StudentT as a Normal with a Gamma
    precision scale (``cemodel.augment_student_t``)."""
    model = scale_mixtures(augment_logistic(break_sticks(model)))
    variables: list[VarDef] = []
    introduced: list[Introduced] = []
    taken: set[str] = set()  # the names given here
    for var in model.variables:
        split_rate = (var.family == "Poisson" and var.observed and isinstance(var.args[0], RSum))
        for position, arg in enumerate(var.args):
            if split_rate and position == 0:
                _refuse_nested(model, arg.body, var)
            else:
                _refuse_nested(model, arg, var)
        if not split_rate:
            variables.append(var)
            continue
        rate = var.args[0]
        assert isinstance(rate, RSum)
        name = model.fresh_name(f"{var.name}_split", taken)
        split = VarDef(name, var.plates, "SplitCounts", (), False, (rate.dim,), None,
                       var.span, var.dist_span)
        ref = RVar(name, tuple(PlateIndex(p, var.span) for p in var.plates), var.span)
        variables += [split, replace(var, family="Poisson·split", args=(ref, rate))]
        introduced.append(Introduced(
            name, var.name, rate.dim,
            f"{var.name} ~ Poisson(sum over {rate.index} in {rate.dim}) is the sum of "
            f"independent Poisson counts, one per term; {name} holds them "
            f"(q = Multinomial({var.name}, φ) over {rate.dim})",
        ))
    return model.with_introduced(variables, introduced)


def _refuse_nested(model: Model, expr: RExpr, var: VarDef) -> None:
    """A sum is split only as the whole rate of an observed Poisson."""
    if isinstance(expr, RSum):
        if var.family == "Poisson":  # (a latent Poisson is refused by the model builder)
            why = "the sum must be the whole rate, not part of it"
            hint = "move constant factors inside the sum: sum(c * r[k] for k in K)"
        else:
            why = (f"a sum over an index is supported as the rate of an observed Poisson "
                   f"(where cemodel introduces the split counts), not in a {var.family}")
            hint = "for the inner product of two vectors use dot(a, b)"
        raise CemConjugacyError(f"not conjugate: {why}", _span(expr, var), model.source, hint=hint)
    for child in sub_exprs(expr):
        _refuse_nested(model, child, var)


def _span(expr: RExpr, var: VarDef) -> Span:
    return getattr(expr, "span", var.span)
