/*
 * bwd_state_chain.cu — the state walks of the CUDA Mamba-3 SISO backward with the chunk sums folded
 * in (entry chained_planes): what bwd_chunk_planes_sums_kernel and bwd_pass_kernel write (P.st,
 * P.dst, P.cl, P.dhin), by the forward's chained state (state_chain.cu, chain_walk) in one launch.
 *
 * The bridge: chain_walk reads chunk_prep_kernel's scalar slots (siso.cuh: the five scalar rows)
 * and m3_seg sequences. bwd_prep_kernel writes those slots as it forms the scalars of P.sc (σ, cm
 * are the ones the walks read; dt, λ, γ for a whole slot), c_last into P.cl and the sequences as
 * m3_seg. θ the walks form themselves from the prep's chunk-local sums (F.thl = P.th) and θ entering
 * (F.theta0 = P.thb) as theta_at does, so they rotate by the same angles as the gradient kernel
 * (sincos_wrapped_fast, P.fused = 1). Running chunk_prep_kernel instead would need the forward's
 * chunk table and would recompute tanh of every angle that bwd_prep_kernel already summed.
 *
 * bwd_walks_kernel (launch_bwd_walks): a block per (sequence, head, V tile of 64, KS = 64 K columns
 * (32 where K % 64 != 0), walk). Forward walk: chain_state_kernel's body with the backward's
 * operands (k, v, k_bias; H_in from the initial states) into P.st. Reverse walk: the same body on q
 * (q̂e = rot(q + q_bias)·e^{c}), dout (where z is given, dy = dout ⊙ silu(z) in bwd_gate_kernel's two
 * planes P.dyh, P.dyl), chunks last to first from dfinal_ssm_state, the carry stored before each fold
 * into P.dst, dH_in at the end (also for a sequence without chunks). Two stages of cp.async operands
 * (16-byte pieces: q, k, v, dout, z of v's 16-bit dtype in 16-byte rows, the entry's rule).
 */
#include "bwd.cuh"

using namespace ssmi_siso;

namespace ssmi_siso_bwd {

size_t bwd_state_chain_smem(int A, int KS, bool z) { return (size_t)bwd_walks_smem(A, KS, z); }

ssm_status launch_bwd_state_chain(ssm_context * ctx, const char * op, const bw_args & P, bool forward, int KS) {
    m3_fwd_args F;
    memset(&F, 0, sizeof F);
    F.segs = P.msegs;
    F.H = P.H, F.G = P.G, F.K = P.K, F.Kp = P.K, F.V = P.V, F.A = P.A, F.NS = P.NS;
    F.fused = 1; /* θ in the slots is wrapped: the fast sincos of the wrapped angle, as the gradient kernel's */
    F.has_z = P.has_z, F.has_states = P.has_states;
    F.q = P.q, F.k = P.k, F.v = P.v, F.adt = P.adt, F.dt = P.dt, F.trap = P.trap, F.qb = P.qb, F.kb = P.kb;
    F.z = P.z, F.ssm_in = P.ssm_in, F.k_in = P.k_in, F.v_in = P.v_in;
    F.states = forward ? P.st : nullptr, F.prep = P.slot; /* no forward walk: the reverse walks alone */
    F.thl = P.th, F.thl_row = P.S * P.H * P.A, F.theta0 = P.thb;
    m3_fwd_args R = F;
    R.k = P.q, R.kb = P.qb, R.v = P.dout;
    if (P.dyh != nullptr) { /* z given: dy's two planes (bwd_gate_kernel) for dout and z */
        const long long s1 = (long long)P.H * P.V;
        R.v.p = P.dyh, R.z.p = P.dyl;
        R.v.s[0] = R.z.s[0] = P.S * s1, R.v.s[1] = R.z.s[1] = s1, R.v.s[2] = R.z.s[2] = P.V, R.v.s[3] = R.z.s[3] = 1;
    }
    R.has_states = P.has_dfs, R.ssm_in = P.dfs;
    R.states = P.dst;
    R.fin_ssm.p = P.dhin, R.fin_ssm.dtype = SSM_DTYPE_F32, R.fin_ssm.present = 1;
    R.fin_ssm.s[0] = (long long)P.H * P.V * P.K, R.fin_ssm.s[1] = (long long)P.V * P.K, R.fin_ssm.s[2] = P.K;
    R.fin_ssm.s[3] = 1;
    return launch_bwd_walks(ctx, op, F, R, P.v.dtype == SSM_DTYPE_BF16 ? M_BF16 : M_F16, KS);
}

} /* namespace ssmi_siso_bwd */
