/* core/run/plan.c: the gates on user MCP servers. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netdb.h>
#include <string.h>

#include "core/run/plan.h"
#include "sandrun/plugin.h"

static const char *code;
static char msg[600];

static int check_mcp(const char *servers)
{
	sr__plan p;
	json_t *tools = json_pack("[s]", "mcp_http");
	int rc;

	memset(&p, 0, sizeof(p));
	p.prompt = "hi";
	p.provider_name = "local";
	p.provider_loaded = 1;
	p.harness_name = "h";
	p.harness_loaded = 1;
	p.harness_enabled = 1;
	p.harness_tools = tools;
	p.user_mcp = json_loads(servers, 0, NULL);
	cr_assert_not_null(p.user_mcp);
	code = NULL;
	rc = sr__plan_check(&p, &code, msg, sizeof(msg));
	json_decref(p.user_mcp);
	json_decref(tools);
	return rc;
}

Test(plan, an_mcp_server_that_launches_a_command_is_refused)
{
	cr_assert_eq(check_mcp("[{\"name\":\"x\",\"command\":\"/bin/sh\",\"args\":[\"-c\",\"id\"],\"env\":[]}]"),
		     SR_EPERM);
	cr_assert_str_eq(code, "mcp_server_stdio");
	cr_assert(strstr(msg, "'x' launches a command"), "%s", msg);
	/* A URL does not make a command acceptable. */
	cr_assert_eq(check_mcp("[{\"name\":\"y\",\"url\":\"https://ok.example/\",\"command\":\"sh\"}]"),
		     SR_EPERM);
	cr_assert_str_eq(code, "mcp_server_stdio");
	cr_assert_eq(check_mcp("[{\"name\":\"z\",\"type\":\"http\",\"url\":\"https://ok.example/mcp\","
			       "\"headers\":[]}]"), SR_OK, "%s", msg);
}

/* Platform tools on a remote provider: only through the shim. */
static int check_remote_tools(const char *delivery)
{
	sr__plan p;
	json_t *tools = json_pack("[s]", delivery);
	int rc;

	memset(&p, 0, sizeof(p));
	p.prompt = "hi";
	p.provider_name = "far";
	p.provider_loaded = 1;
	p.provider_caps = SR_CAP_REMOTE;
	p.harness_name = "h";
	p.harness_loaded = 1;
	p.harness_enabled = 1;
	p.harness_tools = tools;
	p.has_tools = 1;
	p.network = SR_NET_OPEN;
	code = NULL;
	rc = sr__plan_check(&p, &code, msg, sizeof(msg));
	json_decref(tools);
	return rc;
}

Test(plan, tools_on_a_remote_provider_need_the_shim)
{
	cr_assert_eq(check_remote_tools("mcp_stdio"), SR_OK, "%s", msg);
	cr_assert_eq(check_remote_tools("relay_extension"), SR_OK, "%s", msg);
	cr_assert_eq(check_remote_tools("mcp_http"), SR_EPERM);
	cr_assert_str_eq(code, "tools_on_remote_provider");
	cr_assert(strstr(msg, "only over HTTP from this host"), "%s", msg);
}

static struct addrinfo *addr(const char *text, struct sockaddr_storage *ss,
			     struct addrinfo *ai, struct addrinfo *next)
{
	memset(ai, 0, sizeof(*ai));
	memset(ss, 0, sizeof(*ss));
	if (strchr(text, ':')) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
		in6->sin6_family = AF_INET6;
		cr_assert_eq(inet_pton(AF_INET6, text, &in6->sin6_addr), 1);
		ai->ai_family = AF_INET6;
		ai->ai_addrlen = sizeof(*in6);
	} else {
		struct sockaddr_in *in = (struct sockaddr_in *)ss;
		in->sin_family = AF_INET;
		cr_assert_eq(inet_pton(AF_INET, text, &in->sin_addr), 1);
		ai->ai_family = AF_INET;
		ai->ai_addrlen = sizeof(*in);
	}
	ai->ai_addr = (struct sockaddr *)ss;
	ai->ai_next = next;
	return ai;
}

Test(plan, resolved_addresses_must_all_be_public)
{
	struct sockaddr_storage s1, s2;
	struct addrinfo a1, a2;
	char why[600];

	cr_assert(sr__plan_mcp_addrs_ok("https://ok.example/", addr("93.184.216.34", &s1, &a1, NULL),
					why, sizeof(why)));
	cr_assert_not(sr__plan_mcp_addrs_ok("https://evil.example/",
					    addr("93.184.216.34", &s1, &a1, addr("10.0.0.5", &s2, &a2, NULL)),
					    why, sizeof(why)));
	cr_assert(strstr(why, "resolves to 10.0.0.5"), "%s", why);
	cr_assert_not(sr__plan_mcp_addrs_ok("https://evil.example/", addr("::1", &s1, &a1, NULL),
					    why, sizeof(why)));
	cr_assert_not(sr__plan_mcp_addrs_ok("https://meta.example/", addr("169.254.169.254", &s1, &a1, NULL),
					    why, sizeof(why)));
	cr_assert_not(sr__plan_mcp_addrs_ok("https://gone.example/", NULL, why, sizeof(why)));
	cr_assert(strstr(why, "cannot be resolved"), "%s", why);
}

