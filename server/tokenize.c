/* server/tokenize.c — POST /tokenize and POST /detokenize (vLLM's extra
 * endpoints): a prompt or chat messages (rendered with the chat template) to
 * token ids, and token ids back to text, on the loop thread with the loaded
 * tokenizer. Owns no state. Tested end to end in tests/e2e/.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/tok/tokenizer.h"
#include "srv.h"

void tokenize_handle(struct srv *s, struct http_req *r)
{
	size_t len;
	const char *body = http_req_body(r, &len);
	struct api_tokenize_req q;
	struct api_error e;
	if (api_parse_tokenize(body, len, &s->limits, &q, &e)) {
		srv_respond_error(s, r, &e);
		return;
	}
	if (q.model && strcmp(q.model, s->model_name) != 0) {
		api_error_model_not_found(&e, q.model);
		srv_respond_error(s, r, &e);
		api_tokenize_req_free(&q);
		return;
	}
	struct buf text;
	buf_init(&text);
	const char *src = q.prompt;
	size_t src_len = q.prompt_len;
	unsigned flags = q.add_special_tokens ? TOK_ADD_SPECIAL : 0;
	flags |= TOK_PARSE_SPECIAL;
	if (q.is_chat) {
		bool has_bos = false;
		if (api_chat_render(&s->tmpl, q.msgs, q.n_msgs, q.add_generation_prompt, &text,
				    &has_bos, &e)) {
			srv_respond_error(s, r, &e);
			goto out;
		}
		if (has_bos)
			flags &= ~(unsigned)TOK_ADD_SPECIAL;
		src = text.data ? text.data : "";
		src_len = text.len;
	}
	int32_t *ids = NULL;
	size_t n = 0;
	int rc = tok_encode(s->tok, src, src_len, flags, &ids, &n);
	if (rc) {
		api_error_from_err(&e, rc, "prompt", "cannot tokenize the input: %s", err_str(rc));
		srv_respond_error(s, r, &e);
	} else {
		/* the vocabulary pieces ("Ġhello"), as vLLM's convert_ids_to_tokens */
		const char **strs = q.return_token_strs ? calloc(n + 1, sizeof *strs) : NULL;
		size_t *lens = q.return_token_strs ? calloc(n + 1, sizeof *lens) : NULL;
		if (q.return_token_strs && (!strs || !lens)) {
			api_error_from_err(&e, ERR_NOMEM, NULL, "out of memory");
			srv_respond_error(s, r, &e);
		} else {
			for (size_t i = 0; strs && i < n; i++)
				strs[i] = tok_token_text(s->tok, ids[i], &lens[i]);
			struct buf b;
			buf_init(&b);
			api_render_tokenize(&b, ids, n, s->max_model_len, strs, lens);
			srv_respond_json(s, r, 200, &b);
			buf_deinit(&b);
		}
		free(strs);
		free(lens);
	}
	free(ids);
out:
	buf_deinit(&text);
	api_tokenize_req_free(&q);
}

void tokenize_handle_detokenize(struct srv *s, struct http_req *r)
{
	size_t len;
	const char *body = http_req_body(r, &len);
	struct api_detokenize_req q;
	struct api_error e;
	if (api_parse_detokenize(body, len, &s->limits, &q, &e)) {
		srv_respond_error(s, r, &e);
		return;
	}
	if (q.model && strcmp(q.model, s->model_name) != 0) {
		api_error_model_not_found(&e, q.model);
		srv_respond_error(s, r, &e);
		api_detokenize_req_free(&q);
		return;
	}
	struct buf text;
	buf_init(&text);
	int rc = tok_decode(s->tok, q.tokens, q.n_tokens, 0, &text);
	if (rc) {
		api_error_from_err(&e, rc, "tokens", "cannot detokenize: %s (vocabulary size %d)",
				   err_str(rc), (int)tok_vocab_size(s->tok));
		srv_respond_error(s, r, &e);
	} else {
		struct buf b;
		buf_init(&b);
		api_render_detokenize(&b, text.data ? text.data : "", text.len);
		srv_respond_json(s, r, 200, &b);
		buf_deinit(&b);
	}
	buf_deinit(&text);
	api_detokenize_req_free(&q);
}
