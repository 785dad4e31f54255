/* api/chat_template.h — chat messages -> prompt text, for the common model
 * families, without a Jinja interpreter.
 *
 * The family is detected from the model's chat template text (distinctive
 * markers) or, when there is none, from an architecture name; each family's
 * renderer writes exactly what that family's reference template renders with
 * add_generation_prompt = true:
 *   llama3   "<|start_header_id|>"  Meta Llama 3 Instruct
 *   gemma    "<start_of_turn>" + "first_user_prefix"  Gemma 3 (system folded
 *            into the first user turn)
 *   gemma2   "<start_of_turn>" otherwise  Gemma 1/2 (a system message is rejected)
 *   qwen3    "<|im_start|>" + "<think>"  Qwen3 (ChatML; historic reasoning stripped)
 *   chatml   "<|im_start|>"         plain ChatML
 *   llama2   "[INST]" + "<<SYS>>"   Llama 2 chat
 *   mistral  "[INST]" otherwise     Mistral 7B Instruct v0.1 (no system role)
 * An unknown template falls back to ChatML and sets is_fallback (log it).
 * A known family whose template text shows a variant we do not reproduce
 * (Llama 3.1+'s "Cutting Knowledge Date" system header, a ChatML template
 * with a built-in default system prompt) sets is_approximate (log it too).
 * Conversations the reference template rejects (roles not alternating,
 * unsupported roles) are rejected with a 400 naming the message.
 *
 * Content given as an array of text parts is joined with "\n" (what vLLM
 * does for string-content templates); gemma's template iterates the parts
 * itself, trimming each. A null assistant content renders as "".
 *
 * add_generation_prompt = false is honoured where the template reads it
 * (a template text that never mentions it always adds the prompt).
 *
 * BOS: llama2, llama3, mistral and gemma templates emit the BOS token text
 * themselves; the renderer reports that (starts_with_bos) so the server
 * tokenizes without adding a second BOS.
 *
 * Threads: a struct api_chat_template is read-only after init; any thread.
 * Tests: tests/api/test_chat_template.c (expectations hand-derived from the
 * fixture tokenizers' chat_template fields).
 */
#ifndef AORTA_API_CHAT_TEMPLATE_H
#define AORTA_API_CHAT_TEMPLATE_H

#include <stdbool.h>

#include "api/api.h"
#include "common/buf.h"

enum api_chat_family {
	API_CHAT_CHATML,
	API_CHAT_QWEN3,
	API_CHAT_LLAMA2,
	API_CHAT_LLAMA3,
	API_CHAT_MISTRAL,
	API_CHAT_GEMMA,
	API_CHAT_GEMMA2,
};

struct api_chat_template {
	enum api_chat_family family;
	bool is_fallback;    /* nothing recognised: ChatML was chosen */
	bool is_approximate; /* a variant of the family we do not render exactly */
	bool gen_always;     /* the template text never reads add_generation_prompt
				(the llama3 fixture's): the prompt is always added */
	char bos[64];	  /* BOS / EOS token text the template emits */
	char eos[64];
};

/* "chatml", "qwen3", "llama2", "llama3", "mistral", "gemma", "gemma2". */
const char *api_chat_family_name(enum api_chat_family f);

/* template_text: the model's chat template or a --chat-template file's text
 * (NULL/"" = none); arch: architecture name ("llama", "MistralForCausalLM",
 * "gemma3", ...; may be NULL); bos/eos: the tokenizer's token texts (NULL =
 * the family's usual ones). Returns 0, or ERR_INVAL for a bos/eos over 63
 * bytes. */
int api_chat_template_init(struct api_chat_template *t, const char *template_text,
			   const char *arch, const char *bos, const char *eos);

/* Append the prompt for msgs to out. *starts_with_bos (may be NULL) says
 * whether the text begins with the BOS text emitted by the template. On a
 * conversation the template rejects: 400 in err, ERR_INVAL, out unchanged. */
int api_chat_render(const struct api_chat_template *t, const struct api_chat_msg *msgs,
		    int n_msgs, bool add_generation_prompt, struct buf *out,
		    bool *starts_with_bos, struct api_error *err);

#endif
