"""bernoulli_mixture: the model (kernels, data layout, start) for cemodel.runtime.drivers, by cemodel 0.1.0.

Model file: bernoulli_mixture.cem (sha256 fd5efa9b016ca8eb)
Regenerate with `cemodel compile bernoulli_mixture.cem`; do not edit by hand.

Natural parameters are in coefficient form: q(x) ∝ exp(Σ_s lam_s · t_s(x)).
E_<var>_<stat> holds E_q[t_s]; acc_* hold sums over the data plate.
"""

import numpy as np
from numba import njit

from cemodel import runtime as rt

SOURCE = 'bernoulli_mixture.cem'
SOURCE_SHA256 = 'fd5efa9b016ca8ebfbd88bf3b415f81e2bb093de0ae7d1ed118df0ad1588b4be'
DEFAULT_START = 'seeds'  # k-means++ seed items for the categorical locals
LEARNABLE = ('a', 'b')  # hyperparameters empirical Bayes can set (fit(..., learn=...))
DATA_PLATE = 'points'  # the plate the local step runs over
# the global steps (fit, fit_svi, ..., fit_klc) and whether each applies
METHODS = {
    'mf': 'yes',
    'svi': 'yes',
    'svi+': 'yes',
    'svi-avg': 'yes',
    'ssvi-a': 'yes',
    'ssvi': 'yes',
    'klc': 'yes: collapses pi, p, parameterises z',
}
# the E-steps (fit_svi(..., local=...)) and whether each applies
LOCAL_STEPS = {
    'mf': 'yes: local mean field',
    'exact': 'yes: given the globals each local depends only on data, so the local update is its exact conditional p(z_n | y_n, β)',
    'gibbs': 'yes: samples z',
    'cvb0': 'yes: updates q(z), zero-order collapsed VB',
}
STREAMING = 'yes'  # fit_svi from an rt.ItemSource (data on disk)
ITEM_DIMS = ('N',)  # sizes set by the items bound
KLC_LOCALS = ('z',)  # KLC-CG's parameterised Z
KLC_START = 'seeds'  # θ's default start: q(Z) after the seeded start's local step
ROLES = {  # the state's arrays by what they hold (executors, checkpoints)
    'data': ('n_K', 'n_P', 'x'), 'hyper': ('alpha', 'a', 'b'),
    'known': ('present_x', 'alpha_K', 'lgamma_sum_alpha_K', 'lgamma_alpha_K', 'lbeta_a_b'),
    'global': ('lam_p_log', 'lam_p_log1m', 'lam_pi_log'),
    'global_exp': ('E_pi_log', 'E_p_log', 'E_p_log1m'),
    'kept_local': ('E_z_onehot', 'lam_z_onehot'), 'item': ('seed_category', 'item_weight'),
    'statistic': ('acc_z_0', 'acc_x_0', 'acc_x_1'),
    'thread': ('acc_z_0_threads', 'acc_x_0_threads', 'acc_x_1_threads'),
}
_THIS = rt.ModelView(globals())  # the model, as the drivers see it

