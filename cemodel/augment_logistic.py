"""Stage 2½ (first rule): the Pólya-Gamma augmentation of a logistic link.

``observe y ~ Bernoulli(logistic(eta))`` (and ``Binomial(n, logistic(eta))``,
``NegativeBinomial(r, logistic(eta))``) is not conjugate as written: log(1 + e^η) is linear
in no statistic of η. With ω ~ PG(b, 0) introduced per observation, the joint density is
κ η − ω η²/2 + const (Polson, Scott & Windle 2013, JASA; ``cemodel.families.polyagamma``):
Gaussian in η, so conjugate for every Normal/MVN variable that η is linear in, and q(ω) is
PG(b, c) with c² = E[η²]. The MF fixed point is Jaakkola & Jordan's (2000) bound.

The rule is by form, never by name: any observed Bernoulli, Binomial or NegativeBinomial
whose probability is ``logistic(eta)`` with ``eta`` linear in latent Normal/MVN variables
(``dot(x[n], w)``, sums, offsets, ``b[group[n]]``, ``w[z[n]]``) gets its ω. A logistic
anywhere else, or of a predictor that is not linear in such variables, is refused with
the place and what would make it work.
"""

from __future__ import annotations

from dataclasses import replace

from .errors import CemConjugacyError
from .families.polyagamma import AUGMENTED
from .model import (
    GateIndex,
    Introduced,
    Model,
    PlateIndex,
    RBin,
    RCall,
    RConst,
    RData,
    RExpr,
    RHyper,
    RSum,
    RVar,
    VarDef,
    sub_exprs,
)

LINEAR_FAMILIES = ("Normal", "MultivariateNormal")
_WHERE = "the probability of an observed Bernoulli, Binomial or NegativeBinomial"


def augment_logistic(model: Model) -> Model:
    """Introduce ω for every observed count whose probability is ``logistic(eta)`` (eta
    linear in Normal/MVN variables); refuse any other logistic, with the place and why."""
    variables: list[VarDef] = []
    introduced: list[Introduced] = []
    taken: set[str] = set()
    for var in model.variables:
        link = _link(var)
        for position, arg in enumerate(var.args):
            if link is not None and position == len(var.args) - 1:
                _refuse_logistic(model, link.args[0], var, inside=True)
            else:
                _refuse_logistic(model, arg, var)
        if link is None:
            variables.append(var)
            continue
        eta = link.args[0]
        _check_linear(model, eta, var)
        name = model.fresh_name(f"{var.name}_omega", taken)
        omega = VarDef(name, var.plates, "PolyaGamma", (), False, (), None, var.span,
                       var.dist_span)
        ref = RVar(name, tuple(PlateIndex(p, var.span) for p in var.plates), var.span)
        known = var.args[:-1]  # Binomial's n, NegativeBinomial's r
        for arg in known:
            _check_total(model, arg, var)
        spec = AUGMENTED[var.family]
        variables += [omega, replace(var, family=spec.name, args=(*known, ref, eta))]
        introduced.append(Introduced(name, var.name, "", _why(model, var, name)))
    if not introduced:
        return model
    return replace(model, variables=tuple(variables),
                   introduced=model.introduced + tuple(introduced))


def _link(var: VarDef) -> RCall | None:
    """``logistic(eta)`` when it is the whole probability of an observed count, else None."""
    if not var.observed or var.family not in AUGMENTED or not var.args:
        return None
    p = var.args[-1]
    return p if isinstance(p, RCall) and p.func == "logistic" else None


def _why(model: Model, var: VarDef, name: str) -> str:
    known = ", ".join(known_text(model, a) for a in var.args[:-1])
    b = count_text(model, replace(var, family=AUGMENTED[var.family].name))
    return (f"{var.name} ~ {var.family}({known + ', ' if known else ''}logistic(η)) is "
            f"Gaussian in η given a Pólya-Gamma {name} ~ PG({b}, 0) (Polson, Scott & Windle "
            f"2013); q({name}) = PG({b}, c), c² = E[η²]")


def known_text(model: Model, expr: RExpr) -> str:
    """A count's n or r as written (data with its plates' index letters)."""
    if isinstance(expr, RConst):
        return f"{expr.value:g}"
    if isinstance(expr, RData):
        return f"{expr.name}[{', '.join(model.plate(i.plate).index for i in expr.indices)}]"
    return getattr(expr, "name", "?")


