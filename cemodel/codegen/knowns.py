"""Known quantities: the functions of hyperparameters and data a module computes before
fitting (log x, lgamma(a), a one-hot of observed data, ...), each with its name and its
numpy expression. ``collect_knowns`` names them once for the whole module (lowering)."""

from __future__ import annotations

from ..missing import PRESENT
from ..model import (
    Model,
    RBin,
    RCall,
    RConst,
    RData,
    RDimSize,
    RExpr,
    RHyper,
    RNeg,
    RRepeat,
    RVar,
    RVector,
    SumIndex,
    data_refs,
)
from ..plan import InferencePlan
from ..terms import Known, render_expr
from .loops import dim_name, letter_var, plate_var

_NUMPY_FN = {
    "log": "np.log({})", "log1m": "np.log1p(-{})", "lgamma": "rt.gammaln({})",
    "lgamma_sum": "rt.lgamma_sum({})", "lgamma1p": "rt.gammaln({} + 1.0)",
    "inv": "rt.inv({})", "logdet": "rt.logdet({})", "square": "np.square({})",
    "lbeta": "rt.lbeta({})", "log_binom": "rt.log_binom({})",
    "log_negbin": "rt.log_negbin({})", "log_multinomial": "rt.log_multinomial({})",
    "wishart_lognorm": "rt.wishart_lognorm({})", "outer": "np.outer({0}, {0})",
    # stick-breaking weights (cemodel.augment_sticks): [k < K] and [j < k]
    "stick_keep": "(np.arange({0}) < {0} - 1) * 1.0", "stick_below": "np.tri({0}, {0}, -1)",
}


def collect_knowns(plan: InferencePlan) -> tuple[dict[str, tuple[str, str]], dict[str, Known]]:
    """Every known slot of the factors: Known.key -> (name, numpy expression), and
    Known.key -> the slot, in first-use order."""
    # a known quantity may be named as a data array or hyperparameter only when it is
    # that array or value itself: a constant named 'c' must not overwrite data 'c'; nor as
    # what the module makes of the model's dimensions, plates and letters, which a known,
    # its operands' names joined by "_", can spell too: hyperparameters n and K make n_K,
    # the size of dimension K, and t, c make t_c, the loop over a categorical's values
    model = plan.model
    taken = {d.name for d in model.data} | {h.name for h in model.hypers}
    taken |= {v.name for v in model.observed}  # an observed 'c' is no constant's name
    taken |= {dim_name(d.name) for d in model.dims}
    taken |= {name for p in model.plates for name in (
        plate_var(p.name), f"{p.name}_ptr", f"{p.name}_weight", f"base_{p.name}")}
    taken |= {"t_c"} | {letter_var(letter) for factor in plan.analysis.factors
                        for letter, _ in factor.index_dims}
    exprs: dict[str, tuple[str, str]] = {}
    slots: dict[str, Known] = {}
    used: set[str] = set()
    for factor in plan.analysis.factors:
        for monomial in factor.monomials:
            for slot in monomial.slots:
                if not isinstance(slot, Known) or slot.key in exprs:
                    continue
                if slot.fn == "value" and isinstance(slot.operands[0], RConst):
                    continue
                name, expr = known_numpy(model, slot)
                slots[slot.key] = slot
                base, n = name, 1
                while name in used or (name in taken and expr != name):
                    n += 1
                    name = f"{base}_{n}"
                used.add(name)
                exprs[slot.key] = (name, expr)
    return exprs, slots


