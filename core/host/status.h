/* Status codes' texts (enum sr_status in sandrun/plugin.h). */
#ifndef SR_CORE_STATUS_H
#define SR_CORE_STATUS_H

#include "sandrun/plugin.h"

/* "not found" for SR_ENOTFOUND; "unknown error" for what is not a code. */
const char *sr__strerror(int status);

#endif
