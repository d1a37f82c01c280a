/* The runner context: configuration, plugins, state directory. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/host/ctx.h"
#include "core/host/fsutil.h"
#include "core/plugins/plugin.h"
#include "core/plugins/provider.h"
#include "core/plugins/tunnel.h"
#include "core/host/status.h"
#include "core/host/http.h"
#include "core/host/log.h"
#include "core/store/db.h"

sr__http *sr__ctx_http(sr__ctx *ctx)
{
	if (ctx->http)
		return ctx->http;
	if (!(ctx->http = sr__http_new(ctx->loop)))
		return NULL;
	if (ctx->rc.ca_file && sr__http_set_ca_file(ctx->http, ctx->rc.ca_file) != SR_OK) {
		sr__http_free(ctx->http);
		ctx->http = NULL;
	}
	return ctx->http;
}

const char *sr__ctx_state_dir(sr__ctx *ctx)
{
	if (ctx->state_dir)
		return ctx->state_dir;
	if (sr__mkdirs(ctx->rc.state_dir, 0700) != SR_OK) {
		sr__log(SR_LOG_ERROR, "runner", "cannot create state directory %s: %s",
			ctx->rc.state_dir, strerror(errno));
		return NULL;
	}
	chmod(ctx->rc.state_dir, 0700);
	ctx->state_dir = strdup(ctx->rc.state_dir);
	return ctx->state_dir;
}

/* Read an id from path into buf; 1 when it holds a valid one. */
static int read_id(const char *path, char *buf, size_t n)
{
	FILE *f = fopen(path, "re");
	int ok = 0;

	if (!f)
		return 0;
	if (fgets(buf, (int)n, f)) {
		buf[strcspn(buf, "\n")] = '\0';
		ok = sr__runner_id_valid(buf);
	}
	fclose(f);
	return ok;
}

const char *sr__ctx_runner_id(sr__ctx *ctx)
{
	const char *state;
	char path[4200], tmp[4300], id[48];
	unsigned char r[8];
	FILE *f;
	int fd;

	if (ctx->runner_id[0])
		return ctx->runner_id;
	if (ctx->rc.id) {
		snprintf(ctx->runner_id, sizeof(ctx->runner_id), "%s", ctx->rc.id);
		return ctx->runner_id;
	}
	if (!(state = sr__ctx_state_dir(ctx)))
		return NULL;
	snprintf(path, sizeof(path), "%s/runner-id", state);
	if (read_id(path, id, sizeof(id)))
		goto found;
	if (access(path, F_OK) == 0) {
		sr__log(SR_LOG_ERROR, "runner", "%s does not hold a runner id (1 to 40 of "
			"a-z, 0-9, '-', '_'); fix or remove it", path);
		return NULL;
	}
	/* Made once: written aside, then linked (never replacing), so that
	 * two first runs agree on the one that landed. */
	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
		sr__log(SR_LOG_ERROR, "runner", "no random bytes for a runner id: %s",
			strerror(errno));
		return NULL;
	}
	snprintf(id, sizeof(id), "r%02x%02x%02x%02x%02x%02x%02x%02x", r[0], r[1], r[2],
		 r[3], r[4], r[5], r[6], r[7]);
	snprintf(tmp, sizeof(tmp), "%s/.runner-id.%ld", state, (long)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f || fprintf(f, "%s\n", id) < 0 || fclose(f) != 0) {
		if (!f && fd >= 0)
			close(fd);
		unlink(tmp);
		sr__log(SR_LOG_ERROR, "runner", "cannot write %s: %s", tmp, strerror(errno));
		return NULL;
	}
	if (link(tmp, path) != 0 && errno != EEXIST) {
		sr__log(SR_LOG_ERROR, "runner", "cannot create %s: %s", path, strerror(errno));
		unlink(tmp);
		return NULL;
	}
	unlink(tmp);
	if (!read_id(path, id, sizeof(id))) {
		sr__log(SR_LOG_ERROR, "runner", "cannot read the runner id in %s", path);
		return NULL;
	}
found:
	snprintf(ctx->runner_id, sizeof(ctx->runner_id), "%s", id);
	return ctx->runner_id;
}

void sr__ctx_add_sink(sr__ctx *ctx, sr__event_sink *s)
{
	s->next = ctx->sinks;
	ctx->sinks = s;
}

