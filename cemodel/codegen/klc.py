"""KLC-CG: the driver side of the KL-corrected bound (Hensman, Rattray & Lawrence 2012).

The plan's collapse set X (``InferencePlan.collapse``) is integrated out; q(Z) is a softmax
of free parameters θ per row. ``_klc_bound(s, θ)`` is L_KL (eq. 4, 9): the kernel
``klc_stats``, then the collapsed globals' updates; ``_klc_gradient`` calls the kernel
``klc_gradient`` (both kernels: codegen/kernels/klc.py); ``fit_klc`` runs
``rt.riemannian_cg`` over the two. ``cemodel.runtime.klc`` holds the optimiser (steepest
ascent, Fletcher–Reeves, Polak–Ribière, Hestenes–Stiefel).
"""

from __future__ import annotations

from collections.abc import Callable

from .context import EmitContext
from .loops import dim_name
from .pycode import Comment, Function, Line, Node

DriverCall = Callable[..., Line]  # (kernel, overrides, result=None) -> a call from a driver


def klc_functions(ctx: EmitContext, driver_call: DriverCall,
                  array_shape: Callable[..., list[str]]) -> list[Function]:
    """_klc_bound, _klc_gradient and fit_klc; ``driver_call`` writes a kernel call from a
    driver, ``array_shape(var, full=True)`` the rows of a variable's full arrays."""
    plan = ctx.plan
    collapse = plan.collapse
    assert collapse is not None
    Z = collapse.parameterised
    bound: list[Node] = [Line(f"s.{acc.name}[...] = 0.0") for acc in plan.stored_accumulators]
    overrides = {"items": "s.all_items", **{f"theta_{z}": f"theta[{i}]"
                                            for i, z in enumerate(Z)}}
    bound.append(driver_call("klc_stats", overrides, result="value"))
    global_X = tuple(n for n in plan.globals if n in collapse.collapsed)
    if global_X:
        bound.append(Comment("the collapsed globals at their optimum given q(Z)"))
    for name in global_X:
        bound.append(driver_call(f"update_{name}", {"data_scale": "1.0"}))
    bound += [driver_call("elbo_global", {}, result="value_global"),
              Line("return value + value_global")]
    bound_fn = Function("_klc_bound", ("s", "theta"), tuple(bound),
                        "L_KL(θ) (eq. 4): the mean-field ELBO with X at q*(X) given "
                        "q(Z) = softmax(θ) (eq. 9).")
    grad_overrides = dict(overrides, threads="rt.thread_count()")
    for i, z in enumerate(Z):
        grad_overrides[f"natgrad_{z}"] = f"natgrad[{i}]"
        grad_overrides[f"grad_{z}"] = f"grad[{i}]"
    grad_fn = Function("_klc_gradient", ("s", "theta", "natgrad", "grad"), (
        driver_call("klc_gradient", grad_overrides, result="norm"),
        Line("return norm"),
    ), "natgrad, grad and ⟨natgrad, grad⟩ at θ (call _klc_bound(s, θ) first).")
    return [bound_fn, grad_fn, _fit_klc(ctx, array_shape)]


def _fit_klc(ctx: EmitContext, array_shape: Callable[..., list[str]]) -> Function:
    """fit_klc: rt.riemannian_cg over _klc_bound and _klc_gradient from a start θ."""
    collapse = ctx.plan.collapse
    assert collapse is not None
    Z, X = collapse.parameterised, collapse.collapsed
    # the shape of θ for z: one row per element of its plates (ragged plates flattened),
    # then its categories
    full_shapes = [array_shape(ctx.var(z), full=True) + [dim_name(ctx.var(z).categories)]
                   for z in Z]
    shapes = [", ".join(_from_state(d) for d in shape) for shape in full_shapes]
    body: list[Node] = [
        Line("rt.check_applies('method', 'klc', METHODS)"),
        Line("s = _prepare(data, hypers, dims, seed, None, 'random', 1, 0.0)",
             "(the globals' start is overwritten by q*(X))"),
        Line("rng = np.random.default_rng(seed)"),
        Line("shapes = [" + ", ".join(f"({shape},)" for shape in shapes) + "]"),
        Line(f"theta = rt.klc_start(init, {Z!r}, shapes, rng)",
             "softmax parameters of q(Z): given, or N(0, 1) draws"),
        Line("clock = time.perf_counter()"),
        Line("run = rt.riemannian_cg(lambda t: _klc_bound(s, t), "
             "lambda t, n, g: _klc_gradient(s, t, n, g), theta, cg=cg, max_iter=max_iter, "
             "tol=tol, gtol=gtol, line_search=line_search, callback=callback)"),
        Comment("the state at the final θ (the optimiser's last evaluation may be a "
                "rejected step)"),
        Line("_klc_bound(s, run.theta)"),
        Line("result = _result(s, run.trace, run.converged, time.perf_counter() - clock)"),
        Line("result.notes.update(run.notes)"),
        Line("result.iterations = run.notes['iterations']",
             "the trace starts with the initial bound"),
        *[Line(f"result.posterior[{z + '.logits'!r}] = run.theta[{i}]")
          for i, z in enumerate(Z)],
        Line("return result"),
    ]
    args = ("data", "*", "hypers=None", "dims=None", "cg='fr'", "max_iter=1000",
            "tol=1e-6", "gtol=1e-6", "line_search=False", "seed=0", "init=None",
            "callback=None")
    doc = (f"Fit {ctx.model.name} by KLC-CG: the KL-corrected bound with "
           f"{', '.join(X)} integrated out,\noptimised over the softmax parameters "
           f"of q({'), q('.join(Z)}) by Riemannian conjugate gradients (Hensman, "
           "Rattray\n& Lawrence 2012).\n\n"
           "cg: 'fr' (Fletcher–Reeves), 'pr' (Polak–Ribière), 'hs' (Hestenes–Stiefel) or "
           "'none'\n(steepest ascent with unit steps, which is VBEM). Step length 1; the "
           "direction restarts at\nthe natural gradient when it is not an ascent "
           "direction or the bound drops (line_search:\nhalve the step first).\n"
           "Stops when the change of the bound falls below tol or ⟨g̃, g⟩ below gtol.\n"
           f"init: {{name: θ}} for {', '.join(Z)} (the same start for every method); "
           "default N(0, 1) draws from seed.\n"
           "callback(iteration, bound, norm, seconds) after each iteration.\n"
           f"The collapse set is chosen by {collapse.chosen_by}; "
           "result.notes holds restarts and the gradient norms.")
    return Function("fit_klc", args, tuple(body), doc)


def _from_state(size: str) -> str:
    """A size expression of a kernel (``n_K``, ``len(tokens_weight)``, ``3``) read from the
    driver's state ``s``."""
    if size.isdigit():
        return size
    if size.startswith("len("):
        return f"len(s.bound.arrays[{size[4:-1]!r}])"
    return f"s.bound.dims[{size.removeprefix('n_')!r}]"
