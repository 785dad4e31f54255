/* tests/api/test_chat_template_oracle.c — api/chat_template against Jinja2.
 * tests/api/chat_template_cases.json holds, per (template, conversation), what
 * the real template renders under Jinja2 the way transformers runs it (made by
 * chat_template_oracle.py from the fixture templates plus Llama 2, Mistral
 * v0.1 and Gemma 2); null = the template raises. Each case goes through api_parse_chat,
 * family detection on the real template text and api_chat_render, and must
 * match byte for byte (or be rejected with a 400). */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/chat_template.h"
#include "common/err.h"

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

static char cases_path[1024];

START_TEST(test_oracle_cases)
{
	char *text = slurp(cases_path);
	ck_assert_ptr_nonnull(text);
	cJSON *cases = cJSON_Parse(text);
	ck_assert_ptr_nonnull(cases);
	int n = 0, n_rejected = 0;
	const cJSON *c;
	cJSON_ArrayForEach(c, cases)
	{
		const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
		const char *tmpl = cJSON_GetObjectItem(c, "template")->valuestring;
		const char *bos = cJSON_GetObjectItem(c, "bos")->valuestring;
		const char *eos = cJSON_GetObjectItem(c, "eos")->valuestring;
		const cJSON *exp = cJSON_GetObjectItem(c, "expected");
		const cJSON *gen_item = cJSON_GetObjectItem(c, "add_generation_prompt");
		bool gen = !cJSON_IsFalse(gen_item);
		cJSON *body = cJSON_CreateObject();
		cJSON_AddItemToObject(body, "messages",
				      cJSON_Duplicate(cJSON_GetObjectItem(c, "messages"), 1));
		char *body_text = cJSON_PrintUnformatted(body);
		struct api_chat_req r;
		struct api_error e;
		ck_assert_msg(api_parse_chat(body_text, strlen(body_text), NULL, &r, &e) == 0,
			      "case %d: %s", n, e.message);
		struct api_chat_template t;
		ck_assert_int_eq(api_chat_template_init(&t, tmpl, NULL, bos, eos), 0);
		ck_assert(!t.is_fallback);
		struct buf out;
		buf_init(&out);
		bool starts_bos = false;
		memset(&e, 0, sizeof e);
		int rc = api_chat_render(&t, r.msgs, r.n_msgs, gen, &out, &starts_bos, &e);
		if (cJSON_IsNull(exp)) {
			ck_assert_msg(rc == ERR_INVAL && e.status == 400,
				      "case %d (%s) %s: the template raises, we rendered [%s]", n,
				      name, body_text, out.data ? out.data : "");
			n_rejected++;
		} else {
			ck_assert_msg(rc == 0, "case %d (%s) %s: rejected: %s", n, name, body_text,
				      e.message);
			ck_assert_msg(!strcmp(out.data, exp->valuestring),
				      "case %d (%s, gen %d) %s:\n got  [%s]\n want [%s]", n, name, gen,
				      body_text, out.data, exp->valuestring);
			bool want_bos = bos[0] && !strncmp(exp->valuestring, bos, strlen(bos));
			ck_assert_msg(starts_bos == want_bos, "case %d (%s): starts_with_bos", n, name);
		}
		buf_deinit(&out);
		api_chat_req_free(&r);
		free(body_text);
		cJSON_Delete(body);
		n++;
	}
	ck_assert_int_ge(n, 150);
	ck_assert_int_ge(n_rejected, 5);
	cJSON_Delete(cases);
	free(text);
}
END_TEST

int main(void)
{
	const char *root = getenv("AORTA_SOURCE_ROOT");
	snprintf(cases_path, sizeof cases_path, "%s/tests/api/chat_template_cases.json",
		 root ? root : ".");
	FILE *f = fopen(cases_path, "rb");
	if (!f) {
		printf("SKIP: %s not found (set AORTA_SOURCE_ROOT)\n", cases_path);
		return 77;
	}
	fclose(f);
	Suite *s = suite_create("chat_template_oracle");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_oracle_cases);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
