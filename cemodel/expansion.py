"""Stage 3, the expansion: one ``x ~ F(args)`` statement's log density (a sum of terms over
views of its operands, ``families.base``), each argument expression substituted, as a sum of
monomials (``terms``); a categorical index ``beta[z]`` is a gate, multiplying a term that
touches gated operands by onehot(z)_g once. Whatever is not linear in a latent variable's
statistics is refused here (``CemConjugacyError``) with the variable, the relation, the
reason and the priors that would be accepted.
"""

from __future__ import annotations

import itertools

from .augment_sticks import STICKS, stick_log_poly
from .errors import CemConjugacyError, CemError, Span
from .families import CHILD, FAMILIES, FamilySpec, View
from .families.base import SCALE_DOMAIN
from .families.blocks import FUSED
from .model import (
    GateIndex,
    Model,
    PlateIndex,
    RBin,
    RCall,
    RConst,
    RData,
    RDimSize,
    RExpr,
    RHyper,
    RNeg,
    RRepeat,
    RSum,
    RVar,
    RVector,
    Shape,
    ShapeDim,
    SumIndex,
    VarDef,
    data_refs,
    sub_exprs,
)
from .terms import (
    LETTER,
    Known,
    Monomial,
    Slot,
    Stat,
    Use,
    as_letter,
    conjugate_priors,
    render_expr,
)

Poly = list[tuple[float, tuple[Slot, ...]]]

_REDUCING_VIEWS = {"lgamma_sum", "logdet", "dim", "lbeta", "wishart_lognorm", "log_binom",
                   "log_negbin", "log_multinomial"}


