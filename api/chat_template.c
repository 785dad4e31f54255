/* api/chat_template.c — family detection and one renderer per chat template
 * family (see chat_template.h for the list and the choices). Each renderer
 * follows its reference Jinja template statement by statement; comments
 * quote the template where the behaviour is surprising. Python's str.strip()
 * (Jinja's `trim`) strips Unicode whitespace, so strip() below does too.
 * Tests: tests/api/test_chat_template.c.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "api/api_internal.h"
#include "api/chat_template.h"
#include "common/err.h"

#define TRY(expr)                   \
	do {                        \
		int rc_ = (expr);   \
		if (rc_)            \
			return rc_; \
	} while (0)

const char *api_chat_family_name(enum api_chat_family f)
{
	switch (f) {
	case API_CHAT_CHATML:
		return "chatml";
	case API_CHAT_QWEN3:
		return "qwen3";
	case API_CHAT_LLAMA2:
		return "llama2";
	case API_CHAT_LLAMA3:
		return "llama3";
	case API_CHAT_MISTRAL:
		return "mistral";
	case API_CHAT_GEMMA:
		return "gemma";
	case API_CHAT_GEMMA2:
		return "gemma2";
	}
	return "unknown";
}

static bool ci_contains(const char *hay, const char *needle)
{
	size_t n = strlen(needle);
	for (; *hay; hay++)
		if (!strncasecmp(hay, needle, n))
			return true;
	return false;
}

static bool detect_from_text(const char *s, enum api_chat_family *f)
{
	if (strstr(s, "<|start_header_id|>"))
		*f = API_CHAT_LLAMA3;
	else if (strstr(s, "<start_of_turn>"))
		*f = strstr(s, "first_user_prefix") ? API_CHAT_GEMMA : API_CHAT_GEMMA2;
	else if (strstr(s, "<|im_start|>"))
		*f = strstr(s, "</think>") ? API_CHAT_QWEN3 : API_CHAT_CHATML;
	else if (strstr(s, "[INST]"))
		*f = strstr(s, "<<SYS>>") ? API_CHAT_LLAMA2 : API_CHAT_MISTRAL;
	else
		return false;
	return true;
}

static bool detect_from_arch(const char *a, enum api_chat_family *f)
{
	if (ci_contains(a, "gemma3"))
		*f = API_CHAT_GEMMA;
	else if (ci_contains(a, "gemma"))
		*f = API_CHAT_GEMMA2;
	else if (ci_contains(a, "qwen3"))
		*f = API_CHAT_QWEN3;
	else if (ci_contains(a, "qwen"))
		*f = API_CHAT_CHATML;
	else if (ci_contains(a, "mistral"))
		*f = API_CHAT_MISTRAL;
	else if (ci_contains(a, "llama3") || ci_contains(a, "llama-3"))
		*f = API_CHAT_LLAMA3;
	else if (ci_contains(a, "llama"))
		*f = API_CHAT_LLAMA2;
	else
		return false;
	return true;
}

int api_chat_template_init(struct api_chat_template *t, const char *template_text,
			   const char *arch, const char *bos, const char *eos)
{
	memset(t, 0, sizeof *t);
	enum api_chat_family f = API_CHAT_CHATML;
	bool found = false;
	if (template_text && *template_text) {
		found = detect_from_text(template_text, &f);
		t->gen_always = found && !strstr(template_text, "add_generation_prompt");
		/* Variants whose extra text we do not reproduce. */
		t->is_approximate =
			found && ((f == API_CHAT_LLAMA3 && strstr(template_text, "Cutting Knowledge Date")) ||
				  (f == API_CHAT_CHATML && strstr(template_text, "You are")));
	}
	else if (arch && *arch)
		found = detect_from_arch(arch, &f);
	t->family = f;
	t->is_fallback = !found;
	static const char *const def_bos[] = {
		[API_CHAT_CHATML] = "", [API_CHAT_QWEN3] = "", [API_CHAT_LLAMA2] = "<s>",
		[API_CHAT_LLAMA3] = "<|begin_of_text|>", [API_CHAT_MISTRAL] = "<s>",
		[API_CHAT_GEMMA] = "<bos>", [API_CHAT_GEMMA2] = "<bos>",
	};
	static const char *const def_eos[] = {
		[API_CHAT_CHATML] = "<|im_end|>", [API_CHAT_QWEN3] = "<|im_end|>",
		[API_CHAT_LLAMA2] = "</s>", [API_CHAT_LLAMA3] = "<|eot_id|>",
		[API_CHAT_MISTRAL] = "</s>", [API_CHAT_GEMMA] = "<eos>",
		[API_CHAT_GEMMA2] = "<eos>",
	};
	bos = bos ? bos : def_bos[f];
	eos = eos ? eos : def_eos[f];
	if (strlen(bos) >= sizeof t->bos || strlen(eos) >= sizeof t->eos)
		return ERR_INVAL;
	snprintf(t->bos, sizeof t->bos, "%s", bos);
	snprintf(t->eos, sizeof t->eos, "%s", eos);
	return 0;
}

