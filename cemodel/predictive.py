"""The posterior predictive: replicated data drawn from q(globals), then from the model.

    pp = model.sample_posterior_predictive(fit, draws=200, seed=0)   # the fit's own items
    pp = model.sample_posterior_predictive(fit, 200, 0, data=new, new=True)   # new items
    pp["x"].shape == (200, N, D)        # one leading axis of draws per observed variable

One draw: every global β from q(β) (a joint block's pair together), then every other
latent variable and every observed variable in the model's order (``forward.in_order``),
each from its family given the draws of what it reads. A local with a posterior in the fit
(``Model.item_locals``: LDA's θ, a mixture's z) is drawn from q for the fit's items
(``new=False``); a local the fit holds no q for (LDA's token topics, an HMM's states) and
every local of new items (``new=True``) from its prior given the draws of its parents.

What comes back per observed variable: (draws, the data's layout), e.g. (draws, N, D); a
bag of categories (LDA's words, a ragged plate whose order does not matter) as counts per
item (draws, D, V), like the count matrix it was fitted to; another ragged variable (an
HMM's sequences) flat, its sequences one after another. An ArviZ ``InferenceData`` takes it
as ``idata.add_groups(posterior_predictive={k: v[None] for k, v in pp.items()})`` (one
chain).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

import numpy as np

from .augment_sticks import stick_variables
from .compiler import Stages, built_model
from .distributions import JOINT, Q_NAMES, categorical_rows, numeric
from .errors import CemDataError, CemError
from .families import CHAIN_FAMILIES, FAMILIES
from .forward import Evaluator, Layout, Scope, blocks, in_order
from .model import Model as ModelIR
from .options import check_options
from .runtime.binding import SizesFrom, bind_data
from .runtime.sticks import weights_of_sticks

Array = np.ndarray

__all__ = ["Compiled", "Posterior", "World", "posterior_draws", "sample_posterior_predictive"]


class Compiled(Protocol):
    """What the draws read of a compiled model (a ``cemodel.api.Model``)."""

    module: ModuleType
    stages: Stages
    settings: dict[str, float]

    @property
    def data_plate(self) -> str | None: ...


@dataclass(frozen=True)
class Posterior:
    """What the draws read of a fit: q's parameters (``Fit.posterior``: ``"mu.mean"``, ...),
    the hyperparameters it used and the sizes it was fitted with (both may be empty: the
    model file's defaults, the data's sizes)."""

    params: Mapping[str, Array]
    hypers: Mapping[str, Any]
    dims: Mapping[str, int]

    @classmethod
    def of(cls, fit: Any) -> Posterior:
        if isinstance(fit, Posterior):
            return fit
        return cls(fit.posterior, fit.hypers, fit.dims)


@dataclass(frozen=True)
class World:
    """A compiled model laid out over some items: the declared model, its layout, the
    hyperparameters, the data's arrays (covariates, observations) and ragged weights."""

    model: ModelIR  # as declared (the generative program)
    fitted: ModelIR  # as fitted (its blocks name the joint posteriors)
    spec: Mapping[str, Any]
    layout: Layout
    hypers: Mapping[str, Array]
    data: Mapping[str, Array]
    weights: Mapping[str, Array]  # ragged plate -> each entry's count (1 unless a bag)
    globals_: tuple[str, ...]  # the fitted model's globals (block names included)
    kept: tuple[str, ...]  # declared locals with a posterior per item (not introduced ones)

    @classmethod
    def of(cls, model: Compiled, post: Posterior, data: Mapping[str, Any] | None,
           dims: Mapping[str, int] | None = None, tokens: bool = False) -> World:
        """``data``: the items (observed variables may be left out where the sizes come
        from elsewhere); None: the fit's items, sizes from the fit. ``tokens``: a bag's
        entries (a word and its count) as that many tokens, for drawing."""
        spec = model.module.SPEC
        declared = _declared(model)
        if data is not None and not isinstance(data, Mapping):
            raise CemDataError(f"data: expected a mapping from variable names to arrays, "
                               f"found {type(data).__name__}")
        sizes = fit_sizes(spec, post.dims, model.data_plate, data is not None, dims)
        given = {} if data is None else dict(data)
        if data is None:
            _refuse_unsized(spec)
        bound_spec = {**spec, "observed": {k: v for k, v in spec["observed"].items()
                                           if k in given}}
        bound = bind_data(bound_spec, given, sizes)
        arrays = {name: value[0] if not _plates(spec, name) else value
                  for name, value in bound.arrays.items() if name in given}
        ptrs = {p: bound.arrays[f"{p}_ptr"] for p, info in spec["plates"].items()
                if info["ragged"]}
        weights = {p: bound.arrays[f"{p}_weight"] for p in ptrs}
        if tokens:
            ptrs, weights, arrays = _as_tokens(spec, ptrs, weights, arrays)
        layout = Layout(declared, dict(bound.dims), ptrs)
        plan = model.stages.plan
        return cls(declared, model.stages.model, spec, layout,
                   _hypers(declared, layout, post.hypers), arrays, weights,
                   tuple(plan.globals), declared_kept(plan))

    @classmethod
    def bare(cls, model: Compiled, post: Posterior) -> World:
        """No items: the globals' sizes from the fit (what draws of the globals need)."""
        spec = model.module.SPEC
        sizes = {name: int(info["default"]) for name, info in spec["dims"].items()
                 if info.get("default") is not None}
        sizes.update({k: int(v) for k, v in post.dims.items() if k in spec["dims"]})
        declared = _declared(model)
        plan = model.stages.plan
        return cls(declared, model.stages.model, spec, Layout(declared, sizes, {}), {}, {},
                   {}, tuple(plan.globals), declared_kept(plan))

    def observed(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.model.observed)


