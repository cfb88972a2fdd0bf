"""Stage 2¾: Model -> Model with joint blocks q(mean, precision) where they are conjugate.

``mu ~ Normal(m0, kappa * tau)``, ``tau ~ Gamma(a, b)`` is the Normal-Gamma prior (with
``MultivariateNormal`` and ``Wishart``, the Normal-Wishart). Mean field would fit it as
q(mu) q(tau). When every other variable reads ``mu`` only as the mean of a Normal whose
precision is ``tau`` itself (times a constant), each of their terms is linear in the joint
statistics (τ, log τ, τμ, τμ²), so the complete conditional of the pair is again
Normal-Gamma and the pair can be one factor (Bishop 2006, §10.2.1: the Bayesian Gaussian
mixture; Hensman et al. 2012, Table 1). The joint factor is exact where mean field is not:
iid Normal data with a Normal-Gamma prior get their exact posterior.

This stage finds every such pair, by the form of the model alone, and replaces the two
variables by one ``Normal-Gamma`` / ``Normal-Wishart`` variable named ``<mu>_<tau>``; each
reference to a member becomes a reference to the block with ``part`` = "mean" or
"precision" (``cemodel.conjugacy`` fuses the members' statistics met in one term into the
block's, see ``cemodel.families.blocks``). A pair whose mean is read any other way stays
mean field. ``cemodel check`` lists the blocks formed, and the pairs left as two factors with
the statement that kept them apart.
"""

from __future__ import annotations

from dataclasses import replace

from .families.blocks import BLOCKS
from .model import (
    Block,
    GateIndex,
    Model,
    PlateIndex,
    RBin,
    RCall,
    RConst,
    RExpr,
    RNeg,
    RRepeat,
    RSum,
    RVar,
    RVector,
    VarDef,
    expr_vars,
    sub_exprs,
)


def form_blocks(model: Model) -> Model:
    """Fit each conjugate (mean, precision) pair as one joint factor."""
    variables = list(model.variables)
    blocks: list[Block] = []
    taken: set[str] = set()  # the names given here
    declined: list[Block] = []
    for mean in model.latents:
        found = _prior_pair(model, mean)
        if isinstance(found, Block):
            declined.append(found)
            continue
        if found is None:
            continue
        precision, scale = found
        if any(precision.name in (b.mean.name, b.precision.name) for b in blocks):
            continue
        broken = _broken_by(model, mean, precision)
        if broken is not None:
            declined.append(Block("", mean, precision, broken))
            continue
        position = _position(variables, mean, precision)
        if position is None:
            continue
        family = BLOCKS[(mean.family, precision.family)]
        name = model.fresh_name(f"{mean.name}_{precision.name}", taken)
        var = VarDef(name, mean.plates, family.name,
                     (mean.args[0], scale, *precision.args), False, precision.shape, None,
                     mean.span, mean.dist_span)
        variables = [v for v in variables if v.name not in (mean.name, precision.name)]
        variables.insert(position, var)
        blocks.append(Block(
            name, mean, precision,
            f"{mean.name}'s prior precision is {precision.name} scaled by a constant, and "
            f"every child reads {mean.name} as a mean with precision {precision.name}: the "
            f"pair's complete conditional is {family.name}, fitted as one factor",
        ))
    if not blocks:
        return replace(model, declined_blocks=tuple(declined)) if declined else model
    renames = {b.mean.name: (b.name, "mean") for b in blocks} | {
        b.precision.name: (b.name, "precision") for b in blocks}
    variables = [replace(v, args=tuple(_rename(a, renames) for a in v.args)) for v in variables]
    return replace(model, variables=tuple(variables), blocks=tuple(blocks),
                   declined_blocks=tuple(declined))


def _prior_pair(model: Model, mean: VarDef) -> tuple[VarDef, RExpr] | Block | None:
    """(precision, scale) when ``mean``'s prior precision is ``scale`` × a latent Gamma /
    Wishart precision over the same plates (the Normal-Gamma / Normal-Wishart prior); a
    declined ``Block`` saying why when the pair is of a kind no joint family holds."""
    if mean.family not in ("Normal", "MultivariateNormal") or mean.observed:
        return None
    found = _scaled_precision(mean.args[1])
    if found is None:
        return None
    ref, scale = found
    precision = model.var(ref.name)
    if (not precision.observed and precision.family in ("Gamma", "Wishart")
            and (mean.family, precision.family) not in BLOCKS):
        kinds = " and ".join(f"{m}–{p}" for m, p in BLOCKS)
        return Block("", mean, precision, (
            f"{mean.name}'s prior precision is a constant times the {precision.family} "
            f"{precision.name}, and cemodel's joint factors are {kinds} only, so the pair "
            f"is fitted by mean field (its posterior spread is then under-estimated)"))
    if (precision.observed or (mean.family, precision.family) not in BLOCKS
            or precision.plates != mean.plates
            or [i.plate if isinstance(i, PlateIndex) else None for i in ref.indices]
            != list(mean.plates)
            or _reads(mean.args[0], {precision.name, mean.name})
            or _reads(scale, {precision.name, mean.name})):
        return None
    return precision, scale


