/* server/main.c — the `aorta` binary: dispatch to a subcommand. The only
 * place in aorta that decides the process exit status. */
#include <stdio.h>
#include <string.h>

#include "commands.h"

struct subcommand {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv);
};

static const struct subcommand subcommands[] = {
	{ "bench", "benchmark the engine (bench engine) or a server", cmd_bench },
	{ "inspect", "print a model's config, tensor table and totals", cmd_inspect },
	{ "make-model", "write a deterministic random-weight test model", cmd_make_model },
	{ "serve", "serve a model over an OpenAI-compatible HTTP API", cmd_serve },
	{ "tokenize", "text to token ids (or --decode ids) with a model's tokenizer", cmd_tokenize },
	{ "version", "print the version and build features", cmd_version },
};

#define N_SUBCOMMANDS (sizeof subcommands / sizeof subcommands[0])

static void usage(FILE *out)
{
	fprintf(out, "Usage: aorta COMMAND [options]\n\nCommands:\n");
	for (size_t i = 0; i < N_SUBCOMMANDS; i++)
		fprintf(out, "  %-12s %s\n", subcommands[i].name, subcommands[i].summary);
	fprintf(out, "\nRun 'aorta COMMAND --help' for a command's options.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	const char *name = argv[1];
	if (!strcmp(name, "-h") || !strcmp(name, "--help") || !strcmp(name, "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(name, "--version") || !strcmp(name, "-V"))
		return cmd_version(0, argv + 2);
	for (size_t i = 0; i < N_SUBCOMMANDS; i++) {
		if (!strcmp(name, subcommands[i].name))
			return subcommands[i].run(argc - 2, argv + 2);
	}
	fprintf(stderr, "aorta: unknown command '%s'\n", name);
	usage(stderr);
	return 2;
}
