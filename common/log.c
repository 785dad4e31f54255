/* common/log.c — stderr logger. Tested in tests/unit/test_common.c (log_format). */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "err.h"

/* Process-wide sink settings; written by log_configure() before threads start. */
static _Atomic int g_min_level = LOG_INFO;
static _Atomic bool g_json = false;

static const char *const level_names[] = { "debug", "info", "warn", "error", "off" };
static const char *const level_tags[] = { "DEBUG", "INFO ", "WARN ", "ERROR", "OFF  " };

void log_configure(enum log_level min_level, bool json)
{
	atomic_store(&g_min_level, (int)min_level);
	atomic_store(&g_json, json);
}

enum log_level log_min_level(void)
{
	return (enum log_level)atomic_load(&g_min_level);
}

int log_level_parse(const char *s, enum log_level *out)
{
	static const struct {
		const char *name;
		enum log_level level;
	} names[] = {
		{ "debug", LOG_DEBUG }, { "info", LOG_INFO },	{ "warn", LOG_WARN },
		{ "warning", LOG_WARN }, { "error", LOG_ERROR }, { "off", LOG_OFF },
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		if (strcasecmp(s, names[i].name) == 0) {
			*out = names[i].level;
			return 0;
		}
	}
	return ERR_INVAL;
}

static int put(char *out, int cap, int pos, const char *s, size_t n)
{
	for (size_t i = 0; i < n && pos < cap - 1; i++)
		out[pos++] = s[i];
	return pos;
}

/* JSON string escaping of msg into out. */
static int put_json_str(char *out, int cap, int pos, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	for (; *s && pos < cap - 1; s++) {
		unsigned char c = (unsigned char)*s;
		char esc[7];
		size_t n = 0;
		if (c == '"' || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			n = 2;
		} else if (c == '\n') {
			memcpy(esc, "\\n", 2);
			n = 2;
		} else if (c == '\t') {
			memcpy(esc, "\\t", 2);
			n = 2;
		} else if (c < 0x20) {
			memcpy(esc, "\\u00", 4);
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 15];
			n = 6;
		} else {
			esc[0] = (char)c;
			n = 1;
		}
		if (pos + (int)n >= cap - 1)
			break;
		pos = put(out, cap, pos, esc, n);
	}
	return pos;
}

int log_format(char *out, int cap, bool json, enum log_level level, const char *module,
	       const char *msg)
{
	if (cap <= 0)
		return 0;
	if ((int)level < 0 || level > LOG_OFF)
		level = LOG_ERROR;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	char stamp[64];
	snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
		 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
		 (long)((unsigned long)ts.tv_nsec / 1000000u) % 1000);
	int pos = 0;
	if (json) {
		char head[160];
		int n = snprintf(head, sizeof head, "{\"ts\":\"%s\",\"level\":\"%s\",\"module\":\"",
				 stamp, level_names[level]);
		pos = put(out, cap, pos, head, (size_t)n);
		pos = put_json_str(out, cap, pos, module ? module : "");
		pos = put(out, cap, pos, "\",\"msg\":\"", 9);
		pos = put_json_str(out, cap, pos, msg);
		/* always close the object, even when the message was truncated */
		if (pos > cap - 4)
			pos = cap - 4 > 0 ? cap - 4 : 0;
		pos = put(out, cap, pos, "\"}", 2);
	} else {
		char head[160];
		int n = snprintf(head, sizeof head, "%s %s [%s] ", stamp, level_tags[level],
				 module ? module : "-");
		pos = put(out, cap, pos, head, (size_t)n);
		pos = put(out, cap, pos, msg, strlen(msg));
	}
	out[pos] = '\0';
	return pos;
}

void log_msg(enum log_level level, const char *module, const char *fmt, ...)
{
	if ((int)level < atomic_load(&g_min_level) || level >= LOG_OFF)
		return;
	char msg[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	char line[4096];
	int n = log_format(line, (int)sizeof line - 1, atomic_load(&g_json), level, module, msg);
	line[n++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, (size_t)n);
	(void)w;
}
