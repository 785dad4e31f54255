/* server/cli.c — table-driven flag parsing; see cli.h.
 * Tested in tests/unit/test_cli.c. */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int cli_parse_bytes(const char *s, uint64_t *out)
{
	if (!s || !*s)
		return -1;
	errno = 0;
	char *end;
	double v = strtod(s, &end);
	if (errno || end == s || !(v >= 0) || !isfinite(v))
		return -1;
	double mul = 1;
	if (*end) {
		char u = (char)(*end | 0x20);
		const char *units = "kmgt";
		const char *p = strchr(units, u);
		if (!p || u == 0)
			return -1;
		int power = (int)(p - units) + 1;
		end++;
		double base = 1024;
		if ((*end | 0x20) == 'b' && *end) {
			base = 1000;
			end++;
		} else if (*end == 'i' && (end[1] | 0x20) == 'b') {
			end += 2; /* KiB, MiB, ... */
		}
		if (*end)
			return -1;
		for (int i = 0; i < power; i++)
			mul *= base;
	}
	double bytes = v * mul;
	if (bytes > 1.8e19)
		return -1;
	*out = (uint64_t)bytes;
	return 0;
}

static const struct cli_opt *find_opt(const struct cli_cmd *cmd, const char *name, size_t len,
				      bool *negated)
{
	*negated = false;
	for (int i = 0; i < cmd->n_opts; i++) {
		const struct cli_opt *o = &cmd->opts[i];
		if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
			return o;
	}
	if (len > 3 && strncmp(name, "no-", 3) == 0) {
		for (int i = 0; i < cmd->n_opts; i++) {
			const struct cli_opt *o = &cmd->opts[i];
			if (o->type == CLI_BOOL && strlen(o->name) == len - 3 &&
			    strncmp(o->name, name + 3, len - 3) == 0) {
				*negated = true;
				return o;
			}
		}
	}
	return NULL;
}

static int set_value(const struct cli_cmd *cmd, const struct cli_opt *o, const char *v, FILE *err)
{
	char *end;
	errno = 0;
	switch (o->type) {
	case CLI_STR:
		*(const char **)o->dest = v;
		return 0;
	case CLI_INT: {
		long x = strtol(v, &end, 10);
		if (errno || end == v || *end || x < INT_MIN || x > INT_MAX)
			break;
		*(int *)o->dest = (int)x;
		return 0;
	}
	case CLI_I64: {
		long long x = strtoll(v, &end, 10);
		if (errno || end == v || *end)
			break;
		*(int64_t *)o->dest = (int64_t)x;
		return 0;
	}
	case CLI_DOUBLE: {
		double x = strtod(v, &end);
		if (errno || end == v || *end || !isfinite(x))
			break;
		*(double *)o->dest = x;
		return 0;
	}
	case CLI_BYTES:
		if (cli_parse_bytes(v, (uint64_t *)o->dest) == 0)
			return 0;
		break;
	case CLI_BOOL:
		if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes")) {
			*(bool *)o->dest = true;
			return 0;
		}
		if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no")) {
			*(bool *)o->dest = false;
			return 0;
		}
		break;
	}
	fprintf(err, "aorta %s: invalid value '%s' for --%s (expected %s)\n", cmd->name, v,
		o->name, o->metavar ? o->metavar : "true|false");
	return CLI_ERROR;
}

int cli_parse(const struct cli_cmd *cmd, int argc, char **argv, const char **pos, int *n_pos,
	      FILE *out, FILE *err)
{
	*n_pos = 0;
	bool only_positional = false;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (only_positional || a[0] != '-' || a[1] == '\0') {
			if (*n_pos >= cmd->max_positional) {
				fprintf(err, "aorta %s: unexpected argument '%s'\nTry 'aorta %s --help'.\n",
					cmd->name, a, cmd->name);
				return CLI_ERROR;
			}
			pos[(*n_pos)++] = a;
			continue;
		}
		if (!strcmp(a, "--")) {
			only_positional = true;
			continue;
		}
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			cli_print_help(cmd, out);
			return CLI_HELP;
		}
		if (a[1] != '-') {
			fprintf(err, "aorta %s: unknown option '%s'\nTry 'aorta %s --help'.\n",
				cmd->name, a, cmd->name);
			return CLI_ERROR;
		}
		const char *name = a + 2;
		const char *eq = strchr(name, '=');
		size_t len = eq ? (size_t)(eq - name) : strlen(name);
		bool negated;
		const struct cli_opt *o = find_opt(cmd, name, len, &negated);
		if (!o) {
			fprintf(err, "aorta %s: unknown option '--%.*s'\nTry 'aorta %s --help'.\n",
				cmd->name, (int)len, name, cmd->name);
			return CLI_ERROR;
		}
		if (o->type == CLI_BOOL && !eq) {
			*(bool *)o->dest = !negated;
			continue;
		}
		if (negated) {
			fprintf(err, "aorta %s: --no-%s takes no value\n", cmd->name, o->name);
			return CLI_ERROR;
		}
		const char *v;
		if (eq) {
			v = eq + 1;
		} else {
			if (i + 1 >= argc) {
				fprintf(err, "aorta %s: option '--%s' needs a value (%s)\n", cmd->name,
					o->name, o->metavar ? o->metavar : "VALUE");
				return CLI_ERROR;
			}
			v = argv[++i];
		}
		if (set_value(cmd, o, v, err))
			return CLI_ERROR;
	}
	if (*n_pos < cmd->min_positional) {
		fprintf(err, "aorta %s: missing argument\nUsage: %s\n", cmd->name, cmd->usage);
		return CLI_ERROR;
	}
	return CLI_OK;
}

void cli_print_help(const struct cli_cmd *cmd, FILE *out)
{
	fprintf(out, "Usage: %s\n\n%s\n", cmd->usage, cmd->summary);
	if (cmd->n_opts)
		fprintf(out, "\nOptions:\n");
	for (int i = 0; i < cmd->n_opts; i++) {
		const struct cli_opt *o = &cmd->opts[i];
		char left[96];
		if (o->type == CLI_BOOL)
			snprintf(left, sizeof left, "--%s, --no-%s", o->name, o->name);
		else
			snprintf(left, sizeof left, "--%s %s", o->name, o->metavar ? o->metavar : "VALUE");
		fprintf(out, "  %-38s %s\n", left, o->help);
	}
	fprintf(out, "  %-38s %s\n", "-h, --help", "show this help and exit");
}
