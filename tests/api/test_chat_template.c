/* tests/api/test_chat_template.c — api/chat_template: family detection and
 * rendering. Expected strings are derived by hand from the reference
 * templates (the chat_template fields of the fixture tokenizers for llama3,
 * qwen3 and gemma3; Meta's Llama 2 chat and Mistral 7B Instruct v0.1
 * templates for the [INST] families). Messages go through api_parse_chat,
 * so this is also the parse -> render path the server uses. No fixture files
 * are needed here (see test_chat_template_fixtures.c for those). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/chat_template.h"
#include "common/err.h"

#define SYS_USER                                                                  \
	"[{\"role\":\"system\",\"content\":\"You are a helpful assistant.\"},"    \
	"{\"role\":\"user\",\"content\":\"Hello!\"}]"
#define USER_ONLY "[{\"role\":\"user\",\"content\":\"What is 2+2?\"}]"
#define MULTI                                                                     \
	"[{\"role\":\"system\",\"content\":\"Be brief.\"},"                       \
	"{\"role\":\"user\",\"content\":\"Hi\"},"                                 \
	"{\"role\":\"assistant\",\"content\":\"Hello! How can I help?\"},"        \
	"{\"role\":\"user\",\"content\":\"Tell me a joke.\"}]"
#define MULTI_NOSYS                                                               \
	"[{\"role\":\"user\",\"content\":\"Hi\"},"                                \
	"{\"role\":\"assistant\",\"content\":\"Hello! How can I help?\"},"        \
	"{\"role\":\"user\",\"content\":\"Tell me a joke.\"}]"
#define PARTS                                                                     \
	"[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Part one.\"}," \
	"{\"type\":\"text\",\"text\":\" Part two. \"}]}]"
#define PADDED "[{\"role\":\"user\",\"content\":\"  padded \\u00a0\\n\"}]"
#define TWO_USERS                                                                 \
	"[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"b\"}]"

/* Minimal template texts carrying each family's markers. */
static const char LLAMA2_TMPL[] =
	"{% if messages[0]['role'] == 'system' %}...'<<SYS>>\\n' + system_message + "
	"'\\n<</SYS>>\\n\\n'...{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}";
static const char MISTRAL_TMPL[] =
	"{{ bos_token }}{% for message in messages %}{{ '[INST] ' + message['content'] + "
	"' [/INST]' }}{% endfor %}";
static const char LLAMA3_TMPL[] =
	"{% for message in messages %}{{ '<|start_header_id|>' + message['role'] }}{% endfor %}";
static const char GEMMA_TMPL[] =
	"{{ bos_token }}{%- set first_user_prefix = '' -%}{{ '<start_of_turn>' + role + '\\n' }}"
	"{%- if add_generation_prompt -%}{{'<start_of_turn>model\\n'}}{%- endif -%}";
static const char GEMMA2_TMPL[] =
	"{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role "
	"not supported') }}{% endif %}{{ '<start_of_turn>' + role + '\\n' }}";
static const char QWEN3_TMPL[] = "{{- '<|im_start|>' + message.role }}{{ '</think>' }}";
static const char CHATML_TMPL[] = "{{'<|im_start|>' + message['role'] + '\\n'}}";

static void render_expect(const char *tmpl, const char *arch, const char *messages,
			  const char *expected, bool expect_bos)
{
	char body[2048];
	snprintf(body, sizeof body, "{\"messages\":%s}", messages);
	struct api_chat_req r;
	struct api_error e;
	ck_assert_msg(api_parse_chat(body, strlen(body), NULL, &r, &e) == 0, "parse: %s",
		      e.message);
	struct api_chat_template t;
	ck_assert_int_eq(api_chat_template_init(&t, tmpl, arch, NULL, NULL), 0);
	struct buf b;
	buf_init(&b);
	bool bos = !expect_bos;
	int rc = api_chat_render(&t, r.msgs, r.n_msgs, true, &b, &bos, &e);
	ck_assert_msg(rc == 0, "render (%s): %s", api_chat_family_name(t.family), e.message);
	ck_assert_msg(!strcmp(b.data, expected), "%s:\n got  [%s]\n want [%s]",
		      api_chat_family_name(t.family), b.data, expected);
	ck_assert_int_eq(bos, expect_bos);
	buf_deinit(&b);
	api_chat_req_free(&r);
}

