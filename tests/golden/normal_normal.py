"""normal_normal: the model (kernels, data layout, start) for cemodel.runtime.drivers, by cemodel 0.1.0.

Model file: normal_normal.cem (sha256 ffa3e5f7316ed468)
Regenerate with `cemodel compile normal_normal.cem`; do not edit by hand.

Natural parameters are in coefficient form: q(x) ∝ exp(Σ_s lam_s · t_s(x)).
E_<var>_<stat> holds E_q[t_s]; acc_* hold sums over the data plate.
"""

import numpy as np
from numba import njit

from cemodel import runtime as rt

SOURCE = 'normal_normal.cem'
SOURCE_SHA256 = 'ffa3e5f7316ed4680de0c03616741c28ec3bb09c1a7f8a503a06a49c2ea6d30b'
DEFAULT_START = 'prior'  # nothing to break: every global starts at its prior
LEARNABLE = ()  # hyperparameters empirical Bayes can set (fit(..., learn=...))
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
    'data': ('x',), 'hyper': ('m0', 't0', 'tau'),
    'known': ('present_x', 'log_tau', 'log_t0', 'square_m0'),
    'global': ('lam_mu_value', 'lam_mu_square'), 'global_exp': ('E_mu_value', 'E_mu_square'),
    'item': ('seed_category', 'item_weight'), 'statistic': ('acc_x_2', 'acc_x_3'),
    'thread': ('acc_x_2_threads', 'acc_x_3_threads'),
}
_THIS = rt.ModelView(globals())  # the model, as the drivers see it

