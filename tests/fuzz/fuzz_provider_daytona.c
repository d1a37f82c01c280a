/* Fuzz target: the Daytona provider (plugins/provider/daytona/) against an
 * API and toolbox that answer from the fuzzer's input (fuzz_host.h): a
 * create with an isolated credential (its secret and lease), status, list,
 * an exec with input, the file operations, a park, a reconnect, a destroy,
 * the maintenance sweep, and one operation left in flight at fini. */
#include "tests/fuzz/fuzz_plugin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void ch_out(void *ud, const void *d, size_t n)
{
	(void)ud;
	(void)d;
	(void)n;
}

static void ch_exit(void *ud, int status, int sig)
{
	(void)status;
	(void)sig;
	(*(int *)ud)++;
}

static void ch_failed(void *ud, int status, const char *msg)
{
	(void)status;
	(void)msg;
	(*(int *)ud)++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const config[] = { "api_url", "http://127.0.0.1:3000/api", "api_key",
					      "dtn-fuzz-key", "secrets", "on", NULL };
	static const char *const hosts[] = { "api.model.test" };
	static const sr_credential cred = { sizeof(cred), SR_CRED_ENV, "ANTHROPIC_API_KEY",
					    "sk-ant-fuzz-value", hosts, 1, "api_key", 1, NULL };
	static const sr_credential *const creds[] = { &cred };
	static const sr_pair labels[] = { { "sandrun.runner", "r1" },
					  { "sandrun.session", "ses-0123456789abcdef" } };
	static const char *const argv[] = { "sh", "-c", "cat", NULL };
	const sr_plugin_descriptor *d = sandrun_plugin_entry();
	const sr_provider_ops *ops = d->ops;
	sr_network_policy np = { sizeof(np), SR_NET_OFF, NULL, 0 };
	sr_sandbox_spec spec = { sizeof(spec), NULL, NULL, 0, creds, 1, &np, labels, 2 };
	sr_exec_spec es = { sizeof(es), argv, NULL, 0, NULL, NULL, 0 };
	sr_channel_callbacks cbs = { sizeof(cbs), ch_out, ch_out, ch_exit, ch_failed };
	const char *id = "0a1b2c3d-0000-4000-8000-000000000001";
	void *self = NULL;
	uint64_t req = 0, exec_req;
	int ended = 0;

	fz_init(data, size, config);
	fz_done_count = 0;
	if (d->init(&fz.pub, &self) != SR_OK) {
		fz_reset();
		return 0;
	}
	fz_settle(ops->create(self, ++req, &spec, fz_done, NULL));
	fz_settle(ops->status(self, ++req, id, fz_done, NULL));
	fz_settle(ops->list(self, ++req, labels, 1, fz_done, NULL));
	exec_req = ++req;
	if (ops->exec(self, exec_req, id, &es, &cbs, &ended) == SR_OK) {
		ops->channel_write(self, exec_req, "hello\n", 6);
		fz_pump(100);
		ops->channel_close_input(self, exec_req);
		fz_pump(100);
		if (ended > 1)
			abort(); /* a channel ends once */
		if (!ended)
			ops->cancel(self, exec_req);
	}
	fz_settle(ops->file_put(self, ++req, id, "a/b.txt", "data", 4, 0644, fz_done, NULL));
	fz_settle(ops->file_get(self, ++req, id, "a/b.txt", 1024, fz_done, NULL));
	fz_settle(ops->file_list(self, ++req, id, ".sandrun/relay", fz_done, NULL));
	fz_settle(ops->file_rename(self, ++req, id, "a/b.txt", "a/c.txt", fz_done, NULL));
	fz_settle(ops->file_remove(self, ++req, id, "a/c.txt", fz_done, NULL));
	fz_settle(ops->file_mkdir(self, ++req, id, "a/d", 0755, fz_done, NULL));
	fz_settle(ops->park(self, ++req, id, SR_PARK_STOPPED, fz_done, NULL));
	fz_settle(ops->reconnect(self, ++req, id, &np, fz_done, NULL));
	fz_settle(ops->destroy(self, ++req, id, fz_done, NULL));
	if (ops->maintain)
		fz_settle(ops->maintain(self, ++req, "{\"dry_run\":false,\"grace_s\":0}", fz_done,
					NULL));
	if (ops->status(self, ++req, id, fz_done, NULL) == SR_OK)
		fz_pump(1);
	d->fini(self);
	fz_pump(50);
	fz_reset();
	return 0;
}
