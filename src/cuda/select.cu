/* select.cu — the CUDA backend's selection tables as the variant registry sees them
 * (src/core/variant.c): for each operator with a CUDA path, the names and reasons of its
 * table's entries, in order. The tables themselves, with their rules and launches, live
 * with each family's host code. */
extern "C" {
#include "../core/ssmi.h"
}

extern "C" int32_t ssmi_cuda_variant_count(ssmi_op op) {
    switch (op) {
        default: return 0;
    }
}

extern "C" ssmi_variant_info ssmi_cuda_variant(ssmi_op op, int32_t i) {
    ssmi_variant_info none = {NULL, NULL};
    (void)i;
    switch (op) {
        default: return none;
    }
}
