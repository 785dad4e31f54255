/* api/response.c — C results -> OpenAI response bodies: completions and chat
 * completions (whole and as SSE chunks), logprobs objects, usage, /v1/models,
 * the OpenAI error body,
 * /tokenize and /detokenize, and the stream state machine (struct
 * api_stream) that keeps a stream well-formed. JSON is written directly into
 * a struct buf (no cJSON tree), with api_json_string() guaranteeing valid
 * UTF-8 output. Tests: tests/api/test_api_render.c.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api/api_internal.h"
#include "common/err.h"

/* Chain appends: stop at the first failure and keep its code. */
#define TRY(expr)                   \
	do {                        \
		int rc_ = (expr);   \
		if (rc_)            \
			return rc_; \
	} while (0)

static int str(struct buf *o, const char *s)
{
	return api_json_string(o, s ? s : "", s ? strlen(s) : 0);
}

void api_format_id(char *out, size_t cap, const char *prefix, uint64_t instance,
		   uint64_t request_id)
{
	snprintf(out, cap, "%s%016" PRIx64 "%016" PRIx64, prefix, instance, request_id);
}

/* OpenAI writes -inf logprobs as -9999.0; NaN (no value, e.g. the first
 * echoed prompt token) is null. */
static int logprob_val(struct buf *o, float v)
{
	if (isnan(v))
		return buf_append_str(o, "null");
	if (isinf(v))
		return buf_append_str(o, v < 0 ? "-9999.0" : "9999.0");
	return api__json_float(o, v);
}

static int head(struct buf *o, const struct api_meta *m, const char *object)
{
	TRY(buf_append_str(o, "{\"id\":"));
	TRY(str(o, m->id));
	TRY(buf_printf(o, ",\"object\":\"%s\",\"created\":%" PRId64 ",\"model\":", object,
		       m->created));
	TRY(str(o, m->model));
	return 0;
}

static int usage(struct buf *o, const struct api_usage *u)
{
	return buf_printf(o,
			  "{\"prompt_tokens\":%" PRId64 ",\"completion_tokens\":%" PRId64
			  ",\"total_tokens\":%" PRId64 "}",
			  u->prompt_tokens, u->completion_tokens,
			  u->prompt_tokens + u->completion_tokens);
}

static int finish(struct buf *o, const char *reason)
{
	TRY(buf_append_str(o, ",\"finish_reason\":"));
	return reason ? str(o, reason) : buf_append_str(o, "null");
}

/* ---- logprobs ------------------------------------------------------------ */

static bool same_token(const struct api_top_logprob *a, const struct api_top_logprob *b)
{
	return a->token_len == b->token_len && !memcmp(a->token, b->token, a->token_len);
}

int api_render_completion_logprobs(struct buf *o, const struct api_logprobs *lp)
{
	size_t n = lp->n_tokens;
	TRY(buf_append_str(o, "{\"text_offset\":["));
	for (size_t i = 0; i < n; i++)
		TRY(buf_printf(o, "%s%" PRId32, i ? "," : "", lp->tokens[i].text_offset));
	TRY(buf_append_str(o, "],\"token_logprobs\":["));
	for (size_t i = 0; i < n; i++) {
		TRY(buf_append_str(o, i ? "," : ""));
		TRY(logprob_val(o, lp->tokens[i].logprob));
	}
	TRY(buf_append_str(o, "],\"tokens\":["));
	for (size_t i = 0; i < n; i++) {
		TRY(buf_append_str(o, i ? "," : ""));
		TRY(api_json_string(o, lp->tokens[i].token, lp->tokens[i].token_len));
	}
	TRY(buf_append_str(o, "],\"top_logprobs\":["));
	for (size_t i = 0; i < n; i++) {
		const struct api_token_logprob *t = &lp->tokens[i];
		TRY(buf_append_str(o, i ? "," : ""));
		if (!t->top) {
			TRY(buf_append_str(o, "null"));
			continue;
		}
		/* A dict keyed by token text: two ids can decode to the same
		 * text, so keep the first (most likely) of each text. */
		TRY(buf_append_char(o, '{'));
		bool first = true;
		for (int k = 0; k < t->n_top; k++) {
			bool dup = false;
			for (int j = 0; j < k && !dup; j++)
				dup = same_token(&t->top[j], &t->top[k]);
			if (dup)
				continue;
			TRY(buf_append_str(o, first ? "" : ","));
			first = false;
			TRY(api_json_string(o, t->top[k].token, t->top[k].token_len));
			TRY(buf_append_char(o, ':'));
			TRY(logprob_val(o, t->top[k].logprob));
		}
		/* and the sampled token, as OpenAI and vLLM always give it (so
		 * up to logprobs + 1 entries) */
		const struct api_top_logprob self = {t->token, t->token_len, t->logprob};
		bool listed = false;
		for (int k = 0; k < t->n_top && !listed; k++)
			listed = same_token(&t->top[k], &self);
		if (!listed) {
			TRY(buf_append_str(o, first ? "" : ","));
			TRY(api_json_string(o, t->token, t->token_len));
			TRY(buf_append_char(o, ':'));
			TRY(logprob_val(o, t->logprob));
		}
		TRY(buf_append_char(o, '}'));
	}
	return buf_append_str(o, "]}");
}

