/* dlpack.c — ssm_tensor_from_dlpack: a DLPack DLTensor (the exchange format of numpy,
 * PyTorch, CuPy, JAX) as an ssm_tensor view, with a clear status for what ssmops cannot
 * take. The DLTensor layout is DLPack's ABI, mirrored by ssm_dl_tensor in ssmops.h. */
#include <string.h>

#include "ssmi.h"

/* DLPack's codes (dlpack.h: DLDeviceType, DLDataTypeCode). */
enum { DL_CPU = 1, DL_CUDA = 2, DL_CUDA_HOST = 3, DL_CUDA_MANAGED = 13 };
enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4 };

/* The address an empty tensor with a NULL data pointer gets: NULL would mean "absent". */
static unsigned char empty_placeholder[64];

static int dl_dtype(uint8_t code, uint8_t bits, ssm_dtype * out) {
    if (code == DL_FLOAT && bits == 32) *out = SSM_DTYPE_F32;
    else if (code == DL_FLOAT && bits == 16) *out = SSM_DTYPE_F16;
    else if (code == DL_FLOAT && bits == 64) *out = SSM_DTYPE_F64;
    else if (code == DL_BFLOAT && bits == 16) *out = SSM_DTYPE_BF16;
    else if (code == DL_INT && bits == 32) *out = SSM_DTYPE_I32;
    else if (code == DL_INT && bits == 64) *out = SSM_DTYPE_I64;
    else return 0;
    return 1;
}

SSM_API ssm_status ssm_tensor_from_dlpack(ssm_context * ctx, const ssm_dl_tensor * dl, ssm_tensor * out) {
    ssmi_clear_error(ctx);
    SSM_RETURN_IF(dl == NULL || out == NULL, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "tensor_from_dlpack: the DLTensor or out is NULL");
    ssm_tensor t;
    memset(&t, 0, sizeof t);
    switch (dl->device.device_type) {
        case DL_CPU:
        case DL_CUDA_HOST: t.device.type = SSM_DEVICE_CPU, t.device.index = 0; break;
        case DL_CUDA:
        case DL_CUDA_MANAGED: t.device.type = SSM_DEVICE_CUDA, t.device.index = dl->device.device_id; break;
        default:
            return ssmi_error(ctx, SSM_STATUS_INVALID_LAYOUT,
                              "tensor_from_dlpack: device type %d is not supported (CPU, CUDA, CUDA host or "
                              "managed memory only)",
                              (int)dl->device.device_type);
    }
    ssm_dtype dt = SSM_DTYPE_F32;
    SSM_RETURN_IF(dl->dtype.lanes != 1, ctx, SSM_STATUS_INVALID_LAYOUT,
                  "tensor_from_dlpack: dtype lanes=%u; only scalar (1-lane) dtypes are supported",
                  (unsigned)dl->dtype.lanes);
    SSM_RETURN_IF(!dl_dtype(dl->dtype.code, dl->dtype.bits, &dt), ctx, SSM_STATUS_INVALID_LAYOUT,
                  "tensor_from_dlpack: dtype code %u with %u bits is not supported (float 16/32/64, bfloat 16, "
                  "int 32/64)",
                  (unsigned)dl->dtype.code, (unsigned)dl->dtype.bits);
    SSM_RETURN_IF(dl->ndim < 0 || dl->ndim > SSM_MAX_DIMS, ctx, SSM_STATUS_INVALID_SHAPE,
                  "tensor_from_dlpack: ndim=%d is outside [0, %d]", (int)dl->ndim, SSM_MAX_DIMS);
    SSM_RETURN_IF(dl->ndim > 0 && dl->shape == NULL, ctx, SSM_STATUS_INVALID_SHAPE,
                  "tensor_from_dlpack: shape is NULL for ndim=%d", (int)dl->ndim);
    const size_t es = ssm_dtype_size(dt);
    SSM_RETURN_IF(dl->byte_offset % es != 0, ctx, SSM_STATUS_INVALID_LAYOUT,
                  "tensor_from_dlpack: byte_offset=%llu is not a multiple of the element size %zu",
                  (unsigned long long)dl->byte_offset, es);
    t.dtype = (int32_t)dt;
    t.ndim = dl->ndim;
    int64_t numel = 1, stride = 1;
    for (int32_t d = dl->ndim - 1; d >= 0; --d) {
        SSM_RETURN_IF(dl->shape[d] < 0, ctx, SSM_STATUS_INVALID_SHAPE, "tensor_from_dlpack: shape[%d]=%lld is negative",
                      (int)d, (long long)dl->shape[d]);
        t.shape[d] = dl->shape[d];
        t.strides[d] = dl->strides != NULL ? dl->strides[d] : stride; /* NULL strides: compact row-major */
        if (dl->shape[d] > 1 && stride > INT64_MAX / dl->shape[d]) stride = INT64_MAX; /* only for NULL strides */
        else stride *= dl->shape[d] > 0 ? dl->shape[d] : 1;
        numel = dl->shape[d] == 0 ? 0 : numel;
    }
    if (dl->data == NULL) {
        SSM_RETURN_IF(numel != 0, ctx, SSM_STATUS_INVALID_ARGUMENT,
                      "tensor_from_dlpack: data is NULL for a tensor with elements");
        t.data = empty_placeholder;
    } else {
        t.data = (char *)dl->data + dl->byte_offset;
    }
    *out = t;
    return SSM_STATUS_OK;
}
