/* api/request.c — request bodies -> C structs: POST /v1/completions,
 * POST /v1/chat/completions, POST /tokenize, POST /detokenize, and the
 * prompt-plus-max_tokens check against the context; the fields they share
 * are parsed by request_fields.c. Every rejected field is
 * a 400 that names it (param) and says what was expected. Ranges follow
 * OpenAI, with vLLM's extensions (top_k, min_p, repetition_penalty,
 * ignore_eos, min_tokens, stop_token_ids). Tests: tests/api/test_api_parse.c.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api/api_internal.h"
#include "common/checked.h"
#include "common/err.h"

void api_limits_default(struct api_limits *lim)
{
	*lim = (struct api_limits){
		.max_n = 16,
		.max_stop = 16,
		.max_stop_len = 1024,
		.max_stop_token_ids = 64,
		.max_tokens = 131072,
		.max_prompts = 64,
		.max_prompt_tokens = (size_t)1 << 20,
		.max_messages = 4096,
		.max_content_parts = 256,
		.max_logit_bias = 1024,
		.max_depth = 64,
		.n_vocab = 0,
	};
}

const char *api_role_str(enum api_role r)
{
	switch (r) {
	case API_ROLE_SYSTEM:
		return "system";
	case API_ROLE_USER:
		return "user";
	case API_ROLE_ASSISTANT:
		return "assistant";
	}
	return "unknown";
}

/* ---- /v1/completions ----------------------------------------------------- */

static int parse_prompt(struct api__jp *p, const cJSON *root, struct api_completion_req *r)
{
	const cJSON *it;
	int rc = api__member(p, root, "prompt", "prompt", &it);
	if (rc)
		return rc;
	if (!it)
		return api__bad(p, "prompt", "'prompt' is required");
	if (cJSON_IsString(it)) {
		r->prompts = api__alloc_array(p, 1, sizeof *r->prompts);
		if (!r->prompts)
			return api__oom(p);
		r->n_prompts = 1;
		return api__to_string(p, it, "prompt", &r->prompts[0].text,
				      &r->prompts[0].text_len);
	}
	if (!cJSON_IsArray(it) || !it->child)
		return api__bad(p, "prompt",
				"'prompt' must be a string, an array of strings, an array of token ids or an array of token-id arrays (non-empty)");
	if (cJSON_IsNumber(it->child)) {
		r->prompts = api__alloc_array(p, 1, sizeof *r->prompts);
		if (!r->prompts)
			return api__oom(p);
		r->n_prompts = 1;
		r->prompts[0].is_tokens = true;
		return api__to_token_array(p, it, "prompt", p->lim->max_prompt_tokens, false,
				      &r->prompts[0].tokens, &r->prompts[0].n_tokens);
	}
	int n = 0;
	for (const cJSON *c = it->child; c; c = c->next)
		if (++n > p->lim->max_prompts)
			return api__bad_code(p, ERR_RANGE, "prompt",
					     "'prompt' has more than %d prompts",
					     p->lim->max_prompts);
	r->prompts = api__alloc_array(p, (size_t)n, sizeof *r->prompts);
	if (!r->prompts)
		return api__oom(p);
	r->n_prompts = n;
	bool strings = cJSON_IsString(it->child);
	int i = 0;
	char param[32];
	for (const cJSON *c = it->child; c; c = c->next, i++) {
		struct api_prompt *pr = &r->prompts[i];
		snprintf(param, sizeof param, "prompt[%d]", i);
		if (strings) {
			if (!cJSON_IsString(c))
				return api__bad(p, param,
						"'%s' must be a string like the other prompts", param);
			rc = api__to_string(p, c, param, &pr->text, &pr->text_len);
		} else {
			if (!cJSON_IsArray(c))
				return api__bad(p, param, "'%s' must be an array of token ids",
						param);
			pr->is_tokens = true;
			rc = api__to_token_array(p, c, param, p->lim->max_prompt_tokens, false,
					    &pr->tokens, &pr->n_tokens);
		}
		if (rc)
			return rc;
	}
	return 0;
}

