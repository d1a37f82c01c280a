/* Session pointers with compare-and-set. */
#include "config.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <unistd.h>

#include "core/host/ctx.h"
#include "core/host/fsutil.h"
#include "core/run/session.h"

void sr__session_new_id(char *buf, size_t n)
{
	unsigned char r[8] = { 0 };

	(void)!getrandom(r, sizeof(r), 0);
	snprintf(buf, n, "ses-%02x%02x%02x%02x%02x%02x%02x%02x", r[0], r[1], r[2],
		 r[3], r[4], r[5], r[6], r[7]);
}

int sr__session_valid_id(const char *id)
{
	if (!id || strncmp(id, "ses-", 4) != 0 || strlen(id) != 20)
		return 0;
	for (const char *p = id + 4; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return 0;
	return 1;
}

static void paths(const char *state, const char *id, char *dir, char *file,
		  char *lock, size_t n)
{
	snprintf(dir, n, "%s/sessions", state);
	snprintf(file, n, "%s/sessions/%s.json", state, id);
	snprintf(lock, n, "%s/sessions/.%s.lock", state, id);
}

int sr__session_load(const char *state_dir, const char *id, json_t **out)
{
	char dir[4096], file[4096], lock[4096];

	*out = NULL;
	if (!sr__session_valid_id(id))
		return SR_EINVAL;
	paths(state_dir, id, dir, file, lock, sizeof(dir));
	*out = json_load_file(file, 0, NULL);
	if (*out && !json_is_object(*out)) {
		json_decref(*out);
		*out = NULL;
		return SR_EIO;
	}
	if (!*out)
		return access(file, F_OK) == 0 ? SR_EIO : SR_ENOTFOUND;
	return SR_OK;
}

/* The session's lock, taken; -1 when it cannot be. */
static int lock_session(const char *dir, const char *lock)
{
	int fd;

	if (sr__mkdirs(dir, 0700) != SR_OK)
		return -1;
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd >= 0 && flock(fd, LOCK_EX) != 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

int sr__session_store(const char *state_dir, const char *id, json_t *rec,
		      int expected_turn)
{
	char dir[4096], file[4096], lock[4096], tmp[4200];
	json_t *cur;
	int fd, rc = SR_OK, have;

	if (!sr__session_valid_id(id) ||
	    json_integer_value(json_object_get(rec, "turn")) != expected_turn + 1)
		return SR_EINVAL;
	paths(state_dir, id, dir, file, lock, sizeof(dir));
	if ((fd = lock_session(dir, lock)) < 0)
		return SR_EIO;
	cur = json_load_file(file, 0, NULL);
	have = cur ? (int)json_integer_value(json_object_get(cur, "turn")) : 0;
	json_decref(cur);
	if (!cur && access(file, F_OK) == 0) {
		rc = SR_EIO; /* unreadable: never overwritten as if absent */
	} else if (have != expected_turn) {
		rc = SR_ESTATE;
	} else {
		snprintf(tmp, sizeof(tmp), "%s.tmp", file);
		if (json_dump_file(rec, tmp, JSON_COMPACT) != 0 || rename(tmp, file) != 0)
			rc = SR_EIO;
	}
	flock(fd, LOCK_UN);
	close(fd);
	return rc;
}

int sr__session_remove(const char *state_dir, const char *id)
{
	char dir[4096], file[4096], lock[4096];

	int fd, rc;

	if (!sr__session_valid_id(id))
		return SR_EINVAL;
	paths(state_dir, id, dir, file, lock, sizeof(dir));
	/* Under the lock, which stays: unlinking it would let a writer that
	 * holds the old one and a writer that makes a new one both write. */
	if ((fd = lock_session(dir, lock)) < 0)
		return SR_EIO;
	rc = unlink(file) == 0 ? SR_OK : SR_ENOTFOUND;
	close(fd);
	return rc;
}