def known_numpy(model: Model, slot: Known, prefix: str = "") -> tuple[str, str]:
    """A known slot's name and its numpy expression; ``prefix`` reads the names from the
    state (``s.``)."""
    ops = slot.operands
    first = ops[0]
    if slot.fn == "onehot":
        return first.name, first.name
    if slot.fn == PRESENT:  # 1 where the observation is given, 0 where missing
        return f"present_{first.name}", f"rt.present({prefix}bound, {first.name!r})"
    if isinstance(first, RRepeat) and slot.fn in ("value", "lgamma", "log"):
        # an elementwise view of a repeated scalar is that scalar
        inner = numpy_expr(first.value, prefix)
        expr = {"value": inner, "lgamma": f"rt.gammaln({inner})",
                "log": f"np.log({inner})"}[slot.fn]
        return _ident(slot.fn, first.value), expr
    args = ", ".join(numpy_expr(o, prefix) for o in ops)
    if slot.fn == "value":
        if isinstance(first, (RHyper, RVar)) or (isinstance(first, RData)
                                                and not _summed_axes(first)[0]):
            return first.name, prefix + first.name
        return _ident("value", first), numpy_expr(first, prefix)
    if slot.fn == "dim":
        if not isinstance(first, RVar):
            raise AssertionError(first)
        shape = model.var(first.name).shape
        return f"dim_{_ident('', first).strip('_')}", prefix + dim_name(shape[0])
    if slot.fn == "log" and (data_names(first) or isinstance(first, RHyper)):
        # log 0 of data, or of a known probability (a left-to-right chain's A, a weight of
        # 0), is finite (rt.LOG_ZERO) so that 0 · log 0 adds 0; < 0 is refused
        what = ("data " + ", ".join(f"'{n}'" for n in data_names(first))
                if data_names(first) else f"hyperparameter '{first.name}'")
        return _ident("log", *ops), f"rt.log_data({args}, {what!r})"
    if slot.fn == "wishart_lognorm":  # a prior's dof and scale checked, named
        dof, scale = (render_expr(o) for o in ops)
        labels = f"'Wishart scale matrix {scale}', 'Wishart degrees of freedom {dof}'"
        return _ident(slot.fn, *ops), f"rt.wishart_lognorm({args}, {labels})"
    if slot.fn in ("log_binom", "log_multinomial"):  # the counts checked, named
        counts = ops[1]
        given = (f", rt.given_entries({prefix}bound, {counts.name!r})"
                 if isinstance(counts, RVar) else "")  # a missing row is not checked
        return _ident(slot.fn, *ops), (f"rt.{slot.fn}({args}, "
                                       f"{_counts_label(model, slot.fn, *ops)}{given})")
    if slot.fn == "outer" and len(slot.tensor) == 3:  # a known matrix's rows' a_i a_iᵀ
        return _ident("outer", *ops), f"np.einsum('ik,il->ikl', {args}, {args})"
    if slot.fn == "lgamma_sum" and isinstance(first, RRepeat):
        return (_ident("lgamma_sum", first.value),
                f"rt.gammaln({prefix}{dim_name(first.dim)} * {numpy_expr(first.value, prefix)})")
    return _ident(slot.fn, *ops), _NUMPY_FN[slot.fn].format(args)


def _counts_label(model: Model, fn: str, trials: RExpr, counts: RExpr) -> str:
    """``what, plates`` of a Binomial's or Multinomial's counts for ``rt.log_binom``'s
    message: "Binomial data 'k' (trials 'm')" and the plates of the counts' leading axes
    (none where a ragged plate flattens them)."""
    family = "Binomial" if fn == "log_binom" else "Multinomial"
    name = counts.name if isinstance(counts, (RVar, RData)) else render_expr(counts)
    given = (f"'{trials.name}'" if isinstance(trials, (RData, RVar, RHyper))
             else render_expr(trials))
    what = f"{family} data '{name}' (trials {given})"
    plates: tuple[str, ...] = ()
    if isinstance(counts, RVar):
        own = model.var(counts.name).plates
        if not any(model.plate(p).ragged for p in own):
            plates = tuple(own)
    return f"{what!r}, {plates!r}"


def log_data_names(slots) -> tuple[str, ...]:
    """Covariates the model takes the log of (an exposure, a loading): they must be ≥ 0."""
    names: list[str] = []
    for slot in slots:
        if slot.fn == "log":
            names += [n for n in data_names(slot.operands[0]) if n not in names]
    return tuple(names)


