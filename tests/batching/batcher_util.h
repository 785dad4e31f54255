/* tests/batching/batcher_util.h — helpers shared by the batcher tests: a
 * wake-up waiter and an event collector that checks the event protocol
 * (TOKEN* per choice, one FINISH per choice, then one DONE or ERROR, nothing
 * after it). Header-only (static functions), test code only. */
#ifndef AORTA_TESTS_BATCHING_BATCHER_UTIL_H
#define AORTA_TESTS_BATCHING_BATCHER_UTIL_H

#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "batching/engine_thread.h"
#include "common/buf.h"

#define RES_MAXN 4
#define RES_MAXT 512

struct waiter {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int wakes;
};

static inline void waiter_init(struct waiter *w)
{
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	w->wakes = 0;
}

static inline void waiter_deinit(struct waiter *w)
{
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
}

/* The batcher's wake callback (runs on the engine thread). */
static inline void waiter_wake(void *arg)
{
	struct waiter *w = arg;
	pthread_mutex_lock(&w->mu);
	w->wakes++;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

/* Wait up to ms for a wake-up. */
static inline void waiter_wait(struct waiter *w, int ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += (long)ms * 1000000L;
	ts.tv_sec += ts.tv_nsec / 1000000000L;
	ts.tv_nsec %= 1000000000L;
	pthread_mutex_lock(&w->mu);
	if (w->wakes == 0)
		pthread_cond_timedwait(&w->cv, &w->mu, &ts);
	w->wakes = 0;
	pthread_mutex_unlock(&w->mu);
}

/* What one request received. */
struct res {
	int n;
	int32_t toks[RES_MAXN][RES_MAXT];
	int n_toks[RES_MAXN];
	struct buf text[RES_MAXN];
	bool fin_seen[RES_MAXN];
	enum finish_reason fin[RES_MAXN];
	int fin_completion[RES_MAXN];
	int n_fin;
	bool done, error;
	int err;
	struct bat_event end; /* the DONE / ERROR event */
};

static inline void res_init(struct res *r, int n)
{
	memset(r, 0, sizeof(*r));
	r->n = n;
	for (int i = 0; i < RES_MAXN; i++)
		buf_init(&r->text[i]);
}

static inline void res_deinit(struct res *r)
{
	for (int i = 0; i < RES_MAXN; i++)
		buf_deinit(&r->text[i]);
}

/* Apply one event to its request (ev->user is a struct res *). */
static inline void res_apply(struct bat_event *ev)
{
	struct res *r = ev->user;
	if (r->done || r->error)
		ck_abort_msg("request %llu: event %d after its end",
		             (unsigned long long)ev->request_id, ev->kind);
	switch (ev->kind) {
	case BAT_EV_TOKEN:
		if (ev->index < 0 || ev->index >= r->n || r->fin_seen[ev->index] ||
		    r->n_toks[ev->index] >= RES_MAXT)
			ck_abort_msg("bad TOKEN event (index %d)", ev->index);
		r->toks[ev->index][r->n_toks[ev->index]++] = ev->token;
		if (ev->text_len)
			buf_append(&r->text[ev->index], ev->text, ev->text_len);
		break;
	case BAT_EV_FINISH:
		if (ev->index < 0 || ev->index >= r->n || r->fin_seen[ev->index])
			ck_abort_msg("bad FINISH event (index %d)", ev->index);
		r->fin_seen[ev->index] = true;
		r->fin[ev->index] = ev->finish;
		r->fin_completion[ev->index] = ev->completion_tokens;
		r->n_fin++;
		break;
	case BAT_EV_DONE:
	case BAT_EV_ERROR:
		if (r->n_fin != r->n)
			ck_abort_msg("end event before every FINISH (%d of %d)", r->n_fin, r->n);
		r->done = ev->kind == BAT_EV_DONE;
		r->error = ev->kind == BAT_EV_ERROR;
		r->err = ev->err;
		r->end = *ev;
		r->end.text = NULL;
		break;
	}
	bat_event_clear(ev);
}

/* Drain events until `ended` reaches want (counting DONE and ERROR), or fail
 * after timeout_s. on_token (may be NULL) sees each TOKEN event first. */
static inline void drain_until(struct batcher *b, struct waiter *w, int *ended, int want,
                               int timeout_s, void (*on_token)(struct bat_event *, void *),
                               void *arg)
{
	struct bat_event evs[64];
	time_t t0 = time(NULL);
	while (*ended < want) {
		int n = bat_poll_events(b, evs, 64);
		for (int i = 0; i < n; i++) {
			if (on_token && evs[i].kind == BAT_EV_TOKEN)
				on_token(&evs[i], arg);
			bool end = evs[i].kind == BAT_EV_DONE || evs[i].kind == BAT_EV_ERROR;
			res_apply(&evs[i]);
			*ended += end;
		}
		if (n == 0) {
			if (time(NULL) - t0 > timeout_s)
				ck_abort_msg("timed out: %d of %d requests ended", *ended, want);
			waiter_wait(w, 50);
		}
	}
}

#endif