class Expander:
    """Expands the log density of one factor."""

    def __init__(self, model: Model, var: VarDef) -> None:
        self.model = model
        self.var = var
        self.family: FamilySpec = FAMILIES[var.family]
        self.operands: dict[str, RExpr] = {
            p.name: a for p, a in zip(self.family.params, var.args, strict=True)
        }
        self.child_ref = RVar(var.name, tuple(PlateIndex(p, var.span) for p in var.plates),
                              var.span)
        self.letters = itertools.count()
        self.index_dims: dict[str, ShapeDim] = {}
        self.gates: dict[str, str] = {}  # gate letter -> gating var
        # gating reference (by its text, so that every z[n] is one gate) -> (letter, ref)
        self.gate_refs: dict[str, tuple[str, RVar]] = {}
        # the index of each enclosing sum(... for k in K) -> its letter (summed, not gated)
        self.sum_letters: dict[str, str] = {}
        self.role = ""
        self.domain: str | None = None  # of the parameter whose view is being expanded
        # probing (``uses_of``): every read of a latent variable is recorded here and none is
        # refused for its statistic
        self.uses: list[Use] | None = None

    def fresh(self, dim: ShapeDim) -> str:
        name = as_letter(f"i{next(self.letters)}")
        self.index_dims[name] = dim
        return name

    def error(self, message: str, span: Span, hint: str | None = None) -> CemConjugacyError:
        return CemConjugacyError(message, span, self.model.source, hint=hint)

    # shapes -------------------------------------------------------------
    def event_shape(self, expr: RExpr) -> Shape:
        m = self.model
        if isinstance(expr, RVar):
            return m.member(expr).shape
        if isinstance(expr, RData):
            return m.datum(expr.name).shape
        if isinstance(expr, RHyper):
            return m.hyper(expr.name).shape
        if isinstance(expr, RRepeat):
            return (expr.dim,)
        if isinstance(expr, RVector):
            return (len(expr.items),)
        if isinstance(expr, (RConst, RDimSize, RSum)):
            return ()
        if isinstance(expr, RNeg):
            return self.event_shape(expr.operand)
        if isinstance(expr, RBin):
            return self.event_shape(expr.left) or self.event_shape(expr.right)
        if isinstance(expr, RCall):
            if expr.func == "dot":
                return ()
            if expr.func in ("exp", "log", "reciprocal"):
                return self.event_shape(expr.args[0])
            size = expr.args[0]
            dim = size.name if isinstance(size, RDimSize) else int(size.value)
            return (dim, dim) if expr.func == "eye" else (dim,)
        raise AssertionError(expr)

    def view_shape(self, fn: str, expr: RExpr) -> Shape:
        if fn in _REDUCING_VIEWS:
            return ()
        if fn in ("onehot", "first"):
            assert isinstance(expr, RVar)
            return (self.model.var(expr.name).categories,)
        if fn == "pair":  # a chain's transition into a step (MarkovChain)
            assert isinstance(expr, RVar)
            categories = self.model.var(expr.name).categories
            return (categories, categories)
        shape = self.event_shape(expr)
        if isinstance(expr, RVar) and expr.part is None and self.model.block(expr.name):
            # a block's statistics: Λ (D, D), Λμ (D,), log|Λ| and μᵀΛμ scalars
            return shape[:dict(FAMILIES[self.model.var(expr.name).family].stats)[fn]]
        if isinstance(expr, RVar) and expr.part is None and len(shape) == 1:
            # a statistic's rank from its family (a GaussianChain's [t = 0], x_t x_{t−1}ᵀ)
            rank = dict(FAMILIES[self.model.var(expr.name).family].stats).get(fn)
            if rank is not None:
                return shape[:rank] if rank < 2 else (shape[0], shape[0])
        if fn == "outer":  # a vector's x xᵀ; a matrix's, row by row (GaussianChainDiag's A)
            return (shape[0], shape[0]) if len(shape) == 1 else (shape[0], shape[1], shape[1])
        if fn == "square":
            return ()
        return shape

    # expansion ------------------------------------------------------------
    def expand(self) -> list[Monomial]:
        result: Poly = []
        for term in self.family.log_density:
            poly: Poly = [(term.coef, ())]
            for view in term.views:
                poly = _multiply(poly, self.expand_view(view))
            result += self.fuse(self.add_gates(poly))
        return self.simplify(result)

    def fuse(self, poly: Poly) -> Poly:
        """A block's members met in one term become one statistic of the block
        (``families.blocks.FUSED``): Λ_ij·μ_j is (Λμ)_i, Λ_ij·μ_iμ_j is μᵀΛμ, Λ alone is Λ."""
        out: Poly = []
        for coef, slots in poly:
            parts = [s for s in slots if isinstance(s, Stat) and "." in s.stat]
            if not parts:
                out.append((coef, slots))
                continue
            rest = [s for s in slots if s not in parts]
            for key in dict.fromkeys((s.var, s.index) for s in parts):
                group = [s for s in parts if (s.var, s.index) == key]
                rest.append(self.fuse_group(group, [s for s in slots if s not in group]))
            out.append((coef, tuple(rest)))
        return out

    def fuse_group(self, group: list[Stat], others: list[Slot]) -> Stat:
        block = self.model.block(group[0].var)
        assert block is not None
        precision = [s for s in group if s.stat.startswith("precision.")]
        mean = [s for s in group if s.stat.startswith("mean.")]
        if len(precision) == 1 and not mean:
            only = precision[0]
            return Stat(only.var, only.index, only.stat.split(".", 1)[1], only.tensor)
        if len(precision) == 1 and len(mean) == 1:
            p, m = precision[0], mean[0]
            fused = FUSED.get((p.stat.split(".", 1)[1], m.stat.split(".", 1)[1]))
            elsewhere = {i for s in others for i in s.tensor}
            if fused and set(m.tensor) <= set(p.tensor) and not set(m.tensor) & elsewhere:
                return Stat(p.var, p.index, fused,
                            tuple(i for i in p.tensor if i not in m.tensor))
        raise self.error(
            f"not conjugate: {self.family.name} '{self.var.name}' reads '{block.mean.name}' "
            f"in a term that is not linear in the joint statistics of '{block.mean.name}' and "
            f"'{block.precision.name}'", self.var.span,
        )

    def add_gates(self, poly: Poly) -> Poly:
        """Multiply each monomial by onehot(z)_g once for each gate letter g it uses."""
        out: Poly = []
        for coef, slots in poly:
            used = sorted({i for s in slots if isinstance(s, Stat) for i in s.index if
                           i in self.gates} | {i for s in slots for i in s.tensor if i in
                                               self.gates})
            extra: list[Slot] = []
            for letter in used:
                gate_ref = next(r for g, r in self.gate_refs.values() if g == letter)
                extra.append(self.leaf(gate_ref, "onehot", (letter,), domain="category"))
            out.append((coef, slots + tuple(extra)))
        return out

    def expand_view(self, view: View) -> Poly:
        exprs = tuple(self.child_ref if o == CHILD else self.operands[o] for o in view.operands)
        self.role = ", ".join(view.operands)
        params = {p.name: p for p in self.family.params}
        self.domain = params[view.operands[0]].domain if view.operands[0] in params else None
        letters = tuple(as_letter(i) for i in view.indices)
        if len(exprs) > 1 or view.fn in ("lgamma", "lgamma_sum", "inv", "lgamma1p", "dim"):
            for expr in exprs:
                if view.fn != "dim":
                    self.require_known(expr, view.fn)
            shape = self.view_shape(view.fn, exprs[0])
            self.bind(letters, shape)
            return [(1.0, (self.known(view.fn, exprs, letters),))]
        return self.expand_expr(view.fn, exprs[0], letters)

    def bind(self, letters: tuple[str, ...], shape: Shape) -> None:
        for letter, dim in zip(letters, shape, strict=True):
            old = self.index_dims.get(letter)
            if old is not None and old != dim:
                raise self.error(
                    f"shape mismatch in {self.family.name} '{self.var.name}': sizes {old} and "
                    f"{dim} meet in one index", self.var.span,
                )
            self.index_dims[letter] = dim

    def require_known(self, expr: RExpr, fn: str) -> None:
        latent = self.latent_in(expr)
        if latent:
            param = self._param_for(expr)
            raise self.error(
                f"not conjugate: the {param} of {self.family.name} '{self.var.name}' depends on "
                f"latent '{latent}', but it enters the density through {fn}(), which is not "
                f"linear in any sufficient statistic",
                getattr(expr, "span", self.var.span),
                hint=f"make the {param} a constant (a hyperparameter or data)",
            )

    def _param_for(self, expr: RExpr) -> str:
        for name, operand in self.operands.items():
            if operand == expr:
                return name
        return "argument"

    def latent_in(self, expr: RExpr) -> str | None:
        if isinstance(expr, RVar):
            if not self.model.var(expr.name).observed:
                return expr.name
            return None
        for child in sub_exprs(expr):
            found = self.latent_in(child)
            if found:
                return found
        return None

    def known(self, fn: str, exprs: tuple[RExpr, ...], letters: tuple[str, ...]) -> Known:
        if fn == "dim":  # the static size of the event
            return Known(fn, exprs, letters, ())
        plates: list[str] = []
        for expr in exprs:
            for plate in _plates_in(expr):
                if plate not in plates:
                    plates.append(plate)
        ordered = tuple(p for p in self.var.plates if p in plates)
        return Known(fn, exprs, letters + self.sum_axes(exprs, ordered), ordered)

    def sum_axes(self, exprs: tuple[RExpr, ...], plates: tuple[str, ...]) -> tuple[str, ...]:
        """The letters of the sum indices that data in ``exprs`` take (``A[i, k]`` inside
        ``sum(... for k in K)``): the known's array is the data's, its plate axes first, then
        one axis per summed position, read at the sum's letter."""
        refs = [r for e in exprs for r in data_refs(e)]
        summed = [r for r in refs if any(isinstance(i, SumIndex) for i in r.indices)]
        if not summed:
            return ()
        first = summed[0]
        for ref in refs:
            if _index_key(ref) != _index_key(first):
                raise self.error(
                    f"'{ref.name}' and '{first.name}' enter one known expression with "
                    f"different indices, and '{first.name}' takes the sum's index", ref.span,
                    hint="data that take the sum's index may be multiplied or divided by "
                         "other known factors (e[n] * x[n, k] * beta[k]); give any other "
                         "function of them as data of its own")
        # (a sum's index before a plate's: the known's array is the data's with the summed
        # axes moved last; a ragged plate sits directly in a top-level one, so the axes it
        # folds are never among those moved)
        if tuple(i.plate for i in first.indices if isinstance(i, PlateIndex)) != plates:
            raise self.error(
                f"data '{first.name}' takes the sum's index with its plate indices in another "
                f"order than the plates of '{self.var.name}'", first.span,
                hint="declare the data with its plates nested as those of "
                     f"'{self.var.name}' are")
        return tuple(self.sum_letters[i.name] for i in first.indices if isinstance(i, SumIndex))

    def leaf(self, expr: RVar | RData, fn: str, letters: tuple[str, ...],
             domain: str | None = None) -> Slot:
        """A view of a variable reference: a statistic if latent, known if observed. A latent
        read is read in ``domain`` (by default the current parameter's)."""
        if isinstance(expr, RData):  # integer data used as an index: its one-hot is known
            return self.known(fn, (expr,), letters)
        var = self.model.var(expr.name)
        index = []
        for position in expr.indices:
            if isinstance(position, PlateIndex):
                index.append(position.plate)
            elif isinstance(position, SumIndex):
                index.append(self.sum_letters[position.name])
            else:
                index.append(self.gate_letter(position))
        if var.plates and not expr.indices:
            # the whole variable as a matrix (MarkovChain's transition A for A[k]): its plate
            # is the first letter, summed like a gate's
            rows = letters[:len(var.plates)]
            self.bind(rows, tuple(self.model.plate(p).dim for p in var.plates))
            index, letters = list(rows), letters[len(var.plates):]
        self.bind(letters, self.view_shape(fn, expr))
        if var.observed:
            if any(i in self.gates for i in index):
                raise self.error("an observed variable cannot be selected by a categorical",
                                 expr.span)
            if any(i in self.sum_letters.values() for i in index):
                raise self.error("a sum runs over latent terms; an observed variable cannot "
                                 "take the sum's index", expr.span)
            return self.known(fn, (expr,), letters)
        read = self.model.member(expr)  # the variable itself, or a block's member
        use = Use(read.name, fn, domain or self.domain)
        if self.uses is not None:
            self.uses.append(use)
        elif not FAMILIES[read.family].provides(fn):
            raise self.conjugacy_error(read, use, expr)
        if expr.part is not None:  # a block member: fused with its partner in ``fuse``
            return Stat(var.name, tuple(index), f"{expr.part}.{fn}", letters)
        return Stat(var.name, tuple(index), fn, letters)

    def leaf_poly(self, expr: RVar, fn: str, letters: tuple[str, ...]) -> Poly:
        """Like ``leaf``; data squares and outer products become products of two values."""
        if self.model.var(expr.name).observed and fn in ("square", "outer"):
            self.bind(letters, self.view_shape(fn, expr))
            first, second = (letters[0], letters[1]) if letters else ((), ())
            a = self.known("value", (expr,), (first,) if letters else ())
            b = self.known("value", (expr,), (second,) if letters else ())
            return [(1.0, (a, b))]
        return [(1.0, (self.leaf(expr, fn, letters),))]

    def conjugacy_error(self, var: VarDef, use: Use, expr: RExpr) -> CemConjugacyError:
        prior = FAMILIES[var.family]
        have = ", ".join(s for s, _ in prior.stats)
        uses = [use, *uses_of(self.model, var.name)]
        good = conjugate_priors(prior.event_rank, uses)
        needed = ", ".join(f"E[{_STAT_WORDS.get(stat, stat)}]"
                           for stat in dict.fromkeys(u.stat for u in uses))
        what = _STAT_WORDS.get(use.stat, use.stat)
        if expr == self.child_ref:
            where = f"'{var.name}' as the value of its own {self.family.name} distribution"
        else:
            where = f"'{var.name}' in the {self.role} of {self.family.name} '{self.var.name}'"
        return self.error(
            f"not conjugate: {where} needs E[{what}], but '{var.name}' has a {prior.name} "
            f"prior, whose posterior only provides E[{have}] (edge {var.name} -> {self.var.name})",
            getattr(expr, "span", self.var.span),
            hint=(f"give '{var.name}' a prior from: {', '.join(good)}" if good else
                  f"no family in cemodel is a conjugate prior for every term that reads "
                  f"'{var.name}' (together they need {needed} of it)"),
        )

    def gate_letter(self, position: GateIndex) -> str:
        ref = position.var
        key = render_expr(ref)
        if key not in self.gate_refs:
            gate = as_letter(f"g{len(self.gate_refs)}")
            self.gate_refs[key] = (gate, ref)
            self.gates[gate] = ref.name
            if isinstance(ref, RData):
                self.index_dims[gate] = self.model.datum(ref.name).index_range
            else:
                self.index_dims[gate] = self.model.var(ref.name).categories
        return self.gate_refs[key][0]

    def expand_expr(self, fn: str, expr: RExpr, letters: tuple[str, ...]) -> Poly:
        if isinstance(expr, RVar):
            return self.leaf_poly(expr, fn, letters)
        if isinstance(expr, RSum):
            return self.expand_sum(fn, expr, letters)
        if isinstance(expr, RCall) and expr.func == STICKS:  # log π of stick-breaking weights
            return stick_log_poly(self, fn, expr, letters)
        if self.latent_in(expr) is None and not (
                isinstance(expr, (RBin, RNeg)) and _sum_indexed_data(expr)):
            self.bind(letters, self.view_shape(fn, expr))
            return [(1.0, (self.known(fn, (expr,), letters),))]
        if isinstance(expr, RNeg):
            inner = self.expand_expr(fn, expr.operand, letters)
            if fn == "value":
                return [(-c, s) for c, s in inner]
            if fn in ("square", "outer"):
                return inner
        elif isinstance(expr, RCall) and expr.func == "dot":
            a, b = expr.args
            if fn == "value":
                i = self.fresh(self.event_shape(a)[0])
                return _multiply(self.vector_view("value", a, (i,)),
                                 self.vector_view("value", b, (i,)))
            if fn == "square":
                dim = self.event_shape(a)[0]
                i, j = self.fresh(dim), self.fresh(dim)
                return _multiply(self.vector_view("outer", a, (i, j)),
                                 self.vector_view("outer", b, (i, j)))
        elif isinstance(expr, RBin) and expr.op in "*/":
            left, right = expr.left, expr.right
            if expr.op == "/":
                if self.latent_in(right):
                    raise self.error("not conjugate: a latent variable in a denominator",
                                     right.span, hint="divide only by constants or data")
                right = RCall("reciprocal", (right,), right.span)
            if fn == "logdet" and (not self.event_shape(left) or not self.event_shape(right)):
                # log|s·M| = D log s + log|M| for a scalar s, known (MVN(m0, kappa0 * Lambda))
                # or latent (MVN(0, eye(P) * c * tau))
                scalar, matrix = (left, right) if not self.event_shape(left) else (right, left)
                size = self.event_shape(matrix)[0]
                dim = RDimSize(size, expr.span) if isinstance(size, str) else RConst(
                    float(size), expr.span)
                return _multiply([(1.0, (self.known("value", (dim,), ()),))],
                                 self.expand_factor("log", scalar, expr, ())) + self.expand_expr(
                    "logdet", matrix, letters)
            if fn == "log":
                return (self.expand_factor("log", left, expr, letters)
                        + self.expand_factor("log", right, expr, letters))
            if fn in ("value", "square", "outer"):
                lfn, rfn = fn, fn
                if fn == "outer":  # scalar * vector
                    lfn = "square" if not self.event_shape(left) else "outer"
                    rfn = "square" if not self.event_shape(right) else "outer"
                lshape = letters if self.event_shape(left) else ()
                rshape = letters if self.event_shape(right) else ()
                return _multiply(self.expand_factor(lfn, left, expr, lshape),
                                 self.expand_factor(rfn, right, expr, rshape))
        elif isinstance(expr, RBin) and expr.op in "+-":
            sign = 1.0 if expr.op == "+" else -1.0
            left, right = expr.left, expr.right
            part = self.broadcast_part
            if fn == "value":
                return part("value", left, letters) + [
                    (sign * c, s) for c, s in part("value", right, letters)]
            if fn == "square":
                cross = _multiply(self.expand_expr("value", left, ()),
                                  self.expand_expr("value", right, ()))
                return (self.expand_expr("square", left, ())
                        + [(2 * sign * c, s) for c, s in cross]
                        + self.expand_expr("square", right, ()))
            if fn == "outer":
                i, j = letters
                cross1 = _multiply(part("value", left, (i,)), part("value", right, (j,)))
                cross2 = _multiply(part("value", right, (i,)), part("value", left, (j,)))
                return (part("outer", left, letters)
                        + [(sign * c, s) for c, s in cross1 + cross2]
                        + part("outer", right, letters))
        latent = self.latent_in(expr)
        raise self.error(
            f"not conjugate: the {self.role} of {self.family.name} '{self.var.name}' needs "
            f"E[{_STAT_WORDS.get(fn, fn)}] of this expression, which is not linear in the "
            f"statistics of latent '{latent}'",
            getattr(expr, "span", self.var.span),
        )

    def expand_factor(self, fn: str, factor: RExpr, product: RBin,
                      letters: tuple[str, ...]) -> Poly:
        """One factor of a product; a scalar scaling an array is read in the domain of its
        scale (``SCALE_DOMAIN``)."""
        domain = self.domain
        if domain in SCALE_DOMAIN and not self.event_shape(factor) and self.event_shape(product):
            self.domain = SCALE_DOMAIN[domain]
        try:
            return self.expand_expr(fn, factor, letters)
        finally:
            self.domain = domain

    def expand_sum(self, fn: str, expr: RSum, letters: tuple[str, ...]) -> Poly:
        """``value`` of a sum: its terms, over a fresh summed letter. With one letter given
        (``log rate_k`` in Poisson·split) the view is of the k-th term alone."""
        if fn == "value" and not letters:
            letter = self.fresh(expr.dim)
        elif letters and len(letters) == 1 and self.family.name == "Poisson·split":
            letter = letters[0]
            self.bind(letters, (expr.dim,))
        else:
            raise self.error(
                f"not conjugate: the {self.role} of {self.family.name} '{self.var.name}' needs "
                f"E[{_STAT_WORDS.get(fn, fn)}] of a sum over '{expr.index}', which is not "
                "linear in the statistics of its terms", expr.span,
            )
        self.sum_letters[expr.index] = letter
        try:
            return self.expand_expr(fn, expr.body, ())
        finally:
            del self.sum_letters[expr.index]

    def broadcast_part(self, fn: str, expr: RExpr, letters: tuple[str, ...]) -> Poly:
        """One side of a sum: a scalar added to a vector (``mu + m0``) is the same value in
        every entry, so it carries no tensor letters and its outer product is its square."""
        if letters and not self.event_shape(expr):
            return self.expand_expr("square" if fn == "outer" else fn, expr, ())
        return self.expand_expr(fn, expr, letters)

    def vector_view(self, fn: str, expr: RExpr, letters: tuple[str, ...]) -> Poly:
        if self.latent_in(expr) is None and fn == "outer":
            # a known vector's outer product is the product of its values
            i, j = letters
            return [(1.0, (self.known("value", (expr,), (i,)), self.known("value", (expr,), (j,))))]
        return self.expand_expr(fn, expr, letters)

    def simplify(self, poly: Poly) -> list[Monomial]:
        out: list[Monomial] = []
        for coef, slots in poly:
            if coef == 0.0 or any(_structurally_zero(s) for s in slots):
                continue  # (a literal zero mean: its terms vanish, and no kernel adds them)
            seen: list[Stat] = []
            for slot in slots:
                if isinstance(slot, Stat):
                    if any(_same_row(slot, other) for other in seen):
                        raise self.error(
                            f"not conjugate: '{slot.var}' enters one term of {self.family.name} "
                            f"'{self.var.name}' twice (its density is not linear in the "
                            f"statistics of '{slot.var}')", self.var.span,
                            hint=None if slot.index == next(
                                o for o in seen if o.var == slot.var).index else
                            f"two rows of '{slot.var}' summed over meet in one term (such as "
                            f"Aᵀ Q A) and are one row where the sums coincide; make "
                            f"'{slot.var}' a constant (a hyperparameter or data)"
                            + self.family.twice_hint,
                        )
                    seen.append(slot)
            out.append(Monomial(coef, slots))
        return out