/* ---- string helpers ------------------------------------------------------ */

struct span {
	const char *p;
	size_t n;
};

/* Length of the Python-whitespace character at s (n bytes left), 0 if none. */
static size_t space_at(const unsigned char *s, size_t n)
{
	if (*s == ' ' || (*s >= 0x09 && *s <= 0x0d) || (*s >= 0x1c && *s <= 0x1f))
		return 1;
	if (n >= 2 && s[0] == 0xC2 && (s[1] == 0x85 || s[1] == 0xA0))
		return 2;
	if (n >= 3 && s[0] == 0xE1 && s[1] == 0x9A && s[2] == 0x80) /* U+1680 */
		return 3;
	/* U+2000-200A, U+2028, U+2029, U+202F */
	if (n >= 3 && s[0] == 0xE2 && s[1] == 0x80 &&
	    ((s[2] >= 0x80 && s[2] <= 0x8A) || s[2] == 0xA8 || s[2] == 0xA9 || s[2] == 0xAF))
		return 3;
	if (n >= 3 && s[0] == 0xE2 && s[1] == 0x81 && s[2] == 0x9F) /* U+205F */
		return 3;
	if (n >= 3 && s[0] == 0xE3 && s[1] == 0x80 && s[2] == 0x80) /* U+3000 */
		return 3;
	return 0;
}

/* Is there a whitespace character ending exactly at s + n? Returns its length. */
static size_t space_before(const unsigned char *s, size_t n)
{
	for (size_t k = 1; k <= 3 && k <= n; k++)
		if (space_at(s + n - k, k) == k)
			return k;
	return 0;
}

static struct span strip(struct span s)
{
	const unsigned char *u = (const unsigned char *)s.p;
	size_t a = 0, b = s.n, k;
	while (a < b && (k = space_at(u + a, b - a)))
		a += k;
	while (b > a && (k = space_before(u + a, b - a)))
		b -= k;
	return (struct span){s.p + a, b - a};
}

static struct span lstrip_nl(struct span s)
{
	while (s.n && *s.p == '\n') {
		s.p++;
		s.n--;
	}
	return s;
}

static struct span rstrip_nl(struct span s)
{
	while (s.n && s.p[s.n - 1] == '\n')
		s.n--;
	return s;
}

static const char *find(struct span s, const char *needle)
{
	size_t m = strlen(needle);
	for (size_t i = 0; i + m <= s.n; i++)
		if (!memcmp(s.p + i, needle, m))
			return s.p + i;
	return NULL;
}

static const char *find_last(struct span s, const char *needle)
{
	size_t m = strlen(needle);
	for (size_t i = s.n; i >= m; i--)
		if (!memcmp(s.p + i - m, needle, m))
			return s.p + i - m;
	return NULL;
}

static int put(struct buf *o, struct span s)
{
	return buf_append(o, s.p, s.n);
}

/* The message content as one string: a string content as is, text parts
 * joined with "\n" (into tmp). */
static int content_of(const struct api_chat_msg *m, struct buf *tmp, struct span *out)
{
	if (m->n_parts == 0) {
		*out = (struct span){"", 0};
		return 0;
	}
	if (m->n_parts == 1) {
		*out = (struct span){m->parts[0], m->part_len[0]};
		return 0;
	}
	buf_clear(tmp);
	for (int i = 0; i < m->n_parts; i++) {
		if (i)
			TRY(buf_append_char(tmp, '\n'));
		TRY(buf_append(tmp, m->parts[i], m->part_len[i]));
	}
	*out = (struct span){tmp->data, tmp->len};
	return 0;
}

static int reject(struct api_error *err, int i, const char *why)
{
	char param[48];
	snprintf(param, sizeof param, "messages[%d].role", i);
	return api_error_set(err, ERR_INVAL, 400, "invalid_request_error", param, NULL,
			     "%s (chat template rejects messages[%d])", why, i);
}

static const char *const ALTERNATE =
	"Conversation roles must alternate user/assistant/user/assistant/...";

