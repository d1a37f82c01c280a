/* Opening a path below a directory and never outside it: openat2 with
 * RESOLVE_BENEATH, or a walk one component at a time where openat2 is
 * missing. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "local.h"

/* Without openat2 (kernels before 5.6, valgrind): walk the path one
 * component at a time, never following a symlink and refusing "..". This
 * is stricter than RESOLVE_BENEATH (no symlink at all) and as confined. */
int local__open_by_components(int dirfd, const char *path, int flags,
			      mode_t mode)
{
	char *copy = strdup(path), *comp, *next, *save = NULL;
	int fd = dup(dirfd), nfd;

	if (!copy || fd < 0) {
		free(copy);
		if (fd >= 0)
			close(fd);
		errno = ENOMEM;
		return -1;
	}
	comp = strtok_r(copy, "/", &save);
	while (comp) {
		next = strtok_r(NULL, "/", &save);
		if (strcmp(comp, "..") == 0) {
			close(fd);
			free(copy);
			errno = EXDEV;
			return -1;
		}
		if (strcmp(comp, ".") == 0 && next) {
			comp = next;
			continue;
		}
		nfd = next ? openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) :
			     openat(fd, comp, flags | O_NOFOLLOW | O_CLOEXEC, mode);
		close(fd);
		if (nfd < 0) {
			if (errno == ELOOP || errno == ENOTDIR)
				errno = EXDEV; /* a symlink on the way */
			free(copy);
			return -1;
		}
		fd = nfd;
		comp = next;
	}
	free(copy);
	return fd;
}

int local__open_beneath(int dirfd, const char *path, int flags, mode_t mode)
{
	static int no_openat2;
	struct open_how how;
	int fd;

	if (!no_openat2) {
		memset(&how, 0, sizeof(how));
		how.flags = (uint64_t)(flags | O_CLOEXEC);
		how.mode = (flags & O_CREAT) ? mode : 0;
		how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
		fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
		if (fd >= 0 || errno != ENOSYS)
			return fd;
		no_openat2 = 1;
	}
	return local__open_by_components(dirfd, path, flags, mode);
}
