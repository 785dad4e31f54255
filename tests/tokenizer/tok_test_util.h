/* tests/tokenizer/tok_test_util.h — fixture paths for the tokenizer tests. */
#ifndef AORTA_TESTS_TOK_TEST_UTIL_H
#define AORTA_TESTS_TOK_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tok/tokenizer.h"

/* $AORTA_FIXTURES/tokenizers/<name>/<file> (malloc'ed). */
static inline char *tt_path(const char *name, const char *file)
{
	const char *root = getenv("AORTA_FIXTURES");
	if (!root)
		root = "/work/shared/fixtures";
	size_t n = strlen(root) + strlen(name) + strlen(file) + 32;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%s/tokenizers/%s/%s", root, name, file);
	return p;
}

static inline int tt_load(const char *name, struct tokenizer **t, struct diag *d)
{
	char *j = tt_path(name, "tokenizer.json"), *c = tt_path(name, "tokenizer_config.json");
	int rc = tok_load_json(j, c, t, d);
	free(j);
	free(c);
	return rc;
}

#endif
