"""logistic_regression: the model (kernels, data layout, start) for cemodel.runtime.drivers, by cemodel 0.1.0.

Model file: logistic_regression.cem (sha256 d99cf240aebfb7f6)
Regenerate with `cemodel compile logistic_regression.cem`; do not edit by hand.

Natural parameters are in coefficient form: q(x) ∝ exp(Σ_s lam_s · t_s(x)).
E_<var>_<stat> holds E_q[t_s]; acc_* hold sums over the data plate.
"""

import numpy as np
from numba import njit

from cemodel import runtime as rt

SOURCE = 'logistic_regression.cem'
SOURCE_SHA256 = 'd99cf240aebfb7f66627df7d76ebf7028d9013fc7dcfd1f01442d9f2dae28a82'
DEFAULT_START = 'prior'  # nothing to break: every global starts at its prior
LEARNABLE = ()  # hyperparameters empirical Bayes can set (fit(..., learn=...))
DATA_PLATE = 'points'  # the plate the local step runs over
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
    'exact': 'yes: given the globals each local depends only on data, so the local update is its exact conditional p(z_n | y_n, β)',
    'gibbs': 'no: the item has no categorical local to sample',
    'cvb0': 'no: the item has no categorical local to sample',
}
STREAMING = 'yes'  # fit_svi from an rt.ItemSource (data on disk)
ITEM_DIMS = ('N',)  # sizes set by the items bound
ROLES = {  # the state's arrays by what they hold (executors, checkpoints)
    'data': ('n_P', 'x', 'y'), 'hyper': ('c',), 'known': ('logdet_eye_P_c', 'eye_P_c', 'dim_w'),
    'global': ('lam_w_value', 'lam_w_outer'), 'global_exp': ('E_w_outer', 'E_w_value'),
    'kept_local': ('lam_y_omega_value', 'E_y_omega_value'),
    'item': ('seed_category', 'item_weight'), 'statistic': ('acc_y_0', 'acc_y_1', 'acc_y_3'),
    'thread': ('acc_y_0_threads', 'acc_y_1_threads', 'acc_y_3_threads'),
}
_THIS = rt.ModelView(globals())  # the model, as the drivers see it