static void render_reject(const char *tmpl, const char *arch, const char *messages,
			  const char *param)
{
	char body[2048];
	snprintf(body, sizeof body, "{\"messages\":%s}", messages);
	struct api_chat_req r;
	struct api_error e;
	ck_assert_int_eq(api_parse_chat(body, strlen(body), NULL, &r, &e), 0);
	struct api_chat_template t;
	ck_assert_int_eq(api_chat_template_init(&t, tmpl, arch, NULL, NULL), 0);
	struct buf b;
	buf_init(&b);
	buf_append_str(&b, "keep");
	memset(&e, 0, sizeof e);
	int rc = api_chat_render(&t, r.msgs, r.n_msgs, true, &b, NULL, &e);
	ck_assert_int_eq(rc, ERR_INVAL);
	ck_assert_int_eq(e.status, 400);
	ck_assert_str_eq(e.param, param);
	ck_assert_str_eq(b.data, "keep"); /* out untouched */
	buf_deinit(&b);
	api_chat_req_free(&r);
}

START_TEST(test_detect)
{
	struct api_chat_template t;
	struct {
		const char *tmpl, *arch;
		enum api_chat_family f;
		bool fallback;
	} cases[] = {
		{LLAMA2_TMPL, NULL, API_CHAT_LLAMA2, false},
		{MISTRAL_TMPL, NULL, API_CHAT_MISTRAL, false},
		{LLAMA3_TMPL, "gemma", API_CHAT_LLAMA3, false}, /* text wins over arch */
		{GEMMA_TMPL, NULL, API_CHAT_GEMMA, false},
		{GEMMA2_TMPL, NULL, API_CHAT_GEMMA2, false},
		{NULL, "gemma2", API_CHAT_GEMMA2, false},
		{NULL, "GemmaForCausalLM", API_CHAT_GEMMA2, false},
		{QWEN3_TMPL, NULL, API_CHAT_QWEN3, false},
		{CHATML_TMPL, NULL, API_CHAT_CHATML, false},
		{"{{ messages }}", NULL, API_CHAT_CHATML, true},
		{NULL, "MistralForCausalLM", API_CHAT_MISTRAL, false},
		{"", "gemma3", API_CHAT_GEMMA, false},
		{NULL, "Gemma3ForCausalLM", API_CHAT_GEMMA, false},
		{NULL, "Qwen3ForCausalLM", API_CHAT_QWEN3, false},
		{NULL, "qwen2", API_CHAT_CHATML, false},
		{NULL, "llama", API_CHAT_LLAMA2, false},
		{NULL, "llama3", API_CHAT_LLAMA3, false},
		{NULL, "gpt2", API_CHAT_CHATML, true},
		{NULL, NULL, API_CHAT_CHATML, true},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		ck_assert_int_eq(api_chat_template_init(&t, cases[i].tmpl, cases[i].arch, NULL, NULL),
				 0);
		ck_assert_msg(t.family == cases[i].f, "case %zu: %s", i,
			      api_chat_family_name(t.family));
		ck_assert_int_eq(t.is_fallback, cases[i].fallback);
	}
	ck_assert_int_eq(api_chat_template_init(&t, NULL, "llama3", NULL, NULL), 0);
	ck_assert_str_eq(t.bos, "<|begin_of_text|>");
	ck_assert(!t.is_approximate);
	/* variants we do not reproduce exactly are flagged */
	ck_assert_int_eq(api_chat_template_init(&t, "<|start_header_id|>{{ \"Cutting Knowledge "
						    "Date: December 2023\\n\" }}",
						NULL, NULL, NULL),
			 0);
	ck_assert(t.family == API_CHAT_LLAMA3 && t.is_approximate);
	ck_assert_int_eq(api_chat_template_init(&t, "{{ '<|im_start|>system\\nYou are a helpful "
						    "assistant.<|im_end|>' }}",
						NULL, NULL, NULL),
			 0);
	ck_assert(t.family == API_CHAT_CHATML && t.is_approximate);
	ck_assert_int_eq(api_chat_template_init(&t, LLAMA3_TMPL, NULL, NULL, NULL), 0);
	ck_assert(!t.is_approximate);
	ck_assert_int_eq(api_chat_template_init(&t, NULL, "gemma", "<B>", "<E>"), 0);
	ck_assert_str_eq(t.bos, "<B>");
	ck_assert_str_eq(t.eos, "<E>");
	char longbos[100];
	memset(longbos, 'x', 99);
	longbos[99] = 0;
	ck_assert_int_eq(api_chat_template_init(&t, NULL, "gemma", longbos, NULL), ERR_INVAL);
}
END_TEST

