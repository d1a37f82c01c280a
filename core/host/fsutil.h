/* Small file-system helpers the core shares. */
#ifndef SR_CORE_FSUTIL_H
#define SR_CORE_FSUTIL_H

#include "sandrun/plugin.h"

/* mkdir -p with mode for each missing component: SR_OK, SR_EINVAL for an
 * empty or too long path, SR_EIO. */
int sr__mkdirs(const char *path, unsigned mode);

#endif