SPEC = {
    "model": 'bernoulli_mixture',
    "dims": {
        'K': {"default": 100, "ragged_over": None},
        'P': {"default": None, "ragged_over": None},
        'N': {"default": None, "ragged_over": None},
    },
    "plates": {
        'components': {"dim": 'K', "parent": None, "ragged": False},
        'features': {"dim": 'P', "parent": 'components', "ragged": False},
        'points': {"dim": 'N', "parent": None, "ragged": False},
        'dims': {"dim": 'P', "parent": 'points', "ragged": False},
    },
    "observed": {
        'x': {"plates": ['points', 'dims'], "support": 'binary', "shape": [], "categories": None, "missing": 'yes'},
    },
    "covariates": {},
    "not_data": {'alpha': 'hyperparameter', 'a': 'hyperparameter', 'b': 'hyperparameter', 'pi': 'latent', 'p': 'latent', 'z': 'latent'},
}
MISSING = {  # observed entries that may be missing: their q (rt.missing_posteriors)
    'x': {"family": 'Bernoulli', "data_plate": 'a', "why_not": None,
        "terms": ((1.0, ('value',), 'ab', (('E_p_log', 'cb'), ('E_z_onehot', 'ac'))), (-1.0, ('value',), 'ab', (('E_p_log1m', 'cb'), ('E_z_onehot', 'ac'))))},
}


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_z(
        i_points,
        with_children,
        lam_z_onehot,
        n_K,
        E_pi_log,
        n_P,
        x,
        E_p_log,
        present_x,
        E_p_log1m,
        E_z_onehot,
):
    """q(z[n]) = Categorical
        log q(z[n] = v) = E[log pi]_v + Σ_{j2} x[n, j2]·E[log p[v, j2]] + Σ_{j2} E[log(1 − p[v, j2])] - Σ_{j2} x[n, j2]·E[log(1 − p[v, j2])] + const

    (bernoulli_mixture.cem:26:5)
    """
    lam_z_onehot[i_points] = 0.0
    # from z ~ Categorical (bernoulli_mixture.cem:26:5)
    for t_k in range(n_K):
        lam_z_onehot[i_points, t_k] += E_pi_log[0, t_k]
    if with_children:
        # from x ~ Bernoulli (bernoulli_mixture.cem:28:9)
        for i_dims in range(n_P):
            for t_g0 in range(n_K):
                lam_z_onehot[i_points, t_g0] += x[i_points, i_dims] * E_p_log[t_g0, i_dims] * present_x[i_points, i_dims]
        # from x ~ Bernoulli (bernoulli_mixture.cem:28:9)
        for i_dims in range(n_P):
            for t_g0 in range(n_K):
                lam_z_onehot[i_points, t_g0] += E_p_log1m[t_g0, i_dims] * present_x[i_points, i_dims]
        # from x ~ Bernoulli (bernoulli_mixture.cem:28:9)
        for i_dims in range(n_P):
            for t_g0 in range(n_K):
                lam_z_onehot[i_points, t_g0] += -x[i_points, i_dims] * E_p_log1m[t_g0, i_dims] * present_x[i_points, i_dims]
    rt.categorical_expected_stats(lam_z_onehot[i_points], E_z_onehot[i_points])


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
        E_z_onehot,
        n_K,
        lam_z_onehot,
        E_pi_log,
        n_P,
        x,
        E_p_log,
        present_x,
        E_p_log1m,
        item_weight,
        evaluate,
        acc_z_0_threads,
        acc_x_0_threads,
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
        acc_z_0_t = acc_z_0_threads[thread]
        acc_x_0_t = acc_x_0_threads[thread]
        acc_x_1_t = acc_x_1_threads[thread]
        elbo = 0.0
        stop_position = (thread + 1) * items.shape[0] // n_threads
        for position in range(thread * items.shape[0] // n_threads, stop_position):
            i_points = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_points + 1:
                rt.prefetch_row(item_weight, items[position + 1])
                rt.prefetch_row(lam_z_onehot, items[position + 1])
                rt.prefetch_row(E_z_onehot, items[position + 1])
                rt.prefetch_row(x, items[position + 1])
            if seeding:  # k-means++ seed items: seed c is all category c
                E_z_onehot[i_points] = 0.0
                if 0 <= seed_category[i_points] < n_K:
                    E_z_onehot[i_points, seed_category[i_points]] = 1.0
            else:
                update_z(i_points, True, lam_z_onehot, n_K, E_pi_log, n_P, x, E_p_log, present_x, E_p_log1m, E_z_onehot)
            # acc_z_0[k] += q(z[points]=k)  (bernoulli_mixture.cem:26:5)
            for t_k in range(n_K):
                acc_z_0_t[t_k] += item_weight[i_points] * E_z_onehot[i_points, t_k]
            # acc_x_0[g0, @dims] += x[points, dims] · q(z[points]=g0) · present(x[points, dims])  (bernoulli_mixture.cem:28:9)
            for i_dims in range(n_P):
                for t_g0 in range(n_K):
                    acc_x_0_t[t_g0, i_dims] += item_weight[i_points] * x[i_points, i_dims] * E_z_onehot[i_points, t_g0] * present_x[i_points, i_dims]
            # acc_x_1[g0, @dims] += q(z[points]=g0) · present(x[points, dims])  (bernoulli_mixture.cem:28:9)
            for i_dims in range(n_P):
                for t_g0 in range(n_K):
                    acc_x_1_t[t_g0, i_dims] += item_weight[i_points] * E_z_onehot[i_points, t_g0] * present_x[i_points, i_dims]
            # ELBO: local terms and local entropies (a stochastic step has no use for them)
            if evaluate:
                elbo += (rt.categorical_entropy(E_z_onehot[i_points]))
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy")
def evidence_z(i_points, lam_z_onehot, n_K, E_pi_log, n_P, x, E_p_log, present_x, E_p_log1m):
    """lam_z_onehot[row, c] = exp(λ_c − max_c λ_c), λ the messages to z from data and globals
    (every message but the integrated-out proportions'): the part of its conditional that
    stays fixed during a Gibbs or CVB0 step.
    """
    lam_z_onehot[i_points] = 0.0
    # from z ~ Categorical (bernoulli_mixture.cem:26:5)
    for t_k in range(n_K):
        lam_z_onehot[i_points, t_k] += E_pi_log[0, t_k]
    # from x ~ Bernoulli (bernoulli_mixture.cem:28:9)
    for i_dims in range(n_P):
        for t_g0 in range(n_K):
            lam_z_onehot[i_points, t_g0] += x[i_points, i_dims] * E_p_log[t_g0, i_dims] * present_x[i_points, i_dims]
    # from x ~ Bernoulli (bernoulli_mixture.cem:28:9)
    for i_dims in range(n_P):
        for t_g0 in range(n_K):
            lam_z_onehot[i_points, t_g0] += E_p_log1m[t_g0, i_dims] * present_x[i_points, i_dims]
    # from x ~ Bernoulli (bernoulli_mixture.cem:28:9)
    for i_dims in range(n_P):
        for t_g0 in range(n_K):
            lam_z_onehot[i_points, t_g0] += -x[i_points, i_dims] * E_p_log1m[t_g0, i_dims] * present_x[i_points, i_dims]
    top = lam_z_onehot[i_points].max()
    for t_c in range(n_K):
        lam_z_onehot[i_points, t_c] = np.exp(lam_z_onehot[i_points, t_c] - top)


@njit(cache=True, nogil=True, error_model="numpy")
def local_step_gibbs(
        items,
        sweeps,
        burn_in,
        lam_z_onehot,
        n_K,
        E_pi_log,
        n_P,
        x,
        E_p_log,
        present_x,
        E_p_log1m,
        E_z_onehot,
        item_weight,
        acc_z_0,
        acc_x_0,
        acc_x_1,
):
    """Gibbs local step: each item's assignments sampled from their conditionals with no proportions integrated out,
    `sweeps` sweeps, q(z) = the one-hot counts averaged over the sweeps after burn_in (Mimno et al. 2012).

        p(z_i = c | z_¬i, y, β) ∝ · exp(Σ_children log p(y | z_i = c, β))_c

    Then the sufficient statistics, as local_step.
    """
    p_z = np.empty(n_K)
    assign_z = np.empty(64, np.int64)  # one assignment per token instance, grown as needed
    for position in range(items.shape[0]):
        i_points = items[position]
        # the fixed part of the conditional
        evidence_z(i_points, lam_z_onehot, n_K, E_pi_log, n_P, x, E_p_log, present_x, E_p_log1m)
        needed_z = 0
        needed_z += int(1.0 + 0.5)
        if needed_z > assign_z.shape[0]:
            assign_z = np.empty(2 * needed_z, np.int64)
        # start: each token drawn given the ones before it
        position_z = 0
        E_z_onehot[i_points] = 0.0
        for j in range(int(1.0 + 0.5)):
            total = 0.0
            for t_c in range(n_K):
                p_z[t_c] = lam_z_onehot[i_points, t_c]
                total += p_z[t_c]
            uniform = np.random.random() * total
            t_c = 0
            cumulative = p_z[0]
            while cumulative < uniform and t_c < n_K - 1:
                t_c += 1
                cumulative += p_z[t_c]
            assign_z[position_z] = t_c
            position_z += 1
        for sweep in range(sweeps):
            position_z = 0
            for j in range(int(1.0 + 0.5)):
                t_c = assign_z[position_z]
                total = 0.0
                for t_c in range(n_K):
                    p_z[t_c] = lam_z_onehot[i_points, t_c]
                    total += p_z[t_c]
                uniform = np.random.random() * total
                t_c = 0
                cumulative = p_z[0]
                while cumulative < uniform and t_c < n_K - 1:
                    t_c += 1
                    cumulative += p_z[t_c]
                assign_z[position_z] = t_c
                if sweep >= burn_in:
                    E_z_onehot[i_points, t_c] += 1.0
                position_z += 1
        instances = int(1.0 + 0.5)
        if instances > 0:
            E_z_onehot[i_points] /= instances * (sweeps - burn_in)
        else:
            E_z_onehot[i_points] = lam_z_onehot[i_points] / lam_z_onehot[i_points].sum()
        # acc_z_0[k] += q(z[points]=k)  (bernoulli_mixture.cem:26:5)
        for t_k in range(n_K):
            acc_z_0[t_k] += item_weight[i_points] * E_z_onehot[i_points, t_k]
        # acc_x_0[g0, @dims] += x[points, dims] · q(z[points]=g0) · present(x[points, dims])  (bernoulli_mixture.cem:28:9)
        for i_dims in range(n_P):
            for t_g0 in range(n_K):
                acc_x_0[t_g0, i_dims] += item_weight[i_points] * x[i_points, i_dims] * E_z_onehot[i_points, t_g0] * present_x[i_points, i_dims]
        # acc_x_1[g0, @dims] += q(z[points]=g0) · present(x[points, dims])  (bernoulli_mixture.cem:28:9)
        for i_dims in range(n_P):
            for t_g0 in range(n_K):
                acc_x_1[t_g0, i_dims] += item_weight[i_points] * E_z_onehot[i_points, t_g0] * present_x[i_points, i_dims]


@njit(cache=True, nogil=True, error_model="numpy")
def local_step_cvb0(
        items,
        max_local_iter,
        local_tol,
        lam_z_onehot,
        n_K,
        E_pi_log,
        n_P,
        x,
        E_p_log,
        present_x,
        E_p_log1m,
        E_z_onehot,
        item_weight,
        acc_z_0,
        acc_x_0,
        acc_x_1,
):
    """CVB0 local step: each item's q(z) updated with no proportions integrated out, until the mean absolute
    change of q(z) is below local_tol (Asuncion et al. 2009).

        q(z_i = c) ∝ · exp(Σ_children E[log p(y | z_i = c, β)])_c

    Then the sufficient statistics, as local_step.
    """
    p_z = np.empty(n_K)
    for position in range(items.shape[0]):
        i_points = items[position]
        # the fixed part of the conditional
        evidence_z(i_points, lam_z_onehot, n_K, E_pi_log, n_P, x, E_p_log, present_x, E_p_log1m)
        # start: each row given the ones before it
        total = 0.0
        for t_c in range(n_K):
            p_z[t_c] = lam_z_onehot[i_points, t_c]
            total += p_z[t_c]
        w_row = 1.0
        for t_c in range(n_K):
            E_z_onehot[i_points, t_c] = p_z[t_c] / total
        # acc_z_0[k] += q(z[points]=k)  (bernoulli_mixture.cem:26:5)
        for t_k in range(n_K):
            acc_z_0[t_k] += item_weight[i_points] * E_z_onehot[i_points, t_k]
        # acc_x_0[g0, @dims] += x[points, dims] · q(z[points]=g0) · present(x[points, dims])  (bernoulli_mixture.cem:28:9)
        for i_dims in range(n_P):
            for t_g0 in range(n_K):
                acc_x_0[t_g0, i_dims] += item_weight[i_points] * x[i_points, i_dims] * E_z_onehot[i_points, t_g0] * present_x[i_points, i_dims]
        # acc_x_1[g0, @dims] += q(z[points]=g0) · present(x[points, dims])  (bernoulli_mixture.cem:28:9)
        for i_dims in range(n_P):
            for t_g0 in range(n_K):
                acc_x_1[t_g0, i_dims] += item_weight[i_points] * E_z_onehot[i_points, t_g0] * present_x[i_points, i_dims]


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
        n_K,
        n_P,
):
    """q(p[k, j]) = Beta(a, b)
        a = a + Σ_{n} x[n, j]·q(z[n] = k)
        b = b + Σ_{n} q(z[n] = k) - Σ_{n} x[n, j]·q(z[n] = k)

    (bernoulli_mixture.cem:23:9)
    """
    for i_components in range(n_K):
        for i_features in range(n_P):
            lam_p_log[i_components, i_features] = 0.0
            lam_p_log1m[i_components, i_features] = 0.0
            # from p ~ Beta (bernoulli_mixture.cem:23:9)
            lam_p_log[i_components, i_features] += a
            # from p ~ Beta (bernoulli_mixture.cem:23:9)
            lam_p_log[i_components, i_features] += -1.0
            # from p ~ Beta (bernoulli_mixture.cem:23:9)
            lam_p_log1m[i_components, i_features] += b
            # from p ~ Beta (bernoulli_mixture.cem:23:9)
            lam_p_log1m[i_components, i_features] += -1.0
            # from x ~ Bernoulli (bernoulli_mixture.cem:28:9)
            lam_p_log[i_components, i_features] += data_scale * acc_x_0[i_components, i_features]
            # from x ~ Bernoulli (bernoulli_mixture.cem:28:9)
            lam_p_log1m[i_components, i_features] += data_scale * acc_x_1[i_components, i_features]
            # from x ~ Bernoulli (bernoulli_mixture.cem:28:9)
            lam_p_log1m[i_components, i_features] += -data_scale * acc_x_0[i_components, i_features]
            if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
                E_p_log[i_components, i_features], E_p_log1m[i_components, i_features] = rt.beta_expected_stats(lam_p_log[i_components, i_features], lam_p_log1m[i_components, i_features])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_pi(data_scale, lam_pi_log, n_K, alpha_K, acc_z_0, expect, E_pi_log):
    """q(pi) = Dirichlet(α)
        α_v = (alpha / K) + Σ_{n} q(z[n] = v)

    (bernoulli_mixture.cem:20:1)
    """
    lam_pi_log[0] = 0.0
    # from pi ~ Dirichlet (bernoulli_mixture.cem:20:1)
    for t_k in range(n_K):
        lam_pi_log[0, t_k] += alpha_K
    # from pi ~ Dirichlet (bernoulli_mixture.cem:20:1)
    for t_k in range(n_K):
        lam_pi_log[0, t_k] += -1.0
    # from z ~ Categorical (bernoulli_mixture.cem:26:5)
    for t_k in range(n_K):
        lam_pi_log[0, t_k] += data_scale * acc_z_0[t_k]
    if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
        rt.dirichlet_expected_stats(lam_pi_log[0], E_pi_log[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def refresh_globals(lam_p_log, E_p_log, lam_p_log1m, E_p_log1m, n_K, n_P, lam_pi_log, E_pi_log):
    """Expected statistics of the globals from their natural parameters."""
    for i_components in range(n_K):
        for i_features in range(n_P):
            E_p_log[i_components, i_features], E_p_log1m[i_components, i_features] = rt.beta_expected_stats(lam_p_log[i_components, i_features], lam_p_log1m[i_components, i_features])
    rt.dirichlet_expected_stats(lam_pi_log[0], E_pi_log[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def elbo_global(
        n_K,
        alpha_K,
        E_pi_log,
        lgamma_sum_alpha_K,
        lgamma_alpha_K,
        n_P,
        a,
        E_p_log,
        b,
        E_p_log1m,
        lbeta_a_b,
        acc_z_0,
        acc_x_0,
        acc_x_1,
        lam_p_log,
        lam_p_log1m,
        lam_pi_log,
):
    """ELBO terms of the global factors (see elbo_terms in the README)."""
    elbo = 0.0
    # E[log p(pi | ...)]  (bernoulli_mixture.cem:20:1)
    for t_k in range(n_K):
        elbo += alpha_K * E_pi_log[0, t_k]
    for t_k in range(n_K):
        elbo += -E_pi_log[0, t_k]
    elbo += lgamma_sum_alpha_K
    for t_k in range(n_K):
        elbo += -lgamma_alpha_K
    # E[log p(p | ...)]  (bernoulli_mixture.cem:23:9)
    for i_components in range(n_K):
        for i_features in range(n_P):
            elbo += a * E_p_log[i_components, i_features]
    for i_components in range(n_K):
        for i_features in range(n_P):
            elbo += -E_p_log[i_components, i_features]
    for i_components in range(n_K):
        for i_features in range(n_P):
            elbo += b * E_p_log1m[i_components, i_features]
    for i_components in range(n_K):
        for i_features in range(n_P):
            elbo += -E_p_log1m[i_components, i_features]
    for i_components in range(n_K):
        for i_features in range(n_P):
            elbo += -lbeta_a_b
    # E[log p(z | ...)]  (bernoulli_mixture.cem:26:5)
    for t_k in range(n_K):
        elbo += acc_z_0[t_k] * E_pi_log[0, t_k]
    # E[log p(x | ...)]  (bernoulli_mixture.cem:28:9)
    for i_dims in range(n_P):
        for t_g0 in range(n_K):
            elbo += acc_x_0[t_g0, i_dims] * E_p_log[t_g0, i_dims]
    for i_dims in range(n_P):
        for t_g0 in range(n_K):
            elbo += acc_x_1[t_g0, i_dims] * E_p_log1m[t_g0, i_dims]
    for i_dims in range(n_P):
        for t_g0 in range(n_K):
            elbo += -acc_x_0[t_g0, i_dims] * E_p_log1m[t_g0, i_dims]
    # entropy of q(p)
    for i_components in range(n_K):
        for i_features in range(n_P):
            elbo += rt.beta_log_normalizer(lam_p_log[i_components, i_features], lam_p_log1m[i_components, i_features]) - lam_p_log[i_components, i_features] * E_p_log[i_components, i_features] - lam_p_log1m[i_components, i_features] * E_p_log1m[i_components, i_features]
    # entropy of q(pi)
    elbo += rt.dirichlet_log_normalizer(lam_pi_log[0]) - rt.frobenius(lam_pi_log[0], E_pi_log[0])
    return elbo


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def klc_stats(
        share_start,
        share_stop,
        n_threads,
        items,
        lam_z_onehot,
        E_z_onehot,
        theta_z,
        item_weight,
        n_K,
        n_P,
        x,
        present_x,
        acc_z_0_threads,
        acc_x_0_threads,
        acc_x_1_threads,
):
    """KLC statistics: q(Z) = softmax(θ), each collapsed local's mean-field update given q(Z),
    and the collapsed globals' sufficient statistics (accumulators).
    Returns the ELBO terms that involve only local variables and data.
    """
    shares_total = 0.0
    for thread in range(share_start, share_stop):  # one call runs these shares, one after another
        acc_z_0_t = acc_z_0_threads[thread]
        acc_x_0_t = acc_x_0_threads[thread]
        acc_x_1_t = acc_x_1_threads[thread]
        elbo = 0.0
        stop_position = (thread + 1) * items.shape[0] // n_threads
        for position in range(thread * items.shape[0] // n_threads, stop_position):
            i_points = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_points + 1:
                rt.prefetch_row(item_weight, items[position + 1])
                rt.prefetch_row(lam_z_onehot, items[position + 1])
                rt.prefetch_row(E_z_onehot, items[position + 1])
                rt.prefetch_row(x, items[position + 1])
            # q(z) = softmax(θ) per row
            lam_z_onehot[i_points] = theta_z[i_points]
            rt.categorical_expected_stats(lam_z_onehot[i_points], E_z_onehot[i_points])
            # acc_z_0[k] += q(z[points]=k)  (bernoulli_mixture.cem:26:5)
            for t_k in range(n_K):
                acc_z_0_t[t_k] += item_weight[i_points] * E_z_onehot[i_points, t_k]
            # acc_x_0[g0, @dims] += x[points, dims] · q(z[points]=g0) · present(x[points, dims])  (bernoulli_mixture.cem:28:9)
            for i_dims in range(n_P):
                for t_g0 in range(n_K):
                    acc_x_0_t[t_g0, i_dims] += item_weight[i_points] * x[i_points, i_dims] * E_z_onehot[i_points, t_g0] * present_x[i_points, i_dims]
            # acc_x_1[g0, @dims] += q(z[points]=g0) · present(x[points, dims])  (bernoulli_mixture.cem:28:9)
            for i_dims in range(n_P):
                for t_g0 in range(n_K):
                    acc_x_1_t[t_g0, i_dims] += item_weight[i_points] * E_z_onehot[i_points, t_g0] * present_x[i_points, i_dims]
            # ELBO: local terms and local entropies
            elbo += (rt.categorical_entropy(E_z_onehot[i_points]))
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def klc_gradient(
        share_start,
        share_stop,
        n_threads,
        items,
        lam_z_onehot,
        E_z_onehot,
        theta_z,
        natgrad_z,
        grad_z,
        n_K,
        E_pi_log,
        n_P,
        x,
        E_p_log,
        present_x,
        E_p_log1m,
):
    """KLC gradients at θ, with the collapsed variables at q*(X) (klc_stats and the global updates
    first): natgrad = θ̂ − θ (eq. 15), grad = w (diag(q) − q qᵀ) natgrad.
    Returns ⟨natgrad, grad⟩, the squared Riemannian norm (eq. 16).
    """
    shares_total = 0.0
    for thread in range(share_start, share_stop):  # one call runs these shares, one after another
        norm = 0.0
        stop_position = (thread + 1) * items.shape[0] // n_threads
        for position in range(thread * items.shape[0] // n_threads, stop_position):
            i_points = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_points + 1:
                rt.prefetch_row(lam_z_onehot, items[position + 1])
                rt.prefetch_row(E_z_onehot, items[position + 1])
                rt.prefetch_row(x, items[position + 1])
            # q(Z) = softmax(θ) per row
            lam_z_onehot[i_points] = theta_z[i_points]
            rt.categorical_expected_stats(lam_z_onehot[i_points], E_z_onehot[i_points])
            # θ̂ = the mean-field target of q(z) given q*(X)
            update_z(i_points, True, lam_z_onehot, n_K, E_pi_log, n_P, x, E_p_log, present_x, E_p_log1m, E_z_onehot)
            natgrad_z[i_points] = lam_z_onehot[i_points] - theta_z[i_points]  # g̃ = θ̂ − θ
            # q(z) back to softmax(θ) for the other rows' targets
            lam_z_onehot[i_points] = theta_z[i_points]
            rt.categorical_expected_stats(lam_z_onehot[i_points], E_z_onehot[i_points])
            mean = 0.0
            for t_c in range(n_K):
                mean += E_z_onehot[i_points, t_c] * natgrad_z[i_points, t_c]
            for t_c in range(n_K):
                # g = w (diag(q) − q qᵀ) g̃
                grad_z[i_points, t_c] = E_z_onehot[i_points, t_c] * (natgrad_z[i_points, t_c] - mean)
                norm += grad_z[i_points, t_c] * natgrad_z[i_points, t_c]
        shares_total += norm  # summed in share order, as rt.run_shares sums
    return shares_total


def _prepare(data, hypers, dims, seed, init, start, max_local_iter, local_tol, share=None):
    """Bind and check the data, evaluate hyperparameters and knowns, allocate the arrays, start the globals.
    share: out of core, the fit's state, whose globals, hyperparameters and statistics `data`'s minibatch shares.
    """
    hypers = rt.check_hyper_names(hypers, ['alpha', 'a', 'b'])
    bound = rt.bind_data(SPEC, data, dims, missing=True)
    n_K, n_P, n_N = bound.dims['K'], bound.dims['P'], bound.dims['N']
    # refuse before allocating more than the machine's memory
    rt.check_memory(bound, {('K', 'P'): 6, (1, 'K'): 2, ('N', 'K'): 2, ('K',): 1, ('threads', 'K'): 1, ('threads', 'K', 'P'): 2, ('N',): 3})
    x = bound.arrays['x']
    # hyperparameters (defaults from the model file; out of core the fit's current values)
    alpha = rt.hyper_value(hypers, 'alpha', 20.0, ()) if share is None else share.alpha
    a = rt.hyper_value(hypers, 'a', 1.0, (), domain='shape') if share is None else share.a
    b = rt.hyper_value(hypers, 'b', 1.0, (), domain='shape') if share is None else share.b
    # known quantities: functions of hyperparameters and data
    alpha_K = (alpha / n_K)  # value(repeat((alpha / K), K))
    lgamma_sum_alpha_K = rt.gammaln(n_K * (alpha / n_K))  # lgamma_sum(repeat((alpha / K), K))
    lgamma_alpha_K = rt.gammaln((alpha / n_K))  # lgamma(repeat((alpha / K), K))
    lbeta_a_b = rt.lbeta(a, b)  # lbeta(a, b)
    present_x = rt.present(bound, 'x')  # present(x[points, dims])
    # variational parameters (natural, coefficient form) and E[t]
    lam_p_log, E_p_log = (np.zeros((n_K, n_P)), np.zeros((n_K, n_P))) if share is None else (share.lam_p_log, share.E_p_log)
    lam_p_log1m, E_p_log1m = (np.zeros((n_K, n_P)), np.zeros((n_K, n_P))) if share is None else (share.lam_p_log1m, share.E_p_log1m)
    lam_pi_log, E_pi_log = (np.zeros((1, n_K)), np.zeros((1, n_K))) if share is None else (share.lam_pi_log, share.E_pi_log)
    lam_z_onehot, E_z_onehot = np.zeros((n_N, n_K)), np.zeros((n_N, n_K))
    # sufficient statistics the local step hands to the global step (out of core added up over minibatches)
    acc_z_0 = np.zeros((n_K,)) if share is None else share.acc_z_0
    acc_x_0 = np.zeros((n_K, n_P)) if share is None else share.acc_x_0
    acc_x_1 = np.zeros((n_K, n_P)) if share is None else share.acc_x_1
    # the local step's shares: one per thread, fewer for small data
    n_threads = rt.share_count(bound)
    acc_z_0_threads = rt.thread_copies(n_threads, acc_z_0) if share is None else share.acc_z_0_threads
    acc_x_0_threads = rt.thread_copies(n_threads, acc_x_0) if share is None else share.acc_x_0_threads
    acc_x_1_threads = rt.thread_copies(n_threads, acc_x_1) if share is None else share.acc_x_1_threads
    all_items = np.arange(n_N)  # the local step runs over these
    item_weight = np.ones(n_N)  # each item's weight in the statistics (SVI+ perturbs it)
    seed_category = np.full(n_N, -1)
    if share is not None:  # out of core: a minibatch's state, sharing the fit's
        return rt.State(bound=bound, alpha=alpha, a=a, b=b, seed_category=seed_category, E_z_onehot=E_z_onehot, n_K=n_K, lam_z_onehot=lam_z_onehot, E_pi_log=E_pi_log, n_P=n_P, x=x, E_p_log=E_p_log, present_x=present_x, E_p_log1m=E_p_log1m, item_weight=item_weight, acc_z_0_threads=acc_z_0_threads, acc_x_0_threads=acc_x_0_threads, acc_x_1_threads=acc_x_1_threads, acc_z_0=acc_z_0, acc_x_0=acc_x_0, acc_x_1=acc_x_1, lam_p_log=lam_p_log, lam_p_log1m=lam_p_log1m, lam_pi_log=lam_pi_log, alpha_K=alpha_K, lgamma_sum_alpha_K=lgamma_sum_alpha_K, lgamma_alpha_K=lgamma_alpha_K, lbeta_a_b=lbeta_a_b, all_items=all_items)
    # start every global at its prior
    update_p(0.0, lam_p_log, lam_p_log1m, a, b, acc_x_0, acc_x_1, True, E_p_log, E_p_log1m, n_K, n_P)
    update_pi(0.0, lam_pi_log, n_K, alpha_K, acc_z_0, True, E_pi_log)
    if init is not None:  # warm start: the globals' natural parameters from an earlier fit
        rt.load_state(init, {'lam_p_log': lam_p_log, 'lam_p_log1m': lam_p_log1m, 'lam_pi_log': lam_pi_log})
        refresh_globals(lam_p_log, E_p_log, lam_p_log1m, E_p_log1m, n_K, n_P, lam_pi_log, E_pi_log)
    start = DEFAULT_START if start is None else start
    if init is None and start == 'seeds':
        # start from k-means++ seed items (see cemodel.runtime.seeding); not part of the ELBO trace
        seed_category = rt.seed_categories(SPEC, bound.arrays, 'points', n_N, n_K, seed, bound.missing)
        # the globals start from the seed items' statistics alone
        seed_items = np.flatnonzero(seed_category >= 0)
        acc_z_0[...] = 0.0
        acc_x_0[...] = 0.0
        acc_x_1[...] = 0.0
        rt.run_shares(local_step, acc_z_0_threads.shape[0], (True, seed_items, seed_category, max_local_iter, local_tol, E_z_onehot, n_K, lam_z_onehot, E_pi_log, n_P, x, E_p_log, present_x, E_p_log1m, item_weight, False, acc_z_0_threads, acc_x_0_threads, acc_x_1_threads,), ((acc_z_0, acc_z_0_threads), (acc_x_0, acc_x_0_threads), (acc_x_1, acc_x_1_threads),))
        update_p(1.0, lam_p_log, lam_p_log1m, a, b, acc_x_0, acc_x_1, True, E_p_log, E_p_log1m, n_K, n_P)
        update_pi(1.0, lam_pi_log, n_K, alpha_K, acc_z_0, True, E_pi_log)
    elif init is None and start == 'random':
        # start from random pseudo-counts on the count-type globals (Hoffman et al. 2010)
        rng = np.random.default_rng(seed)
        lam_p_log += rng.gamma(100.0, 0.01, lam_p_log.shape)
        lam_p_log1m += rng.gamma(100.0, 0.01, lam_p_log1m.shape)
        lam_pi_log += rng.gamma(100.0, 0.01, lam_pi_log.shape)
        refresh_globals(lam_p_log, E_p_log, lam_p_log1m, E_p_log1m, n_K, n_P, lam_pi_log, E_pi_log)
    elif init is None and start == 'prior':
        raise rt.CemDataError("start: expected 'seeds' or 'random', found 'prior' (from the prior the components start alike and stay alike)")
    elif init is None:
        raise rt.CemDataError(f"start: expected 'seeds' or 'random', found {start!r}")
    return rt.State(bound=bound, alpha=alpha, a=a, b=b, seed_category=seed_category, E_z_onehot=E_z_onehot, n_K=n_K, lam_z_onehot=lam_z_onehot, E_pi_log=E_pi_log, n_P=n_P, x=x, E_p_log=E_p_log, present_x=present_x, E_p_log1m=E_p_log1m, item_weight=item_weight, acc_z_0_threads=acc_z_0_threads, acc_x_0_threads=acc_x_0_threads, acc_x_1_threads=acc_x_1_threads, acc_z_0=acc_z_0, acc_x_0=acc_x_0, acc_x_1=acc_x_1, lam_p_log=lam_p_log, lam_p_log1m=lam_p_log1m, lam_pi_log=lam_pi_log, alpha_K=alpha_K, lgamma_sum_alpha_K=lgamma_sum_alpha_K, lgamma_alpha_K=lgamma_alpha_K, lbeta_a_b=lbeta_a_b, all_items=all_items)


def _learn(s, learn, rho=1.0, items=slice(None)):
    """Empirical Bayes (Minka 2000): each learned hyperparameter a step rho towards its ELBO maximiser given q."""
    if 'a' in learn:  # the prior of p
        s.a = (1.0 - rho) * s.a + rho * rt.learn_beta_param(s.b, s.E_p_log)
    if 'b' in learn:  # the prior of p
        s.b = (1.0 - rho) * s.b + rho * rt.learn_beta_param(s.a, s.E_p_log1m)
    # known quantities that depend on hyperparameters
    s.lbeta_a_b = rt.lbeta(s.a, s.b)


def _result(s, trace, converged, seconds, items=True):
    """The posterior in usual parameters, expectations and the state; items=False: the globals only."""
    posterior = {}
    state = {'lam_p_log': s.lam_p_log, 'lam_p_log1m': s.lam_p_log1m, 'lam_pi_log': s.lam_pi_log}
    p__a, p__b = rt.beta_params(s.lam_p_log, s.lam_p_log1m)
    posterior['p.a'] = p__a
    posterior['p.b'] = p__b
    posterior['E[log p]'] = s.E_p_log
    posterior['E[log1m p]'] = s.E_p_log1m
    pi__alpha = rt.dirichlet_params(s.lam_pi_log)
    posterior['pi.alpha'] = pi__alpha[0]
    posterior['E[log pi]'] = s.E_pi_log[0]
    if items:  # out of core the state holds one minibatch's items
        z__probs = rt.categorical_params(s.lam_z_onehot)
        posterior['z.probs'] = z__probs
        posterior['E[onehot z]'] = s.E_z_onehot
        state['lam_z_onehot'] = s.lam_z_onehot
    missing = rt.missing_posteriors(s, MISSING) if items else {}
    return rt.FitResult(posterior=posterior, elbo=np.array(trace), iterations=len(trace), converged=converged, seconds=seconds, dims=dict(s.bound.dims), hypers={'alpha': s.alpha, 'a': s.a, 'b': s.b}, state=state, missing=missing)


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
    return rt.run_shares(local_step, s.acc_z_0_threads.shape[0], (seeding, items, s.seed_category, max_local_iter, local_tol, s.E_z_onehot, s.n_K, s.lam_z_onehot, s.E_pi_log, s.n_P, s.x, s.E_p_log, s.present_x, s.E_p_log1m, s.item_weight, evaluate, s.acc_z_0_threads, s.acc_x_0_threads, s.acc_x_1_threads,), ((s.acc_z_0, s.acc_z_0_threads), (s.acc_x_0, s.acc_x_0_threads), (s.acc_x_1, s.acc_x_1_threads),))


def run_local_step_gibbs(s, items, sweeps, burn_in):
    return local_step_gibbs(items, sweeps, burn_in, s.lam_z_onehot, s.n_K, s.E_pi_log, s.n_P, s.x, s.E_p_log, s.present_x, s.E_p_log1m, s.E_z_onehot, s.item_weight, s.acc_z_0, s.acc_x_0, s.acc_x_1)


def run_local_step_cvb0(s, items, max_local_iter, local_tol):
    return local_step_cvb0(items, max_local_iter, local_tol, s.lam_z_onehot, s.n_K, s.E_pi_log, s.n_P, s.x, s.E_p_log, s.present_x, s.E_p_log1m, s.E_z_onehot, s.item_weight, s.acc_z_0, s.acc_x_0, s.acc_x_1)


def _update_p(s, data_scale, expect=True):
    update_p(data_scale, s.lam_p_log, s.lam_p_log1m, s.a, s.b, s.acc_x_0, s.acc_x_1, expect, s.E_p_log, s.E_p_log1m, s.n_K, s.n_P)


def _update_pi(s, data_scale, expect=True):
    update_pi(data_scale, s.lam_pi_log, s.n_K, s.alpha_K, s.acc_z_0, expect, s.E_pi_log)


def refresh(s):
    refresh_globals(s.lam_p_log, s.E_p_log, s.lam_p_log1m, s.E_p_log1m, s.n_K, s.n_P, s.lam_pi_log, s.E_pi_log)


def elbo_of_globals(s):
    return elbo_global(s.n_K, s.alpha_K, s.E_pi_log, s.lgamma_sum_alpha_K, s.lgamma_alpha_K, s.n_P, s.a, s.E_p_log, s.b, s.E_p_log1m, s.lbeta_a_b, s.acc_z_0, s.acc_x_0, s.acc_x_1, s.lam_p_log, s.lam_p_log1m, s.lam_pi_log)


GLOBALS = (  # the globals as the stochastic drivers move them
    rt.Global('p', 'beta', lam=('lam_p_log', 'lam_p_log1m'), E=('E_p_log', 'E_p_log1m'),
              update=_update_p, aux_draws=2, after_sample=None),
    rt.Global('pi', 'dirichlet', lam=('lam_pi_log',), E=('E_pi_log',),
              update=_update_pi, aux_draws=1, after_sample=None),
)


def fit(data, **options):
    """Batch mean-field VB (options: cemodel.runtime.drivers.mf.fit). One iteration:
        statistics ← 0; elbo = run_local_step(s, s.all_items, ...)  # E-step
        _update_p(s, 1.0)  # q(p)
        _update_pi(s, 1.0)  # q(pi)
        elbo += elbo_of_globals(s)
    """
    return rt.drivers.mf.fit(_THIS, data, **options)


def fit_svi(data, **options):
    """SVI, SVI+ (options: cemodel.runtime.drivers.svi.fit). One step on a minibatch S:
        statistics ← 0; run_local_step(s, S, ...)
        _update_p(s, N / len(S), expect=False)  # λ̂ of q(p)
        _update_pi(s, N / len(S), expect=False)  # λ̂ of q(pi)
        λ ← (1 − ρ)λ + ρλ̂ (rt.blend); refresh(s)
    """
    return rt.drivers.svi.fit(_THIS, data, **options)


def fit_ssvi_a(data, **options):
    """SSVI-A (Hoffman & Blei 2015, eq. 10): fit_svi with the local step given a draw β ~ q(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, **options)


def fit_ssvi(data, **options):
    """SSVI (Hoffman & Blei 2015, eq. 7): fit_ssvi_a with λ̂ = η + V(β, λ)·N/|S| Σ η̂_n(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, apply_v=True, **options)


def _klc_bound(s, theta):
    """L_KL(θ) (eq. 4): the mean-field ELBO with X at q*(X) given q(Z) = softmax(θ) (eq. 9)."""
    s.acc_z_0[...] = 0.0
    s.acc_x_0[...] = 0.0
    s.acc_x_1[...] = 0.0
    value = rt.run_shares(klc_stats, s.acc_z_0_threads.shape[0], (s.all_items, s.lam_z_onehot, s.E_z_onehot, theta[0], s.item_weight, s.n_K, s.n_P, s.x, s.present_x, s.acc_z_0_threads, s.acc_x_0_threads, s.acc_x_1_threads,), ((s.acc_z_0, s.acc_z_0_threads), (s.acc_x_0, s.acc_x_0_threads), (s.acc_x_1, s.acc_x_1_threads),))
    # the collapsed globals at their optimum given q(Z)
    update_p(1.0, s.lam_p_log, s.lam_p_log1m, s.a, s.b, s.acc_x_0, s.acc_x_1, True, s.E_p_log, s.E_p_log1m, s.n_K, s.n_P)
    update_pi(1.0, s.lam_pi_log, s.n_K, s.alpha_K, s.acc_z_0, True, s.E_pi_log)
    return value + elbo_global(s.n_K, s.alpha_K, s.E_pi_log, s.lgamma_sum_alpha_K, s.lgamma_alpha_K, s.n_P, s.a, s.E_p_log, s.b, s.E_p_log1m, s.lbeta_a_b, s.acc_z_0, s.acc_x_0, s.acc_x_1, s.lam_p_log, s.lam_p_log1m, s.lam_pi_log)


def _klc_gradient(s, theta, natgrad, grad):
    """natgrad, grad and ⟨natgrad, grad⟩ at θ (call _klc_bound(s, θ) first)."""
    return rt.run_shares(klc_gradient, rt.share_count(s.bound), (s.all_items, s.lam_z_onehot, s.E_z_onehot, theta[0], natgrad[0], grad[0], s.n_K, s.E_pi_log, s.n_P, s.x, s.E_p_log, s.present_x, s.E_p_log1m,), ())


def _klc_shapes(s):
    """The shapes of the softmax parameters θ of q(Z), one per member of KLC_LOCALS."""
    return [(s.bound.dims['N'], s.bound.dims['K'],)]


def _klc_logits(s):
    """θ of q(Z) as the state holds it (its natural parameters), one per member of KLC_LOCALS."""
    return [s.lam_z_onehot.copy()]


def fit_klc(data, **options):
    """KLC-CG (Hensman et al. 2012): pi, p integrated out, q(z) by Riemannian CG."""
    return rt.drivers.klc.fit(_THIS, data, **options)
