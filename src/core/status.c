/*
 * status.c — names of the status codes.
 *
 * A designated-initializer table indexed by the (pinned) code value, so the table stays
 * correct whatever order the enum is written in; gaps in the code space read as NULL and
 * are reported as unknown.
 */
#include "ssmi.h"

static const char * const ssmi_status_names[] = {
    [SSM_STATUS_OK]                   = "SSM_STATUS_OK",
    [SSM_STATUS_INVALID_ARGUMENT]     = "SSM_STATUS_INVALID_ARGUMENT",
    [SSM_STATUS_INVALID_SHAPE]        = "SSM_STATUS_INVALID_SHAPE",
    [SSM_STATUS_INVALID_LAYOUT]       = "SSM_STATUS_INVALID_LAYOUT",
    [SSM_STATUS_UNSUPPORTED]          = "SSM_STATUS_UNSUPPORTED",
    [SSM_STATUS_UNSUPPORTED_HARDWARE] = "SSM_STATUS_UNSUPPORTED_HARDWARE",
    [SSM_STATUS_OUT_OF_MEMORY]        = "SSM_STATUS_OUT_OF_MEMORY",
    [SSM_STATUS_WORKSPACE_TOO_SMALL]  = "SSM_STATUS_WORKSPACE_TOO_SMALL",
    [SSM_STATUS_DEVICE_ERROR]         = "SSM_STATUS_DEVICE_ERROR",
    [SSM_STATUS_INTERNAL]             = "SSM_STATUS_INTERNAL",
};

SSM_API const char * ssm_status_string(ssm_status status) {
    /* Compare as a wide signed integer: the caller may pass any int cast to the enum. */
    const long long code = (long long)status;
    const long long count = (long long)(sizeof(ssmi_status_names) / sizeof(ssmi_status_names[0]));
    if (code < 0 || code >= count || ssmi_status_names[code] == NULL) return "SSM_STATUS_UNKNOWN";
    return ssmi_status_names[code];
}
