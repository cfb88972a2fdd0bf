"""`cemodel check`: each variable's family, role and complete conditional, in readable math."""

from __future__ import annotations

from .conjugacy import Known, Stat
from .families import FAMILIES
from .plan import InferencePlan, describe_slot

_FAMILY_NAMES = {
    "dirichlet": "Dirichlet", "categorical": "Categorical", "beta": "Beta", "gamma": "Gamma",
    "normal": "Normal", "mvn": "MultivariateNormal", "wishart": "Wishart",
    "bernoulli": "Bernoulli",
}


def _ref(name: str, plan: InferencePlan) -> str:
    var = plan.model.var(name)
    if not var.plates:
        return name
    return f"{name}[{', '.join(plan.model.plate(p).index for p in var.plates)}]"


def _message_text(plan: InferencePlan, factor_index: int, monomial_index: int,
                  target: Stat) -> str:
    """coef · Π E[slots], with the sums over the factor's free plates and letters."""
    model = plan.model
    factor = plan.analysis.factors[factor_index]
    monomial = factor.monomials[monomial_index]
    var = model.var(target.var)
    others = monomial.without(target)
    index_of = {p.name: p.index for p in model.plates}
    gates = dict(factor.gates)
    # rename: factor plates bound to the target keep the target's index letters
    bound = {}
    for own, entry in zip(var.plates, target.index, strict=True):
        bound[entry] = index_of[own]
    summed = [index_of[p] for p in factor.plates if p not in bound]
    parts = []
    for slot in others:
        text = describe_slot(slot)
        for plate, letter in index_of.items():
            text = text.replace(f"[{plate}", f"[{letter}").replace(f", {plate}", f", {letter}")
        for gate, gvar in gates.items():
            if gate in bound:
                text = text.replace(gate, bound[gate])
        parts.append(text)
    coef = monomial.coef
    body = " · ".join(parts) if parts else ""
    if coef == 1.0:
        term = body or "1"
    elif coef == -1.0:
        term = f"-{body}" if body else "-1"
    else:
        term = f"{coef:g}·{body}" if body else f"{coef:g}"
    letters = [t for t in sorted({t for s in others for t in s.tensor})
               if t not in target.tensor and t not in bound]
    gate_sums = [g for g in gates if g not in bound and any(
        isinstance(s, Stat) and g in s.index for s in others) and g not in letters]
    sums = summed + letters + gate_sums
    if sums:
        term = f"Σ_{{{','.join(sums)}}} {term}"
    return term


def conditional_text(plan: InferencePlan, name: str) -> str:
    """``q(beta[k]) = Dirichlet: log-stat coefficient = eta − 1 + Σ ...`` per statistic."""
    model = plan.model
    var = model.var(name)
    cond = plan.analysis.conditional(name)
    family = _FAMILY_NAMES[cond.family]
    lines = [f"q({_ref(name, plan)}) = {family}, natural parameters:"]
    for stat, _ in FAMILIES[var.family].stats:
        terms = []
        for message in cond.messages:
            if message.target.stat != stat:
                continue
            tensor = message.target.tensor
            text = _message_text(plan, message.factor, message.monomial, message.target)
            if tensor:
                text = text + f"  [{','.join(tensor)}]"
            terms.append(text)
        lines.append(f"  λ[{stat}] = " + ("\n      + ".join(terms) if terms else "0"))
    return "\n".join(lines)


def check_report(plan: InferencePlan) -> str:
    """The whole `cemodel check` report."""
    model = plan.model
    out = [f"model {model.name} ({model.source.filename})", ""]
    data_plate = model.data_plate
    out.append(f"data plate: {data_plate or '(none: every latent variable is global)'}")
    out.append("")
    for var in model.variables:
        family = FAMILIES[var.family]
        if var.observed:
            role = "observed"
        elif model.is_local(var):
            role = "local"
        else:
            role = "global"
        plates = f" in plates {', '.join(var.plates)}" if var.plates else ""
        out.append(f"{_ref(var.name, plan)} ~ {family.name}  [{role}{plates}]  "
                   f"({model.source.filename}:{var.span.line}:{var.span.column})")
        if not var.observed:
            for line in conditional_text(plan, var.name).split("\n"):
                out.append("    " + line)
        out.append("")
    out.append("inference methods:")
    for method, why in plan.methods:
        out.append(f"  {method:8s} {why}")
    return "\n".join(out)


__all__ = ["check_report", "conditional_text", "Known"]