static int bytes_array(struct buf *o, const char *s, size_t len)
{
	TRY(buf_append_char(o, '['));
	for (size_t i = 0; i < len; i++)
		TRY(buf_printf(o, "%s%u", i ? "," : "", (unsigned)(unsigned char)s[i]));
	return buf_append_char(o, ']');
}

static int chat_token(struct buf *o, const char *tok, size_t len, float logprob)
{
	TRY(buf_append_str(o, "{\"token\":"));
	TRY(api_json_string(o, tok, len));
	TRY(buf_append_str(o, ",\"logprob\":"));
	TRY(logprob_val(o, logprob));
	TRY(buf_append_str(o, ",\"bytes\":"));
	return bytes_array(o, tok, len);
}

int api_render_chat_logprobs(struct buf *o, const struct api_logprobs *lp)
{
	TRY(buf_append_str(o, "{\"content\":["));
	for (size_t i = 0; i < lp->n_tokens; i++) {
		const struct api_token_logprob *t = &lp->tokens[i];
		TRY(buf_append_str(o, i ? "," : ""));
		TRY(chat_token(o, t->token, t->token_len, t->logprob));
		TRY(buf_append_str(o, ",\"top_logprobs\":["));
		for (int k = 0; k < t->n_top; k++) {
			TRY(buf_append_str(o, k ? "," : ""));
			TRY(chat_token(o, t->top[k].token, t->top[k].token_len, t->top[k].logprob));
			TRY(buf_append_char(o, '}'));
		}
		TRY(buf_append_str(o, "]}"));
	}
	return buf_append_str(o, "]}");
}

static int logprobs_field(struct buf *o, const struct api_logprobs *lp, bool chat)
{
	TRY(buf_append_str(o, ",\"logprobs\":"));
	if (!lp)
		return buf_append_str(o, "null");
	return chat ? api_render_chat_logprobs(o, lp) : api_render_completion_logprobs(o, lp);
}

/* ---- whole responses --------------------------------------------------------- */

static int usage_field(struct buf *o, const struct api_usage *u)
{
	if (!u)
		return 0;
	TRY(buf_append_str(o, ",\"usage\":"));
	return usage(o, u);
}

int api_render_completion(struct buf *o, const struct api_meta *m, const struct api_choice *c,
			  int n_choices, const struct api_usage *u)
{
	TRY(head(o, m, "text_completion"));
	TRY(buf_append_str(o, ",\"choices\":["));
	for (int i = 0; i < n_choices; i++) {
		TRY(buf_printf(o, "%s{\"index\":%d,\"text\":", i ? "," : "", c[i].index));
		TRY(api_json_string(o, c[i].text, c[i].text_len));
		TRY(logprobs_field(o, c[i].logprobs, false));
		TRY(finish(o, c[i].finish_reason));
		TRY(buf_append_char(o, '}'));
	}
	TRY(buf_append_char(o, ']'));
	TRY(usage_field(o, u));
	return buf_append_char(o, '}');
}

