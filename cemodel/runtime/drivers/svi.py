"""Stochastic variational inference and its variants, the same loop for every model.

Each step draws a minibatch S of the data plate (without replacement within an epoch), runs
the local step on it and moves every global towards λ̂ = η + N/|S| Σ_{n∈S} E[t_n]:

    SVI      λ ← (1 − ρ_t)λ + ρ_t λ̂,  ρ_t = step_scale·(t + τ)^−κ    (Hoffman et al. 2013)
    SVI+     E[t_n] weighted by 1 + ε_n − ε̄, ε_n ~ N(0, |S|/M − 1)    (Paisley, Definition 1)
    SSVI-A   the local step sees t(β) of a draw β ~ q(β)    (Hoffman & Blei 2015, eq. 10)
    SSVI     λ̂ = η + V(β, λ)·N/|S| Σ η̂_n(β)               (eq. 7; V of eq. 8)

SSVI's first steps are SVI's (``warmup_steps``), and without a latent local V is replaced by
its conditional mean I (``_v_needed``). Plain SVI moves a Dirichlet over observed categories
at the minibatch's categories only (``drivers.lazy``: the same step, the decay elsewhere
deferred).

After each epoch the full-data ELBO at optimal locals is the trace's next value.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ... import errors
from ...files import remove_stale_temporaries
from ...options import check_options
from .. import driver as rt
from ..sampling import SAMPLERS
from ..scales import rebalance
from ..shares import only_rows
from ..source import ItemSource, item_source, places_in_data
from ..special import blend
from ..ssvi import SSVI_FAMILIES, in_domain, ssvi_blend
from . import checkpoints, lazy
from .adaptive import AdaptiveRate
from .averaging import Average
from .interface import (
    Global,
    ModelInterface,
    check_finite,
    check_possible,
    given_hypers,
    kept_locals,
    zero_statistics,
)
from .schedule import (  # noqa: F401 - the schedule's names, read as svi.* by callers
    KAPPA,
    MIN_EPOCHS,
    START_WEIGHT,
    TAU,
    default_epochs,
    small_data_defaults,
    steps_per_epoch,
    warmup_steps,
)


@dataclass
class Options:
    """The options of one stochastic fit (see ``fit``)."""

    epochs: int | None = None  # None: default_epochs
    batch_size: int | None = 256
    kappa: float | None = None  # None: 0.7, or small_data_defaults'
    tau: float | None = None  # None: 10.0, or small_data_defaults'
    step_scale: float = 1.0
    effective_batch_size: Any = None
    max_local_iter: int = 100
    local_tol: float = 1e-3
    seed: int = 0
    callback: Any = None
    tol: float | None = None
    window: int = 3
    patience: int = 3
    local: str = "mf"
    ramp: bool = False
    evaluate: bool = True
    on_epoch: Any = None
    checkpoint: Any = None
    checkpoint_every: int = 1
    gibbs_sweeps: int = 10
    gibbs_burn_in: int | None = None  # None: half the sweeps (5 of the default 10)
    warm_start: bool = False
    learn: tuple[str, ...] = ()
    sample_globals: bool = False
    apply_v: bool = False
    control_variate: bool = False
    learning_rate: str | None = None  # 'decay' (None): ρ_t = s(t + τ)^−κ; 'adaptive': Ranganath
    # report the Polyak–Ruppert average of the last half's iterates (None: small_data_defaults)
    average: bool | None = None


@dataclass
class Run:
    """A stochastic fit in progress: the state, its counters and its three random streams."""

    model: ModelInterface
    s: rt.State
    o: Options
    source: ItemSource | None
    n_total: int
    rng: np.random.Generator  # minibatches
    noise: np.random.Generator  # SVI+ perturbations, a stream of their own
    sampler: np.random.Generator  # SSVI-A draws of the globals
    old: dict[str, np.ndarray] = field(default_factory=dict)  # λ before the step (reused)
    aux: dict[str, tuple[np.ndarray, ...]] = field(default_factory=dict)  # V's draws
    trace: list[float] = field(default_factory=list)
    step: int = 1  # t = 1, 2, ... (Hoffman et al. 2013)
    shortened: int = 0  # SSVI, SVI+: rows whose step was shortened to stay valid
    warmup: int = 0  # SSVI: the first steps, SVI's (warmup_steps)
    rates: dict[str, AdaptiveRate] = field(default_factory=dict)  # learning_rate='adaptive'
    lazy: lazy.Lazy | None = None  # plain SVI moving some globals by columns (drivers.lazy)
    hypers: dict[str, Any] = field(default_factory=dict)  # as given (checkpoints compare)


def fit(model: ModelInterface, data: Any, *, hypers=None, dims=None, init=None, start=None,
        resume=None, **options: Any) -> rt.FitResult:
    """Fit ``model`` by SVI (SVI+ with ``effective_batch_size``, SSVI-A with
    ``sample_globals``, SSVI with ``apply_v``); the options are the generated ``fit_svi``'s
    (see its docstring)."""
    return _loop(begin(model, data, hypers=hypers, dims=dims, init=init, start=start,
                       **options), resume)


def begin(model: ModelInterface, data: Any, *, hypers=None, dims=None, init=None,
          start=None, **options: Any) -> Run:
    """A stochastic fit ready for its first step: options checked, data bound (out of core:
    one minibatch), globals started, the three random streams seeded."""
    unknown = sorted(set(options) - {f.name for f in fields(Options)})
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {', '.join(unknown)}; the options "
                        f"of a stochastic fit: {', '.join(f.name for f in fields(Options))}")
    o = Options(**options)
    _check_options(model, o)
    source = item_source(data, model.STREAMING)  # an rt.ItemSource (data on disk), or None
    if source is not None:  # out of core: the start binds one minibatch ('seeds' seeds from it)
        dims = source.sizes(dims, model.SPEC, model.ITEM_DIMS)
        source.check_sizes(model.SPEC, model.DATA_PLATE, dims, o.batch_size or source.n_items)
        items = source.start_items(o.batch_size, o.seed)
        data = source.read(items)
    with places_in_data(model.DATA_PLATE, None if source is None else items):
        s = model._prepare(data, hypers, dims, o.seed, init, start, o.max_local_iter,
                           o.local_tol)
    o.local = rt.check_local_step(o.local, model.LOCAL_STEPS)
    o.learn = rt.check_learn(o.learn, model.LEARNABLE)
    if o.local == "gibbs":
        if o.gibbs_burn_in is None:
            o.gibbs_burn_in = o.gibbs_sweeps // 2
        rt.check_sweeps(o.gibbs_sweeps, o.gibbs_burn_in)
    n_total = len(s.all_items) if source is None else source.n_items
    o.batch_size = n_total if o.batch_size is None else min(int(o.batch_size), n_total)
    small_data_defaults(o, n_total)
    _check_averaging(o)
    run = Run(model, s, o, source, n_total, np.random.default_rng([o.seed, 1]),
              np.random.default_rng([o.seed, 2]), np.random.default_rng([o.seed, 3]),
              hypers=given_hypers(model, s))
    if o.apply_v:  # the draws behind β that V(β, λ) needs; SVI's steps first
        run.warmup = warmup_steps(o, o.epochs * steps_per_epoch(n_total, o.batch_size))
        run.aux = {g.name: tuple(np.empty_like(getattr(s, g.lam[0]))
                                 for _ in range(g.aux_draws)) for g in model.GLOBALS}
    run.old = {name: np.empty_like(getattr(s, name)) for g in model.GLOBALS for name in g.lam}
    if o.learning_rate == "adaptive":
        _start_rates(run)
    return run


def minibatches(run: Run, epoch: int) -> Iterator[tuple[np.ndarray, int]]:
    """The epoch's minibatches (a permutation of the items, without replacement) and where
    each begins in it."""
    order = run.rng.permutation(run.n_total)
    # the Gibbs draws: one stream per epoch, so a resumed fit repeats them
    if run.o.local == "gibbs":
        rt.seed_kernels(run.o.seed * 1000003 + epoch)
    for start in range(0, len(order), run.o.batch_size):
        yield order[start:start + run.o.batch_size], start


def _check_averaging(o: Options) -> None:
    """An averaged fit runs all its epochs: its answer is the average of the last half's."""
    if o.tol is not None and o.average:
        raise errors.CemDataError(
            "tol: not available with averaged iterates (the fit runs all its epochs and "
            "reports the average of the last half's); SSVI-A averages by default on a small "
            "data set", hint="average=False, or no tol")


