/* Opening below a sandbox's directory (core/host/fsutil.c, which the
 * core uses and plugins get as host->open_beneath): openat2 with
 * RESOLVE_BENEATH, and the component walk used where openat2 is missing.
 * Both must refuse every way out; neither follows a link unless asked to
 * follow those that stay beneath. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "harness.h"
#include "core/host/fsutil.h"

typedef int (*open_fn)(int, const char *, int, unsigned);

static int strict(int dirfd, const char *path, int flags, unsigned mode)
{
	return sr__open_beneath(dirfd, path, flags, mode, 0);
}

static int links_inside(int dirfd, const char *path, int flags, unsigned mode)
{
	return sr__open_beneath(dirfd, path, flags, mode, SR_BENEATH_LINKS_INSIDE);
}

static char *dir;
static int dfd;

static void setup(void)
{
	char path[4200];

	dir = t_tmpdir();
	snprintf(path, sizeof(path), "%s/sub", dir);
	cr_assert_eq(mkdir(path, 0700), 0);
	t_write(dir, "sub/inside.txt", "inside");
	snprintf(path, sizeof(path), "%s/sub/to-etc", dir);
	cr_assert_eq(symlink("/etc", path), 0);
	snprintf(path, sizeof(path), "%s/sub/to-inside", dir);
	cr_assert_eq(symlink("inside.txt", path), 0);
	dfd = open(dir, O_RDONLY | O_DIRECTORY);
	cr_assert_geq(dfd, 0);
}

static void teardown(void)
{
	close(dfd);
}

TestSuite(beneath, .init = setup, .fini = teardown);

static void opens(open_fn f, const char *path)
{
	int fd = f(dfd, path, O_RDONLY, 0);

	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	close(fd);
}

static void refuses(open_fn f, const char *path)
{
	int fd = f(dfd, path, O_RDONLY, 0);

	if (fd >= 0)
		close(fd);
	cr_assert_lt(fd, 0, "'%s' was opened", path);
	cr_assert(errno == EXDEV || errno == ENOENT || errno == ELOOP, "%s: %s", path,
		  strerror(errno));
}

static void both_refuse_every_way_out(open_fn f)
{
	opens(f, "sub/inside.txt");
	opens(f, "./sub/inside.txt");
	refuses(f, "../etc/hostname");
	refuses(f, "sub/../../etc/hostname");
	refuses(f, "sub/to-etc/hostname");
	refuses(f, "/etc/hostname");
}

/* Does this kernel (or valgrind, which lacks it) offer openat2? */
static int have_openat2(void)
{
	struct open_how how = { .flags = O_RDONLY, .resolve = RESOLVE_BENEATH };
	int fd = (int)syscall(SYS_openat2, dfd, "sub/inside.txt", &how, sizeof(how));

	if (fd >= 0)
		close(fd);
	return fd >= 0 || errno != ENOSYS;
}

Test(beneath, openat2_stays_below_the_directory_and_follows_no_link)
{
	both_refuse_every_way_out(strict);
	refuses(strict, "sub/to-inside");
	opens(links_inside, "sub/inside.txt");
	refuses(links_inside, "sub/to-etc/hostname");
	refuses(links_inside, "../etc/hostname");
	/* Asked to, a link that stays beneath is followed where openat2 is. */
	if (have_openat2())
		opens(links_inside, "sub/to-inside");
	else
		refuses(links_inside, "sub/to-inside");
}

Test(beneath, the_component_walk_stays_below_the_directory_and_follows_no_link)
{
	both_refuse_every_way_out(sr__open_by_components);
	refuses(sr__open_by_components, "sub/to-inside");
}

Test(beneath, files_are_created_below_with_their_mode)
{
	char path[4200];
	struct stat st;
	int fd;

	umask(022);
	fd = strict(dfd, "sub/new.txt", O_WRONLY | O_CREAT | O_EXCL, 0640);

	cr_assert_geq(fd, 0, "%s", strerror(errno));
	close(fd);
	snprintf(path, sizeof(path), "%s/sub/new.txt", dir);
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0640, "mode %o", st.st_mode & 0777);
	fd = sr__open_by_components(dfd, "sub/walked.txt", O_WRONLY | O_CREAT | O_EXCL, 0600);
	cr_assert_geq(fd, 0, "%s", strerror(errno));
	close(fd);
	cr_assert_lt(strict(dfd, "../escaped.txt", O_WRONLY | O_CREAT, 0600), 0);
	snprintf(path, sizeof(path), "%s/../escaped.txt", dir);
	cr_assert_neq(access(path, F_OK), 0, "a file was created outside");
}