START_TEST(test_llama3)
{
	render_expect(LLAMA3_TMPL, NULL, SYS_USER,
		      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
		      "You are a helpful assistant.<|eot_id|>"
		      "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
		      "<|start_header_id|>assistant<|end_header_id|>\n\n",
		      true);
	render_expect(LLAMA3_TMPL, NULL, USER_ONLY,
		      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
		      "What is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
		      true);
	render_expect(LLAMA3_TMPL, NULL, MULTI,
		      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
		      "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
		      "<|start_header_id|>assistant<|end_header_id|>\n\nHello! How can I help?"
		      "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nTell me a joke."
		      "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
		      true);
	/* parts joined with "\n", then trimmed as a whole */
	render_expect(LLAMA3_TMPL, NULL, PARTS,
		      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
		      "Part one.\n Part two.<|eot_id|>"
		      "<|start_header_id|>assistant<|end_header_id|>\n\n",
		      true);
	/* | trim strips Unicode whitespace (U+00A0 here) like Python */
	render_expect(LLAMA3_TMPL, NULL, PADDED,
		      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
		      "padded<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
		      true);
	/* U+200B is not whitespace to Python; U+3000 and U+2029 are */
	render_expect(LLAMA3_TMPL, NULL,
		      "[{\"role\":\"user\",\"content\":\"\\u3000\\u200bx\\u2029\"}]",
		      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
		      "\xE2\x80\x8Bx<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
		      true);
}
END_TEST

START_TEST(test_gemma)
{
	render_expect(GEMMA_TMPL, NULL, SYS_USER,
		      "<bos><start_of_turn>user\nYou are a helpful assistant.\n\nHello!"
		      "<end_of_turn>\n<start_of_turn>model\n",
		      true);
	render_expect(GEMMA_TMPL, NULL, USER_ONLY,
		      "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
		      true);
	render_expect(GEMMA_TMPL, NULL, MULTI,
		      "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
		      "<start_of_turn>model\nHello! How can I help?<end_of_turn>\n"
		      "<start_of_turn>user\nTell me a joke.<end_of_turn>\n<start_of_turn>model\n",
		      true);
	/* gemma iterates the parts: each trimmed, no separator */
	render_expect(GEMMA_TMPL, NULL, PARTS,
		      "<bos><start_of_turn>user\nPart one.Part two.<end_of_turn>\n"
		      "<start_of_turn>model\n",
		      true);
	render_expect(GEMMA_TMPL, NULL, PADDED,
		      "<bos><start_of_turn>user\npadded<end_of_turn>\n<start_of_turn>model\n", true);
	/* the system text is not trimmed; only its first part is used */
	render_expect(GEMMA_TMPL, NULL,
		      "[{\"role\":\"system\",\"content\":[{\"type\":\"text\",\"text\":\" S \"},"
		      "{\"type\":\"text\",\"text\":\"ignored\"}]},{\"role\":\"user\",\"content\":\"u\"}]",
		      "<bos><start_of_turn>user\n S \n\nu<end_of_turn>\n<start_of_turn>model\n", true);
	render_reject(GEMMA_TMPL, NULL, TWO_USERS, "messages[1].role");
	render_reject(GEMMA_TMPL, NULL,
		      "[{\"role\":\"assistant\",\"content\":\"a\"}]", "messages[0].role");
	render_reject(GEMMA_TMPL, NULL,
		      "[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"system\",\"content\":\"t\"}]",
		      "messages[1].role");
}
END_TEST

START_TEST(test_gemma2)
{
	render_expect(GEMMA2_TMPL, NULL, MULTI_NOSYS,
		      "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
		      "Hello! How can I help?<end_of_turn>\n<start_of_turn>user\nTell me a joke."
		      "<end_of_turn>\n<start_of_turn>model\n",
		      true);
	/* string-content template: parts joined with "\n", trimmed as a whole */
	render_expect(NULL, "gemma2", PARTS,
		      "<bos><start_of_turn>user\nPart one.\n Part two.<end_of_turn>\n"
		      "<start_of_turn>model\n",
		      true);
	render_reject(GEMMA2_TMPL, NULL, SYS_USER, "messages[0].role");
	render_reject(GEMMA2_TMPL, NULL, TWO_USERS, "messages[1].role");
}
END_TEST

