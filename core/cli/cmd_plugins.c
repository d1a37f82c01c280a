/* sandrun plugins: what was found, and why anything was rejected. */
#include "config.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli/cli.h"
#include "core/host/log.h"

static int print_json(const sr__ctx *ctx)
{
	json_t *root = json_object(), *list = json_array(), *rej = json_array();
	char abi[32];

	for (size_t i = 0; i < ctx->reg->n; i++) {
		const sr__plugin *p = ctx->reg->plugins[i];
		snprintf(abi, sizeof(abi), "%u.%u", p->desc->abi_major,
			 p->desc->abi_minor);
		json_array_append_new(list, json_pack(
			"{s:s, s:s, s:s, s:s, s:s, s:s}", "kind",
			sr__kind_name((int)p->desc->kind), "name", p->desc->name,
			"version", p->desc->version ? p->desc->version : "",
			"abi", abi, "path", p->path, "description",
			p->desc->description ? p->desc->description : ""));
	}
	for (size_t i = 0; i < ctx->reg->n_rejected; i++)
		json_array_append_new(rej, json_pack("{s:s, s:s}", "path",
			ctx->reg->rejected[i].path, "reason",
			ctx->reg->rejected[i].reason));
	json_object_set_new(root, "plugins", list);
	json_object_set_new(root, "rejected", rej);
	json_dumpf(root, stdout, JSON_INDENT(2));
	putchar('\n');
	json_decref(root);
	return SR_EXIT_OK;
}

static int print_text(const sr__ctx *ctx)
{
	if (ctx->reg->n == 0)
		printf("no plugins found in %s%s%s\n", ctx->rc.plugin_dir,
		       getenv("SANDRUN_PLUGIN_PATH") ? ":" : "",
		       getenv("SANDRUN_PLUGIN_PATH") ? getenv("SANDRUN_PLUGIN_PATH") : "");
	else
		printf("%-9s %-12s %-8s %-4s %s\n", "KIND", "NAME", "VERSION",
		       "ABI", "PATH");
	for (size_t i = 0; i < ctx->reg->n; i++) {
		const sr__plugin *p = ctx->reg->plugins[i];
		printf("%-9s %-12s %-8s %u.%-2u %s\n",
		       sr__kind_name((int)p->desc->kind), p->desc->name,
		       p->desc->version ? p->desc->version : "-",
		       p->desc->abi_major, p->desc->abi_minor, p->path);
	}
	if (ctx->reg->n_rejected)
		printf("\nrejected:\n");
	for (size_t i = 0; i < ctx->reg->n_rejected; i++)
		printf("  %s: %s\n", ctx->reg->rejected[i].path,
		       ctx->reg->rejected[i].reason);
	return SR_EXIT_OK;
}

int sr__cmd_plugins(int argc, char **argv, const char *config_path)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "config", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	sr__ctx ctx;
	int json = 0, c, rc;

	while ((c = getopt_long(argc, argv, "jc:h", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = 1;
			break;
		case 'c':
			config_path = optarg;
			break;
		case 'h':
			printf("Usage: sandrun plugins [--json]\n\n"
			       "List every plugin found (kind, name, version, ABI, path) and every\n"
			       "file that was rejected, with the reason.\n");
			return SR_EXIT_OK;
		default:
			return SR_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "sandrun plugins: unexpected argument '%s'\n", argv[optind]);
		return SR_EXIT_USAGE;
	}
	/* The listing shows the rejections: no separate warning lines. */
	sr__loader_quiet(1);
	rc = sr__cli_setup(&ctx, config_path);
	if (rc == SR_EXIT_OK)
		rc = json ? print_json(&ctx) : print_text(&ctx);
	sr__ctx_cleanup(&ctx);
	return rc;
}