_STAT_WORDS = {
    "value": "x", "square": "x²", "log": "log x", "log1m": "log(1 − x)", "onehot": "onehot(x)",
    "outer": "x xᵀ", "logdet": "log|x|",
}


def _same_row(a: Stat, b: Stat) -> bool:
    """Whether two statistics may read one row of one variable: at every position the same
    plate, or a summed letter (a whole matrix's row, a gate) that can take the other's value."""
    if a.var != b.var or len(a.index) != len(b.index):
        return a.var == b.var and a.index == b.index
    return all(i == j or i.startswith(LETTER) or j.startswith(LETTER)
               for i, j in zip(a.index, b.index, strict=True))


def _multiply(a: Poly, b: Poly) -> Poly:
    return [(ca * cb, sa + sb) for ca, sa in a for cb, sb in b]


def _structurally_zero(slot: Slot) -> bool:
    """A known that is 0 whatever the data and hyperparameters: a view of the literal 0 or of
    zeros(D) that keeps its zeros (its value, square or outer product)."""
    if not isinstance(slot, Known) or slot.fn not in ("value", "square", "outer"):
        return False
    first = slot.operands[0] if len(slot.operands) == 1 else None
    if isinstance(first, RConst):
        return first.value == 0.0
    return isinstance(first, RCall) and first.func == "zeros"


