"""Stage 2½ (with ``cemodel.augment``): stick-breaking weights become their Beta sticks.

``pi ~ StickBreaking(alpha, K)`` is the truncated GEM(α) distribution (Blei & Jordan 2006,
"Variational inference for Dirichlet process mixtures", §3–4):

    v_k ~ Beta(1, α) (k < K),  v_K = 1,   π_k = v_k Π_{j<k} (1 − v_j)

π is not in a conjugate family of its own, but each read of it as a probability vector
(``z[n] ~ Categorical(pi)``) needs only

    log π_k = [k < K] log v_k + Σ_j [j < k] log(1 − v_j)                        (B&J eq. 20)

which is linear in the sticks' Beta statistics (log v, log(1 − v)). So this stage replaces
``pi`` by the latent sticks ``pi_sticks[k] ~ Beta(1, alpha)`` in a plate over K, and every
reference to ``pi`` by ``stick_breaking(pi_sticks)``, whose ``log`` view the conjugacy
analysis expands by the equation above (``stick_log_poly``). The sticks' complete
conditional is then the Beta of B&J eqs. 18–19,

    γ_k1 = 1 + Σ_n q(z_n = k),   γ_k2 = α + Σ_n Σ_{j>k} q(z_n = j),

and every method that applies to a Beta global (SVI, SSVI-A, SSVI, KLC) applies to them.
The K-th stick is read by nothing (v_K = 1): its factor stays its prior Beta(1, α), which
adds nothing to the bound. Nothing is done by name: every StickBreaking variable is
broken, wherever it is read; ``cemodel check`` lists the sticks as introduced.
"""

from __future__ import annotations

from dataclasses import replace

from .errors import CemConjugacyError, CemModelError, Span
from .model import (
    Introduced,
    Model,
    PlateDef,
    RCall,
    RConst,
    RDimSize,
    RExpr,
    RRepeat,
    RVar,
    VarDef,
    sub_exprs,
)

FAMILY = "StickBreaking"
STICKS = "stick_breaking"  # the function whose log view is the weights' (``stick_log_poly``)
# the known indicators of log π_k (their numpy form: ``codegen.knowns``), as ``check`` shows
# them: keep_k = [k < K], below_kj = [j < k]
STICK_TEXT = {"stick_keep": "[{0} < {K}]", "stick_below": "[{1} < {0}]"}


def break_sticks(model: Model) -> Model:
    """Replace every StickBreaking variable by its Beta sticks (see the module docstring)."""
    breaking = [v for v in model.variables if v.family == FAMILY]
    if not breaking:
        return model
    taken: set[str] = set()
    plates = list(model.plates)
    renames: dict[str, RCall] = {}
    sticks: dict[str, VarDef] = {}
    introduced: list[Introduced] = []
    for var in breaking:
        alpha, dim = _concentration(model, var)
        plate_name = model.fresh_name(f"sticks_{var.name}", taken | {p.name for p in plates})
        plates.append(PlateDef(plate_name, "k", dim, False, None, var.span, introduced=True))
        name = model.fresh_name(f"{var.name}_sticks", taken | {p.name for p in plates})
        sticks[var.name] = VarDef(name, (plate_name,), "Beta", (RConst(1.0, var.span), alpha),
                                  False, (), None, var.span, var.dist_span)
        renames[var.name] = RCall(STICKS, (RVar(name, (), var.span),), var.span)
        introduced.append(Introduced(
            name, var.name, dim,
            f"{var.name} ~ StickBreaking is broken into Beta(1, α) sticks, "
            f"{var.name}[k] = {name}[k]·Π_(j<k)(1 − {name}[j]) (the {dim}-th stick unread: "
            f"{name}[{dim}] = 1), so "
            f"E[log {var.name}] is linear in E[log {name}] and E[log(1 − {name})] "
            f"(Blei & Jordan 2006, eqs. 18–20)",
        ))
    variables = [sticks.get(v.name) or replace(
        v, args=tuple(_rename(model, a, renames) for a in v.args))
                 for v in model.variables]
    collapse = model.collapse and tuple(sticks[n].name if n in sticks else n
                                        for n in model.collapse)
    return replace(model, variables=tuple(variables), plates=tuple(plates), collapse=collapse,
                   introduced=model.introduced + tuple(introduced))


