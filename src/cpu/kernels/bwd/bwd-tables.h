/* bwd-tables.h — the backward kernel table (bwd.h) chosen by the context ISA. */
#ifndef SSMI_CPU_BWD_TABLES_H
#define SSMI_CPU_BWD_TABLES_H

#include "ssmops.h"
#include "bwd.h"

const ssmi_cpu_bwd_kernels * ssmi_cpu_bwd_kernels_for(const ssm_context * ctx);

#endif
