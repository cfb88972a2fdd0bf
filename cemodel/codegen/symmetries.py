"""Scale symmetries between Gamma globals, decided at lowering: where the data see two
Gamma globals only through their product (``Poisson(e[n] * lam[r[n]] * s[a[n]])``, or part
by part, ``Poisson(sum(lam[z[n], k] * W[j, k] for k in K))``), scaling one by c and the other
by 1/c changes no term of the ELBO but their priors and entropies. Coordinate ascent crawls
along that ridge (only the priors pull), so the drivers take the best c in closed form after
each global step (``cemodel.runtime.scales``; parameter expansion, Qi & Jaakkola 2006).

The symmetry is read off the expanded factors, not guessed from the source: outside the two
globals' own priors, every monomial that reads them must be unchanged by the scaling. A
monomial with value statistics needs as many of one as of the other (and, part by part, in
the same part); the monomials through their logs must cancel in pairs (the same coefficient
and other slots, one of each). A gate's one-hot on the scaled row is summed out (it sums to
one over the rows the scale moves alike). Each read must come through the data's
statistics, so that the global's update with ``data_scale = 0`` is its prior alone.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

from ..plan import InferencePlan
from ..terms import Known, Monomial, Slot, Stat
from .starts import family


@dataclass(frozen=True)
class ScaleSymmetry:
    """``up`` scaled by c and ``down`` by 1/c leave the data's terms unchanged; with parts,
    c per index of ``up``'s axis ``up_part`` (the same index of ``down``'s ``down_part``)."""

    up: str
    down: str
    up_part: int | None = None
    down_part: int | None = None

    def literal(self) -> str:
        return (f"rt.ScaleSymmetry({self.up!r}, {self.down!r}, {self.up_part!r}, "
                f"{self.down_part!r})")


def scale_symmetries(plan: InferencePlan) -> tuple[ScaleSymmetry, ...]:
    """Every pair of Gamma globals the data see only through their product: part by part
    where that holds (a finer move), else as a whole."""
    gammas = [n for n in plan.globals if family(plan.model, n) == "gamma"]
    found: list[ScaleSymmetry] = []
    for up, down in itertools.combinations(gammas, 2):
        if _priors_read(plan, up, down):
            continue
        for parts in (*_part_axes(plan, up, down), (None, None)):
            candidate = ScaleSymmetry(up, down, *parts)
            if _invariant(plan, candidate):
                found.append(candidate)
                break
    return tuple(found)


def _priors_read(plan: InferencePlan, up: str, down: str) -> bool:
    """Does either prior read the other (then the prior terms move with the scale too)?"""
    for factor in plan.analysis.factors:
        if factor.child in (up, down):
            other = down if factor.child == up else up
            if any(isinstance(s, Stat) and s.var == other
                   for m in factor.monomials for s in m.slots):
                return True
    return False


def _scaled(monomial: Monomial, names: tuple[str, str]) -> list[Stat]:
    return [s for s in monomial.slots if isinstance(s, Stat) and s.var in names]


def _part_axes(plan: InferencePlan, up: str, down: str) -> list[tuple[int, int]]:
    """(axis of up, axis of down) holding one summed letter in a product of the two."""
    plates = {p.name for p in plan.model.plates}
    for factor in plan.analysis.factors:
        for monomial in factor.monomials:
            scaled = _scaled(monomial, (up, down))
            ups = [s for s in scaled if s.var == up and s.stat == "value"]
            downs = [s for s in scaled if s.var == down and s.stat == "value"]
            if len(ups) == 1 and len(downs) == 1:
                return [(i, j) for i, a in enumerate(ups[0].index)
                        for j, b in enumerate(downs[0].index)
                        if a == b and a not in plates]
    return []


def _invariant(plan: InferencePlan, sym: ScaleSymmetry) -> bool:
    sign = {sym.up: 1, sym.down: -1}
    part = {sym.up: sym.up_part, sym.down: sym.down_part}
    logs: Counter = Counter()
    for f, factor in enumerate(plan.analysis.factors):
        if factor.child in sign:
            continue  # a prior: the move's own terms
        for m, monomial in enumerate(factor.monomials):
            scaled = _scaled(monomial, (sym.up, sym.down))
            if not scaled:
                continue
            if plan.accumulator_for(f, m) is None:
                return False  # read outside the data's statistics (or by another latent)
            if any(s.stat not in ("value", "log") for s in scaled):
                return False
            values = [s for s in scaled if s.stat == "value"]
            if values:
                if len(values) != len(scaled) or not _balanced(values, sign, part):
                    return False
                continue
            if len(scaled) != 1:
                return False
            log = scaled[0]
            letter = None if part[log.var] is None else log.index[part[log.var]]
            rest = sorted(repr(s) for s in monomial.slots
                          if s is not log and not _gate_on(s, log, part[log.var]))
            logs[(f, monomial.coef, letter, tuple(rest))] += sign[log.var]
    return all(total == 0 for total in logs.values())


def _balanced(values: list[Stat], sign: dict[str, int], part: dict[str, int | None]) -> bool:
    """As many values of one as of the other, part by part in the same parts."""
    if sum(sign[s.var] for s in values) != 0:
        return False
    letters: Counter = Counter()
    for s in values:
        if part[s.var] is not None:
            letters[s.index[part[s.var]]] += sign[s.var]
    return all(total == 0 for total in letters.values())


def _gate_on(slot: Slot, scaled: Stat, part: int | None) -> bool:
    """A one-hot (data's or q(z)'s) choosing the scaled global's row: its letters index the
    scaled slot outside its part axis, so it sums to one over rows the scale moves alike."""
    onehot = ((isinstance(slot, Known) and slot.fn == "onehot")
              or (isinstance(slot, Stat) and slot.stat == "onehot"))
    if not onehot or not slot.tensor:
        return False
    outside = {a for i, a in enumerate(scaled.index) if i != part}
    return set(slot.tensor) <= outside