def _concentration(model: Model, var: VarDef) -> tuple[RExpr, str]:
    """The constant α and the truncation K of ``StickBreaking(alpha, K)``."""
    (arg,) = var.args
    assert isinstance(arg, RRepeat) and isinstance(arg.dim, str)  # (resolve_vars.py: F(a, K) only)
    if var.observed:
        raise CemModelError(
            f"StickBreaking '{var.name}' cannot be observed: cemodel uses stick-breaking "
            "weights only as the latent probabilities of categoricals", var.span, model.source,
            hint="observe the categorical draws instead, or give observed weights a Dirichlet")
    if var.plates:
        raise CemModelError(
            f"StickBreaking '{var.name}' is inside plate '{var.plates[0]}': stick-breaking "
            "weights are supported at the top level only (one set of weights)", var.span,
            model.source, hint="move it out of the plate, or use Dirichlet(a, K) per element")
    latent = _latent_in(model, arg.value)
    if latent is not None:
        raise CemConjugacyError(
            f"not conjugate: the concentration of StickBreaking '{var.name}' depends on latent "
            f"'{latent}'; cemodel takes it as a constant", _span(arg.value, var), model.source,
            hint="give alpha a value or a hyperparameter (hyper alpha = 1.0), which "
                 "empirical Bayes can set: fit(..., learn=('alpha',))")
    return arg.value, arg.dim


def _latent_in(model: Model, expr: RExpr) -> str | None:
    if isinstance(expr, RVar):
        return expr.name if not model.var(expr.name).observed else None
    for child in sub_exprs(expr):
        found = _latent_in(model, child)
        if found:
            return found
    return None


def _rename(model: Model, expr: RExpr, renames: dict[str, RCall]) -> RExpr:
    """A whole argument naming a broken variable becomes ``stick_breaking(its sticks)``; the
    weights inside a larger expression are refused (only log π is linear in the sticks)."""
    if isinstance(expr, RVar) and expr.name in renames:
        return replace(renames[expr.name], span=expr.span)
    pending = list(sub_exprs(expr))
    while pending:
        inner = pending.pop()
        if isinstance(inner, RVar) and inner.name in renames:
            raise CemConjugacyError(
                f"not conjugate: stick-breaking weights '{inner.name}' inside an expression: "
                f"only E[log {inner.name}] is linear in the statistics of its sticks",
                inner.span, model.source,
                hint=f"use '{inner.name}' whole, as the probabilities of a Categorical or "
                     "Multinomial")
        pending += sub_exprs(inner)
    return expr


def _span(expr: RExpr, var: VarDef) -> Span:
    return getattr(expr, "span", var.span)


def stick_log_poly(expander, fn: str, expr: RCall, letters: tuple[str, ...]) -> list:
    """The expansion of ``fn(stick_breaking(v))_k`` (``expansion.Expander``): only the log
    view, log π_k = keep_k·log v_k + Σ_j below_kj·log(1 − v_j), keep_k = [k < K],
    below_kj = [j < k] (B&J eq. 20)."""
    (sticks,) = expr.args
    assert isinstance(sticks, RVar)
    model = expander.model
    owner = next(i.of for i in model.introduced if i.name == sticks.name)
    if fn != "log" or len(letters) != 1:
        raise CemConjugacyError(
            f"not conjugate: the {expander.role} of {expander.family.name} "
            f"'{expander.var.name}' reads stick-breaking weights '{owner}' through "
            f"E[{fn}], but only E[log {owner}] is linear in the statistics of its sticks",
            expr.span, model.source,
            hint=f"use '{owner}' only as the probabilities of a Categorical or Multinomial")
    (k,) = letters
    dim = model.plate(model.var(sticks.name).plates[0]).dim
    j = expander.fresh(dim)
    size = RDimSize(dim, expr.span)
    log_v = expander.leaf(sticks, "log", (k,), domain="unit")  # a stick is a probability
    log1m_v = expander.leaf(sticks, "log1m", (j,), domain="unit")
    keep = expander.known("stick_keep", (size,), (k,))
    below = expander.known("stick_below", (size,), (k, j))
    return [(1.0, (keep, log_v)), (1.0, (below, log1m_v))]


def stick_variables(model: Model) -> tuple[Introduced, ...]:
    """The introduced sticks of every stick-breaking variable (``Introduced.of`` names it)."""
    read: set[str] = set()
    pending = [a for v in model.variables for a in v.args]
    while pending:
        expr = pending.pop()
        if isinstance(expr, RCall) and expr.func == STICKS:
            read |= {a.name for a in expr.args if isinstance(a, RVar)}
        pending += sub_exprs(expr)
    return tuple(i for i in model.introduced if i.name in read)
