/* cudautil.h — device mirrors of host test tensors for the CUDA tests (test_cuda_*.c), and
 * the device-presence check. Uses only the public CUDA helpers of ssmops.h; without
 * a device every call fails its TEST_CHECK, so tests exit 77 before using them. */
#ifndef SSMT_CUDAUTIL_H
#define SSMT_CUDAUTIL_H

#include "testutil.h"

/* A device copy of a host tensor's whole allocation (its padding too). */
typedef struct ssmt_dev {
    void *     mem;  /* device allocation (NULL = absent)           */
    ssm_tensor view; /* the host view re-pointed into mem, on CUDA  */
} ssmt_dev;

/* Copies h (all of h->buf) to a new device allocation; h absent (data NULL) gives an absent
 * ssmt_dev. At least 64 bytes: an empty tensor still needs a device address. */
ssmt_dev ssmt_to_device(const ssmt_host * h);
/* Copies the device allocation back over h->buf (nothing when d is absent). */
void ssmt_to_host(const ssmt_host * h, const ssmt_dev * d);
void ssmt_dev_free(ssmt_dev * d);

/* fn(ctx, args') for operator op, where args' is a copy of args (its args struct, tensors in host
 * memory) whose present tensors — index tensors too when index_dev, else they stay on the host —
 * are device copies: views whose host byte ranges overlap share one copy (an in-place pool stays
 * in place, a slice stays inside its buffer; every view must lie inside its host buffer). After
 * a successful call every range holding an output is copied back over its host bytes; after a
 * failed one the host is left alone and a test check fails if the call changed any output range
 * on the device. Returns fn's status. */
ssm_status ssmt_run_on_device(ssm_context * ctx, const char * op, const void * args, int index_dev, ssmt_run_fn fn);

/* The NaN pattern of a device run: op by fn through ssmt_run_on_device (args' tensors on the
 * host), under the default choice and then with each of op's CUDA table entries forced (one that
 * answers UNSUPPORTED is skipped), the n outputs outs[i] (views args holds) NaN-poisoned before
 * each run. Every run must succeed with the NaN-ness of ref[i] (the reference's outputs, which
 * must hold a NaN) in outs[i], element by element. Returns the runs that succeeded. */
int ssmt_nan_pattern_runs(ssm_context * ctx, const char * op, const void * args, ssmt_run_fn fn,
                          ssmt_host * const * outs, const ssmt_host * ref, int n, const char * tag);

/* 1 when a CUDA device is present; otherwise prints "<test>: no CUDA device: skipped". */
int ssmt_cuda_present(const char * test);

/* 1 when the test runs with SSMOPS_CUDA_PORTABLE=1 (the *_portable CTest entries): the tests'
 * CUDA contexts are then created with params.cuda_portable = 1, so the CUDA backend chooses as
 * on a GPU without wgmma. */
int ssmt_cuda_portable(void);
/* 1 when entry `name` of op's CUDA selection table launches a wgmma kernel (sm_90a code on an
 * sm_90 device): the entries a portable run never chooses, forced or not. */
int ssmt_variant_needs_wgmma(const char * op, const char * name);

#endif /* SSMT_CUDAUTIL_H */
