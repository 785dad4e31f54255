/* common/log.h — leveled logging to stderr, as text or JSON lines.
 *
 * The sink is process-wide: main() calls log_configure() once before any
 * thread starts (the only mutable process state in aorta, read-only after
 * start-up). Any thread may log; each line is written with a single write(2)
 * so lines from different threads never interleave.
 *
 * Text:  2026-11-29T18:00:00.123Z INFO  [server] listening on 127.0.0.1:8080
 * JSON:  {"ts":"2026-11-29T18:00:00.123Z","level":"info","module":"server","msg":"..."}
 */
#ifndef AORTA_COMMON_LOG_H
#define AORTA_COMMON_LOG_H

#include <stdbool.h>

enum log_level { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3, LOG_OFF = 4 };

void log_configure(enum log_level min_level, bool json);
enum log_level log_min_level(void);
/* Parse "debug|info|warn|warning|error|off"; returns 0 or ERR_INVAL. */
int log_level_parse(const char *s, enum log_level *out);

void log_msg(enum log_level level, const char *module, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Format one line into out (for tests and for callers that want the text);
 * returns the length written (excluding NUL), truncating to cap-1. */
int log_format(char *out, int cap, bool json, enum log_level level, const char *module,
	       const char *msg);

#define log_debug(mod, ...) log_msg(LOG_DEBUG, mod, __VA_ARGS__)
#define log_info(mod, ...) log_msg(LOG_INFO, mod, __VA_ARGS__)
#define log_warn(mod, ...) log_msg(LOG_WARN, mod, __VA_ARGS__)
#define log_error(mod, ...) log_msg(LOG_ERROR, mod, __VA_ARGS__)

#endif