static int completion_body(struct api__jp *p, const cJSON *root, struct api_completion_req *r)
{
	int rc;
	int64_t v;
	if ((rc = api__parse_common(p, root, &r->model, &r->stream, &r->include_usage, &r->n,
			       &r->user)) ||
	    (rc = parse_prompt(p, root, r)) || (rc = api__parse_sampling(p, root, &r->s)) ||
	    (rc = api__get_bool(p, root, "echo", "echo", NULL, &r->echo)) ||
	    (rc = api__refuse_unimplemented(p, root, r->n)))
		return rc;
	r->add_special_tokens = true;
	if ((rc = api__get_bool(p, root, "add_special_tokens", "add_special_tokens", NULL,
			   &r->add_special_tokens)))
		return rc;
	/* max_tokens 0 only makes sense with echo (score the prompt, as
	 * lm-evaluation-harness does). */
	if ((rc = api__get_int_in(p, root, "max_tokens", r->echo ? 0 : 1, p->lim->max_tokens,
			     &r->has_max_tokens, &v)))
		return rc;
	r->max_tokens = (int32_t)v;
	bool has_lp = false;
	if ((rc = api__get_int_in(p, root, "logprobs", 0, API_MAX_LOGPROBS, &has_lp, &v)))
		return rc;
	r->logprobs = has_lp ? (int)v : -1;
	const cJSON *suffix;
	if ((rc = api__member(p, root, "suffix", "suffix", &suffix)))
		return rc;
	if (suffix && !(cJSON_IsString(suffix) && !suffix->valuestring[0]))
		return api__bad_code(p, ERR_UNSUPPORTED, "suffix", "'suffix' is not supported");
	return api__check_min_tokens(p, &r->s, r->has_max_tokens, r->max_tokens);
}

/* ---- chat messages -------------------------------------------------------- */

static int parse_role(struct api__jp *p, const cJSON *m, const char *param, enum api_role *out)
{
	const cJSON *it;
	int rc = api__member(p, m, "role", param, &it);
	if (rc)
		return rc;
	if (!it)
		return api__bad(p, param, "'%s' is required", param);
	if (!cJSON_IsString(it))
		return api__bad(p, param, "'%s' must be a string", param);
	const char *s = it->valuestring;
	if (!strcmp(s, "system") || !strcmp(s, "developer"))
		*out = API_ROLE_SYSTEM;
	else if (!strcmp(s, "user"))
		*out = API_ROLE_USER;
	else if (!strcmp(s, "assistant"))
		*out = API_ROLE_ASSISTANT;
	else if (!strcmp(s, "tool") || !strcmp(s, "function"))
		return api__bad_code(p, ERR_UNSUPPORTED, param,
				     "role '%s' is not supported (no tool calling)", s);
	else
		return api__bad(p, param,
				"'%s' must be one of system, developer, user, assistant; got '%.40s'",
				param, s);
	return 0;
}

static int parse_content(struct api__jp *p, const cJSON *m, int i, struct api_chat_msg *msg)
{
	char param[96];
	snprintf(param, sizeof param, "messages[%d].content", i);
	const cJSON *it;
	int rc = api__member(p, m, "content", param, &it);
	if (rc)
		return rc;
	if (!it) {
		if (msg->role == API_ROLE_ASSISTANT)
			return 0; /* assistant turns may have null content */
		return api__bad(p, param, "'%s' is required", param);
	}
	if (cJSON_IsString(it)) {
		msg->parts = api__alloc_array(p, 1, sizeof *msg->parts);
		msg->part_len = api__alloc_array(p, 1, sizeof *msg->part_len);
		if (!msg->parts || !msg->part_len)
			return api__oom(p);
		msg->n_parts = 1;
		return api__to_string(p, it, param, &msg->parts[0], &msg->part_len[0]);
	}
	if (!cJSON_IsArray(it))
		return api__bad(p, param, "'%s' must be a string or an array of content parts",
				param);
	int n = 0;
	for (const cJSON *c = it->child; c; c = c->next)
		if (++n > p->lim->max_content_parts)
			return api__bad_code(p, ERR_RANGE, param, "'%s' has more than %d parts",
					     param, p->lim->max_content_parts);
	msg->content_is_array = true;
	msg->parts = api__alloc_array(p, (size_t)n, sizeof *msg->parts);
	msg->part_len = api__alloc_array(p, (size_t)n, sizeof *msg->part_len);
	if (!msg->parts || !msg->part_len)
		return api__oom(p);
	int j = 0;
	for (const cJSON *c = it->child; c; c = c->next, j++) {
		char pp[112], tp[128];
		snprintf(pp, sizeof pp, "%s[%d]", param, j);
		if (!cJSON_IsObject(c))
			return api__bad(p, pp, "'%s' must be an object with 'type' and 'text'", pp);
		snprintf(tp, sizeof tp, "%s.type", pp);
		const cJSON *type, *text;
		if ((rc = api__member(p, c, "type", tp, &type)))
			return rc;
		if (!type || !cJSON_IsString(type))
			return api__bad(p, tp, "'%s' must be a string", tp);
		if (strcmp(type->valuestring, "text"))
			return api__bad_code(p, ERR_UNSUPPORTED, tp,
					     "content part type '%.40s' is not supported (only 'text')",
					     type->valuestring);
		snprintf(tp, sizeof tp, "%s.text", pp);
		if ((rc = api__member(p, c, "text", tp, &text)))
			return rc;
		if (!text)
			return api__bad(p, tp, "'%s' is required", tp);
		if ((rc = api__to_string(p, text, tp, &msg->parts[j], &msg->part_len[j])))
			return rc;
	}
	msg->n_parts = n;
	return 0;
}

