/* Small file-system helpers the core shares. */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "core/host/fsutil.h"

int sr__mkdirs(const char *path, unsigned mode)
{
	char buf[4096];
	size_t n = strlen(path);

	if (n == 0 || n >= sizeof(buf))
		return SR_EINVAL;
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, mode) != 0 && errno != EEXIST)
			return SR_EIO;
		*p = '/';
	}
	if (mkdir(buf, mode) != 0 && errno != EEXIST)
		return SR_EIO;
	return SR_OK;
}
