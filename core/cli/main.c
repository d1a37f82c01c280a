/* sandrun: the command-line front end. */
#include "config.h"

#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli/cli.h"
#include "core/host/log.h"

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: sandrun [--config FILE] COMMAND [ARGS]\n"
		"\n"
		"Run coding agents in sandboxes.\n"
		"\n"
		"Commands:\n"
		"  run [OPTIONS] PROMPT      run one turn of a coding agent in a sandbox\n"
		"  install-harness NAME      install a harness's ACP adapter from npm\n"
		"  plugins [--json]          list the plugins found and the files rejected\n"
		"  doctor                    check the configuration and the configured plugins\n"
		"  exec [OPTIONS] -- CMD...  run one command in a new sandbox, then remove it\n"
		"  sandbox SUBCOMMAND        list, create, exec, park, reconnect, destroy sandboxes\n"
		"  janitor [--dry-run]       delete this runner's sandboxes that no session needs\n"
		"  endpoint NAME|URL         how a sandbox reaches a runner-side service (and through which tunnel)\n"
		"  tunnel enrol|verify|release|list  drive the configured tunnel plugin by hand\n"
		"  image-recipe DIR          a Dockerfile for a remote provider's sandbox image\n"
		"  tools serve|check ...     answer tool calls from a relay directory (and MCP over HTTP)\n"
		"\n"
		"Options:\n"
		"  -c, --config FILE  configuration file (default %s/sandrun/sandrun.conf)\n"
		"  -h, --help         show this help\n"
		"  -V, --version      show the version and the plugin ABI\n"
		"\n"
		"Environment: SANDRUN_<SECTION>_<KEY> overrides a configuration key;\n"
		"SANDRUN_PLUGIN_PATH adds plugin directories. See sandrun(1), sandrun.conf(5).\n",
		SR_SYSCONFDIR);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 }
	};
	const char *config_path = NULL;
	const char *cmd;
	int c;

	/* Started with a standard descriptor closed (a service manager, CI),
	 * the next file opened would take its number, and standard input would
	 * then be one of our own files. /dev/null holds the place. */
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) != fd)
			return SR_EXIT_FAIL;
	/* A write to an agent (or any child, peer or reader) that is gone is
	 * an EPIPE error to handle, not the end of sandrun mid-turn. (libuv
	 * gives spawned processes the default dispositions back.) */
	signal(SIGPIPE, SIG_IGN);

	while ((c = getopt_long(argc, argv, "+c:hV", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config_path = optarg;
			break;
		case 'h':
			usage(stdout);
			return SR_EXIT_OK;
		case 'V':
			printf("sandrun %s (plugin ABI %d.%d)\n", PACKAGE_VERSION,
			       SR_ABI_MAJOR, SR_ABI_MINOR);
			return SR_EXIT_OK;
		default:
			usage(stderr);
			return SR_EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return SR_EXIT_USAGE;
	}
	cmd = argv[optind];
	argc -= optind;
	argv += optind;
	optind = 0; /* reset getopt for the command's own options */
	if (strcmp(cmd, "plugins") == 0)
		return sr__cmd_plugins(argc, argv, config_path);
	if (strcmp(cmd, "doctor") == 0)
		return sr__cmd_doctor(argc, argv, config_path);
	if (strcmp(cmd, "sandbox") == 0)
		return sr__cmd_sandbox(argc, argv, config_path);
	if (strcmp(cmd, "image-recipe") == 0)
		return sr__cmd_image_recipe(argc, argv, config_path);
	if (strcmp(cmd, "endpoint") == 0)
		return sr__cmd_endpoint(argc, argv, config_path);
	if (strcmp(cmd, "tunnel") == 0)
		return sr__cmd_tunnel(argc, argv, config_path);
	if (strcmp(cmd, "janitor") == 0)
		return sr__cmd_janitor(argc, argv, config_path);
	if (strcmp(cmd, "exec") == 0)
		return sr__cmd_exec(argc, argv, config_path);
	if (strcmp(cmd, "install-harness") == 0)
		return sr__cmd_install_harness(argc, argv, config_path);
	if (strcmp(cmd, "run") == 0)
		return sr__cmd_run(argc, argv, config_path);
	if (strcmp(cmd, "tools") == 0)
		return sr__cmd_tools(argc, argv, config_path);
	if (strcmp(cmd, "help") == 0) {
		usage(stdout);
		return SR_EXIT_OK;
	}
	fprintf(stderr, "sandrun: unknown command '%s' (try 'sandrun --help')\n", cmd);
	return SR_EXIT_USAGE;
}
