/* tests/api/test_api_parse.c — api/ request parsing: completions, chat,
 * tokenize/detokenize, validation errors (status, param, message), JSON
 * hygiene (UTF-8, NUL escapes, depth, duplicates), context-length checks. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/api_internal.h"
#include "common/err.h"
#include "common/utf8.h"

static int parse_c(const char *body, struct api_completion_req *r, struct api_error *e)
{
	return api_parse_completion(body, strlen(body), NULL, r, e);
}

static int parse_chat(const char *body, struct api_chat_req *r, struct api_error *e)
{
	return api_parse_chat(body, strlen(body), NULL, r, e);
}

/* Expect a 400 whose param is `param` and whose message contains `needle`. */
static void expect_bad_c(const char *body, const char *param, const char *needle)
{
	struct api_completion_req r;
	struct api_error e;
	memset(&e, 0, sizeof e);
	int rc = parse_c(body, &r, &e);
	ck_assert_msg(rc < 0, "accepted: %s", body);
	ck_assert_int_eq(e.status, 400);
	ck_assert_int_eq(api_status_for_err(rc), 400);
	ck_assert_str_eq(e.type, "invalid_request_error");
	ck_assert_msg(!strcmp(e.param, param), "param '%s' != '%s' for %s (%s)", e.param, param,
		      body, e.message);
	ck_assert_msg(strstr(e.message, needle), "message '%s' lacks '%s'", e.message, needle);
}

static void expect_bad_chat(const char *body, const char *param, const char *needle)
{
	struct api_chat_req r;
	struct api_error e;
	memset(&e, 0, sizeof e);
	int rc = parse_chat(body, &r, &e);
	ck_assert_msg(rc < 0, "accepted: %s", body);
	ck_assert_int_eq(e.status, 400);
	ck_assert_msg(!strcmp(e.param, param), "param '%s' != '%s' for %s (%s)", e.param, param,
		      body, e.message);
	ck_assert_msg(strstr(e.message, needle), "message '%s' lacks '%s'", e.message, needle);
}

START_TEST(test_completion_minimal)
{
	struct api_completion_req r;
	struct api_error e;
	ck_assert_int_eq(parse_c("{\"model\":\"m\",\"prompt\":\"Hello\"}", &r, &e), 0);
	ck_assert_str_eq(r.model, "m");
	ck_assert_int_eq(r.n_prompts, 1);
	ck_assert(!r.prompts[0].is_tokens);
	ck_assert_str_eq(r.prompts[0].text, "Hello");
	ck_assert_uint_eq(r.prompts[0].text_len, 5);
	ck_assert(!r.has_max_tokens);
	ck_assert_int_eq(r.n, 1);
	ck_assert_int_eq(r.logprobs, -1);
	ck_assert(!r.stream && !r.echo && !r.include_usage);
	ck_assert(!r.s.has_temperature && !r.s.has_top_p && !r.s.has_seed && !r.s.has_top_k);
	ck_assert_int_eq(r.s.n_stop, 0);
	api_completion_req_free(&r);
}
END_TEST

