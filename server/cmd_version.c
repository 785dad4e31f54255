/* server/cmd_version.c — `aorta version`. */
#include <stdio.h>

#include "cli.h"
#include "commands.h"

#ifndef AORTA_VERSION
#define AORTA_VERSION "unknown"
#endif

int cmd_version(int argc, char **argv)
{
	const struct cli_cmd cmd = {
		.name = "version",
		.summary = "Print aorta's version and the features this build has.",
		.usage = "aorta version",
	};
	const char *pos[1];
	int n_pos;
	int rc = cli_parse(&cmd, argc, argv, pos, &n_pos, stdout, stderr);
	if (rc == CLI_HELP)
		return 0;
	if (rc)
		return 2;
	printf("aorta %s (cuda: %s)\n", AORTA_VERSION, AORTA_HAVE_CUDA ? "built" : "not built");
	return 0;
}
