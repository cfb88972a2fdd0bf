"""Held-out scores of a fit: how well its q(globals) predicts new items.

    s = model.score(fit, heldout, draws=200, seed=0)
    s.elbo            # held-out ELBO per item: a lower bound
    s.log_predictive  # exact in the locals, Monte Carlo in the globals; None where not exact
    s.perplexity      # topic models: document completion (cemodel.evaluation)

For the N held-out items x_n (the elements of the data plate), with β the globals:

* ``elbo`` = (1/N) Σ_n ELBO_n, ELBO_n = E_q(β)q(ℓ_n)[log p(x_n, ℓ_n | β)] + H[q(ℓ_n)], the
  locals ℓ_n fitted by the model's local step with q(β) fixed (``Model.infer``). For every β,
  E_q(ℓ)[log p(x, ℓ | β)] + H[q(ℓ)] ≤ log p(x | β), so ELBO_n ≤ E_q(β)[log p(x_n | β)] ≤
  log E_q(β)[p(x_n | β)]: a lower bound on the log predictive density under q.
* ``log_predictive`` = (1/N) Σ_n log (1/S) Σ_s p(x_n | β_s), β_s ~ q(β), s = 1..S
  (``draws``): the log pointwise predictive density of the items under q, estimated with S
  draws of the globals (``Model.posterior_draws`` gives the same draws for the same seed),
  each p(x_n | β_s) exact: the locals summed out (a bag of words scored as its tokens, as the
  ELBO is: no multinomial coefficient). It exists where every local can be summed
  out exactly given the globals: none (conjugate pairs, regressions, hierarchies whose
  groups are global), a categorical (mixtures: log Σ_k p(z = k) p(x | z = k)) or a Markov
  chain (HMMs: the forward algorithm), each read only by observed variables. Otherwise
  (LDA's θ, factor analysis's f) it is None and ``exact`` says why. The estimate's bias is
  downward, O(1/S): by Jensen's inequality log (1/S) Σ_s p_s ≥ (1/S) Σ_s log p_s, an
  unbiased estimate of E_q[log p(x_n | β)] ≥ ELBO_n, so ``elbo ≤ log_predictive`` but for
  Monte Carlo noise.
* ``log_likelihood_per_word`` (topic models, ``cemodel.topics.topic_structure``): document
  completion with the topics at q's mean (``cemodel.evaluation``); ``perplexity`` its exp(−·).

Comparing two models (or settings) on the same held-out items: greater is better for elbo
and log_predictive, both per item in nats. Compare log_predictive with log_predictive, and
elbo with elbo only where the locals are alike (a bound's slack differs between models).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import sparse
from scipy.special import logsumexp

from .augment_sticks import stick_variables
from .distributions import NUMERIC, categorical_table_log, numeric
from .forward import Evaluator, Scope, blocks, parents, references
from .model import RVar
from .predictive import Compiled, Posterior, World, checked_draws, draw_q

Array = np.ndarray

__all__ = ["Score", "score"]

_SUMMED = ("Categorical", "MarkovChain")


@dataclass(frozen=True)
class Score:
    """Held-out scores per item, in nats (see the module doc for which is which)."""

    items: int
    elbo: float  # the held-out ELBO per item: a lower bound
    log_predictive: float | None  # (1/N) Σ_n log (1/S) Σ_s p(x_n | β_s), locals summed out
    item_log_predictive: Array | None  # each item's log (1/S) Σ_s p(x_n | β_s)
    draws: int  # S
    exact: str  # what log_predictive is, or why there is none
    log_likelihood_per_word: float | None = None  # topic models: document completion

    @property
    def perplexity(self) -> float | None:
        """exp(−log_likelihood_per_word), topic models only."""
        ll = self.log_likelihood_per_word
        return None if ll is None else float(np.exp(-ll))


@dataclass(frozen=True)
class SumOut:
    """A local summed out: the observed variables that read it and how (their reference)."""

    local: str
    children: tuple[tuple[str, RVar], ...]


@dataclass(frozen=True)
class ExactPlan:
    direct: tuple[str, ...]  # observed variables that read no local
    sums: tuple[SumOut, ...]


def exact_plan(world: World) -> ExactPlan | str:
    """How to sum every local out exactly, or why it cannot be done."""
    model, plate = world.model, world.model.data_plate
    drawn = set(world.globals_)
    for block in world.fitted.blocks:
        drawn |= {block.mean.name, block.precision.name}
    drawn |= {sticks.of for sticks in stick_variables(world.fitted)}  # drawn as the sticks
    local = [v for v in model.latents if v.name not in drawn]
    reads = {v.name: [r for a in v.args for r in references(a)] for v in model.variables}
    for var in model.observed:
        if not var.plates or var.plates[0] != plate:
            return f"'{var.name}' is observed outside the data plate {plate}"
        if getattr(NUMERIC.get(var.family), "log_density", None) is None:
            return f"cemodel has no log density of the {var.family} family ('{var.name}')"
    sums = []
    for var in local:
        if var.family not in _SUMMED:
            return (f"the local '{var.name}' ({var.family}) is not summed out: only a "
                    "categorical or Markov-chain local is")
        if any(p in {v.name for v in local} for p in parents(var)):
            return f"the local '{var.name}' depends on another local"
        children = []
        for child in model.variables:
            refs = [r for r in reads[child.name] if r.name == var.name]
            if not refs:
                continue
            others = {r.name for r in reads[child.name]} & {v.name for v in local}
            if not child.observed:
                return f"the latent '{child.name}' reads the local '{var.name}'"
            if others != {var.name}:
                return f"'{child.name}' reads the local '{var.name}' and another local"
            if len(refs[0].indices) != len(var.plates):
                return f"'{child.name}' reads '{var.name}' without all its indices"
            children.append((child.name, refs[0]))
        sums.append(SumOut(var.name, tuple(children)))
    summed = {child for s in sums for child, _ in s.children}
    return ExactPlan(tuple(v.name for v in model.observed if v.name not in summed),
                     tuple(sums))


def _weights(world: World, plates: tuple[str, ...], scope: Scope) -> Array | float:
    """Each row's count: a bag's entry stands for that many tokens."""
    ragged = [p for p in plates if world.model.plate(p).ragged]
    if not ragged:
        return 1.0
    at = world.layout.position(plates, [scope.plates[p] for p in plates])
    return world.weights[ragged[0]][at[0]]


def _observed_log(world: World, evaluate: Evaluator, name: str) -> tuple[Array, Array]:
    """log p(x | parents) of every row of observed ``name`` (times its count), and its item."""
    var = world.model.var(name)
    scope = world.layout.scope(var.plates)
    density = numeric(var.family, "log density").log_density
    x = np.asarray(world.data[name], dtype=float)
    x = x.reshape((scope.rows,) + x.shape[len(world.layout.shape(var.plates)):])
    weights, items = _weights(world, var.plates, scope), scope.plates[var.plates[0]]
    table = evaluate.table(var.args[0], scope) if var.family == "Categorical" else None
    if table is not None:  # probabilities read from a variable: log table[row, x]
        return categorical_table_log(x, *table) * weights, items
    log_p, start = np.empty(scope.rows), 0
    for part in blocks(evaluate, var.args, scope):
        params = tuple(np.asarray(evaluate(arg, part)) for arg in var.args)
        log_p[start:start + part.rows] = density(x[start:start + part.rows], params)
        start += part.rows
    return log_p * weights, items


def _forward_algorithm(init: Array, transition: Array, emission: Array,
                       step: Array) -> tuple[Array, Array]:
    """log p(x of each chain): α_0 = init ⊙ e_0, α_t = (α_{t−1} A) ⊙ e_t, in logs; the
    chains' rows are consecutive, ``step`` their position. Returns (log p, last rows)."""
    with np.errstate(divide="ignore"):
        log_init, log_a = np.log(init), np.log(transition)
    rows = np.arange(len(step))
    alpha = np.empty_like(emission)
    for t in range(int(step.max(initial=-1)) + 1):
        at = rows[step == t]
        if t == 0:
            alpha[at] = log_init[at] + emission[at]
        else:
            alpha[at] = logsumexp(alpha[at - 1][:, :, None] + log_a[at], axis=1) + emission[at]
    last = rows[np.append(step[1:] == 0, True)] if len(step) else rows
    return logsumexp(alpha[last], axis=1), last


