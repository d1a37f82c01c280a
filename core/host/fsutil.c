/* Small file-system helpers the core shares. */
#include "config.h"

#include <elf.h>
#include <openssl/evp.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/host/fsutil.h"

/* Without openat2 (kernels before 5.6, valgrind): the path one component
 * at a time, never following a symbolic link and refusing "..": as
 * confined as RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS. */
int sr__open_by_components(int dirfd, const char *path, int flags, unsigned mode)
{
	char *copy = strdup(path), *comp, *next, *save = NULL;
	int fd = dup(dirfd), nfd;

	if (!copy || fd < 0 || path[0] == '/') {
		free(copy);
		if (fd >= 0)
			close(fd);
		errno = copy && fd >= 0 ? EXDEV : ENOMEM;
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
			     openat(fd, comp, flags | O_NOFOLLOW | O_CLOEXEC, (mode_t)mode);
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

int sr__open_beneath(int dirfd, const char *path, int flags, unsigned mode, unsigned how)
{
	static int no_openat2; /* a benign race: each thread learns the same */
	struct open_how oh;
	int fd;

	if (!no_openat2) {
		memset(&oh, 0, sizeof(oh));
		oh.flags = (uint64_t)(flags | O_CLOEXEC);
		oh.mode = (flags & O_CREAT) ? mode : 0;
		oh.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS |
			     ((how & SR_BENEATH_LINKS_INSIDE) ? 0 : RESOLVE_NO_SYMLINKS);
		fd = (int)syscall(SYS_openat2, dirfd, path, &oh, sizeof(oh));
		if (fd >= 0 || errno != ENOSYS)
			return fd < 0 && errno == ELOOP ? (errno = EXDEV, -1) : fd;
		no_openat2 = 1;
	}
	return sr__open_by_components(dirfd, path, flags, mode);
}

int sr__owner_to_give(int dirfd, unsigned *uid, unsigned *gid)
{
	struct stat st;

	if (geteuid() != 0 || fstat(dirfd, &st) != 0 || st.st_uid == 0)
		return 0;
	*uid = st.st_uid;
	*gid = st.st_gid;
	return 1;
}

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

/* Whether the 64-bit little-endian ELF file fd, whose header is h, asks
 * for a program interpreter (is dynamically linked). */
static int has_interp(int fd, const Elf64_Ehdr *h)
{
	for (unsigned i = 0; i < h->e_phnum && i < 256; i++) {
		Elf64_Phdr ph;
		off_t at = (off_t)h->e_phoff + (off_t)i * h->e_phentsize;
		if (h->e_phentsize < sizeof(ph) || pread(fd, &ph, sizeof(ph), at) != sizeof(ph))
			return 1; /* unreadable: not known to be static */
		if (ph.p_type == PT_INTERP)
			return 1;
	}
	return 0;
}

const char *sr__elf_machine(const char *path, int *is_static)
{
	unsigned char h[sizeof(Elf64_Ehdr)];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, h, sizeof(h)) : -1;
	unsigned m;

	*is_static = 0;
	if (n != (ssize_t)sizeof(h) || memcmp(h, ELFMAG, SELFMAG) != 0) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	if (h[EI_CLASS] == ELFCLASS64 && h[EI_DATA] == ELFDATA2LSB) {
		Elf64_Ehdr eh;
		memcpy(&eh, h, sizeof(eh));
		*is_static = !has_interp(fd, &eh);
	}
	close(fd);
	/* e_type (2 bytes), then e_machine, in the file's byte order. */
	if (h[EI_DATA] == ELFDATA2LSB)
		m = (unsigned)h[EI_NIDENT + 2] | (unsigned)h[EI_NIDENT + 3] << 8;
	else if (h[EI_DATA] == ELFDATA2MSB)
		m = (unsigned)h[EI_NIDENT + 2] << 8 | (unsigned)h[EI_NIDENT + 3];
	else
		return NULL;
	switch (m) {
	case EM_X86_64:
		return "x86_64";
	case EM_AARCH64:
		return "aarch64";
	case EM_386:
		return "i686";
	case EM_RISCV:
		return "riscv64";
	default:
		return NULL;
	}
}

void sr__sha256_hex(const void *data, size_t len, char hex[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	EVP_MD_CTX *x = EVP_MD_CTX_new();
	int ok;

	hex[0] = 0;
	if (!x)
		return;
	ok = EVP_DigestInit_ex(x, EVP_sha256(), NULL) == 1 &&
	     EVP_DigestUpdate(x, data, len) == 1 && EVP_DigestFinal_ex(x, md, &n) == 1 && n == 32;
	EVP_MD_CTX_free(x);
	for (unsigned int i = 0; ok && i < n; i++)
		snprintf(hex + (size_t)i * 2, 3, "%02x", md[i]);
}

int sr__sha256_file(const char *path, char hex[65], long long *size)
{
	unsigned char buf[65536], md[EVP_MAX_MD_SIZE];
	unsigned int len = 0;
	EVP_MD_CTX *x;
	ssize_t got;
	long long total = 0;
	int fd, ok;

	hex[0] = 0;
	*size = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return SR_EIO;
	if (!(x = EVP_MD_CTX_new())) {
		close(fd);
		return SR_EIO;
	}
	ok = EVP_DigestInit_ex(x, EVP_sha256(), NULL) == 1;
	while (ok && (got = read(fd, buf, sizeof(buf))) != 0) {
		if (got < 0) {
			ok = errno == EINTR;
			continue;
		}
		ok = EVP_DigestUpdate(x, buf, (size_t)got) == 1;
		total += got;
	}
	close(fd);
	ok = ok && EVP_DigestFinal_ex(x, md, &len) == 1 && len == 32;
	EVP_MD_CTX_free(x);
	if (!ok)
		return SR_EIO;
	for (unsigned int i = 0; i < len; i++)
		snprintf(hex + (size_t)i * 2, 3, "%02x", md[i]);
	*size = total;
	return SR_OK;
}
