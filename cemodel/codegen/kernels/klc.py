"""KLC-CG kernels: the KL-corrected bound over the softmax parameters of q(Z) and its
gradients (Hensman, Rattray & Lawrence 2012; the driver is in codegen/klc.py).

* ``klc_stats`` sets q(Z) = softmax(θ), gives every collapsed local its mean-field update
  from q(Z) (q*(X), eq. 5), and sums the statistics the collapsed globals need; the driver
  then updates those globals. The bound is the mean-field ELBO at that point, which equals
  L_KL (eq. 9): ELBO terms of the items (returned) plus elbo_global.
* ``klc_gradient`` computes each row's mean-field target θ̂ given q*(X) and the other rows'
  q. The natural gradient in θ is g̃ = θ̂ − θ (eq. 15: the gradient in the mean parameters),
  and the Euclidean gradient is g = G g̃ with G = diag(q) − q qᵀ the softmax Jacobian
  (weighted by the row's count), so ⟨g̃, g⟩ (the squared Riemannian norm, eq. 16) needs no
  matrix. A unit step θ + g̃ = θ̂ is the mean-field (VBEM) update of q(Z).
"""

from __future__ import annotations

from ..context import EmitContext
from ..loops import ArgRecorder, dim_name
from ..pycode import Block, Comment, Function, Line, Node
from .local_step import Callees, accumulate_nodes, local_elbo_nodes, threaded_kernel


def _full_row(ctx: EmitContext, name: str, args: ArgRecorder) -> str:
    """The row of θ: one per element of the variable's plates (never scratch)."""
    return ", ".join(ctx.layout.data_row(ctx.var(name).plates, args))


def _softmax_rows(ctx: EmitContext, name: str, args: ArgRecorder) -> list[Node]:
    """q(name) = softmax(θ) on the item's rows (λ = θ, E = q, and its normaliser)."""
    var = ctx.var(name)
    row = ctx.row_index(var, args)
    lam = args.use(ctx.layout.lam(name, "onehot"))
    E = args.use(ctx.layout.E(name, "onehot"))
    theta = args.use(f"theta_{name}")
    nodes: list[Node] = [Line(f"{lam}[{row}] = {theta}[{_full_row(ctx, name, args)}]")]
    if name in ctx.kplan.product_form:
        logZ, H = args.use(f"logZ_{name}"), args.use(f"H_{name}")
        nodes += [
            Line(f"{logZ}[{row}] = rt.categorical_expected_stats({lam}[{row}], {E}[{row}])"),
            Line(f"{H}[{row}] = {logZ}[{row}] - rt.frobenius({lam}[{row}], {E}[{row}])",
                 "H = log Σ_c exp θ_c − Σ_c θ_c q_c"),
        ]
    else:
        nodes.append(Line(f"rt.categorical_expected_stats({lam}[{row}], {E}[{row}])"))
    return ctx.item_rows(var, nodes, args)


def emit_klc_stats(ctx: EmitContext, callees: Callees) -> Function:
    """klc_stats(items, θ, ...): q(Z) = softmax(θ), q*(X) of the collapsed locals, the
    statistics of the collapsed globals; returns the items' ELBO terms."""
    collapse = ctx.plan.collapse
    assert collapse is not None
    args = ArgRecorder()
    args.supply("items")
    per_item: list[Node] = [Comment(f"q({n}) = softmax(θ) per row")
                            for n in collapse.parameterised[:1]]
    for name in collapse.parameterised:
        per_item += _softmax_rows(ctx, name, args)
    local_X = tuple(n for n in ctx.plan.locals if n in collapse.collapsed)
    if local_X:
        per_item.append(Comment("the collapsed locals at their optimum given q(Z): "
                                "q*(X) (eq. 5)"))
    for name in local_X:
        per_item.append(Line(ctx.call(callees, f"update_{name}", ctx.all_messages(), args)))
    per_item += accumulate_nodes(ctx, args, suffix="_t")
    per_item.append(Comment("ELBO: local terms and local entropies"))
    per_item += local_elbo_nodes(ctx, args)
    doc = ("KLC statistics: q(Z) = softmax(θ), each collapsed local's mean-field update "
           "given q(Z),\nand the collapsed globals' sufficient statistics "
           "(accumulators).\nReturns the ELBO terms that involve only local variables and "
           "data.")
    per_item = ctx.bases(per_item, args) + per_item
    return threaded_kernel(ctx, "klc_stats", per_item, args, doc, hoist=True)


def emit_klc_gradient(ctx: EmitContext, callees: Callees) -> Function:
    """klc_gradient(items, θ, natgrad, grad, ...): natgrad = θ̂ − θ and the Euclidean
    gradient per row; returns ⟨natgrad, grad⟩."""
    collapse = ctx.plan.collapse
    assert collapse is not None
    args = ArgRecorder()
    args.supply("items")
    per_item: list[Node] = [Comment("q(Z) = softmax(θ) per row")]
    for name in collapse.parameterised:
        per_item += _softmax_rows(ctx, name, args)
    for name in collapse.parameterised:
        per_item += _gradient_rows(ctx, callees, name, args)
    doc = ("KLC gradients at θ, with the collapsed variables at q*(X) (klc_stats and the "
           "global updates\nfirst): natgrad = θ̂ − θ (eq. 15), grad = w (diag(q) − q qᵀ) "
           "natgrad.\nReturns ⟨natgrad, grad⟩, the squared Riemannian norm (eq. 16).")
    per_item = ctx.bases(per_item, args) + per_item
    return threaded_kernel(ctx, "klc_gradient", per_item, args, doc, accumulate=False,
                           result="norm", hoist=True)


def _gradient_rows(ctx: EmitContext, callees: Callees, name: str,
                   args: ArgRecorder) -> list[Node]:
    """θ̂ of q(name) by its mean-field update, then each row's gradients."""
    var = ctx.var(name)
    row = ctx.row_index(var, args)
    full = _full_row(ctx, name, args)
    lam = args.use(ctx.layout.lam(name, "onehot"))
    E = args.use(ctx.layout.E(name, "onehot"))
    theta, natgrad, grad = (args.use(f"{p}_{name}") for p in ("theta", "natgrad", "grad"))
    size = args.use(dim_name(var.categories))
    nodes: list[Node] = [
        Comment(f"θ̂ = the mean-field target of q({name}) given q*(X)"),
        Line(ctx.call(callees, f"update_{name}", ctx.all_messages(), args)),
    ]
    weight = ctx.row_weight(var, args)
    weight = "" if weight == "1.0" else f"{weight} * "
    rows: list[Node] = [
        Line(f"{natgrad}[{full}] = {lam}[{row}] - {theta}[{full}]", "g̃ = θ̂ − θ"),
        Comment(f"q({name}) back to softmax(θ) for the other rows' targets"),
        Line(f"{lam}[{row}] = {theta}[{full}]"),
        Line(f"rt.categorical_expected_stats({lam}[{row}], {E}[{row}])"),
        Line("mean = 0.0"),
        Block(f"for t_c in range({size})",
              (Line(f"mean += {E}[{row}, t_c] * {natgrad}[{full}, t_c]"),)),
        Block(f"for t_c in range({size})", (
            Line(f"{grad}[{full}, t_c] = {weight}{E}[{row}, t_c] * "
                 f"({natgrad}[{full}, t_c] - mean)", "g = w (diag(q) − q qᵀ) g̃"),
            Line(f"norm += {grad}[{full}, t_c] * {natgrad}[{full}, t_c]"),
        )),
    ]
    return nodes + ctx.item_rows(var, rows, args)
