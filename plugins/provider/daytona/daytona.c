/*
 * The Daytona provider: sandboxes on Daytona's control plane
 * ([provider.daytona] api_url, default https://app.daytona.io/api),
 * reached only through the host table (HTTP, timers, events, log).
 *
 *   sandbox.c  create / reconnect / park / destroy / list / status / doctor
 *   secrets.c  credential bindings as Daytona secrets, leases, maintain
 *   lease.c    the pure parts of those (checks, names, the lease record)
 *   files.c    file operations through the sandbox's toolbox
 *   exec.c     processes through toolbox sessions; watch
 *   api.c      calls, errors, the lifecycle of one operation
 *
 * The API key never reaches a log line: it is registered with the host
 * for redaction at init, and wiped when the plugin is unloaded.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daytona.h"

static uint32_t d_capabilities(void *self)
{
	const dy *d = self;

	return SR_CAP_REMOTE | SR_CAP_NETWORK_POLICY | SR_CAP_PARK_STOPPED | SR_CAP_WATCH |
	       (d->secrets_on ? SR_CAP_ISOLATED_SECRETS : 0);
}

static int d_cancel(void *self, uint64_t req)
{
	dy *d = self;

	for (dy_op *op = d->ops; op; op = op->next_op) {
		if (op->req == req && op->kind != DY_AUX && op->kind != DY_RETRY &&
		    !op->canceled) {
			dy__op_cancel(op);
			return SR_OK;
		}
	}
	return dy__chan_cancel(d, req);
}

static void wipe_free(char *s)
{
	if (!s)
		return;
	for (volatile char *p = s; *p; p++)
		*p = 0;
	free(s);
}

static void d_fini(void *self)
{
	dy *d = self;

	if (!d)
		return;
	d->closing = 1;
	dy__chans_free(d);
	dy__ff_cancel_all(d);
	while (d->ops) {
		dy_op *op = d->ops;
		/* Unloading: nobody waits for these any more. */
		if (op->call) {
			sr_http_call *c = op->call;
			op->call = NULL;
			op->canceled = 1;
			op->done = NULL;
			d->ops = op->next_op;
			op->next_op = NULL;
			d->host->http_cancel(c);
			continue;
		}
		dy__op_free(op);
	}
	while (d->boxes)
		dy__box_forget(d, d->boxes->id);
	free(d->api_url);
	wipe_free(d->api_key);
	free(d->target);
	free(d->snapshot);
	free(d->workspace);
	free(d->home);
	free(d->secret_prefix);
	free(d->placeholder_prefix);
	free(d);
}

static char *read_key_file(const sr_host *host, const char *path)
{
	char buf[4097];
	size_t n;
	FILE *f = fopen(path, "r");

	if (!f) {
		host->log(host, SR_LOG_ERROR, "api_key_file %s: %s", path, strerror(errno));
		return NULL;
	}
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
		buf[--n] = 0;
	return n ? strdup(buf) : NULL;
}

/* A whole number in [lo, hi] from key, or def when unset. */
static int number(const sr_host *host, const char *key, long lo, long hi, long def,
		  long *out)
{
	const char *v = host->config_get(host, key);
	char *end, why[96];
	long n;

	*out = def;

	if (!v) {
		*out = def;
		return SR_OK;
	}
	errno = 0;
	n = strtol(v, &end, 10);
	if (errno || end == v || *end || n < lo || n > hi) {
		snprintf(why, sizeof(why), "a whole number from %ld to %ld", lo, hi);
		return host->config_invalid(host, key, why);
	}
	*out = n;
	return SR_OK;
}

/* secrets = on | off, secret_prefix, placeholder_prefix. */
static int read_secrets_config(dy *d)
{
	const sr_host *h = d->host;
	const char *on = h->config_get(h, "secrets");
	const char *prefix = h->config_get(h, "secret_prefix");
	const char *ph = h->config_get(h, "placeholder_prefix");
	unsigned char rnd[16];

	if (!on || strcmp(on, "on") == 0 || strcmp(on, "true") == 0 || strcmp(on, "yes") == 0 ||
	    strcmp(on, "1") == 0)
		d->secrets_on = 1;
	else if (strcmp(on, "off") == 0 || strcmp(on, "false") == 0 || strcmp(on, "no") == 0 ||
		 strcmp(on, "0") == 0)
		d->secrets_on = 0;
	else
		return h->config_invalid(h, "secrets", "'on' or 'off'");
	if (!prefix)
		prefix = DY_DEFAULT_SECRET_PREFIX;
	if (!dy__prefix_valid(prefix))
		return h->config_invalid(h, "secret_prefix", "a name matching "
					 "^[a-zA-Z_][a-zA-Z0-9_-]*$, at most 64 characters");
	if (!ph)
		ph = DY_DEFAULT_PLACEHOLDER_PREFIX;
	if (!*ph || strlen(ph) > 64 || strcspn(ph, " \t\r\n\"\\") != strlen(ph))
		return h->config_invalid(h, "placeholder_prefix", "a non-empty word of at most 64 "
					 "characters");
	if (!(d->secret_prefix = strdup(prefix)) || !(d->placeholder_prefix = strdup(ph)))
		return SR_ENOMEM;
	/* This instance, in the owner of the leases it works on. */
	if (h->random_bytes(h, rnd, sizeof(rnd)) != SR_OK)
		return SR_EIO;
	for (size_t i = 0; i < sizeof(rnd); i++)
		sprintf(d->instance + 2 * i, "%02x", rnd[i]);
	return SR_OK;
}

