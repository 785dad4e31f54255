/* tests/api/test_api_render.c — api/ rendering: error bodies and the
 * ERR_* -> status table, completion / chat responses, logprobs shapes, SSE
 * streams (role first, finish_reason once, usage chunk, [DONE], error
 * chunk), /v1/models, /tokenize, /detokenize, JSON string escaping. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/api_internal.h"
#include "common/err.h"

static const struct api_meta META = {.id = "cmpl-00000000000000ff", .model = "tiny",
				     .created = 1700000000};

/* Every rendered body must be valid JSON. */
static cJSON *parse_ok(const char *s)
{
	cJSON *j = cJSON_Parse(s);
	ck_assert_msg(j != NULL, "not JSON: %s", s);
	return j;
}

START_TEST(test_status_table)
{
	ck_assert_int_eq(api_status_for_err(0), 200);
	ck_assert_int_eq(api_status_for_err(ERR_INVAL), 400);
	ck_assert_int_eq(api_status_for_err(ERR_FORMAT), 400);
	ck_assert_int_eq(api_status_for_err(ERR_RANGE), 400);
	ck_assert_int_eq(api_status_for_err(ERR_UNSUPPORTED), 400);
	ck_assert_int_eq(api_status_for_err(ERR_OVERFLOW), 400);
	ck_assert_int_eq(api_status_for_err(ERR_NOTFOUND), 404);
	ck_assert_int_eq(api_status_for_err(ERR_TOO_LARGE), 413);
	ck_assert_int_eq(api_status_for_err(ERR_FULL), 429);
	ck_assert_int_eq(api_status_for_err(ERR_STATE), 503);
	ck_assert_int_eq(api_status_for_err(ERR_NOMEM), 503);
	ck_assert_int_eq(api_status_for_err(ERR_INTERNAL), 500);
	ck_assert_int_eq(api_status_for_err(ERR_DEVICE), 500);
	ck_assert_int_eq(api_status_for_err(-999), 500);
}
END_TEST

START_TEST(test_error_bodies)
{
	struct api_error e;
	struct buf b;
	buf_init(&b);
	int rc = api_error_from_err(&e, ERR_RANGE, "temperature", "'%s' must be in [0, 2]",
				    "temperature");
	ck_assert_int_eq(rc, ERR_RANGE);
	ck_assert_int_eq(api_render_error(&b, &e), 0);
	ck_assert_str_eq(b.data, "{\"error\":{\"message\":\"'temperature' must be in [0, 2]\","
				 "\"type\":\"invalid_request_error\",\"param\":\"temperature\","
				 "\"code\":null}}");
	buf_clear(&b);

	api_error_unauthorized(&e);
	ck_assert_int_eq(e.status, 401);
	ck_assert_int_eq(api_render_error(&b, &e), 0);
	cJSON *j = parse_ok(b.data);
	cJSON *err = cJSON_GetObjectItem(j, "error");
	ck_assert_str_eq(cJSON_GetObjectItem(err, "type")->valuestring, "authentication_error");
	ck_assert_str_eq(cJSON_GetObjectItem(err, "code")->valuestring, "invalid_api_key");
	ck_assert(cJSON_IsNull(cJSON_GetObjectItem(err, "param")));
	cJSON_Delete(j);
	buf_clear(&b);

	api_error_not_found(&e, "/v2/x");
	ck_assert_int_eq(e.status, 404);
	ck_assert_ptr_nonnull(strstr(e.message, "/v2/x"));
	api_error_model_not_found(&e, "gpt-9");
	ck_assert_int_eq(e.status, 404);
	ck_assert_str_eq(e.param, "model");
	ck_assert_str_eq(e.code, "model_not_found");
	api_error_method_not_allowed(&e, "DELETE");
	ck_assert_int_eq(e.status, 405);
	api_error_too_large(&e, 1048576);
	ck_assert_int_eq(e.status, 413);
	ck_assert_ptr_nonnull(strstr(e.message, "1048576"));
	api_error_queue_full(&e, 2);
	ck_assert_int_eq(e.status, 429);
	ck_assert_int_eq(e.retry_after_s, 2);
	api_error_unavailable(&e, "draining", 5);
	ck_assert_int_eq(e.status, 503);
	ck_assert_int_eq(e.retry_after_s, 5);
	ck_assert_int_eq(api_render_error(&b, &e), 0);
	j = parse_ok(b.data);
	cJSON_Delete(j);

	/* a message with quotes, control characters and invalid UTF-8 stays JSON */
	api_error_set(&e, ERR_INVAL, 400, NULL, "p\"q", NULL, "bad \"x\"\n\t\x01 \xff end");
	buf_clear(&b);
	ck_assert_int_eq(api_render_error(&b, &e), 0);
	j = parse_ok(b.data);
	err = cJSON_GetObjectItem(j, "error");
	ck_assert_str_eq(cJSON_GetObjectItem(err, "message")->valuestring,
			 "bad \"x\"\n\t\x01 \xEF\xBF\xBD end");
	ck_assert_str_eq(cJSON_GetObjectItem(err, "param")->valuestring, "p\"q");
	cJSON_Delete(j);
	buf_deinit(&b);
}
END_TEST