void sr__ctx_remove_sink(sr__ctx *ctx, sr__event_sink *s)
{
	for (sr__event_sink **pp = &ctx->sinks; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			s->next = NULL;
			return;
		}
}

static int sink_takes(const sr__event_sink *s, const sr__plugin *from)
{
	if (!s->only[0])
		return 1;
	for (size_t i = 0; i < SR__SINK_PLUGINS && s->only[i]; i++)
		if (s->only[i] == from)
			return 1;
	return 0;
}

int sr__ctx_emit(sr__ctx *ctx, const sr__plugin *from, json_t *ev)
{
	sr__event_sink *s = ctx->sinks, *next;
	int n = 0;

	for (; s; s = next) {
		next = s->next; /* s may remove itself */
		if (!sink_takes(s, from))
			continue;
		s->fn(s->ud, ev);
		n++;
	}
	return n;
}

static int section_known(const char *section, void *ud)
{
	sr__ctx *ctx = ud;

	for (size_t i = 0; i < ctx->reg->n; i++)
		if (strcmp(ctx->reg->plugins[i]->section, section) == 0)
			return 1;
	return 0;
}

int sr__ctx_init(sr__ctx *ctx, uv_loop_t *loop, const char *config_path)
{
	const char *path = config_path ? config_path : SR_SYSCONFDIR "/sandrun/sandrun.conf";
	const char *extra;
	int rc;

	memset(ctx, 0, sizeof(*ctx));
	ctx->loop = loop;
	ctx->config = sr__config_new();
	ctx->reg = sr__registry_new();
	ctx->config_file = strdup(path);
	if (!ctx->config || !ctx->reg || !ctx->config_file)
		return SR_ENOMEM;
	rc = sr__config_load(ctx->config, path);
	if (rc == SR_ENOTFOUND && !config_path)
		rc = SR_OK; /* no file: the built-in defaults */
	else if (rc == SR_ENOTFOUND || rc == SR_EIO)
		sr__log(SR_LOG_ERROR, "config", "%s: cannot read: %s", path,
			strerror(errno));
	if (rc != SR_OK)
		return rc;
	rc = sr__config_runner(ctx->config, &ctx->rc);
	if (rc != SR_OK)
		return rc;
	sr__log_set_level(ctx->rc.log_level);
	sr__db_use(ctx->rc.store_url);
	/* Development and tests: SANDRUN_PLUGIN_PATH comes first, so an
	 * uninstalled plugin wins over an installed one of the same name. */
	extra = getenv("SANDRUN_PLUGIN_PATH");
	if (extra && *extra)
		sr__registry_scan(ctx->reg, extra);
	sr__registry_scan(ctx->reg, ctx->rc.plugin_dir);
	sr__config_warn_sections(ctx->config, section_known, ctx);
	for (size_t i = 0; i < ctx->reg->n; i++) {
		sr__plugin *p = ctx->reg->plugins[i];
		if (p->desc->config_keys)
			sr__config_warn_unknown(ctx->config, p->section,
						p->desc->config_keys);
	}
	return SR_OK;
}

/* A [runner] value fixed at start: kept, with a warning when changed. */
static void keep_fixed(const char *key, const char **next, const char *now)
{
	if ((*next == NULL) != (now == NULL) || (now && strcmp(*next, now) != 0))
		sr__log(SR_LOG_WARN, "config", "[runner] %s changed: it takes effect at the "
			"next start; kept '%s' until then", key, now ? now : "(unset)");
	*next = now;
}