START_TEST(test_completion_all_fields)
{
	const char *body =
		"{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":32,\"temperature\":0.7,"
		"\"top_p\":0.9,\"n\":3,\"stop\":[\"\\n\",\"END\"],\"seed\":-42,"
		"\"presence_penalty\":0.5,\"frequency_penalty\":-1.5,"
		"\"logit_bias\":{\"50256\":-100,\"7\":2.5},\"logprobs\":5,\"echo\":true,"
		"\"stream\":true,\"stream_options\":{\"include_usage\":true},\"user\":\"u1\","
		"\"top_k\":40,\"min_p\":0.05,\"repetition_penalty\":1.1,\"ignore_eos\":true,"
		"\"min_tokens\":4,\"stop_token_ids\":[2,32000],\"unknown_extra\":{\"a\":[1]}}";
	struct api_completion_req r;
	struct api_error e;
	ck_assert_int_eq(parse_c(body, &r, &e), 0);
	ck_assert(r.has_max_tokens);
	ck_assert_int_eq(r.max_tokens, 32);
	ck_assert(r.s.has_temperature);
	ck_assert_float_eq_tol(r.s.temperature, 0.7f, 1e-6);
	ck_assert_float_eq_tol(r.s.top_p, 0.9f, 1e-6);
	ck_assert_int_eq(r.n, 3);
	ck_assert_int_eq(r.s.n_stop, 2);
	ck_assert_str_eq(r.s.stop[0], "\n");
	ck_assert_str_eq(r.s.stop[1], "END");
	ck_assert_uint_eq(r.s.stop_len[1], 3);
	ck_assert(r.s.has_seed);
	ck_assert_int_eq(r.s.seed, -42);
	ck_assert_float_eq(r.s.presence_penalty, 0.5f);
	ck_assert_float_eq(r.s.frequency_penalty, -1.5f);
	ck_assert_int_eq(r.s.n_logit_bias, 2);
	ck_assert_int_eq(r.s.bias_token[0], 50256);
	ck_assert_float_eq(r.s.bias_value[0], -100.0f);
	ck_assert_int_eq(r.s.bias_token[1], 7);
	ck_assert_float_eq(r.s.bias_value[1], 2.5f);
	ck_assert_int_eq(r.logprobs, 5);
	ck_assert(r.echo && r.stream && r.include_usage);
	ck_assert_str_eq(r.user, "u1");
	ck_assert_int_eq(r.s.top_k, 40);
	ck_assert_float_eq_tol(r.s.min_p, 0.05f, 1e-7);
	ck_assert(r.s.has_repetition_penalty);
	ck_assert(r.s.ignore_eos);
	ck_assert_int_eq(r.s.min_tokens, 4);
	ck_assert_int_eq(r.s.n_stop_token_ids, 2);
	ck_assert_int_eq(r.s.stop_token_ids[1], 32000);
	api_completion_req_free(&r);
}
END_TEST

START_TEST(test_completion_prompt_shapes)
{
	struct api_completion_req r;
	struct api_error e;
	ck_assert_int_eq(parse_c("{\"prompt\":[\"a\",\"bc\",\"\"]}", &r, &e), 0);
	ck_assert_int_eq(r.n_prompts, 3);
	ck_assert_str_eq(r.prompts[1].text, "bc");
	ck_assert_str_eq(r.prompts[2].text, "");
	ck_assert_ptr_null(r.model);
	api_completion_req_free(&r);

	ck_assert_int_eq(parse_c("{\"prompt\":[1,2,3]}", &r, &e), 0);
	ck_assert_int_eq(r.n_prompts, 1);
	ck_assert(r.prompts[0].is_tokens);
	ck_assert_uint_eq(r.prompts[0].n_tokens, 3);
	ck_assert_int_eq(r.prompts[0].tokens[2], 3);
	api_completion_req_free(&r);

	ck_assert_int_eq(parse_c("{\"prompt\":[[1,2],[3]]}", &r, &e), 0);
	ck_assert_int_eq(r.n_prompts, 2);
	ck_assert(r.prompts[1].is_tokens);
	ck_assert_uint_eq(r.prompts[0].n_tokens, 2);
	ck_assert_int_eq(r.prompts[1].tokens[0], 3);
	api_completion_req_free(&r);

	/* `null` is "not set" for optional fields */
	ck_assert_int_eq(parse_c("{\"prompt\":\"x\",\"stop\":null,\"max_tokens\":null,"
				 "\"logprobs\":null,\"stream_options\":null}",
				 &r, &e),
			 0);
	ck_assert(!r.has_max_tokens);
	ck_assert_int_eq(r.logprobs, -1);
	api_completion_req_free(&r);

	/* max_tokens 0 is allowed only with echo (prompt scoring) */
	ck_assert_int_eq(parse_c("{\"prompt\":\"x\",\"echo\":true,\"max_tokens\":0,\"logprobs\":0}",
				 &r, &e),
			 0);
	ck_assert_int_eq(r.max_tokens, 0);
	ck_assert_int_eq(r.logprobs, 0);
	api_completion_req_free(&r);
	expect_bad_c("{\"prompt\":\"x\",\"max_tokens\":0}", "max_tokens", "between 1 and");

	expect_bad_c("{}", "prompt", "required");
	expect_bad_c("{\"prompt\":[]}", "prompt", "non-empty");
	expect_bad_c("{\"prompt\":7}", "prompt", "must be a string");
	expect_bad_c("{\"prompt\":[\"a\",1]}", "prompt[1]", "must be a string");
	expect_bad_c("{\"prompt\":[1,\"a\"]}", "prompt[1]", "must be an integer");
	expect_bad_c("{\"prompt\":[[1],[]]}", "prompt[1]", "must not be empty");
	expect_bad_c("{\"prompt\":[[1],[2.5]]}", "prompt[1][0]", "integer");
	expect_bad_c("{\"prompt\":[-1]}", "prompt[0]", "between 0 and");
	expect_bad_c("{\"prompt\":[[1],2]}", "prompt[1]", "array of token ids");
}
END_TEST

