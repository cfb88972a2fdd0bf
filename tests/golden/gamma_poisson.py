"""gamma_poisson: the model (kernels, data layout, start) for cemodel.runtime.drivers, by cemodel 0.1.0.

Model file: gamma_poisson.cem (sha256 ad8f75390a1bd4ac)
Regenerate with `cemodel compile gamma_poisson.cem`; do not edit by hand.

Natural parameters are in coefficient form: q(x) ∝ exp(Σ_s lam_s · t_s(x)).
E_<var>_<stat> holds E_q[t_s]; acc_* hold sums over the data plate.
"""

import numpy as np
from numba import njit

from cemodel import runtime as rt

SOURCE = 'gamma_poisson.cem'
SOURCE_SHA256 = 'ad8f75390a1bd4ac48ff056424273622276a9b9f1671d6da42f166636f26db3e'
DEFAULT_START = 'prior'  # nothing to break: every global starts at its prior
LEARNABLE = ('a', 'b')  # hyperparameters empirical Bayes can set (fit(..., learn=...))
DATA_PLATE = 'observations'  # the plate the local step runs over
# the global steps (fit, fit_svi, ..., fit_klc) and whether each applies
METHODS = {
    'mf': 'yes',
    'svi': 'yes',
    'svi+': 'yes',
    'svi-avg': 'yes',
    'ssvi-a': 'yes',
    'ssvi': 'yes',
    'klc': 'no: KLC-CG keeps the categorical assignments of the data plate in Z (softmax-parameterised), and this model has none',
}
# the E-steps (fit_svi(..., local=...)) and whether each applies
LOCAL_STEPS = {
    'mf': 'yes: local mean field',
    'exact': 'yes: the items have no latent local, so there is nothing to approximate (the same step as mf)',
    'gibbs': 'no: the item has no categorical local to sample',
    'cvb0': 'no: the item has no categorical local to sample',
}
STREAMING = 'yes'  # fit_svi from an rt.ItemSource (data on disk)
ITEM_DIMS = ('N',)  # sizes set by the items bound
ROLES = {  # the state's arrays by what they hold (executors, checkpoints)
    'data': ('x',), 'hyper': ('a', 'b'), 'known': ('present_x', 'lgamma1p_x', 'log_b', 'lgamma_a'),
    'global': ('lam_rate_log', 'lam_rate_value'), 'global_exp': ('E_rate_log', 'E_rate_value'),
    'item': ('seed_category', 'item_weight'), 'statistic': ('acc_x_0', 'acc_x_1'),
    'thread': ('acc_x_0_threads', 'acc_x_1_threads'),
}
_THIS = rt.ModelView(globals())  # the model, as the drivers see it

