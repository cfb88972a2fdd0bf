"""Missing entries of observed variables: which may be missing, and how a factor drops them.

An observed entry given as NaN or masked is latent with its conditional (JAGS's NA). For an
observed *leaf* (read by no other variable) summing the entry out is exact and removes its
factor from the joint: ∫ p(y_n | θ) dy_n = 1. So every monomial of the leaf's factor is
multiplied by the known ``present(y)[n]`` (``conjugacy.expand_factor``; 1 given, 0 missing,
from the data by ``cemodel.runtime.missing``): the statistics, messages and ELBO terms of
a missing entry vanish and every other update is that of the model without it. The
entry's own posterior is its mean-field conditional q(y_n) ∝ exp E_q[log p(y_n | θ)]
(``codegen/missing.py``).

Rule by the form of the model (``missing_rule``), never by name: a dense (non-ragged)
observed variable inside a plate whose value no other variable reads and whose factor no
augmentation rewrote. Anything else is refused at binding with this rule's reason.
"""

from __future__ import annotations

from .model import GateIndex, Model, RExpr, RSum, RVar, VarDef, sub_exprs

__all__ = ["PRESENT", "missing_rule", "missing_text"]

PRESENT = "present"  # the known view: 1.0 where the entry is given, 0.0 where missing


def _reads(expr: RExpr, name: str) -> bool:
    if isinstance(expr, RVar) and expr.name == name:
        return True
    if isinstance(expr, RVar):
        return any(isinstance(i, GateIndex) and _reads(i.var, name) for i in expr.indices)
    if isinstance(expr, RSum):
        return _reads(expr.body, name)
    return any(_reads(e, name) for e in sub_exprs(expr))


def _at(model: Model, var: VarDef) -> str:
    return f"{model.source.filename}:{var.span.line}:{var.span.column}"


def missing_rule(model: Model, var: VarDef) -> str:
    """'yes' if entries of observed ``var`` may be missing, else 'no: <why>' (with the
    place in the model file that makes it so)."""
    name = var.name
    if not var.plates:
        return (f"no: {name} ({_at(model, var)}) is a single observation (in no plate), with "
                "nothing to fit if missing")
    ragged = next((p for p in var.plates if model.plate(p).ragged), None)
    if ragged is not None:
        return (f"no: {name} ({_at(model, var)}) lies in the ragged plate {ragged}, and missing "
                "entries are supported in dense arrays only")
    reader = next((v for v in model.variables
                   if v.name != name and any(_reads(a, name) for a in v.args)), None)
    if reader is not None:
        return (f"no: {name} is read by {reader.name} ({_at(model, reader)}), so a missing "
                "entry would be a latent variable the model does not describe (only observed "
                "leaves may miss entries)")
    introduced = next((i for i in model.introduced if i.of == name), None)
    if introduced is not None:
        return (f"no: the factor of {name} ({_at(model, var)}) is rewritten with the "
                f"introduced {introduced.name}, which a missing entry would leave undetermined")
    return "yes"


def missing_text(model: Model, var: VarDef, ref: str) -> str:
    """What ``cemodel check`` says of an observed variable's missing entries."""
    rule = missing_rule(model, var)
    if rule != "yes":
        return f"missing entries refused ({rule.removeprefix('no: ')})"
    return (f"missing entries (NaN, masked) are latent: summed out, their factor drops; "
            f"each one's q({ref}) ∝ exp E[log p({ref} | ...)] is in the fit's missing")