def _check_options(model: ModelInterface, o: Options) -> None:
    """What the model cannot do is refused with the reason, never ignored."""
    if model.DATA_PLATE is None:
        rt.check_applies("method", "svi", model.METHODS)
    if o.sample_globals:
        rt.check_applies("method", "ssvi-a", model.METHODS)
    if o.apply_v or o.control_variate:
        rt.check_applies("method", "ssvi", model.METHODS)
    values = {f.name: getattr(o, f.name) for f in fields(o)}
    for name in ("tol", "kappa", "tau", "learning_rate", "average"):  # None: no early stop;
        if values[name] is None:
            del values[name]
    if o.epochs is None:  # default_epochs, once the number of items is known
        del values["epochs"]
    if o.effective_batch_size is None or callable(o.effective_batch_size):  # checked per step
        del values["effective_batch_size"]
    check_options(**values)
    annealed = values.get("effective_batch_size")
    if annealed is not None and o.batch_size is not None and annealed > o.batch_size:
        # SVI+'s noise has variance |S|/M − 1: an M above |S| is no annealing (a schedule
        # M_t may grow past it: there the step is plain SVI's, as Paisley's ends)
        raise errors.CemDataError(f"effective_batch_size: expected M ≤ batch_size = "
                                  f"{o.batch_size}, found {annealed:g}",
                                  hint="M = batch_size is plain SVI; smaller M anneals more")
    if o.learning_rate not in (None, "decay", "adaptive"):
        raise errors.CemDataError(f"learning_rate: expected 'decay' or 'adaptive', found "
                                  f"{o.learning_rate!r}")
    if o.learning_rate == "adaptive" and (o.apply_v or o.effective_batch_size is not None):
        raise errors.CemDataError(
            "learning_rate: 'adaptive' applies to SVI, SSVI-A and averaged SVI: it shrinks ρ as "
            "the gradient's noise grows, which would undo SVI+'s annealing noise and SSVI's "
            "V-noise", hint="learning_rate='decay' (kappa, tau, step_scale)")
    if o.learning_rate == "adaptive" and o.checkpoint is not None:
        raise errors.CemDataError(
            "checkpoint: a fit with learning_rate='adaptive' cannot be checkpointed yet (its "
            "moving averages ḡ, h̄ and window are not saved, so a resumed fit would not "
            "continue the same trajectory)", hint="learning_rate='decay', or no checkpoint")
    if o.tol is not None and not o.evaluate:
        raise errors.CemDataError("tol: the stopping rule reads the per-epoch ELBO, which "
                                  "evaluate=False skips", hint="drop tol, or evaluate=True")
    if o.warm_start and not kept_locals(model):
        raise errors.CemDataError(
            "warm_start: this model keeps no local between visits of an item (no iterative "
            "local step), so there is nothing to start from")