def declared_kept(plan: Any) -> tuple[str, ...]:
    """The kept locals the model file declares: a variable cemodel introduced (a Pólya-Gamma
    ω, Student-t's precision scale) is integrated out of the declared model, so the walk
    draws afresh."""
    return tuple(n for n in plan.kept_locals if plan.model.introduced_for(n) is None)


def _declared(model: Compiled) -> ModelIR:
    """The model as its file declares it (no introduced variables, no blocks)."""
    source = model.stages.model.source
    return built_model(source.text, source.filename, model.settings)


def _plates(spec: Mapping[str, Any], name: str) -> tuple[str, ...]:
    for table in ("observed", "covariates"):
        if name in spec.get(table, {}):
            return tuple(spec[table][name]["plates"])
    return ()


def fit_sizes(spec: Mapping[str, Any], fit_dims: Mapping[str, int], data_plate: str | None,
              new_items: bool = True, given: Mapping[str, int] | None = None) -> SizesFrom:
    """The fit's sizes that items are bound with (``given`` over them): those that do not
    count items (K, V, features) for new items, all of them for the fit's own; each named
    as the fit's in binding errors."""
    item_dim = spec["plates"][data_plate]["dim"] if data_plate else None
    sizes = {name: int(size) for name, size in fit_dims.items()
             if name in spec["dims"] and spec["dims"][name].get("ragged_over") is None
             and not (new_items and name == item_dim)}
    given = dict(given or {})
    return SizesFrom({**sizes, **given}, {k: "the fit" for k in sizes if k not in given})


def _refuse_unsized(spec: Mapping[str, Any]) -> None:
    ragged = [p for p, info in spec["plates"].items() if info["ragged"]]
    covariates = list(spec.get("covariates", {}))
    if ragged or covariates:
        what = (f"the lengths of plate {ragged[0]}" if ragged else
                f"the covariates ({', '.join(covariates)})")
        raise CemError(f"the fit does not hold {what} of its items",
                       hint="pass data= (the fit's data, or new items)")


def _as_tokens(spec: Mapping[str, Any], ptrs: dict, weights: dict,
               arrays: dict) -> tuple[dict, dict, dict]:
    """Each entry of a bag (a word with its count c) as c tokens."""
    ptrs, weights, arrays = dict(ptrs), dict(weights), dict(arrays)
    for plate, w in list(weights.items()):
        counts = w.astype(np.int64)
        if np.all(counts == 1):
            continue
        ptr = ptrs[plate]
        parent = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
        per_item = np.bincount(parent, weights=counts, minlength=len(ptr) - 1).astype(np.int64)
        ptrs[plate] = np.concatenate(([0], np.cumsum(per_item)))
        weights[plate] = np.ones(int(counts.sum()))
        for name in arrays:
            if plate in _plates(spec, name):
                arrays[name] = np.repeat(arrays[name], counts, axis=0)
    return ptrs, weights, arrays


def _hypers(model: ModelIR, layout: Layout, given: Mapping[str, Any]) -> dict[str, Array]:
    """Every hyperparameter: the fit's value, else the model file's expression."""
    values: dict[str, Array] = {}
    one = Scope(1, {})
    for hyper in model.hypers:
        if hyper.name in given:
            values[hyper.name] = np.asarray(given[hyper.name], dtype=float)
        else:
            values[hyper.name] = Evaluator(layout, values, {}, {})(hyper.value, one)[0]
    return values


# ---------------------------------------------------------------------------------------------
# Draws from q
# ---------------------------------------------------------------------------------------------


def _q_params(post: Posterior, name: str, family: str) -> tuple[Array, ...]:
    rename = Q_NAMES.get(family, {})
    keys = [f"{name}.{rename.get(p.name, p.name)}" for p in FAMILIES[family].params]
    missing = [k for k in keys if k not in post.params]
    if missing:
        raise CemError(f"the fit holds no posterior of '{name}' (no {', '.join(missing)})",
                       hint="was it fitted with this model, or by klc (which integrates "
                            "globals out)?")
    return tuple(np.asarray(post.params[k], dtype=float) for k in keys)


def _expected(world: World, name: str) -> tuple[int, ...]:
    var = world.model.var(name)
    return world.layout.shape(var.plates) + tuple(world.layout.size(d) for d in var.shape)