SPEC = {
    "model": 'gamma_poisson',
    "dims": {
        'N': {"default": None, "ragged_over": None},
    },
    "plates": {
        'observations': {"dim": 'N', "parent": None, "ragged": False},
    },
    "observed": {
        'x': {"plates": ['observations'], "support": 'count', "shape": [], "categories": None, "missing": 'yes'},
    },
    "covariates": {},
    "not_data": {'a': 'hyperparameter', 'b': 'hyperparameter', 'rate': 'latent'},
}
MISSING = {  # observed entries that may be missing: their q (rt.missing_posteriors)
    'x': {"family": 'Poisson', "data_plate": 'a', "why_not": None,
        "terms": ((1.0, ('value',), 'a', (('E_rate_log', '0'),)), (-1.0, ('lgamma1p',), 'a', ()))},
}


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def local_step(
        share_start,
        share_stop,
        n_threads,
        seeding,
        items,
        seed_category,
        max_local_iter,
        local_tol,
        item_weight,
        acc_x_0_threads,
        x,
        present_x,
        acc_x_1_threads,
        lgamma1p_x,
        evaluate,
):
    """Local step: each item's local factors to convergence, then the sufficient statistics.

    Shares `share_start` to `share_stop` of `n_threads` of the items, each with its own
    scratch arrays and accumulators (<name>_threads[thread]); rt.run_shares runs the
    shares (all in one call, or one call per share on the threads) and sums their
    statistics in share order. Returns the shares' ELBO terms that involve only local
    variables and data.
    """
    shares_total = 0.0
    for thread in range(share_start, share_stop):  # one call runs these shares, one after another
        elbo = 0.0
        stop_position = (thread + 1) * items.shape[0] // n_threads
        for position in range(thread * items.shape[0] // n_threads, stop_position):
            i_observations = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_observations + 1:
                rt.prefetch_row(item_weight, items[position + 1])
                rt.prefetch_row(x, items[position + 1])
            # acc_x_0[] += x[observations] · present(x[observations])  (gamma_poisson.cem:13:5)
            acc_x_0_threads[thread] += item_weight[i_observations] * x[i_observations] * present_x[i_observations]
            # acc_x_1[] += present(x[observations])  (gamma_poisson.cem:13:5)
            acc_x_1_threads[thread] += item_weight[i_observations] * present_x[i_observations]
            # ELBO: local terms and local entropies (a stochastic step has no use for them)
            if evaluate:
                elbo += -lgamma1p_x[i_observations] * present_x[i_observations]
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_rate(
        data_scale,
        lam_rate_log,
        lam_rate_value,
        a,
        b,
        acc_x_0,
        acc_x_1,
        expect,
        E_rate_log,
        E_rate_value,
):
    """q(rate) = Gamma(shape, rate)
        shape = a + Σ_{n} x[n]
        rate = b + Σ_{n} 1

    (gamma_poisson.cem:11:1)
    """
    lam_rate_log[0] = 0.0
    lam_rate_value[0] = 0.0
    # from rate ~ Gamma (gamma_poisson.cem:11:1)
    lam_rate_log[0] += a
    # from rate ~ Gamma (gamma_poisson.cem:11:1)
    lam_rate_log[0] += -1.0
    # from rate ~ Gamma (gamma_poisson.cem:11:1)
    lam_rate_value[0] += -b
    # from x ~ Poisson (gamma_poisson.cem:13:5)
    lam_rate_log[0] += data_scale * acc_x_0
    # from x ~ Poisson (gamma_poisson.cem:13:5)
    lam_rate_value[0] += -data_scale * acc_x_1
    if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
        E_rate_log[0], E_rate_value[0] = rt.gamma_expected_stats(lam_rate_log[0], lam_rate_value[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def refresh_globals(lam_rate_log, E_rate_log, lam_rate_value, E_rate_value):
    """Expected statistics of the globals from their natural parameters."""
    E_rate_log[0], E_rate_value[0] = rt.gamma_expected_stats(lam_rate_log[0], lam_rate_value[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def elbo_global(
        a,
        log_b,
        lgamma_a,
        E_rate_log,
        b,
        E_rate_value,
        acc_x_0,
        acc_x_1,
        lam_rate_log,
        lam_rate_value,
):
    """ELBO terms of the global factors (see elbo_terms in the README)."""
    elbo = 0.0
    # E[log p(rate | ...)]  (gamma_poisson.cem:11:1)
    elbo += a * log_b
    elbo += -lgamma_a
    elbo += a * E_rate_log[0]
    elbo += -E_rate_log[0]
    elbo += -b * E_rate_value[0]
    # E[log p(x | ...)]  (gamma_poisson.cem:13:5)
    elbo += acc_x_0 * E_rate_log[0]
    elbo += -acc_x_1 * E_rate_value[0]
    # entropy of q(rate)
    elbo += rt.gamma_log_normalizer(lam_rate_log[0], lam_rate_value[0]) - lam_rate_log[0] * E_rate_log[0] - lam_rate_value[0] * E_rate_value[0]
    return elbo


def _prepare(data, hypers, dims, seed, init, start, max_local_iter, local_tol, share=None):
    """Bind and check the data, evaluate hyperparameters and knowns, allocate the arrays, start the globals.
    share: out of core, the fit's state, whose globals, hyperparameters and statistics `data`'s minibatch shares.
    """
    hypers = rt.check_hyper_names(hypers, ['a', 'b'])
    bound = rt.bind_data(SPEC, data, dims, missing=True)
    n_N = bound.dims['N']
    # refuse before allocating more than the machine's memory
    rt.check_memory(bound, {(1,): 6, ('threads',): 2, ('N',): 3})
    x = bound.arrays['x']
    # hyperparameters (defaults from the model file; out of core the fit's current values)
    a = rt.hyper_value(hypers, 'a', 2.0, (), domain='shape') if share is None else share.a
    b = rt.hyper_value(hypers, 'b', 1.0, (), domain='positive') if share is None else share.b
    # known quantities: functions of hyperparameters and data
    log_b = rt.log_data(b, "hyperparameter 'b'")  # log(b)
    lgamma_a = rt.gammaln(a)  # lgamma(a)
    present_x = rt.present(bound, 'x')  # present(x[observations])
    lgamma1p_x = rt.gammaln(x + 1.0)  # lgamma1p(x[observations])
    # variational parameters (natural, coefficient form) and E[t]
    lam_rate_log, E_rate_log = (np.zeros((1,)), np.zeros((1,))) if share is None else (share.lam_rate_log, share.E_rate_log)
    lam_rate_value, E_rate_value = (np.zeros((1,)), np.zeros((1,))) if share is None else (share.lam_rate_value, share.E_rate_value)
    # sufficient statistics the local step hands to the global step (out of core added up over minibatches)
    acc_x_0 = np.zeros(()) if share is None else share.acc_x_0
    acc_x_1 = np.zeros(()) if share is None else share.acc_x_1
    # the local step's shares: one per thread, fewer for small data
    n_threads = rt.share_count(bound)
    acc_x_0_threads = rt.thread_copies(n_threads, acc_x_0) if share is None else share.acc_x_0_threads
    acc_x_1_threads = rt.thread_copies(n_threads, acc_x_1) if share is None else share.acc_x_1_threads
    all_items = np.arange(n_N)  # the local step runs over these
    item_weight = np.ones(n_N)  # each item's weight in the statistics (SVI+ perturbs it)
    seed_category = np.full(n_N, -1)
    if share is not None:  # out of core: a minibatch's state, sharing the fit's
        return rt.State(bound=bound, a=a, b=b, seed_category=seed_category, item_weight=item_weight, acc_x_0_threads=acc_x_0_threads, x=x, present_x=present_x, acc_x_1_threads=acc_x_1_threads, lgamma1p_x=lgamma1p_x, acc_x_0=acc_x_0, acc_x_1=acc_x_1, lam_rate_log=lam_rate_log, E_rate_log=E_rate_log, lam_rate_value=lam_rate_value, E_rate_value=E_rate_value, log_b=log_b, lgamma_a=lgamma_a, all_items=all_items)
    # start every global at its prior
    update_rate(0.0, lam_rate_log, lam_rate_value, a, b, acc_x_0, acc_x_1, True, E_rate_log, E_rate_value)
    if init is not None:  # warm start: the globals' natural parameters from an earlier fit
        rt.load_state(init, {'lam_rate_log': lam_rate_log, 'lam_rate_value': lam_rate_value})
        refresh_globals(lam_rate_log, E_rate_log, lam_rate_value, E_rate_value)
    if init is None and start not in (None, 'prior'):
        raise rt.CemDataError(f"start: expected 'prior' (the only start of this model: nothing to break), found {start!r}")
    return rt.State(bound=bound, a=a, b=b, seed_category=seed_category, item_weight=item_weight, acc_x_0_threads=acc_x_0_threads, x=x, present_x=present_x, acc_x_1_threads=acc_x_1_threads, lgamma1p_x=lgamma1p_x, acc_x_0=acc_x_0, acc_x_1=acc_x_1, lam_rate_log=lam_rate_log, E_rate_log=E_rate_log, lam_rate_value=lam_rate_value, E_rate_value=E_rate_value, log_b=log_b, lgamma_a=lgamma_a, all_items=all_items)


def _learn(s, learn, rho=1.0, items=slice(None)):
    """Empirical Bayes (Minka 2000): each learned hyperparameter a step rho towards its ELBO maximiser given q."""
    if 'a' in learn:  # the prior of rate
        s.a = (1.0 - rho) * s.a + rho * rt.learn_gamma_shape(s.b, s.E_rate_log)
    if 'b' in learn:  # the prior of rate
        s.b = (1.0 - rho) * s.b + rho * rt.learn_gamma_rate(s.a, s.E_rate_value)
    # known quantities that depend on hyperparameters
    s.log_b = rt.log_data(s.b, "hyperparameter 'b'")
    s.lgamma_a = rt.gammaln(s.a)


def _result(s, trace, converged, seconds, items=True):
    """The posterior in usual parameters, expectations and the state."""
    posterior = {}
    state = {'lam_rate_log': s.lam_rate_log, 'lam_rate_value': s.lam_rate_value}
    rate__shape, rate__rate = rt.gamma_params(s.lam_rate_log, s.lam_rate_value)
    posterior['rate.shape'] = rate__shape[0]
    posterior['rate.rate'] = rate__rate[0]
    posterior['E[log rate]'] = s.E_rate_log[0]
    posterior['E[value rate]'] = s.E_rate_value[0]
    missing = rt.missing_posteriors(s, MISSING) if items else {}
    return rt.FitResult(posterior=posterior, elbo=np.array(trace), iterations=len(trace), converged=converged, seconds=seconds, dims=dict(s.bound.dims), hypers={'a': s.a, 'b': s.b}, state=state, missing=missing)


# -- the model's side of the fitting drivers (cemodel.runtime.drivers) ------------------------------
def run_local_step(
        s,
        items,
        max_local_iter,
        local_tol,
        seeding=False,
        warm=False,
        guard=False,
        evaluate=True,
        accelerate=False,
):
    """local_step over `items`: adds their statistics to acc_*, returns their ELBO terms."""
    return rt.run_shares(local_step, s.acc_x_0_threads.shape[0], (seeding, items, s.seed_category, max_local_iter, local_tol, s.item_weight, s.acc_x_0_threads, s.x, s.present_x, s.acc_x_1_threads, s.lgamma1p_x, evaluate,), ((s.acc_x_0, s.acc_x_0_threads), (s.acc_x_1, s.acc_x_1_threads),))


def _update_rate(s, data_scale, expect=True):
    update_rate(data_scale, s.lam_rate_log, s.lam_rate_value, s.a, s.b, s.acc_x_0, s.acc_x_1, expect, s.E_rate_log, s.E_rate_value)


def refresh(s):
    refresh_globals(s.lam_rate_log, s.E_rate_log, s.lam_rate_value, s.E_rate_value)


def elbo_of_globals(s):
    return elbo_global(s.a, s.log_b, s.lgamma_a, s.E_rate_log, s.b, s.E_rate_value, s.acc_x_0, s.acc_x_1, s.lam_rate_log, s.lam_rate_value)


GLOBALS = (  # the globals as the stochastic drivers move them
    rt.Global('rate', 'gamma', lam=('lam_rate_log', 'lam_rate_value'), E=('E_rate_log', 'E_rate_value'),
              update=_update_rate, aux_draws=1, after_sample=None),
)


def fit(data, **options):
    """Batch mean-field VB (options: cemodel.runtime.drivers.mf.fit). One iteration:
        statistics ← 0; elbo = run_local_step(s, s.all_items, ...)  # E-step
        _update_rate(s, 1.0)  # q(rate)
        elbo += elbo_of_globals(s)
    """
    return rt.drivers.mf.fit(_THIS, data, **options)


def fit_svi(data, **options):
    """SVI, SVI+ (options: cemodel.runtime.drivers.svi.fit). One step on a minibatch S:
        statistics ← 0; run_local_step(s, S, ...)
        _update_rate(s, N / len(S), expect=False)  # λ̂ of q(rate)
        λ ← (1 − ρ)λ + ρλ̂ (rt.blend); refresh(s)
    """
    return rt.drivers.svi.fit(_THIS, data, **options)


def fit_ssvi_a(data, **options):
    """SSVI-A (Hoffman & Blei 2015, eq. 10): fit_svi with the local step given a draw β ~ q(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, **options)


def fit_ssvi(data, **options):
    """SSVI (Hoffman & Blei 2015, eq. 7): fit_ssvi_a with λ̂ = η + V(β, λ)·N/|S| Σ η̂_n(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, apply_v=True, **options)