START_TEST(test_completion_validation)
{
	expect_bad_c("{\"prompt\":\"x\",\"temperature\":\"hot\"}", "temperature", "must be a number");
	expect_bad_c("{\"prompt\":\"x\",\"temperature\":2.5}", "temperature", "[0, 2]");
	expect_bad_c("{\"prompt\":\"x\",\"temperature\":-0.1}", "temperature", "[0, 2]");
	expect_bad_c("{\"prompt\":\"x\",\"top_p\":0}", "top_p", "(0, 1]");
	expect_bad_c("{\"prompt\":\"x\",\"top_p\":1.01}", "top_p", "(0, 1]");
	expect_bad_c("{\"prompt\":\"x\",\"n\":0}", "n", "between 1 and 16");
	expect_bad_c("{\"prompt\":\"x\",\"n\":17}", "n", "between 1 and 16");
	expect_bad_c("{\"prompt\":\"x\",\"n\":1.5}", "n", "integer");
	expect_bad_c("{\"prompt\":\"x\",\"max_tokens\":\"10\"}", "max_tokens", "integer");
	expect_bad_c("{\"prompt\":\"x\",\"max_tokens\":1e9}", "max_tokens", "between 1 and 131072");
	expect_bad_c("{\"prompt\":\"x\",\"logprobs\":21}", "logprobs", "between 0 and 20");
	expect_bad_c("{\"prompt\":\"x\",\"logprobs\":true}", "logprobs", "integer");
	expect_bad_c("{\"prompt\":\"x\",\"stop\":5}", "stop", "string or an array");
	expect_bad_c("{\"prompt\":\"x\",\"stop\":[\"a\",3]}", "stop[1]", "must be a string");
	expect_bad_c("{\"prompt\":\"x\",\"stop\":\"\"}", "stop", "empty");
	expect_bad_c("{\"prompt\":\"x\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\","
		     "\"9\",\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}",
		     "stop", "more than 16");
	expect_bad_c("{\"prompt\":\"x\",\"logit_bias\":[1]}", "logit_bias", "object");
	expect_bad_c("{\"prompt\":\"x\",\"logit_bias\":{\"abc\":1}}", "logit_bias.abc", "token ids");
	expect_bad_c("{\"prompt\":\"x\",\"logit_bias\":{\"-1\":1}}", "logit_bias.-1", "token ids");
	expect_bad_c("{\"prompt\":\"x\",\"logit_bias\":{\"5\":101}}", "logit_bias.5", "[-100, 100]");
	expect_bad_c("{\"prompt\":\"x\",\"logit_bias\":{\"5\":\"a\"}}", "logit_bias.5", "number");
	expect_bad_c("{\"prompt\":\"x\",\"logit_bias\":{\"5\":1,\"05\":2}}", "logit_bias.05", "twice");
	expect_bad_c("{\"prompt\":\"x\",\"presence_penalty\":3}", "presence_penalty", "[-2, 2]");
	expect_bad_c("{\"prompt\":\"x\",\"frequency_penalty\":-2.5}", "frequency_penalty", "[-2, 2]");
	expect_bad_c("{\"prompt\":\"x\",\"seed\":1.5}", "seed", "integer");
	expect_bad_c("{\"prompt\":\"x\",\"seed\":1e30}", "seed", "between");
	expect_bad_c("{\"prompt\":\"x\",\"seed\":9223372036854775808}", "seed", "between");
	expect_bad_c("{\"prompt\":\"x\",\"seed\":\"7\"}", "seed", "integer");
	/* seeds past 2^53 are read exactly from the text (a double would merge
	 * neighbours), INT64_MIN / INT64_MAX included */
	static const struct {
		const char *body;
		int64_t want;
	} exact[] = {
		{ "{\"prompt\":\"x\",\"seed\":9007199254740993}", 9007199254740993LL },
		{ "{\"seed\" : 9223372036854775807 ,\"prompt\":\"x\"}", INT64_MAX },
		{ "{\"prompt\":\"x\",\"seed\":-9223372036854775808}", INT64_MIN },
		{ "{\"prompt\":\"seed\",\"seed\":1152921504606846977}", 1152921504606846977LL },
	};
	for (size_t i = 0; i < sizeof exact / sizeof *exact; i++) {
		struct api_completion_req r;
		struct api_error e;
		ck_assert_msg(parse_c(exact[i].body, &r, &e) == 0, "%s: %s", exact[i].body, e.message);
		ck_assert(r.s.has_seed);
		ck_assert_msg(r.s.seed == exact[i].want, "%s", exact[i].body);
		api_completion_req_free(&r);
	}
	expect_bad_c("{\"prompt\":\"x\",\"echo\":1}", "echo", "boolean");
	expect_bad_c("{\"prompt\":\"x\",\"stream\":\"yes\"}", "stream", "boolean");
	expect_bad_c("{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}",
		     "stream_options", "only allowed when 'stream' is true");
	expect_bad_c("{\"prompt\":\"x\",\"stream\":true,\"stream_options\":{\"include_usage\":1}}",
		     "stream_options.include_usage", "boolean");
	expect_bad_c("{\"prompt\":\"x\",\"stream\":true,\"stream_options\":[]}", "stream_options",
		     "object");
	expect_bad_c("{\"prompt\":\"x\",\"top_k\":-2}", "top_k", "between -1 and");
	expect_bad_c("{\"prompt\":\"x\",\"min_p\":1.5}", "min_p", "[0, 1]");
	expect_bad_c("{\"prompt\":\"x\",\"repetition_penalty\":0}", "repetition_penalty", "(0,");
	expect_bad_c("{\"prompt\":\"x\",\"ignore_eos\":\"no\"}", "ignore_eos", "boolean");
	expect_bad_c("{\"prompt\":\"x\",\"min_tokens\":-1}", "min_tokens", "between 0");
	expect_bad_c("{\"prompt\":\"x\",\"min_tokens\":9,\"max_tokens\":8}", "min_tokens",
		     "must not exceed");
	expect_bad_c("{\"prompt\":\"x\",\"user\":5}", "user", "string");
	expect_bad_c("{\"prompt\":\"x\",\"model\":[\"m\"]}", "model", "string");
	expect_bad_c("{\"prompt\":\"x\",\"stop_token_ids\":[\"a\"]}", "stop_token_ids[0]", "integer");
	expect_bad_c("{\"prompt\":\"x\",\"suffix\":\"tail\"}", "suffix", "not supported");
	expect_bad_c("{\"prompt\":\"x\",\"temperature\":1e400}", "temperature", "finite");
	expect_bad_c("{\"prompt\":\"\\udc00\"}", "", "invalid JSON");
}
END_TEST