START_TEST(test_qwen3_chatml)
{
	render_expect(QWEN3_TMPL, NULL, SYS_USER,
		      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
		      "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
		      false);
	render_expect(QWEN3_TMPL, NULL, MULTI,
		      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
		      "<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"
		      "<|im_start|>user\nTell me a joke.<|im_end|>\n<|im_start|>assistant\n",
		      false);
	render_expect(QWEN3_TMPL, NULL, PADDED,
		      "<|im_start|>user\n  padded \xC2\xA0\n<|im_end|>\n<|im_start|>assistant\n",
		      false);
	/* historic reasoning is dropped from earlier assistant turns */
	render_expect(QWEN3_TMPL, NULL,
		      "[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":"
		      "\"<think>\\nhmm\\n</think>\\n\\nHello\"},{\"role\":\"user\",\"content\":\"Q\"}]",
		      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n"
		      "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n",
		      false);
	/* an assistant turn after the last user query keeps its reasoning */
	render_expect(QWEN3_TMPL, NULL,
		      "[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":"
		      "\"<think>r</think>A\"}]",
		      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nr\n</think>\n\n"
		      "A<|im_end|>\n<|im_start|>assistant\n",
		      false);
	/* a later system message is rendered in place */
	render_expect(QWEN3_TMPL, NULL,
		      "[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"system\",\"content\":\"s\"}]",
		      "<|im_start|>user\na<|im_end|>\n<|im_start|>system\ns<|im_end|>\n"
		      "<|im_start|>assistant\n",
		      false);
	render_expect(CHATML_TMPL, NULL, SYS_USER,
		      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
		      "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
		      false);
	/* plain ChatML does not touch reasoning or whitespace */
	render_expect(NULL, "gpt2",
		      "[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":"
		      "\"<think>x</think>y\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\","
		      "\"text\":\"p\"},{\"type\":\"text\",\"text\":\"q\"}]}]",
		      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>x</think>y"
		      "<|im_end|>\n<|im_start|>user\np\nq<|im_end|>\n<|im_start|>assistant\n",
		      false);
}
END_TEST

START_TEST(test_llama2)
{
	render_expect(LLAMA2_TMPL, NULL, SYS_USER,
		      "<s>[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\nHello! [/INST]",
		      true);
	render_expect(LLAMA2_TMPL, NULL, USER_ONLY, "<s>[INST] What is 2+2? [/INST]", true);
	render_expect(LLAMA2_TMPL, NULL, MULTI,
		      "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! How can I help? "
		      "</s><s>[INST] Tell me a joke. [/INST]",
		      true);
	render_expect(LLAMA2_TMPL, NULL, PADDED, "<s>[INST] padded [/INST]", true);
	render_expect(LLAMA2_TMPL, NULL, PARTS, "<s>[INST] Part one.\n Part two. [/INST]", true);
	render_reject(LLAMA2_TMPL, NULL, TWO_USERS, "messages[1].role");
	render_reject(LLAMA2_TMPL, NULL,
		      "[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"assistant\",\"content\":\"a\"}]",
		      "messages[1].role");
}
END_TEST

START_TEST(test_mistral)
{
	render_expect(NULL, "MistralForCausalLM", USER_ONLY, "<s>[INST] What is 2+2? [/INST]",
		      true);
	render_expect(MISTRAL_TMPL, NULL, MULTI_NOSYS,
		      "<s>[INST] Hi [/INST]Hello! How can I help?</s>[INST] Tell me a joke. [/INST]",
		      true);
	render_reject(MISTRAL_TMPL, NULL, SYS_USER, "messages[0].role");
	render_reject(MISTRAL_TMPL, NULL, TWO_USERS, "messages[1].role");
	render_reject(MISTRAL_TMPL, NULL,
		      "[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"system\",\"content\":\"b\"}]",
		      "messages[1].role");
}
END_TEST

START_TEST(test_no_generation_prompt)
{
	const char *body = "{\"messages\":" USER_ONLY "}";
	struct api_chat_req r;
	struct api_error e;
	ck_assert_int_eq(api_parse_chat(body, strlen(body), NULL, &r, &e), 0);
	struct api_chat_template t;
	api_chat_template_init(&t, GEMMA_TMPL, NULL, NULL, NULL);
	struct buf b;
	buf_init(&b);
	ck_assert_int_eq(api_chat_render(&t, r.msgs, r.n_msgs, false, &b, NULL, &e), 0);
	ck_assert_str_eq(b.data, "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n");
	buf_clear(&b);
	/* a template that never reads add_generation_prompt always adds it */
	api_chat_template_init(&t, LLAMA3_TMPL, NULL, NULL, NULL);
	ck_assert(t.gen_always);
	ck_assert_int_eq(api_chat_render(&t, r.msgs, r.n_msgs, false, &b, NULL, &e), 0);
	ck_assert_str_eq(b.data, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
				 "What is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
	buf_clear(&b);
	ck_assert_int_eq(api_chat_render(&t, r.msgs, 0, true, &b, NULL, &e), ERR_INVAL);
	ck_assert_int_eq(e.status, 400);
	buf_deinit(&b);
	api_chat_req_free(&r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("chat_template");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_detect);
	tcase_add_test(tc, test_llama3);
	tcase_add_test(tc, test_gemma);
	tcase_add_test(tc, test_gemma2);
	tcase_add_test(tc, test_qwen3_chatml);
	tcase_add_test(tc, test_llama2);
	tcase_add_test(tc, test_mistral);
	tcase_add_test(tc, test_no_generation_prompt);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
