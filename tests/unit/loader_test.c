/* core/plugins/loader.c: every rejection rule, with plugins built to break one
 * rule each (tests/plugins/bad_plugin.c), and the typed "unsupported"
 * error for missing operations. */
#include <fcntl.h>

#include "harness.h"
#include "core/plugins/provider.h"

static const char *plugdir(void)
{
	const char *d = getenv("SANDRUN_TEST_PLUGINS");

	cr_assert_not_null(d, "SANDRUN_TEST_PLUGINS is not set (run under make check)");
	return d;
}

static sr__registry *reg;
static char path[4096];

static const char *plugin(const char *name)
{
	snprintf(path, sizeof(path), "%s/%s.la", plugdir(), name);
	return path;
}

static void setup(void)
{
	t_log_capture();
	reg = sr__registry_new();
	cr_assert_not_null(reg);
}

static void teardown(void)
{
	sr__registry_free(reg);
}

TestSuite(loader, .init = setup, .fini = teardown);

/* Exactly one log line, naming the file and containing the reason. */
static void assert_rejected(const char *file, const char *reason)
{
	const char *log = t_log_text();
	const char *nl = strchr(log, '\n');

	cr_assert_str_not_empty(log, "nothing was logged");
	cr_assert(nl && nl[1] == 0, "expected one line, got: %s", log);
	cr_assert(strstr(log, file), "line does not name %s: %s", file, log);
	cr_assert(strstr(log, reason), "expected '%s' in: %s", reason, log);
	cr_assert_not_null(sr__registry_rejection(reg, file));
	cr_assert(strstr(sr__registry_rejection(reg, file), reason));
	cr_assert_eq(reg->n, 0);
}

Test(loader, loads_a_valid_plugin)
{
	cr_assert_eq(sr__registry_load(reg, plugin("dup_a")), SR_OK);
	cr_assert_eq(reg->n, 1);
	cr_assert_str_eq(reg->plugins[0]->desc->name, "twin");
	cr_assert_str_eq(reg->plugins[0]->section, "tunnel.twin");
	cr_assert_not_null(sr__registry_find(reg, SR_PLUGIN_TUNNEL, "twin"));
	cr_assert_null(sr__registry_find(reg, SR_PLUGIN_PROVIDER, "twin"));
}

Test(loader, rejects_another_abi_major_naming_both_versions)
{
	char expect[128];

	cr_assert_eq(sr__registry_load(reg, plugin("bad_major")), SR_EINVAL);
	snprintf(expect, sizeof(expect),
		 "declares ABI %d.%d; this sandrun accepts ABI major %d",
		 SR_ABI_MAJOR + 1, 0, SR_ABI_MAJOR);
	assert_rejected(path, expect);
}

Test(loader, rejects_a_higher_minor)
{
	cr_assert_eq(sr__registry_load(reg, plugin("bad_minor")), SR_EINVAL);
	assert_rejected(path, "newer than this sandrun's");
}

Test(loader, rejects_a_descriptor_smaller_than_required)
{
	cr_assert_eq(sr__registry_load(reg, plugin("small_desc")), SR_EINVAL);
	assert_rejected(path, "descriptor is");
}

Test(loader, rejects_an_ops_table_smaller_than_required)
{
	cr_assert_eq(sr__registry_load(reg, plugin("small_ops")), SR_EINVAL);
	assert_rejected(path, "ops table is 4 bytes");
}

Test(loader, rejects_an_unknown_kind)
{
	cr_assert_eq(sr__registry_load(reg, plugin("bad_kind")), SR_EINVAL);
	assert_rejected(path, "unknown plugin kind 9");
}

Test(loader, rejects_a_module_without_the_entry_symbol)
{
	cr_assert_eq(sr__registry_load(reg, plugin("no_entry")), SR_EINVAL);
	assert_rejected(path, "no entry symbol 'sandrun_plugin_entry'");
}

Test(loader, rejects_a_plugin_without_init)
{
	cr_assert_eq(sr__registry_load(reg, plugin("no_init")), SR_EINVAL);
	assert_rejected(path, "has no init function");
}

Test(loader, rejects_an_invalid_name)
{
	cr_assert_eq(sr__registry_load(reg, plugin("bad_name")), SR_EINVAL);
	assert_rejected(path, "invalid name");
}

Test(loader, rejects_a_file_that_is_not_a_shared_object)
{
	char *d = t_tmpdir();
	const char *p = t_write(d, "junk.so", "this is not ELF\n");
	char copy[4096];

	snprintf(copy, sizeof(copy), "%s", p);
	cr_assert_eq(sr__registry_load(reg, copy), SR_EINVAL);
	assert_rejected(copy, "cannot load");
	free(d);
}

Test(loader, rejects_a_duplicate_name_naming_the_first)
{
	char first[4096];

	cr_assert_eq(sr__registry_load(reg, plugin("dup_a")), SR_OK);
	snprintf(first, sizeof(first), "%s", path);
	cr_assert_eq(sr__registry_load(reg, plugin("dup_b")), SR_EINVAL);
	cr_assert(strstr(t_log_text(), "duplicate tunnel 'twin' (already loaded from"));
	cr_assert(strstr(t_log_text(), first));
	cr_assert_eq(reg->n, 1);
}

Test(loader, scan_loads_good_and_records_every_bad_file)
{
	sr__registry_scan(reg, "/nonexistent-dir");
	cr_assert_eq(reg->n, 0);
	sr__registry_scan(reg, plugdir());
	/* dup_a, null_ops ("hollow"), short_desc, rude, failing and lazy
	 * load; dup_b is a duplicate. */
	cr_assert_eq(reg->n, 6, "loaded %zu", reg->n);
	cr_assert_eq(reg->n_rejected, 9, "rejected %zu", reg->n_rejected);
}

/* The asynchronous operations' side of this is in complete_test.c. */
Test(loader, null_or_missing_operation_is_a_typed_unsupported_error)
{
	sr__plugin *p;
	char err[160];

	cr_assert_eq(sr__registry_load(reg, plugin("null_ops")), SR_OK);
	p = reg->plugins[0];
	cr_assert_eq(sr__provider_watch(p, 3, "x", "/", NULL, NULL, err, sizeof(err)),
		     SR_EUNSUPPORTED);
	cr_assert_str_eq(err, "provider 'hollow': operation 'watch' is not supported");
	cr_assert_eq(sr__provider_capabilities(p), 0);
}
