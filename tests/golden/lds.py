"""lds: the model (kernels, data layout, start) for cemodel.runtime.drivers, by cemodel 0.1.0.

Model file: lds.cem (sha256 9e89e52d40d9b3c0)
Regenerate with `cemodel compile lds.cem`; do not edit by hand.

Natural parameters are in coefficient form: q(x) ∝ exp(Σ_s lam_s · t_s(x)).
E_<var>_<stat> holds E_q[t_s]; acc_* hold sums over the data plate.
"""

import numpy as np
from numba import njit

from cemodel import runtime as rt

SOURCE = 'lds.cem'
SOURCE_SHA256 = '9e89e52d40d9b3c024c5040b5399cfdf73f40ba8327da9fd8100ce7c10da8a3d'
DEFAULT_START = 'random'  # Normal/MVN means drawn from the prior: breaks the symmetry
LEARNABLE = ('a0', 'b0')  # hyperparameters empirical Bayes can set (fit(..., learn=...))
DATA_PLATE = 'seqs'  # the plate the local step runs over
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
    'gibbs': "no: 'x' is a GaussianChain, a chain whose steps depend on each other; the sampled steps draw independent categorical assignments (the exact step smooths the whole chain instead)",
    'cvb0': "no: 'x' is a GaussianChain, a chain whose steps depend on each other; the sampled steps draw independent categorical assignments (the exact step smooths the whole chain instead)",
}
STREAMING = 'yes'  # fit_svi from an rt.ItemSource (data on disk)
ITEM_DIMS = ('S', 'T')  # sizes set by the items bound
ROLES = {  # the state's arrays by what they hold (executors, checkpoints)
    'data': ('n_D', 'n_P', 'y', 'steps_ptr', 'steps_weight'),
    'hyper': ('A', 'm0', 'P0', 'nu0', 'W0', 'c', 'a0', 'b0'),
    'known': ('logdet_P0', 'outer_m0', 'dim_x', 'dim_Q', 'inv_W0', 'wishart_lognorm_nu0_W0', 'logdet_eye_D_c', 'eye_D_c', 'dim_C', 'log_b0', 'lgamma_a0'),
    'global': ('lam_C_value', 'lam_C_outer', 'lam_Q_value', 'lam_Q_logdet', 'lam_r_log', 'lam_r_value'),
    'global_exp': ('E_Q_logdet', 'E_Q_value', 'E_r_value', 'E_C_value', 'E_C_outer', 'E_r_log'),
    'item': ('seed_category', 'item_weight'),
    'statistic': ('acc_x_4', 'acc_x_5', 'acc_x_6', 'acc_x_7', 'acc_y_0', 'acc_y_1', 'acc_y_2', 'acc_y_3'),
    'thread': ('acc_x_4_threads', 'lam_x_value_threads', 'lam_x_outer_threads', 'lam_x_start_threads', 'lam_x_start_value_threads', 'lam_x_start_outer_threads', 'lam_x_step_threads', 'lam_x_step_outer_threads', 'lam_x_cross_threads', 'lam_x_prev_outer_threads', 'E_x_value_threads', 'E_x_outer_threads', 'E_x_start_threads', 'E_x_start_value_threads', 'E_x_start_outer_threads', 'E_x_step_threads', 'E_x_step_outer_threads', 'E_x_cross_threads', 'E_x_prev_outer_threads', 'H_x_threads', 'acc_x_5_threads', 'acc_x_6_threads', 'acc_x_7_threads', 'acc_y_0_threads', 'acc_y_1_threads', 'acc_y_2_threads', 'acc_y_3_threads'),
}
_THIS = rt.ModelView(globals())  # the model, as the drivers see it

