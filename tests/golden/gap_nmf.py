"""gap_nmf: the model (kernels, data layout, start) for cemodel.runtime.drivers, by cemodel 0.1.0.

Model file: gap_nmf.cem (sha256 852b45f7cc64eab8)
Regenerate with `cemodel compile gap_nmf.cem`; do not edit by hand.

Natural parameters are in coefficient form: q(x) ∝ exp(Σ_s lam_s · t_s(x)).
E_<var>_<stat> holds E_q[t_s]; acc_* hold sums over the data plate.
"""

import numpy as np
from numba import njit

from cemodel import runtime as rt

SOURCE = 'gap_nmf.cem'
SOURCE_SHA256 = '852b45f7cc64eab8e780db812afee87751caa2ffbc239d6d659e6929f2681c6a'
DEFAULT_START = 'random'  # Gamma components of a summed product start apart: breaks their symmetry
LEARNABLE = ()  # hyperparameters empirical Bayes can set (fit(..., learn=...))
DATA_PLATE = 'frames'  # the plate the local step runs over
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
    'exact': "no: locals 'H' and 'Y_split' meet in one factor, so p(locals | data, β) of an item does not factorise into one conditional per local, which is what the exact step computes",
    'gibbs': 'no: the item has no categorical local to sample',
    'cvb0': 'no: the item has no categorical local to sample',
}
STREAMING = 'yes'  # fit_svi from an rt.ItemSource (data on disk)
ITEM_DIMS = ('T',)  # sizes set by the items bound
ROLES = {  # the state's arrays by what they hold (executors, checkpoints)
    'data': ('n_F', 'n_K', 'Y'), 'hyper': ('a', 'b', 'alpha', 'c'),
    'known': ('log_b', 'lgamma_b', 'lgamma1p_Y', 'alpha_K', 'log_alpha_c', 'lgamma_alpha_K', 'alpha_c', 'log_a', 'lgamma_a'),
    'global': ('lam_W_log', 'lam_W_value', 'lam_theta_log', 'lam_theta_value'),
    'global_exp': ('E_theta_value', 'E_W_value', 'E_theta_log', 'E_W_log', 'X_theta_log', 'X_W_log'),
    'kept_local': ('lam_H_log', 'lam_H_value', 'E_H_log', 'E_H_value', 'X_H_log'),
    'item': ('seed_category', 'item_weight'), 'item_count': ('local_sweeps',),
    'statistic': ('acc_Y_0', 'acc_Y_1', 'acc_Y_3'),
    'thread': ('lam_Y_split_value_threads', 'E_Y_split_value_threads', 'H_Y_split_threads', 'logZ_Y_split_threads', 'acc_Y_0_threads', 'acc_Y_1_threads', 'acc_Y_3_threads'),
    'scratch': ('pre_H_4',),
}
_THIS = rt.ModelView(globals())  # the model, as the drivers see it

