/* File operations through the sandbox's toolbox ({toolboxProxyUrl}/{id}):
 * bulk-upload (multipart files[0].path, files[0].file), download, list,
 * move, delete, folder, permissions. Relative paths are under the
 * workspace. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daytona.h"

#define MAX_FILE_DEFAULT (64u << 20)

enum { F_PUT, F_GET, F_LIST, F_RENAME, F_REMOVE, F_MKDIR };

typedef struct fdata {
	int what;
	void *data;
	size_t len;
} fdata;

static fdata *fd_of(dy_op *op)
{
	return op->xdata;
}

static void ok_done(dy_op *op, const char *json)
{
	dy__op_finish(op, SR_OK, json, NULL, 0, NULL);
}

static void fail_path(dy_op *op, const dy_resp *r)
{
	int status = r->status != SR_OK ? r->status : dy__http_fail_status(r->http, r->why);

	if (r->status != SR_OK) {
		dy__op_fail(op, r);
		return;
	}
	dy__op_finish(op, status, NULL, NULL, 0, "daytona: sandbox '%s': %s '%s': HTTP %d%s%s",
		      op->id, op->what, op->path, r->http, r->why ? ": " : "",
		      r->why ? r->why : "");
}

static char *tb_url(dy_op *op, const char *fmt, const char *a, const char *b)
{
	const char *tb = dy__box_toolbox(op->d, op->id);
	char *ea = a ? dy__urlenc(a) : NULL, *eb = b ? dy__urlenc(b) : NULL;
	size_t n = strlen(tb) + strlen(fmt) + (ea ? strlen(ea) : 0) + (eb ? strlen(eb) : 0) + 8;
	char *url = malloc(n), *full;

	if (url && (!a || ea) && (!b || eb)) {
		snprintf(url, n, fmt, ea ? ea : "", eb ? eb : "");
		full = malloc(strlen(tb) + strlen(url) + 1);
		if (full)
			sprintf(full, "%s%s", tb, url);
	} else {
		full = NULL;
	}
	free(url);
	free(ea);
	free(eb);
	return full;
}

static void answered_ok(dy_op *op, const dy_resp *r)
{
	if (r->status != SR_OK || r->http >= 300) {
		fail_path(op, r);
		return;
	}
	ok_done(op, NULL);
}

static void moved(dy_op *op, const dy_resp *r);

/* The destination is gone: move again (once). */
static void dest_removed(dy_op *op, const dy_resp *r)
{
	char *url;

	if (r->status != SR_OK || (r->http >= 300 && r->http != 404)) {
		fail_path(op, r);
		return;
	}
	op->attempts = -1; /* no third try */
	url = tb_url(op, "/files/move?source=%s&destination=%s", op->path, op->path2);
	if (!url) {
		dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "daytona: out of memory");
		return;
	}
	dy__api(op, "POST", url, NULL, NULL, 0, 0, moved);
	free(url);
}

/* The ABI's rename replaces its destination, as rename(2) does; the
 * toolbox's move refuses one that exists (409 "destination already exists",
 * MoveFile in apps/daemon/pkg/toolbox/fs/move_file.go), so the destination
 * is removed and the move made again: not atomic there, which a caller
 * replacing a file (the shim) can bear. */
static void moved(dy_op *op, const dy_resp *r)
{
	char *url;

	if (r->status == SR_OK && r->http == 409 && op->attempts != -1) {
		url = tb_url(op, "/files?path=%s&recursive=true", op->path2, NULL);
		if (!url) {
			dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "daytona: out of memory");
			return;
		}
		dy__api(op, "DELETE", url, NULL, NULL, 0, 0, dest_removed);
		free(url);
		return;
	}
	answered_ok(op, r);
}

static void mode_set(dy_op *op, const dy_resp *r)
{
	json_t *code = json_object_get(r->json, "exitCode");

	if (r->status == SR_OK && r->http < 300 && json_integer_value(code) != 0) {
		dy__op_finish(op, SR_EIO, NULL, NULL, 0,
			      "daytona: sandbox '%s': chmod %o '%s' exited %d: %s", op->id,
			      op->mode & 07777, op->path, (int)json_integer_value(code),
			      json_string_value(json_object_get(r->json, "result")) ?
			      json_string_value(json_object_get(r->json, "result")) : "");
		return;
	}
	answered_ok(op, r);
}