static int parse_messages(struct api__jp *p, const cJSON *root, struct api_chat_msg **out,
			  int *n_out)
{
	const cJSON *it;
	int rc = api__member(p, root, "messages", "messages", &it);
	if (rc)
		return rc;
	if (!it)
		return api__bad(p, "messages", "'messages' is required");
	if (!cJSON_IsArray(it) || !it->child)
		return api__bad(p, "messages", "'messages' must be a non-empty array");
	int n = 0;
	for (const cJSON *c = it->child; c; c = c->next)
		if (++n > p->lim->max_messages)
			return api__bad_code(p, ERR_RANGE, "messages",
					     "'messages' has more than %d messages",
					     p->lim->max_messages);
	struct api_chat_msg *msgs = api__alloc_array(p, (size_t)n, sizeof *msgs);
	if (!msgs)
		return api__oom(p);
	int i = 0;
	for (const cJSON *c = it->child; c; c = c->next, i++) {
		char param[64];
		snprintf(param, sizeof param, "messages[%d]", i);
		if (!cJSON_IsObject(c))
			return api__bad(p, param, "'%s' must be an object", param);
		snprintf(param, sizeof param, "messages[%d].role", i);
		if ((rc = parse_role(p, c, param, &msgs[i].role)) ||
		    (rc = parse_content(p, c, i, &msgs[i])))
			return rc;
		const cJSON *x;
		snprintf(param, sizeof param, "messages[%d].name", i);
		if ((rc = api__member(p, c, "name", param, &x)))
			return rc;
		if (x && (rc = api__to_string(p, x, param, &msgs[i].name, NULL)))
			return rc;
		snprintf(param, sizeof param, "messages[%d].tool_calls", i);
		if ((rc = api__member(p, c, "tool_calls", param, &x)))
			return rc;
		if (x && !(cJSON_IsArray(x) && !x->child))
			return api__bad_code(p, ERR_UNSUPPORTED, param,
					     "tool calls are not supported");
	}
	*out = msgs;
	*n_out = n;
	return 0;
}

