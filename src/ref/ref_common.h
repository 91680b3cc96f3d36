/* ref_common.h — little helpers shared by the float64 reference files (src/ref/).
 * Everything here is static inline: each reference file stays a self-contained transcription
 * of its spec section. */
#ifndef SSMI_REF_COMMON_H
#define SSMI_REF_COMMON_H

#include <math.h>

#include "../core/ssmi.h"
#include "../core/ssmi_scalar.h"

/* softplus with upstream's threshold: identity above 20 (spec §2.1, trap T5). */
static inline double ssmi_ref_softplus_thresh(double v) { return v <= SSMI_SOFTPLUS_THRESHOLD ? log1p(exp(v)) : v; }

static inline double ssmi_ref_silu(double v) { return v / (1.0 + exp(-v)); }

/* σ(v) = 1 / (1 + e^−v). */
static inline double ssmi_ref_sigmoid(double v) { return 1.0 / (1.0 + exp(-v)); }

/* d silu(v) / dv = σ(v)·(1 + v·(1 − σ(v))). */
static inline double ssmi_ref_silu_grad(double v) {
    const double s = ssmi_ref_sigmoid(v);
    return s * (1.0 + v * (1.0 - s));
}

/* Processed dt of spec §2.1 (the shared rule of ssmi_scalar.h): raw + bias, optional
 * softplus, then the clamp that is ALWAYS applied (trap T4); a NaN stays NaN. */
static inline double ssmi_ref_process_dt(const ssm_mamba2_params * p, double raw, double bias) {
    return ssmi_dt_rule_f64(raw + bias, p->dt_softplus, (double)p->dt_limit_lo, (double)p->dt_limit_hi);
}

/* dt_bias[h] or 0 when absent. */
static inline double ssmi_ref_bias(const ssm_tensor * dt_bias, int64_t h) {
    return ssmi_present(dt_bias) ? ssmi_get_f64(dt_bias, ssmi_off1(dt_bias, h)) : 0.0;
}

/* D_h(p): D[h] for 1-D D, D[h][p] for 2-D, 0 when absent. */
static inline double ssmi_ref_d(const ssm_tensor * d, int64_t h, int64_t p) {
    if (!ssmi_present(d)) return 0.0;
    return d->ndim == 2 ? ssmi_get_f64(d, ssmi_off2(d, h, p)) : ssmi_get_f64(d, ssmi_off1(d, h));
}

/* seq_idx[b, t] (only called when seq_idx is present). */
static inline int64_t ssmi_ref_seq(const ssm_tensor * s, int64_t b, int64_t t) {
    return ssmi_get_i64(s, ssmi_off2(s, b, t));
}

/* Whether token t of a run that starts at t0 (row b) keeps the state of token t − 1 in the Mamba-2 recurrence:
 * seq_idx[b, t] equals the id of token t − 1, with seq_{t0−1} := 0; always without seq_idx (seq NULL). */
static inline int ssmi_ref_seq_keeps(const ssm_tensor * seq, int64_t b, int64_t t0, int64_t t) {
    return seq == NULL || ssmi_ref_seq(seq, b, t) == (t > t0 ? ssmi_ref_seq(seq, b, t - 1) : 0);
}

/* One sequence of a varlen-capable call: tokens [t0, t0 + len) of row b; its states are
 * row n of the (nseq or batch, ...) state tensors. */
typedef struct ssmi_ref_span {
    int64_t b, t0, len, n;
} ssmi_ref_span;

/* Sequence i of the call: row i over all seqlen tokens, or (varlen, with cu_seqlens) row 0
 * over [cu[i], cu[i+1]). */
static inline ssmi_ref_span ssmi_ref_span_of(int varlen, int64_t seqlen, const ssm_tensor * cu, int64_t i) {
    ssmi_ref_span s;
    s.n = i;
    if (varlen) {
        s.b = 0;
        s.t0 = ssmi_get_i64(cu, ssmi_off1(cu, i));
        s.len = ssmi_get_i64(cu, ssmi_off1(cu, i + 1)) - s.t0;
    } else {
        s.b = i;
        s.t0 = 0;
        s.len = seqlen;
    }
    return s;
}

/* Valid positions of chunk c: min(Q, S - cQ). */
static inline int64_t ssmi_ref_chunk_len(const ssmi_mamba2_dims * d, int64_t c) {
    const int64_t rest = d->seqlen - c * d->chunk;
    return rest < d->chunk ? rest : d->chunk;
}

/* The view of t restricted to indices [start, start+len) of dimension dim (same strides).
 * An absent tensor stays absent. */
static inline ssm_tensor ssmi_ref_slice(const ssm_tensor * t, int32_t dim, int64_t start, int64_t len) {
    ssm_tensor v = *t;
    if (!ssmi_present(t)) return v;
    v.data = (char *)t->data + start * t->strides[dim] * (int64_t)ssm_dtype_size((ssm_dtype)t->dtype);
    v.shape[dim] = len;
    return v;
}

/* A contiguous row-major F64 view of `data`. */
static inline ssm_tensor ssmi_ref_f64_view(double * data, int32_t ndim, const int64_t * shape) {
    return ssm_tensor_make(data, SSM_DTYPE_F64, ndim, shape);
}

#endif /* SSMI_REF_COMMON_H */
