/* Endpoint resolution (core/run/endpoint.c): which hosts a remote sandbox
 * can reach by name or literal address, the configuration of an
 * [endpoint.NAME], and the state machine: a source that never answers is
 * tried a bounded number of times, then the failure names every source;
 * cancelling answers once. */
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "core/run/endpoint.h"
#include "tests/unit/harness.h"

static int public_(const char *url, const char *want_why)
{
	char why[400] = "";
	int ok = sr__endpoint_host_public(url, why, sizeof(why));

	if (want_why)
		cr_expect(strstr(why, want_why), "%s: '%s' lacks '%s'", url, why, want_why);
	return ok;
}

Test(endpoint, public_hosts)
{
	cr_expect(public_("https://s3.example.com", NULL));
	cr_expect(public_("http://s3.eu-west-1.amazonaws.com:443/bucket", NULL));
	cr_expect(public_("https://93.184.216.34/", NULL));
	cr_expect(public_("https://[2606:2800:220:1::1]/", NULL));
}

Test(endpoint, private_hosts_with_their_reason)
{
	cr_expect_not(public_("http://localhost:9000", "this machine"));
	cr_expect_not(public_("http://LOCALHOST./", "this machine"));
	cr_expect_not(public_("http://minio.localhost/", "this machine"));
	cr_expect_not(public_("http://nas.local/", "link-local (mDNS) name"));
	cr_expect_not(public_("http://minio:9000", "without a domain"));
	cr_expect_not(public_("http://127.8.9.10/", "private, loopback"));
	cr_expect_not(public_("http://10.0.0.1/", "private"));
	cr_expect_not(public_("http://172.16.0.1/", "private"));
	cr_expect_not(public_("http://172.31.255.255/", "private"));
	cr_expect(public_("http://172.32.0.1/", NULL));
	cr_expect_not(public_("http://192.168.0.1/", "private"));
	cr_expect_not(public_("http://169.254.169.254/latest", "private"));
	cr_expect_not(public_("http://100.64.0.1/", "private"));
	cr_expect_not(public_("http://0.0.0.0/", "private"));
	cr_expect_not(public_("http://[::1]:9000/", "private"));
	cr_expect_not(public_("http://[fd12::1]/", "private"));
	cr_expect_not(public_("http://[fe80::1]/", "private"));
	cr_expect_not(public_("http://[::ffff:192.168.1.1]/", "private"));
	cr_expect_not(public_("ftp://s3.example.com/", "not an http or https URL"));
	cr_expect_not(public_("http://key:secret@s3.example.com/", "carries credentials"));
}

Test(endpoint, userinfo)
{
	cr_expect(sr__endpoint_has_userinfo("http://a:b@h/"));
	cr_expect(sr__endpoint_has_userinfo("https://a@h"));
	cr_expect_not(sr__endpoint_has_userinfo("https://h/p@q"));
	cr_expect_not(sr__endpoint_has_userinfo("https://h/?x=a@b"));
	cr_expect_not(sr__endpoint_has_userinfo("no-scheme@host"));
}

static sr__ctx ctx;
static char *dir;

static void setup(const char *conf)
{
	char state[512], text[2048];

	dir = t_tmpdir();
	snprintf(state, sizeof(state), "%s/state", dir);
	snprintf(text, sizeof(text), "[runner]\nstate_dir = %s\n%s", state, conf);
	cr_assert_eq(sr__ctx_init(&ctx, uv_default_loop(), t_write(dir, "c.conf", text)), SR_OK);
}

static void teardown(void)
{
	char cmd[600];

	sr__ctx_cleanup(&ctx);
	uv_run(uv_default_loop(), UV_RUN_DEFAULT);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
	free(dir);
}

Test(endpoint, config)
{
	sr__endpoint_spec spec;
	char why[600];

	setup("[endpoint.s3]\nurl = http://127.0.0.1:9000\npublic_url = https://s3.example.com\n"
	      "sse = yes\nin_flight = 300\n"
	      "[endpoint.bad]\nurl = ftp://x/\n"
	      "[endpoint.priv]\nurl = http://127.0.0.1:1\npublic_url = http://10.1.1.1/\n"
	      "[endpoint.creds]\nurl = http://u:p@127.0.0.1:1\n"
	      "[endpoint.sse]\nurl = http://127.0.0.1:1\nsse = maybe\n");
	cr_assert_eq(sr__endpoint_config(&ctx, "s3", &spec, why, sizeof(why)), SR_OK, "%s", why);
	cr_expect_str_eq(spec.url, "http://127.0.0.1:9000");
	cr_expect_str_eq(spec.public_url, "https://s3.example.com");
	cr_expect_eq(spec.needs_sse, 1);
	cr_expect_eq(spec.min_in_flight, 300);
	cr_expect_eq(sr__endpoint_config(&ctx, "none", &spec, why, sizeof(why)), SR_ENOTFOUND);
	cr_expect(strstr(why, "no endpoint 'none' is configured"), "%s", why);
	cr_expect_eq(sr__endpoint_config(&ctx, "Bad Name", &spec, why, sizeof(why)), SR_EINVAL);
	cr_expect_eq(sr__endpoint_config(&ctx, "bad", &spec, why, sizeof(why)), SR_EINVAL);
	cr_expect(strstr(why, "is not an http or https URL"), "%s", why);
	cr_expect_eq(sr__endpoint_config(&ctx, "priv", &spec, why, sizeof(why)), SR_EINVAL);
	cr_expect(strstr(why, "public_url: http://10.1.1.1/: 10.1.1.1 is a private"), "%s", why);
	cr_expect_eq(sr__endpoint_config(&ctx, "creds", &spec, why, sizeof(why)), SR_EINVAL);
	cr_expect_not(strstr(why, "u:p"), "%s", why);
	cr_expect_eq(sr__endpoint_config(&ctx, "sse", &spec, why, sizeof(why)), SR_EINVAL);
	teardown();
}