/* The policies server/ applies without deciding a status itself. */
START_TEST(test_error_policies)
{
	struct api_error e;
	struct buf b;
	buf_init(&b);
	/* the transport's fallback: the body http.c used to hard-code */
	api_error_internal(&e);
	ck_assert_int_eq(e.status, 500);
	ck_assert_int_eq(api_render_error(&b, &e), 0);
	ck_assert_str_eq(b.data, "{\"error\":{\"message\":\"internal error\",\"type\":"
				 "\"server_error\",\"param\":null,\"code\":null}}");
	api_error_unsupported_media_type(&e, "text/plain");
	ck_assert_int_eq(e.status, 415);
	ck_assert_str_eq(e.type, "invalid_request_error");
	ck_assert_ptr_nonnull(strstr(e.message, "'text/plain'"));
	api_error_echo_logprobs(&e);
	ck_assert_int_eq(e.status, 400);
	ck_assert_str_eq(e.param, "echo");
	api_error_stream_choices(&e, 200);
	ck_assert_int_eq(e.status, 400);
	ck_assert_str_eq(e.param, "n");
	ck_assert_ptr_nonnull(strstr(e.message, "= 200)"));

	/* a refused submission: the queue is 429, a stopping batcher 503, the
	 * rest the request's fault */
	api_error_rejected(&e, ERR_FULL, "ignored");
	ck_assert_int_eq(e.status, 429);
	ck_assert_int_eq(e.retry_after_s, 1);
	api_error_rejected(&e, ERR_STATE, "stopping");
	ck_assert_int_eq(e.status, 503);
	ck_assert_str_eq(e.message, "stopping");
	api_error_rejected(&e, ERR_RANGE, "top_p must be in (0, 1]");
	ck_assert_int_eq(e.status, 400);
	ck_assert_str_eq(e.message, "top_p must be in (0, 1]");
	api_error_rejected(&e, ERR_NOMEM, "");
	ck_assert_int_eq(e.status, 400);
	ck_assert_str_eq(e.type, "invalid_request_error");
	ck_assert_str_eq(e.message, err_str(ERR_NOMEM));
	api_error_rejected(&e, ERR_TOO_LARGE, NULL);
	ck_assert_int_eq(e.status, 413);

	/* a failed generation is always the server's */
	api_error_generation_failed(&e, ERR_INVAL, "bad batch");
	ck_assert_int_eq(e.status, 500);
	ck_assert_str_eq(e.type, "server_error");
	ck_assert_str_eq(e.message, "generation failed: bad batch");
	api_error_generation_failed(&e, ERR_NOMEM, NULL);
	ck_assert_int_eq(e.status, 503);
	ck_assert_str_eq(e.type, "service_unavailable_error");
	buf_deinit(&b);
}
END_TEST

START_TEST(test_json_string)
{
	struct buf b;
	buf_init(&b);
	ck_assert_int_eq(api_json_string(&b, "a\"b\\c\x1f\x7f", 7), 0);
	ck_assert_str_eq(b.data, "\"a\\\"b\\\\c\\u001f\x7f\"");
	buf_clear(&b);
	/* partial UTF-8 (first two bytes of a 3-byte sequence) -> two U+FFFD */
	ck_assert_int_eq(api_json_string(&b, "x\xE2\x82", 3), 0);
	ck_assert_str_eq(b.data, "\"x\xEF\xBF\xBD\xEF\xBF\xBD\"");
	buf_clear(&b);
	ck_assert_int_eq(api_json_string(&b, "\xE2\x82\xAC", 3), 0);
	ck_assert_str_eq(b.data, "\"\xE2\x82\xAC\"");
	buf_clear(&b);
	ck_assert_int_eq(api__json_float(&b, 0.1f), 0);
	ck_assert_str_eq(b.data, "0.1");
	buf_clear(&b);
	ck_assert_int_eq(api__json_float(&b, -1.5f), 0);
	ck_assert_str_eq(b.data, "-1.5");
	buf_clear(&b);
	ck_assert_int_eq(api__json_double(&b, 0.1), 0);
	ck_assert_str_eq(b.data, "0.1");
	buf_clear(&b);
	ck_assert_int_eq(api__json_double(&b, NAN), 0);
	ck_assert_str_eq(b.data, "null");
	buf_deinit(&b);
}
END_TEST