def _loop(run: Run, resume: Any) -> rt.FitResult:
    model, o = run.model, run.o
    converged = False
    stop = None if o.tol is None or not o.evaluate else rt.NoisyStop(o.window, o.patience,
                                                                     o.tol)
    first = 0
    average = Average(run) if o.average else None
    if resume is not None:  # continue the same trajectory: state, counters and random streams
        first, converged = checkpoints.resume(run, resume, average)
        if stop is not None:  # the stopping rule where it was: it reads the whole trace
            for value in run.trace:
                stop.update(value)
    if o.checkpoint is not None:  # what a writer killed before its rename left
        remove_stale_temporaries(o.checkpoint)
    if lazy.applies(model, o, o.step_scale * (run.step + o.tau) ** (-o.kappa)):
        run.lazy = lazy.start(model, run.s)
    clock = time.perf_counter()
    for epoch in range(first, first if converged else o.epochs):
        for batch, start in minibatches(run, epoch):
            step(run, batch, start, epoch)
            if average is not None and epoch >= average.first:
                average.add()
        if run.lazy is not None:  # what follows reads every entry of the globals
            lazy.settle(run.lazy, model, run.s)
        if o.on_epoch is not None:
            paused = time.perf_counter()
            o.on_epoch(epoch, _result(run, False, paused - clock))
            clock += time.perf_counter() - paused  # not part of the fit's time
        if o.evaluate:
            record_epoch(run, epoch, time.perf_counter() - clock)
        converged = o.evaluate and stop is not None and stop.update(run.trace[-1])
        # atomic: a crash keeps the previous one; the last one records that the fit stopped
        if o.checkpoint is not None and ((epoch + 1) % o.checkpoint_every == 0 or converged):
            checkpoints.save(run, epoch, converged, average)
        if converged:
            break
    if o.checkpoint is not None:
        remove_stale_temporaries(o.checkpoint)
    if average is not None:  # λ ← λ̄, its expectations, and the ELBO there
        average.put()
        record_epoch(run, o.epochs, time.perf_counter() - clock, "the average of the iterates")
    result = _result(run, converged, time.perf_counter() - clock)
    if o.apply_v or o.effective_batch_size is not None:  # rows whose step was shortened
        result.notes["shortened_steps"] = run.shortened
    if average is not None:
        result.notes["averaged_steps"] = average.count
    return result