def _broken_by(model: Model, mean: VarDef, precision: VarDef) -> str | None:
    """Why a child keeps the pair from being one factor, or None: each child must be a Normal
    of the mean's kind that reads ``mean`` once, in its mean, with the matching element of
    ``precision`` (times a constant) as its precision."""
    for child in model.variables:
        if child.name in (mean.name, precision.name):
            continue
        uses = [r for a in child.args for r in _refs(a, mean.name)]
        if not uses:
            continue
        where = f"'{child.name}' ({model.source.filename}:{child.span.line})"
        if child.family != mean.family:
            return f"{where} reads {mean.name} in a {child.family}"
        if len(uses) != 1 or _refs(child.args[1], mean.name):
            return f"{where} reads {mean.name} more than once or in its precision"
        used = _scaled_precision(child.args[1])
        if (used is None or used[0].name != precision.name
                or _key(used[0]) != _key(uses[0])
                or _reads(used[1], {precision.name, mean.name})):
            return (f"{where} reads {mean.name} with a precision other than the matching "
                    f"{precision.name} times a constant")
        if _refs(child.args[0], precision.name):
            return f"{where} reads {precision.name} in its mean"
    return None


def _scaled_precision(expr: RExpr) -> tuple[RVar, RExpr] | None:
    """``tau[i]``, ``c * tau[i]`` or ``tau[i] * c`` -> (the reference, c)."""
    if isinstance(expr, RVar):
        return expr, RConst(1.0, expr.span)
    if isinstance(expr, RBin) and expr.op == "*":
        for ref, scale in ((expr.right, expr.left), (expr.left, expr.right)):
            if isinstance(ref, RVar) and not expr_vars(scale):
                return ref, scale
    return None


def _position(variables: list[VarDef], mean: VarDef, precision: VarDef) -> int | None:
    """Where the block goes in ``variables`` once both members are removed: at the
    precision's place, unless the mean's prior reads a variable declared after it."""
    names = [v.name for v in variables]
    first = names.index(precision.name)
    needs = {n for a in mean.args for n, _ in expr_vars(a)} - {precision.name}
    between = names[first + 1:names.index(mean.name)]
    if needs & set(between):
        return None
    return first


def _refs(expr: RExpr, name: str) -> list[RVar]:
    found = [expr] if isinstance(expr, RVar) and expr.name == name else []
    if isinstance(expr, RVar):
        for index in expr.indices:
            if isinstance(index, GateIndex) and isinstance(index.var, RVar):
                found += _refs(index.var, name)
    for child in sub_exprs(expr):
        found += _refs(child, name)
    return found


def _reads(expr: RExpr, names: set[str]) -> bool:
    return any(n in names for n, _ in expr_vars(expr))


def _key(ref: RVar) -> tuple:
    """The indices of a reference, without spans: ``mu[z[n]]`` and ``tau[z[n]]`` match."""
    key: list = []
    for index in ref.indices:
        if isinstance(index, PlateIndex):
            key.append(index.plate)
        elif isinstance(index, GateIndex):
            key.append((index.var.name, _key(index.var) if isinstance(index.var, RVar) else
                        tuple(i.plate for i in index.var.indices)))
        else:
            key.append(("sum", index.name))
    return tuple(key)


def _rename(expr: RExpr, renames: dict[str, tuple[str, str]]) -> RExpr:
    """Every reference to a block member becomes the block's, with its part."""
    if isinstance(expr, RVar):
        if expr.name in renames:
            name, part = renames[expr.name]
            return replace(expr, name=name, part=part)
        return expr
    if isinstance(expr, RBin):
        return replace(expr, left=_rename(expr.left, renames),
                       right=_rename(expr.right, renames))
    if isinstance(expr, RNeg):
        return replace(expr, operand=_rename(expr.operand, renames))
    if isinstance(expr, RCall):
        return replace(expr, args=tuple(_rename(a, renames) for a in expr.args))
    if isinstance(expr, RVector):
        return replace(expr, items=tuple(_rename(a, renames) for a in expr.items))
    if isinstance(expr, RRepeat):
        return replace(expr, value=_rename(expr.value, renames))
    if isinstance(expr, RSum):
        return replace(expr, body=_rename(expr.body, renames))
    return expr
