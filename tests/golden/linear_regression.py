"""linear_regression: the model (kernels, data layout, start) for cemodel.runtime.drivers, by cemodel 0.1.0.

Model file: linear_regression.cem (sha256 038ca782a38c2aca)
Regenerate with `cemodel compile linear_regression.cem`; do not edit by hand.

Natural parameters are in coefficient form: q(x) ∝ exp(Σ_s lam_s · t_s(x)).
E_<var>_<stat> holds E_q[t_s]; acc_* hold sums over the data plate.
"""

import numpy as np
from numba import njit

from cemodel import runtime as rt

SOURCE = 'linear_regression.cem'
SOURCE_SHA256 = '038ca782a38c2aca935ee4951db8b9d19b47cf7668f7b69192672b47066c1a37'
DEFAULT_START = 'prior'  # nothing to break: every global starts at its prior
LEARNABLE = ('a0', 'b0')  # hyperparameters empirical Bayes can set (fit(..., learn=...))
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
    'exact': 'yes: the items have no latent local, so there is nothing to approximate (the same step as mf)',
    'gibbs': 'no: the item has no categorical local to sample',
    'cvb0': 'no: the item has no categorical local to sample',
}
STREAMING = 'yes'  # fit_svi from an rt.ItemSource (data on disk)
ITEM_DIMS = ('N',)  # sizes set by the items bound
ROLES = {  # the state's arrays by what they hold (executors, checkpoints)
    'data': ('y', 'n_P', 'x'), 'hyper': ('c', 'a0', 'b0'),
    'known': ('present_y', 'logdet_eye_P_c', 'eye_P_c', 'dim_w', 'log_b0', 'lgamma_a0'),
    'global': ('lam_tau_log', 'lam_tau_value', 'lam_w_value', 'lam_w_outer'),
    'global_exp': ('E_tau_log', 'E_tau_value', 'E_w_value', 'E_w_outer'),
    'item': ('seed_category', 'item_weight'),
    'statistic': ('acc_y_0', 'acc_y_1', 'acc_y_2', 'acc_y_3'),
    'thread': ('acc_y_0_threads', 'acc_y_1_threads', 'acc_y_2_threads', 'acc_y_3_threads'),
}
_THIS = rt.ModelView(globals())  # the model, as the drivers see it