SPEC = {
    "model": 'logistic_regression',
    "dims": {
        'P': {"default": None, "ragged_over": None},
        'N': {"default": None, "ragged_over": None},
    },
    "plates": {
        'points': {"dim": 'N', "parent": None, "ragged": False},
    },
    "observed": {
        'y': {"plates": ['points'], "support": 'binary', "shape": [], "categories": None, "missing": 'no: the factor of y (logistic_regression.cem:20:5) is rewritten with the introduced y_omega, which a missing entry would leave undetermined'},
    },
    "covariates": {
        'x': {"plates": ['points'], "kind": 'vector', "shape": ['P']},
    },
    "not_data": {'c': 'hyperparameter', 'w': 'latent'},
}


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_y_omega(i_points, with_children, lam_y_omega_value, n_P, x, E_w_outer, E_y_omega_value):
    """q(y_omega[n]) = PolyaGamma(1, c)
        c² = Σ_{j,l} x[n]_j·x[n]_l·E[w wᵀ]_jl

    (logistic_regression.cem:20:5)
    """
    lam_y_omega_value[i_points] = 0.0
    if with_children:
        # from y ~ Bernoulli·PG (logistic_regression.cem:20:5)
        for t_i2 in range(n_P):
            for t_i3 in range(n_P):
                lam_y_omega_value[i_points] += -0.5 * x[i_points, t_i2] * x[i_points, t_i3] * E_w_outer[0, t_i2, t_i3]
    E_y_omega_value[i_points] = rt.polyagamma_expected_stats(lam_y_omega_value[i_points], 1.0)


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
        lam_y_omega_value,
        n_P,
        x,
        E_w_outer,
        E_y_omega_value,
        item_weight,
        y,
        evaluate,
        acc_y_0_threads,
        acc_y_1_threads,
        acc_y_3_threads,
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
        acc_y_0_t = acc_y_0_threads[thread]
        acc_y_1_t = acc_y_1_threads[thread]
        acc_y_3_t = acc_y_3_threads[thread]
        elbo = 0.0
        stop_position = (thread + 1) * items.shape[0] // n_threads
        for position in range(thread * items.shape[0] // n_threads, stop_position):
            i_points = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_points + 1:
                rt.prefetch_row(item_weight, items[position + 1])
                rt.prefetch_row(lam_y_omega_value, items[position + 1])
                rt.prefetch_row(E_y_omega_value, items[position + 1])
                rt.prefetch_row(y, items[position + 1])
                rt.prefetch_row(x, items[position + 1])
            update_y_omega(i_points, True, lam_y_omega_value, n_P, x, E_w_outer, E_y_omega_value)
            # acc_y_0[i0] += y[points] · x[points]  (logistic_regression.cem:20:5)
            for t_i0 in range(n_P):
                acc_y_0_t[t_i0] += item_weight[i_points] * y[i_points] * x[i_points, t_i0]
            # acc_y_1[i1] += x[points]  (logistic_regression.cem:20:5)
            for t_i1 in range(n_P):
                acc_y_1_t[t_i1] += item_weight[i_points] * x[i_points, t_i1]
            # acc_y_3[i2, i3] += E[y_omega[points]] · x[points] · x[points]  (logistic_regression.cem:20:5)
            for t_i2 in range(n_P):
                for t_i3 in range(n_P):
                    acc_y_3_t[t_i2, t_i3] += item_weight[i_points] * E_y_omega_value[i_points] * x[i_points, t_i2] * x[i_points, t_i3]
            # ELBO: local terms and local entropies (a stochastic step has no use for them)
            if evaluate:
                elbo += -0.6931471805599453
                elbo += (rt.polyagamma_log_normalizer(lam_y_omega_value[i_points], 1.0) - lam_y_omega_value[i_points] * E_y_omega_value[i_points])
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_w(
        data_scale,
        lam_w_value,
        lam_w_outer,
        n_P,
        eye_P_c,
        acc_y_0,
        acc_y_1,
        acc_y_3,
        expect,
        E_w_value,
        E_w_outer,
):
    """q(w) = MultivariateNormal(mean, precision)
        precision_vi = (eye(P) * c)_vi + Σ_{n} E[y_omega[n]]·x[n]_v·x[n]_i
        precision·mean_v = Σ_{n} y[n]·x[n]_v - 0.5·Σ_{n} x[n]_v

    (logistic_regression.cem:17:1)
    """
    lam_w_value[0] = 0.0
    lam_w_outer[0] = 0.0
    # from w ~ MultivariateNormal (logistic_regression.cem:17:1)
    for t_i in range(n_P):
        for t_j in range(n_P):
            lam_w_outer[0, t_i, t_j] += -0.5 * eye_P_c[t_i, t_j]
    # from y ~ Bernoulli·PG (logistic_regression.cem:20:5)
    for t_i0 in range(n_P):
        lam_w_value[0, t_i0] += data_scale * acc_y_0[t_i0]
    # from y ~ Bernoulli·PG (logistic_regression.cem:20:5)
    for t_i1 in range(n_P):
        lam_w_value[0, t_i1] += -0.5 * data_scale * acc_y_1[t_i1]
    # from y ~ Bernoulli·PG (logistic_regression.cem:20:5)
    for t_i2 in range(n_P):
        for t_i3 in range(n_P):
            lam_w_outer[0, t_i2, t_i3] += -0.5 * data_scale * acc_y_3[t_i2, t_i3]
    if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
        rt.mvn_expected_stats(lam_w_value[0], lam_w_outer[0], E_w_value[0], E_w_outer[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def refresh_globals(lam_w_value, E_w_value, lam_w_outer, E_w_outer):
    """Expected statistics of the globals from their natural parameters."""
    rt.mvn_expected_stats(lam_w_value[0], lam_w_outer[0], E_w_value[0], E_w_outer[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def elbo_global(
        logdet_eye_P_c,
        n_P,
        eye_P_c,
        E_w_outer,
        dim_w,
        acc_y_0,
        E_w_value,
        acc_y_1,
        acc_y_3,
        lam_w_value,
        lam_w_outer,
):
    """ELBO terms of the global factors (see elbo_terms in the README)."""
    elbo = 0.0
    # E[log p(w | ...)]  (logistic_regression.cem:17:1)
    elbo += 0.5 * logdet_eye_P_c
    for t_i in range(n_P):
        for t_j in range(n_P):
            elbo += -0.5 * eye_P_c[t_i, t_j] * E_w_outer[0, t_i, t_j]
    elbo += -0.9189385332046727 * dim_w
    # E[log p(y_omega | ...)]  (logistic_regression.cem:20:5)
    # E[log p(y | ...)]  (logistic_regression.cem:20:5)
    for t_i0 in range(n_P):
        elbo += acc_y_0[t_i0] * E_w_value[0, t_i0]
    for t_i1 in range(n_P):
        elbo += -0.5 * acc_y_1[t_i1] * E_w_value[0, t_i1]
    for t_i2 in range(n_P):
        for t_i3 in range(n_P):
            elbo += -0.5 * acc_y_3[t_i2, t_i3] * E_w_outer[0, t_i2, t_i3]
    # entropy of q(w)
    elbo += rt.mvn_log_normalizer(lam_w_value[0], lam_w_outer[0]) - rt.frobenius(lam_w_value[0], E_w_value[0]) - rt.frobenius(lam_w_outer[0], E_w_outer[0])
    return elbo


def _prepare(data, hypers, dims, seed, init, start, max_local_iter, local_tol, share=None):
    """Bind and check the data, evaluate hyperparameters and knowns, allocate the arrays, start the globals.
    share: out of core, the fit's state, whose globals, hyperparameters and statistics `data`'s minibatch shares.
    """
    hypers = rt.check_hyper_names(hypers, ['c'])
    bound = rt.bind_data(SPEC, data, dims, missing=True)
    n_P, n_N = bound.dims['P'], bound.dims['N']
    # refuse before allocating more than the machine's memory
    rt.check_memory(bound, {(1, 'P'): 2, (1, 'P', 'P'): 2, ('N',): 5, ('P',): 2, ('threads', 'P'): 2, ('P', 'P'): 1, ('threads', 'P', 'P'): 1})
    y, x = bound.arrays['y'], bound.arrays['x']
    # hyperparameters (defaults from the model file; out of core the fit's current values)
    c = rt.hyper_value(hypers, 'c', 1.0, ()) if share is None else share.c
    # known quantities: functions of hyperparameters and data
    logdet_eye_P_c = rt.logdet((np.eye(n_P) * c))  # logdet((eye(P) * c))
    eye_P_c = (np.eye(n_P) * c)  # value((eye(P) * c))
    dim_w = n_P  # dim(w)
    # variational parameters (natural, coefficient form) and E[t]
    lam_w_value, E_w_value = (np.zeros((1, n_P)), np.zeros((1, n_P))) if share is None else (share.lam_w_value, share.E_w_value)
    lam_w_outer, E_w_outer = (np.zeros((1, n_P, n_P)), np.zeros((1, n_P, n_P))) if share is None else (share.lam_w_outer, share.E_w_outer)
    lam_y_omega_value, E_y_omega_value = np.zeros((n_N,)), np.zeros((n_N,))
    # sufficient statistics the local step hands to the global step (out of core added up over minibatches)
    acc_y_0 = np.zeros((n_P,)) if share is None else share.acc_y_0
    acc_y_1 = np.zeros((n_P,)) if share is None else share.acc_y_1
    acc_y_3 = np.zeros((n_P, n_P)) if share is None else share.acc_y_3
    # the local step's shares: one per thread, fewer for small data
    n_threads = rt.share_count(bound)
    acc_y_0_threads = rt.thread_copies(n_threads, acc_y_0) if share is None else share.acc_y_0_threads
    acc_y_1_threads = rt.thread_copies(n_threads, acc_y_1) if share is None else share.acc_y_1_threads
    acc_y_3_threads = rt.thread_copies(n_threads, acc_y_3) if share is None else share.acc_y_3_threads
    all_items = np.arange(n_N)  # the local step runs over these
    item_weight = np.ones(n_N)  # each item's weight in the statistics (SVI+ perturbs it)
    seed_category = np.full(n_N, -1)
    if share is not None:  # out of core: a minibatch's state, sharing the fit's
        return rt.State(bound=bound, c=c, seed_category=seed_category, lam_y_omega_value=lam_y_omega_value, n_P=n_P, x=x, E_w_outer=E_w_outer, E_y_omega_value=E_y_omega_value, item_weight=item_weight, y=y, acc_y_0_threads=acc_y_0_threads, acc_y_1_threads=acc_y_1_threads, acc_y_3_threads=acc_y_3_threads, acc_y_0=acc_y_0, acc_y_1=acc_y_1, acc_y_3=acc_y_3, lam_w_value=lam_w_value, E_w_value=E_w_value, lam_w_outer=lam_w_outer, logdet_eye_P_c=logdet_eye_P_c, eye_P_c=eye_P_c, dim_w=dim_w, all_items=all_items)
    # start every global at its prior
    update_w(0.0, lam_w_value, lam_w_outer, n_P, eye_P_c, acc_y_0, acc_y_1, acc_y_3, True, E_w_value, E_w_outer)
    if init is not None:  # warm start: the globals' natural parameters from an earlier fit
        rt.load_state(init, {'lam_w_value': lam_w_value, 'lam_w_outer': lam_w_outer})
        refresh_globals(lam_w_value, E_w_value, lam_w_outer, E_w_outer)
    if init is None and start not in (None, 'prior'):
        raise rt.CemDataError(f"start: expected 'prior' (the only start of this model: nothing to break), found {start!r}")
    return rt.State(bound=bound, c=c, seed_category=seed_category, lam_y_omega_value=lam_y_omega_value, n_P=n_P, x=x, E_w_outer=E_w_outer, E_y_omega_value=E_y_omega_value, item_weight=item_weight, y=y, acc_y_0_threads=acc_y_0_threads, acc_y_1_threads=acc_y_1_threads, acc_y_3_threads=acc_y_3_threads, acc_y_0=acc_y_0, acc_y_1=acc_y_1, acc_y_3=acc_y_3, lam_w_value=lam_w_value, E_w_value=E_w_value, lam_w_outer=lam_w_outer, logdet_eye_P_c=logdet_eye_P_c, eye_P_c=eye_P_c, dim_w=dim_w, all_items=all_items)


def _result(s, trace, converged, seconds, items=True):
    """The posterior in usual parameters, expectations and the state; items=False: the globals only."""
    posterior = {}
    state = {'lam_w_value': s.lam_w_value, 'lam_w_outer': s.lam_w_outer}
    w__mean, w__precision = rt.mvn_params(s.lam_w_value, s.lam_w_outer)
    posterior['w.mean'] = w__mean[0]
    posterior['w.precision'] = w__precision[0]
    posterior['E[value w]'] = s.E_w_value[0]
    posterior['E[outer w]'] = s.E_w_outer[0]
    if items:  # out of core the state holds one minibatch's items
        y_omega__c = rt.polyagamma_params(s.lam_y_omega_value)
        posterior['y_omega.c'] = y_omega__c
        posterior['E[value y_omega]'] = s.E_y_omega_value
        state['lam_y_omega_value'] = s.lam_y_omega_value
    return rt.FitResult(posterior=posterior, elbo=np.array(trace), iterations=len(trace), converged=converged, seconds=seconds, dims=dict(s.bound.dims), hypers={'c': s.c}, state=state)


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
    return rt.run_shares(local_step, s.acc_y_0_threads.shape[0], (seeding, items, s.seed_category, max_local_iter, local_tol, s.lam_y_omega_value, s.n_P, s.x, s.E_w_outer, s.E_y_omega_value, s.item_weight, s.y, evaluate, s.acc_y_0_threads, s.acc_y_1_threads, s.acc_y_3_threads,), ((s.acc_y_0, s.acc_y_0_threads), (s.acc_y_1, s.acc_y_1_threads), (s.acc_y_3, s.acc_y_3_threads),))


def _update_w(s, data_scale, expect=True):
    update_w(data_scale, s.lam_w_value, s.lam_w_outer, s.n_P, s.eye_P_c, s.acc_y_0, s.acc_y_1, s.acc_y_3, expect, s.E_w_value, s.E_w_outer)


def refresh(s):
    refresh_globals(s.lam_w_value, s.E_w_value, s.lam_w_outer, s.E_w_outer)


def elbo_of_globals(s):
    return elbo_global(s.logdet_eye_P_c, s.n_P, s.eye_P_c, s.E_w_outer, s.dim_w, s.acc_y_0, s.E_w_value, s.acc_y_1, s.acc_y_3, s.lam_w_value, s.lam_w_outer)


GLOBALS = (  # the globals as the stochastic drivers move them
    rt.Global('w', 'mvn', lam=('lam_w_value', 'lam_w_outer'), E=('E_w_value', 'E_w_outer'),
              update=_update_w, aux_draws=1, after_sample=None),
)


def fit(data, **options):
    """Batch mean-field VB (options: cemodel.runtime.drivers.mf.fit). One iteration:
        statistics ← 0; elbo = run_local_step(s, s.all_items, ...)  # E-step
        _update_w(s, 1.0)  # q(w)
        elbo += elbo_of_globals(s)
    """
    return rt.drivers.mf.fit(_THIS, data, **options)


def fit_svi(data, **options):
    """SVI, SVI+ (options: cemodel.runtime.drivers.svi.fit). One step on a minibatch S:
        statistics ← 0; run_local_step(s, S, ...)
        _update_w(s, N / len(S), expect=False)  # λ̂ of q(w)
        λ ← (1 − ρ)λ + ρλ̂ (rt.blend); refresh(s)
    """
    return rt.drivers.svi.fit(_THIS, data, **options)


def fit_ssvi_a(data, **options):
    """SSVI-A (Hoffman & Blei 2015, eq. 10): fit_svi with the local step given a draw β ~ q(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, **options)


def fit_ssvi(data, **options):
    """SSVI (Hoffman & Blei 2015, eq. 7): fit_ssvi_a with λ̂ = η + V(β, λ)·N/|S| Σ η̂_n(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, apply_v=True, **options)
