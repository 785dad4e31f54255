/* tests/api/test_chat_template_fixtures.c — api/chat_template against the
 * real chat_template texts of the fixture tokenizers
 * ($AORTA_FIXTURES/tokenizers/<name>/tokenizer_config.json): the family is
 * detected from the real text, the BOS text comes from the config, and a
 * sample conversation renders to the hand-derived string for that template.
 * Exits 77 (skipped) when the fixtures are absent. */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/chat_template.h"

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *s = malloc((size_t)n + 1);
	if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
		free(s);
		s = NULL;
	}
	if (s)
		s[n] = 0;
	fclose(f);
	return s;
}

static const char *token_text(const cJSON *cfg, const char *key)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, key);
	if (cJSON_IsString(t))
		return t->valuestring;
	if (cJSON_IsObject(t) && cJSON_IsString(cJSON_GetObjectItem(t, "content")))
		return cJSON_GetObjectItem(t, "content")->valuestring;
	return NULL;
}

static void check_fixture(const char *name, const char *arch, enum api_chat_family family,
			  const char *expected, bool expect_bos)
{
	char path[1024];
	snprintf(path, sizeof path, "%s/tokenizers/%s/tokenizer_config.json",
		 getenv("AORTA_FIXTURES"), name);
	char *text = slurp(path);
	ck_assert_msg(text != NULL, "cannot read %s", path);
	cJSON *cfg = cJSON_Parse(text);
	ck_assert_ptr_nonnull(cfg);
	const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
	const char *tmpl_text = cJSON_IsString(tmpl) ? tmpl->valuestring : NULL;
	struct api_chat_template t;
	ck_assert_int_eq(api_chat_template_init(&t, tmpl_text, arch, token_text(cfg, "bos_token"),
						token_text(cfg, "eos_token")),
			 0);
	ck_assert_msg(t.family == family, "%s detected as %s", name,
		      api_chat_family_name(t.family));
	ck_assert(!t.is_fallback);

	const char *body = "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
			   "{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\","
			   "\"content\":\"Hello!\"},{\"role\":\"user\",\"content\":\"Why?\"}]}";
	const char *body_nosys = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},"
				 "{\"role\":\"assistant\",\"content\":\"Hello!\"},"
				 "{\"role\":\"user\",\"content\":\"Why?\"}]}";
	const char *b = family == API_CHAT_MISTRAL ? body_nosys : body;
	struct api_chat_req r;
	struct api_error e;
	ck_assert_int_eq(api_parse_chat(b, strlen(b), NULL, &r, &e), 0);
	struct buf out;
	buf_init(&out);
	bool bos = false;
	ck_assert_msg(api_chat_render(&t, r.msgs, r.n_msgs, true, &out, &bos, &e) == 0, "%s",
		      e.message);
	ck_assert_msg(!strcmp(out.data, expected), "%s:\n got  [%s]\n want [%s]", name, out.data,
		      expected);
	ck_assert_int_eq(bos, expect_bos);
	buf_deinit(&out);
	api_chat_req_free(&r);
	cJSON_Delete(cfg);
	free(text);
}

START_TEST(test_fixture_templates)
{
	check_fixture("llama3", NULL, API_CHAT_LLAMA3,
		      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief."
		      "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
		      "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
		      "<|start_header_id|>user<|end_header_id|>\n\nWhy?<|eot_id|>"
		      "<|start_header_id|>assistant<|end_header_id|>\n\n",
		      true);
	check_fixture("qwen3", NULL, API_CHAT_QWEN3,
		      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
		      "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n"
		      "<|im_start|>assistant\n",
		      false);
	check_fixture("gemma3", NULL, API_CHAT_GEMMA,
		      "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
		      "Hello!<end_of_turn>\n<start_of_turn>user\nWhy?<end_of_turn>\n"
		      "<start_of_turn>model\n",
		      true);
	/* the mistral fixture has no chat_template: chosen from the architecture */
	check_fixture("mistral", "MistralForCausalLM", API_CHAT_MISTRAL,
		      "<s>[INST] Hi [/INST]Hello!</s>[INST] Why? [/INST]", true);
}
END_TEST

int main(void)
{
	const char *fx = getenv("AORTA_FIXTURES");
	char probe[1024];
	snprintf(probe, sizeof probe, "%s/tokenizers/llama3/tokenizer_config.json", fx ? fx : "");
	FILE *f = fx ? fopen(probe, "rb") : NULL;
	if (!f) {
		printf("SKIP: fixtures not found (AORTA_FIXTURES=%s)\n", fx ? fx : "(unset)");
		return 77;
	}
	fclose(f);
	Suite *s = suite_create("chat_template_fixtures");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_fixture_templates);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