def count_text(model: Model, of: VarDef) -> str:
    """b of PG(b, ·) for the augmented observed count ``of``: 1, n or y + r."""
    if of.family == "Bernoulli·PG":
        return "1"
    known = known_text(model, of.args[0])
    if of.family == "Binomial·PG":
        return known
    ref = of.name if not of.plates else (
        f"{of.name}[{', '.join(model.plate(p).index for p in of.plates)}]")
    return f"{ref} + {known}"


def _refuse_logistic(model: Model, expr: RExpr, var: VarDef, inside: bool = False) -> None:
    """A logistic is the whole probability of an observed count, and nowhere else."""
    if isinstance(expr, RCall) and expr.func == "logistic":
        if inside:
            why = "a logistic of a logistic is not linear in any variable"
            hint = "write the linear predictor alone: logistic(dot(x[n], w) + b)"
        elif var.observed and var.family in AUGMENTED:
            why = "logistic(η) must be the whole probability, not part of it"
            hint = f"write {var.family}(logistic(eta)) with eta the whole linear predictor"
        else:
            kind = "an observed" if var.observed else "a latent"
            why = (f"logistic(η) is supported as {_WHERE} (where cemodel introduces a "
                   f"Pólya-Gamma variable), not in {kind} {var.family}")
            hint = ("for a probability with a Beta prior write the Beta variable itself; "
                    "for a binary outcome write observe y[n] ~ Bernoulli(logistic(eta))")
        raise CemConjugacyError(f"not conjugate: {why}", expr.span, model.source, hint=hint)
    for child in sub_exprs(expr):
        _refuse_logistic(model, child, var, inside)


def _latent(model: Model, expr: RExpr) -> bool:
    """Whether ``expr`` reads a latent variable (an index ``z[n]`` counts: it selects)."""
    if isinstance(expr, RVar):
        return not model.var(expr.name).observed or any(
            isinstance(i, GateIndex) and _latent(model, i.var) for i in expr.indices)
    if isinstance(expr, RData):
        return False
    return any(_latent(model, child) for child in sub_exprs(expr))


def _check_linear(model: Model, expr: RExpr, var: VarDef) -> None:
    """η must be linear in latent Normal/MVN variables (known factors and offsets allowed)."""
    def refuse(why: str, at: RExpr, hint: str) -> None:
        raise CemConjugacyError(
            f"not conjugate: logistic(η) needs η linear in Normal or MultivariateNormal "
            f"variables, but {why}", getattr(at, "span", var.span), model.source, hint=hint)

    if isinstance(expr, RVar):
        ref = model.var(expr.name)
        if not ref.observed and ref.family not in LINEAR_FAMILIES:
            refuse(f"'{expr.name}' has a {ref.family} prior", expr,
                   f"give '{expr.name}' a Normal or MultivariateNormal prior")
        return
    if isinstance(expr, RSum):
        refuse("a sum over an index is not such a predictor", expr,
               "for the inner product of two vectors use dot(a, b)")
    if isinstance(expr, RCall) and expr.func in ("exp", "log") and _latent(model, expr):
        refuse(f"{expr.func}() of a latent variable is not linear", expr,
               "move the variable out of the function: a known transform of data is fine")
    if isinstance(expr, RBin) and expr.op == "/" and _latent(model, expr.right):
        refuse("a latent variable divides it", expr, "divide by a known quantity only")
    if (isinstance(expr, RBin) and expr.op == "*" or isinstance(expr, RCall)
            and expr.func == "dot") and all(_latent(model, a) for a in sub_exprs(expr)):
        refuse("it multiplies two latent variables", expr,
               "multiply each latent variable by known quantities only (data, constants): "
               "dot(x[n], w), not dot(v, w) or w * w")
    for child in sub_exprs(expr):
        _check_linear(model, child, var)


def _check_total(model: Model, expr: RExpr, var: VarDef) -> None:
    """Binomial's n and NegativeBinomial's r set PG(b, ·)'s b at each observation: a
    constant, a scalar hyperparameter or data over the observation's plates."""
    if isinstance(expr, RConst):
        return
    if isinstance(expr, RHyper) and not model.hyper(expr.name).shape:
        return
    if isinstance(expr, RData) and all(isinstance(i, PlateIndex) for i in expr.indices) and \
            tuple(i.plate for i in expr.indices) == var.plates:
        return
    name = "n" if var.family == "Binomial" else "r"
    raise CemConjugacyError(
        f"not supported: with a logistic link the {name} of {var.family} must be a number, "
        f"a scalar hyperparameter or data indexed like '{var.name}'",
        getattr(expr, "span", var.span), model.source,
        hint=f"declare it as data over the same plates, e.g. data {name}_obs[...] : real")