def _summed_axes(ref: RData) -> tuple[list[int], list[int]]:
    """Axes of data ``ref`` that take a sum's index and lie before one of its plate axes
    (A[k, i]), and where they go to come last; ([], []) when they are last already."""
    summed = [a for a, i in enumerate(ref.indices) if isinstance(i, SumIndex)]
    plates = [a for a, i in enumerate(ref.indices) if not isinstance(i, SumIndex)]
    if not summed or not plates or max(plates) < min(summed):
        return [], []
    return summed, list(range(len(ref.indices) - len(summed), len(ref.indices)))


def data_names(expr: RExpr) -> list[str]:
    """The covariates (``data``) a known expression reads, in order. (Observed variables
    under a log are positive by their support: a Gamma's or Beta's value.)"""
    return list(dict.fromkeys(ref.name for ref in data_refs(expr)))


def _ident(fn: str, *operands: RExpr) -> str:
    parts = [fn] if fn and fn != "value" else []
    for op in operands:
        parts.append(_ident_expr(op))
    text = "_".join(p for p in parts if p)
    return text or "c"


def _ident_expr(expr: RExpr) -> str:
    if isinstance(expr, (RHyper, RVar, RData, RDimSize)):
        return expr.name
    if isinstance(expr, RConst):
        return "c"
    if isinstance(expr, RRepeat):
        return _ident_expr(expr.value)
    if isinstance(expr, RBin):
        return f"{_ident_expr(expr.left)}_{_ident_expr(expr.right)}"
    if isinstance(expr, RNeg):
        return _ident_expr(expr.operand)
    if isinstance(expr, RCall):
        return expr.func + "_" + "_".join(_ident_expr(a) for a in expr.args)
    return "c"


def numpy_expr(expr: RExpr, prefix: str = "") -> str:
    """numpy source for a known expression (hyperparameters, data, dims); ``prefix`` reads
    the names from the state (``s.``)."""
    if isinstance(expr, RConst):
        return repr(float(expr.value))
    if isinstance(expr, RData) and _summed_axes(expr)[0]:
        # the sum's index before a plate's: the summed axes moved last, as the known reads them
        source, destination = _summed_axes(expr)
        return (f"np.ascontiguousarray(np.moveaxis({prefix}{expr.name}, {source!r}, "
                f"{destination!r}))")
    if isinstance(expr, (RHyper, RVar, RData)):
        return prefix + expr.name
    if isinstance(expr, RDimSize):
        return prefix + dim_name(expr.name)
    if isinstance(expr, RRepeat):
        return f"np.full({prefix}{dim_name(expr.dim)}, {numpy_expr(expr.value, prefix)})"
    if isinstance(expr, RNeg):
        return f"(-{numpy_expr(expr.operand, prefix)})"
    if isinstance(expr, RBin):
        return f"({numpy_expr(expr.left, prefix)} {expr.op} {numpy_expr(expr.right, prefix)})"
    if isinstance(expr, RVector):
        return "np.array([" + ", ".join(numpy_expr(i, prefix) for i in expr.items) + "])"
    if isinstance(expr, RCall):
        return _numpy_call(expr, prefix)
    raise AssertionError(render_expr(expr))


def _numpy_call(expr: RCall, prefix: str) -> str:
    a = [numpy_expr(x, prefix) for x in expr.args]
    if expr.func in ("eye", "zeros", "ones", "full") and isinstance(expr.args[0], RConst):
        a[0] = str(int(expr.args[0].value))  # a literal size (eye(2))
    if expr.func == "eye":
        return f"np.eye({a[0]})"
    if expr.func == "zeros":
        return f"np.zeros({a[0]})"
    if expr.func == "ones":
        return f"np.ones({a[0]})"
    if expr.func == "full":
        return f"np.full({a[0]}, {a[1]})"
    if expr.func in ("exp", "log"):
        return f"np.{expr.func}({a[0]})"
    if expr.func == "reciprocal":
        return f"(1.0 / {a[0]})"
    if expr.func == "dot":
        return f"np.sum({a[0]} * {a[1]}, axis=-1)"
    raise AssertionError(render_expr(expr))
