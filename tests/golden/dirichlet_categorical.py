"""dirichlet_categorical: the model (kernels, data layout, start) for cemodel.runtime.drivers, by cemodel 0.1.0.

Model file: dirichlet_categorical.cem (sha256 9969c96eb90d0fa3)
Regenerate with `cemodel compile dirichlet_categorical.cem`; do not edit by hand.

Natural parameters are in coefficient form: q(x) ∝ exp(Σ_s lam_s · t_s(x)).
E_<var>_<stat> holds E_q[t_s]; acc_* hold sums over the data plate.
"""

import numpy as np
from numba import njit

from cemodel import runtime as rt

SOURCE = 'dirichlet_categorical.cem'
SOURCE_SHA256 = '9969c96eb90d0fa3eb3da5ca38f7e6d7467afcef440aa946bd58be8f18abdd07'
DEFAULT_START = 'prior'  # nothing to break: every global starts at its prior
LEARNABLE = ('alpha',)  # hyperparameters empirical Bayes can set (fit(..., learn=...))
DATA_PLATE = 'rolls'  # the plate the local step runs over
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
    'data': ('x', 'n_K'), 'hyper': ('alpha',),
    'known': ('present_x', 'lgamma_sum_alpha', 'lgamma_alpha'), 'global': ('lam_p_log',),
    'global_exp': ('E_p_log',), 'item': ('seed_category', 'item_weight'),
    'statistic': ('acc_x_0',), 'thread': ('acc_x_0_threads',),
}
_THIS = rt.ModelView(globals())  # the model, as the drivers see it

