"""What every exponential family tells the compiler, as data.

A family's log density is written as a sum of ``Term``s. Each term is a
coefficient times a product of ``View``s of its operands (the child ``x`` and
the named parameters), with einsum-style tensor index letters. This is the
variational-message-passing form (Winn & Bishop 2005): a model is
conditionally conjugate exactly when, after expanding every argument
expression, each term is linear in the sufficient statistics of every random
variable it contains. Views of constants (hyperparameters, data) can be any
function; views of a latent variable must be one of its family's statistics.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..numerics import SHAPE_SMALLEST as SHAPE_SMALLEST

CHILD = "x"


@dataclass(frozen=True)
class View:
    """``fn`` of ``operands`` (usually one), carrying tensor ``indices``.

    Single-operand views of a latent variable are its sufficient statistics
    (``log``, ``value``, ``square``, ``onehot``, ``outer``, ``logdet``, ``log1m``).
    ``dim`` is the static size of the operand's event. Anything else is a
    function of constants only (``lgamma``, ``inv``, ``lbeta`` ...).
    """

    fn: str
    operands: tuple[str, ...]
    indices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Term:
    coef: float
    views: tuple[View, ...]


@dataclass(frozen=True)
class Param:
    name: str
    rank: int  # 0 scalar, 1 vector, 2 matrix
    domain: str  # real, positive, unit, spd, count, simplex (see SUPPORT_WITHIN)
    # the smallest value the variational parameters represent: a shape held as α − 1 is
    # 0 once α < 2^-53 (ε/2), so such a parameter must be at least ε
    smallest: float = 0.0


# The parameter domains a value of each support lies in: a variable may be read as a
# parameter only if its support is within the parameter's domain (a rate is positive, a
# probability in (0, 1), a precision matrix SPD). "category" is the domain of an index
# (``beta[z[n]]``): only a categorical selects.
SUPPORT_WITHIN: dict[str, frozenset[str]] = {
    "real": frozenset({"real"}),
    "vector": frozenset({"real"}),
    "positive": frozenset({"positive", "real"}),
    "unit": frozenset({"unit", "positive", "real"}),
    "simplex": frozenset({"simplex", "real"}),
    "spd": frozenset({"spd", "real"}),
    "binary": frozenset({"count", "real"}),
    "count": frozenset({"count", "real"}),
    "trials": frozenset({"count", "positive", "real"}),
    "category": frozenset({"category"}),
}


def support_signs(support: str) -> frozenset[int] | None:
    """The signs a value of ``support`` takes, read from ``SUPPORT_WITHIN``: positive (a
    matrix: positive definite) where it lies in the positive or SPD domain, 0 or positive in
    the count or simplex domain; None where that says nothing (a real)."""
    within = SUPPORT_WITHIN.get(support, frozenset())
    if within & {"positive", "spd"}:
        return frozenset({1})
    if within & {"count", "simplex"}:
        return frozenset({0, 1})
    return None


# The domain of a scalar that multiplies an array read in a domain (``t * eye(D)`` as a
# precision matrix: t > 0); in any other domain a factor of a product is read in the
# product's.
SCALE_DOMAIN: dict[str, str] = {"spd": "positive"}


@dataclass(frozen=True)
class FamilySpec:
    """One exponential family: parameters, support, statistics, log density."""

    name: str
    params: tuple[Param, ...]
    support: str  # real, positive, unit, simplex, category, binary, count, vector, spd
    event_rank: int
    # the variational family a latent variable with this prior gets, and its statistics
    variational: str | None
    stats: tuple[tuple[str, int], ...]
    log_density: tuple[Term, ...]
    # the parameter whose (last) axis gives the event shape / number of categories
    shape_from: str | None = None
    doc: str = ""
    aliases: tuple[str, ...] = field(default=())
    # what to write instead, where a latent variable of this family is refused
    latent_hint: str = ""
    # what else to write where a latent argument enters a term twice (refused by conjugacy)
    twice_hint: str = ""
    # the family whose parameters q holds, where it is not this one (an Exponential prior's q
    # is a Gamma: fit.posterior holds its shape and rate)
    posterior: str | None = None

    def provides(self, stat: str) -> bool:
        """Whether the posterior of a variable with this prior provides E[stat]: the one rule
        by which a term reading a latent variable is accepted (``cemodel.conjugacy``)."""
        return stat in dict(self.stats)

    @property
    def posterior_family(self) -> str:
        """The name of the family q takes (its draws, its parameters in fit.posterior)."""
        return self.posterior or self.name

    def fits(self, domain: str) -> bool:
        """Whether every value of this family lies in a parameter ``domain``."""
        return domain in SUPPORT_WITHIN[self.support]


def v(fn: str, operand: str, *indices: str) -> View:
    """Shorthand for a one-operand view."""
    return View(fn, (operand,), tuple(indices))


def t(coef: float, *views: View) -> Term:
    return Term(coef, tuple(views))