START_TEST(test_completion_body)
{
	struct buf b;
	buf_init(&b);
	char id[48];
	api_format_id(id, sizeof id, "cmpl-", 0x0123456789abcdefull, 255);
	ck_assert_str_eq(id, "cmpl-0123456789abcdef00000000000000ff");
	struct api_choice c[2] = {
		{.index = 0, .text = "Hello", .text_len = 5, .finish_reason = "length"},
		{.index = 1, .text = "a\nb", .text_len = 3, .finish_reason = "stop"},
	};
	struct api_usage u = {.prompt_tokens = 3, .completion_tokens = 4};
	ck_assert_int_eq(api_render_completion(&b, &META, c, 2, &u), 0);
	ck_assert_str_eq(b.data,
			 "{\"id\":\"cmpl-00000000000000ff\",\"object\":\"text_completion\","
			 "\"created\":1700000000,\"model\":\"tiny\",\"choices\":["
			 "{\"index\":0,\"text\":\"Hello\",\"logprobs\":null,\"finish_reason\":\"length\"},"
			 "{\"index\":1,\"text\":\"a\\nb\",\"logprobs\":null,\"finish_reason\":\"stop\"}],"
			 "\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7}}");
	buf_clear(&b);
	struct api_meta cm = {.id = "chatcmpl-1", .model = "tiny", .created = 5};
	ck_assert_int_eq(api_render_chat_completion(&b, &cm, c, 1, &u), 0);
	ck_assert_str_eq(b.data,
			 "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":5,"
			 "\"model\":\"tiny\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
			 "\"assistant\",\"content\":\"Hello\"},\"logprobs\":null,"
			 "\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":3,"
			 "\"completion_tokens\":4,\"total_tokens\":7}}");
	buf_deinit(&b);
}
END_TEST

START_TEST(test_logprobs_shapes)
{
	struct api_top_logprob top0[] = {{"He", 2, -0.25f}, {"She", 3, -2.0f}, {"He", 2, -3.0f}};
	struct api_top_logprob top1[] = {{"llo", 3, -INFINITY}};
	struct api_token_logprob toks[] = {
		{.token = "He", .token_len = 2, .logprob = -0.25f, .top = top0, .n_top = 3,
		 .text_offset = 0},
		{.token = "llo", .token_len = 3, .logprob = NAN, .top = NULL, .n_top = 0,
		 .text_offset = 2},
		{.token = "\xE2\x82", .token_len = 2, .logprob = -1.0f, .top = top1, .n_top = 1,
		 .text_offset = 5},
	};
	struct api_logprobs lp = {toks, 3};
	struct buf b;
	buf_init(&b);
	ck_assert_int_eq(api_render_completion_logprobs(&b, &lp), 0);
	ck_assert_str_eq(b.data,
			 "{\"text_offset\":[0,2,5],\"token_logprobs\":[-0.25,null,-1],"
			 "\"tokens\":[\"He\",\"llo\",\"\xEF\xBF\xBD\xEF\xBF\xBD\"],"
			 "\"top_logprobs\":[{\"He\":-0.25,\"She\":-2},null,"
			 /* the sampled token joins its top list when it is not in it */
			 "{\"llo\":-9999.0,\"\xEF\xBF\xBD\xEF\xBF\xBD\":-1}]}");
	buf_clear(&b);
	struct api_logprobs lp2 = {toks, 1};
	ck_assert_int_eq(api_render_chat_logprobs(&b, &lp2), 0);
	ck_assert_str_eq(b.data,
			 "{\"content\":[{\"token\":\"He\",\"logprob\":-0.25,\"bytes\":[72,101],"
			 "\"top_logprobs\":[{\"token\":\"He\",\"logprob\":-0.25,\"bytes\":[72,101]},"
			 "{\"token\":\"She\",\"logprob\":-2,\"bytes\":[83,104,101]},"
			 "{\"token\":\"He\",\"logprob\":-3,\"bytes\":[72,101]}]}]}");
	buf_clear(&b);
	/* chat bytes keep the raw bytes of a partial character */
	struct api_logprobs lp3 = {toks + 2, 1};
	ck_assert_int_eq(api_render_chat_logprobs(&b, &lp3), 0);
	ck_assert_ptr_nonnull(strstr(b.data, "\"bytes\":[226,130]"));
	cJSON_Delete(parse_ok(b.data));
	buf_deinit(&b);
}
END_TEST