def _result(run: Run, converged: bool, seconds: float) -> rt.FitResult:
    """The fit's result; out of core the globals only, with the number of items the
    source's (the state is bound to one minibatch)."""
    result = run.model._result(run.s, run.trace, converged, seconds,
                               items=run.source is None)
    if run.source is not None and run.model.ITEM_DIMS:
        result.dims[run.model.ITEM_DIMS[0]] = run.source.n_items
    return result


def _bind_items(run: Run, items: np.ndarray) -> rt.State:
    """Out of core: the state of the minibatch ``items`` (read from the source on their own),
    its globals, hyperparameters and statistics the fit's, shared (``_prepare(share=)``)."""
    dims = {k: v for k, v in run.s.bound.dims.items() if k not in run.model.ITEM_DIMS}
    with places_in_data(run.model.DATA_PLATE, items):
        return run.model._prepare(run.source.read(items), None, dims, run.o.seed, None, None,
                                  run.o.max_local_iter, run.o.local_tol, share=run.s)


def _v_needed(model: ModelInterface) -> bool:
    """Does V(β, λ) change SSVI's expected step? Only through the local step: the data part
    g of a global's λ̂ is linear in t(β_k) with coefficients from the other variables, so
    without a latent local g does not depend on β_k's own draw, E[V g | g] = E[V] g = g, and
    g itself (SSVI-A's step) is the same estimate with less variance (Rao–Blackwell). On PMF
    (no locals) eq. 7 started at MF's optimum ended 9%, 26% and 129× below MF's ELBO after
    200 steps; SSVI-A's step stays within 0.22%."""
    return bool(model.ROLES.get("local") or model.ROLES.get("kept_local"))


def step(run: Run, batch: np.ndarray, offset: int, epoch: int) -> None:
    """One stochastic step on the minibatch ``batch`` (positions ``offset``... of the epoch):
    the local step on it, then every global moved by ρ_t towards its λ̂."""
    model, o = run.model, run.o
    rho = o.step_scale * (run.step + o.tau) ** (-o.kappa)
    if run.lazy is not None:
        _lazy_step(run, batch, offset, epoch, rho)
        return
    # SSVI: the warm-up steps are SVI's (warmup_steps); V only where it matters (_v_needed)
    v_step = o.apply_v and run.step > run.warmup and _v_needed(model)
    batch = _targets(run, batch, offset, epoch)
    s = run.s
    try:
        if v_step:  # SSVI (eq. 7): λ̂ = η + V(β, λ) N/|S| Σ_S η̂_n(β)
            for g in model.GLOBALS:
                _v_step(run, g, rho)
        elif o.learning_rate == "adaptive":
            rho = _adaptive_blend(run)
        elif o.effective_batch_size is not None:
            _annealed_blend(run, rho)
        else:
            for name, old in run.old.items():
                blend(getattr(s, name), old, rho)
        if model.GLOBALS:
            model.refresh(s)
            rebalance(model, s)  # along the scale symmetries (SCALES), if any
    except (np.linalg.LinAlgError, errors.CemDataError) as exc:
        raise rt.invalid_step(run.step, o.effective_batch_size, exc) from None
    if o.learn:  # empirical Bayes: a step rho towards the batch's maximiser
        model._learn(s, o.learn, rho, batch)
    _check_globals(run, model.GLOBALS)
    run.step += 1


