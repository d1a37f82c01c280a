/* The durable key-value area of a plugin: one file per key under a
 * directory, replaced by a temporary file and a rename, and one lock file
 * (flock) so that put, delete and compare-and-set exclude each other across
 * runner processes. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/host/fsutil.h"
#include "core/host/kv.h"

#define KV_MAX_VALUE (1u << 20)

int sr__kv_valid_key(const char *key)
{
	size_t n = 0;

	if (!key || key[0] == '.')
		return 0;
	for (; key[n]; n++) {
		char c = key[n];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
			return 0;
	}
	return n >= 1 && n <= 128;
}

int sr__kv_get(const char *dir, const char *key, char **value, size_t *len)
{
	char path[4096];
	struct stat st;
	char *buf;
	ssize_t n;
	int fd;

	*value = NULL;
	if (len)
		*len = 0;
	if (!sr__kv_valid_key(key))
		return SR_EINVAL;
	snprintf(path, sizeof(path), "%s/%s", dir, key);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? SR_ENOTFOUND : SR_EIO;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    st.st_size > KV_MAX_VALUE) {
		close(fd);
		return SR_EIO;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return SR_ENOMEM;
	}
	n = read(fd, buf, (size_t)st.st_size);
	close(fd);
	if (n != st.st_size) {
		free(buf);
		return SR_EIO;
	}
	buf[n] = 0;
	*value = buf;
	if (len)
		*len = (size_t)n;
	return SR_OK;
}

/* One lock per area: put, delete and compare-and-set exclude each other,
 * across runner processes too. Returns the locked descriptor or -1. */
static int kv_lock(const char *dir)
{
	char path[4200];
	int fd;

	if (sr__mkdirs(dir, 0700) != SR_OK)
		return -1;
	snprintf(path, sizeof(path), "%s/.lock", dir);
	fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	while (fd >= 0 && flock(fd, LOCK_EX) != 0) {
		if (errno != EINTR) {
			close(fd);
			return -1;
		}
	}
	return fd;
}

static void kv_unlock(int fd)
{
	close(fd); /* releases the flock */
}

/* Replace key's value by a temporary file and a rename (under the lock). */
static int kv_write(const char *dir, const char *key, const void *value,
		    size_t len)
{
	char path[4096], tmp[4200];
	int fd;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/%s", dir, key);
	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp.%ld", dir, key, (long)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return SR_EIO;
	n = write(fd, value, len);
	if (n != (ssize_t)len || fsync(fd) != 0) {
		close(fd);
		unlink(tmp);
		return SR_EIO;
	}
	close(fd);
	if (rename(tmp, path) != 0) {
		unlink(tmp);
		return SR_EIO;
	}
	return SR_OK;
}

int sr__kv_put(const char *dir, const char *key, const void *value,
	       size_t len)
{
	int lock, rc;

	if (!sr__kv_valid_key(key))
		return SR_EINVAL;
	if (len > KV_MAX_VALUE)
		return SR_ETOOBIG;
	if ((lock = kv_lock(dir)) < 0)
		return SR_EIO;
	rc = kv_write(dir, key, value, len);
	kv_unlock(lock);
	return rc;
}

int sr__kv_cas(const char *dir, const char *key, const void *expected,
	       size_t expected_len, const void *value, size_t len)
{
	char *cur = NULL;
	size_t cur_len = 0;
	int lock, rc;

	if (!sr__kv_valid_key(key))
		return SR_EINVAL;
	if (len > KV_MAX_VALUE)
		return SR_ETOOBIG;
	if ((lock = kv_lock(dir)) < 0)
		return SR_EIO;
	rc = sr__kv_get(dir, key, &cur, &cur_len);
	if (rc == SR_ENOTFOUND)
		rc = expected ? SR_ESTATE : SR_OK;
	else if (rc == SR_OK && (!expected || cur_len != expected_len ||
				 memcmp(cur, expected, cur_len) != 0))
		rc = SR_ESTATE;
	if (rc == SR_OK)
		rc = kv_write(dir, key, value, len);
	kv_unlock(lock);
	free(cur);
	return rc;
}

int sr__kv_delete(const char *dir, const char *key)
{
	char path[4096];
	int lock, rc = SR_OK;

	if (!sr__kv_valid_key(key))
		return SR_EINVAL;
	snprintf(path, sizeof(path), "%s/%s", dir, key);
	if ((lock = kv_lock(dir)) < 0)
		return SR_EIO;
	if (unlink(path) != 0)
		rc = errno == ENOENT ? SR_ENOTFOUND : SR_EIO;
	kv_unlock(lock);
	return rc;
}

int sr__kv_list(const char *dir, sr_kv_visit_fn visit, void *ud)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return errno == ENOENT ? SR_OK : SR_EIO;
	while ((e = readdir(d)))
		if (sr__kv_valid_key(e->d_name) && visit(ud, e->d_name))
			break;
	closedir(d);
	return SR_OK;
}