SPEC = {
    "model": 'dirichlet_categorical',
    "dims": {
        'K': {"default": 6, "ragged_over": None},
        'N': {"default": None, "ragged_over": None},
    },
    "plates": {
        'rolls': {"dim": 'N', "parent": None, "ragged": False},
    },
    "observed": {
        'x': {"plates": ['rolls'], "support": 'category', "shape": [], "categories": 'K', "missing": 'yes'},
    },
    "covariates": {},
    "not_data": {'alpha': 'hyperparameter', 'p': 'latent'},
}
MISSING = {  # observed entries that may be missing: their q (rt.missing_posteriors)
    'x': {"family": 'Categorical', "data_plate": 'a', "why_not": None,
        "terms": ((1.0, ('onehot',), 'ab', (('E_p_log', '0b'),)),)},
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
        x,
        present_x,
        acc_x_0_threads,
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
        acc_x_0_t = acc_x_0_threads[thread]
        elbo = 0.0
        stop_position = (thread + 1) * items.shape[0] // n_threads
        for position in range(thread * items.shape[0] // n_threads, stop_position):
            i_rolls = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_rolls + 1:
                rt.prefetch_row(item_weight, items[position + 1])
                rt.prefetch_row(x, items[position + 1])
            # acc_x_0[k] += onehot(x[rolls]) · present(x[rolls])  (dirichlet_categorical.cem:13:5)
            t_k = x[i_rolls]
            acc_x_0_t[t_k] += item_weight[i_rolls] * present_x[i_rolls]
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_p(data_scale, lam_p_log, n_K, alpha, acc_x_0, expect, E_p_log):
    """q(p) = Dirichlet(α)
        α_v = alpha + Σ_{n} [x[n] = v]

    (dirichlet_categorical.cem:11:1)
    """
    lam_p_log[0] = 0.0
    # from p ~ Dirichlet (dirichlet_categorical.cem:11:1)
    for t_k in range(n_K):
        lam_p_log[0, t_k] += alpha
    # from p ~ Dirichlet (dirichlet_categorical.cem:11:1)
    for t_k in range(n_K):
        lam_p_log[0, t_k] += -1.0
    # from x ~ Categorical (dirichlet_categorical.cem:13:5)
    for t_k in range(n_K):
        lam_p_log[0, t_k] += data_scale * acc_x_0[t_k]
    if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
        rt.dirichlet_expected_stats(lam_p_log[0], E_p_log[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def refresh_globals(lam_p_log, E_p_log):
    """Expected statistics of the globals from their natural parameters."""
    rt.dirichlet_expected_stats(lam_p_log[0], E_p_log[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def elbo_global(n_K, alpha, E_p_log, lgamma_sum_alpha, lgamma_alpha, acc_x_0, lam_p_log):
    """ELBO terms of the global factors (see elbo_terms in the README)."""
    elbo = 0.0
    # E[log p(p | ...)]  (dirichlet_categorical.cem:11:1)
    for t_k in range(n_K):
        elbo += alpha * E_p_log[0, t_k]
    for t_k in range(n_K):
        elbo += -E_p_log[0, t_k]
    elbo += lgamma_sum_alpha
    for t_k in range(n_K):
        elbo += -lgamma_alpha
    # E[log p(x | ...)]  (dirichlet_categorical.cem:13:5)
    for t_k in range(n_K):
        elbo += acc_x_0[t_k] * E_p_log[0, t_k]
    # entropy of q(p)
    elbo += rt.dirichlet_log_normalizer(lam_p_log[0]) - rt.frobenius(lam_p_log[0], E_p_log[0])
    return elbo


def _prepare(data, hypers, dims, seed, init, start, max_local_iter, local_tol, share=None):
    """Bind and check the data, evaluate hyperparameters and knowns, allocate the arrays, start the globals.
    share: out of core, the fit's state, whose globals, hyperparameters and statistics `data`'s minibatch shares.
    """
    hypers = rt.check_hyper_names(hypers, ['alpha'])
    bound = rt.bind_data(SPEC, data, dims, missing=True)
    n_K, n_N = bound.dims['K'], bound.dims['N']
    # refuse before allocating more than the machine's memory
    rt.check_memory(bound, {(1, 'K'): 2, ('K',): 1, ('threads', 'K'): 1, ('N',): 3})
    x = bound.arrays['x']
    # hyperparameters (defaults from the model file; out of core the fit's current values)
    alpha = rt.hyper_value(hypers, 'alpha', 1.0, (), domain='shape') if share is None else share.alpha
    # known quantities: functions of hyperparameters and data
    lgamma_sum_alpha = rt.gammaln(n_K * alpha)  # lgamma_sum(repeat(alpha, K))
    lgamma_alpha = rt.gammaln(alpha)  # lgamma(repeat(alpha, K))
    present_x = rt.present(bound, 'x')  # present(x[rolls])
    # variational parameters (natural, coefficient form) and E[t]
    lam_p_log, E_p_log = (np.zeros((1, n_K)), np.zeros((1, n_K))) if share is None else (share.lam_p_log, share.E_p_log)
    # sufficient statistics the local step hands to the global step (out of core added up over minibatches)
    acc_x_0 = np.zeros((n_K,)) if share is None else share.acc_x_0
    # the local step's shares: one per thread, fewer for small data
    n_threads = rt.share_count(bound)
    acc_x_0_threads = rt.thread_copies(n_threads, acc_x_0) if share is None else share.acc_x_0_threads
    all_items = np.arange(n_N)  # the local step runs over these
    item_weight = np.ones(n_N)  # each item's weight in the statistics (SVI+ perturbs it)
    seed_category = np.full(n_N, -1)
    if share is not None:  # out of core: a minibatch's state, sharing the fit's
        return rt.State(bound=bound, alpha=alpha, seed_category=seed_category, item_weight=item_weight, x=x, present_x=present_x, acc_x_0_threads=acc_x_0_threads, acc_x_0=acc_x_0, lam_p_log=lam_p_log, E_p_log=E_p_log, n_K=n_K, lgamma_sum_alpha=lgamma_sum_alpha, lgamma_alpha=lgamma_alpha, all_items=all_items)
    # start every global at its prior
    update_p(0.0, lam_p_log, n_K, alpha, acc_x_0, True, E_p_log)
    if init is not None:  # warm start: the globals' natural parameters from an earlier fit
        rt.load_state(init, {'lam_p_log': lam_p_log})
        refresh_globals(lam_p_log, E_p_log)
    if init is None and start not in (None, 'prior'):
        raise rt.CemDataError(f"start: expected 'prior' (the only start of this model: nothing to break), found {start!r}")
    return rt.State(bound=bound, alpha=alpha, seed_category=seed_category, item_weight=item_weight, x=x, present_x=present_x, acc_x_0_threads=acc_x_0_threads, acc_x_0=acc_x_0, lam_p_log=lam_p_log, E_p_log=E_p_log, n_K=n_K, lgamma_sum_alpha=lgamma_sum_alpha, lgamma_alpha=lgamma_alpha, all_items=all_items)


def _learn(s, learn, rho=1.0, items=slice(None)):
    """Empirical Bayes (Minka 2000): each learned hyperparameter a step rho towards its ELBO maximiser given q."""
    if 'alpha' in learn:  # the prior of p
        s.alpha = (1.0 - rho) * s.alpha + rho * rt.learn_symmetric_dirichlet(s.alpha, s.E_p_log)
    # known quantities that depend on hyperparameters
    s.lgamma_sum_alpha = rt.gammaln(s.n_K * s.alpha)
    s.lgamma_alpha = rt.gammaln(s.alpha)


def _result(s, trace, converged, seconds, items=True):
    """The posterior in usual parameters, expectations and the state."""
    posterior = {}
    state = {'lam_p_log': s.lam_p_log}
    p__alpha = rt.dirichlet_params(s.lam_p_log)
    posterior['p.alpha'] = p__alpha[0]
    posterior['E[log p]'] = s.E_p_log[0]
    missing = rt.missing_posteriors(s, MISSING) if items else {}
    return rt.FitResult(posterior=posterior, elbo=np.array(trace), iterations=len(trace), converged=converged, seconds=seconds, dims=dict(s.bound.dims), hypers={'alpha': s.alpha}, state=state, missing=missing)


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
    return rt.run_shares(local_step, s.acc_x_0_threads.shape[0], (seeding, items, s.seed_category, max_local_iter, local_tol, s.item_weight, s.x, s.present_x, s.acc_x_0_threads,), ((s.acc_x_0, s.acc_x_0_threads),))


def _update_p(s, data_scale, expect=True):
    update_p(data_scale, s.lam_p_log, s.n_K, s.alpha, s.acc_x_0, expect, s.E_p_log)


def refresh(s):
    refresh_globals(s.lam_p_log, s.E_p_log)


def elbo_of_globals(s):
    return elbo_global(s.n_K, s.alpha, s.E_p_log, s.lgamma_sum_alpha, s.lgamma_alpha, s.acc_x_0, s.lam_p_log)


GLOBALS = (  # the globals as the stochastic drivers move them
    rt.Global('p', 'dirichlet', lam=('lam_p_log',), E=('E_p_log',),
              update=_update_p, aux_draws=1, after_sample=None),
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