def _lazy_step(run: Run, batch: np.ndarray, offset: int, epoch: int, rho: float) -> None:
    """SVI's step with the lazy globals moved at the minibatch's columns (drivers.lazy)."""
    model, state = run.model, run.lazy
    batch = _minibatch(run, batch)
    s = run.s
    local_state = lazy.prepare(state, model, s, batch)
    with only_rows(lazy.statistic_rows(state, s)):
        _local_step(run, batch, local_state)
    scale = _data_scale(run, batch, offset, epoch)
    try:
        for g in state.eager:
            for name in g.lam:
                run.old[name][...] = getattr(s, name)
            g.update(s, scale, expect=False)
        hats = lazy.targets(state, s, scale)
        for g in state.eager:
            for name in g.lam:
                blend(getattr(s, name), run.old[name], rho)
        outside = lazy.blend(state, s, hats, rho)
        if state.eager:  # the lazy globals' E is refreshed by columns (lazy.prepare)
            model.refresh_eager(s)
            rebalance(model, s, model.refresh_eager)  # SCALES: Gamma globals, all eager
    except (np.linalg.LinAlgError, errors.CemDataError) as exc:
        raise rt.invalid_step(run.step, None, exc) from None
    _check_globals(run, state.eager)
    if outside is not None:
        raise rt.invalid_step(run.step, None, variable=outside)
    run.step += 1


def _check_globals(run: Run, globals_: tuple[Global, ...]) -> None:
    """Each global's step stayed in its family's domain; in update order, the first that
    left it is named."""
    s = run.s
    for g in globals_:
        rt.check_step({name: getattr(s, name) for name in g.E}, run.step,
                      run.o.effective_batch_size, ((g.family, g.lams(s)),), variable=g.name)


def _targets(run: Run, batch: np.ndarray, offset: int, epoch: int) -> np.ndarray:
    """The local step on ``batch``, then every global's λ̂ in its λ arrays, its current λ in
    ``run.old``; returns the batch's items as the state numbers them."""
    model, o = run.model, run.o
    batch = _minibatch(run, batch)
    s = run.s
    if o.effective_batch_size is not None:  # SVI+: weights 1 + ε_n − ε̄, ε_n ~ N(0, |S|/M − 1)
        size_m = rt.effective_size(o.effective_batch_size, run.step, len(batch))
        s.item_weight[batch] = rt.annealing_weights(run.noise, len(batch), size_m)
    zero_statistics(model, s)
    if o.sample_globals and run.step > run.warmup:  # SSVI-A: the local step sees t(β) of
        for g in model.GLOBALS:  # β ~ q(β), not E[t(β)]
            _sample(run, g)
    _local_step(run, batch)
    # λ̂ = η + N/|S| Σ_{n∈S} E[t_n] for every global, each from the current q of the others
    # (SSVI-A: from the same draw β the local step saw, so that λ̂ estimates
    # E_q(β)[η(β) + Σ_n E_q(z_n|β)[t_n]] without bias); then λ ← (1 − ρ)λ + ρλ̂ and only
    # then E[t]
    for name, old in run.old.items():
        old[...] = getattr(s, name)
    scale = _data_scale(run, batch, offset, epoch)
    try:
        for g in model.GLOBALS:
            g.update(s, scale, expect=False)
    except (np.linalg.LinAlgError, errors.CemDataError) as exc:
        raise rt.invalid_step(run.step, o.effective_batch_size, exc) from None
    return batch