SPEC = {
    "model": 'gap_nmf',
    "dims": {
        'K': {"default": 50, "ragged_over": None},
        'F': {"default": None, "ragged_over": None},
        'T': {"default": None, "ragged_over": None},
    },
    "plates": {
        'components': {"dim": 'K', "parent": None, "ragged": False},
        'frequencies': {"dim": 'F', "parent": None, "ragged": False},
        'atoms': {"dim": 'K', "parent": 'frequencies', "ragged": False},
        'frames': {"dim": 'T', "parent": None, "ragged": False},
        'activations': {"dim": 'K', "parent": 'frames', "ragged": False},
        'bins': {"dim": 'F', "parent": 'frames', "ragged": False},
    },
    "observed": {
        'Y': {"plates": ['frames', 'bins'], "support": 'count', "shape": [], "categories": None, "missing": 'no: the factor of Y (gap_nmf.cem:34:9) is rewritten with the introduced Y_split, which a missing entry would leave undetermined'},
    },
    "covariates": {},
    "not_data": {'a': 'hyperparameter', 'b': 'hyperparameter', 'alpha': 'hyperparameter', 'c': 'hyperparameter', 'theta': 'latent', 'W': 'latent', 'H': 'latent'},
}


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_H(
        i_frames,
        with_children,
        lam_H_log,
        lam_H_value,
        b,
        n_F,
        E_Y_split_value,
        pre_H_4,
        E_H_log,
        E_H_value,
        X_H_log,
        n_K,
):
    """q(H[t, k2]) = Gamma(shape, rate)
        shape = b + Σ_{f2} E[Y_split[t, f2]]_{k2}
        rate = b + Σ_{f2} E[theta[k2]]·E[W[f2, k2]]

    (gap_nmf.cem:32:9)
    """
    for i_activations in range(n_K):
        lam_H_log[i_frames, i_activations] = 0.0
        lam_H_value[i_frames, i_activations] = 0.0
        # from H ~ Gamma (gap_nmf.cem:32:9)
        lam_H_log[i_frames, i_activations] += b
        # from H ~ Gamma (gap_nmf.cem:32:9)
        lam_H_log[i_frames, i_activations] += -1.0
        # from H ~ Gamma (gap_nmf.cem:32:9)
        lam_H_value[i_frames, i_activations] += -b
        if with_children:
            # from Y ~ Poisson·split (gap_nmf.cem:34:9)
            for i_bins in range(n_F):
                lam_H_log[i_frames, i_activations] += E_Y_split_value[i_bins, i_activations]
            # from Y ~ Poisson·split
            # precomputed by hoist_messages (gap_nmf.cem:34:9)
            lam_H_value[i_frames, i_activations] += pre_H_4[i_activations]
        E_H_log[i_frames, i_activations], E_H_value[i_frames, i_activations] = rt.gamma_expected_stats(lam_H_log[i_frames, i_activations], lam_H_value[i_frames, i_activations])
        X_H_log[i_frames, i_activations] = np.exp(E_H_log[i_frames, i_activations])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_Y_split(
        i_frames,
        with_children,
        lam_Y_split_value,
        n_K,
        E_theta_log,
        E_W_log,
        E_H_log,
        logZ_Y_split,
        Y,
        H_Y_split,
        E_Y_split_value,
        X_theta_log,
        X_W_log,
        X_H_log,
        n_F,
):
    """q(Y_split[t, f2]) = Multinomial(Y[t, f2], φ), E[Y_split[t, f2]] = Y[t, f2]·φ
        log φ_v = E[log theta[v]] + E[log W[f2, v]] + E[log H[t, v]] + const

    (gap_nmf.cem:34:9)
    """
    for i_bins in range(n_F):
        done = False
        if with_children:
            total = 0.0
            for t_c in range(n_K):
                E_Y_split_value[i_bins, t_c] = X_theta_log[t_c] * X_W_log[i_bins, t_c] * X_H_log[i_frames, t_c]
                total += E_Y_split_value[i_bins, t_c]
            if total > 0.0 and np.isfinite(total):
                count = Y[i_frames, i_bins]  # the count it splits
                to_mean = count / total
                cross = 0.0
                for t_c in range(n_K):
                    E_Y_split_value[i_bins, t_c] *= to_mean
                    lam_Y_split_value[i_bins, t_c] = E_theta_log[t_c] + E_W_log[i_bins, t_c] + E_H_log[i_frames, t_c]
                    cross += lam_Y_split_value[i_bins, t_c] * E_Y_split_value[i_bins, t_c]
                logZ_Y_split[i_bins] = np.log(total)  # log Σ_c exp λ_c
                # H = n·log Σ_c exp λ_c − Σ_c λ_c E[c_c], without the base measure
                H_Y_split[i_bins] = count * logZ_Y_split[i_bins] - cross
                done = True
        if not done:  # in log space: the prior-only start, or after an underflow
            lam_Y_split_value[i_bins] = 0.0
            if with_children:
                # from Y ~ Poisson·split (gap_nmf.cem:34:9)
                for t_k in range(n_K):
                    lam_Y_split_value[i_bins, t_k] += E_theta_log[t_k]
                # from Y ~ Poisson·split (gap_nmf.cem:34:9)
                for t_k in range(n_K):
                    lam_Y_split_value[i_bins, t_k] += E_W_log[i_bins, t_k]
                # from Y ~ Poisson·split (gap_nmf.cem:34:9)
                for t_k in range(n_K):
                    lam_Y_split_value[i_bins, t_k] += E_H_log[i_frames, t_k]
            logZ_Y_split[i_bins] = rt.split_expected_stats(lam_Y_split_value[i_bins], E_Y_split_value[i_bins], Y[i_frames, i_bins])
            H_Y_split[i_bins] = Y[i_frames, i_bins] * logZ_Y_split[i_bins] - rt.frobenius(lam_Y_split_value[i_bins], E_Y_split_value[i_bins])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def hoist_messages(pre_H_4, n_F, E_theta_value, E_W_value, n_K):
    """The item-independent messages to the locals, into their pre_ arrays."""
    # pre_H_4: to q(H) from Y ~ Poisson·split (gap_nmf.cem:34:9), the same for every item
    pre_H_4[...] = 0.0
    for i_activations in range(n_K):
        for i_bins in range(n_F):
            pre_H_4[i_activations] += -E_theta_value[i_activations] * E_W_value[i_bins, i_activations]


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def item_elbo(
        i_frames,
        n_K,
        b,
        log_b,
        lgamma_b,
        E_H_log,
        E_H_value,
        n_F,
        E_Y_split_value,
        E_theta_log,
        E_W_log,
        E_theta_value,
        E_W_value,
        lgamma1p_Y,
        lam_H_log,
        lam_H_value,
        H_Y_split,
):
    """One item's share of the ELBO under the current globals (the restart guard)."""
    value = 0.0
    for i_activations in range(n_K):
        value += b * log_b
    for i_activations in range(n_K):
        value += -lgamma_b
    for i_activations in range(n_K):
        value += b * E_H_log[i_frames, i_activations]
    for i_activations in range(n_K):
        value += -E_H_log[i_frames, i_activations]
    for i_activations in range(n_K):
        value += -b * E_H_value[i_frames, i_activations]
    for i_bins in range(n_F):
        for t_k in range(n_K):
            value += E_Y_split_value[i_bins, t_k] * E_theta_log[t_k]
    for i_bins in range(n_F):
        for t_k in range(n_K):
            value += E_Y_split_value[i_bins, t_k] * E_W_log[i_bins, t_k]
    for i_bins in range(n_F):
        for t_k in range(n_K):
            value += E_Y_split_value[i_bins, t_k] * E_H_log[i_frames, t_k]
    for i_bins in range(n_F):
        for t_i0 in range(n_K):
            value += -E_theta_value[t_i0] * E_W_value[i_bins, t_i0] * E_H_value[i_frames, t_i0]
    for i_bins in range(n_F):
        value += -lgamma1p_Y[i_frames, i_bins]
    for i_activations in range(n_K):
        value += (rt.gamma_log_normalizer(lam_H_log[i_frames, i_activations], lam_H_value[i_frames, i_activations]) - lam_H_log[i_frames, i_activations] * E_H_log[i_frames, i_activations] - lam_H_value[i_frames, i_activations] * E_H_value[i_frames, i_activations])
    for i_bins in range(n_F):
        value += (H_Y_split[i_bins])
    return value


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def extrapolate(
        i_frames,
        first_lam_H_log,
        middle_lam_H_log,
        lam_H_log,
        first_lam_H_value,
        middle_lam_H_value,
        lam_H_value,
        point_lam_H_log,
        point_lam_H_value,
        E_H_log,
        E_H_value,
        X_H_log,
        n_K,
):
    """SQUAREM (Varadhan & Roland 2008, SqS3) on the item's iterated locals: from s₀
    (first_*), s₁ = F(s₀) (middle_*) and s₂ = F(s₁) (the state) of the last two sweeps,
    s′ = s₀ − 2α·r + α²·v with r = s₁ − s₀, v = s₂ − 2·s₁ + s₀, α = −‖r‖/‖v‖ ≤ −1, halved
    towards −1 until every natural parameter is in its family's domain; then E[t] of s′.
    """
    r2, v2 = rt.squarem_norms(first_lam_H_log, middle_lam_H_log, lam_H_log[i_frames])
    more_r2, more_v2 = rt.squarem_norms(first_lam_H_value, middle_lam_H_value, lam_H_value[i_frames])
    r2 += more_r2
    v2 += more_v2
    step = rt.squarem_step(r2, v2)
    while step < -1.0:
        inside = rt.squarem_point(first_lam_H_log, middle_lam_H_log, lam_H_log[i_frames], step, point_lam_H_log, -1.0, np.inf)
        inside = rt.squarem_point(first_lam_H_value, middle_lam_H_value, lam_H_value[i_frames], step, point_lam_H_value, -np.inf, 0.0) and inside
        if inside:
            lam_H_log[i_frames] = point_lam_H_log
            lam_H_value[i_frames] = point_lam_H_value
            for i_activations in range(n_K):
                E_H_log[i_frames, i_activations], E_H_value[i_frames, i_activations] = rt.gamma_expected_stats(lam_H_log[i_frames, i_activations], lam_H_value[i_frames, i_activations])
                X_H_log[i_frames, i_activations] = np.exp(E_H_log[i_frames, i_activations])
            return
        step = rt.backtrack(step)  # outside a domain: α halfway towards −1 (the plain sweeps' s₂)


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
        lam_H_log,
        lam_H_value,
        b,
        n_F,
        pre_H_4,
        E_H_log,
        E_H_value,
        X_H_log,
        n_K,
        E_theta_log,
        E_W_log,
        Y,
        X_theta_log,
        X_W_log,
        warm,
        local_sweeps,
        accelerate,
        log_b,
        lgamma_b,
        E_theta_value,
        E_W_value,
        lgamma1p_Y,
        guard,
        item_weight,
        evaluate,
        lam_Y_split_value_threads,
        E_Y_split_value_threads,
        H_Y_split_threads,
        logZ_Y_split_threads,
        acc_Y_0_threads,
        acc_Y_1_threads,
        acc_Y_3_threads,
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
        lam_Y_split_value = lam_Y_split_value_threads[thread]
        E_Y_split_value = E_Y_split_value_threads[thread]
        H_Y_split = H_Y_split_threads[thread]
        logZ_Y_split = logZ_Y_split_threads[thread]
        acc_Y_0_t = acc_Y_0_threads[thread]
        acc_Y_1_t = acc_Y_1_threads[thread]
        acc_Y_3_t = acc_Y_3_threads[thread]
        old_H = np.empty_like(lam_H_log[0])  # the previous sweep, for the convergence test
        # the item's previous state, for the restart guard
        keep_lam_H_log = np.empty_like(lam_H_log[0])
        # the item's previous state, for the restart guard
        keep_E_H_log = np.empty_like(E_H_log[0])
        # the item's previous state, for the restart guard
        keep_lam_H_value = np.empty_like(lam_H_value[0])
        # the item's previous state, for the restart guard
        keep_E_H_value = np.empty_like(E_H_value[0])
        # the item's previous state, for the restart guard
        keep_X_H_log = np.empty_like(X_H_log[0])
        first_lam_H_log = np.empty_like(lam_H_log[0])  # SQUAREM: s₀ of the cycle
        middle_lam_H_log = np.empty_like(lam_H_log[0])  # SQUAREM: s₁ = F(s₀)
        point_lam_H_log = np.empty_like(lam_H_log[0])  # SQUAREM: the extrapolated s′
        first_lam_H_value = np.empty_like(lam_H_value[0])  # SQUAREM: s₀ of the cycle
        middle_lam_H_value = np.empty_like(lam_H_value[0])  # SQUAREM: s₁ = F(s₀)
        point_lam_H_value = np.empty_like(lam_H_value[0])  # SQUAREM: the extrapolated s′
        elbo = 0.0
        stop_position = (thread + 1) * items.shape[0] // n_threads
        for position in range(thread * items.shape[0] // n_threads, stop_position):
            i_frames = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_frames + 1:
                rt.prefetch_row(item_weight, items[position + 1])
                rt.prefetch_row(local_sweeps, items[position + 1])
                rt.prefetch_row(Y, items[position + 1])
            if guard:
                rt.copy_into(keep_lam_H_log, lam_H_log[i_frames])
                rt.copy_into(keep_E_H_log, E_H_log[i_frames])
                rt.copy_into(keep_lam_H_value, lam_H_value[i_frames])
                rt.copy_into(keep_E_H_value, E_H_value[i_frames])
                rt.copy_into(keep_X_H_log, X_H_log[i_frames])
                update_Y_split(i_frames, True, lam_Y_split_value, n_K, E_theta_log, E_W_log, E_H_log, logZ_Y_split, Y, H_Y_split, E_Y_split_value, X_theta_log, X_W_log, X_H_log, n_F)
                # the previous state, re-optimised in its scratch locals
                previous = item_elbo(i_frames, n_K, b, log_b, lgamma_b, E_H_log, E_H_value, n_F, E_Y_split_value, E_theta_log, E_W_log, E_theta_value, E_W_value, lgamma1p_Y, lam_H_log, lam_H_value, H_Y_split)
            if not warm:
                update_H(i_frames, False, lam_H_log, lam_H_value, b, n_F, E_Y_split_value, pre_H_4, E_H_log, E_H_value, X_H_log, n_K)
            # the item's sweeps (MF reports them: FitResult.notes['local_sweeps'])
            local_sweeps[i_frames] = 0
            for sweep in range(max_local_iter):
                local_sweeps[i_frames] += 1
                change = 0.0
                rt.copy_into(old_H, lam_H_log[i_frames])
                if sweep % 2 == 0:  # SQUAREM: a cycle starts
                    rt.copy_into(first_lam_H_log, lam_H_log[i_frames])
                    rt.copy_into(first_lam_H_value, lam_H_value[i_frames])
                else:
                    rt.copy_into(middle_lam_H_log, lam_H_log[i_frames])
                    rt.copy_into(middle_lam_H_value, lam_H_value[i_frames])
                update_Y_split(i_frames, True, lam_Y_split_value, n_K, E_theta_log, E_W_log, E_H_log, logZ_Y_split, Y, H_Y_split, E_Y_split_value, X_theta_log, X_W_log, X_H_log, n_F)
                update_H(i_frames, True, lam_H_log, lam_H_value, b, n_F, E_Y_split_value, pre_H_4, E_H_log, E_H_value, X_H_log, n_K)
                change += rt.mean_abs_change(lam_H_log[i_frames], old_H)
                if change < local_tol:
                    break
                if accelerate and sweep % 2 == 1 and sweep + 1 < max_local_iter:
                    extrapolate(i_frames, first_lam_H_log, middle_lam_H_log, lam_H_log, first_lam_H_value, middle_lam_H_value, lam_H_value, point_lam_H_log, point_lam_H_value, E_H_log, E_H_value, X_H_log, n_K)
            if guard:
                if item_elbo(i_frames, n_K, b, log_b, lgamma_b, E_H_log, E_H_value, n_F, E_Y_split_value, E_theta_log, E_W_log, E_theta_value, E_W_value, lgamma1p_Y, lam_H_log, lam_H_value, H_Y_split) < previous - 1e-12 * abs(previous):
                    # the restart settled lower (beyond round-off): keep the previous state
                    lam_H_log[i_frames] = keep_lam_H_log
                    E_H_log[i_frames] = keep_E_H_log
                    lam_H_value[i_frames] = keep_lam_H_value
                    E_H_value[i_frames] = keep_E_H_value
                    X_H_log[i_frames] = keep_X_H_log
                    update_Y_split(i_frames, True, lam_Y_split_value, n_K, E_theta_log, E_W_log, E_H_log, logZ_Y_split, Y, H_Y_split, E_Y_split_value, X_theta_log, X_W_log, X_H_log, n_F)
            # acc_Y_0[k] += E[Y_split[frames, bins]]  (gap_nmf.cem:34:9)
            for i_bins in range(n_F):
                for t_k in range(n_K):
                    acc_Y_0_t[t_k] += item_weight[i_frames] * E_Y_split_value[i_bins, t_k]
            # acc_Y_1[k, @bins] += E[Y_split[frames, bins]]  (gap_nmf.cem:34:9)
            for i_bins in range(n_F):
                for t_k in range(n_K):
                    acc_Y_1_t[t_k, i_bins] += item_weight[i_frames] * E_Y_split_value[i_bins, t_k]
            # acc_Y_3[i0, @bins] += E[H[frames, i0]]  (gap_nmf.cem:34:9)
            for i_bins in range(n_F):
                for t_i0 in range(n_K):
                    acc_Y_3_t[t_i0, i_bins] += item_weight[i_frames] * E_H_value[i_frames, t_i0]
            # ELBO: local terms and local entropies (a stochastic step has no use for them)
            if evaluate:
                for i_activations in range(n_K):
                    elbo += b * log_b
                for i_activations in range(n_K):
                    elbo += -lgamma_b
                for i_activations in range(n_K):
                    elbo += b * E_H_log[i_frames, i_activations]
                for i_activations in range(n_K):
                    elbo += -E_H_log[i_frames, i_activations]
                for i_activations in range(n_K):
                    elbo += -b * E_H_value[i_frames, i_activations]
                for i_bins in range(n_F):
                    for t_k in range(n_K):
                        elbo += E_Y_split_value[i_bins, t_k] * E_H_log[i_frames, t_k]
                for i_bins in range(n_F):
                    elbo += -lgamma1p_Y[i_frames, i_bins]
                for i_activations in range(n_K):
                    elbo += (rt.gamma_log_normalizer(lam_H_log[i_frames, i_activations], lam_H_value[i_frames, i_activations]) - lam_H_log[i_frames, i_activations] * E_H_log[i_frames, i_activations] - lam_H_value[i_frames, i_activations] * E_H_value[i_frames, i_activations])
                for i_bins in range(n_F):
                    elbo += (H_Y_split[i_bins])
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_W(
        data_scale,
        lam_W_log,
        lam_W_value,
        a,
        acc_Y_1,
        acc_Y_3,
        E_theta_value,
        expect,
        E_W_log,
        E_W_value,
        X_W_log,
        n_F,
        n_K,
):
    """q(W[f, j]) = Gamma(shape, rate)
        shape = a + Σ_{t} E[Y_split[t, f]]_j
        rate = a + Σ_{t} E[theta[j]]·E[H[t, j]]

    (gap_nmf.cem:29:9)
    """
    for i_frequencies in range(n_F):
        for i_atoms in range(n_K):
            lam_W_log[i_frequencies, i_atoms] = 0.0
            lam_W_value[i_frequencies, i_atoms] = 0.0
            # from W ~ Gamma (gap_nmf.cem:29:9)
            lam_W_log[i_frequencies, i_atoms] += a
            # from W ~ Gamma (gap_nmf.cem:29:9)
            lam_W_log[i_frequencies, i_atoms] += -1.0
            # from W ~ Gamma (gap_nmf.cem:29:9)
            lam_W_value[i_frequencies, i_atoms] += -a
            # from Y ~ Poisson·split (gap_nmf.cem:34:9)
            lam_W_log[i_frequencies, i_atoms] += data_scale * acc_Y_1[i_atoms, i_frequencies]
            # from Y ~ Poisson·split (gap_nmf.cem:34:9)
            lam_W_value[i_frequencies, i_atoms] += -data_scale * acc_Y_3[i_atoms, i_frequencies] * E_theta_value[i_atoms]
            if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
                E_W_log[i_frequencies, i_atoms], E_W_value[i_frequencies, i_atoms] = rt.gamma_expected_stats(lam_W_log[i_frequencies, i_atoms], lam_W_value[i_frequencies, i_atoms])
                X_W_log[i_frequencies, i_atoms] = np.exp(E_W_log[i_frequencies, i_atoms])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_theta(
        data_scale,
        lam_theta_log,
        lam_theta_value,
        alpha_K,
        alpha_c,
        acc_Y_0,
        n_F,
        acc_Y_3,
        E_W_value,
        expect,
        E_theta_log,
        E_theta_value,
        X_theta_log,
        n_K,
):
    """q(theta[k]) = Gamma(shape, rate)
        shape = (alpha / K) + Σ_{t,f2} E[Y_split[t, f2]]_k
        rate = (alpha * c) + Σ_{t,f2} E[W[f2, k]]·E[H[t, k]]

    (gap_nmf.cem:26:5)
    """
    for i_components in range(n_K):
        lam_theta_log[i_components] = 0.0
        lam_theta_value[i_components] = 0.0
        # from theta ~ Gamma (gap_nmf.cem:26:5)
        lam_theta_log[i_components] += alpha_K
        # from theta ~ Gamma (gap_nmf.cem:26:5)
        lam_theta_log[i_components] += -1.0
        # from theta ~ Gamma (gap_nmf.cem:26:5)
        lam_theta_value[i_components] += -alpha_c
        # from Y ~ Poisson·split (gap_nmf.cem:34:9)
        lam_theta_log[i_components] += data_scale * acc_Y_0[i_components]
        # from Y ~ Poisson·split (gap_nmf.cem:34:9)
        for i_bins in range(n_F):
            lam_theta_value[i_components] += -data_scale * acc_Y_3[i_components, i_bins] * E_W_value[i_bins, i_components]
        if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
            E_theta_log[i_components], E_theta_value[i_components] = rt.gamma_expected_stats(lam_theta_log[i_components], lam_theta_value[i_components])
            X_theta_log[i_components] = np.exp(E_theta_log[i_components])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def refresh_globals(
        lam_W_log,
        E_W_log,
        lam_W_value,
        E_W_value,
        X_W_log,
        n_F,
        n_K,
        lam_theta_log,
        E_theta_log,
        lam_theta_value,
        E_theta_value,
        X_theta_log,
):
    """Expected statistics of the globals from their natural parameters."""
    for i_frequencies in range(n_F):
        for i_atoms in range(n_K):
            E_W_log[i_frequencies, i_atoms], E_W_value[i_frequencies, i_atoms] = rt.gamma_expected_stats(lam_W_log[i_frequencies, i_atoms], lam_W_value[i_frequencies, i_atoms])
            X_W_log[i_frequencies, i_atoms] = np.exp(E_W_log[i_frequencies, i_atoms])
    for i_components in range(n_K):
        E_theta_log[i_components], E_theta_value[i_components] = rt.gamma_expected_stats(lam_theta_log[i_components], lam_theta_value[i_components])
        X_theta_log[i_components] = np.exp(E_theta_log[i_components])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def elbo_global(
        n_K,
        alpha_K,
        log_alpha_c,
        lgamma_alpha_K,
        E_theta_log,
        alpha_c,
        E_theta_value,
        n_F,
        a,
        log_a,
        lgamma_a,
        E_W_log,
        E_W_value,
        acc_Y_0,
        acc_Y_1,
        acc_Y_3,
        lam_W_log,
        lam_W_value,
        lam_theta_log,
        lam_theta_value,
):
    """ELBO terms of the global factors (see elbo_terms in the README)."""
    elbo = 0.0
    # E[log p(theta | ...)]  (gap_nmf.cem:26:5)
    for i_components in range(n_K):
        elbo += alpha_K * log_alpha_c
    for i_components in range(n_K):
        elbo += -lgamma_alpha_K
    for i_components in range(n_K):
        elbo += alpha_K * E_theta_log[i_components]
    for i_components in range(n_K):
        elbo += -E_theta_log[i_components]
    for i_components in range(n_K):
        elbo += -alpha_c * E_theta_value[i_components]
    # E[log p(W | ...)]  (gap_nmf.cem:29:9)
    for i_frequencies in range(n_F):
        for i_atoms in range(n_K):
            elbo += a * log_a
    for i_frequencies in range(n_F):
        for i_atoms in range(n_K):
            elbo += -lgamma_a
    for i_frequencies in range(n_F):
        for i_atoms in range(n_K):
            elbo += a * E_W_log[i_frequencies, i_atoms]
    for i_frequencies in range(n_F):
        for i_atoms in range(n_K):
            elbo += -E_W_log[i_frequencies, i_atoms]
    for i_frequencies in range(n_F):
        for i_atoms in range(n_K):
            elbo += -a * E_W_value[i_frequencies, i_atoms]
    # E[log p(H | ...)]  (gap_nmf.cem:32:9)
    # E[log p(Y_split | ...)]  (gap_nmf.cem:34:9)
    # E[log p(Y | ...)]  (gap_nmf.cem:34:9)
    for t_k in range(n_K):
        elbo += acc_Y_0[t_k] * E_theta_log[t_k]
    for i_bins in range(n_F):
        for t_k in range(n_K):
            elbo += acc_Y_1[t_k, i_bins] * E_W_log[i_bins, t_k]
    for i_bins in range(n_F):
        for t_i0 in range(n_K):
            elbo += -acc_Y_3[t_i0, i_bins] * E_theta_value[t_i0] * E_W_value[i_bins, t_i0]
    # entropy of q(W)
    for i_frequencies in range(n_F):
        for i_atoms in range(n_K):
            elbo += rt.gamma_log_normalizer(lam_W_log[i_frequencies, i_atoms], lam_W_value[i_frequencies, i_atoms]) - lam_W_log[i_frequencies, i_atoms] * E_W_log[i_frequencies, i_atoms] - lam_W_value[i_frequencies, i_atoms] * E_W_value[i_frequencies, i_atoms]
    # entropy of q(theta)
    for i_components in range(n_K):
        elbo += rt.gamma_log_normalizer(lam_theta_log[i_components], lam_theta_value[i_components]) - lam_theta_log[i_components] * E_theta_log[i_components] - lam_theta_value[i_components] * E_theta_value[i_components]
    return elbo


def _prepare(data, hypers, dims, seed, init, start, max_local_iter, local_tol, share=None):
    """Bind and check the data, evaluate hyperparameters and knowns, allocate the arrays, start the globals.
    share: out of core, the fit's state, whose globals, hyperparameters and statistics `data`'s minibatch shares.
    """
    hypers = rt.check_hyper_names(hypers, ['a', 'b', 'alpha', 'c'])
    bound = rt.bind_data(SPEC, data, dims, missing=True)
    n_K, n_F, n_T = bound.dims['K'], bound.dims['F'], bound.dims['T']
    # refuse before allocating more than the machine's memory
    rt.check_memory(bound, {('F', 'K'): 7, ('K',): 6, ('T', 'K'): 5, ('F',): 2, ('threads', 'K'): 1, ('K', 'F'): 2, ('threads', 'K', 'F'): 2, ('T',): 4})
    Y = bound.arrays['Y']
    # hyperparameters (defaults from the model file; out of core the fit's current values)
    a = rt.hyper_value(hypers, 'a', 0.25, (), domain='shape') if share is None else share.a
    b = rt.hyper_value(hypers, 'b', 0.2, (), domain='shape') if share is None else share.b
    alpha = rt.hyper_value(hypers, 'alpha', 1.0, ()) if share is None else share.alpha
    c = rt.hyper_value(hypers, 'c', 1.0, ()) if share is None else share.c
    # known quantities: functions of hyperparameters and data
    alpha_K = (alpha / n_K)  # value((alpha / K))
    log_alpha_c = np.log((alpha * c))  # log((alpha * c))
    lgamma_alpha_K = rt.gammaln((alpha / n_K))  # lgamma((alpha / K))
    alpha_c = (alpha * c)  # value((alpha * c))
    log_a = rt.log_data(a, "hyperparameter 'a'")  # log(a)
    lgamma_a = rt.gammaln(a)  # lgamma(a)
    log_b = rt.log_data(b, "hyperparameter 'b'")  # log(b)
    lgamma_b = rt.gammaln(b)  # lgamma(b)
    lgamma1p_Y = rt.gammaln(Y + 1.0)  # lgamma1p(Y[frames, bins])
    # variational parameters (natural, coefficient form) and E[t]
    lam_W_log, E_W_log = (np.zeros((n_F, n_K)), np.zeros((n_F, n_K))) if share is None else (share.lam_W_log, share.E_W_log)
    lam_W_value, E_W_value = (np.zeros((n_F, n_K)), np.zeros((n_F, n_K))) if share is None else (share.lam_W_value, share.E_W_value)
    lam_theta_log, E_theta_log = (np.zeros((n_K,)), np.zeros((n_K,))) if share is None else (share.lam_theta_log, share.E_theta_log)
    lam_theta_value, E_theta_value = (np.zeros((n_K,)), np.zeros((n_K,))) if share is None else (share.lam_theta_value, share.E_theta_value)
    lam_H_log, E_H_log = np.zeros((n_T, n_K)), np.zeros((n_T, n_K))
    lam_H_value, E_H_value = np.zeros((n_T, n_K)), np.zeros((n_T, n_K))
    lam_Y_split_value, E_Y_split_value = np.zeros((n_F, n_K)), np.zeros((n_F, n_K))
    # exp(E[log theta])
    X_theta_log = np.zeros_like(E_theta_log) if share is None else share.X_theta_log
    X_W_log = np.zeros_like(E_W_log) if share is None else share.X_W_log  # exp(E[log W])
    X_H_log = np.zeros_like(E_H_log)  # exp(E[log H])
    pre_H_4 = np.zeros((n_K,))  # a message to q(H) that no item changes (hoist_messages)
    H_Y_split = np.zeros(E_Y_split_value.shape[0])  # entropy of each row of q(Y_split)
    logZ_Y_split = np.zeros_like(H_Y_split)  # log Σ_c exp λ_c of each row of q(Y_split)
    # sufficient statistics the local step hands to the global step (out of core added up over minibatches)
    acc_Y_0 = np.zeros((n_K,)) if share is None else share.acc_Y_0
    acc_Y_1 = np.zeros((n_K, n_F)) if share is None else share.acc_Y_1
    acc_Y_3 = np.zeros((n_K, n_F)) if share is None else share.acc_Y_3
    # the local step's shares: one per thread, fewer for small data
    n_threads = rt.share_count(bound)
    lam_Y_split_value_threads, E_Y_split_value_threads, H_Y_split_threads, logZ_Y_split_threads = rt.per_thread(n_threads, lam_Y_split_value, E_Y_split_value, H_Y_split, logZ_Y_split)
    acc_Y_0_threads = rt.thread_copies(n_threads, acc_Y_0) if share is None else share.acc_Y_0_threads
    acc_Y_1_threads = rt.thread_copies(n_threads, acc_Y_1) if share is None else share.acc_Y_1_threads
    acc_Y_3_threads = rt.thread_copies(n_threads, acc_Y_3) if share is None else share.acc_Y_3_threads
    all_items = np.arange(n_T)  # the local step runs over these
    item_weight = np.ones(n_T)  # each item's weight in the statistics (SVI+ perturbs it)
    # each item's inner sweeps in its latest local step
    local_sweeps = np.zeros(n_T, dtype=np.int64)
    seed_category = np.full(n_T, -1)
    if share is not None:  # out of core: a minibatch's state, sharing the fit's
        return rt.State(bound=bound, a=a, b=b, alpha=alpha, c=c, pre_H_4=pre_H_4, n_F=n_F, E_theta_value=E_theta_value, E_W_value=E_W_value, n_K=n_K, seed_category=seed_category, lam_H_log=lam_H_log, lam_H_value=lam_H_value, E_H_log=E_H_log, E_H_value=E_H_value, X_H_log=X_H_log, E_theta_log=E_theta_log, E_W_log=E_W_log, Y=Y, X_theta_log=X_theta_log, X_W_log=X_W_log, local_sweeps=local_sweeps, log_b=log_b, lgamma_b=lgamma_b, lgamma1p_Y=lgamma1p_Y, item_weight=item_weight, lam_Y_split_value_threads=lam_Y_split_value_threads, E_Y_split_value_threads=E_Y_split_value_threads, H_Y_split_threads=H_Y_split_threads, logZ_Y_split_threads=logZ_Y_split_threads, acc_Y_0_threads=acc_Y_0_threads, acc_Y_1_threads=acc_Y_1_threads, acc_Y_3_threads=acc_Y_3_threads, acc_Y_0=acc_Y_0, acc_Y_1=acc_Y_1, acc_Y_3=acc_Y_3, lam_W_log=lam_W_log, lam_W_value=lam_W_value, lam_theta_log=lam_theta_log, lam_theta_value=lam_theta_value, alpha_K=alpha_K, log_alpha_c=log_alpha_c, lgamma_alpha_K=lgamma_alpha_K, alpha_c=alpha_c, log_a=log_a, lgamma_a=lgamma_a, all_items=all_items)
    # start every global at its prior
    update_W(0.0, lam_W_log, lam_W_value, a, acc_Y_1, acc_Y_3, E_theta_value, True, E_W_log, E_W_value, X_W_log, n_F, n_K)
    update_theta(0.0, lam_theta_log, lam_theta_value, alpha_K, alpha_c, acc_Y_0, n_F, acc_Y_3, E_W_value, True, E_theta_log, E_theta_value, X_theta_log, n_K)
    if init is not None:  # warm start: the globals' natural parameters from an earlier fit
        rt.load_state(init, {'lam_W_log': lam_W_log, 'lam_W_value': lam_W_value, 'lam_theta_log': lam_theta_log, 'lam_theta_value': lam_theta_value})
        refresh_globals(lam_W_log, E_W_log, lam_W_value, E_W_value, X_W_log, n_F, n_K, lam_theta_log, E_theta_log, lam_theta_value, E_theta_value, X_theta_log)
    start = DEFAULT_START if start is None else start
    if init is None and start == 'random':
        # each Gamma global concentrated near its prior mean, jittered: breaks the symmetry of products of latent variables
        rng = np.random.default_rng(seed)
        rt.start_gamma_near_mean(lam_W_log, lam_W_value, rng)
        rt.start_gamma_near_mean(lam_theta_log, lam_theta_value, rng)
        refresh_globals(lam_W_log, E_W_log, lam_W_value, E_W_value, X_W_log, n_F, n_K, lam_theta_log, E_theta_log, lam_theta_value, E_theta_value, X_theta_log)
    elif init is None and start == 'seeds':
        raise rt.CemDataError("start: expected 'random' or 'prior', found 'seeds' (there is no categorical assignment to seed)")
    elif init is None and start != 'prior':
        raise rt.CemDataError(f"start: expected 'random' or 'prior', found {start!r}")
    return rt.State(bound=bound, a=a, b=b, alpha=alpha, c=c, pre_H_4=pre_H_4, n_F=n_F, E_theta_value=E_theta_value, E_W_value=E_W_value, n_K=n_K, seed_category=seed_category, lam_H_log=lam_H_log, lam_H_value=lam_H_value, E_H_log=E_H_log, E_H_value=E_H_value, X_H_log=X_H_log, E_theta_log=E_theta_log, E_W_log=E_W_log, Y=Y, X_theta_log=X_theta_log, X_W_log=X_W_log, local_sweeps=local_sweeps, log_b=log_b, lgamma_b=lgamma_b, lgamma1p_Y=lgamma1p_Y, item_weight=item_weight, lam_Y_split_value_threads=lam_Y_split_value_threads, E_Y_split_value_threads=E_Y_split_value_threads, H_Y_split_threads=H_Y_split_threads, logZ_Y_split_threads=logZ_Y_split_threads, acc_Y_0_threads=acc_Y_0_threads, acc_Y_1_threads=acc_Y_1_threads, acc_Y_3_threads=acc_Y_3_threads, acc_Y_0=acc_Y_0, acc_Y_1=acc_Y_1, acc_Y_3=acc_Y_3, lam_W_log=lam_W_log, lam_W_value=lam_W_value, lam_theta_log=lam_theta_log, lam_theta_value=lam_theta_value, alpha_K=alpha_K, log_alpha_c=log_alpha_c, lgamma_alpha_K=lgamma_alpha_K, alpha_c=alpha_c, log_a=log_a, lgamma_a=lgamma_a, all_items=all_items)


def _result(s, trace, converged, seconds, items=True):
    """The posterior in usual parameters, expectations and the state; items=False: the globals only."""
    posterior = {}
    state = {'lam_W_log': s.lam_W_log, 'lam_W_value': s.lam_W_value, 'lam_theta_log': s.lam_theta_log, 'lam_theta_value': s.lam_theta_value}
    W__shape, W__rate = rt.gamma_params(s.lam_W_log, s.lam_W_value)
    posterior['W.shape'] = W__shape
    posterior['W.rate'] = W__rate
    posterior['E[log W]'] = s.E_W_log
    posterior['E[value W]'] = s.E_W_value
    theta__shape, theta__rate = rt.gamma_params(s.lam_theta_log, s.lam_theta_value)
    posterior['theta.shape'] = theta__shape
    posterior['theta.rate'] = theta__rate
    posterior['E[log theta]'] = s.E_theta_log
    posterior['E[value theta]'] = s.E_theta_value
    if items:  # out of core the state holds one minibatch's items
        H__shape, H__rate = rt.gamma_params(s.lam_H_log, s.lam_H_value)
        posterior['H.shape'] = H__shape
        posterior['H.rate'] = H__rate
        posterior['E[log H]'] = s.E_H_log
        posterior['E[value H]'] = s.E_H_value
        state['lam_H_log'] = s.lam_H_log
        state['lam_H_value'] = s.lam_H_value
    return rt.FitResult(posterior=posterior, elbo=np.array(trace), iterations=len(trace), converged=converged, seconds=seconds, dims=dict(s.bound.dims), hypers={'a': s.a, 'b': s.b, 'alpha': s.alpha, 'c': s.c}, state=state)


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
    hoist_messages(s.pre_H_4, s.n_F, s.E_theta_value, s.E_W_value, s.n_K)
    return rt.run_shares(local_step, s.lam_Y_split_value_threads.shape[0], (seeding, items, s.seed_category, max_local_iter, local_tol, s.lam_H_log, s.lam_H_value, s.b, s.n_F, s.pre_H_4, s.E_H_log, s.E_H_value, s.X_H_log, s.n_K, s.E_theta_log, s.E_W_log, s.Y, s.X_theta_log, s.X_W_log, warm, s.local_sweeps, accelerate, s.log_b, s.lgamma_b, s.E_theta_value, s.E_W_value, s.lgamma1p_Y, guard, s.item_weight, evaluate, s.lam_Y_split_value_threads, s.E_Y_split_value_threads, s.H_Y_split_threads, s.logZ_Y_split_threads, s.acc_Y_0_threads, s.acc_Y_1_threads, s.acc_Y_3_threads,), ((s.acc_Y_0, s.acc_Y_0_threads), (s.acc_Y_1, s.acc_Y_1_threads), (s.acc_Y_3, s.acc_Y_3_threads),))


def _update_W(s, data_scale, expect=True):
    update_W(data_scale, s.lam_W_log, s.lam_W_value, s.a, s.acc_Y_1, s.acc_Y_3, s.E_theta_value, expect, s.E_W_log, s.E_W_value, s.X_W_log, s.n_F, s.n_K)


def _after_sample_W(s):
    s.X_W_log[...] = np.exp(s.E_W_log)


def _update_theta(s, data_scale, expect=True):
    update_theta(data_scale, s.lam_theta_log, s.lam_theta_value, s.alpha_K, s.alpha_c, s.acc_Y_0, s.n_F, s.acc_Y_3, s.E_W_value, expect, s.E_theta_log, s.E_theta_value, s.X_theta_log, s.n_K)


def _after_sample_theta(s):
    s.X_theta_log[...] = np.exp(s.E_theta_log)


def refresh(s):
    refresh_globals(s.lam_W_log, s.E_W_log, s.lam_W_value, s.E_W_value, s.X_W_log, s.n_F, s.n_K, s.lam_theta_log, s.E_theta_log, s.lam_theta_value, s.E_theta_value, s.X_theta_log)


def elbo_of_globals(s):
    return elbo_global(s.n_K, s.alpha_K, s.log_alpha_c, s.lgamma_alpha_K, s.E_theta_log, s.alpha_c, s.E_theta_value, s.n_F, s.a, s.log_a, s.lgamma_a, s.E_W_log, s.E_W_value, s.acc_Y_0, s.acc_Y_1, s.acc_Y_3, s.lam_W_log, s.lam_W_value, s.lam_theta_log, s.lam_theta_value)


GLOBALS = (  # the globals as the stochastic drivers move them
    rt.Global('W', 'gamma', lam=('lam_W_log', 'lam_W_value'), E=('E_W_log', 'E_W_value'),
              update=_update_W, aux_draws=1, after_sample=_after_sample_W),
    rt.Global('theta', 'gamma', lam=('lam_theta_log', 'lam_theta_value'), E=('E_theta_log', 'E_theta_value'),
              update=_update_theta, aux_draws=1, after_sample=_after_sample_theta),
)
# the data see W·theta only as a product: after each global step, the best scale between them (rt.rebalance)
SCALES = (rt.ScaleSymmetry('W', 'theta', 1, 0),)


def fit(data, **options):
    """Batch mean-field VB (options: cemodel.runtime.drivers.mf.fit). One iteration:
        statistics ← 0; elbo = run_local_step(s, s.all_items, ...)  # E-step
        _update_W(s, 1.0)  # q(W)
        _update_theta(s, 1.0)  # q(theta)
        elbo += elbo_of_globals(s)
    """
    return rt.drivers.mf.fit(_THIS, data, **options)


def fit_svi(data, **options):
    """SVI, SVI+ (options: cemodel.runtime.drivers.svi.fit). One step on a minibatch S:
        statistics ← 0; run_local_step(s, S, ...)
        _update_W(s, N / len(S), expect=False)  # λ̂ of q(W)
        _update_theta(s, N / len(S), expect=False)  # λ̂ of q(theta)
        λ ← (1 − ρ)λ + ρλ̂ (rt.blend); refresh(s)
    """
    return rt.drivers.svi.fit(_THIS, data, **options)


def fit_ssvi_a(data, **options):
    """SSVI-A (Hoffman & Blei 2015, eq. 10): fit_svi with the local step given a draw β ~ q(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, **options)


def fit_ssvi(data, **options):
    """SSVI (Hoffman & Blei 2015, eq. 7): fit_ssvi_a with λ̂ = η + V(β, λ)·N/|S| Σ η̂_n(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, apply_v=True, **options)
