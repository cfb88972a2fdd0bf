"""Collapsed local steps: Gibbs sampling and CVB0 of the categorical assignments of an item.

When every local of an item is a categorical assignment z or a Dirichlet θ whose only
children are assignments drawn from it (``InferencePlan.collapsed_locals``), θ integrates out
(Dirichlet–categorical) and the conditional of one assignment given the others is

    p(z_i = c | z_¬i, y, β) ∝ (α_c + n_¬i,c) · exp(Σ_children log p(y | z_i = c, β))_c

with n_¬i,c the assignments of θ's other rows to c. The children's part is fixed during the
step (it reads only data and the globals: E[t(β)] for SVI, t(β) of a draw for SSVI-A), so it
is computed once per item. Gibbs (Mimno et al. 2012, "Gibbs-within-SVI") samples every token
in turn and averages the one-hot counts over the sweeps after burn-in; CVB0 (Asuncion et al.
2009) replaces the counts by expected counts, q_i(c) ∝ (α_c + Σ_{j≠i} q_j(c))·exp(·)_c. Both
hand the globals the same statistics the mean-field step does, Σ_n E[t_n] with q(z) in place,
so they combine with every global step (Hoffman & Blei 2015, §2.5 and appendix D).

The count α_c + n_c lives in θ's natural parameter itself: λ_θ = α − 1 + n, so α_c + n_c is
λ_θ,c + 1. After the step θ gets its mean-field update from the averaged q(z).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .loops import ArgRecorder, dim_name, plate_var
from .pycode import Block, Comment, Function, Line, Node

if TYPE_CHECKING:
    from .mf import MeanFieldEmitter

_DOC = {
    "gibbs": ("Gibbs local step: each item's assignments sampled from their conditionals with "
              "{hidden}integrated out,\n{sweeps} sweeps, q(z) = the one-hot counts averaged "
              "over the sweeps after burn_in (Mimno et al. 2012).\n\n"
              "    p(z_i = c | z_¬i, y, β) ∝ {prior}· exp(Σ_children log p(y | z_i = c, β))_c\n\n"
              "Then the sufficient statistics, as local_step."),
    "cvb0": ("CVB0 local step: each item's q(z) updated with {hidden}integrated out, until "
             "the mean absolute\nchange of q(z) is below local_tol (Asuncion et al. 2009).\n\n"
             "    q(z_i = c) ∝ {prior}· exp(Σ_children E[log p(y | z_i = c, β)])_c\n\n"
             "Then the sufficient statistics, as local_step."),
}


class AssignmentStep:
    """Emits ``local_step_gibbs`` or ``local_step_cvb0`` for an emitter's model."""

    def __init__(self, emitter: MeanFieldEmitter, mode: str) -> None:
        self.e = emitter
        self.mode = mode
        self.plan = emitter.plan
        self.model = emitter.model
        self.args = ArgRecorder()

    # -- pieces ----------------------------------------------------------------
    def _weight(self, name: str) -> str:
        """The row weight of an assignment (a token's count in a bag of words), else 1."""
        var = self.e.var(name)
        for plate in var.plates[1:]:
            if self.model.plate(plate).ragged:
                return f"{self.args.use(plate + '_weight')}[{plate_var(plate)}]"
        return "1.0"

    def _rows(self, name: str, nodes: list[Node]) -> list[Node]:
        """``nodes`` inside the loops over the item's rows of ``name``."""
        for header in reversed(self.e._row_loops(self.e.var(name), {self.model.data_plate},
                                                 self.args)):
            nodes = [Block(header, tuple(nodes))]
        return nodes

    def _count(self, name: str, prelude: list[Node]) -> str | None:
        """The expression α_c + n_c (at category ``t_c``) of the collapsed proportions an
        assignment is drawn from, or None when its prior is not collapsed."""
        var = self.e.var(name)
        for m, (message, factor, monomial) in enumerate(self.e._messages_to(name)):
            for theta in self.plan.collapsed_locals:
                stats = monomial.stats_of(theta)
                if not stats:
                    continue
                env = self.e._message_env(var, m, message, factor, monomial, self.args, prelude)
                lam = self.e.layout.lam(theta, "log")
                return self.e.layout.stat_ref(stats[0], env, self.args, {stats[0]: (lam, False)})
        return None

    def _fixed_messages(self, name: str) -> list[Node]:
        """P[row, c] = exp(λ_c − max λ) with λ every message but the collapsed prior's."""
        e, args = self.e, ArgRecorder()
        args.use(plate_var(self.model.data_plate))
        var = e.var(name)
        row = e._row_index(var, args)
        lam = args.use(e.layout.lam(name, "onehot"))
        size = args.use(dim_name(var.categories)) if not dim_name(var.categories).isdigit() \
            else dim_name(var.categories)
        nodes: list[Node] = [Line(f"{lam}[{row}] = 0.0")]
        for message, factor, monomial in e._messages_to(name):
            if any(monomial.stats_of(t) for t in self.plan.collapsed_locals):
                continue
            nodes.append(Comment(f"from {factor.child} ~ {factor.family} "
                                 f"({e.factor_comment(factor)})"))
            nodes += e._contribution(factor, monomial, message.target, var, args, {})
        nodes += [
            Line(f"top = {lam}[{row}].max()"),
            Block(f"for t_c in range({size})", (
                Line(f"{lam}[{row}, t_c] = np.exp({lam}[{row}, t_c] - top)"),)),
        ]
        for header in reversed(e._row_loops(var, {self.model.data_plate}, args)):
            nodes = [Block(header, tuple(nodes))]
        return e._bases(nodes, args) + nodes, args

    def evidence_kernel(self, name: str) -> Function:
        """evidence_<z>: the fixed part of an assignment's conditional, for Gibbs and CVB0."""
        nodes, args = self._fixed_messages(name)
        doc = (f"lam_{name}_onehot[row, c] = exp(λ_c − max_c λ_c), λ the messages to {name} "
               "from data and globals\n(every message but the integrated-out proportions'): "
               "the part of its conditional that\nstays fixed during a Gibbs or CVB0 step.")
        fn = Function(f"evidence_{name}", tuple(args.names), tuple(nodes), doc,
                      "njit(cache=True, nogil=True)")
        self.e.kernel_args[fn.name] = tuple(args.names)
        return fn

    def _conditional(self, name: str, count: str | None, exclude: str) -> list[Node]:
        """p[c] ∝ (α_c + n_c − exclude_c)·P[row, c] into ``p_<name>``, with its total."""
        e, args = self.e, self.args
        var = e.var(name)
        row = e._row_index(var, args)
        P = f"{e.layout.lam(name, 'onehot')}[{row}, t_c]"
        size = dim_name(var.categories)
        factor = P if count is None else f"({count} + 1.0{exclude}) * {P}"
        return [
            Line("total = 0.0"),
            Block(f"for t_c in range({size})", (
                Line(f"p_{name}[t_c] = {factor}"),
                Line(f"total += p_{name}[t_c]"),
            )),
        ]

    def _draw(self, name: str) -> list[Node]:
        """t_c ~ p_<name> / total by inversion of one uniform."""
        size = dim_name(self.e.var(name).categories)
        return [
            Line("uniform = np.random.random() * total"),
            Line("t_c = 0"),
            Line(f"cumulative = p_{name}[0]"),
            Block(f"while cumulative < uniform and t_c < {size} - 1", (
                Line("t_c += 1"),
                Line(f"cumulative += p_{name}[t_c]"),
            )),
        ]

    # -- the two steps -------------------------------------------------------------
    def _gibbs(self, name: str) -> tuple[list[Node], list[Node], list[Node]]:
        """(sizing, start, sweep) nodes for one assignment variable."""
        e, args = self.e, self.args
        var = e.var(name)
        row = e._row_index(var, args)
        E = args.use(e.layout.E(name, "onehot"))
        prelude: list[Node] = []
        count = self._count(name, prelude)
        add = [Line(f"{count} += 1.0")] if count else []
        remove = [Line(f"{count} -= 1.0")] if count else []
        weight = self._weight(name)
        sizing = self._rows(name, [Line(f"needed_{name} += int({weight} + 0.5)")])
        start = self._rows(name, [
            *prelude,
            Line(f"{E}[{row}] = 0.0"),
            Block(f"for j in range(int({weight} + 0.5))", (
                *self._conditional(name, count, ""),
                *self._draw(name),
                Line(f"assign_{name}[position_{name}] = t_c"),
                *add,
                Line(f"position_{name} += 1"),
            )),
        ])
        sweep = self._rows(name, [
            *prelude,
            Block(f"for j in range(int({weight} + 0.5))", (
                Line(f"t_c = assign_{name}[position_{name}]"),
                *remove,
                *self._conditional(name, count, ""),
                *self._draw(name),
                Line(f"assign_{name}[position_{name}] = t_c"),
                *add,
                Block("if sweep >= burn_in", (Line(f"{E}[{row}, t_c] += 1.0"),)),
                Line(f"position_{name} += 1"),
            )),
        ])
        return sizing, start, sweep

    def _gibbs_average(self, name: str) -> list[Node]:
        """q(z) = counts / (instances × kept sweeps); a row of weight 0 gets P normalised."""
        e, args = self.e, self.args
        var = e.var(name)
        row = e._row_index(var, args)
        E = e.layout.E(name, "onehot")
        P = e.layout.lam(name, "onehot")
        weight = self._weight(name)
        return self._rows(name, [
            Line(f"instances = int({weight} + 0.5)"),
            Block("if instances > 0", (
                Line(f"{E}[{row}] /= instances * (sweeps - burn_in)"),)),
            Block("else", (Line(f"{E}[{row}] = {P}[{row}] / {P}[{row}].sum()"),)),
        ])

    def _cvb0(self, name: str) -> tuple[list[Node], list[Node]]:
        """(start, sweep) nodes for one assignment variable; the sweep adds to ``change``."""
        e, args = self.e, self.args
        var = e.var(name)
        row = e._row_index(var, args)
        E = args.use(e.layout.E(name, "onehot"))
        size = dim_name(var.categories)
        prelude: list[Node] = []
        count = self._count(name, prelude)
        weight = self._weight(name)
        start = self._rows(name, [
            *prelude,
            *self._conditional(name, count, ""),
            Line(f"w_row = {weight}"),
            Block(f"for t_c in range({size})", (
                Line(f"{E}[{row}, t_c] = p_{name}[t_c] / total"),
                *([Line(f"{count} += w_row * {E}[{row}, t_c]")] if count else []),
            )),
        ])
        if count is None:
            return start, []
        # the row's own contribution, one instance of it: min(w, 1)·q_i
        exclude = f" - own * {E}[{row}, t_c]"
        sweep = self._rows(name, [
            *prelude,
            Line(f"w_row = {weight}"),
            Line("own = min(w_row, 1.0)"),
            *self._conditional(name, count, exclude),
            Block(f"for t_c in range({size})", (
                Line(f"delta = p_{name}[t_c] / total - {E}[{row}, t_c]"),
                Line(f"{count} += w_row * delta"),
                Line(f"{E}[{row}, t_c] += delta"),
                Line("change += abs(delta)"),
            )),
            Line("rows += 1"),
        ])
        return start, sweep

    def kernel(self) -> Function:
        e, args, mode = self.e, self.args, self.mode
        item = plate_var(self.model.data_plate)
        args.use("items")
        if mode == "gibbs":
            args.use("sweeps")
            args.use("burn_in")
        else:
            args.use("max_local_iter")
            args.use("local_tol")
        assignments = self.plan.assignment_locals
        collapsed = self.plan.collapsed_locals
        per_item: list[Node] = []
        if collapsed:
            per_item.append(Comment("the proportions' prior: λ = α − 1, so α_c + n_c = λ_c + 1"))
            per_item += [e._call_update(t, "False", args) for t in collapsed]
        for name in assignments:
            per_item.append(Line(e._call(f"evidence_{name}", {}, args),
                                 "the fixed part of the conditional"))
        buffers: list[Node] = []
        for name in assignments:
            size = dim_name(e.var(name).categories)
            size = size if size.isdigit() else args.use(size)
            buffers.append(Line(f"p_{name} = np.empty({size})"))
        if mode == "gibbs":
            sizing, start, sweep = [], [], []
            for name in assignments:
                a, b, c = self._gibbs(name)
                buffers.append(Line(f"assign_{name} = np.empty(64, np.int64)",
                                    "one assignment per token instance, grown as needed"))
                sizing += [Line(f"needed_{name} = 0"), *a,
                           Block(f"if needed_{name} > assign_{name}.shape[0]", (
                               Line(f"assign_{name} = np.empty(2 * needed_{name}, np.int64)"),))]
                start += [Line(f"position_{name} = 0"), *b]
                sweep += [Line(f"position_{name} = 0"), *c]
            per_item += sizing
            per_item.append(Comment("start: each token drawn given the ones before it"))
            per_item += start
            per_item.append(Block("for sweep in range(sweeps)", tuple(sweep)))
            for name in assignments:
                per_item += self._gibbs_average(name)
        else:
            start, sweep = [], []
            for name in assignments:
                a, b = self._cvb0(name)
                start += a
                sweep += b
            per_item.append(Comment("start: each row given the ones before it"))
            per_item += start
            if sweep:
                per_item.append(Block("for sweep in range(max_local_iter)", (
                    Line("change = 0.0"),
                    Line("rows = 0"),
                    *sweep,
                    Block("if change < local_tol * max(rows, 1)", (Line("break"),)),
                )))
        if collapsed:
            per_item.append(Comment("the proportions' mean-field update from the final q(z)"))
            overrides = {"with_children": "True", "exp_only": "False",
                         **{f"use_sums_{z}": "False" for z in e.implicit}}
            per_item += [Line(e._call(f"update_{t}", overrides, args)) for t in collapsed]
        per_item += e._accumulate_nodes(args)
        per_item = e._bases(per_item, args) + per_item
        body: list[Node] = [
            *buffers,
            Block("for position in range(items.shape[0])",
                  (Line(f"{item} = items[position]"), *per_item)),
        ]
        hidden = ", ".join(collapsed)
        prior = " · ".join(f"(α_c + n_¬i,c of {t})" for t in collapsed) or ""
        doc = _DOC[mode].format(hidden=f"{hidden} " if hidden else "no proportions ",
                                sweeps="`sweeps`", prior=f"{prior} " if prior else "")
        fn = Function(f"local_step_{mode}", tuple(args.names), tuple(body), doc,
                      "njit(cache=True, nogil=True)")
        e.kernel_args[fn.name] = tuple(args.names)
        return fn
