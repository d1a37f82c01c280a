/* Small file-system helpers the core shares. */
#ifndef SR_CORE_FSUTIL_H
#define SR_CORE_FSUTIL_H

#include "sandrun/plugin.h"

/* mkdir -p with mode for each missing component: SR_OK, SR_EINVAL for an
 * empty or too long path, SR_EIO. */
int sr__mkdirs(const char *path, unsigned mode);

/* Under a root runner, what the runner makes in a directory of another
 * user (a sandbox's, whose agent runs as that user) is that user's: the
 * owner of the directory open at dirfd, 1 with *uid and *gid set; 0 when
 * the runner is not root or the directory is root's. */
int sr__owner_to_give(int dirfd, unsigned *uid, unsigned *gid);

/* sr_host.open_beneath (see sandrun/plugin.h): path opened beneath dirfd,
 * never outside it; how: 0 (no link at all) or SR_BENEATH_LINKS_INSIDE.
 * sr__open_by_components is the walk used where openat2 is missing. */
int sr__open_beneath(int dirfd, const char *path, int flags, unsigned mode, unsigned how);
int sr__open_by_components(int dirfd, const char *path, int flags, unsigned mode);

/* The machine an ELF executable is built for, as uname -m names it
 * ("x86_64", "aarch64", ...), or NULL when path is no ELF file or names
 * a machine not listed here. *is_static: 1 for a 64-bit little-endian
 * executable without a program interpreter (statically linked). */
const char *sr__elf_machine(const char *path, int *is_static);

/* Hex SHA-256 of the file at path (65 bytes with the NUL) and its size.
 * SR_OK, or SR_EIO when it cannot be read. */
int sr__sha256_file(const char *path, char hex[65], long long *size);
/* The SHA-256 of len bytes at data, as 64 hex digits ("" on a failure). */
void sr__sha256_hex(const void *data, size_t len, char hex[65]);

#endif
