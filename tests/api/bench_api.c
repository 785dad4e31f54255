/* tests/api/bench_api.c — how long api/ takes per request and per token:
 * parsing a typical chat body, a 64 KiB text prompt and a 4096-id token
 * prompt, rendering a chat template, and rendering one SSE chunk. Prints
 * microseconds per operation; `meson test --benchmark --suite api` runs it
 * (about a second). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/chat_template.h"
#include "common/buf.h"
#include "common/clock.h"

#define REPORT(name, iters, t0, bytes)                                                  \
	do {                                                                            \
		double us_ = (clock_now_s() - (t0)) * 1e6 / (iters);                    \
		printf("%-34s %9.2f us/op", name, us_);                                 \
		if (bytes)                                                              \
			printf("  %8.1f MB/s", (double)(bytes) / us_);                  \
		printf("\n");                                                           \
	} while (0)

int main(void)
{
	struct buf chat, text, toks;
	buf_init(&chat);
	buf_init(&text);
	buf_init(&toks);
	buf_append_str(&chat, "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":"
			      "\"You are a helpful assistant.\"}");
	for (int i = 0; i < 8; i++)
		buf_printf(&chat,
			   ",{\"role\":\"%s\",\"content\":\"Turn %d: the quick brown fox jumps over "
			   "the lazy dog, then asks about the weather in Paris and Berlin, "
			   "and whether \\\"caf\\u00e9\\\" has an accent. \xF0\x9F\x98\x80\"}",
			   i % 2 ? "assistant" : "user", i);
	buf_append_str(&chat, ",{\"role\":\"user\",\"content\":\"ok\"}],\"temperature\":0.7,"
			      "\"top_p\":0.9,\"max_tokens\":256,\"stream\":true,"
			      "\"stream_options\":{\"include_usage\":true},\"stop\":[\"\\n\\n\"]}");
	buf_append_str(&text, "{\"prompt\":\"");
	while (text.len < 65536)
		buf_append_str(&text, "Lorem ipsum dolor sit amet, consectetur adipiscing elit. ");
	buf_append_str(&text, "\",\"max_tokens\":16}");
	buf_append_str(&toks, "{\"prompt\":[");
	for (int i = 0; i < 4096; i++)
		buf_printf(&toks, "%s%d", i ? "," : "", (i * 7919) % 32000);
	buf_append_str(&toks, "]}");

	struct api_error e;
	int iters = 20000;
	double t0 = clock_now_s();
	for (int i = 0; i < iters; i++) {
		struct api_chat_req r;
		if (api_parse_chat(chat.data, chat.len, NULL, &r, &e))
			return 1;
		api_chat_req_free(&r);
	}
	REPORT("parse chat (10 msgs)", iters, t0, chat.len);

	iters = 500;
	t0 = clock_now_s();
	for (int i = 0; i < iters; i++) {
		struct api_completion_req r;
		if (api_parse_completion(text.data, text.len, NULL, &r, &e))
			return 1;
		api_completion_req_free(&r);
	}
	REPORT("parse completion (64 KiB text)", iters, t0, text.len);

	t0 = clock_now_s();
	for (int i = 0; i < iters; i++) {
		struct api_completion_req r;
		if (api_parse_completion(toks.data, toks.len, NULL, &r, &e))
			return 1;
		api_completion_req_free(&r);
	}
	REPORT("parse completion (4096 ids)", iters, t0, toks.len);

	struct api_chat_req r;
	if (api_parse_chat(chat.data, chat.len, NULL, &r, &e))
		return 1;
	struct api_chat_template t;
	api_chat_template_init(&t, NULL, "llama3", NULL, NULL);
	struct buf out;
	buf_init(&out);
	iters = 20000;
	t0 = clock_now_s();
	for (int i = 0; i < iters; i++) {
		buf_clear(&out);
		if (api_chat_render(&t, r.msgs, r.n_msgs, true, &out, NULL, &e))
			return 1;
	}
	REPORT("chat template llama3 (10 msgs)", iters, t0, 0);
	api_chat_req_free(&r);

	struct api_meta m = {"chatcmpl-0000000000000001", "tiny-model", 1700000000};
	struct api_stream s;
	iters = 200000;
	t0 = clock_now_s();
	for (int i = 0; i < iters; i++) {
		if (i % 1000 == 0)
			api_stream_init(&s, API_STREAM_CHAT, &m, 1, true);
		buf_clear(&out);
		if (api_stream_delta(&s, &out, 0, " token", 6, NULL))
			return 1;
	}
	REPORT("SSE chat chunk (1 token)", iters, t0, 0);
	buf_deinit(&out);
	buf_deinit(&chat);
	buf_deinit(&text);
	buf_deinit(&toks);
	return 0;
}