static void uploaded(dy_op *op, const dy_resp *r)
{
	char mode[16], *url, *q, *cmd;
	json_t *body;

	if (r->status != SR_OK || r->http >= 300) {
		fail_path(op, r);
		return;
	}
	if (!op->mode) {
		ok_done(op, NULL);
		return;
	}
	/* chmod(1) through process/execute: one call, the same on every
	 * toolbox version (files/permissions is missing from some). */
	snprintf(mode, sizeof(mode), "%04o", op->mode & 07777);
	q = dy__shq(op->path);
	cmd = q ? malloc(strlen(q) + 32) : NULL;
	url = cmd ? tb_url(op, "/process/execute", NULL, NULL) : NULL;
	if (url)
		sprintf(cmd, "chmod %s %s", mode, q);
	body = url ? json_pack("{s:s, s:i}", "command", cmd, "timeout", 30) : NULL;
	if (!body) {
		free(q);
		free(cmd);
		free(url);
		dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "daytona: out of memory");
		return;
	}
	dy__api_json(op, "POST", url, body, mode_set);
	json_decref(body);
	free(q);
	free(cmd);
	free(url);
}

static void got(dy_op *op, const dy_resp *r)
{
	if (r->status == SR_ETOOBIG || (r->status == SR_OK && r->http < 300 && r->len > op->max)) {
		dy__op_finish(op, SR_ETOOBIG, NULL, NULL, 0,
			      "daytona: sandbox '%s': '%s' is larger than %zu bytes", op->id,
			      op->path, op->max);
		return;
	}
	if (r->status != SR_OK || r->http >= 300) {
		fail_path(op, r);
		return;
	}
	dy__op_finish(op, SR_OK, NULL, r->body, r->len, NULL);
}

static void listed(dy_op *op, const dy_resp *r)
{
	json_t *out, *it;
	size_t i;
	char *s;

	if (r->status != SR_OK || r->http >= 300) {
		fail_path(op, r);
		return;
	}
	if (!json_is_array(r->json)) {
		dy__op_finish(op, SR_EPROTO, NULL, NULL, 0,
			      "daytona: sandbox '%s': %s: the answer is not a JSON array", op->id,
			      op->what);
		return;
	}
	out = json_array();
	json_array_foreach(r->json, i, it) {
		const char *name = json_string_value(json_object_get(it, "name"));
		if (!name)
			continue;
		json_array_append_new(out, json_pack("{s:s, s:s, s:I}", "name", name, "type",
			json_is_true(json_object_get(it, "isDir")) ? "dir" : "file", "size",
			json_integer_value(json_object_get(it, "size"))));
	}
	s = json_dumps(out, JSON_COMPACT);
	dy__op_finish(op, s ? SR_OK : SR_ENOMEM, s, NULL, 0, s ? NULL : "daytona: out of memory");
	free(s);
	json_decref(out);
}

/* multipart/form-data with files[0].path and files[0].file. */
static char *multipart(dy_op *op, const fdata *f, const char *boundary, size_t *len)
{
	size_t n = strlen(op->path) + f->len + 512;
	char *b = malloc(n);
	int k;

	if (!b)
		return NULL;
	k = snprintf(b, n, "--%s\r\nContent-Disposition: form-data; name=\"files[0].path\"\r\n\r\n"
		     "%s\r\n--%s\r\nContent-Disposition: form-data; name=\"files[0].file\"; "
		     "filename=\"file\"\r\nContent-Type: application/octet-stream\r\n\r\n",
		     boundary, op->path, boundary);
	if (f->len)
		memcpy(b + k, f->data, f->len);
	*len = (size_t)k + f->len;
	*len += (size_t)sprintf(b + *len, "\r\n--%s--\r\n", boundary);
	return b;
}

static int resolve(dy_op *op, char **path)
{
	char *abs = dy__path_in_box(op->d, op->id, *path);

	if (!abs)
		return 0;
	free(*path);
	*path = abs;
	return 1;
}