def _sum_indexed_data(expr: RExpr) -> bool:
    return any(isinstance(i, SumIndex) for r in data_refs(expr) for i in r.indices)


def _index_key(ref: RData) -> tuple[tuple[str, str], ...]:
    return tuple(("plate", i.plate) if isinstance(i, PlateIndex) else ("sum", i.name)
                 for i in ref.indices)


def _plates_in(expr: RExpr) -> list[str]:
    if isinstance(expr, (RVar, RData)):
        return [i.plate for i in expr.indices if isinstance(i, PlateIndex)]
    found: list[str] = []
    for child in sub_exprs(expr):
        found += _plates_in(child)
    return found


def uses_of(model: Model, name: str) -> list[Use]:
    """Every read of latent ``name`` (a variable or a block's member) in the factors of the
    other variables: the expansion ``analyse`` runs, recording each read instead of refusing
    it. A factor with a mistake of its own (one no prior of ``name`` would change) is
    recorded up to that mistake, which is reported once the prior is right."""
    uses: list[Use] = []
    for var in model.variables:
        block = model.block(var.name)
        if name in (var.name, *((block.mean.name, block.precision.name) if block else ())):
            continue  # its own prior
        expander = Expander(model, var)
        expander.uses = uses
        try:
            expander.expand()
        except CemError:
            pass
    return [use for use in uses if use.var == name]
