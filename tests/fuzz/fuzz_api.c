/* tests/fuzz/fuzz_api.c — libFuzzer target for api/: the request parsers,
 * chat template rendering and the JSON writers. The first input byte picks
 * the parser (completion, chat, tokenize, detokenize); the rest is the body.
 * Whatever parses is rendered back (chat through every template family,
 * prompts through the completion and SSE renderers) and every rendered body
 * must itself be valid JSON, so a writer bug is a crash, not a silent pass.
 * Built by tools/fuzz.sh; with -DFUZZ_REPLAY_MAIN it is a plain program that
 * replays files given on the command line (the seed-corpus 'unit' test).
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/chat_template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void must_be_json(const struct buf *b)
{
	cJSON *j = cJSON_ParseWithLength(b->data, b->len);
	if (!j) {
		fprintf(stderr, "rendered invalid JSON: %.*s\n", (int)b->len, b->data);
		abort();
	}
	cJSON_Delete(j);
}

static void render_chat(const struct api_chat_req *r)
{
	static const char *const arch[] = {"llama", "llama3", "mistral", "gemma3", "gemma2",
					   "qwen3", "gpt2"};
	for (size_t i = 0; i < sizeof arch / sizeof arch[0]; i++) {
		struct api_chat_template t;
		if (api_chat_template_init(&t, NULL, arch[i], NULL, NULL))
			abort();
		struct buf out;
		buf_init(&out);
		struct api_error e;
		bool bos;
		int rc = api_chat_render(&t, r->msgs, r->n_msgs, true, &out, &bos, &e);
		if (rc == 0) {
			/* the prompt text goes back out as a chat completion */
			struct buf body;
			buf_init(&body);
			struct api_meta m = {"chatcmpl-1", r->model ? r->model : "m", 1};
			struct api_choice c = {0, out.data ? out.data : "", out.len, "stop", NULL};
			struct api_usage u = {1, 2};
			if (api_render_chat_completion(&body, &m, &c, 1, &u))
				abort();
			must_be_json(&body);
			buf_deinit(&body);
		} else if (e.status != 400) {
			abort(); /* a rejected conversation is always a client error */
		}
		buf_deinit(&out);
	}
}

static void render_prompts(const struct api_completion_req *r)
{
	struct api_meta m = {"cmpl-1", r->model ? r->model : "m", 1};
	struct api_stream s;
	struct buf b;
	buf_init(&b);
	int n = r->n_prompts < API_MAX_N_HARD ? r->n_prompts : API_MAX_N_HARD;
	if (api_stream_init(&s, API_STREAM_COMPLETION, &m, n, r->include_usage))
		abort();
	for (int i = 0; i < n; i++) {
		const struct api_prompt *p = &r->prompts[i];
		if (!p->is_tokens && api_stream_delta(&s, &b, i, p->text, p->text_len, NULL))
			abort();
		if (api_stream_finish(&s, &b, i, NULL, 0, NULL, "length"))
			abort();
	}
	struct api_usage u = {1, 1};
	if (api_stream_end(&s, &b, &u))
		abort();
	buf_deinit(&b);
}

static void check_error(int rc, const struct api_error *e)
{
	/* client mistakes are 4xx; only out-of-memory may be anything else */
	if (rc && (e->status < 400 || e->status >= 500) && rc != -1)
		abort();
	if (rc) {
		struct buf b;
		buf_init(&b);
		if (api_render_error(&b, e))
			abort();
		must_be_json(&b);
		buf_deinit(&b);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const char *body = (const char *)data + 1;
	size_t len = size - 1;
	struct api_error e;
	memset(&e, 0, sizeof e);
	int rc;
	switch (data[0] % 4) {
	case 0: {
		struct api_completion_req r;
		rc = api_parse_completion(body, len, NULL, &r, &e);
		check_error(rc, &e);
		if (!rc) {
			render_prompts(&r);
			api_completion_req_free(&r);
		}
		break;
	}
	case 1: {
		struct api_chat_req r;
		rc = api_parse_chat(body, len, NULL, &r, &e);
		check_error(rc, &e);
		if (!rc) {
			render_chat(&r);
			api_chat_req_free(&r);
		}
		break;
	}
	case 2: {
		struct api_tokenize_req r;
		rc = api_parse_tokenize(body, len, NULL, &r, &e);
		check_error(rc, &e);
		if (!rc)
			api_tokenize_req_free(&r);
		break;
	}
	default: {
		struct api_detokenize_req r;
		rc = api_parse_detokenize(body, len, NULL, &r, &e);
		check_error(rc, &e);
		if (!rc) {
			struct buf b;
			buf_init(&b);
			if (api_render_tokenize(&b, r.tokens, r.n_tokens, 4096, NULL, NULL))
				abort();
			must_be_json(&b);
			buf_deinit(&b);
			api_detokenize_req_free(&r);
		}
		break;
	}
	}
	/* the string writer on the raw bytes: always valid JSON */
	struct buf b;
	buf_init(&b);
	if (api_json_string(&b, body, len))
		abort();
	must_be_json(&b);
	buf_deinit(&b);
	return 0;
}

#ifdef FUZZ_REPLAY_MAIN
int main(int argc, char **argv)
{
	int n = 0;
	static uint8_t data[1 << 20];
	for (int i = 1; i < argc; i++) {
		FILE *fp = fopen(argv[i], "rb");
		if (!fp) {
			fprintf(stderr, "%s: cannot open\n", argv[i]);
			return 1;
		}
		size_t len = fread(data, 1, sizeof data, fp);
		fclose(fp);
		LLVMFuzzerTestOneInput(data, len);
		n++;
	}
	printf("replayed %d inputs\n", n);
	return n > 0 ? 0 : 1;
}
#endif
