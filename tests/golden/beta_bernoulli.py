"""beta_bernoulli: the model (kernels, data layout, start) for cemodel.runtime.drivers, by cemodel 0.1.0.

Model file: beta_bernoulli.cem (sha256 9d1fd898b0c9100e)
Regenerate with `cemodel compile beta_bernoulli.cem`; do not edit by hand.

Natural parameters are in coefficient form: q(x) ∝ exp(Σ_s lam_s · t_s(x)).
E_<var>_<stat> holds E_q[t_s]; acc_* hold sums over the data plate.
"""

import numpy as np
from numba import njit

from cemodel import runtime as rt

SOURCE = 'beta_bernoulli.cem'
SOURCE_SHA256 = '9d1fd898b0c9100e2526f39860a346cf1cbed2633c45f9378ab242ce88a7276e'
DEFAULT_START = 'prior'  # nothing to break: every global starts at its prior
LEARNABLE = ('a', 'b')  # hyperparameters empirical Bayes can set (fit(..., learn=...))
DATA_PLATE = 'trials'  # the plate the local step runs over
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
    'data': ('x',), 'hyper': ('a', 'b'), 'known': ('present_x', 'lbeta_a_b'),
    'global': ('lam_p_log', 'lam_p_log1m'), 'global_exp': ('E_p_log', 'E_p_log1m'),
    'item': ('seed_category', 'item_weight'), 'statistic': ('acc_x_0', 'acc_x_1'),
    'thread': ('acc_x_0_threads', 'acc_x_1_threads'),
}
_THIS = rt.ModelView(globals())  # the model, as the drivers see it

