/* batching/finish.h — why a sequence stopped generating.
 *
 * The names are the OpenAI `finish_reason` strings where OpenAI has one
 * ("stop", "length"); "abort" is vLLM's name for a request cancelled by the
 * client or the server, "error" is for a sequence that failed inside the
 * engine. Read-only table; any thread.
 */
#ifndef AORTA_BATCHING_FINISH_H
#define AORTA_BATCHING_FINISH_H

enum finish_reason {
	FINISH_NONE = 0, /* still running */
	FINISH_STOP,	 /* EOS, a stop token id or a stop string */
	FINISH_LENGTH,	 /* max_tokens or the context limit */
	FINISH_ABORT,	 /* cancelled: client went away, shutdown, preempted for good */
	FINISH_ERROR,	 /* the engine failed for this sequence */
	FINISH__COUNT
};

/* "stop", "length", "abort", "error"; NULL for FINISH_NONE or an unknown value
 * (OpenAI sends `"finish_reason": null` while a stream is still running). */
static inline const char *finish_reason_str(enum finish_reason r)
{
	switch (r) {
	case FINISH_STOP:
		return "stop";
	case FINISH_LENGTH:
		return "length";
	case FINISH_ABORT:
		return "abort";
	case FINISH_ERROR:
		return "error";
	default:
		return 0;
	}
}

#endif
