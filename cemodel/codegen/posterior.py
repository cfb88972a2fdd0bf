"""``_result`` (the posterior in usual parameters, the expectations and the state of a fit)
and ``_learn`` (empirical Bayes for the learnable hyperparameters)."""

from __future__ import annotations

from ..augment_sticks import stick_variables
from ..missing import missing_rule
from ..model import RBin, RCall, RExpr, RHyper, RNeg, RRepeat, RVector
from ..terms import Known
from .context import EmitContext
from .knowns import known_numpy
from .pycode import Block, Comment, Function, Line, Node

# per variational family: the runtime's conversion to usual parameters and their names
_PARAMS = {
    "dirichlet": ("dirichlet_params", ("alpha",)),
    "categorical": ("categorical_params", ("probs",)),
    "beta": ("beta_params", ("a", "b")),
    "gamma": ("gamma_params", ("shape", "rate")),
    "normal": ("normal_params", ("mean", "precision")),
    "mvn": ("mvn_params", ("mean", "precision")),
    "wishart": ("wishart_params", ("dof", "scale")),
    "bernoulli": ("bernoulli_params", ("p",)),
    "split": ("categorical_params", ("probs",)),
    "polyagamma": ("polyagamma_params", ("c",)),
    "normal_gamma": ("normal_gamma_params", ("mean", "beta", "shape", "rate")),
    "normal_wishart": ("normal_wishart_params", ("mean", "beta", "dof", "scale")),
}


def result_function(ctx: EmitContext, streaming: bool) -> Function:
    """``_result(s, trace, converged, seconds, items=True)``; out of core (``streaming``)
    items=False leaves out the per-item posteriors (the state holds one minibatch)."""
    plan, layout = ctx.plan, ctx.layout
    body: list[Node] = [Line("posterior = {}")]
    body.append(Line("state = {" + ", ".join(
        f"{layout.lam(n, st)!r}: s.{layout.lam(n, st)}"
        for n in plan.globals for st, _ in ctx.stats(n)) + "}"))
    per_item: list[Node] = []
    for name in plan.globals + plan.kept_locals:
        into = per_item if name in plan.kept_locals else body
        into += _variable(ctx, name)
    if per_item and streaming:
        body.append(Block("if items", tuple(per_item),
                          comment="out of core the state holds one minibatch's items"))
    else:
        body += per_item
    components = _components(ctx)
    body += components
    missing = any(missing_rule(ctx.model, v) == "yes" for v in ctx.model.observed)
    if missing:  # the missing observed entries' q (cemodel.codegen.missing)
        body.append(Line("missing = rt.missing_posteriors(s, MISSING) if items else {}"))
    body.append(Line(
        "return rt.FitResult(posterior=posterior, elbo=np.array(trace), "
        "iterations=len(trace), converged=converged, seconds=seconds, "
        "dims=dict(s.bound.dims), hypers={"
        + ", ".join(f"{h.name!r}: s.{h.name}" for h in ctx.model.hypers) + "}, state=state"
        + (", notes={'components': components}" if components else "")
        + (", missing=missing)" if missing else ")")))
    return Function("_result", ("s", "trace", "converged", "seconds", "items=True"),
                    tuple(body),
                    "The posterior in usual parameters, expectations and the state"
                    + ("; items=False: the globals only." if per_item and streaming else "."))


def _components(ctx: EmitContext) -> list[Node]:
    """Of each stick-breaking variable (``cemodel.augment_sticks``): E[π], the expected items
    of each component and how many are used, from its sticks' q (``rt.stick_components``)."""
    nodes: list[Node] = []
    for item in stick_variables(ctx.model):
        var = ctx.var(item.name)
        alpha = known_numpy(ctx.model, Known("value", (var.args[1],), (), ()), "s.")[1]
        nodes.append(Line(f"components[{item.of!r}] = rt.stick_components("
                          f"{item.name}__a, {item.name}__b, {alpha})"))
    if nodes:
        nodes.insert(0, Line("components = {}"))
    return nodes


