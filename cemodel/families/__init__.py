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
    gaussian_chain,
    geometric,
    markov_chain,
    multinomial,
    mvn,
    negative_binomial,
    normal,
    poisson,
    polyagamma,
    split,
    stick_breaking,
    student_t,
    wishart,
)
from .base import CHILD, FamilySpec, Param, Term, View

# variational families whose posterior is one whole chain per sequence, computed exactly by
# the runtime function named here (the local step of a state-space model)
CHAIN_POSTERIORS: dict[str, str] = {"markov": "chain_posterior",
                                    "gaussian_chain": "gaussian_chain_posterior"}

FAMILIES: dict[str, FamilySpec] = {}
for _module in (
    dirichlet, categorical, beta, bernoulli, binomial, gamma, poisson, exponential, normal, mvn,
    wishart, markov_chain, geometric, negative_binomial, multinomial, student_t,
    gaussian_chain, stick_breaking,
):
    _spec = _module.SPEC
    FAMILIES[_spec.name] = _spec
    for _alias in _spec.aliases:
        FAMILIES[_alias] = _spec
# the names a model file may write (families and their aliases)
FAMILIES[gaussian_chain.DIAGONAL.name] = gaussian_chain.DIAGONAL  # its module's second family
WRITABLE: frozenset[str] = frozenset(FAMILIES)
# the families whose variable is a whole chain along the steps plate
CHAIN_FAMILIES: frozenset[str] = frozenset(
    name for name, spec in FAMILIES.items() if spec.variational in CHAIN_POSTERIORS)
# introduced by the compiler (cemodel.augment, cemodel.blocks), never written in a model
# file: their names are not identifiers, so the parser cannot produce them
for _spec in (split.SPLIT, split.POISSON_SPLIT, blocks.NORMAL_GAMMA, blocks.NORMAL_WISHART,
              polyagamma.POLYA_GAMMA, *polyagamma.AUGMENTED.values()):
    FAMILIES[_spec.name] = _spec

__all__ = ["CHAIN_FAMILIES", "CHAIN_POSTERIORS", "CHILD", "FAMILIES", "WRITABLE", "FamilySpec",
           "Param", "Term", "View"]