int api_render_chat_completion(struct buf *o, const struct api_meta *m,
			       const struct api_choice *c, int n_choices,
			       const struct api_usage *u)
{
	TRY(head(o, m, "chat.completion"));
	TRY(buf_append_str(o, ",\"choices\":["));
	for (int i = 0; i < n_choices; i++) {
		TRY(buf_printf(o, "%s{\"index\":%d,\"message\":{\"role\":\"assistant\",\"content\":",
			       i ? "," : "", c[i].index));
		TRY(api_json_string(o, c[i].text, c[i].text_len));
		TRY(buf_append_char(o, '}'));
		TRY(logprobs_field(o, c[i].logprobs, true));
		TRY(finish(o, c[i].finish_reason));
		TRY(buf_append_char(o, '}'));
	}
	TRY(buf_append_char(o, ']'));
	TRY(usage_field(o, u));
	return buf_append_char(o, '}');
}

int api_render_models(struct buf *o, const struct api_model_info *models, int n_models)
{
	TRY(buf_append_str(o, "{\"object\":\"list\",\"data\":["));
	for (int i = 0; i < n_models; i++) {
		const struct api_model_info *mi = &models[i];
		TRY(buf_append_str(o, i ? ",{\"id\":" : "{\"id\":"));
		TRY(str(o, mi->id));
		TRY(buf_printf(o, ",\"object\":\"model\",\"created\":%" PRId64 ",\"owned_by\":",
			       mi->created));
		TRY(str(o, mi->owned_by ? mi->owned_by : "aorta"));
		TRY(buf_append_str(o, ",\"root\":"));
		TRY(str(o, mi->id));
		TRY(buf_printf(o, ",\"parent\":null,\"max_model_len\":%" PRId32 "}",
			       mi->max_model_len));
	}
	return buf_append_str(o, "]}");
}

int api_render_tokenize(struct buf *o, const int32_t *tokens, size_t n_tokens,
			int32_t max_model_len, const char *const *strs, const size_t *str_lens)
{
	TRY(buf_printf(o, "{\"count\":%zu,\"max_model_len\":%" PRId32 ",\"tokens\":[", n_tokens,
		       max_model_len));
	for (size_t i = 0; i < n_tokens; i++)
		TRY(buf_printf(o, "%s%" PRId32, i ? "," : "", tokens[i]));
	if (!strs)
		return buf_append_str(o, "],\"token_strs\":null}");
	TRY(buf_append_str(o, "],\"token_strs\":["));
	for (size_t i = 0; i < n_tokens; i++) {
		TRY(buf_append_str(o, i ? "," : ""));
		TRY(api_json_string(o, strs[i] ? strs[i] : "", strs[i] ? str_lens[i] : 0));
	}
	return buf_append_str(o, "]}");
}

int api_render_detokenize(struct buf *o, const char *text, size_t len)
{
	TRY(buf_append_str(o, "{\"prompt\":"));
	TRY(api_json_string(o, text, len));
	return buf_append_char(o, '}');
}

/* ---- streaming ----------------------------------------------------------------- */

int api_stream_init(struct api_stream *s, enum api_stream_kind kind, const struct api_meta *m,
		    int n_choices, bool include_usage)
{
	if (n_choices < 1 || n_choices > API_MAX_N_HARD)
		return ERR_RANGE;
	memset(s, 0, sizeof *s);
	s->kind = kind;
	s->meta = *m;
	s->n_choices = n_choices;
	s->include_usage = include_usage;
	return 0;
}

/* One "data: {...}\n\n" event with one choice. On failure out is restored so
 * a half-written event never reaches the client. */
static int chunk(struct api_stream *s, struct buf *o, int index, const char *text, size_t len,
		 const struct api_logprobs *lp, const char *reason)
{
	bool chat = s->kind == API_STREAM_CHAT;
	TRY(buf_append_str(o, "data: "));
	TRY(head(o, &s->meta, chat ? "chat.completion.chunk" : "text_completion"));
	TRY(buf_printf(o, ",\"choices\":[{\"index\":%d,", index));
	if (chat) {
		bool role = !s->role_sent[index];
		TRY(buf_append_str(o, "\"delta\":{"));
		if (role)
			TRY(buf_append_str(o, "\"role\":\"assistant\""));
		/* The finishing chunk of a choice has an empty delta unless it
		 * carries text; every other chunk carries content. */
		if (len || !reason) {
			TRY(buf_append_str(o, role ? ",\"content\":" : "\"content\":"));
			TRY(api_json_string(o, text, len));
		}
		TRY(buf_append_char(o, '}'));
	} else {
		TRY(buf_append_str(o, "\"text\":"));
		TRY(api_json_string(o, text, len));
	}
	TRY(logprobs_field(o, lp, chat));
	TRY(finish(o, reason));
	TRY(buf_append_str(o, "}]"));
	if (s->include_usage)
		TRY(buf_append_str(o, ",\"usage\":null"));
	TRY(buf_append_str(o, "}\n\n"));
	s->role_sent[index] = true;
	return 0;
}

