"""The count b of an introduced Pólya-Gamma variable at a row (q(ω) = PG(b, c)):
1 for a Bernoulli, n for a Binomial, y + r for a NegativeBinomial
(``cemodel.families.polyagamma``; ``cemodel.augment_logistic`` admits only a number, a
scalar hyperparameter or data over the observation's plates for n and r)."""

from __future__ import annotations

from ..model import Model, RConst, RData, RExpr, RHyper, VarDef
from .loops import ArgRecorder, Layout


def pg_count(model: Model, layout: Layout, omega: VarDef, args: ArgRecorder) -> str:
    """The expression of b at the current row of ``omega``."""
    introduced = model.introduced_for(omega.name)
    assert introduced is not None
    of = model.var(introduced.of)
    if of.family == "Bernoulli·PG":
        return "1.0"
    known = _known(layout, of.args[0], args)
    if of.family == "Binomial·PG":
        return known
    row = ", ".join(layout.data_row(of.plates, args))
    return f"({args.use(of.name)}[{row}] + {known})"


def _known(layout: Layout, expr: RExpr, args: ArgRecorder) -> str:
    if isinstance(expr, RConst):
        return repr(float(expr.value))
    if isinstance(expr, RHyper):
        return args.use(expr.name)
    assert isinstance(expr, RData)
    row = ", ".join(layout.data_row(tuple(i.plate for i in expr.indices), args))
    return f"{args.use(expr.name)}[{row}]"