static int chat_body(struct api__jp *p, const cJSON *root, struct api_chat_req *r)
{
	int rc;
	int64_t v;
	if ((rc = api__parse_common(p, root, &r->model, &r->stream, &r->include_usage, &r->n,
			       &r->user)) ||
	    (rc = parse_messages(p, root, &r->msgs, &r->n_msgs)) ||
	    (rc = api__parse_sampling(p, root, &r->s)) || (rc = api__refuse_unimplemented(p, root, r->n)))
		return rc;
	r->add_special_tokens = true;
	if ((rc = api__get_bool(p, root, "add_special_tokens", "add_special_tokens", NULL,
			   &r->add_special_tokens)))
		return rc;
	const cJSON *tools;
	if ((rc = api__member(p, root, "tools", "tools", &tools)))
		return rc;
	if (tools && !(cJSON_IsArray(tools) && !tools->child))
		return api__bad_code(p, ERR_UNSUPPORTED, "tools", "tools are not supported");
	/* with no tools, only "none" (or "auto", which then means none) makes
	 * sense; OpenAI refuses a tool_choice that needs tools */
	const cJSON *tc;
	if ((rc = api__member(p, root, "tool_choice", "tool_choice", &tc)))
		return rc;
	if (tc && !cJSON_IsNull(tc) &&
	    !(cJSON_IsString(tc) && (!strcmp(tc->valuestring, "none") ||
				     !strcmp(tc->valuestring, "auto"))))
		return api__bad(p, "tool_choice",
				"'tool_choice' other than \"none\" or \"auto\" needs 'tools', "
				"which are not supported");
	r->add_generation_prompt = true;
	bool cont = false;
	if ((rc = api__get_bool(p, root, "add_generation_prompt", "add_generation_prompt", NULL,
			   &r->add_generation_prompt)) ||
	    (rc = api__get_bool(p, root, "continue_final_message", "continue_final_message", NULL,
			   &cont)))
		return rc;
	if (cont)
		return api__bad_code(p, ERR_UNSUPPORTED, "continue_final_message",
				     "'continue_final_message' is not supported");
	/* Structured output would be silently ignored; say so instead. */
	const cJSON *rf, *rft;
	if ((rc = api__member(p, root, "response_format", "response_format", &rf)))
		return rc;
	if (rf) {
		if (!cJSON_IsObject(rf))
			return api__bad(p, "response_format", "'response_format' must be an object");
		if ((rc = api__member(p, rf, "type", "response_format.type", &rft)))
			return rc;
		if (!rft || !cJSON_IsString(rft))
			return api__bad(p, "response_format.type",
					"'response_format.type' must be a string");
		if (strcmp(rft->valuestring, "text"))
			return api__bad_code(p, ERR_UNSUPPORTED, "response_format.type",
					     "response_format type '%.40s' is not supported (only 'text')",
					     rft->valuestring);
	}
	bool has_mct = false;
	if ((rc = api__get_int_in(p, root, "max_tokens", 1, p->lim->max_tokens, &r->has_max_tokens,
			     &v)))
		return rc;
	r->max_tokens = (int32_t)v;
	if ((rc = api__get_int_in(p, root, "max_completion_tokens", 1, p->lim->max_tokens, &has_mct,
			     &v)))
		return rc;
	if (has_mct) {
		r->has_max_tokens = true;
		r->max_tokens = (int32_t)v;
	}
	bool has_top = false;
	if ((rc = api__get_bool(p, root, "logprobs", "logprobs", NULL, &r->logprobs)) ||
	    (rc = api__get_int_in(p, root, "top_logprobs", 0, API_MAX_LOGPROBS, &has_top, &v)))
		return rc;
	r->top_logprobs = has_top ? (int)v : 0;
	if (r->top_logprobs > 0 && !r->logprobs)
		return api__bad(p, "top_logprobs", "'top_logprobs' requires 'logprobs': true");
	return api__check_min_tokens(p, &r->s, r->has_max_tokens, r->max_tokens);
}

/* ---- /tokenize and /detokenize -------------------------------------------- */

static int tokenize_body(struct api__jp *p, const cJSON *root, struct api_tokenize_req *r)
{
	int rc;
	const cJSON *pr, *msgs;
	if ((rc = api__get_string(p, root, "model", &r->model, NULL)) ||
	    (rc = api__member(p, root, "prompt", "prompt", &pr)) ||
	    (rc = api__member(p, root, "messages", "messages", &msgs)))
		return rc;
	if (pr && msgs)
		return api__bad(p, "messages", "send either 'prompt' or 'messages', not both");
	if (!pr && !msgs)
		return api__bad(p, "prompt", "'prompt' or 'messages' is required");
	r->is_chat = msgs != NULL;
	r->add_special_tokens = true; /* for messages: BOS where the template has none, as chat */
	r->add_generation_prompt = true;
	if (pr) {
		if ((rc = api__to_string(p, pr, "prompt", &r->prompt, &r->prompt_len)))
			return rc;
	} else if ((rc = parse_messages(p, root, &r->msgs, &r->n_msgs))) {
		return rc;
	}
	if ((rc = api__get_bool(p, root, "add_special_tokens", "add_special_tokens", NULL,
			   &r->add_special_tokens)) ||
	    (rc = api__get_bool(p, root, "add_generation_prompt", "add_generation_prompt", NULL,
			   &r->add_generation_prompt)) ||
	    (rc = api__get_bool(p, root, "return_token_strs", "return_token_strs", NULL,
			   &r->return_token_strs)))
		return rc;
	return 0;
}

