"""The posterior of missing observed entries, as a table the runtime contracts after a fit.

A missing entry y_n of an observed leaf (``cemodel.missing``) is latent; its mean-field
conditional is q(y_n) ∝ exp E_q[log p(y_n | θ)] (Winn & Bishop 2005, §3: a variable's
update from its own factor), where the expectation is over the fitted q of everything else.
Its log density is linear in views of y (value, value·value, onehot, lgamma(y + 1), ...),
each with the coefficient E_q[rest of the monomial]. ``MISSING`` lists, per observed
variable that may miss entries, every monomial of its factor as an einsum over the state's
arrays (E[t] of globals and kept locals, knowns, data); ``rt.missing_posteriors`` contracts
them at the missing entries and turns the coefficients into the family's parameters.
"""

from __future__ import annotations

from typing import Any

from ..missing import PRESENT, missing_rule
from ..model import RConst, RRepeat, RVar
from ..terms import Known, Stat
from .context import EmitContext
from .loops import E_name, dim_name
from .pycode import Line, Node

__all__ = ["missing_table"]

_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _is_child(slot: object, name: str) -> bool:
    return (isinstance(slot, Known) and slot.fn not in (PRESENT, "dim")
            and len(slot.operands) == 1
            and isinstance(slot.operands[0], RVar) and slot.operands[0].name == name)


def _term(ctx: EmitContext, name: str, monomial: Any, chars: dict[str, str]
          ) -> tuple[Any, ...] | str:
    """(coef, child views, output subscript, operands) of one monomial, or why not."""
    plan, model = ctx.plan, ctx.model
    var = model.var(name)

    def sub(entries: tuple[str, ...]) -> str:
        return "".join(chars.setdefault(e, _CHARS[len(chars)]) for e in entries)

    views, out, operands = [], sub(var.plates), []
    coef = monomial.coef
    for slot in monomial.slots:
        if _is_child(slot, name):
            views.append(slot.fn)
            out += sub(slot.tensor)
        elif isinstance(slot, Known) and slot.fn == PRESENT:
            continue
        elif isinstance(slot, Stat):
            read = model.var(slot.var)
            if slot.var in plan.locals and slot.var not in plan.kept_locals:
                return f"it reads the local {slot.var}, whose q the fit does not keep per item"
            lead = "" if read.plates else "0"
            operands.append((E_name(slot.var, slot.stat), lead + sub(slot.index + slot.tensor)))
        elif slot.fn == "value" and isinstance(slot.operands[0], RConst):
            coef *= float(slot.operands[0].value)
        elif slot.fn == "onehot":  # integer data used as an index, one-hot over the letter
            size = dict(ctx.plan.analysis.factors[_factor(ctx, name)].index_dims)[slot.tensor[0]]
            operands.append((slot.operands[0].name,
                             f"onehot:{dim_name(size)}:{sub(slot.plates + slot.tensor)}"))
        else:
            known = ctx.kplan.knowns[slot.key][0]
            scalar = isinstance(slot.operands[0], RRepeat) and slot.fn in ("value", "lgamma",
                                                                            "log")
            operands.append((known, sub(slot.plates + (() if scalar else slot.tensor))))
    return coef, tuple(views), out, tuple(operands)


def _factor(ctx: EmitContext, name: str) -> int:
    return next(i for i, f in enumerate(ctx.plan.analysis.factors) if f.child == name)


def missing_table(ctx: EmitContext) -> list[Node]:
    """``MISSING = {name: {...}}``: per observed leaf that may miss entries, its family, plates
    and terms (or why its missing entries' posterior is not reported)."""
    model = ctx.model
    lines = ["MISSING = {  # observed entries that may be missing: their q (rt.missing_posteriors)"]
    for var in model.observed:
        if missing_rule(model, var) != "yes":
            continue
        chars: dict[str, str] = {var.plates[0]: "a"}  # its first plate: cut to the rows
        terms, why = [], None
        for monomial in ctx.plan.analysis.factors[_factor(ctx, var.name)].monomials:
            term = _term(ctx, var.name, monomial, chars)
            if isinstance(term, str):
                why = term
                break
            if term[1]:  # terms without y are constants of q(y)
                terms.append(term)
        lines.append(f"    {var.name!r}: {{\"family\": {var.family!r}, "
                     f"\"data_plate\": 'a', \"why_not\": {why!r},")
        lines.append(f"        \"terms\": {tuple(terms) if why is None else ()!r}}},")
    lines.append("}")
    return [Line(text) for text in lines]
