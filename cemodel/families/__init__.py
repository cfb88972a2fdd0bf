"""The registry of exponential families known to the compiler.

Each family is one module holding a ``FamilySpec``; this registry is the only
place that lists them. Conjugacy is not written per pair: it follows from the
log-density terms (see ``cemodel.conjugacy``).
"""

from __future__ import annotations

from . import (
    bernoulli,
    beta,
    binomial,
    blocks,
    categorical,
    dirichlet,
    exponential,
    gamma,
    geometric,
    markov_chain,
    multinomial,
    mvn,
    negative_binomial,
    normal,
    poisson,
    split,
    stick_breaking,
    wishart,
)
from .base import CHILD, FamilySpec, Param, Term, View

FAMILIES: dict[str, FamilySpec] = {}
for _module in (
    dirichlet, categorical, beta, bernoulli, binomial, gamma, poisson, exponential, normal, mvn,
    wishart, markov_chain, geometric, negative_binomial, multinomial, stick_breaking,
):
    _spec = _module.SPEC
    FAMILIES[_spec.name] = _spec
    for _alias in _spec.aliases:
        FAMILIES[_alias] = _spec
# the names a model file may write (families and their aliases)
WRITABLE: frozenset[str] = frozenset(FAMILIES)
# introduced by the compiler (cemodel.augment, cemodel.blocks), never written in a model
# file: their names are not identifiers, so the parser cannot produce them
for _spec in (split.SPLIT, split.POISSON_SPLIT, blocks.NORMAL_GAMMA, blocks.NORMAL_WISHART):
    FAMILIES[_spec.name] = _spec

__all__ = ["CHILD", "FAMILIES", "WRITABLE", "FamilySpec", "Param", "Term", "View"]