static int read_config(dy *d)
{
	const sr_host *h = d->host;
	const char *url = h->config_get(h, "api_url");
	const char *key = h->config_get(h, "api_key");
	const char *key_file = h->config_get(h, "api_key_file");
	const char *ws = h->config_get(h, "workspace");
	const char *home = h->config_get(h, "home");
	long n = 0;
	size_t len;

	if (!url)
		url = DY_DEFAULT_URL;
	if (strncmp(url, "https://", 8) != 0 && strncmp(url, "http://", 7) != 0)
		return h->config_invalid(h, "api_url", "an http:// or https:// URL");
	if (!(d->api_url = strdup(url)))
		return SR_ENOMEM;
	len = strlen(d->api_url);
	while (len && d->api_url[len - 1] == '/')
		d->api_url[--len] = 0;
	if (key && *key)
		d->api_key = strdup(key);
	else if (key_file && !(d->api_key = read_key_file(h, key_file)))
		return h->config_invalid(h, "api_key_file", "a readable file holding the API key");
	if (!d->api_key) {
		h->log(h, SR_LOG_ERROR, "[provider.daytona] no API key: set api_key or "
		       "api_key_file, or SANDRUN_PROVIDER_DAYTONA_API_KEY");
		return SR_EINVAL;
	}
	h->secret_register(h, d->api_key);
	if ((key = h->config_get(h, "target")) && !(d->target = strdup(key)))
		return SR_ENOMEM;
	if ((key = h->config_get(h, "snapshot")) && !(d->snapshot = strdup(key)))
		return SR_ENOMEM;
	if ((ws && ws[0] != '/') || (home && home[0] != '/'))
		return h->config_invalid(h, ws && ws[0] != '/' ? "workspace" : "home",
					 "an absolute path inside the sandbox");
	if ((home && !(d->home = strdup(home))) || (ws && !(d->workspace = strdup(ws))))
		return SR_ENOMEM;
	if (number(h, "auto_stop_minutes", 0, 60L * 24 * 365, 15, &d->auto_stop_minutes))
		return SR_EINVAL;
	if (number(h, "start_timeout", 1, 3600, 120, &n))
		return SR_EINVAL;
	d->start_timeout_ms = (uint64_t)n * 1000;
	if (number(h, "request_timeout", 1, 600, 30, &n))
		return SR_EINVAL;
	d->request_timeout_ms = (uint64_t)n * 1000;
	if (number(h, "stream_idle_timeout", 1, 3600, 60, &n))
		return SR_EINVAL;
	d->stream_idle_ms = (uint64_t)n * 1000;
	if (number(h, "destroy_timeout", 1, 3600, 60, &n))
		return SR_EINVAL;
	d->destroy_timeout_ms = (uint64_t)n * 1000;
	if (number(h, "park_timeout", 1, 3600, 10, &n))
		return SR_EINVAL;
	d->stable_timeout_ms = (uint64_t)n * 1000;
	d->poll_ms = 250;
	return read_secrets_config(d);
}

static int d_init(const sr_host *host, void **self)
{
	dy *d = calloc(1, sizeof(*d));
	int rc;

	if (!d)
		return SR_ENOMEM;
	d->host = host;
	if ((rc = read_config(d)) != SR_OK) {
		d_fini(d);
		return rc;
	}
	*self = d;
	return SR_OK;
}

static const sr_provider_ops daytona_ops = {
	.size = sizeof(sr_provider_ops),
	.capabilities = d_capabilities,
	.create = dy__create,
	.reconnect = dy__reconnect,
	.park = dy__park,
	.destroy = dy__destroy,
	.exec = dy__exec,
	.channel_write = dy__channel_write,
	.channel_close_input = dy__channel_close_input,
	.channel_signal = dy__channel_signal,
	.file_put = dy__file_put,
	.file_get = dy__file_get,
	.file_list = dy__file_list,
	.file_rename = dy__file_rename,
	.file_remove = dy__file_remove,
	.file_mkdir = dy__file_mkdir,
	.watch = dy__watch,
	.cancel = d_cancel,
	.list = dy__list,
	.status = dy__status,
	.maintain = dy__maintain,
};

static const char *const daytona_keys[] = {
	"api_url", "api_key", "api_key_file", "target", "snapshot", "auto_stop_minutes",
	"workspace", "home", "start_timeout", "request_timeout", "stream_idle_timeout",
	"destroy_timeout", "park_timeout", "secrets", "secret_prefix", "placeholder_prefix",
	NULL
};

static const sr_plugin_descriptor daytona_descriptor = {
	.abi_major = SR_ABI_MAJOR,
	.abi_minor = SR_ABI_MINOR,
	.size = sizeof(sr_plugin_descriptor),
	.kind = SR_PLUGIN_PROVIDER,
	.name = "daytona",
	.version = "0.1.0",
	.description = "sandboxes on Daytona (app.daytona.io or a self-hosted control plane)",
	.ops = &daytona_ops,
	.config_keys = daytona_keys,
	.init = d_init,
	.fini = d_fini,
	.doctor = dy__doctor,
};

SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void);
SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void)
{
	return &daytona_descriptor;
}