static void send_op(dy_op *op, const dy_resp *unused)
{
	fdata *f = fd_of(op);
	char *url = NULL, *body, ctype[96];
	char boundary[48];
	unsigned char rnd[12];
	size_t len;

	(void)unused;
	/* Relative paths land in the workspace, known by now. */
	if (!resolve(op, &op->path) || (op->path2 && !resolve(op, &op->path2))) {
		if (op->in_call)
			op->start_rc = SR_ENOMEM;
		else
			dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "daytona: out of memory");
		return;
	}
	switch (f->what) {
	case F_PUT:
		op->d->host->random_bytes(op->d->host, rnd, sizeof(rnd));
		for (size_t i = 0; i < sizeof(rnd); i++)
			snprintf(boundary + 2 * i, 3, "%02x", rnd[i]);
		snprintf(ctype, sizeof(ctype), "multipart/form-data; boundary=%s", boundary);
		url = tb_url(op, "/files/bulk-upload", NULL, NULL);
		body = url ? multipart(op, f, boundary, &len) : NULL;
		if (body)
			dy__api(op, "POST", url, ctype, body, len, 0, uploaded);
		else
			url = (free(url), NULL);
		free(body);
		break;
	case F_GET:
		url = tb_url(op, "/files/download?path=%s", op->path, NULL);
		if (url)
			dy__api(op, "GET", url, NULL, NULL, 0, op->max + 1, got);
		break;
	case F_LIST:
		url = tb_url(op, "/files?path=%s", op->path, NULL);
		if (url)
			dy__api(op, "GET", url, NULL, NULL, 0, 16u << 20, listed);
		break;
	case F_RENAME:
		url = tb_url(op, "/files/move?source=%s&destination=%s", op->path, op->path2);
		if (url)
			dy__api(op, "POST", url, NULL, NULL, 0, 0, moved);
		break;
	case F_REMOVE:
		url = tb_url(op, "/files?path=%s&recursive=true", op->path, NULL);
		if (url)
			dy__api(op, "DELETE", url, NULL, NULL, 0, 0, answered_ok);
		break;
	case F_MKDIR:
		snprintf(ctype, sizeof(ctype), "%o", op->mode ? op->mode & 07777 : 0755);
		url = tb_url(op, "/files/folder?path=%s&mode=%s", op->path, ctype);
		if (url)
			dy__api(op, "POST", url, NULL, NULL, 0, 0, answered_ok);
		break;
	}
	if (!url) {
		if (op->in_call)
			op->start_rc = SR_ENOMEM;
		else
			dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "daytona: out of memory");
	}
	free(url);
}

static void fd_free(void *p)
{
	fdata *f = p;

	if (f)
		free(f->data);
	free(f);
}

/* A file operation: checks, then the toolbox URL, then the call. */
static int file_op(dy *d, uint64_t req, const char *id, int what, const char *path,
		   const char *path2, const void *data, size_t len, uint32_t mode,
		   size_t max, sr_done_fn done, void *ud)
{
	dy_op *op;
	fdata *f;
	int rc;

	if (!dy__valid_id(id))
		return dy__complete_now(d, done, ud, SR_EINVAL,
					"daytona: invalid sandbox id '%s'", id ? id : "");
	if ((!path || !*path) && what != F_LIST)
		return dy__complete_now(d, done, ud, SR_EINVAL,
					"daytona: sandbox '%s': an empty path", id);
	if (what == F_RENAME && (!path2 || !*path2))
		return dy__complete_now(d, done, ud, SR_EINVAL,
					"daytona: sandbox '%s': rename to an empty path", id);
	if (!(op = dy__op_new(d, DY_FILE, req, id, done, ud)))
		return SR_ENOMEM;
	f = calloc(1, sizeof(*f));
	op->path = strdup(path ? path : "");
	op->path2 = path2 ? strdup(path2) : NULL;
	if (!f || !op->path || (path2 && !op->path2) || (len && !(f->data = malloc(len)))) {
		fd_free(f);
		return dy__op_start(op, SR_ENOMEM);
	}
	if (len)
		memcpy(f->data, data, len);
	f->len = len;
	f->what = what;
	op->mode = mode;
	op->max = max ? max : MAX_FILE_DEFAULT;
	op->xdata = f;
	op->xfree = fd_free;
	rc = dy__with_toolbox(op, send_op);
	return dy__op_start(op, rc);
}

int dy__file_put(void *self, uint64_t req, const char *id, const char *path,
		 const void *data, size_t len, uint32_t mode, sr_done_fn done,
		 void *ud)
{
	return file_op(self, req, id, F_PUT, path, NULL, data, len, mode, 0, done, ud);
}

int dy__file_get(void *self, uint64_t req, const char *id, const char *path,
		 size_t max_len, sr_done_fn done, void *ud)
{
	return file_op(self, req, id, F_GET, path, NULL, NULL, 0, 0, max_len, done, ud);
}

int dy__file_list(void *self, uint64_t req, const char *id, const char *path,
		  sr_done_fn done, void *ud)
{
	return file_op(self, req, id, F_LIST, path, NULL, NULL, 0, 0, 0, done, ud);
}

int dy__file_rename(void *self, uint64_t req, const char *id,
		    const char *from, const char *to, sr_done_fn done,
		    void *ud)
{
	return file_op(self, req, id, F_RENAME, from, to, NULL, 0, 0, 0, done, ud);
}

int dy__file_remove(void *self, uint64_t req, const char *id,
		    const char *path, sr_done_fn done, void *ud)
{
	return file_op(self, req, id, F_REMOVE, path, NULL, NULL, 0, 0, 0, done, ud);
}

int dy__file_mkdir(void *self, uint64_t req, const char *id, const char *path,
		   uint32_t mode, sr_done_fn done, void *ud)
{
	return file_op(self, req, id, F_MKDIR, path, NULL, NULL, 0, mode, 0, done, ud);
}