/* Split an SSE buffer into its events; each must be "data: ...\n\n". */
static int sse_events(const char *s, char ev[][2048], int max)
{
	int n = 0;
	while (*s) {
		ck_assert_msg(!strncmp(s, "data: ", 6), "event does not start with data: %s", s);
		const char *end = strstr(s, "\n\n");
		ck_assert_ptr_nonnull(end);
		ck_assert_int_lt(n, max);
		size_t len = (size_t)(end - s - 6);
		ck_assert_uint_lt(len, 2048);
		memcpy(ev[n], s + 6, len);
		ev[n][len] = 0;
		n++;
		s = end + 2;
	}
	return n;
}

START_TEST(test_stream_chat)
{
	struct api_meta m = {.id = "chatcmpl-a", .model = "tiny", .created = 7};
	struct api_stream s;
	struct buf b;
	buf_init(&b);
	ck_assert_int_eq(api_stream_init(&s, API_STREAM_CHAT, &m, 2, true), 0);
	ck_assert_int_eq(api_stream_delta(&s, &b, 0, "Hel", 3, NULL), 0);
	ck_assert_int_eq(api_stream_delta(&s, &b, 0, "lo", 2, NULL), 0);
	ck_assert_int_eq(api_stream_delta(&s, &b, 1, "Yo", 2, NULL), 0);
	ck_assert_int_eq(api_stream_finish(&s, &b, 0, "", 0, NULL, "stop"), 0);
	/* finish_reason exactly once; no text after it */
	ck_assert_int_eq(api_stream_finish(&s, &b, 0, "", 0, NULL, "stop"), ERR_STATE);
	ck_assert_int_eq(api_stream_delta(&s, &b, 0, "x", 1, NULL), ERR_STATE);
	ck_assert_int_eq(api_stream_delta(&s, &b, 2, "x", 1, NULL), ERR_STATE);
	/* end before every choice finished */
	struct api_usage u = {10, 4};
	ck_assert_int_eq(api_stream_end(&s, &b, &u), ERR_STATE);
	ck_assert_int_eq(api_stream_finish(&s, &b, 1, "!", 1, NULL, "length"), 0);
	ck_assert_int_eq(api_stream_end(&s, &b, &u), 0);
	ck_assert_int_eq(api_stream_end(&s, &b, &u), ERR_STATE);

	static char ev[16][2048];
	int n = sse_events(b.data, ev, 16);
	ck_assert_int_eq(n, 7);
	ck_assert_str_eq(ev[0], "{\"id\":\"chatcmpl-a\",\"object\":\"chat.completion.chunk\","
				"\"created\":7,\"model\":\"tiny\",\"choices\":[{\"index\":0,"
				"\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"},"
				"\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}");
	ck_assert_str_eq(ev[1], "{\"id\":\"chatcmpl-a\",\"object\":\"chat.completion.chunk\","
				"\"created\":7,\"model\":\"tiny\",\"choices\":[{\"index\":0,"
				"\"delta\":{\"content\":\"lo\"},\"logprobs\":null,"
				"\"finish_reason\":null}],\"usage\":null}");
	ck_assert_ptr_nonnull(strstr(ev[2], "\"index\":1,\"delta\":{\"role\":\"assistant\",\"content\":\"Yo\"}"));
	ck_assert_ptr_nonnull(strstr(ev[3], "\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\""));
	ck_assert_ptr_nonnull(strstr(ev[4], "\"delta\":{\"content\":\"!\"},\"logprobs\":null,\"finish_reason\":\"length\""));
	ck_assert_str_eq(ev[5], "{\"id\":\"chatcmpl-a\",\"object\":\"chat.completion.chunk\","
				"\"created\":7,\"model\":\"tiny\",\"choices\":[],\"usage\":"
				"{\"prompt_tokens\":10,\"completion_tokens\":4,\"total_tokens\":14}}");
	ck_assert_str_eq(ev[6], "[DONE]");
	for (int i = 0; i < 6; i++)
		cJSON_Delete(parse_ok(ev[i]));
	buf_deinit(&b);
}
END_TEST

