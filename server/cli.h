/* server/cli.h — a small table-driven command-line parser for the `aorta`
 * subcommands.
 *
 * Flags are `--name value` or `--name=value`; booleans are `--name` (true) and
 * `--no-name` (false). `-h`/`--help` prints the command's help. Anything else
 * starting with `-` is rejected with a clear message (exit status 2 by
 * convention of the caller). Flag names follow vLLM's where one exists.
 * Single-threaded; dest pointers are borrowed for the call.
 */
#ifndef AORTA_SERVER_CLI_H
#define AORTA_SERVER_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum cli_type {
	CLI_STR,    /* const char * (points into argv) */
	CLI_INT,    /* int */
	CLI_I64,    /* int64_t */
	CLI_DOUBLE, /* double */
	CLI_BOOL,   /* bool */
	CLI_BYTES,  /* uint64_t, with optional K/M/G/T (powers of 1024) or KB/MB/GB (powers of 1000) */
};

struct cli_opt {
	const char *name; /* without the leading "--" */
	enum cli_type type;
	void *dest;
	const char *metavar; /* e.g. "N", "PATH"; NULL for booleans */
	const char *help;
};

struct cli_cmd {
	const char *name;    /* "serve" */
	const char *summary; /* one line for `aorta --help` */
	const char *usage;   /* e.g. "aorta serve --model PATH [options]" */
	const struct cli_opt *opts;
	int n_opts;
	int min_positional;
	int max_positional;
};

enum { CLI_OK = 0, CLI_HELP = 1, CLI_ERROR = 2 };

/* Parse argv[0..argc) (argv[0] is the first argument after the subcommand).
 * Positional arguments are stored in pos[] (capacity max_positional).
 * Returns CLI_OK, CLI_HELP (help was printed to out) or CLI_ERROR (a message
 * was printed to err). */
int cli_parse(const struct cli_cmd *cmd, int argc, char **argv, const char **pos, int *n_pos,
	      FILE *out, FILE *err);

void cli_print_help(const struct cli_cmd *cmd, FILE *out);

/* Parse "512", "2G", "1.5GB" etc. into bytes; 0 or -1 on error. */
int cli_parse_bytes(const char *s, uint64_t *out);

#endif