START_TEST(test_limits_and_vocab)
{
	struct api_limits lim;
	api_limits_default(&lim);
	lim.n_vocab = 100;
	lim.max_prompts = 2;
	lim.max_prompt_tokens = 3;
	struct api_completion_req r;
	struct api_error e;
	const char *ok = "{\"prompt\":[99],\"logit_bias\":{\"99\":1}}";
	ck_assert_int_eq(api_parse_completion(ok, strlen(ok), &lim, &r, &e), 0);
	api_completion_req_free(&r);
	const char *bad[][2] = {
		{"{\"prompt\":[100]}", "prompt[0]"},
		{"{\"prompt\":\"x\",\"logit_bias\":{\"100\":1}}", "logit_bias.100"},
		{"{\"prompt\":[1,2,3,4]}", "prompt"},
		{"{\"prompt\":[\"a\",\"b\",\"c\"]}", "prompt"},
		{"{\"prompt\":\"x\",\"stop_token_ids\":[100]}", "stop_token_ids[0]"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		memset(&e, 0, sizeof e);
		int rc = api_parse_completion(bad[i][0], strlen(bad[i][0]), &lim, &r, &e);
		ck_assert_msg(rc < 0, "accepted %s", bad[i][0]);
		ck_assert_int_eq(e.status, 400);
		ck_assert_str_eq(e.param, bad[i][1]);
	}
}
END_TEST

static void deep_body(char *out, int n_arrays)
{
	out += sprintf(out, "{\"prompt\":\"x\",\"extra\":");
	for (int i = 0; i < n_arrays; i++)
		*out++ = '[';
	for (int i = 0; i < n_arrays; i++)
		*out++ = ']';
	*out++ = '}';
	*out = 0;
}

START_TEST(test_json_hygiene)
{
	/* invalid JSON */
	expect_bad_c("{\"prompt\":", "", "invalid JSON");
	expect_bad_c("", "", "empty");
	expect_bad_c("[1,2]", "", "must be a JSON object");
	expect_bad_c("{\"prompt\":\"x\"} trailing", "", "invalid JSON");
	/* invalid UTF-8: a lone continuation byte, an overlong '/', a surrogate */
	expect_bad_c("{\"prompt\":\"a\x80\"}", "", "UTF-8");
	expect_bad_c("{\"prompt\":\"\xC0\xAF\"}", "", "UTF-8");
	expect_bad_c("{\"prompt\":\"\xED\xA0\x80\"}", "", "UTF-8");
	expect_bad_c("{\"prompt\":\"\xF4\x90\x80\x80\"}", "", "UTF-8");
	expect_bad_c("{\"prompt\":\"\xE2\x82\"}", "", "UTF-8");
	/* escaped NUL and unpaired surrogate escapes */
	expect_bad_c("{\"prompt\":\"a\\u0000b\"}", "", "\\u0000");
	expect_bad_c("{\"prompt\":\"\\ud800\"}", "", "invalid JSON");
	/* raw control characters in a string (RFC 8259: escaped only); between
	 * tokens they are whitespace or invalid, as cJSON decides */
	expect_bad_c("{\"prompt\":\"a\x01b\"}", "", "control character");
	expect_bad_c("{\"prompt\":\"a\nb\"}", "", "control character");
	expect_bad_c("{\"prompt\":\"a\tb\"}", "", "control character");
	/* an escaped backslash before u0000 is just text */
	struct api_completion_req r;
	struct api_error e;
	ck_assert_int_eq(parse_c("{\"prompt\":\"a\\\\u0000\"}", &r, &e), 0);
	ck_assert_str_eq(r.prompts[0].text, "a\\u0000");
	api_completion_req_free(&r);
	/* valid multi-byte text and a surrogate pair escape */
	ck_assert_int_eq(parse_c("{\"prompt\":\"h\xC3\xA9llo \xF0\x9F\x98\x80 \\ud83d\\ude00\"}",
				 &r, &e),
			 0);
	ck_assert_str_eq(r.prompts[0].text, "h\xC3\xA9llo \xF0\x9F\x98\x80 \xF0\x9F\x98\x80");
	api_completion_req_free(&r);
	/* duplicate keys are rejected, deterministically */
	expect_bad_c("{\"prompt\":\"x\",\"temperature\":1,\"temperature\":0}", "temperature",
		     "duplicate");
	expect_bad_c("{\"prompt\":\"x\",\"prompt\":\"y\"}", "prompt", "duplicate");
	/* nesting depth: the root object plus 63 arrays is 64 levels; one more fails */
	char deep[300];
	deep_body(deep, 63);
	ck_assert_int_eq(parse_c(deep, &r, &e), 0);
	api_completion_req_free(&r);
	deep_body(deep, 64);
	expect_bad_c(deep, "", "nested deeper than 64");
	/* body need not be NUL-terminated: only len bytes are read */
	const char buf[] = "{\"prompt\":\"abc\"}GARBAGE";
	ck_assert_int_eq(api_parse_completion(buf, 16, NULL, &r, &e), 0);
	ck_assert_str_eq(r.prompts[0].text, "abc");
	api_completion_req_free(&r);
	/* a raw NUL byte inside the body */
	const char nul[] = "{\"prompt\":\"a\0b\"}";
	memset(&e, 0, sizeof e);
	ck_assert_int_lt(api_parse_completion(nul, sizeof nul - 1, NULL, &r, &e), 0);
	ck_assert_int_eq(e.status, 400);
}
END_TEST

START_TEST(test_utf8_validator)
{
	ck_assert(utf8_valid("", 0));
	ck_assert(utf8_valid("abc", 3));
	ck_assert(utf8_valid("\xC2\x80", 2));
	ck_assert(utf8_valid("\xEF\xBF\xBF", 3));
	ck_assert(utf8_valid("\xF4\x8F\xBF\xBF", 4));
	ck_assert(!utf8_valid("\xC1\xBF", 2));
	ck_assert(!utf8_valid("\xE0\x9F\xBF", 3));
	ck_assert(!utf8_valid("\xED\xBF\xBF", 3));
	ck_assert(!utf8_valid("\xF5\x80\x80\x80", 4));
	ck_assert(!utf8_valid("\xF0\x9F\x98", 3));
	ck_assert(!utf8_valid("\xFF", 1));
}
END_TEST

START_TEST(test_chat_parse)
{
	const char *body =
		"{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
		"{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi\"},"
		"{\"type\":\"text\",\"text\":\" there\"}],\"name\":\"bob\"},"
		"{\"role\":\"assistant\",\"content\":null},"
		"{\"role\":\"developer\",\"content\":\"d\"}],"
		"\"max_tokens\":10,\"max_completion_tokens\":20,\"logprobs\":true,"
		"\"top_logprobs\":3,\"stream\":true,\"stream_options\":{\"include_usage\":false},"
		"\"temperature\":0}";
	struct api_chat_req r;
	struct api_error e;
	ck_assert_int_eq(parse_chat(body, &r, &e), 0);
	ck_assert_int_eq(r.n_msgs, 4);
	ck_assert_int_eq(r.msgs[0].role, API_ROLE_SYSTEM);
	ck_assert(!r.msgs[0].content_is_array);
	ck_assert_int_eq(r.msgs[0].n_parts, 1);
	ck_assert_str_eq(r.msgs[0].parts[0], "Be brief.");
	ck_assert_int_eq(r.msgs[1].role, API_ROLE_USER);
	ck_assert(r.msgs[1].content_is_array);
	ck_assert_int_eq(r.msgs[1].n_parts, 2);
	ck_assert_str_eq(r.msgs[1].parts[1], " there");
	ck_assert_str_eq(r.msgs[1].name, "bob");
	ck_assert_int_eq(r.msgs[2].role, API_ROLE_ASSISTANT);
	ck_assert_int_eq(r.msgs[2].n_parts, 0);
	ck_assert_int_eq(r.msgs[3].role, API_ROLE_SYSTEM);
	ck_assert(r.has_max_tokens);
	ck_assert_int_eq(r.max_tokens, 20); /* max_completion_tokens wins */
	ck_assert(r.logprobs);
	ck_assert_int_eq(r.top_logprobs, 3);
	ck_assert(r.stream && !r.include_usage);
	ck_assert(r.s.has_temperature);
	ck_assert_float_eq(r.s.temperature, 0.0f);
	api_chat_req_free(&r);

	expect_bad_chat("{}", "messages", "required");
	expect_bad_chat("{\"messages\":[]}", "messages", "non-empty");
	expect_bad_chat("{\"messages\":{}}", "messages", "non-empty array");
	expect_bad_chat("{\"messages\":[1]}", "messages[0]", "object");
	expect_bad_chat("{\"messages\":[{\"content\":\"x\"}]}", "messages[0].role", "required");
	expect_bad_chat("{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}",
			"messages[0].role", "must be one of");
	expect_bad_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"tool\","
			"\"content\":\"x\"}]}",
			"messages[1].role", "not supported");
	expect_bad_chat("{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content", "required");
	expect_bad_chat("{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages[0].content",
			"string or an array");
	expect_bad_chat("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
			"\"image_url\":{}}]}]}",
			"messages[0].content[0].type", "not supported");
	expect_bad_chat("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
			"messages[0].content[0].text", "required");
	expect_bad_chat("{\"messages\":[{\"role\":\"user\",\"content\":[\"x\"]}]}",
			"messages[0].content[0]", "object");
	expect_bad_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"role\":\"user\"}]}",
			"messages[0].role", "duplicate");
	expect_bad_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}",
			"top_logprobs", "requires 'logprobs'");
	expect_bad_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,"
			"\"top_logprobs\":21}",
			"top_logprobs", "between 0 and 20");
	expect_bad_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
			"\"max_completion_tokens\":0}",
			"max_completion_tokens", "between 1");
	expect_bad_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{}]}",
			"tools", "not supported");
	expect_bad_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":3}",
			"temperature", "[0, 2]");
	expect_bad_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
			"\"response_format\":{\"type\":\"json_object\"}}",
			"response_format.type", "not supported");
	ck_assert_int_eq(parse_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
				    "\"response_format\":{\"type\":\"text\"},\"tools\":[],"
				    "\"suffix\":1}",
				    &r, &e),
			 0);
	api_chat_req_free(&r);
	/* the server's max_n above the compile-time ceiling is clamped */
	struct api_limits lim;
	api_limits_default(&lim);
	lim.max_n = 1000;
	const char *big_n = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":129}";
	ck_assert_int_lt(api_parse_chat(big_n, strlen(big_n), &lim, &r, &e), 0);
	ck_assert_str_eq(e.param, "n");
}
END_TEST