def draw_q(world: World, post: Posterior, names: tuple[str, ...], draws: int,
           rng: np.random.Generator) -> dict[str, Array]:
    """``draws`` draws from q of each fitted variable in ``names``: {declared name: (draws,
    its layout...)}; a joint block gives its two members."""
    out: dict[str, Array] = {}
    for name in names:
        family = FAMILIES[world.fitted.var(name).family].posterior_family
        params = tuple(np.broadcast_to(p, (draws,) + p.shape)
                       for p in _q_params(post, name, family))
        block = world.fitted.block(name)
        if block is not None:
            mean, precision = JOINT[family](rng, params)
            found = {block.mean.name: mean, block.precision.name: precision}
        else:
            found = {name: numeric(family, "draw").draw(rng, params, None)}
        sticks = world.fitted.introduced_for(name)
        if sticks is not None and sticks in stick_variables(world.fitted):
            found = {sticks.of: weights_of_sticks(found[name])}  # the weights they break
        for member, value in found.items():
            want = _expected(world, member)
            if value.shape[1:] != want:
                raise CemError(
                    f"the fit's posterior of '{member}' has shape {value.shape[1:]}, but "
                    f"with these data and settings '{member}' has shape {want}",
                    hint="new items: pass new=True (--new); other sizes: the --set values "
                         "of the fit" if name in world.kept else
                         "give the settings (--set) the model was fitted with")
            out[member] = value
    return out


def posterior_draws(model: Compiled, fit: Any, draws: int = 100, seed: int = 0) -> dict[str, Array]:
    """``draws`` draws of every global from q: {variable: (draws, its shape...)} (a joint
    block's mean and precision under their own names). ``Model.score`` uses the same draws
    for the same ``seed``."""
    draws = checked_draws(draws, seed)
    post = Posterior.of(fit)
    world = World.bare(model, post)
    return draw_q(world, post, world.globals_, draws, np.random.default_rng(seed))


def checked_draws(draws: int, seed: int) -> int:
    check_options(draws=draws, seed=seed)
    return int(draws)


# ---------------------------------------------------------------------------------------------
# Forward
# ---------------------------------------------------------------------------------------------


def forward(world: World, values: dict[str, Array], rng: np.random.Generator) -> None:
    """Draw every variable not in ``values`` given those before it, into ``values``."""
    evaluate = Evaluator(world.layout, world.hypers, world.data, values)
    for var in in_order(world.model):
        if var.name in values:
            continue
        scope = world.layout.scope(var.plates)
        table = evaluate.table(var.args[0], scope) if var.family == "Categorical" else None
        if table is not None:  # probabilities read from a variable: drawn from its rows
            values[var.name] = categorical_rows(rng, *table).reshape(
                world.layout.shape(var.plates))
            continue
        draw = numeric(var.family, "draw").draw
        # a chain is drawn whole (its steps in order), anything else a block of rows at a time
        parts = [scope] if var.family in CHAIN_FAMILIES else blocks(
            evaluate, var.args, scope)
        x = np.concatenate([np.asarray(draw(
            rng, tuple(np.asarray(evaluate(arg, part)) for arg in var.args),
            part.plates[var.plates[-1]] if var.plates else None)) for part in parts])
        values[var.name] = x.reshape(world.layout.shape(var.plates) + x.shape[1:])


def _as_output(world: World, name: str, value: Array) -> Array:
    """A bag of categories as counts per item; anything else as it is laid out."""
    var = world.model.var(name)
    ragged = [p for p in var.plates if world.model.plate(p).ragged]
    if not ragged or var.family != "Categorical" or var.plates != (
            world.model.plate(ragged[0]).parent, ragged[0]) or world.spec["plates"][
            ragged[0]].get("ordered"):
        return value
    items = world.layout.scope(var.plates).plates[var.plates[0]]
    n_items = world.layout.size(world.model.plate(var.plates[0]).dim)
    n_cat = world.layout.size(var.categories)
    counts = np.bincount(items * n_cat + value, minlength=n_items * n_cat)
    return counts.reshape(n_items, n_cat)


def sample_posterior_predictive(model: Compiled, fit: Any, draws: int = 100, seed: int = 0, *,
                                data: Mapping[str, Any] | None = None, new: bool = False,
                                dims: Mapping[str, int] | None = None) -> dict[str, Array]:
    """Replicated observations: {observed variable: (draws, ...)} (see the module doc).

    ``fit``: a ``Fit`` (or a ``Posterior``); ``data``: the items, None for the fit's own;
    ``new``: the items are new (their locals from the prior, not from the fit's q);
    ``dims``: sizes of new items the data does not give (``{"N": 100}``)."""
    draws = checked_draws(draws, seed)
    post = Posterior.of(fit)
    world = World.of(model, post, data, dims, tokens=True)
    rng = np.random.default_rng(seed)
    kept = () if new else tuple(n for n in world.kept
                                if any(k.startswith(f"{n}.") for k in post.params))
    q = draw_q(world, post, world.globals_ + kept, draws, rng)
    out: dict[str, list[Array]] = {name: [] for name in world.observed()}
    for s in range(draws):
        values = {name: value[s] for name, value in q.items()}
        forward(world, values, rng)
        for name in out:
            out[name].append(_as_output(world, name, values[name]))
    return {name: np.stack(arrays) for name, arrays in out.items()}
