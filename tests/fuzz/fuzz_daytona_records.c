/* Fuzz target: what the Daytona provider reads back and trusts
 * (plugins/provider/daytona/lease.c): a secret's record as Daytona's API
 * answers it (checked before the run relies on its placeholder), and a
 * lease record from the store (parsed, then its placeholders and secrets
 * looked up). A broken or hostile control plane gets a clear refusal,
 * never a crash. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "plugins/provider/daytona/daytona.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *rec = json_loadb((const char *)data, size, 0, NULL), *lease = NULL;
	char why[512];

	dy__secret_check(rec, "sandrun_0123456789abcdef_0", "api.model.test", "dtn_secret_", why,
			 sizeof(why));
	json_decref(rec);
	if (dy__lease_parse((const char *)data, size, &lease, why, sizeof(why)) == SR_OK) {
		json_decref(dy__lease_placeholders(lease));
		dy__lease_secret(lease, "sandrun_0123456789abcdef_0");
		dy__lease_str(lease, "state");
		json_decref(lease);
	}
	return 0;
}