Test(plan, only_names_outside_the_allow_list_are_resolved)
{
	const char *allow[] = { "intranet.example", NULL };
	char host[256];

	cr_assert(sr__plan_mcp_host_to_resolve("https://Docs.Example./mcp", allow, host, sizeof(host)));
	cr_assert_str_eq(host, "Docs.Example");
	cr_assert_not(sr__plan_mcp_host_to_resolve("https://intranet.example/mcp", allow, host,
						   sizeof(host)));
	cr_assert_not(sr__plan_mcp_host_to_resolve("https://93.184.216.34/mcp", allow, host,
						   sizeof(host)));
	cr_assert_not(sr__plan_mcp_host_to_resolve("https://[2001:db8::1]/mcp", allow, host,
						   sizeof(host)));
}

Test(plan, the_allow_list_admits_a_private_host)
{
	const char *allow[] = { "10.1.2.3", NULL };
	char why[400];

	cr_assert_not(sr__plan_mcp_url_ok("https://10.1.2.3/mcp", NULL, why, sizeof(why)));
	cr_assert(sr__plan_mcp_url_ok("https://10.1.2.3/mcp", allow, why, sizeof(why)));
}

/* A tool's callback is a runner-side service: loopback and private
 * addresses are fine; link-local ones (cloud metadata) in every spelling an
 * HTTP client connects to, and credentials in the URL, are not. */
Test(plan, a_callback_at_a_link_local_address_or_with_credentials_is_refused)
{
	static const char *const refused[] = {
		"http://169.254.169.254/latest/meta-data/", "http://0xa9fea9fe/",
		"http://2852039166/", "http://0251.0376.0251.0376/", "http://169.254.1.1:8080/x",
		"http://[::ffff:169.254.169.254]/", "http://[::ffff:a9fe:a9fe]/",
		"http://[fe80::1]/", "http://169.254.169.254./",
		"http://user:pw@127.0.0.1:9/cb", "https://token@example.com/cb", NULL };
	static const char *const fine[] = {
		"http://127.0.0.1:9/cb", "http://10.0.0.8/cb", "https://tools.example.com/cb",
		"http://[::1]:9/cb", "http://localhost:9/cb", "http://169.255.0.1/", NULL };
	const char *allow[] = { "169.254.169.254", NULL };
	char why[400];

	for (const char *const *u = refused; *u; u++) {
		why[0] = 0;
		cr_assert_not(sr__plan_callback_url_ok(*u, NULL, why, sizeof(why)), "%s taken", *u);
		cr_assert(strstr(why, *u) || strstr(why, "credentials"), "%s: %s", *u, why);
	}
	for (const char *const *u = fine; *u; u++)
		cr_assert(sr__plan_callback_url_ok(*u, NULL, why, sizeof(why)), "%s: %s", *u, why);
	cr_assert(sr__plan_callback_url_ok("http://169.254.169.254/x", allow, why, sizeof(why)));
	cr_assert_not(sr__plan_callback_url_ok("http://user:pw@169.254.169.254/x", allow, why,
					       sizeof(why)), "credentials even when allow-listed");
	cr_assert(strstr(why, "credentials"), "%s", why);
}

/* [runner] credential_isolation = required: a provider that cannot keep
 * credentials out of the sandbox is refused before anything exists. */
Test(plan, required_isolation_refuses_a_provider_without_it)
{
	sr__plan p;
	json_t *tools = json_pack("[s]", "mcp_stdio");

	memset(&p, 0, sizeof(p));
	p.prompt = "hi";
	p.provider_name = "local";
	p.provider_loaded = 1;
	p.harness_name = "h";
	p.harness_loaded = 1;
	p.harness_enabled = 1;
	p.harness_tools = tools;
	p.credential_isolation = 1; /* required */
	cr_assert_eq(sr__plan_check(&p, &code, msg, sizeof(msg)), SR_EPERM);
	cr_assert_str_eq(code, "credential_isolation_unavailable");
	cr_assert(strstr(msg, "provider 'local' cannot keep credentials out"), "%s", msg);
	p.provider_caps = SR_CAP_ISOLATED_SECRETS;
	cr_assert_eq(sr__plan_check(&p, &code, msg, sizeof(msg)), SR_OK, "%s", msg);
	p.provider_caps = 0;
	p.credential_isolation = 0; /* preferred */
	cr_assert_eq(sr__plan_check(&p, &code, msg, sizeof(msg)), SR_OK, "%s", msg);
	json_decref(tools);
}

Test(plan, url_ports)
{
	cr_expect_eq(sr__url_port("http://127.0.0.1:9000/bucket"), 9000);
	cr_expect_eq(sr__url_port("http://s3.example.com/"), 80);
	cr_expect_eq(sr__url_port("https://s3.example.com"), 443);
	cr_expect_eq(sr__url_port("HTTPS://s3.example.com:8443?x=1"), 8443);
	cr_expect_eq(sr__url_port("http://[::1]:7000/"), 7000);
	cr_expect_eq(sr__url_port("http://[::1]/"), 80);
	cr_expect_eq(sr__url_port("http://h:/"), 80, "an empty port is the default");
	cr_expect_eq(sr__url_port("http://h:70000/"), 0);
	cr_expect_eq(sr__url_port("http://h:12ab/"), 0);
	cr_expect_eq(sr__url_port("not a url"), 0);
	cr_expect_eq(sr__url_port("http://user:pw@h:80/"), 0, "credentials are refused");
}
