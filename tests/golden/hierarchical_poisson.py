"""hierarchical_poisson: the model (kernels, data layout, start) for cemodel.runtime.drivers, by cemodel 0.1.0.

Model file: hierarchical_poisson.cem (sha256 a68bb58be09fe90c)
Regenerate with `cemodel compile hierarchical_poisson.cem`; do not edit by hand.

Natural parameters are in coefficient form: q(x) ∝ exp(Σ_s lam_s · t_s(x)).
E_<var>_<stat> holds E_q[t_s]; acc_* hold sums over the data plate.
"""

import numpy as np
from numba import njit

from cemodel import runtime as rt

SOURCE = 'hierarchical_poisson.cem'
SOURCE_SHA256 = 'a68bb58be09fe90c405d821c6856573062957a64f8f1c08166b8fbeffe76ed83'
DEFAULT_START = 'prior'  # nothing to break: every global starts at its prior
LEARNABLE = ('a0', 'b0')  # hyperparameters empirical Bayes can set (fit(..., learn=...))
DATA_PLATE = 'counts'  # the plate the local step runs over
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
    'data': ('group', 'x', 'e', 'n_G'), 'hyper': ('a', 'a0', 'b0'),
    'known': ('present_x', 'log_e', 'lgamma1p_x', 'log_b0', 'lgamma_a0', 'lgamma_a'),
    'global': ('lam_beta_log', 'lam_beta_value', 'lam_lam_log', 'lam_lam_value'),
    'global_exp': ('E_beta_log', 'E_beta_value', 'E_lam_log', 'E_lam_value'),
    'item': ('seed_category', 'item_weight'), 'statistic': ('acc_x_1', 'acc_x_2'),
    'thread': ('acc_x_1_threads', 'acc_x_2_threads'),
}
_THIS = rt.ModelView(globals())  # the model, as the drivers see it