SPEC = {
    "model": 'normal_normal',
    "dims": {
        'N': {"default": None, "ragged_over": None},
    },
    "plates": {
        'observations': {"dim": 'N', "parent": None, "ragged": False},
    },
    "observed": {
        'x': {"plates": ['observations'], "support": 'real', "shape": [], "categories": None, "missing": 'yes'},
    },
    "covariates": {},
    "not_data": {'m0': 'hyperparameter', 't0': 'hyperparameter', 'tau': 'hyperparameter', 'mu': 'latent'},
}
MISSING = {  # observed entries that may be missing: their q (rt.missing_posteriors)
    'x': {"family": 'Normal', "data_plate": 'a', "why_not": None,
        "terms": ((-0.5, ('value', 'value'), 'a', (('tau', ''),)), (1.0, ('value',), 'a', (('tau', ''), ('E_mu_value', '0'))))},
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
        acc_x_2_threads,
        tau,
        x,
        present_x,
        acc_x_3_threads,
        log_tau,
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
            # acc_x_2[] += tau · x[observations] · present(x[observations])  (normal_normal.cem:14:5)
            acc_x_2_threads[thread] += item_weight[i_observations] * tau * x[i_observations] * present_x[i_observations]
            # acc_x_3[] += tau · present(x[observations])  (normal_normal.cem:14:5)
            acc_x_3_threads[thread] += item_weight[i_observations] * tau * present_x[i_observations]
            # ELBO: local terms and local entropies (a stochastic step has no use for them)
            if evaluate:
                elbo += 0.5 * log_tau * present_x[i_observations]
                elbo += -0.5 * tau * x[i_observations] * x[i_observations] * present_x[i_observations]
                elbo += -0.9189385332046727 * present_x[i_observations]
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_mu(
        data_scale,
        lam_mu_value,
        lam_mu_square,
        t0,
        m0,
        acc_x_2,
        acc_x_3,
        expect,
        E_mu_value,
        E_mu_square,
):
    """q(mu) = Normal(mean, precision)
        precision = t0 + Σ_{n} tau
        precision·mean = t0·m0 + Σ_{n} tau·x[n]

    (normal_normal.cem:12:1)
    """
    lam_mu_value[0] = 0.0
    lam_mu_square[0] = 0.0
    # from mu ~ Normal (normal_normal.cem:12:1)
    lam_mu_square[0] += -0.5 * t0
    # from mu ~ Normal (normal_normal.cem:12:1)
    lam_mu_value[0] += t0 * m0
    # from x ~ Normal (normal_normal.cem:14:5)
    lam_mu_value[0] += data_scale * acc_x_2
    # from x ~ Normal (normal_normal.cem:14:5)
    lam_mu_square[0] += -0.5 * data_scale * acc_x_3
    if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
        E_mu_value[0], E_mu_square[0] = rt.normal_expected_stats(lam_mu_value[0], lam_mu_square[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def refresh_globals(lam_mu_value, E_mu_value, lam_mu_square, E_mu_square):
    """Expected statistics of the globals from their natural parameters."""
    E_mu_value[0], E_mu_square[0] = rt.normal_expected_stats(lam_mu_value[0], lam_mu_square[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def elbo_global(
        log_t0,
        t0,
        E_mu_square,
        E_mu_value,
        m0,
        square_m0,
        acc_x_2,
        acc_x_3,
        lam_mu_value,
        lam_mu_square,
):
    """ELBO terms of the global factors (see elbo_terms in the README)."""
    elbo = 0.0
    # E[log p(mu | ...)]  (normal_normal.cem:12:1)
    elbo += 0.5 * log_t0
    elbo += -0.5 * t0 * E_mu_square[0]
    elbo += t0 * E_mu_value[0] * m0
    elbo += -0.5 * t0 * square_m0
    elbo += -0.9189385332046727
    # E[log p(x | ...)]  (normal_normal.cem:14:5)
    elbo += acc_x_2 * E_mu_value[0]
    elbo += -0.5 * acc_x_3 * E_mu_square[0]
    # entropy of q(mu)
    elbo += rt.normal_log_normalizer(lam_mu_value[0], lam_mu_square[0]) - lam_mu_value[0] * E_mu_value[0] - lam_mu_square[0] * E_mu_square[0]
    return elbo


def _prepare(data, hypers, dims, seed, init, start, max_local_iter, local_tol, share=None):
    """Bind and check the data, evaluate hyperparameters and knowns, allocate the arrays, start the globals.
    share: out of core, the fit's state, whose globals, hyperparameters and statistics `data`'s minibatch shares.
    """
    hypers = rt.check_hyper_names(hypers, ['m0', 't0', 'tau'])
    bound = rt.bind_data(SPEC, data, dims, missing=True)
    n_N = bound.dims['N']
    # refuse before allocating more than the machine's memory
    rt.check_memory(bound, {(1,): 6, ('threads',): 2, ('N',): 3})
    x = bound.arrays['x']
    # hyperparameters (defaults from the model file; out of core the fit's current values)
    m0 = rt.hyper_value(hypers, 'm0', 0.0, ()) if share is None else share.m0
    t0 = rt.hyper_value(hypers, 't0', 0.01, (), domain='positive') if share is None else share.t0
    tau = rt.hyper_value(hypers, 'tau', 1.0, (), domain='positive') if share is None else share.tau
    # known quantities: functions of hyperparameters and data
    log_t0 = rt.log_data(t0, "hyperparameter 't0'")  # log(t0)
    square_m0 = np.square(m0)  # square(m0)
    log_tau = rt.log_data(tau, "hyperparameter 'tau'")  # log(tau)
    present_x = rt.present(bound, 'x')  # present(x[observations])
    # variational parameters (natural, coefficient form) and E[t]
    lam_mu_value, E_mu_value = (np.zeros((1,)), np.zeros((1,))) if share is None else (share.lam_mu_value, share.E_mu_value)
    lam_mu_square, E_mu_square = (np.zeros((1,)), np.zeros((1,))) if share is None else (share.lam_mu_square, share.E_mu_square)
    # sufficient statistics the local step hands to the global step (out of core added up over minibatches)
    acc_x_2 = np.zeros(()) if share is None else share.acc_x_2
    acc_x_3 = np.zeros(()) if share is None else share.acc_x_3
    # the local step's shares: one per thread, fewer for small data
    n_threads = rt.share_count(bound)
    acc_x_2_threads = rt.thread_copies(n_threads, acc_x_2) if share is None else share.acc_x_2_threads
    acc_x_3_threads = rt.thread_copies(n_threads, acc_x_3) if share is None else share.acc_x_3_threads
    all_items = np.arange(n_N)  # the local step runs over these
    item_weight = np.ones(n_N)  # each item's weight in the statistics (SVI+ perturbs it)
    seed_category = np.full(n_N, -1)
    if share is not None:  # out of core: a minibatch's state, sharing the fit's
        return rt.State(bound=bound, m0=m0, t0=t0, tau=tau, seed_category=seed_category, item_weight=item_weight, acc_x_2_threads=acc_x_2_threads, x=x, present_x=present_x, acc_x_3_threads=acc_x_3_threads, log_tau=log_tau, acc_x_2=acc_x_2, acc_x_3=acc_x_3, lam_mu_value=lam_mu_value, E_mu_value=E_mu_value, lam_mu_square=lam_mu_square, E_mu_square=E_mu_square, log_t0=log_t0, square_m0=square_m0, all_items=all_items)
    # start every global at its prior
    update_mu(0.0, lam_mu_value, lam_mu_square, t0, m0, acc_x_2, acc_x_3, True, E_mu_value, E_mu_square)
    if init is not None:  # warm start: the globals' natural parameters from an earlier fit
        rt.load_state(init, {'lam_mu_value': lam_mu_value, 'lam_mu_square': lam_mu_square})
        refresh_globals(lam_mu_value, E_mu_value, lam_mu_square, E_mu_square)
    if init is None and start not in (None, 'prior'):
        raise rt.CemDataError(f"start: expected 'prior' (the only start of this model: nothing to break), found {start!r}")
    return rt.State(bound=bound, m0=m0, t0=t0, tau=tau, seed_category=seed_category, item_weight=item_weight, acc_x_2_threads=acc_x_2_threads, x=x, present_x=present_x, acc_x_3_threads=acc_x_3_threads, log_tau=log_tau, acc_x_2=acc_x_2, acc_x_3=acc_x_3, lam_mu_value=lam_mu_value, E_mu_value=E_mu_value, lam_mu_square=lam_mu_square, E_mu_square=E_mu_square, log_t0=log_t0, square_m0=square_m0, all_items=all_items)


def _result(s, trace, converged, seconds, items=True):
    """The posterior in usual parameters, expectations and the state."""
    posterior = {}
    state = {'lam_mu_value': s.lam_mu_value, 'lam_mu_square': s.lam_mu_square}
    mu__mean, mu__precision = rt.normal_params(s.lam_mu_value, s.lam_mu_square)
    posterior['mu.mean'] = mu__mean[0]
    posterior['mu.precision'] = mu__precision[0]
    posterior['E[value mu]'] = s.E_mu_value[0]
    posterior['E[square mu]'] = s.E_mu_square[0]
    missing = rt.missing_posteriors(s, MISSING) if items else {}
    return rt.FitResult(posterior=posterior, elbo=np.array(trace), iterations=len(trace), converged=converged, seconds=seconds, dims=dict(s.bound.dims), hypers={'m0': s.m0, 't0': s.t0, 'tau': s.tau}, state=state, missing=missing)


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
    return rt.run_shares(local_step, s.acc_x_2_threads.shape[0], (seeding, items, s.seed_category, max_local_iter, local_tol, s.item_weight, s.acc_x_2_threads, s.tau, s.x, s.present_x, s.acc_x_3_threads, s.log_tau, evaluate,), ((s.acc_x_2, s.acc_x_2_threads), (s.acc_x_3, s.acc_x_3_threads),))


def _update_mu(s, data_scale, expect=True):
    update_mu(data_scale, s.lam_mu_value, s.lam_mu_square, s.t0, s.m0, s.acc_x_2, s.acc_x_3, expect, s.E_mu_value, s.E_mu_square)


def refresh(s):
    refresh_globals(s.lam_mu_value, s.E_mu_value, s.lam_mu_square, s.E_mu_square)


def elbo_of_globals(s):
    return elbo_global(s.log_t0, s.t0, s.E_mu_square, s.E_mu_value, s.m0, s.square_m0, s.acc_x_2, s.acc_x_3, s.lam_mu_value, s.lam_mu_square)


GLOBALS = (  # the globals as the stochastic drivers move them
    rt.Global('mu', 'normal', lam=('lam_mu_value', 'lam_mu_square'), E=('E_mu_value', 'E_mu_square'),
              update=_update_mu, aux_draws=1, after_sample=None),
)


def fit(data, **options):
    """Batch mean-field VB (options: cemodel.runtime.drivers.mf.fit). One iteration:
        statistics ← 0; elbo = run_local_step(s, s.all_items, ...)  # E-step
        _update_mu(s, 1.0)  # q(mu)
        elbo += elbo_of_globals(s)
    """
    return rt.drivers.mf.fit(_THIS, data, **options)


def fit_svi(data, **options):
    """SVI, SVI+ (options: cemodel.runtime.drivers.svi.fit). One step on a minibatch S:
        statistics ← 0; run_local_step(s, S, ...)
        _update_mu(s, N / len(S), expect=False)  # λ̂ of q(mu)
        λ ← (1 − ρ)λ + ρλ̂ (rt.blend); refresh(s)
    """
    return rt.drivers.svi.fit(_THIS, data, **options)


def fit_ssvi_a(data, **options):
    """SSVI-A (Hoffman & Blei 2015, eq. 10): fit_svi with the local step given a draw β ~ q(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, **options)


def fit_ssvi(data, **options):
    """SSVI (Hoffman & Blei 2015, eq. 7): fit_ssvi_a with λ̂ = η + V(β, λ)·N/|S| Σ η̂_n(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, apply_v=True, **options)
