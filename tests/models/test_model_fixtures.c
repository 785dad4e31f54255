/* tests/models/test_model_fixtures.c — the HF-directory path with real
 * tokenizers: for each of $AORTA_FIXTURES/tokenizers/{llama3,mistral,qwen3,
 * gemma3}, generate an HF directory that copies its tokenizer.json and
 * tokenizer_config.json, load it, and check the vocabulary size, BOS/EOS ids,
 * add_bos and chat template the loader derives from those files.
 * Exits 77 (skipped) when the fixtures are absent.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/model/model.h"
#include "engine/model/model_gen.h"

static const char *fixtures;

struct expect {
	const char *name;
	int vocab, bos, eos;
	bool add_bos, has_template;
};

static const struct expect cases[] = {
	/* ids from each tokenizer_config.json's bos/eos names looked up in tokenizer.json */
	{ "llama3", 128256, 128000, 128001, false, true }, /* no add_bos_token; ByteLevel post-processor */
	{ "mistral", 32000, 1, 2, true, false },
	{ "qwen3", 151669, -1, 151645, false, true },
	{ "gemma3", 262145, 2, 106, true, true },
};

START_TEST(test_fixture_tokenizer)
{
	const struct expect *e = &cases[_i];
	char tdir[512], out[128];
	snprintf(tdir, sizeof tdir, "%s/tokenizers/%s", fixtures, e->name);
	snprintf(out, sizeof out, "/tmp/aorta_fix_%s_XXXXXX", e->name);
	ck_assert_ptr_nonnull(mkdtemp(out));
	struct model_gen_opts o;
	model_gen_default_opts(&o);
	o.cfg.arch = ARCH_LLAMA;
	o.cfg.n_layers = 1;
	o.cfg.hidden = 32;
	o.cfg.n_heads = 2;
	o.cfg.n_kv_heads = 1;
	o.cfg.head_dim = 16;
	o.cfg.ffn = 32;
	o.cfg.tied_embeddings = true; /* keeps the 262k-row gemma3 embedding to one copy */
	o.dtype = DT_BF16;
	o.tokenizer_dir = tdir;
	struct diag d = { 0 };
	int rc = model_gen_write_hf_dir(&o, out, &d);
	ck_assert_msg(rc == 0, "%s: %s", e->name, d.msg);
	struct model *m = NULL;
	rc = model_load(out, &m, &d);
	ck_assert_msg(rc == 0, "%s: %s", e->name, d.msg);
	ck_assert_int_eq(m->cfg.vocab, e->vocab);
	ck_assert_int_eq(m->w.tok_embd.shape[0], e->vocab);
	ck_assert_int_eq(m->cfg.bos_id, e->bos);
	ck_assert_int_eq(m->cfg.eos_id, e->eos);
	ck_assert_int_eq(m->cfg.add_bos, e->add_bos);
	ck_assert_int_eq(m->cfg.chat_template != NULL, e->has_template);
	ck_assert_ptr_nonnull(m->tokenizer_json_path);
	ck_assert_ptr_nonnull(m->tokenizer_config_path);
	ck_assert(strstr(m->tokenizer_json_path, "tokenizer.json"));
	/* the copies are byte-for-byte */
	char cmd[1200];
	snprintf(cmd, sizeof cmd, "cmp -s '%s/tokenizer.json' '%s'", tdir, m->tokenizer_json_path);
	ck_assert_int_eq(system(cmd), 0);
	model_destroy(m);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
	fixtures = getenv("AORTA_FIXTURES");
	char probe[512];
	snprintf(probe, sizeof probe, "%s/tokenizers/llama3/tokenizer.json", fixtures ? fixtures : "");
	if (!fixtures || access(probe, R_OK) != 0) {
		printf("SKIP: tokenizer fixtures not found (AORTA_FIXTURES=%s)\n",
		       fixtures ? fixtures : "(unset)");
		return 77;
	}
	Suite *s = suite_create("model_fixtures");
	TCase *tc = tcase_create("hf_tokenizers");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_fixture_tokenizer, 0, (int)(sizeof cases / sizeof cases[0]));
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