SPEC = {
    "model": 'beta_bernoulli',
    "dims": {
        'N': {"default": None, "ragged_over": None},
    },
    "plates": {
        'trials': {"dim": 'N', "parent": None, "ragged": False},
    },
    "observed": {
        'x': {"plates": ['trials'], "support": 'binary', "shape": [], "categories": None, "missing": 'yes'},
    },
    "covariates": {},
    "not_data": {'a': 'hyperparameter', 'b': 'hyperparameter', 'p': 'latent'},
}
MISSING = {  # observed entries that may be missing: their q (rt.missing_posteriors)
    'x': {"family": 'Bernoulli', "data_plate": 'a', "why_not": None,
        "terms": ((1.0, ('value',), 'a', (('E_p_log', '0'),)), (-1.0, ('value',), 'a', (('E_p_log1m', '0'),)))},
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
            i_trials = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_trials + 1:
                rt.prefetch_row(item_weight, items[position + 1])
                rt.prefetch_row(x, items[position + 1])
            # acc_x_0[] += x[trials] · present(x[trials])  (beta_bernoulli.cem:13:5)
            acc_x_0_threads[thread] += item_weight[i_trials] * x[i_trials] * present_x[i_trials]
            # acc_x_1[] += present(x[trials])  (beta_bernoulli.cem:13:5)
            acc_x_1_threads[thread] += item_weight[i_trials] * present_x[i_trials]
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_p(
        data_scale,
        lam_p_log,
        lam_p_log1m,
        a,
        b,
        acc_x_0,
        acc_x_1,
        expect,
        E_p_log,
        E_p_log1m,
):
    """q(p) = Beta(a, b)
        a = a + Σ_{n} x[n]
        b = b + Σ_{n} 1 - Σ_{n} x[n]

    (beta_bernoulli.cem:11:1)
    """
    lam_p_log[0] = 0.0
    lam_p_log1m[0] = 0.0
    # from p ~ Beta (beta_bernoulli.cem:11:1)
    lam_p_log[0] += a
    # from p ~ Beta (beta_bernoulli.cem:11:1)
    lam_p_log[0] += -1.0
    # from p ~ Beta (beta_bernoulli.cem:11:1)
    lam_p_log1m[0] += b
    # from p ~ Beta (beta_bernoulli.cem:11:1)
    lam_p_log1m[0] += -1.0
    # from x ~ Bernoulli (beta_bernoulli.cem:13:5)
    lam_p_log[0] += data_scale * acc_x_0
    # from x ~ Bernoulli (beta_bernoulli.cem:13:5)
    lam_p_log1m[0] += data_scale * acc_x_1
    # from x ~ Bernoulli (beta_bernoulli.cem:13:5)
    lam_p_log1m[0] += -data_scale * acc_x_0
    if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
        E_p_log[0], E_p_log1m[0] = rt.beta_expected_stats(lam_p_log[0], lam_p_log1m[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def refresh_globals(lam_p_log, E_p_log, lam_p_log1m, E_p_log1m):
    """Expected statistics of the globals from their natural parameters."""
    E_p_log[0], E_p_log1m[0] = rt.beta_expected_stats(lam_p_log[0], lam_p_log1m[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def elbo_global(a, E_p_log, b, E_p_log1m, lbeta_a_b, acc_x_0, acc_x_1, lam_p_log, lam_p_log1m):
    """ELBO terms of the global factors (see elbo_terms in the README)."""
    elbo = 0.0
    # E[log p(p | ...)]  (beta_bernoulli.cem:11:1)
    elbo += a * E_p_log[0]
    elbo += -E_p_log[0]
    elbo += b * E_p_log1m[0]
    elbo += -E_p_log1m[0]
    elbo += -lbeta_a_b
    # E[log p(x | ...)]  (beta_bernoulli.cem:13:5)
    elbo += acc_x_0 * E_p_log[0]
    elbo += acc_x_1 * E_p_log1m[0]
    elbo += -acc_x_0 * E_p_log1m[0]
    # entropy of q(p)
    elbo += rt.beta_log_normalizer(lam_p_log[0], lam_p_log1m[0]) - lam_p_log[0] * E_p_log[0] - lam_p_log1m[0] * E_p_log1m[0]
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
    b = rt.hyper_value(hypers, 'b', 3.0, (), domain='shape') if share is None else share.b
    # known quantities: functions of hyperparameters and data
    lbeta_a_b = rt.lbeta(a, b)  # lbeta(a, b)
    present_x = rt.present(bound, 'x')  # present(x[trials])
    # variational parameters (natural, coefficient form) and E[t]
    lam_p_log, E_p_log = (np.zeros((1,)), np.zeros((1,))) if share is None else (share.lam_p_log, share.E_p_log)
    lam_p_log1m, E_p_log1m = (np.zeros((1,)), np.zeros((1,))) if share is None else (share.lam_p_log1m, share.E_p_log1m)
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
        return rt.State(bound=bound, a=a, b=b, seed_category=seed_category, item_weight=item_weight, acc_x_0_threads=acc_x_0_threads, x=x, present_x=present_x, acc_x_1_threads=acc_x_1_threads, acc_x_0=acc_x_0, acc_x_1=acc_x_1, lam_p_log=lam_p_log, E_p_log=E_p_log, lam_p_log1m=lam_p_log1m, E_p_log1m=E_p_log1m, lbeta_a_b=lbeta_a_b, all_items=all_items)
    # start every global at its prior
    update_p(0.0, lam_p_log, lam_p_log1m, a, b, acc_x_0, acc_x_1, True, E_p_log, E_p_log1m)
    if init is not None:  # warm start: the globals' natural parameters from an earlier fit
        rt.load_state(init, {'lam_p_log': lam_p_log, 'lam_p_log1m': lam_p_log1m})
        refresh_globals(lam_p_log, E_p_log, lam_p_log1m, E_p_log1m)
    if init is None and start not in (None, 'prior'):
        raise rt.CemDataError(f"start: expected 'prior' (the only start of this model: nothing to break), found {start!r}")
    return rt.State(bound=bound, a=a, b=b, seed_category=seed_category, item_weight=item_weight, acc_x_0_threads=acc_x_0_threads, x=x, present_x=present_x, acc_x_1_threads=acc_x_1_threads, acc_x_0=acc_x_0, acc_x_1=acc_x_1, lam_p_log=lam_p_log, E_p_log=E_p_log, lam_p_log1m=lam_p_log1m, E_p_log1m=E_p_log1m, lbeta_a_b=lbeta_a_b, all_items=all_items)


def _learn(s, learn, rho=1.0, items=slice(None)):
    """Empirical Bayes (Minka 2000): each learned hyperparameter a step rho towards its ELBO maximiser given q."""
    if 'a' in learn:  # the prior of p
        s.a = (1.0 - rho) * s.a + rho * rt.learn_beta_param(s.b, s.E_p_log)
    if 'b' in learn:  # the prior of p
        s.b = (1.0 - rho) * s.b + rho * rt.learn_beta_param(s.a, s.E_p_log1m)
    # known quantities that depend on hyperparameters
    s.lbeta_a_b = rt.lbeta(s.a, s.b)


def _result(s, trace, converged, seconds, items=True):
    """The posterior in usual parameters, expectations and the state."""
    posterior = {}
    state = {'lam_p_log': s.lam_p_log, 'lam_p_log1m': s.lam_p_log1m}
    p__a, p__b = rt.beta_params(s.lam_p_log, s.lam_p_log1m)
    posterior['p.a'] = p__a[0]
    posterior['p.b'] = p__b[0]
    posterior['E[log p]'] = s.E_p_log[0]
    posterior['E[log1m p]'] = s.E_p_log1m[0]
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
    return rt.run_shares(local_step, s.acc_x_0_threads.shape[0], (seeding, items, s.seed_category, max_local_iter, local_tol, s.item_weight, s.acc_x_0_threads, s.x, s.present_x, s.acc_x_1_threads,), ((s.acc_x_0, s.acc_x_0_threads), (s.acc_x_1, s.acc_x_1_threads),))


def _update_p(s, data_scale, expect=True):
    update_p(data_scale, s.lam_p_log, s.lam_p_log1m, s.a, s.b, s.acc_x_0, s.acc_x_1, expect, s.E_p_log, s.E_p_log1m)


def refresh(s):
    refresh_globals(s.lam_p_log, s.E_p_log, s.lam_p_log1m, s.E_p_log1m)


def elbo_of_globals(s):
    return elbo_global(s.a, s.E_p_log, s.b, s.E_p_log1m, s.lbeta_a_b, s.acc_x_0, s.acc_x_1, s.lam_p_log, s.lam_p_log1m)


GLOBALS = (  # the globals as the stochastic drivers move them
    rt.Global('p', 'beta', lam=('lam_p_log', 'lam_p_log1m'), E=('E_p_log', 'E_p_log1m'),
              update=_update_p, aux_draws=2, after_sample=None),
)


def fit(data, **options):
    """Batch mean-field VB (options: cemodel.runtime.drivers.mf.fit). One iteration:
        statistics ← 0; elbo = run_local_step(s, s.all_items, ...)  # E-step
        _update_p(s, 1.0)  # q(p)
        elbo += elbo_of_globals(s)
    """
    return rt.drivers.mf.fit(_THIS, data, **options)


def fit_svi(data, **options):
    """SVI, SVI+ (options: cemodel.runtime.drivers.svi.fit). One step on a minibatch S:
        statistics ← 0; run_local_step(s, S, ...)
        _update_p(s, N / len(S), expect=False)  # λ̂ of q(p)
        λ ← (1 − ρ)λ + ρλ̂ (rt.blend); refresh(s)
    """
    return rt.drivers.svi.fit(_THIS, data, **options)


def fit_ssvi_a(data, **options):
    """SSVI-A (Hoffman & Blei 2015, eq. 10): fit_svi with the local step given a draw β ~ q(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, **options)


def fit_ssvi(data, **options):
    """SSVI (Hoffman & Blei 2015, eq. 7): fit_ssvi_a with λ̂ = η + V(β, λ)·N/|S| Σ η̂_n(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, apply_v=True, **options)