def _summed(world: World, evaluate: Evaluator, values: dict[str, Array], plan: SumOut,
            n_items: int) -> Array:
    """Σ over the rows of a local of log Σ_k p(k) Π_children p(child | k), per item. A row
    of a bag stands for c tokens, each with its own local: c · log Σ_k p(k) p(token | k)."""
    var = world.model.var(plan.local)
    layout = world.layout
    K = layout.size(var.categories)
    scope = layout.scope(var.plates)
    params = [np.asarray(evaluate(a, scope)) for a in var.args]
    children = [(child, evaluate.rows_of(ref, layout.scope(world.model.var(child).plates)))
                for child, ref in plan.children]
    emission = np.zeros((scope.rows, K))  # Σ_children log p(child | local = k), per row
    for k in range(K):
        values[plan.local] = np.full(layout.shape(var.plates), k)
        for child, rows in children:
            log_p, _ = _observed_log(world, evaluate, child)
            emission[:, k] += np.bincount(rows, log_p, minlength=scope.rows)
    del values[plan.local]
    copies = _weights(world, var.plates, scope)
    emission /= np.reshape(copies, (-1, 1))  # per token, its children's own rows
    items = scope.plates[var.plates[0]]
    if var.family == "MarkovChain":
        log_p, last = _forward_algorithm(params[0], params[1], emission,
                                         scope.plates[var.plates[-1]])
        return np.bincount(items[last], log_p, minlength=n_items)
    with np.errstate(divide="ignore"):
        log_p = logsumexp(np.log(params[0]) + emission, axis=1) * copies
    return np.bincount(items, log_p, minlength=n_items)