SPEC = {
    "model": 'hierarchical_poisson',
    "dims": {
        'G': {"default": None, "ragged_over": None},
        'N': {"default": None, "ragged_over": None},
    },
    "plates": {
        'groups': {"dim": 'G', "parent": None, "ragged": False},
        'counts': {"dim": 'N', "parent": None, "ragged": False},
    },
    "observed": {
        'x': {"plates": ['counts'], "support": 'count', "shape": [], "categories": None, "missing": 'yes'},
    },
    "covariates": {
        'group': {"plates": ['counts'], "kind": 'int', "shape": [], "categories": 'G'},
        'e': {"plates": ['counts'], "kind": 'real', "shape": [], "nonnegative": True},
    },
    "not_data": {'a': 'hyperparameter', 'a0': 'hyperparameter', 'b0': 'hyperparameter', 'beta': 'latent', 'lam': 'latent'},
}
MISSING = {  # observed entries that may be missing: their q (rt.missing_posteriors)
    'x': {"family": 'Poisson', "data_plate": 'a', "why_not": None,
        "terms": ((1.0, ('value',), 'a', (('log_e', 'a'),)), (1.0, ('value',), 'a', (('E_lam_log', 'b'), ('group', 'onehot:n_G:ab'))), (-1.0, ('lgamma1p',), 'a', ()))},
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
        group,
        x,
        present_x,
        e,
        log_e,
        lgamma1p_x,
        evaluate,
        acc_x_1_threads,
        acc_x_2_threads,
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
        acc_x_1_t = acc_x_1_threads[thread]
        acc_x_2_t = acc_x_2_threads[thread]
        elbo = 0.0
        stop_position = (thread + 1) * items.shape[0] // n_threads
        for position in range(thread * items.shape[0] // n_threads, stop_position):
            i_counts = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_counts + 1:
                rt.prefetch_row(item_weight, items[position + 1])
                rt.prefetch_row(x, items[position + 1])
                rt.prefetch_row(group, items[position + 1])
                rt.prefetch_row(e, items[position + 1])
            # acc_x_1[g0] += x[counts] · onehot(group[counts]) · present(x[counts])  (hierarchical_poisson.cem:22:5)
            t_g0 = group[i_counts]
            acc_x_1_t[t_g0] += item_weight[i_counts] * x[i_counts] * present_x[i_counts]
            # acc_x_2[g0] += e[counts] · onehot(group[counts]) · present(x[counts])  (hierarchical_poisson.cem:22:5)
            t_g0 = group[i_counts]
            acc_x_2_t[t_g0] += item_weight[i_counts] * e[i_counts] * present_x[i_counts]
            # ELBO: local terms and local entropies (a stochastic step has no use for them)
            if evaluate:
                elbo += x[i_counts] * log_e[i_counts] * present_x[i_counts]
                elbo += -lgamma1p_x[i_counts] * present_x[i_counts]
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_beta(
        data_scale,
        lam_beta_log,
        lam_beta_value,
        a0,
        b0,
        n_G,
        a,
        E_lam_value,
        expect,
        E_beta_log,
        E_beta_value,
):
    """q(beta) = Gamma(shape, rate)
        shape = a0 + Σ_{g} a
        rate = b0 + Σ_{g} E[lam[g]]

    (hierarchical_poisson.cem:16:1)
    """
    lam_beta_log[0] = 0.0
    lam_beta_value[0] = 0.0
    # from beta ~ Gamma (hierarchical_poisson.cem:16:1)
    lam_beta_log[0] += a0
    # from beta ~ Gamma (hierarchical_poisson.cem:16:1)
    lam_beta_log[0] += -1.0
    # from beta ~ Gamma (hierarchical_poisson.cem:16:1)
    lam_beta_value[0] += -b0
    # from lam ~ Gamma (hierarchical_poisson.cem:18:5)
    for i_groups in range(n_G):
        lam_beta_log[0] += a
    # from lam ~ Gamma (hierarchical_poisson.cem:18:5)
    for i_groups in range(n_G):
        lam_beta_value[0] += -E_lam_value[i_groups]
    if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
        E_beta_log[0], E_beta_value[0] = rt.gamma_expected_stats(lam_beta_log[0], lam_beta_value[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_lam(
        data_scale,
        lam_lam_log,
        lam_lam_value,
        a,
        E_beta_value,
        acc_x_1,
        acc_x_2,
        expect,
        E_lam_log,
        E_lam_value,
        n_G,
):
    """q(lam[g]) = Gamma(shape, rate)
        shape = a + Σ_{n} x[n]·[group[n] = g]
        rate = E[beta] + Σ_{n} e[n]·[group[n] = g]

    (hierarchical_poisson.cem:18:5)
    """
    for i_groups in range(n_G):
        lam_lam_log[i_groups] = 0.0
        lam_lam_value[i_groups] = 0.0
        # from lam ~ Gamma (hierarchical_poisson.cem:18:5)
        lam_lam_log[i_groups] += a
        # from lam ~ Gamma (hierarchical_poisson.cem:18:5)
        lam_lam_log[i_groups] += -1.0
        # from lam ~ Gamma (hierarchical_poisson.cem:18:5)
        lam_lam_value[i_groups] += -E_beta_value[0]
        # from x ~ Poisson (hierarchical_poisson.cem:22:5)
        lam_lam_log[i_groups] += data_scale * acc_x_1[i_groups]
        # from x ~ Poisson (hierarchical_poisson.cem:22:5)
        lam_lam_value[i_groups] += -data_scale * acc_x_2[i_groups]
        if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
            E_lam_log[i_groups], E_lam_value[i_groups] = rt.gamma_expected_stats(lam_lam_log[i_groups], lam_lam_value[i_groups])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def refresh_globals(
        lam_beta_log,
        E_beta_log,
        lam_beta_value,
        E_beta_value,
        lam_lam_log,
        E_lam_log,
        lam_lam_value,
        E_lam_value,
        n_G,
):
    """Expected statistics of the globals from their natural parameters."""
    E_beta_log[0], E_beta_value[0] = rt.gamma_expected_stats(lam_beta_log[0], lam_beta_value[0])
    for i_groups in range(n_G):
        E_lam_log[i_groups], E_lam_value[i_groups] = rt.gamma_expected_stats(lam_lam_log[i_groups], lam_lam_value[i_groups])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def elbo_global(
        a0,
        log_b0,
        lgamma_a0,
        E_beta_log,
        b0,
        E_beta_value,
        n_G,
        a,
        lgamma_a,
        E_lam_log,
        E_lam_value,
        acc_x_1,
        acc_x_2,
        lam_beta_log,
        lam_beta_value,
        lam_lam_log,
        lam_lam_value,
):
    """ELBO terms of the global factors (see elbo_terms in the README)."""
    elbo = 0.0
    # E[log p(beta | ...)]  (hierarchical_poisson.cem:16:1)
    elbo += a0 * log_b0
    elbo += -lgamma_a0
    elbo += a0 * E_beta_log[0]
    elbo += -E_beta_log[0]
    elbo += -b0 * E_beta_value[0]
    # E[log p(lam | ...)]  (hierarchical_poisson.cem:18:5)
    for i_groups in range(n_G):
        elbo += a * E_beta_log[0]
    for i_groups in range(n_G):
        elbo += -lgamma_a
    for i_groups in range(n_G):
        elbo += a * E_lam_log[i_groups]
    for i_groups in range(n_G):
        elbo += -E_lam_log[i_groups]
    for i_groups in range(n_G):
        elbo += -E_beta_value[0] * E_lam_value[i_groups]
    # E[log p(x | ...)]  (hierarchical_poisson.cem:22:5)
    for t_g0 in range(n_G):
        elbo += acc_x_1[t_g0] * E_lam_log[t_g0]
    for t_g0 in range(n_G):
        elbo += -acc_x_2[t_g0] * E_lam_value[t_g0]
    # entropy of q(beta)
    elbo += rt.gamma_log_normalizer(lam_beta_log[0], lam_beta_value[0]) - lam_beta_log[0] * E_beta_log[0] - lam_beta_value[0] * E_beta_value[0]
    # entropy of q(lam)
    for i_groups in range(n_G):
        elbo += rt.gamma_log_normalizer(lam_lam_log[i_groups], lam_lam_value[i_groups]) - lam_lam_log[i_groups] * E_lam_log[i_groups] - lam_lam_value[i_groups] * E_lam_value[i_groups]
    return elbo


def _prepare(data, hypers, dims, seed, init, start, max_local_iter, local_tol, share=None):
    """Bind and check the data, evaluate hyperparameters and knowns, allocate the arrays, start the globals.
    share: out of core, the fit's state, whose globals, hyperparameters and statistics `data`'s minibatch shares.
    """
    hypers = rt.check_hyper_names(hypers, ['a', 'a0', 'b0'])
    bound = rt.bind_data(SPEC, data, dims, missing=True)
    n_G, n_N = bound.dims['G'], bound.dims['N']
    # refuse before allocating more than the machine's memory
    rt.check_memory(bound, {(1,): 4, ('G',): 6, ('threads', 'G'): 2, ('N',): 3})
    x, group, e = bound.arrays['x'], bound.arrays['group'], bound.arrays['e']
    # hyperparameters (defaults from the model file; out of core the fit's current values)
    a = rt.hyper_value(hypers, 'a', 2.0, (), domain='shape') if share is None else share.a
    a0 = rt.hyper_value(hypers, 'a0', 1.0, (), domain='shape') if share is None else share.a0
    b0 = rt.hyper_value(hypers, 'b0', 1.0, (), domain='positive') if share is None else share.b0
    # known quantities: functions of hyperparameters and data
    log_b0 = rt.log_data(b0, "hyperparameter 'b0'")  # log(b0)
    lgamma_a0 = rt.gammaln(a0)  # lgamma(a0)
    lgamma_a = rt.gammaln(a)  # lgamma(a)
    log_e = rt.log_data(e, "data 'e'")  # log(e[counts])
    present_x = rt.present(bound, 'x')  # present(x[counts])
    lgamma1p_x = rt.gammaln(x + 1.0)  # lgamma1p(x[counts])
    # variational parameters (natural, coefficient form) and E[t]
    lam_beta_log, E_beta_log = (np.zeros((1,)), np.zeros((1,))) if share is None else (share.lam_beta_log, share.E_beta_log)
    lam_beta_value, E_beta_value = (np.zeros((1,)), np.zeros((1,))) if share is None else (share.lam_beta_value, share.E_beta_value)
    lam_lam_log, E_lam_log = (np.zeros((n_G,)), np.zeros((n_G,))) if share is None else (share.lam_lam_log, share.E_lam_log)
    lam_lam_value, E_lam_value = (np.zeros((n_G,)), np.zeros((n_G,))) if share is None else (share.lam_lam_value, share.E_lam_value)
    # sufficient statistics the local step hands to the global step (out of core added up over minibatches)
    acc_x_1 = np.zeros((n_G,)) if share is None else share.acc_x_1
    acc_x_2 = np.zeros((n_G,)) if share is None else share.acc_x_2
    # the local step's shares: one per thread, fewer for small data
    n_threads = rt.share_count(bound)
    acc_x_1_threads = rt.thread_copies(n_threads, acc_x_1) if share is None else share.acc_x_1_threads
    acc_x_2_threads = rt.thread_copies(n_threads, acc_x_2) if share is None else share.acc_x_2_threads
    all_items = np.arange(n_N)  # the local step runs over these
    item_weight = np.ones(n_N)  # each item's weight in the statistics (SVI+ perturbs it)
    seed_category = np.full(n_N, -1)
    if share is not None:  # out of core: a minibatch's state, sharing the fit's
        return rt.State(bound=bound, a=a, a0=a0, b0=b0, seed_category=seed_category, item_weight=item_weight, group=group, x=x, present_x=present_x, e=e, log_e=log_e, lgamma1p_x=lgamma1p_x, acc_x_1_threads=acc_x_1_threads, acc_x_2_threads=acc_x_2_threads, acc_x_1=acc_x_1, acc_x_2=acc_x_2, lam_beta_log=lam_beta_log, E_beta_log=E_beta_log, lam_beta_value=lam_beta_value, E_beta_value=E_beta_value, lam_lam_log=lam_lam_log, E_lam_log=E_lam_log, lam_lam_value=lam_lam_value, E_lam_value=E_lam_value, n_G=n_G, log_b0=log_b0, lgamma_a0=lgamma_a0, lgamma_a=lgamma_a, all_items=all_items)
    # start every global at its prior
    update_beta(0.0, lam_beta_log, lam_beta_value, a0, b0, n_G, a, E_lam_value, True, E_beta_log, E_beta_value)
    update_lam(0.0, lam_lam_log, lam_lam_value, a, E_beta_value, acc_x_1, acc_x_2, True, E_lam_log, E_lam_value, n_G)
    if init is not None:  # warm start: the globals' natural parameters from an earlier fit
        rt.load_state(init, {'lam_beta_log': lam_beta_log, 'lam_beta_value': lam_beta_value, 'lam_lam_log': lam_lam_log, 'lam_lam_value': lam_lam_value})
        refresh_globals(lam_beta_log, E_beta_log, lam_beta_value, E_beta_value, lam_lam_log, E_lam_log, lam_lam_value, E_lam_value, n_G)
    if init is None and start not in (None, 'prior'):
        raise rt.CemDataError(f"start: expected 'prior' (the only start of this model: nothing to break), found {start!r}")
    return rt.State(bound=bound, a=a, a0=a0, b0=b0, seed_category=seed_category, item_weight=item_weight, group=group, x=x, present_x=present_x, e=e, log_e=log_e, lgamma1p_x=lgamma1p_x, acc_x_1_threads=acc_x_1_threads, acc_x_2_threads=acc_x_2_threads, acc_x_1=acc_x_1, acc_x_2=acc_x_2, lam_beta_log=lam_beta_log, E_beta_log=E_beta_log, lam_beta_value=lam_beta_value, E_beta_value=E_beta_value, lam_lam_log=lam_lam_log, E_lam_log=E_lam_log, lam_lam_value=lam_lam_value, E_lam_value=E_lam_value, n_G=n_G, log_b0=log_b0, lgamma_a0=lgamma_a0, lgamma_a=lgamma_a, all_items=all_items)


def _learn(s, learn, rho=1.0, items=slice(None)):
    """Empirical Bayes (Minka 2000): each learned hyperparameter a step rho towards its ELBO maximiser given q."""
    if 'a0' in learn:  # the prior of beta
        s.a0 = (1.0 - rho) * s.a0 + rho * rt.learn_gamma_shape(s.b0, s.E_beta_log)
    if 'b0' in learn:  # the prior of beta
        s.b0 = (1.0 - rho) * s.b0 + rho * rt.learn_gamma_rate(s.a0, s.E_beta_value)
    # known quantities that depend on hyperparameters
    s.log_b0 = rt.log_data(s.b0, "hyperparameter 'b0'")
    s.lgamma_a0 = rt.gammaln(s.a0)


def _result(s, trace, converged, seconds, items=True):
    """The posterior in usual parameters, expectations and the state."""
    posterior = {}
    state = {'lam_beta_log': s.lam_beta_log, 'lam_beta_value': s.lam_beta_value, 'lam_lam_log': s.lam_lam_log, 'lam_lam_value': s.lam_lam_value}
    beta__shape, beta__rate = rt.gamma_params(s.lam_beta_log, s.lam_beta_value)
    posterior['beta.shape'] = beta__shape[0]
    posterior['beta.rate'] = beta__rate[0]
    posterior['E[log beta]'] = s.E_beta_log[0]
    posterior['E[value beta]'] = s.E_beta_value[0]
    lam__shape, lam__rate = rt.gamma_params(s.lam_lam_log, s.lam_lam_value)
    posterior['lam.shape'] = lam__shape
    posterior['lam.rate'] = lam__rate
    posterior['E[log lam]'] = s.E_lam_log
    posterior['E[value lam]'] = s.E_lam_value
    missing = rt.missing_posteriors(s, MISSING) if items else {}
    return rt.FitResult(posterior=posterior, elbo=np.array(trace), iterations=len(trace), converged=converged, seconds=seconds, dims=dict(s.bound.dims), hypers={'a': s.a, 'a0': s.a0, 'b0': s.b0}, state=state, missing=missing)


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
    return rt.run_shares(local_step, s.acc_x_1_threads.shape[0], (seeding, items, s.seed_category, max_local_iter, local_tol, s.item_weight, s.group, s.x, s.present_x, s.e, s.log_e, s.lgamma1p_x, evaluate, s.acc_x_1_threads, s.acc_x_2_threads,), ((s.acc_x_1, s.acc_x_1_threads), (s.acc_x_2, s.acc_x_2_threads),))


def _update_beta(s, data_scale, expect=True):
    update_beta(data_scale, s.lam_beta_log, s.lam_beta_value, s.a0, s.b0, s.n_G, s.a, s.E_lam_value, expect, s.E_beta_log, s.E_beta_value)


def _update_lam(s, data_scale, expect=True):
    update_lam(data_scale, s.lam_lam_log, s.lam_lam_value, s.a, s.E_beta_value, s.acc_x_1, s.acc_x_2, expect, s.E_lam_log, s.E_lam_value, s.n_G)


def refresh(s):
    refresh_globals(s.lam_beta_log, s.E_beta_log, s.lam_beta_value, s.E_beta_value, s.lam_lam_log, s.E_lam_log, s.lam_lam_value, s.E_lam_value, s.n_G)


def elbo_of_globals(s):
    return elbo_global(s.a0, s.log_b0, s.lgamma_a0, s.E_beta_log, s.b0, s.E_beta_value, s.n_G, s.a, s.lgamma_a, s.E_lam_log, s.E_lam_value, s.acc_x_1, s.acc_x_2, s.lam_beta_log, s.lam_beta_value, s.lam_lam_log, s.lam_lam_value)


GLOBALS = (  # the globals as the stochastic drivers move them
    rt.Global('beta', 'gamma', lam=('lam_beta_log', 'lam_beta_value'), E=('E_beta_log', 'E_beta_value'),
              update=_update_beta, aux_draws=1, after_sample=None),
    rt.Global('lam', 'gamma', lam=('lam_lam_log', 'lam_lam_value'), E=('E_lam_log', 'E_lam_value'),
              update=_update_lam, aux_draws=1, after_sample=None),
)


def fit(data, **options):
    """Batch mean-field VB (options: cemodel.runtime.drivers.mf.fit). One iteration:
        statistics ← 0; elbo = run_local_step(s, s.all_items, ...)  # E-step
        _update_beta(s, 1.0)  # q(beta)
        _update_lam(s, 1.0)  # q(lam)
        elbo += elbo_of_globals(s)
    """
    return rt.drivers.mf.fit(_THIS, data, **options)


def fit_svi(data, **options):
    """SVI, SVI+ (options: cemodel.runtime.drivers.svi.fit). One step on a minibatch S:
        statistics ← 0; run_local_step(s, S, ...)
        _update_beta(s, N / len(S), expect=False)  # λ̂ of q(beta)
        _update_lam(s, N / len(S), expect=False)  # λ̂ of q(lam)
        λ ← (1 − ρ)λ + ρλ̂ (rt.blend); refresh(s)
    """
    return rt.drivers.svi.fit(_THIS, data, **options)


def fit_ssvi_a(data, **options):
    """SSVI-A (Hoffman & Blei 2015, eq. 10): fit_svi with the local step given a draw β ~ q(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, **options)


def fit_ssvi(data, **options):
    """SSVI (Hoffman & Blei 2015, eq. 7): fit_ssvi_a with λ̂ = η + V(β, λ)·N/|S| Σ η̂_n(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, apply_v=True, **options)