START_TEST(test_stream_completion_and_error)
{
	struct api_stream s;
	struct buf b;
	buf_init(&b);
	ck_assert_int_eq(api_stream_init(&s, API_STREAM_COMPLETION, &META, 1, false), 0);
	ck_assert_int_eq(api_stream_delta(&s, &b, 0, "A", 1, NULL), 0);
	ck_assert_str_eq(b.data, "data: {\"id\":\"cmpl-00000000000000ff\",\"object\":"
				 "\"text_completion\",\"created\":1700000000,\"model\":\"tiny\","
				 "\"choices\":[{\"index\":0,\"text\":\"A\",\"logprobs\":null,"
				 "\"finish_reason\":null}]}\n\n");
	buf_clear(&b);
	/* an error after the stream started: error event, then [DONE] */
	struct api_error e;
	api_error_from_err(&e, ERR_DEVICE, NULL, "engine failed");
	ck_assert_int_eq(api_stream_error(&s, &b, &e), 0);
	static char ev[4][2048];
	ck_assert_int_eq(sse_events(b.data, ev, 4), 2);
	cJSON *j = parse_ok(ev[0]);
	cJSON *err = cJSON_GetObjectItem(j, "error");
	ck_assert_str_eq(cJSON_GetObjectItem(err, "message")->valuestring, "engine failed");
	ck_assert_str_eq(cJSON_GetObjectItem(err, "type")->valuestring, "server_error");
	cJSON_Delete(j);
	ck_assert_str_eq(ev[1], "[DONE]");
	ck_assert_int_eq(api_stream_delta(&s, &b, 0, "A", 1, NULL), ERR_STATE);
	/* without include_usage, end writes only [DONE]; usage may be NULL */
	ck_assert_int_eq(api_stream_init(&s, API_STREAM_COMPLETION, &META, 1, false), 0);
	buf_clear(&b);
	ck_assert_int_eq(api_stream_finish(&s, &b, 0, NULL, 0, NULL, "length"), 0);
	ck_assert_ptr_nonnull(strstr(b.data, "\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"length\""));
	buf_clear(&b);
	ck_assert_int_eq(api_stream_end(&s, &b, NULL), 0);
	ck_assert_str_eq(b.data, "data: [DONE]\n\n");
	ck_assert_int_eq(api_stream_init(&s, API_STREAM_CHAT, &META, 0, false), ERR_RANGE);
	ck_assert_int_eq(api_stream_init(&s, API_STREAM_CHAT, &META, API_MAX_N_HARD + 1, false),
			 ERR_RANGE);
	buf_deinit(&b);
}
END_TEST

START_TEST(test_models_tokenize)
{
	struct buf b;
	buf_init(&b);
	struct api_model_info mi = {.id = "tiny", .created = 9, .max_model_len = 2048};
	ck_assert_int_eq(api_render_models(&b, &mi, 1), 0);
	ck_assert_str_eq(b.data, "{\"object\":\"list\",\"data\":[{\"id\":\"tiny\",\"object\":"
				 "\"model\",\"created\":9,\"owned_by\":\"aorta\",\"root\":\"tiny\","
				 "\"parent\":null,\"max_model_len\":2048}]}");
	buf_clear(&b);
	int32_t t[] = {1, 22557, 3};
	ck_assert_int_eq(api_render_tokenize(&b, t, 3, 4096, NULL, NULL), 0);
	ck_assert_str_eq(b.data, "{\"count\":3,\"max_model_len\":4096,\"tokens\":[1,22557,3],"
				 "\"token_strs\":null}");
	buf_clear(&b);
	const char *strs[] = {"<s>", "\xC4\xA0hi\"", NULL};
	const size_t lens[] = {3, 5, 0};
	ck_assert_int_eq(api_render_tokenize(&b, t, 3, 4096, strs, lens), 0);
	ck_assert_str_eq(b.data, "{\"count\":3,\"max_model_len\":4096,\"tokens\":[1,22557,3],"
				 "\"token_strs\":[\"<s>\",\"\xC4\xA0hi\\\"\",\"\"]}");
	buf_clear(&b);
	ck_assert_int_eq(api_render_detokenize(&b, "Hi \"you\"", 8), 0);
	ck_assert_str_eq(b.data, "{\"prompt\":\"Hi \\\"you\\\"\"}");
	buf_clear(&b);
	ck_assert_int_eq(api_render_tokenize(&b, NULL, 0, 1, NULL, NULL), 0);
	cJSON_Delete(parse_ok(b.data));
	buf_deinit(&b);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("api_render");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_status_table);
	tcase_add_test(tc, test_error_bodies);
	tcase_add_test(tc, test_error_policies);
	tcase_add_test(tc, test_json_string);
	tcase_add_test(tc, test_completion_body);
	tcase_add_test(tc, test_logprobs_shapes);
	tcase_add_test(tc, test_stream_chat);
	tcase_add_test(tc, test_stream_completion_and_error);
	tcase_add_test(tc, test_models_tokenize);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
