/* server/cmd_tokenize.c — `aorta tokenize --model M TEXT...`: print the ids of
 * TEXT (stdin when no TEXT), or with --decode turn ids back into text.
 * M is a tokenizer.json, an HF model directory (tokenizer.json +
 * tokenizer_config.json) or a GGUF file (its tokenizer.ggml.* keys).
 * Tested end to end in tests/tokenizer/test_cli_tokenize.sh.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "commands.h"
#include "common/buf.h"
#include "engine/model/gguf.h"
#include "engine/tok/tokenizer.h"

static bool file_exists(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int load(const char *path, struct tokenizer **t, struct gguf_file **g, struct diag *d)
{
	struct stat st;
	if (stat(path, &st) != 0)
		return diag_set(d, ERR_IO, "%s: %s", path, strerror(errno));
	struct buf j, c;
	buf_init(&j);
	buf_init(&c);
	int rc;
	size_t n = strlen(path);
	if (S_ISDIR(st.st_mode)) {
		buf_printf(&j, "%s/tokenizer.json", path);
		buf_printf(&c, "%s/tokenizer_config.json", path);
		rc = tok_load_json(j.data, file_exists(c.data) ? c.data : NULL, t, d);
	} else if (n >= 5 && !strcmp(path + n - 5, ".json")) {
		/* a sibling tokenizer_config.json, when there is one */
		const char *slash = strrchr(path, '/');
		buf_printf(&c, "%.*stokenizer_config.json", slash ? (int)(slash - path + 1) : 0, path);
		rc = tok_load_json(path, file_exists(c.data) ? c.data : NULL, t, d);
	} else {
		rc = gguf_open(path, g, d);
		if (!rc)
			rc = tok_load_gguf(*g, t, d);
	}
	buf_deinit(&j);
	buf_deinit(&c);
	return rc;
}

static int read_stdin(struct buf *b)
{
	char tmp[65536];
	size_t n;
	while ((n = fread(tmp, 1, sizeof(tmp), stdin)) > 0)
		if (buf_append(b, tmp, n))
			return ERR_NOMEM;
	return ferror(stdin) ? ERR_IO : 0;
}

static int do_decode(const struct tokenizer *t, const char **pos, int n_pos, bool skip, struct buf *in)
{
	int32_t *ids = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;
	for (int a = 0; a <= n_pos && !rc; a++) {
		const char *s = a < n_pos ? pos[a] : (n_pos == 0 ? in->data : NULL);
		while (s && *s && !rc) {
			char *end;
			while (*s == ' ' || *s == ',' || *s == '\n' || *s == '\t' || *s == '[' || *s == ']')
				s++;
			if (!*s)
				break;
			errno = 0;
			long v = strtol(s, &end, 10);
			if (end == s || errno || v < 0 || v > INT32_MAX) {
				fprintf(stderr, "aorta tokenize: not a token id: '%.20s'\n", s);
				free(ids);
				return 2;
			}
			if (n == cap) {
				cap = cap ? cap * 2 : 64;
				int32_t *p = realloc(ids, cap * sizeof(int32_t));
				if (!p) {
					rc = ERR_NOMEM;
					break;
				}
				ids = p;
			}
			ids[n++] = (int32_t)v;
			s = end;
		}
	}
	struct buf out;
	buf_init(&out);
	if (!rc)
		rc = tok_decode(t, ids, n, skip ? TOK_SKIP_SPECIAL : 0, &out);
	if (!rc)
		printf("%s\n", out.data ? out.data : "");
	else
		fprintf(stderr, "aorta tokenize: decode failed: %s\n", err_str(rc));
	buf_deinit(&out);
	free(ids);
	return rc ? 1 : 0;
}

int cmd_tokenize(int argc, char **argv)
{
	const char *model = NULL;
	bool decode = false, add_special = true, parse_special = true, skip_special = false, pieces = false;
	const struct cli_opt opts[] = {
		{ "model", CLI_STR, &model, "PATH", "tokenizer.json, HF model directory or GGUF file" },
		{ "decode", CLI_BOOL, &decode, NULL, "arguments are token ids; print the text" },
		{ "add-special", CLI_BOOL, &add_special, NULL, "add the post-processor's tokens (BOS); default on" },
		{ "parse-special", CLI_BOOL, &parse_special, NULL,
		  "special-token text in the input becomes that token; default on" },
		{ "skip-special", CLI_BOOL, &skip_special, NULL, "decode: drop special tokens" },
		{ "pieces", CLI_BOOL, &pieces, NULL, "print each id with its vocabulary piece" },
	};
	const struct cli_cmd cmd = {
		.name = "tokenize",
		.summary = "Tokenize text (or --decode ids) with a model's tokenizer.",
		.usage = "aorta tokenize --model PATH [--decode] [TEXT...]   (stdin when no TEXT)",
		.opts = opts,
		.n_opts = (int)(sizeof(opts) / sizeof(opts[0])),
		.min_positional = 0,
		.max_positional = 64,
	};
	const char *pos[64];
	int n_pos;
	int rc = cli_parse(&cmd, argc, argv, pos, &n_pos, stdout, stderr);
	if (rc == CLI_HELP)
		return 0;
	if (rc)
		return 2;
	if (!model) {
		fprintf(stderr, "aorta tokenize: --model is required\n");
		return 2;
	}
	struct tokenizer *t = NULL;
	struct gguf_file *g = NULL;
	struct diag d = { 0 };
	if (load(model, &t, &g, &d)) {
		fprintf(stderr, "aorta tokenize: %s\n", d.msg);
		gguf_close(g);
		return 1;
	}
	struct buf in;
	buf_init(&in);
	int status = 0;
	if (n_pos == 0 && read_stdin(&in)) {
		fprintf(stderr, "aorta tokenize: cannot read stdin\n");
		status = 1;
	} else if (decode) {
		status = do_decode(t, pos, n_pos, skip_special, &in);
	} else {
		/* positional words are joined by single spaces, like a shell echo */
		struct buf text;
		buf_init(&text);
		for (int i = 0; i < n_pos; i++)
			if ((i && buf_append_char(&text, ' ')) || buf_append_str(&text, pos[i]))
				status = 1;
		const struct buf *src = n_pos ? &text : &in;
		int32_t *ids = NULL;
		size_t n = 0;
		unsigned flags = (add_special ? TOK_ADD_SPECIAL : 0) | (parse_special ? TOK_PARSE_SPECIAL : 0);
		if (!status && (rc = tok_encode(t, src->data ? src->data : "", src->len, flags, &ids, &n))) {
			fprintf(stderr, "aorta tokenize: %s\n", err_str(rc));
			status = 1;
		}
		for (size_t i = 0; !status && i < n; i++) {
			if (pieces) {
				size_t len = 0;
				const char *p = tok_token_text(t, ids[i], &len);
				printf("%d\t%.*s\n", ids[i], (int)len, p ? p : "");
			} else {
				printf(i ? " %d" : "%d", ids[i]);
			}
		}
		if (!status && !pieces)
			printf("\n");
		free(ids);
		buf_deinit(&text);
	}
	buf_deinit(&in);
	tok_destroy(t);
	gguf_close(g);
	return status;
}