START_TEST(test_tokenize_parse)
{
	struct api_tokenize_req t;
	struct api_detokenize_req d;
	struct api_error e;
	const char *b1 = "{\"model\":\"m\",\"prompt\":\"hi\"}";
	ck_assert_int_eq(api_parse_tokenize(b1, strlen(b1), NULL, &t, &e), 0);
	ck_assert(!t.is_chat && t.add_special_tokens);
	ck_assert_str_eq(t.prompt, "hi");
	api_tokenize_req_free(&t);
	const char *b2 = "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],"
			 "\"add_generation_prompt\":false}";
	ck_assert_int_eq(api_parse_tokenize(b2, strlen(b2), NULL, &t, &e), 0);
	/* messages: special tokens on by default, as chat completions add them */
	ck_assert(t.is_chat && t.add_special_tokens && !t.add_generation_prompt);
	ck_assert_int_eq(t.n_msgs, 1);
	api_tokenize_req_free(&t);
	const char *b3 = "{\"prompt\":\"a\",\"messages\":[]}";
	ck_assert_int_lt(api_parse_tokenize(b3, strlen(b3), NULL, &t, &e), 0);
	ck_assert_int_eq(e.status, 400);
	const char *b4 = "{\"tokens\":[1,2,3]}";
	ck_assert_int_eq(api_parse_detokenize(b4, strlen(b4), NULL, &d, &e), 0);
	ck_assert_uint_eq(d.n_tokens, 3);
	ck_assert_int_eq(d.tokens[0], 1);
	api_detokenize_req_free(&d);
	const char *b5 = "{\"tokens\":[1,\"2\"]}";
	ck_assert_int_lt(api_parse_detokenize(b5, strlen(b5), NULL, &d, &e), 0);
	ck_assert_str_eq(e.param, "tokens[1]");
}
END_TEST