def _minibatch(run: Run, batch: np.ndarray) -> np.ndarray:
    """The step's state holding ``batch`` (out of core: its items, read and bound on their
    own), every item's weight 1; returns the batch's items as the state numbers them."""
    if run.source is not None:
        run.s = _bind_items(run, batch)
        batch = run.s.all_items
    run.s.item_weight[...] = 1.0
    return batch


def _data_scale(run: Run, batch: np.ndarray, offset: int, epoch: int) -> float:
    """N/|S|, N ramped up over the first sweep if asked (SSVI §2.6)."""
    o = run.o
    seen = run.n_total if not o.ramp or epoch > 0 else min(run.n_total, offset + len(batch))
    return seen / len(batch)


def _adaptive_blend(run: Run) -> float:
    """λ ← (1 − ρ_g)λ + ρ_g λ̂ with each global's adaptive ρ_g (``adaptive.AdaptiveRate``);
    returns the smallest, the step empirical Bayes takes."""
    s, smallest = run.s, 1.0
    for g in run.model.GLOBALS:
        lams, olds = g.lams(s), tuple(run.old[name] for name in g.lam)
        rho = run.rates[g.name].rho([lam - old for lam, old in zip(lams, olds, strict=True)])
        for lam, old in zip(lams, olds, strict=True):
            blend(lam, old, rho)
        smallest = min(smallest, rho)
    return smallest


def _start_rates(run: Run) -> None:
    """The adaptive rates' start: the natural gradients λ̂ − λ of up to 10 minibatches at the
    starting λ (as many as an epoch has: one when the minibatch is the whole data set, whose
    gradient has no noise); λ and the statistics are left as they were."""
    model = run.model
    per_epoch = steps_per_epoch(run.n_total, run.o.batch_size)
    order = np.random.default_rng([run.o.seed, 4]).permutation(run.n_total)
    gradients: dict[str, list] = {g.name: [] for g in model.GLOBALS}
    for k in range(min(per_epoch, 10)):
        batch = order[k * run.o.batch_size:(k + 1) * run.o.batch_size]
        _targets(run, batch, k * run.o.batch_size, 1)
        for g in model.GLOBALS:
            lams = g.lams(run.s)
            olds = tuple(run.old[name] for name in g.lam)
            gradients[g.name].append([lam - old for lam, old in zip(lams, olds, strict=True)])
            for lam, old in zip(lams, olds, strict=True):
                lam[...] = old
    if model.GLOBALS:
        model.refresh(run.s)
    run.rates = {name: AdaptiveRate(found) for name, found in gradients.items()}


def _annealed_blend(run: Run, rho: float) -> None:
    """SVI+'s step λ ← (1 − ρ)λ + ρλ̂. Definition 1's weights 1 + ε_n − ε̄, ε_n ~ N(0, |S|/M − 1),
    are negative for some items once |S|/M − 1 is not small, so λ̂ (unlike its mean, SVI's)
    can leave the family's natural parameter space, and so can the step. Where it would, the
    row's step is shortened to half the largest valid one (rt.ssvi_blend, as for SSVI's
    V-noise) and counted in ``notes['shortened_steps']``; elsewhere it is SVI's, bit for bit."""
    s = run.s
    for g in run.model.GLOBALS:
        lams = g.lams(s)
        olds = tuple(run.old[name] for name in g.lam)
        hats = tuple(lam.copy() for lam in lams)
        for lam, old in zip(lams, olds, strict=True):
            blend(lam, old, rho)
        if np.all(in_domain(g.family, lams)):
            continue
        for lam, hat in zip(lams, hats, strict=True):
            lam[...] = hat
        run.shortened += ssvi_blend(g.family, rho, olds, lams)


def _sample(run: Run, g: Global) -> None:
    """β ~ q(β) written where E[t(β)] lives (and its exp arrays); SSVI keeps V's draws."""
    s = run.s
    if run.o.apply_v:
        SSVI_FAMILIES[g.family][0](*g.lams(s), run.sampler, *g.expectations(s),
                                    *run.aux[g.name])
    else:
        SAMPLERS[g.family](*g.lams(s), run.sampler, *g.expectations(s))
    if g.after_sample is not None:
        g.after_sample(s)