typedef struct outcome {
	int calls, status, events, retries, skipped;
	char url[300], message[2048];
} outcome;

static void on_event(void *ud, json_t *ev)
{
	outcome *o = ud;
	const char *type = json_string_value(json_object_get(ev, "type"));

	o->events++;
	if (strcmp(type, "endpoint.retry") == 0)
		o->retries++;
	if (strcmp(type, "endpoint.skipped") == 0)
		o->skipped++;
}

static void on_done(void *ud, int status, const char *url, const char *source,
		    const char *message)
{
	outcome *o = ud;

	(void)source;
	o->calls++;
	o->status = status;
	snprintf(o->url, sizeof(o->url), "%s", url ? url : "");
	snprintf(o->message, sizeof(o->message), "%s", message ? message : "");
}

/* A port on 127.0.0.1 where nothing listens. */
static int closed_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	port = ntohs(a.sin_port);
	close(fd);
	return port;
}

Test(endpoint, bounded_retries_then_a_named_failure)
{
	char url[100];
	outcome o = { 0 };
	sr__endpoint_spec spec = { .service = "s3", .url = url, .host_network = 1,
				   .attempts = 3, .backoff_ms = 10, .probe_timeout_ms = 500 };
	uint64_t t0;

	setup("");
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", closed_port());
	cr_assert_not_null(sr__endpoint_resolve(&ctx, &spec, on_event, on_done, &o));
	cr_expect_eq(o.calls, 0, "never from inside the call");
	t0 = uv_now(uv_default_loop());
	while (!o.calls && uv_run(uv_default_loop(), UV_RUN_ONCE))
		;
	cr_expect_eq(o.calls, 1);
	cr_expect_eq(o.status, SR_ENOTFOUND);
	cr_expect_eq(o.retries, 2, "tries 1 and 2 retried, the third the last");
	cr_expect_eq(o.skipped, 3, "each source skipped once");
	cr_expect(uv_now(uv_default_loop()) - t0 >= 30, "10 + 20 ms of backoff at least");
	cr_expect(strstr(o.message, "no route from the sandbox to service 's3'"), "%s", o.message);
	cr_expect(strstr(o.message, "(after 3 tries)"), "%s", o.message);
	cr_expect(strstr(o.message, "public override: none is set ([endpoint.s3] public_url)"),
		  "%s", o.message);
	cr_expect(strstr(o.message, "tunnel: no tunnel is configured ([runner] tunnel)"), "%s",
		  o.message);
	teardown();
}

Test(endpoint, a_remote_sandbox_never_gets_a_private_url)
{
	outcome o = { 0 };
	sr__endpoint_spec spec = { .service = "s3", .url = "http://127.0.0.1:9",
				   .public_url = "https://10.9.9.9/" };

	setup("");
	cr_assert_not_null(sr__endpoint_resolve(&ctx, &spec, on_event, on_done, &o));
	while (!o.calls && uv_run(uv_default_loop(), UV_RUN_ONCE))
		;
	cr_expect_eq(o.status, SR_ENOTFOUND);
	cr_expect_eq(o.retries, 0, "a private host is not worth a retry");
	cr_expect(strstr(o.message, "127.0.0.1 is a private, loopback or link-local address, "
			 "which a remote sandbox cannot reach"), "%s", o.message);
	cr_expect(strstr(o.message, "public override: https://10.9.9.9/: 10.9.9.9 is a private"),
		  "%s", o.message);
	teardown();
}

Test(endpoint, cancel_answers_once)
{
	char url[100];
	outcome o = { 0 };
	sr__endpoint_spec spec = { .service = "s3", .url = url, .host_network = 1,
				   .attempts = 20, .backoff_ms = 1000 };
	sr__endpoint_job *j;

	setup("");
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", closed_port());
	cr_assert_not_null(j = sr__endpoint_resolve(&ctx, &spec, on_event, on_done, &o));
	while (o.retries < 1 && uv_run(uv_default_loop(), UV_RUN_ONCE))
		;
	sr__endpoint_cancel(j);
	cr_expect_eq(o.calls, 1);
	cr_expect_eq(o.status, SR_ECANCELED);
	uv_run(uv_default_loop(), UV_RUN_NOWAIT);
	cr_expect_eq(o.calls, 1, "and never again");
	teardown();
}