/* ---- families ------------------------------------------------------------ */

struct ctx {
	const struct api_chat_template *t;
	const struct api_chat_msg *m;
	int n;
	bool gen;
	struct buf *o;
	struct buf *tmp;
	bool bos;
	struct api_error *err;
};

static int render_llama3(struct ctx *c)
{
	for (int i = 0; i < c->n; i++) {
		struct span s;
		TRY(content_of(&c->m[i], c->tmp, &s));
		/* bos_token is prepended to the first message only */
		if (i == 0) {
			TRY(buf_append_str(c->o, c->t->bos));
			c->bos = c->t->bos[0] != 0;
		}
		TRY(buf_printf(c->o, "<|start_header_id|>%s<|end_header_id|>\n\n",
			       api_role_str(c->m[i].role)));
		TRY(put(c->o, strip(s))); /* message['content'] | trim */
		TRY(buf_append_str(c->o, "<|eot_id|>"));
	}
	if (c->gen)
		TRY(buf_append_str(c->o, "<|start_header_id|>assistant<|end_header_id|>\n\n"));
	return 0;
}

static int render_chatml(struct ctx *c)
{
	for (int i = 0; i < c->n; i++) {
		struct span s;
		TRY(content_of(&c->m[i], c->tmp, &s));
		TRY(buf_printf(c->o, "<|im_start|>%s\n", api_role_str(c->m[i].role)));
		TRY(put(c->o, s));
		TRY(buf_append_str(c->o, "<|im_end|>\n"));
	}
	if (c->gen)
		TRY(buf_append_str(c->o, "<|im_start|>assistant\n"));
	return 0;
}

static bool is_tool_response(struct span s)
{
	static const char open[] = "<tool_response>", close[] = "</tool_response>";
	return s.n >= sizeof open - 1 && !memcmp(s.p, open, sizeof open - 1) &&
	       s.n >= sizeof close - 1 && !memcmp(s.p + s.n - (sizeof close - 1), close, sizeof close - 1);
}