def _local_step(run: Run, batch: np.ndarray, s: Any = None) -> None:
    """The chosen E-step on the minibatch: mean field ('exact' when no local depends on
    another), or the collapsed Gibbs / CVB0 step; on ``s`` (default: the fit's state)."""
    model, o, s = run.model, run.o, run.s if s is None else s
    if o.local == "gibbs":
        model.run_local_step_gibbs(s, batch, o.gibbs_sweeps, o.gibbs_burn_in)
    elif o.local == "cvb0":
        model.run_local_step_cvb0(s, batch, o.max_local_iter, o.local_tol)
    else:
        model.run_local_step(s, batch, o.max_local_iter, o.local_tol, seeding=False,
                             warm=o.warm_start, guard=False, evaluate=False)


def _v_step(run: Run, g: Global, rho: float) -> None:
    """V(β, λ), at the λ β was drawn from, times a part of the global's λ̂: eq. 7 takes the
    data part (λ̂ minus its update with no data; other globals' messages stay as they are,
    like η); the control variate takes the whole natural gradient λ̂ − λ. The step is then
    shortened where V's noise would leave the domain (rt.ssvi_blend; a matrix family's
    distribution takes SSVI-A's step there instead)."""
    s = run.s
    lams = g.lams(s)
    olds = tuple(run.old[name] for name in g.lam)
    datas = tuple(lam.copy() for lam in lams)
    plain = tuple(data.copy() for data in datas)  # SSVI-A's λ̂ (rt.ssvi_blend's fallback)
    if run.o.control_variate:  # λ̂ = λ + V(λ̂ − λ): E[V] = I, the same mean as eq. 7
        for lam, old in zip(lams, olds, strict=True):
            lam[...] = old
    else:  # eq. 7: λ̂ = η + V · N/|S| Σ η̂_n(β)
        g.update(s, 0.0, expect=False)
    for data, lam in zip(datas, lams, strict=True):
        data -= lam
    SSVI_FAMILIES[g.family][1](*olds, *run.aux[g.name], *datas, *datas)
    for lam, data in zip(lams, datas, strict=True):
        lam += data
    run.shortened += ssvi_blend(g.family, rho, olds, lams, plain=plain)


def record_epoch(run: Run, epoch: int, seconds: float, where: str | None = None) -> None:
    """The full-data ELBO at the current globals appended to the trace, checked (data of
    probability 0, a state no longer finite: ``where`` names the place), then the callback."""
    elbo = full_elbo(run)
    run.trace.append(elbo)
    check_possible(run.model, elbo, run.s if run.source is None else None)
    check_finite(run.model, run.s, elbo, where or f"epoch {epoch + 1}")
    if run.o.callback is not None:
        run.o.callback(epoch, elbo, seconds)


def full_elbo(run: Run) -> float:
    """The full-data ELBO at optimal locals for the current globals (in memory, or out of
    core a minibatch at a time: the statistics add up). Under warm start the fit continues
    from its own kept locals, not the ELBO pass's, so evaluating never changes the
    trajectory."""
    model, o = run.model, run.o
    kept = None
    if o.warm_start and run.source is None:
        kept = tuple(getattr(run.s, name).copy() for name in kept_locals(model))
    run.s.item_weight[...] = 1.0
    zero_statistics(model, run.s)
    if run.source is None:
        elbo = _all_items(run)
    else:
        elbo = 0.0
        for chunk in run.source.chunks(o.batch_size):
            run.s = _bind_items(run, chunk)
            elbo += _all_items(run)
            if model.ROLES.get("entry_statistic"):  # kept per entry: the chunk's only
                elbo += model.elbo_of_entries(run.s)
                zero_statistics(model, run.s, ("entry_statistic",))
    elbo_global_part = model.elbo_of_globals(run.s)
    elbo += elbo_global_part
    if kept is not None:
        for name, value in zip(kept_locals(model), kept, strict=True):
            getattr(run.s, name)[...] = value
    return elbo


def _all_items(run: Run) -> float:
    return run.model.run_local_step(run.s, run.s.all_items, run.o.max_local_iter,
                                    run.o.local_tol, seeding=False, warm=False, guard=False)