static int detokenize_body(struct api__jp *p, const cJSON *root, struct api_detokenize_req *r)
{
	int rc;
	const cJSON *t;
	if ((rc = api__get_string(p, root, "model", &r->model, NULL)) ||
	    (rc = api__member(p, root, "tokens", "tokens", &t)))
		return rc;
	if (!t)
		return api__bad(p, "tokens", "'tokens' is required");
	return api__to_token_array(p, t, "tokens", p->lim->max_prompt_tokens, true, &r->tokens,
			      &r->n_tokens);
}

/* ---- entry points ----------------------------------------------------------- */

/* Parse the root object and run body(); one copy of the setup/teardown for
 * all four request kinds. */
#define API_PARSE(body_fn, req_free)                                                      \
	do {                                                                              \
		struct api_limits dl;                                                     \
		if (!lim) {                                                               \
			api_limits_default(&dl);                                          \
			lim = &dl;                                                        \
		}                                                                         \
		memset(out, 0, sizeof *out);                                              \
		arena_init(&out->arena, 0);                                               \
		struct api__jp p = {.lim = lim, .a = &out->arena, .err = err};            \
		cJSON *root;                                                              \
		int rc = api__parse_root(&p, body, len, &root);                           \
		if (!rc) {                                                                \
			rc = body_fn(&p, root, out);                                      \
			cJSON_Delete(root);                                               \
		}                                                                         \
		if (rc)                                                                   \
			req_free(out);                                                    \
		return rc;                                                                \
	} while (0)

int api_parse_completion(const char *body, size_t len, const struct api_limits *lim,
			 struct api_completion_req *out, struct api_error *err)
{
	API_PARSE(completion_body, api_completion_req_free);
}

int api_parse_chat(const char *body, size_t len, const struct api_limits *lim,
		   struct api_chat_req *out, struct api_error *err)
{
	API_PARSE(chat_body, api_chat_req_free);
}

int api_parse_tokenize(const char *body, size_t len, const struct api_limits *lim,
		       struct api_tokenize_req *out, struct api_error *err)
{
	API_PARSE(tokenize_body, api_tokenize_req_free);
}

int api_parse_detokenize(const char *body, size_t len, const struct api_limits *lim,
			 struct api_detokenize_req *out, struct api_error *err)
{
	API_PARSE(detokenize_body, api_detokenize_req_free);
}

void api_completion_req_free(struct api_completion_req *r)
{
	arena_deinit(&r->arena);
	memset(r, 0, sizeof *r);
}

void api_chat_req_free(struct api_chat_req *r)
{
	arena_deinit(&r->arena);
	memset(r, 0, sizeof *r);
}

void api_tokenize_req_free(struct api_tokenize_req *r)
{
	arena_deinit(&r->arena);
	memset(r, 0, sizeof *r);
}

void api_detokenize_req_free(struct api_detokenize_req *r)
{
	arena_deinit(&r->arena);
	memset(r, 0, sizeof *r);
}

int api_resolve_max_tokens(bool has_max_tokens, int32_t max_tokens, size_t n_prompt,
			   int32_t max_model_len, const struct api_limits *lim, bool is_chat,
			   int32_t *out, struct api_error *err)
{
	struct api__jp p = {.lim = lim, .err = err};
	const char *what = is_chat ? "messages" : "prompt";
	size_t ctx = max_model_len > 0 ? (size_t)max_model_len : 0;
	if (n_prompt == 0)
		return api__bad(&p, what, "The %s is empty after tokenization; send at least one token.",
				what);
	if (has_max_tokens) {
		size_t total;
		if (max_tokens < 0 || ck_add(n_prompt, (size_t)max_tokens, &total) || total > ctx)
			return api__bad_code(
				&p, ERR_RANGE, "max_tokens",
				"This model's maximum context length is %zu tokens. However, you requested %zu tokens (%zu in the %s, %d in the completion). Please reduce the length of the %s or completion.",
				ctx, n_prompt + (size_t)(max_tokens > 0 ? max_tokens : 0), n_prompt,
				what, (int)max_tokens, what);
		*out = max_tokens;
		return 0;
	}
	if (n_prompt >= ctx)
		return api__bad_code(
			&p, ERR_RANGE, what,
			"This model's maximum context length is %zu tokens. However, your %s is %zu tokens, which leaves no room for the completion. Please reduce the length of the %s.",
			ctx, what, n_prompt, what);
	size_t room = ctx - n_prompt;
	if (lim && lim->max_tokens > 0 && room > (size_t)lim->max_tokens)
		room = (size_t)lim->max_tokens;
	*out = (int32_t)room;
	return 0;
}