def item_log_likelihood(world: World, plan: ExactPlan, values: dict[str, Array]) -> Array:
    """log p(x_n | β) of every item, the locals summed out, β the globals in ``values``."""
    n_items = world.layout.size(world.model.plate(world.model.data_plate).dim)
    evaluate = Evaluator(world.layout, world.hypers, world.data, values)
    total = np.zeros(n_items)
    for name in plan.direct:
        log_p, items = _observed_log(world, evaluate, name)
        total += np.bincount(items, log_p, minlength=n_items)
    for summed in plan.sums:
        total += _summed(world, evaluate, values, summed, n_items)
    return total


def _completion(topic: Any, post: Posterior, world: World, seed: int,
                max_local_iter: int, local_tol: float) -> float | None:
    """Topic models (``topic``: the roles, ``cemodel.topics.topic_structure``): the mean
    held-out log likelihood per word by document completion."""
    from .evaluation import completion_log_likelihood_per_word, topics_from_dirichlet

    if topic is None:
        return None
    topics = topics_from_dirichlet(post.params[f"{topic.topics}.alpha"])
    return completion_log_likelihood_per_word(
        topics, topic.alpha_value(post.hypers),
        _count_matrix(world, topic.words, topics.shape[-1]), seed=seed,
        max_iter=max_local_iter, tol=local_tol)


def completion(model: Compiled, fit: Any, heldout: Mapping[str, Any], topic: Any,
               seed: int = 0, max_local_iter: int = 100, local_tol: float = 1e-3) -> float:
    """The held-out log likelihood per word of a topic model's ``heldout`` documents by
    document completion (``Model.score``'s perplexity, the estimator's score)."""
    post = Posterior.of(fit)
    return _completion(topic, post, World.of(model, post, heldout), seed, max_local_iter,
                       local_tol)


def _count_matrix(world: World, words: str, n_words: int) -> sparse.csr_matrix:
    """The held-out documents as a documents × words count matrix, read from the bound
    data, so from any form the data may take (a count matrix, a list of token-id arrays)."""
    plate = world.model.var(words).plates[-1]
    ids = np.asarray(world.data[words])
    if plate in world.layout.ptrs:  # ragged: a bag of words, or token lists
        ptr, counts = world.layout.ptrs[plate], world.weights[plate]
    else:  # every document the same number of tokens
        ptr = np.arange(ids.shape[0] + 1) * ids.shape[1]
        ids, counts = ids.ravel(), np.ones(ids.size)
    matrix = sparse.csr_matrix((counts, ids, ptr), shape=(len(ptr) - 1, n_words))
    matrix.sum_duplicates()
    return matrix


def score(model: Compiled, fit: Any, heldout: Mapping[str, Any], inference: Any,
          topic: Any = None, draws: int = 100, seed: int = 0, max_local_iter: int = 100,
          local_tol: float = 1e-3) -> Score:
    """The held-out scores of ``heldout`` (new items) under ``fit`` (see the module doc);
    ``inference``: the local step's result on them (``Model.infer``: its ELBO); ``topic``:
    the topic-model roles, for document completion (``Model.score`` gives both)."""
    draws = checked_draws(draws, seed)
    post = Posterior.of(fit)
    world = World.of(model, post, heldout)
    plan = exact_plan(world)
    completion = _completion(topic, post, world, seed, max_local_iter, local_tol)
    n = max(inference.items, 1)
    if isinstance(plan, str):
        return Score(inference.items, inference.elbo / n, None, None, draws, plan, completion)
    q = draw_q(world, post, world.globals_, draws, np.random.default_rng(seed))
    per_draw = np.stack([item_log_likelihood(world, plan, {k: v[s] for k, v in q.items()})
                         for s in range(draws)])
    items = logsumexp(per_draw, axis=0) - np.log(draws)
    how = (f"log (1/S) Σ_s p(x_n | β_s), S = {draws} draws of the globals from q"
           + (f", {', '.join(s.local for s in plan.sums)} summed out" if plan.sums else ""))
    return Score(inference.items, inference.elbo / n, float(items.mean()), items, draws, how,
                 completion)