START_TEST(test_resolve_max_tokens)
{
	struct api_limits lim;
	api_limits_default(&lim);
	struct api_error e;
	int32_t out = -1;
	ck_assert_int_eq(api_resolve_max_tokens(true, 100, 900, 1024, &lim, false, &out, &e), 0);
	ck_assert_int_eq(out, 100);
	ck_assert_int_eq(api_resolve_max_tokens(false, 0, 1000, 1024, &lim, false, &out, &e), 0);
	ck_assert_int_eq(out, 24);
	lim.max_tokens = 10;
	ck_assert_int_eq(api_resolve_max_tokens(false, 0, 1000, 1024, &lim, false, &out, &e), 0);
	ck_assert_int_eq(out, 10);
	int rc = api_resolve_max_tokens(true, 200, 900, 1024, &lim, true, &out, &e);
	ck_assert_int_lt(rc, 0);
	ck_assert_int_eq(api_status_for_err(rc), 400);
	ck_assert_int_eq(e.status, 400);
	ck_assert_str_eq(e.param, "max_tokens");
	ck_assert_msg(strstr(e.message, "maximum context length is 1024 tokens") &&
			      strstr(e.message, "you requested 1100 tokens (900 in the messages, 200 in the completion)"),
		      "%s", e.message);
	rc = api_resolve_max_tokens(false, 0, 1024, 1024, &lim, false, &out, &e);
	ck_assert_int_lt(rc, 0);
	ck_assert_str_eq(e.param, "prompt");
	ck_assert_msg(strstr(e.message, "your prompt is 1024 tokens"), "%s", e.message);
	rc = api_resolve_max_tokens(true, 5, 0, 1024, &lim, true, &out, &e);
	ck_assert_int_eq(api_status_for_err(rc), 400);
	ck_assert_str_eq(e.param, "messages");
	ck_assert_ptr_nonnull(strstr(e.message, "empty"));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("api_parse");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_completion_minimal);
	tcase_add_test(tc, test_completion_all_fields);
	tcase_add_test(tc, test_completion_prompt_shapes);
	tcase_add_test(tc, test_completion_validation);
	tcase_add_test(tc, test_limits_and_vocab);
	tcase_add_test(tc, test_json_hygiene);
	tcase_add_test(tc, test_utf8_validator);
	tcase_add_test(tc, test_chat_parse);
	tcase_add_test(tc, test_tokenize_parse);
	tcase_add_test(tc, test_resolve_max_tokens);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