SPEC = {
    "model": 'linear_regression',
    "dims": {
        'P': {"default": None, "ragged_over": None},
        'N': {"default": None, "ragged_over": None},
    },
    "plates": {
        'points': {"dim": 'N', "parent": None, "ragged": False},
    },
    "observed": {
        'y': {"plates": ['points'], "support": 'real', "shape": [], "categories": None, "missing": 'yes'},
    },
    "covariates": {
        'x': {"plates": ['points'], "kind": 'vector', "shape": ['P']},
    },
    "not_data": {'c': 'hyperparameter', 'a0': 'hyperparameter', 'b0': 'hyperparameter', 'w': 'latent', 'tau': 'latent'},
}
MISSING = {  # observed entries that may be missing: their q (rt.missing_posteriors)
    'y': {"family": 'Normal', "data_plate": 'a', "why_not": None,
        "terms": ((-0.5, ('value', 'value'), 'a', (('E_tau_value', '0'),)), (1.0, ('value',), 'a', (('E_tau_value', '0'), ('x', 'ab'), ('E_w_value', '0b'))))},
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
        acc_y_0_threads,
        present_y,
        acc_y_1_threads,
        y,
        n_P,
        x,
        evaluate,
        acc_y_2_threads,
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
        acc_y_2_t = acc_y_2_threads[thread]
        acc_y_3_t = acc_y_3_threads[thread]
        elbo = 0.0
        stop_position = (thread + 1) * items.shape[0] // n_threads
        for position in range(thread * items.shape[0] // n_threads, stop_position):
            i_points = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_points + 1:
                rt.prefetch_row(item_weight, items[position + 1])
                rt.prefetch_row(y, items[position + 1])
                rt.prefetch_row(x, items[position + 1])
            # acc_y_0[] += present(y[points])  (linear_regression.cem:19:5)
            acc_y_0_threads[thread] += item_weight[i_points] * present_y[i_points]
            # acc_y_1[] += y[points] · y[points] · present(y[points])  (linear_regression.cem:19:5)
            acc_y_1_threads[thread] += item_weight[i_points] * y[i_points] * y[i_points] * present_y[i_points]
            # acc_y_2[i0] += y[points] · x[points] · present(y[points])  (linear_regression.cem:19:5)
            for t_i0 in range(n_P):
                acc_y_2_t[t_i0] += item_weight[i_points] * y[i_points] * x[i_points, t_i0] * present_y[i_points]
            # acc_y_3[i1, i2] += x[points] · x[points] · present(y[points])  (linear_regression.cem:19:5)
            for t_i1 in range(n_P):
                for t_i2 in range(n_P):
                    acc_y_3_t[t_i1, t_i2] += item_weight[i_points] * x[i_points, t_i1] * x[i_points, t_i2] * present_y[i_points]
            # ELBO: local terms and local entropies (a stochastic step has no use for them)
            if evaluate:
                elbo += -0.9189385332046727 * present_y[i_points]
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_tau(
        data_scale,
        lam_tau_log,
        lam_tau_value,
        a0,
        b0,
        acc_y_0,
        acc_y_1,
        n_P,
        acc_y_2,
        E_w_value,
        acc_y_3,
        E_w_outer,
        expect,
        E_tau_log,
        E_tau_value,
):
    """q(tau) = Gamma(shape, rate)
        shape = a0 + 0.5·Σ_{n} 1
        rate = b0 + 0.5·Σ_{n} y[n]·y[n] - Σ_{n,v} y[n]·x[n]_v·E[w]_v + 0.5·Σ_{n,i,j} x[n]_i·x[n]_j·E[w wᵀ]_ij

    (linear_regression.cem:16:1)
    """
    lam_tau_log[0] = 0.0
    lam_tau_value[0] = 0.0
    # from tau ~ Gamma (linear_regression.cem:16:1)
    lam_tau_log[0] += a0
    # from tau ~ Gamma (linear_regression.cem:16:1)
    lam_tau_log[0] += -1.0
    # from tau ~ Gamma (linear_regression.cem:16:1)
    lam_tau_value[0] += -b0
    # from y ~ Normal (linear_regression.cem:19:5)
    lam_tau_log[0] += 0.5 * data_scale * acc_y_0
    # from y ~ Normal (linear_regression.cem:19:5)
    lam_tau_value[0] += -0.5 * data_scale * acc_y_1
    # from y ~ Normal (linear_regression.cem:19:5)
    for t_i0 in range(n_P):
        lam_tau_value[0] += data_scale * acc_y_2[t_i0] * E_w_value[0, t_i0]
    # from y ~ Normal (linear_regression.cem:19:5)
    for t_i1 in range(n_P):
        for t_i2 in range(n_P):
            lam_tau_value[0] += -0.5 * data_scale * acc_y_3[t_i1, t_i2] * E_w_outer[0, t_i1, t_i2]
    if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
        E_tau_log[0], E_tau_value[0] = rt.gamma_expected_stats(lam_tau_log[0], lam_tau_value[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_w(
        data_scale,
        lam_w_value,
        lam_w_outer,
        n_P,
        eye_P_c,
        acc_y_2,
        E_tau_value,
        acc_y_3,
        expect,
        E_w_value,
        E_w_outer,
):
    """q(w) = MultivariateNormal(mean, precision)
        precision_vi = (eye(P) * c)_vi + Σ_{n} E[tau]·x[n]_v·x[n]_i
        precision·mean_v = Σ_{n} E[tau]·y[n]·x[n]_v

    (linear_regression.cem:15:1)
    """
    lam_w_value[0] = 0.0
    lam_w_outer[0] = 0.0
    # from w ~ MultivariateNormal (linear_regression.cem:15:1)
    for t_i in range(n_P):
        for t_j in range(n_P):
            lam_w_outer[0, t_i, t_j] += -0.5 * eye_P_c[t_i, t_j]
    # from y ~ Normal (linear_regression.cem:19:5)
    for t_i0 in range(n_P):
        lam_w_value[0, t_i0] += data_scale * acc_y_2[t_i0] * E_tau_value[0]
    # from y ~ Normal (linear_regression.cem:19:5)
    for t_i1 in range(n_P):
        for t_i2 in range(n_P):
            lam_w_outer[0, t_i1, t_i2] += -0.5 * data_scale * acc_y_3[t_i1, t_i2] * E_tau_value[0]
    if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
        rt.mvn_expected_stats(lam_w_value[0], lam_w_outer[0], E_w_value[0], E_w_outer[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def refresh_globals(
        lam_tau_log,
        E_tau_log,
        lam_tau_value,
        E_tau_value,
        lam_w_value,
        E_w_value,
        lam_w_outer,
        E_w_outer,
):
    """Expected statistics of the globals from their natural parameters."""
    E_tau_log[0], E_tau_value[0] = rt.gamma_expected_stats(lam_tau_log[0], lam_tau_value[0])
    rt.mvn_expected_stats(lam_w_value[0], lam_w_outer[0], E_w_value[0], E_w_outer[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def elbo_global(
        logdet_eye_P_c,
        n_P,
        eye_P_c,
        E_w_outer,
        dim_w,
        a0,
        log_b0,
        lgamma_a0,
        E_tau_log,
        b0,
        E_tau_value,
        acc_y_0,
        acc_y_1,
        acc_y_2,
        E_w_value,
        acc_y_3,
        lam_tau_log,
        lam_tau_value,
        lam_w_value,
        lam_w_outer,
):
    """ELBO terms of the global factors (see elbo_terms in the README)."""
    elbo = 0.0
    # E[log p(w | ...)]  (linear_regression.cem:15:1)
    elbo += 0.5 * logdet_eye_P_c
    for t_i in range(n_P):
        for t_j in range(n_P):
            elbo += -0.5 * eye_P_c[t_i, t_j] * E_w_outer[0, t_i, t_j]
    elbo += -0.9189385332046727 * dim_w
    # E[log p(tau | ...)]  (linear_regression.cem:16:1)
    elbo += a0 * log_b0
    elbo += -lgamma_a0
    elbo += a0 * E_tau_log[0]
    elbo += -E_tau_log[0]
    elbo += -b0 * E_tau_value[0]
    # E[log p(y | ...)]  (linear_regression.cem:19:5)
    elbo += 0.5 * acc_y_0 * E_tau_log[0]
    elbo += -0.5 * acc_y_1 * E_tau_value[0]
    for t_i0 in range(n_P):
        elbo += acc_y_2[t_i0] * E_tau_value[0] * E_w_value[0, t_i0]
    for t_i1 in range(n_P):
        for t_i2 in range(n_P):
            elbo += -0.5 * acc_y_3[t_i1, t_i2] * E_tau_value[0] * E_w_outer[0, t_i1, t_i2]
    # entropy of q(tau)
    elbo += rt.gamma_log_normalizer(lam_tau_log[0], lam_tau_value[0]) - lam_tau_log[0] * E_tau_log[0] - lam_tau_value[0] * E_tau_value[0]
    # entropy of q(w)
    elbo += rt.mvn_log_normalizer(lam_w_value[0], lam_w_outer[0]) - rt.frobenius(lam_w_value[0], E_w_value[0]) - rt.frobenius(lam_w_outer[0], E_w_outer[0])
    return elbo


def _prepare(data, hypers, dims, seed, init, start, max_local_iter, local_tol, share=None):
    """Bind and check the data, evaluate hyperparameters and knowns, allocate the arrays, start the globals.
    share: out of core, the fit's state, whose globals, hyperparameters and statistics `data`'s minibatch shares.
    """
    hypers = rt.check_hyper_names(hypers, ['c', 'a0', 'b0'])
    bound = rt.bind_data(SPEC, data, dims, missing=True)
    n_P, n_N = bound.dims['P'], bound.dims['N']
    # refuse before allocating more than the machine's memory
    rt.check_memory(bound, {(1,): 6, (1, 'P'): 2, (1, 'P', 'P'): 2, ('threads',): 2, ('P',): 1, ('threads', 'P'): 1, ('P', 'P'): 1, ('threads', 'P', 'P'): 1, ('N',): 3})
    y, x = bound.arrays['y'], bound.arrays['x']
    # hyperparameters (defaults from the model file; out of core the fit's current values)
    c = rt.hyper_value(hypers, 'c', 0.01, ()) if share is None else share.c
    a0 = rt.hyper_value(hypers, 'a0', 1.0, (), domain='shape') if share is None else share.a0
    b0 = rt.hyper_value(hypers, 'b0', 1.0, (), domain='positive') if share is None else share.b0
    # known quantities: functions of hyperparameters and data
    logdet_eye_P_c = rt.logdet((np.eye(n_P) * c))  # logdet((eye(P) * c))
    eye_P_c = (np.eye(n_P) * c)  # value((eye(P) * c))
    dim_w = n_P  # dim(w)
    log_b0 = rt.log_data(b0, "hyperparameter 'b0'")  # log(b0)
    lgamma_a0 = rt.gammaln(a0)  # lgamma(a0)
    present_y = rt.present(bound, 'y')  # present(y[points])
    # variational parameters (natural, coefficient form) and E[t]
    lam_tau_log, E_tau_log = (np.zeros((1,)), np.zeros((1,))) if share is None else (share.lam_tau_log, share.E_tau_log)
    lam_tau_value, E_tau_value = (np.zeros((1,)), np.zeros((1,))) if share is None else (share.lam_tau_value, share.E_tau_value)
    lam_w_value, E_w_value = (np.zeros((1, n_P)), np.zeros((1, n_P))) if share is None else (share.lam_w_value, share.E_w_value)
    lam_w_outer, E_w_outer = (np.zeros((1, n_P, n_P)), np.zeros((1, n_P, n_P))) if share is None else (share.lam_w_outer, share.E_w_outer)
    # sufficient statistics the local step hands to the global step (out of core added up over minibatches)
    acc_y_0 = np.zeros(()) if share is None else share.acc_y_0
    acc_y_1 = np.zeros(()) if share is None else share.acc_y_1
    acc_y_2 = np.zeros((n_P,)) if share is None else share.acc_y_2
    acc_y_3 = np.zeros((n_P, n_P)) if share is None else share.acc_y_3
    # the local step's shares: one per thread, fewer for small data
    n_threads = rt.share_count(bound)
    acc_y_0_threads = rt.thread_copies(n_threads, acc_y_0) if share is None else share.acc_y_0_threads
    acc_y_1_threads = rt.thread_copies(n_threads, acc_y_1) if share is None else share.acc_y_1_threads
    acc_y_2_threads = rt.thread_copies(n_threads, acc_y_2) if share is None else share.acc_y_2_threads
    acc_y_3_threads = rt.thread_copies(n_threads, acc_y_3) if share is None else share.acc_y_3_threads
    all_items = np.arange(n_N)  # the local step runs over these
    item_weight = np.ones(n_N)  # each item's weight in the statistics (SVI+ perturbs it)
    seed_category = np.full(n_N, -1)
    if share is not None:  # out of core: a minibatch's state, sharing the fit's
        return rt.State(bound=bound, c=c, a0=a0, b0=b0, seed_category=seed_category, item_weight=item_weight, acc_y_0_threads=acc_y_0_threads, present_y=present_y, acc_y_1_threads=acc_y_1_threads, y=y, n_P=n_P, x=x, acc_y_2_threads=acc_y_2_threads, acc_y_3_threads=acc_y_3_threads, acc_y_0=acc_y_0, acc_y_1=acc_y_1, acc_y_2=acc_y_2, acc_y_3=acc_y_3, lam_tau_log=lam_tau_log, E_tau_log=E_tau_log, lam_tau_value=lam_tau_value, E_tau_value=E_tau_value, lam_w_value=lam_w_value, E_w_value=E_w_value, lam_w_outer=lam_w_outer, E_w_outer=E_w_outer, logdet_eye_P_c=logdet_eye_P_c, eye_P_c=eye_P_c, dim_w=dim_w, log_b0=log_b0, lgamma_a0=lgamma_a0, all_items=all_items)
    # start every global at its prior
    update_tau(0.0, lam_tau_log, lam_tau_value, a0, b0, acc_y_0, acc_y_1, n_P, acc_y_2, E_w_value, acc_y_3, E_w_outer, True, E_tau_log, E_tau_value)
    update_w(0.0, lam_w_value, lam_w_outer, n_P, eye_P_c, acc_y_2, E_tau_value, acc_y_3, True, E_w_value, E_w_outer)
    if init is not None:  # warm start: the globals' natural parameters from an earlier fit
        rt.load_state(init, {'lam_tau_log': lam_tau_log, 'lam_tau_value': lam_tau_value, 'lam_w_value': lam_w_value, 'lam_w_outer': lam_w_outer})
        refresh_globals(lam_tau_log, E_tau_log, lam_tau_value, E_tau_value, lam_w_value, E_w_value, lam_w_outer, E_w_outer)
    if init is None and start not in (None, 'prior'):
        raise rt.CemDataError(f"start: expected 'prior' (the only start of this model: nothing to break), found {start!r}")
    return rt.State(bound=bound, c=c, a0=a0, b0=b0, seed_category=seed_category, item_weight=item_weight, acc_y_0_threads=acc_y_0_threads, present_y=present_y, acc_y_1_threads=acc_y_1_threads, y=y, n_P=n_P, x=x, acc_y_2_threads=acc_y_2_threads, acc_y_3_threads=acc_y_3_threads, acc_y_0=acc_y_0, acc_y_1=acc_y_1, acc_y_2=acc_y_2, acc_y_3=acc_y_3, lam_tau_log=lam_tau_log, E_tau_log=E_tau_log, lam_tau_value=lam_tau_value, E_tau_value=E_tau_value, lam_w_value=lam_w_value, E_w_value=E_w_value, lam_w_outer=lam_w_outer, E_w_outer=E_w_outer, logdet_eye_P_c=logdet_eye_P_c, eye_P_c=eye_P_c, dim_w=dim_w, log_b0=log_b0, lgamma_a0=lgamma_a0, all_items=all_items)


def _learn(s, learn, rho=1.0, items=slice(None)):
    """Empirical Bayes (Minka 2000): each learned hyperparameter a step rho towards its ELBO maximiser given q."""
    if 'a0' in learn:  # the prior of tau
        s.a0 = (1.0 - rho) * s.a0 + rho * rt.learn_gamma_shape(s.b0, s.E_tau_log)
    if 'b0' in learn:  # the prior of tau
        s.b0 = (1.0 - rho) * s.b0 + rho * rt.learn_gamma_rate(s.a0, s.E_tau_value)
    # known quantities that depend on hyperparameters
    s.log_b0 = rt.log_data(s.b0, "hyperparameter 'b0'")
    s.lgamma_a0 = rt.gammaln(s.a0)


def _result(s, trace, converged, seconds, items=True):
    """The posterior in usual parameters, expectations and the state."""
    posterior = {}
    state = {'lam_tau_log': s.lam_tau_log, 'lam_tau_value': s.lam_tau_value, 'lam_w_value': s.lam_w_value, 'lam_w_outer': s.lam_w_outer}
    tau__shape, tau__rate = rt.gamma_params(s.lam_tau_log, s.lam_tau_value)
    posterior['tau.shape'] = tau__shape[0]
    posterior['tau.rate'] = tau__rate[0]
    posterior['E[log tau]'] = s.E_tau_log[0]
    posterior['E[value tau]'] = s.E_tau_value[0]
    w__mean, w__precision = rt.mvn_params(s.lam_w_value, s.lam_w_outer)
    posterior['w.mean'] = w__mean[0]
    posterior['w.precision'] = w__precision[0]
    posterior['E[value w]'] = s.E_w_value[0]
    posterior['E[outer w]'] = s.E_w_outer[0]
    missing = rt.missing_posteriors(s, MISSING) if items else {}
    return rt.FitResult(posterior=posterior, elbo=np.array(trace), iterations=len(trace), converged=converged, seconds=seconds, dims=dict(s.bound.dims), hypers={'c': s.c, 'a0': s.a0, 'b0': s.b0}, state=state, missing=missing)


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
    return rt.run_shares(local_step, s.acc_y_0_threads.shape[0], (seeding, items, s.seed_category, max_local_iter, local_tol, s.item_weight, s.acc_y_0_threads, s.present_y, s.acc_y_1_threads, s.y, s.n_P, s.x, evaluate, s.acc_y_2_threads, s.acc_y_3_threads,), ((s.acc_y_0, s.acc_y_0_threads), (s.acc_y_1, s.acc_y_1_threads), (s.acc_y_2, s.acc_y_2_threads), (s.acc_y_3, s.acc_y_3_threads),))


def _update_tau(s, data_scale, expect=True):
    update_tau(data_scale, s.lam_tau_log, s.lam_tau_value, s.a0, s.b0, s.acc_y_0, s.acc_y_1, s.n_P, s.acc_y_2, s.E_w_value, s.acc_y_3, s.E_w_outer, expect, s.E_tau_log, s.E_tau_value)


def _update_w(s, data_scale, expect=True):
    update_w(data_scale, s.lam_w_value, s.lam_w_outer, s.n_P, s.eye_P_c, s.acc_y_2, s.E_tau_value, s.acc_y_3, expect, s.E_w_value, s.E_w_outer)


def refresh(s):
    refresh_globals(s.lam_tau_log, s.E_tau_log, s.lam_tau_value, s.E_tau_value, s.lam_w_value, s.E_w_value, s.lam_w_outer, s.E_w_outer)


def elbo_of_globals(s):
    return elbo_global(s.logdet_eye_P_c, s.n_P, s.eye_P_c, s.E_w_outer, s.dim_w, s.a0, s.log_b0, s.lgamma_a0, s.E_tau_log, s.b0, s.E_tau_value, s.acc_y_0, s.acc_y_1, s.acc_y_2, s.E_w_value, s.acc_y_3, s.lam_tau_log, s.lam_tau_value, s.lam_w_value, s.lam_w_outer)


GLOBALS = (  # the globals as the stochastic drivers move them
    rt.Global('tau', 'gamma', lam=('lam_tau_log', 'lam_tau_value'), E=('E_tau_log', 'E_tau_value'),
              update=_update_tau, aux_draws=1, after_sample=None),
    rt.Global('w', 'mvn', lam=('lam_w_value', 'lam_w_outer'), E=('E_w_value', 'E_w_outer'),
              update=_update_w, aux_draws=1, after_sample=None),
)


def fit(data, **options):
    """Batch mean-field VB (options: cemodel.runtime.drivers.mf.fit). One iteration:
        statistics ← 0; elbo = run_local_step(s, s.all_items, ...)  # E-step
        _update_tau(s, 1.0)  # q(tau)
        _update_w(s, 1.0)  # q(w)
        elbo += elbo_of_globals(s)
    """
    return rt.drivers.mf.fit(_THIS, data, **options)


def fit_svi(data, **options):
    """SVI, SVI+ (options: cemodel.runtime.drivers.svi.fit). One step on a minibatch S:
        statistics ← 0; run_local_step(s, S, ...)
        _update_tau(s, N / len(S), expect=False)  # λ̂ of q(tau)
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
