/* Reference of gated RMSNorm (spec §6.3) in float64, per row r and group k of gs columns:
 *   v = norm_before_gate ? x : x·silu(z);   rstd = 1/sqrt(mean(v²) + eps);   xh = v·rstd
 *   out = xh·w (·silu(z) if norm_before_gate). Without z there is no gate.
 * Backward (with s = σ(z)):
 *   norm_before_gate: dz = dy·xh·w·s·(1+z(1−s)), dy ← dy·silu(z)
 *   c1 = mean(xh·w·dy);  dv = (w·dy − xh·c1)·rstd;  dw += dy·xh
 *   gate after the norm: dz = dv·x·s·(1+z(1−s)), dx = dv·silu(z);  else dx = dv */
#include "ref_common.h"
#include "ssmi_ref_layer.h"

static double get2(const ssm_tensor * t, int64_t r, int64_t c) { return ssmi_get_f64(t, ssmi_off2(t, r, c)); }

/* The normalised input v of column c. */
static double v_at(const ssm_rmsnorm_params * p, const ssm_tensor * x, const ssm_tensor * z, int64_t r, int64_t c) {
    const double xv = get2(x, r, c);
    return (!p->norm_before_gate && ssmi_present(z)) ? xv * ssmi_ref_silu(get2(z, r, c)) : xv;
}

static double group_rstd(const ssm_rmsnorm_params * p, const ssmi_rmsnorm_dims * d, const ssm_tensor * x,
                         const ssm_tensor * z, int64_t r, int64_t c0) {
    double sum = 0.0;
    for (int64_t c = c0; c < c0 + d->group_size; ++c) {
        const double v = v_at(p, x, z, r, c);
        sum += v * v;
    }
    return 1.0 / sqrt(sum / (double)d->group_size + p->eps);
}

ssm_status ssmi_ref_rmsnorm_gated(ssm_context * ctx, const ssm_rmsnorm_params * p, const ssmi_rmsnorm_dims * d,
                                  const ssm_rmsnorm_gated_args * a) {
    (void)ctx;
    const int gate_after = p->norm_before_gate && ssmi_present(&a->z);
    for (int64_t r = 0; r < d->rows; ++r)
        for (int64_t c0 = 0; c0 < d->dim; c0 += d->group_size) {
            const double rstd = group_rstd(p, d, &a->x, &a->z, r, c0);
            for (int64_t c = c0; c < c0 + d->group_size; ++c) {
                double o = v_at(p, &a->x, &a->z, r, c) * rstd * ssmi_get_f64(&a->weight, ssmi_off1(&a->weight, c));
                if (gate_after) o *= ssmi_ref_silu(get2(&a->z, r, c));
                ssmi_set_f64(&a->out, ssmi_off2(&a->out, r, c), o);
            }
        }
    return SSM_STATUS_OK;
}

ssm_status ssmi_ref_rmsnorm_gated_bwd(ssm_context * ctx, const ssm_rmsnorm_params * p, const ssmi_rmsnorm_dims * d,
                                      const ssm_rmsnorm_gated_bwd_args * a) {
    const int     has_z = ssmi_present(&a->z);
    const int64_t D = d->dim;
    double *      dw = (double *)ssmi_alloc(ctx, (size_t)(D > 0 ? D : 1) * sizeof(double));
    SSM_RETURN_IF(dw == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY,
                  "rmsnorm_gated_bwd: could not allocate %zu bytes of reference scratch", (size_t)D * sizeof(double));
    for (int64_t c = 0; c < D; ++c) dw[c] = 0.0;
    for (int64_t r = 0; r < d->rows; ++r)
        for (int64_t c0 = 0; c0 < D; c0 += d->group_size) {
            const int64_t c1e = c0 + d->group_size;
            const double  rstd = group_rstd(p, d, &a->x, &a->z, r, c0);
            double        c1 = 0.0;
            for (int64_t c = c0; c < c1e; ++c) {
                const double w = ssmi_get_f64(&a->weight, ssmi_off1(&a->weight, c));
                const double xh = v_at(p, &a->x, &a->z, r, c) * rstd;
                double       dy = get2(&a->dout, r, c);
                if (p->norm_before_gate && has_z) dy *= ssmi_ref_silu(get2(&a->z, r, c));
                c1 += xh * w * dy;
                dw[c] += dy * xh;
            }
            c1 /= (double)d->group_size;
            for (int64_t c = c0; c < c1e; ++c) {
                const double w = ssmi_get_f64(&a->weight, ssmi_off1(&a->weight, c));
                const double xh = v_at(p, &a->x, &a->z, r, c) * rstd;
                const double dout = get2(&a->dout, r, c);
                const double zv = has_z ? get2(&a->z, r, c) : 0.0;
                double       dy = dout, dz = 0.0, dx;
                if (p->norm_before_gate && has_z) {
                    dz = dout * xh * w * ssmi_ref_silu_grad(zv);
                    dy = dout * ssmi_ref_silu(zv);
                }
                const double dv = (w * dy - xh * c1) * rstd;
                if (!p->norm_before_gate && has_z) {
                    dz = dv * get2(&a->x, r, c) * ssmi_ref_silu_grad(zv);
                    dx = dv * ssmi_ref_silu(zv);
                } else {
                    dx = dv;
                }
                if (ssmi_present(&a->dx)) ssmi_set_f64(&a->dx, ssmi_off2(&a->dx, r, c), dx);
                if (ssmi_present(&a->dz)) ssmi_set_f64(&a->dz, ssmi_off2(&a->dz, r, c), dz);
            }
        }
    if (ssmi_present(&a->dweight))
        for (int64_t c = 0; c < D; ++c) ssmi_set_f64(&a->dweight, ssmi_off1(&a->dweight, c), dw[c]);
    ssmi_free(ctx, dw);
    return SSM_STATUS_OK;
}