def _variable(ctx: EmitContext, name: str) -> list[Node]:
    """One variable's usual parameters, expectations (and a kept local's state)."""
    layout, var = ctx.layout, ctx.var(name)
    fn, names = _PARAMS[ctx.family(name)]
    lams = ", ".join(f"s.{layout.lam(name, st)}" for st, _ in ctx.stats(name))
    nodes: list[Node] = [Line(f"{', '.join(f'{name}__{n}' for n in names)} = rt.{fn}({lams})")]
    squeeze = "[0]" if not var.plates else ""
    nodes += [Line(f"posterior[{name + '.' + n!r}] = {name}__{n}{squeeze}") for n in names]
    block = ctx.model.block(name)
    if block is not None:  # the members' marginals: q(precision) exactly, E[mean]
        nodes.append(Comment(f"q({block.precision.name}) is the block's marginal; "
                             f"E[{block.mean.name}] its mean"))
        nodes += [Line(f"posterior[{block.precision.name + '.' + n!r}] = {name}__{n}{squeeze}")
                  for n in names[2:]]
        nodes.append(Line(f"posterior[{block.mean.name + '.mean'!r}] = "
                          f"{name}__mean{squeeze}"))
    for st, _ in ctx.stats(name):
        nodes.append(Line(f"posterior[{'E[' + st + ' ' + name + ']'!r}] = "
                          f"s.{layout.E(name, st)}{squeeze}"))
    if name in ctx.plan.kept_locals:
        for st, _ in ctx.stats(name):
            lam = layout.lam(name, st)
            nodes.append(Line(f"state[{lam!r}] = s.{lam}"))
    return nodes


def learn_function(ctx: EmitContext) -> Function:
    """Empirical Bayes for the learnable hyperparameters, then the knowns that use them."""
    body: list[Node] = []
    for item in ctx.plan.learnable:
        var = ctx.var(item.var)
        # a local's rows: only the minibatch's are fresh in a stochastic step
        rows = "[items]" if ctx.model.is_local(var) else ""
        other = f"s.{item.other}" if item.other and item.other.isidentifier() else item.other
        if item.kind == "dirichlet":
            call = (f"rt.learn_symmetric_dirichlet(s.{item.hyper}, "
                    f"s.{ctx.layout.E(var.name, 'log')}{rows})")
        elif item.kind == "gamma_shape":
            call = f"rt.learn_gamma_shape({other}, s.{ctx.layout.E(var.name, 'log')}{rows})"
        elif item.kind == "gamma_rate":
            call = f"rt.learn_gamma_rate({other}, s.{ctx.layout.E(var.name, 'value')}{rows})"
        else:  # a Beta's a from E[log x], its b from E[log(1 − x)]
            stat = "log" if item.kind == "beta_a" else "log1m"
            call = f"rt.learn_beta_param({other}, s.{ctx.layout.E(var.name, stat)}{rows})"
        body.append(Block(f"if {item.hyper!r} in learn", (
            Line(f"s.{item.hyper} = (1.0 - rho) * s.{item.hyper} + rho * {call}"),),
            comment=f"the prior of {item.var}"))
    body.append(Comment("known quantities that depend on hyperparameters"))
    learned = {i.hyper for i in ctx.plan.learnable}
    for key, slot in ctx.kplan.known_slots.items():
        if not any(_mentions(o, learned) for o in slot.operands):
            continue
        _, expr = known_numpy(ctx.model, slot, "s.")
        name = ctx.kplan.knowns[key][0]
        if f"s.{name}" != expr:
            body.append(Line(f"s.{name} = {expr}"))
    return Function("_learn", ("s", "learn", "rho=1.0", "items=slice(None)"), tuple(body),
                    "Empirical Bayes (Minka 2000): each learned hyperparameter a step rho "
                    "towards its ELBO maximiser given q.")


def _mentions(expr: RExpr, hypers: set[str]) -> bool:
    """Does a known expression read any of these hyperparameters?"""
    if isinstance(expr, RHyper):
        return expr.name in hypers
    if isinstance(expr, RRepeat):
        return _mentions(expr.value, hypers)
    if isinstance(expr, RBin):
        return _mentions(expr.left, hypers) or _mentions(expr.right, hypers)
    if isinstance(expr, RNeg):
        return _mentions(expr.operand, hypers)
    if isinstance(expr, (RCall, RVector)):
        items = expr.args if isinstance(expr, RCall) else expr.items
        return any(_mentions(a, hypers) for a in items)
    return False