int sr__ctx_reload(sr__ctx *ctx, int (*accept)(const sr__config *next, void *ud),
		   void *ud)
{
	const char *path = ctx->config_file;
	sr__config *next, **grown;
	sr__runner_conf rc;
	int status;

	if (!path)
		return SR_ENOMEM;
	grown = realloc(ctx->retired, (ctx->n_retired + 1) * sizeof(sr__config *));
	if (!grown || !(next = sr__config_new())) {
		if (grown)
			ctx->retired = grown;
		return SR_ENOMEM;
	}
	ctx->retired = grown;
	status = sr__config_load(next, path);
	if (status == SR_ENOTFOUND || status == SR_EIO)
		sr__log(SR_LOG_ERROR, "config", "%s: cannot read: %s", path, strerror(errno));
	if (status == SR_OK)
		status = sr__config_runner(next, &rc);
	if (status == SR_OK && accept)
		status = accept(next, ud);
	if (status != SR_OK) {
		sr__log(SR_LOG_ERROR, "config", "%s not reloaded: the configuration in use is "
			"unchanged", path);
		sr__config_free(next);
		return status;
	}
	keep_fixed("state_dir", &rc.state_dir, ctx->rc.state_dir);
	keep_fixed("plugin_dir", &rc.plugin_dir, ctx->rc.plugin_dir);
	keep_fixed("node_dir", &rc.node_dir, ctx->rc.node_dir);
	keep_fixed("id", &rc.id, ctx->rc.id);
	if (strcmp(rc.store_url, ctx->rc.store_url) != 0) /* not shown: a password */
		sr__log(SR_LOG_WARN, "config", "[store] url changed: it takes effect at the "
			"next start; the store in use is kept until then");
	rc.store_url = ctx->rc.store_url;
	for (size_t i = 0; i < ctx->reg->n; i++) {
		const char *section = ctx->reg->plugins[i]->section;
		if (!sr__config_same_section(ctx->config, next, section))
			sr__log(SR_LOG_WARN, "config", "[%s] changed: a plugin reads its section "
				"when it starts; restart to apply it", section);
	}
	sr__config_warn_sections(next, section_known, ctx);
	ctx->retired[ctx->n_retired++] = ctx->config;
	ctx->config = next;
	ctx->rc = rc;
	sr__log_set_level(rc.log_level);
	sr__log(SR_LOG_INFO, "config", "%s reloaded: new runs use it", path);
	return SR_OK;
}

typedef struct tunnel_release {
	int done;
	int status;
	char message[300];
} tunnel_release;

static void on_tunnel_released(void *ud, const sr_result *r)
{
	tunnel_release *t = ud;

	t->done = 1;
	t->status = r->status;
	snprintf(t->message, sizeof(t->message), "%s",
		 r->message ? r->message : sr__strerror(r->status));
}

static void on_release_timeout(uv_timer_t *tm)
{
	tunnel_release *t = tm->data;

	t->done = -1;
}

/* What the configured tunnel made to reach runner-side services (an ngrok
 * tunnel, a quick tunnel's process) goes with the process that made it,
 * unless it was asked to stay (sandrun endpoint --keep). Bounded: 15 s. */
static void release_tunnel(sr__ctx *ctx)
{
	tunnel_release t = { 0 };
	uv_timer_t timer;
	sr__plugin *p;

	if (!ctx->loop || !ctx->reg || !ctx->rc.tunnel || ctx->keep_tunnels ||
	    !(p = sr__registry_find(ctx->reg, SR_PLUGIN_TUNNEL, ctx->rc.tunnel)) ||
	    p->started <= 0)
		return;
	if (sr__tunnel_release(p, sr__next_req(), NULL, on_tunnel_released, &t) != SR_OK)
		return;
	uv_timer_init(ctx->loop, &timer);
	timer.data = &t;
	uv_timer_start(&timer, on_release_timeout, 15000, 0);
	while (!t.done && uv_run(ctx->loop, UV_RUN_ONCE))
		;
	uv_close((uv_handle_t *)&timer, NULL);
	uv_run(ctx->loop, UV_RUN_NOWAIT);
	if (t.done < 0)
		sr__log(SR_LOG_WARN, p->section, "what the tunnel made is not released after 15 s");
	else if (t.status != SR_OK && t.status != SR_EUNSUPPORTED)
		sr__log(SR_LOG_WARN, p->section, "cannot release what the tunnel made: %s", t.message);
}

void sr__ctx_cleanup(sr__ctx *ctx)
{
	release_tunnel(ctx);
	for (size_t i = ctx->reg ? ctx->reg->n : 0; i-- > 0;)
		sr__plugin_stop(ctx->reg->plugins[i]); /* the last started first */
	sr__registry_free(ctx->reg);
	if (ctx->http)
		sr__http_free(ctx->http);
	if (ctx->loop) {
		/* Let close callbacks run (curl handles, timers, processes). */
		uv_run(ctx->loop, UV_RUN_NOWAIT);
	}
	sr__config_free(ctx->config);
	for (size_t i = 0; i < ctx->n_retired; i++)
		sr__config_free(ctx->retired[i]);
	free(ctx->retired);
	free(ctx->config_file);
	free(ctx->state_dir);
	/* After the plugins stopped (their key-value calls). */
	sr__db_shared_close();
	memset(ctx, 0, sizeof(*ctx));
}
