"""`cemodel check`: each variable's family, role and complete conditional, in readable math.

The conditional is shown in the family's usual parameters, e.g.

    q(beta[k]) = Dirichlet(α)
        α_v = eta + Σ_{d,n} [w[d, n] = v]·q(z[d, n] = k)

built from the natural-parameter messages of ``cemodel.conjugacy``: each usual
parameter is ``scale·λ[stat] + offset`` (Dirichlet α = λ + 1, Normal precision
= −2λ[x²], Wishart dof = 2λ[log|Λ|] + D + 1 ...), and like terms are merged.
"""

from __future__ import annotations

from .codegen.symmetries import scale_symmetries
from .families import FAMILIES
from .missing import missing_text
from .plan import InferencePlan
from .render import conditional_text


def check_report(plan: InferencePlan) -> str:
    """The whole `cemodel check` report."""
    model = plan.model
    out = [f"model {model.name} ({model.source.filename})", ""]
    out.append(f"data plate: {model.data_plate or '(none: every latent variable is global)'}")
    out.append("")
    for dim in model.unused_dims:
        out.append(f"dim {dim.name} ({model.source.filename}:{dim.span.line}): declared and "
                   "used nowhere, left out (delete it, or use it)")
    if model.unused_dims:
        out.append("")
    if model.introduced:
        out.append("introduced by cemodel (to make the model conditionally conjugate):")
        for item in model.introduced:
            out.append(f"  {item.name}: {item.why}")
        out.append("")
    if model.blocks or model.declined_blocks:
        out.append("joint blocks (one factor q(mean, precision) instead of two):")
        for block in model.blocks:
            out.append(f"  {block.name} = ({block.mean.name}, {block.precision.name}): "
                       f"{block.why}")
        for block in model.declined_blocks:
            out.append(f"  {block.mean.name}, {block.precision.name} stay two factors "
                       f"q({block.mean.name}) q({block.precision.name}): {block.why}")
        out.append("")
    for var in model.variables:
        family = FAMILIES[var.family]
        if var.observed:
            role = "observed"
        elif model.introduced_for(var.name) is not None:
            role = "introduced, local" if model.is_local(var) else "introduced"
        elif model.is_local(var):
            role = "local"
        else:
            role = "global"
        plates = f" in plates {', '.join(var.plates)}" if var.plates else ""
        ref = var.name if not var.plates else (
            f"{var.name}[{', '.join(model.plate(p).index for p in var.plates)}]")
        out.append(f"{ref} ~ {family.name}  [{role}{plates}]  "
                   f"({model.source.filename}:{var.span.line}:{var.span.column})")
        if not var.observed:
            for line in conditional_text(plan, var.name).split("\n"):
                out.append("    " + line)
        else:
            out.append("    " + missing_text(model, var, ref))
        out.append("")
    out.append("global steps (--method):")
    for method, why in plan.methods:
        out.append(f"  {method:8s} {why}")
    out.append("local steps (--local), each combines with every global step that applies:")
    for step, why in plan.local_steps:
        out.append(f"  {step:8s} {why}")
    symmetries = scale_symmetries(plan)
    if symmetries:
        out.append("scale symmetries (the data see only the product; after each global step "
                   "the best scale between them, in closed form):")
    for sym in symmetries:
        part = ("" if sym.up_part is None else
                f", one factor per index of plate '{model.var(sym.up).plates[sym.up_part]}'")
        out.append(f"  {sym.up} scaled by a factor and {sym.down} by its inverse{part}")
    if plan.collapse is not None:
        c = plan.collapse
        out.append(f"KLC collapse set (--method klc; chosen by {c.chosen_by}, "
                   "Hensman et al. 2012 §3.4):")
        out.append(f"  X (integrated out): {', '.join(c.collapsed)}")
        out.append(f"  Z (parameterised):  {', '.join(c.parameterised)}")
        for reason in c.reasons:
            out.append(f"  - {reason}")
    return "\n".join(out)
