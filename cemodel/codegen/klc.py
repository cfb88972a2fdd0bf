"""KLC-CG: the KL-corrected bound over the softmax parameters of q(Z) and its gradients.

Hensman, Rattray & Lawrence (2012). The plan's collapse set X (``InferencePlan.collapse``)
is integrated out; q(Z) is a softmax of free parameters θ per row. For a given θ:

* ``klc_stats`` sets q(Z) = softmax(θ), gives every collapsed local its mean-field update
  from q(Z) (q*(X), eq. 5), and sums the statistics the collapsed globals need; the driver
  then updates those globals. The bound is the mean-field ELBO at that point, which equals
  L_KL (eq. 9): ELBO terms of the items (returned) plus elbo_global.
* ``klc_gradient`` computes each row's mean-field target θ̂ given q*(X) and the other rows'
  q. The natural gradient in θ is g̃ = θ̂ − θ (eq. 15: the gradient in the mean parameters),
  and the Euclidean gradient is g = G g̃ with G = diag(q) − q qᵀ the softmax Jacobian
  (weighted by the row's count), so ⟨g̃, g⟩ (the squared Riemannian norm, eq. 16) needs no
  matrix. A unit step θ + g̃ = θ̂ is the mean-field (VBEM) update of q(Z).

``cemodel.runtime.klc`` holds the optimiser (steepest ascent, Fletcher–Reeves,
Polak–Ribière, Hestenes–Stiefel).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .loops import ArgRecorder, dim_name, plate_var
from .pycode import Block, Comment, Function, Line, Node

if TYPE_CHECKING:
    from .mf import MeanFieldEmitter


class KlcEmitter:
    """Emits ``klc_stats``, ``klc_gradient`` and the ``fit_klc`` driver for one model."""

    def __init__(self, emitter: MeanFieldEmitter) -> None:
        self.e = emitter
        self.plan = emitter.plan
        self.model = emitter.model
        collapse = emitter.plan.collapse
        assert collapse is not None
        self.Z = collapse.parameterised
        self.X = collapse.collapsed
        self.local_X = tuple(n for n in self.plan.locals if n in self.X)
        self.global_X = tuple(n for n in self.plan.globals if n in self.X)

    # -- pieces ----------------------------------------------------------------
    def full_shape(self, name: str) -> list[str]:
        """The shape of θ for ``name``: one row per element of its plates (ragged plates
        flattened), then its categories."""
        var = self.e.var(name)
        return self.e._array_shape(var, full=True) + [dim_name(var.categories)]

    def _full_row(self, name: str, args: ArgRecorder) -> str:
        var = self.e.var(name)
        return ", ".join(self.e.layout._plate_index(var.plates, var.plates, {}, args,
                                                    scratch=False))

    def _weight(self, name: str, args: ArgRecorder) -> str:
        """A row's count (a token's in a bag of words), else 1."""
        for plate in self.e.var(name).plates[1:]:
            if self.model.plate(plate).ragged:
                return f"{args.use(plate + '_weight')}[{plate_var(plate)}]"
        return "1.0"

    def _rows(self, name: str, nodes: list[Node], args: ArgRecorder) -> list[Node]:
        for header in reversed(self.e._row_loops(self.e.var(name), {self.model.data_plate},
                                                 args)):
            nodes = [Block(header, tuple(nodes))]
        return nodes

    def _softmax_rows(self, name: str, args: ArgRecorder) -> list[Node]:
        """q(name) = softmax(θ) on the item's rows (λ = θ, E = q, and its normaliser)."""
        row = self.e._row_index(self.e.var(name), args)
        lam = args.use(self.e.layout.lam(name, "onehot"))
        E = args.use(self.e.layout.E(name, "onehot"))
        theta = args.use(f"theta_{name}")
        nodes: list[Node] = [Line(f"{lam}[{row}] = {theta}[{self._full_row(name, args)}]")]
        if name in self.e.product_form:
            logZ, H = args.use(f"logZ_{name}"), args.use(f"H_{name}")
            nodes += [
                Line(f"{logZ}[{row}] = rt.categorical_expected_stats({lam}[{row}], {E}[{row}])"),
                Line(f"{H}[{row}] = {logZ}[{row}] - rt.frobenius({lam}[{row}], {E}[{row}])",
                     "H = log Σ_c exp θ_c − Σ_c θ_c q_c"),
            ]
        else:
            nodes.append(Line(f"rt.categorical_expected_stats({lam}[{row}], {E}[{row}])"))
        return self._rows(name, nodes, args)

    def _update_overrides(self) -> dict[str, str]:
        return {"with_children": "True", "exp_only": "False",
                **{f"use_sums_{z}": "False" for z in self.e.implicit}}

    # -- kernels ---------------------------------------------------------------
    def stats_kernel(self) -> Function:
        args = ArgRecorder()
        args.use("items")
        per_item: list[Node] = [Comment(f"q({n}) = softmax(θ) per row") for n in self.Z[:1]]
        for name in self.Z:
            per_item += self._softmax_rows(name, args)
        if self.local_X:
            per_item.append(Comment("the collapsed locals at their optimum given q(Z): "
                                    "q*(X) (eq. 5)"))
        for name in self.local_X:
            per_item.append(Line(self.e._call(f"update_{name}", self._update_overrides(),
                                              args)))
        per_item += self.e._accumulate_nodes(args, suffix="_t")
        per_item.append(Comment("ELBO: local terms and local entropies"))
        per_item += self.e._local_elbo_nodes(args)
        doc = ("KLC statistics: q(Z) = softmax(θ), each collapsed local's mean-field update "
               "given q(Z),\nand the collapsed globals' sufficient statistics "
               "(accumulators).\nReturns the ELBO terms that involve only local variables and "
               "data.")
        per_item = self.e._bases(per_item, args) + per_item
        return self.e.threaded_kernel("klc_stats", per_item, args, doc, hoist=True)

    def gradient_kernel(self) -> Function:
        args = ArgRecorder()
        args.use("items")
        per_item: list[Node] = [Comment("q(Z) = softmax(θ) per row")]
        for name in self.Z:
            per_item += self._softmax_rows(name, args)
        for name in self.Z:
            var = self.e.var(name)
            row = self.e._row_index(var, args)
            full = self._full_row(name, args)
            lam = args.use(self.e.layout.lam(name, "onehot"))
            E = args.use(self.e.layout.E(name, "onehot"))
            theta, natgrad, grad = (args.use(f"{p}_{name}") for p in ("theta", "natgrad",
                                                                           "grad"))
            size = dim_name(var.categories)
            if not size.isdigit():
                args.use(size)
            per_item.append(Comment(f"θ̂ = the mean-field target of q({name}) given q*(X)"))
            per_item.append(Line(self.e._call(f"update_{name}", self._update_overrides(),
                                              args)))
            weight = self._weight(name, args)
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
            per_item += self._rows(name, rows, args)
        doc = ("KLC gradients at θ, with the collapsed variables at q*(X) (klc_stats and the "
               "global updates\nfirst): natgrad = θ̂ − θ (eq. 15), grad = w (diag(q) − q qᵀ) "
               "natgrad.\nReturns ⟨natgrad, grad⟩, the squared Riemannian norm (eq. 16).")
        per_item = self.e._bases(per_item, args) + per_item
        return self.e.threaded_kernel("klc_gradient", per_item, args, doc, accumulate=False,
                                      result="norm", threads="threads", hoist=True)

    # -- drivers ---------------------------------------------------------------
    def functions(self) -> list[Function]:
        e = self.e
        bound: list[Node] = [Line(f"s.{acc.name}[...] = 0.0")
                             for acc in self.plan.stored_accumulators]
        overrides = {"items": "s.all_items", **{f"theta_{z}": f"theta[{i}]"
                                                for i, z in enumerate(self.Z)}}
        bound.append(e._driver_call("klc_stats", overrides, result="value"))
        if self.global_X:
            bound.append(Comment("the collapsed globals at their optimum given q(Z)"))
        for name in self.global_X:
            bound.append(e._driver_call(f"update_{name}", {"data_scale": "1.0"}))
        bound += [e._driver_call("elbo_global", {}, result="value_global"),
                  Line("return value + value_global")]
        bound_fn = Function("_klc_bound", ("s", "theta"), tuple(bound),
                            "L_KL(θ) (eq. 4): the mean-field ELBO with X at q*(X) given "
                            "q(Z) = softmax(θ) (eq. 9).")
        grad_overrides = dict(overrides, threads="rt.thread_count()")
        for i, z in enumerate(self.Z):
            grad_overrides[f"natgrad_{z}"] = f"natgrad[{i}]"
            grad_overrides[f"grad_{z}"] = f"grad[{i}]"
        grad_fn = Function("_klc_gradient", ("s", "theta", "natgrad", "grad"), (
            Line("return " + e._driver_call("klc_gradient", grad_overrides).text),
        ), "natgrad, grad and ⟨natgrad, grad⟩ at θ (call _klc_bound(s, θ) first).")
        shapes = [", ".join(_from_state(d) for d in self.full_shape(z)) for z in self.Z]
        shapes_fn = Function("_klc_shapes", ("s",), (
            Line("return [" + ", ".join(f"({shape},)" for shape in shapes) + "]"),),
            "The shapes of the softmax parameters θ of q(Z), one per member of KLC_LOCALS.")
        doc = (f"KLC-CG (Hensman et al. 2012): {', '.join(self.X)} integrated out, q("
               f"{'), q('.join(self.Z)}) by Riemannian CG.")
        fit = Function("fit_klc", ("data", "**options"), (
            Line("return rt.drivers.klc.fit(_THIS, data, **options)"),), doc)
        return [bound_fn, grad_fn, shapes_fn, fit]

    def constants(self) -> list[Line]:
        return [Line(f"KLC_LOCALS = {tuple(self.Z)!r}", "KLC-CG's parameterised Z")]


def _from_state(size: str) -> str:
    """A size expression of a kernel (``n_K``, ``len(tokens_weight)``, ``3``) read from the
    driver's state ``s``."""
    if size.isdigit():
        return size
    if size.startswith("len("):
        return f"len(s.bound.arrays[{size[4:-1]!r}])"
    return f"s.bound.dims[{size.removeprefix('n_')!r}]"