SPEC = {
    "model": 'lds',
    "dims": {
        'D': {"default": 2, "ragged_over": None},
        'P': {"default": None, "ragged_over": None},
        'S': {"default": None, "ragged_over": None},
        'T': {"default": None, "ragged_over": 'S'},
    },
    "plates": {
        'outputs': {"dim": 'P', "parent": None, "ragged": False},
        'seqs': {"dim": 'S', "parent": None, "ragged": False},
        'steps': {"dim": 'T', "parent": 'seqs', "ragged": True},
        'dims': {"dim": 'P', "parent": 'steps', "ragged": False},
    },
    "observed": {
        'y': {"plates": ['seqs', 'steps', 'dims'], "support": 'real', "shape": [], "categories": None, "missing": 'no: y (lds.cem:38:13) lies in the ragged plate steps, and missing entries are supported in dense arrays only'},
    },
    "covariates": {},
    "not_data": {'A': 'hyperparameter', 'm0': 'hyperparameter', 'P0': 'hyperparameter', 'nu0': 'hyperparameter', 'W0': 'hyperparameter', 'c': 'hyperparameter', 'a0': 'hyperparameter', 'b0': 'hyperparameter', 'Q': 'latent', 'C': 'latent', 'r': 'latent', 'x': 'latent'},
}


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_x(
        i_seqs,
        with_children,
        lam_x_value,
        lam_x_outer,
        lam_x_start,
        lam_x_start_value,
        lam_x_start_outer,
        lam_x_step,
        lam_x_step_outer,
        lam_x_cross,
        lam_x_prev_outer,
        logdet_P0,
        n_D,
        P0,
        m0,
        outer_m0,
        E_Q_logdet,
        E_Q_value,
        A,
        n_P,
        E_r_value,
        y,
        E_C_value,
        E_C_outer,
        steps_ptr,
        E_x_value,
        E_x_outer,
        E_x_start,
        E_x_start_value,
        E_x_start_outer,
        E_x_step,
        E_x_step_outer,
        E_x_cross,
        E_x_prev_outer,
        H_x,
):
    """q(x[s, t]) = GaussianChain, exact by the Kalman/RTS smoother over each sequence: h_t = h (+ h[first] at t = 0), J_tt = J + J[first] at t = 0 or J[not first] after, + J[previous] of step t + 1, J_{t,t−1} = J[cross]
        h_v = Σ_{j2} E[r[j2]]·y[s, t, j2]·E[C[j2]]_v
        h[first]_v = Σ_{i} P0_vi·m0_i
        J_vi = Σ_{j2} E[r[j2]]·E[C[j2] C[j2]ᵀ]_vi
        J[first]_vi = P0_vi
        J[not first]_vi = E[Q]_vi
        J[previous]_vi = Σ_{l,m} E[Q]_lm·A_lv·A_mi
        J[cross]_vi = -Σ_{l} E[Q]_vl·A_li

    (lds.cem:36:9)
    """
    base_steps = steps_ptr[i_seqs]
    for i_steps in range(steps_ptr[i_seqs], steps_ptr[i_seqs + 1]):
        lam_x_value[i_steps - base_steps] = 0.0
        lam_x_outer[i_steps - base_steps] = 0.0
        lam_x_start[i_steps - base_steps] = 0.0
        lam_x_start_value[i_steps - base_steps] = 0.0
        lam_x_start_outer[i_steps - base_steps] = 0.0
        lam_x_step[i_steps - base_steps] = 0.0
        lam_x_step_outer[i_steps - base_steps] = 0.0
        lam_x_cross[i_steps - base_steps] = 0.0
        lam_x_prev_outer[i_steps - base_steps] = 0.0
        # from x ~ GaussianChain (lds.cem:36:9)
        lam_x_start[i_steps - base_steps] += 0.5 * logdet_P0
        # from x ~ GaussianChain (lds.cem:36:9)
        for t_i in range(n_D):
            for t_j in range(n_D):
                lam_x_start_outer[i_steps - base_steps, t_i, t_j] += -0.5 * P0[t_i, t_j]
        # from x ~ GaussianChain (lds.cem:36:9)
        for t_i in range(n_D):
            partial_sum = 0.0
            for t_j in range(n_D):
                partial_sum += P0[t_i, t_j] * m0[t_j]
            lam_x_start_value[i_steps - base_steps, t_i] += partial_sum
        # from x ~ GaussianChain (lds.cem:36:9)
        for t_i in range(n_D):
            for t_j in range(n_D):
                lam_x_start[i_steps - base_steps] += -0.5 * P0[t_i, t_j] * outer_m0[t_i, t_j]
        # from x ~ GaussianChain (lds.cem:36:9)
        lam_x_step[i_steps - base_steps] += 0.5 * E_Q_logdet[0]
        # from x ~ GaussianChain (lds.cem:36:9)
        for t_i in range(n_D):
            for t_j in range(n_D):
                lam_x_step_outer[i_steps - base_steps, t_i, t_j] += -0.5 * E_Q_value[0, t_i, t_j]
        # from x ~ GaussianChain (lds.cem:36:9)
        for t_j in range(n_D):
            for t_i in range(n_D):
                for t_k in range(n_D):
                    lam_x_cross[i_steps - base_steps, t_i, t_k] += E_Q_value[0, t_i, t_j] * A[t_j, t_k]
        # from x ~ GaussianChain (lds.cem:36:9)
        for t_i in range(n_D):
            for t_j in range(n_D):
                for t_k in range(n_D):
                    for t_l in range(n_D):
                        lam_x_prev_outer[i_steps - base_steps, t_k, t_l] += -0.5 * E_Q_value[0, t_i, t_j] * A[t_i, t_k] * A[t_j, t_l]
        if with_children:
            # from y ~ Normal (lds.cem:38:13)
            for i_dims in range(n_P):
                for t_i0 in range(n_D):
                    lam_x_value[i_steps - base_steps, t_i0] += E_r_value[i_dims] * y[i_steps, i_dims] * E_C_value[i_dims, t_i0]
            # from y ~ Normal (lds.cem:38:13)
            for i_dims in range(n_P):
                for t_i1 in range(n_D):
                    for t_i2 in range(n_D):
                        lam_x_outer[i_steps - base_steps, t_i1, t_i2] += -0.5 * E_r_value[i_dims] * E_C_outer[i_dims, t_i1, t_i2]
    # q(chain) ∝ exp(Σ_t λ_t·t(x_t)): one Gaussian with a block-tridiagonal precision; its smoothed moments and entropy
    H_x[0] = rt.gaussian_chain_posterior(lam_x_value, lam_x_outer, lam_x_start, lam_x_start_value, lam_x_start_outer, lam_x_step, lam_x_step_outer, lam_x_cross, lam_x_prev_outer, E_x_value, E_x_outer, E_x_start, E_x_start_value, E_x_start_outer, E_x_step, E_x_step_outer, E_x_cross, E_x_prev_outer, steps_ptr[i_seqs + 1] - steps_ptr[i_seqs])


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
        logdet_P0,
        n_D,
        P0,
        m0,
        outer_m0,
        E_Q_logdet,
        E_Q_value,
        A,
        n_P,
        E_r_value,
        y,
        E_C_value,
        E_C_outer,
        steps_ptr,
        item_weight,
        acc_x_4_threads,
        steps_weight,
        dim_x,
        evaluate,
        lam_x_value_threads,
        lam_x_outer_threads,
        lam_x_start_threads,
        lam_x_start_value_threads,
        lam_x_start_outer_threads,
        lam_x_step_threads,
        lam_x_step_outer_threads,
        lam_x_cross_threads,
        lam_x_prev_outer_threads,
        E_x_value_threads,
        E_x_outer_threads,
        E_x_start_threads,
        E_x_start_value_threads,
        E_x_start_outer_threads,
        E_x_step_threads,
        E_x_step_outer_threads,
        E_x_cross_threads,
        E_x_prev_outer_threads,
        H_x_threads,
        acc_x_5_threads,
        acc_x_6_threads,
        acc_x_7_threads,
        acc_y_0_threads,
        acc_y_1_threads,
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
        lam_x_value = lam_x_value_threads[thread]
        lam_x_outer = lam_x_outer_threads[thread]
        lam_x_start = lam_x_start_threads[thread]
        lam_x_start_value = lam_x_start_value_threads[thread]
        lam_x_start_outer = lam_x_start_outer_threads[thread]
        lam_x_step = lam_x_step_threads[thread]
        lam_x_step_outer = lam_x_step_outer_threads[thread]
        lam_x_cross = lam_x_cross_threads[thread]
        lam_x_prev_outer = lam_x_prev_outer_threads[thread]
        E_x_value = E_x_value_threads[thread]
        E_x_outer = E_x_outer_threads[thread]
        E_x_start = E_x_start_threads[thread]
        E_x_start_value = E_x_start_value_threads[thread]
        E_x_start_outer = E_x_start_outer_threads[thread]
        E_x_step = E_x_step_threads[thread]
        E_x_step_outer = E_x_step_outer_threads[thread]
        E_x_cross = E_x_cross_threads[thread]
        E_x_prev_outer = E_x_prev_outer_threads[thread]
        H_x = H_x_threads[thread]
        acc_x_5_t = acc_x_5_threads[thread]
        acc_x_6_t = acc_x_6_threads[thread]
        acc_x_7_t = acc_x_7_threads[thread]
        acc_y_0_t = acc_y_0_threads[thread]
        acc_y_1_t = acc_y_1_threads[thread]
        acc_y_2_t = acc_y_2_threads[thread]
        acc_y_3_t = acc_y_3_threads[thread]
        elbo = 0.0
        stop_position = (thread + 1) * items.shape[0] // n_threads
        for position in range(thread * items.shape[0] // n_threads, stop_position):
            i_seqs = items[position]
            # the next item's memory, asked for while this one computes
            if position + 1 < stop_position and items[position + 1] != i_seqs + 1:
                rt.prefetch_row(item_weight, items[position + 1])
                rt.prefetch_rows(y, steps_ptr[items[position + 1]], steps_ptr[items[position + 1] + 1])
                rt.prefetch_rows(steps_weight, steps_ptr[items[position + 1]], steps_ptr[items[position + 1] + 1])
            if position + 2 < stop_position and items[position + 2] != i_seqs + 2:
                rt.prefetch_row(steps_ptr, items[position + 2])
            base_steps = steps_ptr[i_seqs]
            update_x(i_seqs, True, lam_x_value, lam_x_outer, lam_x_start, lam_x_start_value, lam_x_start_outer, lam_x_step, lam_x_step_outer, lam_x_cross, lam_x_prev_outer, logdet_P0, n_D, P0, m0, outer_m0, E_Q_logdet, E_Q_value, A, n_P, E_r_value, y, E_C_value, E_C_outer, steps_ptr, E_x_value, E_x_outer, E_x_start, E_x_start_value, E_x_start_outer, E_x_step, E_x_step_outer, E_x_cross, E_x_prev_outer, H_x)
            # acc_x_4[] += E[step x[seqs, steps]]  (lds.cem:36:9)
            for i_steps in range(steps_ptr[i_seqs], steps_ptr[i_seqs + 1]):
                acc_x_4_threads[thread] += item_weight[i_seqs] * E_x_step[i_steps - base_steps] * steps_weight[i_steps]
            # acc_x_5[i, j] += E[step_outer x[seqs, steps]]  (lds.cem:36:9)
            for i_steps in range(steps_ptr[i_seqs], steps_ptr[i_seqs + 1]):
                for t_i in range(n_D):
                    for t_j in range(n_D):
                        acc_x_5_t[t_i, t_j] += item_weight[i_seqs] * E_x_step_outer[i_steps - base_steps, t_i, t_j] * steps_weight[i_steps]
            # acc_x_6[i, j] += A · E[cross x[seqs, steps]]  (lds.cem:36:9)
            for i_steps in range(steps_ptr[i_seqs], steps_ptr[i_seqs + 1]):
                for t_k in range(n_D):
                    for t_i in range(n_D):
                        for t_j in range(n_D):
                            acc_x_6_t[t_i, t_j] += item_weight[i_seqs] * A[t_j, t_k] * E_x_cross[i_steps - base_steps, t_i, t_k] * steps_weight[i_steps]
            # acc_x_7[i, j] += A · A · E[prev_outer x[seqs, steps]]  (lds.cem:36:9)
            for i_steps in range(steps_ptr[i_seqs], steps_ptr[i_seqs + 1]):
                for t_k in range(n_D):
                    for t_l in range(n_D):
                        for t_i in range(n_D):
                            for t_j in range(n_D):
                                acc_x_7_t[t_i, t_j] += item_weight[i_seqs] * A[t_i, t_k] * A[t_j, t_l] * E_x_prev_outer[i_steps - base_steps, t_k, t_l] * steps_weight[i_steps]
            # acc_y_0[@dims] +=   (lds.cem:38:13)
            for i_steps in range(steps_ptr[i_seqs], steps_ptr[i_seqs + 1]):
                for i_dims in range(n_P):
                    acc_y_0_t[i_dims] += item_weight[i_seqs] * steps_weight[i_steps]
            # acc_y_1[@dims] += y[seqs, steps, dims] · y[seqs, steps, dims]  (lds.cem:38:13)
            for i_steps in range(steps_ptr[i_seqs], steps_ptr[i_seqs + 1]):
                for i_dims in range(n_P):
                    acc_y_1_t[i_dims] += item_weight[i_seqs] * y[i_steps, i_dims] * y[i_steps, i_dims] * steps_weight[i_steps]
            # acc_y_2[i0, @dims] += y[seqs, steps, dims] · E[x[seqs, steps]]  (lds.cem:38:13)
            for i_steps in range(steps_ptr[i_seqs], steps_ptr[i_seqs + 1]):
                for i_dims in range(n_P):
                    for t_i0 in range(n_D):
                        acc_y_2_t[t_i0, i_dims] += item_weight[i_seqs] * y[i_steps, i_dims] * E_x_value[i_steps - base_steps, t_i0] * steps_weight[i_steps]
            # acc_y_3[i1, i2, @dims] += E[x[seqs, steps]x[seqs, steps]ᵀ]  (lds.cem:38:13)
            for i_steps in range(steps_ptr[i_seqs], steps_ptr[i_seqs + 1]):
                for i_dims in range(n_P):
                    for t_i1 in range(n_D):
                        for t_i2 in range(n_D):
                            acc_y_3_t[t_i1, t_i2, i_dims] += item_weight[i_seqs] * E_x_outer[i_steps - base_steps, t_i1, t_i2] * steps_weight[i_steps]
            # ELBO: local terms and local entropies (a stochastic step has no use for them)
            if evaluate:
                for i_steps in range(steps_ptr[i_seqs], steps_ptr[i_seqs + 1]):
                    elbo += 0.5 * E_x_start[i_steps - base_steps] * logdet_P0 * steps_weight[i_steps]
                for i_steps in range(steps_ptr[i_seqs], steps_ptr[i_seqs + 1]):
                    for t_i in range(n_D):
                        for t_j in range(n_D):
                            elbo += -0.5 * P0[t_i, t_j] * E_x_start_outer[i_steps - base_steps, t_i, t_j] * steps_weight[i_steps]
                for i_steps in range(steps_ptr[i_seqs], steps_ptr[i_seqs + 1]):
                    for t_i in range(n_D):
                        for t_j in range(n_D):
                            elbo += E_x_start_value[i_steps - base_steps, t_i] * P0[t_i, t_j] * m0[t_j] * steps_weight[i_steps]
                for i_steps in range(steps_ptr[i_seqs], steps_ptr[i_seqs + 1]):
                    for t_i in range(n_D):
                        for t_j in range(n_D):
                            elbo += -0.5 * E_x_start[i_steps - base_steps] * P0[t_i, t_j] * outer_m0[t_i, t_j] * steps_weight[i_steps]
                for i_steps in range(steps_ptr[i_seqs], steps_ptr[i_seqs + 1]):
                    elbo += -0.9189385332046727 * dim_x * steps_weight[i_steps]
                for i_steps in range(steps_ptr[i_seqs], steps_ptr[i_seqs + 1]):
                    for i_dims in range(n_P):
                        elbo += -0.9189385332046727 * steps_weight[i_steps]
                elbo += H_x[0]
        shares_total += elbo  # summed in share order, as rt.run_shares sums
    return shares_total


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_C(
        data_scale,
        lam_C_value,
        lam_C_outer,
        n_D,
        eye_D_c,
        acc_y_2,
        E_r_value,
        acc_y_3,
        expect,
        E_C_value,
        E_C_outer,
        n_P,
):
    """q(C[j]) = MultivariateNormal(mean, precision)
        precision_vi = (eye(D) * c)_vi + Σ_{s,t} E[r[j]]·E[x[s, t] x[s, t]ᵀ]_vi
        precision·mean_v = Σ_{s,t} E[r[j]]·y[s, t, j]·E[x[s, t]]_v

    (lds.cem:31:5)
    """
    for i_outputs in range(n_P):
        lam_C_value[i_outputs] = 0.0
        lam_C_outer[i_outputs] = 0.0
        # from C ~ MultivariateNormal (lds.cem:31:5)
        for t_i in range(n_D):
            for t_j in range(n_D):
                lam_C_outer[i_outputs, t_i, t_j] += -0.5 * eye_D_c[t_i, t_j]
        # from y ~ Normal (lds.cem:38:13)
        for t_i0 in range(n_D):
            lam_C_value[i_outputs, t_i0] += data_scale * acc_y_2[t_i0, i_outputs] * E_r_value[i_outputs]
        # from y ~ Normal (lds.cem:38:13)
        for t_i1 in range(n_D):
            for t_i2 in range(n_D):
                lam_C_outer[i_outputs, t_i1, t_i2] += -0.5 * data_scale * acc_y_3[t_i1, t_i2, i_outputs] * E_r_value[i_outputs]
        if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
            rt.mvn_expected_stats(lam_C_value[i_outputs], lam_C_outer[i_outputs], E_C_value[i_outputs], E_C_outer[i_outputs])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_Q(
        data_scale,
        lam_Q_value,
        lam_Q_logdet,
        nu0,
        dim_Q,
        n_D,
        inv_W0,
        acc_x_4,
        acc_x_5,
        acc_x_6,
        acc_x_7,
        expect,
        E_Q_value,
        E_Q_logdet,
):
    """q(Q) = Wishart(dof, scale)
        dof = nu0 + Σ_{s,t} [x[s, t] not first]
        scale⁻¹_vi = W0⁻¹_vi + Σ_{s,t} E[x[s, t] x[s, t]ᵀ]_vi·[not first] - 2·Σ_{s,t,l} A_il·E[x[s, t] x[s, t − 1]ᵀ]_vl + Σ_{s,t,l,m} A_vl·A_im·E[x[s, t − 1] x[s, t − 1]ᵀ]_lm

    (lds.cem:29:1)
    """
    lam_Q_value[0] = 0.0
    lam_Q_logdet[0] = 0.0
    # from Q ~ Wishart (lds.cem:29:1)
    lam_Q_logdet[0] += 0.5 * nu0
    # from Q ~ Wishart (lds.cem:29:1)
    lam_Q_logdet[0] += -0.5 * dim_Q
    # from Q ~ Wishart (lds.cem:29:1)
    lam_Q_logdet[0] += -0.5
    # from Q ~ Wishart (lds.cem:29:1)
    for t_i in range(n_D):
        for t_j in range(n_D):
            lam_Q_value[0, t_i, t_j] += -0.5 * inv_W0[t_i, t_j]
    # from x ~ GaussianChain (lds.cem:36:9)
    lam_Q_logdet[0] += 0.5 * data_scale * acc_x_4
    # from x ~ GaussianChain (lds.cem:36:9)
    for t_i in range(n_D):
        for t_j in range(n_D):
            lam_Q_value[0, t_i, t_j] += -0.5 * data_scale * acc_x_5[t_i, t_j]
    # from x ~ GaussianChain (lds.cem:36:9)
    for t_i in range(n_D):
        for t_j in range(n_D):
            lam_Q_value[0, t_i, t_j] += data_scale * acc_x_6[t_i, t_j]
    # from x ~ GaussianChain (lds.cem:36:9)
    for t_i in range(n_D):
        for t_j in range(n_D):
            lam_Q_value[0, t_i, t_j] += -0.5 * data_scale * acc_x_7[t_i, t_j]
    if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
        E_Q_logdet[0] = rt.wishart_expected_stats(lam_Q_value[0], lam_Q_logdet[0], E_Q_value[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def update_r(
        data_scale,
        lam_r_log,
        lam_r_value,
        a0,
        b0,
        acc_y_0,
        acc_y_1,
        n_D,
        acc_y_2,
        E_C_value,
        acc_y_3,
        E_C_outer,
        expect,
        E_r_log,
        E_r_value,
        n_P,
):
    """q(r[j]) = Gamma(shape, rate)
        shape = a0 + 0.5·Σ_{s,t} 1
        rate = b0 + 0.5·Σ_{s,t} y[s, t, j]·y[s, t, j] - Σ_{s,t,v} y[s, t, j]·E[C[j]]_v·E[x[s, t]]_v + 0.5·Σ_{s,t,i,l} E[C[j] C[j]ᵀ]_il·E[x[s, t] x[s, t]ᵀ]_il

    (lds.cem:32:5)
    """
    for i_outputs in range(n_P):
        lam_r_log[i_outputs] = 0.0
        lam_r_value[i_outputs] = 0.0
        # from r ~ Gamma (lds.cem:32:5)
        lam_r_log[i_outputs] += a0
        # from r ~ Gamma (lds.cem:32:5)
        lam_r_log[i_outputs] += -1.0
        # from r ~ Gamma (lds.cem:32:5)
        lam_r_value[i_outputs] += -b0
        # from y ~ Normal (lds.cem:38:13)
        lam_r_log[i_outputs] += 0.5 * data_scale * acc_y_0[i_outputs]
        # from y ~ Normal (lds.cem:38:13)
        lam_r_value[i_outputs] += -0.5 * data_scale * acc_y_1[i_outputs]
        # from y ~ Normal (lds.cem:38:13)
        for t_i0 in range(n_D):
            lam_r_value[i_outputs] += data_scale * acc_y_2[t_i0, i_outputs] * E_C_value[i_outputs, t_i0]
        # from y ~ Normal (lds.cem:38:13)
        for t_i1 in range(n_D):
            for t_i2 in range(n_D):
                lam_r_value[i_outputs] += -0.5 * data_scale * acc_y_3[t_i1, t_i2, i_outputs] * E_C_outer[i_outputs, t_i1, t_i2]
        if expect:  # a stochastic step mixes λ first (λ̂ may be invalid)
            E_r_log[i_outputs], E_r_value[i_outputs] = rt.gamma_expected_stats(lam_r_log[i_outputs], lam_r_value[i_outputs])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def refresh_globals(
        lam_C_value,
        E_C_value,
        lam_C_outer,
        E_C_outer,
        n_P,
        lam_Q_value,
        E_Q_value,
        lam_Q_logdet,
        E_Q_logdet,
        lam_r_log,
        E_r_log,
        lam_r_value,
        E_r_value,
):
    """Expected statistics of the globals from their natural parameters."""
    for i_outputs in range(n_P):
        rt.mvn_expected_stats(lam_C_value[i_outputs], lam_C_outer[i_outputs], E_C_value[i_outputs], E_C_outer[i_outputs])
    E_Q_logdet[0] = rt.wishart_expected_stats(lam_Q_value[0], lam_Q_logdet[0], E_Q_value[0])
    for i_outputs in range(n_P):
        E_r_log[i_outputs], E_r_value[i_outputs] = rt.gamma_expected_stats(lam_r_log[i_outputs], lam_r_value[i_outputs])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "arcp"})
def elbo_global(
        nu0,
        E_Q_logdet,
        dim_Q,
        n_D,
        inv_W0,
        E_Q_value,
        wishart_lognorm_nu0_W0,
        n_P,
        logdet_eye_D_c,
        eye_D_c,
        E_C_outer,
        dim_C,
        a0,
        log_b0,
        lgamma_a0,
        E_r_log,
        b0,
        E_r_value,
        acc_x_4,
        acc_x_5,
        acc_x_6,
        acc_x_7,
        acc_y_0,
        acc_y_1,
        acc_y_2,
        E_C_value,
        acc_y_3,
        lam_C_value,
        lam_C_outer,
        lam_Q_value,
        lam_Q_logdet,
        lam_r_log,
        lam_r_value,
):
    """ELBO terms of the global factors (see elbo_terms in the README)."""
    elbo = 0.0
    # E[log p(Q | ...)]  (lds.cem:29:1)
    elbo += 0.5 * nu0 * E_Q_logdet[0]
    elbo += -0.5 * dim_Q * E_Q_logdet[0]
    elbo += -0.5 * E_Q_logdet[0]
    for t_i in range(n_D):
        for t_j in range(n_D):
            elbo += -0.5 * inv_W0[t_i, t_j] * E_Q_value[0, t_i, t_j]
    elbo += -wishart_lognorm_nu0_W0
    # E[log p(C | ...)]  (lds.cem:31:5)
    for i_outputs in range(n_P):
        elbo += 0.5 * logdet_eye_D_c
    for i_outputs in range(n_P):
        for t_i in range(n_D):
            for t_j in range(n_D):
                elbo += -0.5 * eye_D_c[t_i, t_j] * E_C_outer[i_outputs, t_i, t_j]
    for i_outputs in range(n_P):
        elbo += -0.9189385332046727 * dim_C
    # E[log p(r | ...)]  (lds.cem:32:5)
    for i_outputs in range(n_P):
        elbo += a0 * log_b0
    for i_outputs in range(n_P):
        elbo += -lgamma_a0
    for i_outputs in range(n_P):
        elbo += a0 * E_r_log[i_outputs]
    for i_outputs in range(n_P):
        elbo += -E_r_log[i_outputs]
    for i_outputs in range(n_P):
        elbo += -b0 * E_r_value[i_outputs]
    # E[log p(x | ...)]  (lds.cem:36:9)
    elbo += 0.5 * acc_x_4 * E_Q_logdet[0]
    for t_i in range(n_D):
        for t_j in range(n_D):
            elbo += -0.5 * acc_x_5[t_i, t_j] * E_Q_value[0, t_i, t_j]
    for t_i in range(n_D):
        for t_j in range(n_D):
            elbo += acc_x_6[t_i, t_j] * E_Q_value[0, t_i, t_j]
    for t_i in range(n_D):
        for t_j in range(n_D):
            elbo += -0.5 * acc_x_7[t_i, t_j] * E_Q_value[0, t_i, t_j]
    # E[log p(y | ...)]  (lds.cem:38:13)
    for i_dims in range(n_P):
        elbo += 0.5 * acc_y_0[i_dims] * E_r_log[i_dims]
    for i_dims in range(n_P):
        elbo += -0.5 * acc_y_1[i_dims] * E_r_value[i_dims]
    for i_dims in range(n_P):
        for t_i0 in range(n_D):
            elbo += acc_y_2[t_i0, i_dims] * E_r_value[i_dims] * E_C_value[i_dims, t_i0]
    for i_dims in range(n_P):
        for t_i1 in range(n_D):
            for t_i2 in range(n_D):
                elbo += -0.5 * acc_y_3[t_i1, t_i2, i_dims] * E_r_value[i_dims] * E_C_outer[i_dims, t_i1, t_i2]
    # entropy of q(C)
    for i_outputs in range(n_P):
        elbo += rt.mvn_log_normalizer(lam_C_value[i_outputs], lam_C_outer[i_outputs]) - rt.frobenius(lam_C_value[i_outputs], E_C_value[i_outputs]) - rt.frobenius(lam_C_outer[i_outputs], E_C_outer[i_outputs])
    # entropy of q(Q)
    elbo += rt.wishart_log_normalizer(lam_Q_value[0], lam_Q_logdet[0]) - rt.frobenius(lam_Q_value[0], E_Q_value[0]) - lam_Q_logdet[0] * E_Q_logdet[0]
    # entropy of q(r)
    for i_outputs in range(n_P):
        elbo += rt.gamma_log_normalizer(lam_r_log[i_outputs], lam_r_value[i_outputs]) - lam_r_log[i_outputs] * E_r_log[i_outputs] - lam_r_value[i_outputs] * E_r_value[i_outputs]
    return elbo


def _prepare(data, hypers, dims, seed, init, start, max_local_iter, local_tol, share=None):
    """Bind and check the data, evaluate hyperparameters and knowns, allocate the arrays, start the globals.
    share: out of core, the fit's state, whose globals, hyperparameters and statistics `data`'s minibatch shares.
    """
    hypers = rt.check_hyper_names(hypers, ['A', 'm0', 'P0', 'nu0', 'W0', 'c', 'a0', 'b0'])
    bound = rt.bind_data(SPEC, data, dims, missing=True)
    n_D, n_P, n_S = bound.dims['D'], bound.dims['P'], bound.dims['S']
    # refuse before allocating more than the machine's memory
    rt.check_memory(bound, {('D', 'D'): 6, ('D',): 1, ('P', 'D'): 2, ('P', 'D', 'D'): 2, (1, 'D', 'D'): 2, (1,): 3, ('P',): 6, ('max(steps)', 'D'): 4, ('max(steps)', 'D', 'D'): 10, ('max(steps)',): 4, ('threads',): 1, ('threads', 'D', 'D'): 3, ('threads', 'P'): 2, ('D', 'P'): 1, ('threads', 'D', 'P'): 1, ('D', 'D', 'P'): 1, ('threads', 'D', 'D', 'P'): 1, ('S',): 3})
    steps_ptr, steps_weight, y = bound.arrays['steps_ptr'], bound.arrays['steps_weight'], bound.arrays['y']
    # hyperparameters (defaults from the model file; out of core the fit's current values)
    A = rt.hyper_value(hypers, 'A', (np.eye(n_D) * 0.9), (n_D, n_D)) if share is None else share.A
    m0 = rt.hyper_value(hypers, 'm0', np.zeros(n_D), (n_D,)) if share is None else share.m0
    P0 = rt.hyper_value(hypers, 'P0', np.eye(n_D), (n_D, n_D), domain='spd') if share is None else share.P0
    nu0 = rt.hyper_value(hypers, 'nu0', (n_D + 2.0), (), domain='positive') if share is None else share.nu0
    W0 = rt.hyper_value(hypers, 'W0', np.eye(n_D), (n_D, n_D), domain='spd') if share is None else share.W0
    c = rt.hyper_value(hypers, 'c', 1.0, ()) if share is None else share.c
    a0 = rt.hyper_value(hypers, 'a0', 1.0, (), domain='shape') if share is None else share.a0
    b0 = rt.hyper_value(hypers, 'b0', 1.0, (), domain='positive') if share is None else share.b0
    # known quantities: functions of hyperparameters and data
    dim_Q = n_D  # dim(Q)
    inv_W0 = rt.inv(W0)  # inv(W0)
    # wishart_lognorm(nu0, W0)
    wishart_lognorm_nu0_W0 = rt.wishart_lognorm(nu0, W0, 'Wishart scale matrix W0', 'Wishart degrees of freedom nu0')
    logdet_eye_D_c = rt.logdet((np.eye(n_D) * c))  # logdet((eye(D) * c))
    eye_D_c = (np.eye(n_D) * c)  # value((eye(D) * c))
    dim_C = n_D  # dim(C[outputs])
    log_b0 = rt.log_data(b0, "hyperparameter 'b0'")  # log(b0)
    lgamma_a0 = rt.gammaln(a0)  # lgamma(a0)
    logdet_P0 = rt.logdet(P0)  # logdet(P0)
    outer_m0 = np.outer(m0, m0)  # outer(m0)
    dim_x = n_D  # dim(x[seqs, steps])
    # variational parameters (natural, coefficient form) and E[t]
    lam_C_value, E_C_value = (np.zeros((n_P, n_D)), np.zeros((n_P, n_D))) if share is None else (share.lam_C_value, share.E_C_value)
    lam_C_outer, E_C_outer = (np.zeros((n_P, n_D, n_D)), np.zeros((n_P, n_D, n_D))) if share is None else (share.lam_C_outer, share.E_C_outer)
    lam_Q_value, E_Q_value = (np.zeros((1, n_D, n_D)), np.zeros((1, n_D, n_D))) if share is None else (share.lam_Q_value, share.E_Q_value)
    lam_Q_logdet, E_Q_logdet = (np.zeros((1,)), np.zeros((1,))) if share is None else (share.lam_Q_logdet, share.E_Q_logdet)
    lam_r_log, E_r_log = (np.zeros((n_P,)), np.zeros((n_P,))) if share is None else (share.lam_r_log, share.E_r_log)
    lam_r_value, E_r_value = (np.zeros((n_P,)), np.zeros((n_P,))) if share is None else (share.lam_r_value, share.E_r_value)
    lam_x_value, E_x_value = np.zeros((rt.max_length(steps_ptr), n_D)), np.zeros((rt.max_length(steps_ptr), n_D))
    lam_x_outer, E_x_outer = np.zeros((rt.max_length(steps_ptr), n_D, n_D)), np.zeros((rt.max_length(steps_ptr), n_D, n_D))
    lam_x_start, E_x_start = np.zeros((rt.max_length(steps_ptr),)), np.zeros((rt.max_length(steps_ptr),))
    lam_x_start_value, E_x_start_value = np.zeros((rt.max_length(steps_ptr), n_D)), np.zeros((rt.max_length(steps_ptr), n_D))
    lam_x_start_outer, E_x_start_outer = np.zeros((rt.max_length(steps_ptr), n_D, n_D)), np.zeros((rt.max_length(steps_ptr), n_D, n_D))
    lam_x_step, E_x_step = np.zeros((rt.max_length(steps_ptr),)), np.zeros((rt.max_length(steps_ptr),))
    lam_x_step_outer, E_x_step_outer = np.zeros((rt.max_length(steps_ptr), n_D, n_D)), np.zeros((rt.max_length(steps_ptr), n_D, n_D))
    lam_x_cross, E_x_cross = np.zeros((rt.max_length(steps_ptr), n_D, n_D)), np.zeros((rt.max_length(steps_ptr), n_D, n_D))
    lam_x_prev_outer, E_x_prev_outer = np.zeros((rt.max_length(steps_ptr), n_D, n_D)), np.zeros((rt.max_length(steps_ptr), n_D, n_D))
    H_x = np.zeros(1)  # entropy of the current item's chains q(x)
    # sufficient statistics the local step hands to the global step (out of core added up over minibatches)
    acc_x_4 = np.zeros(()) if share is None else share.acc_x_4
    acc_x_5 = np.zeros((n_D, n_D)) if share is None else share.acc_x_5
    acc_x_6 = np.zeros((n_D, n_D)) if share is None else share.acc_x_6
    acc_x_7 = np.zeros((n_D, n_D)) if share is None else share.acc_x_7
    acc_y_0 = np.zeros((n_P,)) if share is None else share.acc_y_0
    acc_y_1 = np.zeros((n_P,)) if share is None else share.acc_y_1
    acc_y_2 = np.zeros((n_D, n_P)) if share is None else share.acc_y_2
    acc_y_3 = np.zeros((n_D, n_D, n_P)) if share is None else share.acc_y_3
    # the local step's shares: one per thread, fewer for small data
    n_threads = rt.share_count(bound)
    lam_x_value_threads, lam_x_outer_threads, lam_x_start_threads, lam_x_start_value_threads, lam_x_start_outer_threads, lam_x_step_threads, lam_x_step_outer_threads, lam_x_cross_threads, lam_x_prev_outer_threads, E_x_value_threads, E_x_outer_threads, E_x_start_threads, E_x_start_value_threads, E_x_start_outer_threads, E_x_step_threads, E_x_step_outer_threads, E_x_cross_threads, E_x_prev_outer_threads, H_x_threads = rt.per_thread(n_threads, lam_x_value, lam_x_outer, lam_x_start, lam_x_start_value, lam_x_start_outer, lam_x_step, lam_x_step_outer, lam_x_cross, lam_x_prev_outer, E_x_value, E_x_outer, E_x_start, E_x_start_value, E_x_start_outer, E_x_step, E_x_step_outer, E_x_cross, E_x_prev_outer, H_x)
    acc_x_4_threads = rt.thread_copies(n_threads, acc_x_4) if share is None else share.acc_x_4_threads
    acc_x_5_threads = rt.thread_copies(n_threads, acc_x_5) if share is None else share.acc_x_5_threads
    acc_x_6_threads = rt.thread_copies(n_threads, acc_x_6) if share is None else share.acc_x_6_threads
    acc_x_7_threads = rt.thread_copies(n_threads, acc_x_7) if share is None else share.acc_x_7_threads
    acc_y_0_threads = rt.thread_copies(n_threads, acc_y_0) if share is None else share.acc_y_0_threads
    acc_y_1_threads = rt.thread_copies(n_threads, acc_y_1) if share is None else share.acc_y_1_threads
    acc_y_2_threads = rt.thread_copies(n_threads, acc_y_2) if share is None else share.acc_y_2_threads
    acc_y_3_threads = rt.thread_copies(n_threads, acc_y_3) if share is None else share.acc_y_3_threads
    all_items = np.arange(n_S)  # the local step runs over these
    item_weight = np.ones(n_S)  # each item's weight in the statistics (SVI+ perturbs it)
    seed_category = np.full(n_S, -1)
    if share is not None:  # out of core: a minibatch's state, sharing the fit's
        return rt.State(bound=bound, A=A, m0=m0, P0=P0, nu0=nu0, W0=W0, c=c, a0=a0, b0=b0, seed_category=seed_category, logdet_P0=logdet_P0, n_D=n_D, outer_m0=outer_m0, E_Q_logdet=E_Q_logdet, E_Q_value=E_Q_value, n_P=n_P, E_r_value=E_r_value, y=y, E_C_value=E_C_value, E_C_outer=E_C_outer, steps_ptr=steps_ptr, item_weight=item_weight, acc_x_4_threads=acc_x_4_threads, steps_weight=steps_weight, dim_x=dim_x, lam_x_value_threads=lam_x_value_threads, lam_x_outer_threads=lam_x_outer_threads, lam_x_start_threads=lam_x_start_threads, lam_x_start_value_threads=lam_x_start_value_threads, lam_x_start_outer_threads=lam_x_start_outer_threads, lam_x_step_threads=lam_x_step_threads, lam_x_step_outer_threads=lam_x_step_outer_threads, lam_x_cross_threads=lam_x_cross_threads, lam_x_prev_outer_threads=lam_x_prev_outer_threads, E_x_value_threads=E_x_value_threads, E_x_outer_threads=E_x_outer_threads, E_x_start_threads=E_x_start_threads, E_x_start_value_threads=E_x_start_value_threads, E_x_start_outer_threads=E_x_start_outer_threads, E_x_step_threads=E_x_step_threads, E_x_step_outer_threads=E_x_step_outer_threads, E_x_cross_threads=E_x_cross_threads, E_x_prev_outer_threads=E_x_prev_outer_threads, H_x_threads=H_x_threads, acc_x_5_threads=acc_x_5_threads, acc_x_6_threads=acc_x_6_threads, acc_x_7_threads=acc_x_7_threads, acc_y_0_threads=acc_y_0_threads, acc_y_1_threads=acc_y_1_threads, acc_y_2_threads=acc_y_2_threads, acc_y_3_threads=acc_y_3_threads, acc_x_4=acc_x_4, acc_x_5=acc_x_5, acc_x_6=acc_x_6, acc_x_7=acc_x_7, acc_y_0=acc_y_0, acc_y_1=acc_y_1, acc_y_2=acc_y_2, acc_y_3=acc_y_3, lam_C_value=lam_C_value, lam_C_outer=lam_C_outer, lam_Q_value=lam_Q_value, lam_Q_logdet=lam_Q_logdet, lam_r_log=lam_r_log, E_r_log=E_r_log, lam_r_value=lam_r_value, dim_Q=dim_Q, inv_W0=inv_W0, wishart_lognorm_nu0_W0=wishart_lognorm_nu0_W0, logdet_eye_D_c=logdet_eye_D_c, eye_D_c=eye_D_c, dim_C=dim_C, log_b0=log_b0, lgamma_a0=lgamma_a0, all_items=all_items)
    # start every global at its prior
    update_C(0.0, lam_C_value, lam_C_outer, n_D, eye_D_c, acc_y_2, E_r_value, acc_y_3, True, E_C_value, E_C_outer, n_P)
    update_Q(0.0, lam_Q_value, lam_Q_logdet, nu0, dim_Q, n_D, inv_W0, acc_x_4, acc_x_5, acc_x_6, acc_x_7, True, E_Q_value, E_Q_logdet)
    update_r(0.0, lam_r_log, lam_r_value, a0, b0, acc_y_0, acc_y_1, n_D, acc_y_2, E_C_value, acc_y_3, E_C_outer, True, E_r_log, E_r_value, n_P)
    if init is not None:  # warm start: the globals' natural parameters from an earlier fit
        rt.load_state(init, {'lam_C_value': lam_C_value, 'lam_C_outer': lam_C_outer, 'lam_Q_value': lam_Q_value, 'lam_Q_logdet': lam_Q_logdet, 'lam_r_log': lam_r_log, 'lam_r_value': lam_r_value})
        refresh_globals(lam_C_value, E_C_value, lam_C_outer, E_C_outer, n_P, lam_Q_value, E_Q_value, lam_Q_logdet, E_Q_logdet, lam_r_log, E_r_log, lam_r_value, E_r_value)
    start = DEFAULT_START if start is None else start
    if init is None and start == 'random':
        # each Normal/MVN global's mean drawn from its prior: breaks the symmetry of products of latent variables
        rng = np.random.default_rng(seed)
        rt.start_at_draw('mvn', lam_C_value, lam_C_outer, rng)
        refresh_globals(lam_C_value, E_C_value, lam_C_outer, E_C_outer, n_P, lam_Q_value, E_Q_value, lam_Q_logdet, E_Q_logdet, lam_r_log, E_r_log, lam_r_value, E_r_value)
    elif init is None and start == 'seeds':
        raise rt.CemDataError("start: expected 'random' or 'prior', found 'seeds' (there is no categorical assignment to seed)")
    elif init is None and start != 'prior':
        raise rt.CemDataError(f"start: expected 'random' or 'prior', found {start!r}")
    return rt.State(bound=bound, A=A, m0=m0, P0=P0, nu0=nu0, W0=W0, c=c, a0=a0, b0=b0, seed_category=seed_category, logdet_P0=logdet_P0, n_D=n_D, outer_m0=outer_m0, E_Q_logdet=E_Q_logdet, E_Q_value=E_Q_value, n_P=n_P, E_r_value=E_r_value, y=y, E_C_value=E_C_value, E_C_outer=E_C_outer, steps_ptr=steps_ptr, item_weight=item_weight, acc_x_4_threads=acc_x_4_threads, steps_weight=steps_weight, dim_x=dim_x, lam_x_value_threads=lam_x_value_threads, lam_x_outer_threads=lam_x_outer_threads, lam_x_start_threads=lam_x_start_threads, lam_x_start_value_threads=lam_x_start_value_threads, lam_x_start_outer_threads=lam_x_start_outer_threads, lam_x_step_threads=lam_x_step_threads, lam_x_step_outer_threads=lam_x_step_outer_threads, lam_x_cross_threads=lam_x_cross_threads, lam_x_prev_outer_threads=lam_x_prev_outer_threads, E_x_value_threads=E_x_value_threads, E_x_outer_threads=E_x_outer_threads, E_x_start_threads=E_x_start_threads, E_x_start_value_threads=E_x_start_value_threads, E_x_start_outer_threads=E_x_start_outer_threads, E_x_step_threads=E_x_step_threads, E_x_step_outer_threads=E_x_step_outer_threads, E_x_cross_threads=E_x_cross_threads, E_x_prev_outer_threads=E_x_prev_outer_threads, H_x_threads=H_x_threads, acc_x_5_threads=acc_x_5_threads, acc_x_6_threads=acc_x_6_threads, acc_x_7_threads=acc_x_7_threads, acc_y_0_threads=acc_y_0_threads, acc_y_1_threads=acc_y_1_threads, acc_y_2_threads=acc_y_2_threads, acc_y_3_threads=acc_y_3_threads, acc_x_4=acc_x_4, acc_x_5=acc_x_5, acc_x_6=acc_x_6, acc_x_7=acc_x_7, acc_y_0=acc_y_0, acc_y_1=acc_y_1, acc_y_2=acc_y_2, acc_y_3=acc_y_3, lam_C_value=lam_C_value, lam_C_outer=lam_C_outer, lam_Q_value=lam_Q_value, lam_Q_logdet=lam_Q_logdet, lam_r_log=lam_r_log, E_r_log=E_r_log, lam_r_value=lam_r_value, dim_Q=dim_Q, inv_W0=inv_W0, wishart_lognorm_nu0_W0=wishart_lognorm_nu0_W0, logdet_eye_D_c=logdet_eye_D_c, eye_D_c=eye_D_c, dim_C=dim_C, log_b0=log_b0, lgamma_a0=lgamma_a0, all_items=all_items)


def _learn(s, learn, rho=1.0, items=slice(None)):
    """Empirical Bayes (Minka 2000): each learned hyperparameter a step rho towards its ELBO maximiser given q."""
    if 'a0' in learn:  # the prior of r
        s.a0 = (1.0 - rho) * s.a0 + rho * rt.learn_gamma_shape(s.b0, s.E_r_log)
    if 'b0' in learn:  # the prior of r
        s.b0 = (1.0 - rho) * s.b0 + rho * rt.learn_gamma_rate(s.a0, s.E_r_value)
    # known quantities that depend on hyperparameters
    s.log_b0 = rt.log_data(s.b0, "hyperparameter 'b0'")
    s.lgamma_a0 = rt.gammaln(s.a0)


def _result(s, trace, converged, seconds, items=True):
    """The posterior in usual parameters, expectations and the state."""
    posterior = {}
    state = {'lam_C_value': s.lam_C_value, 'lam_C_outer': s.lam_C_outer, 'lam_Q_value': s.lam_Q_value, 'lam_Q_logdet': s.lam_Q_logdet, 'lam_r_log': s.lam_r_log, 'lam_r_value': s.lam_r_value}
    C__mean, C__precision = rt.mvn_params(s.lam_C_value, s.lam_C_outer)
    posterior['C.mean'] = C__mean
    posterior['C.precision'] = C__precision
    posterior['E[value C]'] = s.E_C_value
    posterior['E[outer C]'] = s.E_C_outer
    Q__dof, Q__scale = rt.wishart_params(s.lam_Q_value, s.lam_Q_logdet)
    posterior['Q.dof'] = Q__dof[0]
    posterior['Q.scale'] = Q__scale[0]
    posterior['E[value Q]'] = s.E_Q_value[0]
    posterior['E[logdet Q]'] = s.E_Q_logdet[0]
    r__shape, r__rate = rt.gamma_params(s.lam_r_log, s.lam_r_value)
    posterior['r.shape'] = r__shape
    posterior['r.rate'] = r__rate
    posterior['E[log r]'] = s.E_r_log
    posterior['E[value r]'] = s.E_r_value
    return rt.FitResult(posterior=posterior, elbo=np.array(trace), iterations=len(trace), converged=converged, seconds=seconds, dims=dict(s.bound.dims), hypers={'A': s.A, 'm0': s.m0, 'P0': s.P0, 'nu0': s.nu0, 'W0': s.W0, 'c': s.c, 'a0': s.a0, 'b0': s.b0}, state=state)


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
    return rt.run_shares(local_step, s.lam_x_value_threads.shape[0], (seeding, items, s.seed_category, max_local_iter, local_tol, s.logdet_P0, s.n_D, s.P0, s.m0, s.outer_m0, s.E_Q_logdet, s.E_Q_value, s.A, s.n_P, s.E_r_value, s.y, s.E_C_value, s.E_C_outer, s.steps_ptr, s.item_weight, s.acc_x_4_threads, s.steps_weight, s.dim_x, evaluate, s.lam_x_value_threads, s.lam_x_outer_threads, s.lam_x_start_threads, s.lam_x_start_value_threads, s.lam_x_start_outer_threads, s.lam_x_step_threads, s.lam_x_step_outer_threads, s.lam_x_cross_threads, s.lam_x_prev_outer_threads, s.E_x_value_threads, s.E_x_outer_threads, s.E_x_start_threads, s.E_x_start_value_threads, s.E_x_start_outer_threads, s.E_x_step_threads, s.E_x_step_outer_threads, s.E_x_cross_threads, s.E_x_prev_outer_threads, s.H_x_threads, s.acc_x_5_threads, s.acc_x_6_threads, s.acc_x_7_threads, s.acc_y_0_threads, s.acc_y_1_threads, s.acc_y_2_threads, s.acc_y_3_threads,), ((s.acc_x_4, s.acc_x_4_threads), (s.acc_x_5, s.acc_x_5_threads), (s.acc_x_6, s.acc_x_6_threads), (s.acc_x_7, s.acc_x_7_threads), (s.acc_y_0, s.acc_y_0_threads), (s.acc_y_1, s.acc_y_1_threads), (s.acc_y_2, s.acc_y_2_threads), (s.acc_y_3, s.acc_y_3_threads),))


def _update_C(s, data_scale, expect=True):
    update_C(data_scale, s.lam_C_value, s.lam_C_outer, s.n_D, s.eye_D_c, s.acc_y_2, s.E_r_value, s.acc_y_3, expect, s.E_C_value, s.E_C_outer, s.n_P)


def _update_Q(s, data_scale, expect=True):
    update_Q(data_scale, s.lam_Q_value, s.lam_Q_logdet, s.nu0, s.dim_Q, s.n_D, s.inv_W0, s.acc_x_4, s.acc_x_5, s.acc_x_6, s.acc_x_7, expect, s.E_Q_value, s.E_Q_logdet)


def _update_r(s, data_scale, expect=True):
    update_r(data_scale, s.lam_r_log, s.lam_r_value, s.a0, s.b0, s.acc_y_0, s.acc_y_1, s.n_D, s.acc_y_2, s.E_C_value, s.acc_y_3, s.E_C_outer, expect, s.E_r_log, s.E_r_value, s.n_P)


def refresh(s):
    refresh_globals(s.lam_C_value, s.E_C_value, s.lam_C_outer, s.E_C_outer, s.n_P, s.lam_Q_value, s.E_Q_value, s.lam_Q_logdet, s.E_Q_logdet, s.lam_r_log, s.E_r_log, s.lam_r_value, s.E_r_value)


def elbo_of_globals(s):
    return elbo_global(s.nu0, s.E_Q_logdet, s.dim_Q, s.n_D, s.inv_W0, s.E_Q_value, s.wishart_lognorm_nu0_W0, s.n_P, s.logdet_eye_D_c, s.eye_D_c, s.E_C_outer, s.dim_C, s.a0, s.log_b0, s.lgamma_a0, s.E_r_log, s.b0, s.E_r_value, s.acc_x_4, s.acc_x_5, s.acc_x_6, s.acc_x_7, s.acc_y_0, s.acc_y_1, s.acc_y_2, s.E_C_value, s.acc_y_3, s.lam_C_value, s.lam_C_outer, s.lam_Q_value, s.lam_Q_logdet, s.lam_r_log, s.lam_r_value)


GLOBALS = (  # the globals as the stochastic drivers move them
    rt.Global('C', 'mvn', lam=('lam_C_value', 'lam_C_outer'), E=('E_C_value', 'E_C_outer'),
              update=_update_C, aux_draws=1, after_sample=None),
    rt.Global('Q', 'wishart', lam=('lam_Q_value', 'lam_Q_logdet'), E=('E_Q_value', 'E_Q_logdet'),
              update=_update_Q, aux_draws=1, after_sample=None),
    rt.Global('r', 'gamma', lam=('lam_r_log', 'lam_r_value'), E=('E_r_log', 'E_r_value'),
              update=_update_r, aux_draws=1, after_sample=None),
)


def fit(data, **options):
    """Batch mean-field VB (options: cemodel.runtime.drivers.mf.fit). One iteration:
        statistics ← 0; elbo = run_local_step(s, s.all_items, ...)  # E-step
        _update_C(s, 1.0)  # q(C)
        _update_Q(s, 1.0)  # q(Q)
        _update_r(s, 1.0)  # q(r)
        elbo += elbo_of_globals(s)
    """
    return rt.drivers.mf.fit(_THIS, data, **options)


def fit_svi(data, **options):
    """SVI, SVI+ (options: cemodel.runtime.drivers.svi.fit). One step on a minibatch S:
        statistics ← 0; run_local_step(s, S, ...)
        _update_C(s, N / len(S), expect=False)  # λ̂ of q(C)
        _update_Q(s, N / len(S), expect=False)  # λ̂ of q(Q)
        _update_r(s, N / len(S), expect=False)  # λ̂ of q(r)
        λ ← (1 − ρ)λ + ρλ̂ (rt.blend); refresh(s)
    """
    return rt.drivers.svi.fit(_THIS, data, **options)


def fit_ssvi_a(data, **options):
    """SSVI-A (Hoffman & Blei 2015, eq. 10): fit_svi with the local step given a draw β ~ q(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, **options)


def fit_ssvi(data, **options):
    """SSVI (Hoffman & Blei 2015, eq. 7): fit_ssvi_a with λ̂ = η + V(β, λ)·N/|S| Σ η̂_n(β)."""
    return rt.drivers.svi.fit(_THIS, data, sample_globals=True, apply_v=True, **options)