static int qwen3_assistant(struct ctx *c, int i, int last_query, struct span raw)
{
	struct span content = raw, reasoning = {"", 0};
	const char *end_think = find(raw, "</think>");
	if (end_think) {
		/* content = split('</think>')[-1].lstrip('\n') */
		const char *last = find_last(raw, "</think>");
		size_t off = (size_t)(last - raw.p) + 8;
		content = lstrip_nl((struct span){last + 8, raw.n - off});
		/* reasoning = split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
		struct span head = rstrip_nl((struct span){raw.p, (size_t)(end_think - raw.p)});
		const char *open = find_last(head, "<think>");
		if (open)
			head = (struct span){open + 7, head.n - (size_t)(open + 7 - head.p)};
		reasoning = lstrip_nl(head);
	}
	if (i > last_query && (i == c->n - 1 || reasoning.n)) {
		TRY(buf_append_str(c->o, "<|im_start|>assistant\n<think>\n"));
		TRY(put(c->o, rstrip_nl(lstrip_nl(reasoning))));
		TRY(buf_append_str(c->o, "\n</think>\n\n"));
		TRY(put(c->o, lstrip_nl(content)));
	} else {
		TRY(buf_append_str(c->o, "<|im_start|>assistant\n"));
		TRY(put(c->o, content));
	}
	return buf_append_str(c->o, "<|im_end|>\n");
}

static int render_qwen3(struct ctx *c)
{
	struct span s;
	if (c->m[0].role == API_ROLE_SYSTEM) {
		TRY(content_of(&c->m[0], c->tmp, &s));
		TRY(buf_append_str(c->o, "<|im_start|>system\n"));
		TRY(put(c->o, s));
		TRY(buf_append_str(c->o, "<|im_end|>\n"));
	}
	/* ns.last_query_index: the last user message that is not a tool response */
	int last_query = c->n - 1;
	for (int i = c->n - 1; i >= 0; i--) {
		TRY(content_of(&c->m[i], c->tmp, &s));
		if (c->m[i].role == API_ROLE_USER && !is_tool_response(s)) {
			last_query = i;
			break;
		}
	}
	for (int i = 0; i < c->n; i++) {
		const struct api_chat_msg *m = &c->m[i];
		TRY(content_of(m, c->tmp, &s));
		if (m->role == API_ROLE_USER || (m->role == API_ROLE_SYSTEM && i > 0)) {
			TRY(buf_printf(c->o, "<|im_start|>%s\n", api_role_str(m->role)));
			TRY(put(c->o, s));
			TRY(buf_append_str(c->o, "<|im_end|>\n"));
		} else if (m->role == API_ROLE_ASSISTANT) {
			TRY(qwen3_assistant(c, i, last_query, s));
		}
	}
	if (c->gen)
		TRY(buf_append_str(c->o, "<|im_start|>assistant\n"));
	return 0;
}

/* Llama 2: the system message goes inside the first [INST] between <<SYS>>
 * markers; every user turn starts with bos_token; assistant turns end with
 * eos_token. The template has no generation prompt (it ends at [/INST]). */
static int render_llama2(struct ctx *c)
{
	int first = 0;
	struct span sys = {"", 0};
	struct buf sysbuf;
	buf_init(&sysbuf);
	bool has_sys = c->m[0].role == API_ROLE_SYSTEM;
	int rc = 0;
	if (has_sys) {
		first = 1;
		rc = content_of(&c->m[0], &sysbuf, &sys);
	}
	for (int i = first; !rc && i < c->n; i++) {
		int k = i - first; /* loop.index0 */
		const struct api_chat_msg *m = &c->m[i];
		if ((m->role == API_ROLE_USER) != (k % 2 == 0)) {
			rc = reject(c->err, i, ALTERNATE);
			break;
		}
		struct span s;
		if ((rc = content_of(m, c->tmp, &s)))
			break;
		if (m->role == API_ROLE_USER) {
			if (k == 0 && c->o->len == 0 && c->t->bos[0])
				c->bos = true;
			rc = buf_append_str(c->o, c->t->bos);
			rc = rc ? rc : buf_append_str(c->o, "[INST] ");
			/* (sys block + content).strip(): the strip sees the
			 * whole string, so only the user text's tail and a
			 * system prompt's head (after "<<SYS>>") are not touched */
			if (!rc && k == 0 && has_sys) {
				struct buf whole;
				buf_init(&whole);
				rc = buf_append_str(&whole, "<<SYS>>\n");
				rc = rc ? rc : put(&whole, sys);
				rc = rc ? rc : buf_append_str(&whole, "\n<</SYS>>\n\n");
				rc = rc ? rc : put(&whole, s);
				if (!rc)
					rc = put(c->o, strip((struct span){whole.data, whole.len}));
				buf_deinit(&whole);
			} else if (!rc) {
				rc = put(c->o, strip(s));
			}
			rc = rc ? rc : buf_append_str(c->o, " [/INST]");
		} else if (m->role == API_ROLE_ASSISTANT) {
			rc = buf_append_char(c->o, ' ');
			rc = rc ? rc : put(c->o, strip(s));
			rc = rc ? rc : buf_printf(c->o, " %s", c->t->eos);
		}
		/* a system message at an odd position passes the alternation
		 * check and renders nothing, as in the template */
	}
	buf_deinit(&sysbuf);
	return rc;
}

/* Mistral 7B Instruct v0.1: bos once, strictly alternating user/assistant,
 * no system role. */
static int render_mistral(struct ctx *c)
{
	for (int i = 0; i < c->n; i++) {
		const struct api_chat_msg *m = &c->m[i];
		if ((m->role == API_ROLE_USER) != (i % 2 == 0))
			return reject(c->err, i,
				      m->role == API_ROLE_SYSTEM
					      ? "The Mistral chat template supports no system message; conversation roles must alternate user/assistant/user/assistant/..."
					      : ALTERNATE);
		if (m->role == API_ROLE_SYSTEM)
			return reject(c->err, i, "Only user and assistant roles are supported!");
	}
	TRY(buf_append_str(c->o, c->t->bos));
	c->bos = c->t->bos[0] != 0;
	for (int i = 0; i < c->n; i++) {
		struct span s;
		TRY(content_of(&c->m[i], c->tmp, &s));
		if (c->m[i].role == API_ROLE_USER) {
			TRY(buf_append_str(c->o, "[INST] "));
			TRY(put(c->o, s));
			TRY(buf_append_str(c->o, " [/INST]"));
		} else {
			TRY(put(c->o, s));
			TRY(buf_append_str(c->o, c->t->eos));
		}
	}
	return 0;
}

/* Gemma 3: no system role — the first message, if system, becomes a prefix
 * (its first text + "\n\n") of the first turn; "assistant" is "model";
 * content is trimmed (each text part separately). */
static int render_gemma(struct ctx *c)
{
	int first = 0;
	struct span prefix = {"", 0};
	if (c->m[0].role == API_ROLE_SYSTEM) {
		const struct api_chat_msg *sm = &c->m[0];
		if (sm->content_is_array && sm->n_parts == 0)
			return reject(c->err, 0, "The system message has no text part");
		prefix = (struct span){sm->parts[0], sm->part_len[0]};
		first = 1;
	}
	for (int i = first; i < c->n; i++) {
		const struct api_chat_msg *m = &c->m[i];
		if ((m->role == API_ROLE_USER) != ((i - first) % 2 == 0))
			return reject(c->err, i, ALTERNATE);
		if (m->n_parts == 0 && !m->content_is_array)
			return reject(c->err, i, "Invalid content type");
	}
	TRY(buf_append_str(c->o, c->t->bos));
	c->bos = c->t->bos[0] != 0;
	for (int i = first; i < c->n; i++) {
		const struct api_chat_msg *m = &c->m[i];
		const char *role = m->role == API_ROLE_ASSISTANT ? "model" : api_role_str(m->role);
		TRY(buf_printf(c->o, "<start_of_turn>%s\n", role));
		if (i == first && first) {
			TRY(put(c->o, prefix));
			TRY(buf_append_str(c->o, "\n\n"));
		}
		for (int k = 0; k < m->n_parts; k++)
			TRY(put(c->o, strip((struct span){m->parts[k], m->part_len[k]})));
		TRY(buf_append_str(c->o, "<end_of_turn>\n"));
	}
	if (c->gen)
		TRY(buf_append_str(c->o, "<start_of_turn>model\n"));
	return 0;
}

/* Gemma 1/2: like Gemma 3 but a system message is an error, and the content
 * is one string (parts joined) trimmed as a whole. */
static int render_gemma2(struct ctx *c)
{
	if (c->m[0].role == API_ROLE_SYSTEM)
		return reject(c->err, 0, "System role not supported");
	for (int i = 0; i < c->n; i++)
		if ((c->m[i].role == API_ROLE_USER) != (i % 2 == 0))
			return reject(c->err, i, ALTERNATE);
	TRY(buf_append_str(c->o, c->t->bos));
	c->bos = c->t->bos[0] != 0;
	for (int i = 0; i < c->n; i++) {
		const struct api_chat_msg *m = &c->m[i];
		struct span s;
		TRY(content_of(m, c->tmp, &s));
		const char *role = m->role == API_ROLE_ASSISTANT ? "model" : api_role_str(m->role);
		TRY(buf_printf(c->o, "<start_of_turn>%s\n", role));
		TRY(put(c->o, strip(s)));
		TRY(buf_append_str(c->o, "<end_of_turn>\n"));
	}
	if (c->gen)
		TRY(buf_append_str(c->o, "<start_of_turn>model\n"));
	return 0;
}

int api_chat_render(const struct api_chat_template *t, const struct api_chat_msg *msgs,
		    int n_msgs, bool add_generation_prompt, struct buf *out,
		    bool *starts_with_bos, struct api_error *err)
{
	if (n_msgs < 1)
		return api_error_set(err, ERR_INVAL, 400, "invalid_request_error", "messages", NULL,
				     "'messages' must not be empty");
	/* Render into a scratch buffer so `out` is untouched on rejection. */
	struct buf o, tmp;
	buf_init(&o);
	buf_init(&tmp);
	struct ctx c = {.t = t, .m = msgs, .n = n_msgs, .gen = add_generation_prompt || t->gen_always,
			.o = &o, .tmp = &tmp, .err = err};
	int rc;
	switch (t->family) {
	case API_CHAT_LLAMA3:
		rc = render_llama3(&c);
		break;
	case API_CHAT_QWEN3:
		rc = render_qwen3(&c);
		break;
	case API_CHAT_LLAMA2:
		rc = render_llama2(&c);
		break;
	case API_CHAT_MISTRAL:
		rc = render_mistral(&c);
		break;
	case API_CHAT_GEMMA:
		rc = render_gemma(&c);
		break;
	case API_CHAT_GEMMA2:
		rc = render_gemma2(&c);
		break;
	default:
		rc = render_chatml(&c);
		break;
	}
	if (!rc)
		rc = buf_append(out, o.data ? o.data : "", o.len);
	if (!rc && starts_with_bos)
		*starts_with_bos = c.bos;
	if (rc && rc != ERR_INVAL)
		api_error_from_err(err, rc, NULL, "could not render the chat template: %s",
				   err_str(rc));
	buf_deinit(&o);
	buf_deinit(&tmp);
	return rc;
}
