"""KLC-CG: the driver side of the KL-corrected bound (Hensman, Rattray & Lawrence 2012).

The plan's collapse set X (``InferencePlan.collapse``) is integrated out; q(Z) is a softmax
of free parameters θ per row. ``_klc_bound(s, θ)`` is L_KL (eq. 4, 9): the kernel
``klc_stats``, then the collapsed globals' updates; ``_klc_gradient`` calls the kernel
``klc_gradient`` (both kernels: codegen/kernels/klc.py); ``fit_klc`` is the entry point
of ``cemodel.runtime.drivers.klc``, which runs ``rt.riemannian_cg`` over the two.
"""

from __future__ import annotations

from collections.abc import Callable

from .calls import KernelCalls
from .context import EmitContext
from .loops import dim_name, lam_name
from .pycode import Comment, Function, Line, Node


def klc_functions(ctx: EmitContext, calls: KernelCalls,
                  array_shape: Callable[..., list[str]]) -> list[Function]:
    """_klc_bound, _klc_gradient and fit_klc; ``calls`` writes the kernel calls from a
    driver, ``array_shape(var, full=True)`` the rows of a variable's full arrays."""
    driver_call = calls.call
    plan = ctx.plan
    collapse = plan.collapse
    assert collapse is not None
    Z = collapse.parameterised
    bound: list[Node] = [Line(f"s.{acc.name}[...] = 0.0") for acc in plan.stored_accumulators]
    overrides = {"items": "s.all_items", **{f"theta_{z}": f"theta[{i}]"
                                            for i, z in enumerate(Z)}}
    bound += calls.run("klc_stats", overrides, result="value")
    global_X = tuple(n for n in plan.globals if n in collapse.collapsed)
    if global_X:
        bound.append(Comment("the collapsed globals at their optimum given q(Z)"))
    for name in global_X:
        bound.append(driver_call(f"update_{name}", {"data_scale": "1.0"}))
    bound.append(Line("return value + " + driver_call("elbo_global", {}).text))
    bound_fn = Function("_klc_bound", ("s", "theta"), tuple(bound),
                        "L_KL(θ) (eq. 4): the mean-field ELBO with X at q*(X) given "
                        "q(Z) = softmax(θ) (eq. 9).")
    grad_overrides = dict(overrides)
    for i, z in enumerate(Z):
        grad_overrides[f"natgrad_{z}"] = f"natgrad[{i}]"
        grad_overrides[f"grad_{z}"] = f"grad[{i}]"
    *hoist, gradient = calls.run("klc_gradient", grad_overrides)
    grad_fn = Function("_klc_gradient", ("s", "theta", "natgrad", "grad"), (
        *hoist, Line("return " + gradient.text),
    ), "natgrad, grad and ⟨natgrad, grad⟩ at θ (call _klc_bound(s, θ) first).")
    seeded = [_klc_logits(ctx)] if ctx.kplan.klc_start == "seeds" else []
    return [bound_fn, grad_fn, _klc_shapes(ctx, array_shape), *seeded, _fit_klc(ctx)]


def klc_constants(ctx: EmitContext) -> list[Line]:
    """KLC_LOCALS: the parameterised Z, in the order of θ; KLC_START: where θ starts."""
    assert ctx.plan.collapse is not None
    why = ("q(Z) after the seeded start's local step" if ctx.kplan.klc_start == "seeds"
           else "N(0, 1) logits")
    return [Line(f"KLC_LOCALS = {tuple(ctx.plan.collapse.parameterised)!r}",
                 "KLC-CG's parameterised Z"),
            Line(f"KLC_START = {ctx.kplan.klc_start!r}", f"θ's default start: {why}")]


def _klc_shapes(ctx: EmitContext, array_shape: Callable[..., list[str]]) -> Function:
    """The shape of θ for each z: one row per element of its plates (ragged plates
    flattened), then its categories."""
    assert ctx.plan.collapse is not None
    full_shapes = [array_shape(ctx.var(z), full=True) + [dim_name(ctx.var(z).categories)]
                   for z in ctx.plan.collapse.parameterised]
    shapes = [", ".join(_from_state(d) for d in shape) for shape in full_shapes]
    return Function("_klc_shapes", ("s",), (
        Line("return [" + ", ".join(f"({shape},)" for shape in shapes) + "]"),),
        "The shapes of the softmax parameters θ of q(Z), one per member of KLC_LOCALS.")


def _klc_logits(ctx: EmitContext) -> Function:
    """_klc_logits: θ from the q(Z) the state holds (log-probabilities up to a constant per
    row, which the softmax ignores)."""
    assert ctx.plan.collapse is not None
    arrays = [f"s.{lam_name(z, 'onehot')}.copy()" for z in ctx.plan.collapse.parameterised]
    return Function("_klc_logits", ("s",), (Line(f"return [{', '.join(arrays)}]"),),
                    "θ of q(Z) as the state holds it (its natural parameters), one per member "
                    "of KLC_LOCALS.")


def _fit_klc(ctx: EmitContext) -> Function:
    """fit_klc: the entry point of cemodel.runtime.drivers.klc."""
    collapse = ctx.plan.collapse
    assert collapse is not None
    doc = (f"KLC-CG (Hensman et al. 2012): {', '.join(collapse.collapsed)} integrated out, "
           f"q({'), q('.join(collapse.parameterised)}) by Riemannian CG.")
    return Function("fit_klc", ("data", "**options"), (
        Line("return rt.drivers.klc.fit(_THIS, data, **options)"),), doc)


def _from_state(size: str) -> str:
    """A size expression of a kernel (``n_K``, ``len(tokens_weight)``, ``3``) read from the
    driver's state ``s``."""
    if size.isdigit():
        return size
    if size.startswith("len("):
        return f"len(s.bound.arrays[{size[4:-1]!r}])"
    return f"s.bound.dims[{size.removeprefix('n_')!r}]"
