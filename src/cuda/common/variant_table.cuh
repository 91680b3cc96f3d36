/* variant_table.cuh — what every CUDA selection table does with the variant registry
 * (core/variant.c): report its entries (the family's ssmi_cuda_variants_<op>, routed by
 * select.cu) and pick the entry that runs one call.
 *
 * A table is an ordered array of entries; an entry type has at least
 *   const char * name;                     by what the entry does
 *   const char * why;                      one line: why it exists, when it applies
 *   const char * rule;                     the condition applies() tests, for the error message
 *   bool (*applies)(const Problem & pb);   does the entry cover this call's problem
 * and whatever the family needs to run it (a launch function); optionally
 *   bool (*pays)(const Problem & pb);      the default's measured rule on top of applies (NULL: none)
 * The first entry that applies (and pays, where it has the member) is the default; an entry forced
 * through the context runs wherever it applies (pays is not asked). */
#ifndef SSMI_CUDA_VARIANT_TABLE_CUH
#define SSMI_CUDA_VARIANT_TABLE_CUH

extern "C" {
#include "../../core/ssmi.h"
}

#include <type_traits>
#include <utility>

/* Whether an entry type has the optional `pays` member. */
template <class Entry, class = void>
struct ssmi_entry_has_pays : std::false_type {};
template <class Entry>
struct ssmi_entry_has_pays<Entry, std::void_t<decltype(std::declval<const Entry &>().pays)>> : std::true_type {};

/* The default's rule of entry e on pb: applies, and pays where the entry has that member. */
template <class Entry, class Problem>
bool ssmi_entry_default(const Entry & e, const Problem & pb) {
    if (!e.applies(pb)) return false;
    if constexpr (ssmi_entry_has_pays<Entry>::value) return e.pays == NULL || e.pays(pb);
    return true;
}

/* The number of entries; for 0 ≤ i < that number and out != NULL, entry i's name and reason. */
template <class Entry, int N>
int32_t ssmi_cuda_report_variants(const Entry (&table)[N], int32_t i, ssmi_variant_info * out) {
    if (out != NULL && i >= 0 && i < N) {
        out->name = table[i].name;
        out->why = table[i].why;
    }
    return N;
}

/* The entry of table that runs op's call on problem pb, in *out: the forced one (UNSUPPORTED
 * through ssmi_variant_not_applicable when it does not apply; pays is not asked), else the first
 * that applies and pays (ssmi_entry_default), or NULL when none does (the caller reports why). The entry is recorded for
 * ssm_context_last_variant. */
template <class Entry, int N, class Problem>
ssm_status ssmi_cuda_pick_variant(ssm_context * ctx, ssmi_op op, const Entry (&table)[N], const Problem & pb,
                                  const Entry ** out) {
    *out = NULL;
    const int32_t forced = ssmi_variant_forced(ctx, op);
    if (forced >= 0 && forced < N) {
        const Entry & e = table[forced];
        if (!e.applies(pb)) return ssmi_variant_not_applicable(ctx, op, e.name, e.rule);
        *out = &e;
    } else {
        for (int i = 0; i < N && *out == NULL; ++i)
            if (ssmi_entry_default(table[i], pb)) *out = &table[i];
    }
    if (*out != NULL) ssmi_variant_ran(ctx, (*out)->name);
    return SSM_STATUS_OK;
}

#endif /* SSMI_CUDA_VARIANT_TABLE_CUH */
