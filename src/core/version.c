/*
 * version.c — the version of the library actually loaded, so a caller built against one
 * header can detect a different shared library at run time.
 */
#include "ssmi.h"

#define SSMI_STR_(x) #x
#define SSMI_STR(x) SSMI_STR_(x)

SSM_API const char * ssm_version(void) {
    return SSMI_STR(SSM_VERSION_MAJOR) "." SSMI_STR(SSM_VERSION_MINOR) "." SSMI_STR(SSM_VERSION_PATCH);
}

SSM_API unsigned ssm_version_number(void) { return (unsigned)SSM_VERSION_NUMBER; }