static int guarded_chunk(struct api_stream *s, struct buf *o, int index, const char *text,
			 size_t len, const struct api_logprobs *lp, const char *reason)
{
	if (s->done || index < 0 || index >= s->n_choices || s->finished[index])
		return ERR_STATE;
	size_t mark = o->len;
	int rc = chunk(s, o, index, text ? text : "", text ? len : 0, lp, reason);
	if (rc) {
		o->len = mark;
		if (o->data)
			o->data[mark] = '\0';
	}
	return rc;
}

int api_stream_delta(struct api_stream *s, struct buf *out, int index, const char *text,
		     size_t len, const struct api_logprobs *lp)
{
	return guarded_chunk(s, out, index, text, len, lp, NULL);
}

int api_stream_finish(struct api_stream *s, struct buf *out, int index, const char *text,
		      size_t len, const struct api_logprobs *lp, const char *finish_reason)
{
	int rc = guarded_chunk(s, out, index, text, len, lp,
			       finish_reason ? finish_reason : "stop");
	if (!rc)
		s->finished[index] = true;
	return rc;
}

int api_stream_end(struct api_stream *s, struct buf *o, const struct api_usage *u)
{
	if (s->done)
		return ERR_STATE;
	for (int i = 0; i < s->n_choices; i++)
		if (!s->finished[i])
			return ERR_STATE;
	if (s->include_usage && !u)
		return ERR_INVAL;
	size_t mark = o->len;
	int rc = 0;
	if (s->include_usage) {
		bool chat = s->kind == API_STREAM_CHAT;
		rc = buf_append_str(o, "data: ");
		rc = rc ? rc : head(o, &s->meta, chat ? "chat.completion.chunk" : "text_completion");
		rc = rc ? rc : buf_append_str(o, ",\"choices\":[],\"usage\":");
		rc = rc ? rc : usage(o, u);
		rc = rc ? rc : buf_append_str(o, "}\n\n");
	}
	rc = rc ? rc : buf_append_str(o, "data: [DONE]\n\n");
	if (rc) {
		o->len = mark;
		if (o->data)
			o->data[mark] = '\0';
		return rc;
	}
	s->done = true;
	return 0;
}

int api_stream_error(struct api_stream *s, struct buf *o, const struct api_error *e)
{
	if (s->done)
		return ERR_STATE;
	size_t mark = o->len;
	int rc = buf_append_str(o, "data: ");
	rc = rc ? rc : api_render_error(o, e);
	rc = rc ? rc : buf_append_str(o, "\n\ndata: [DONE]\n\n");
	if (rc) {
		o->len = mark;
		if (o->data)
			o->data[mark] = '\0';
		return rc;
	}
	s->done = true;
	return 0;
}

/* {"error":{"message","type","param","code"}}, as OpenAI sends it */
int api_render_error(struct buf *out, const struct api_error *e)
{
	int rc = buf_append_str(out, "{\"error\":{\"message\":");
	rc = rc ? rc : api_json_string(out, e->message, strlen(e->message));
	rc = rc ? rc : buf_append_str(out, ",\"type\":");
	const char *type = api_error_type(e);
	rc = rc ? rc : api_json_string(out, type, strlen(type));
	rc = rc ? rc : buf_append_str(out, ",\"param\":");
	if (!rc && e->param[0])
		rc = api_json_string(out, e->param, strlen(e->param));
	else if (!rc)
		rc = buf_append_str(out, "null");
	rc = rc ? rc : buf_append_str(out, ",\"code\":");
	if (!rc && e->code)
		rc = api_json_string(out, e->code, strlen(e->code));
	else if (!rc)
		rc = buf_append_str(out, "null");
	return rc ? rc : buf_append_str(out, "}}");
}
