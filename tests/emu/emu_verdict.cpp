// tests/emu/emu_verdict.cpp — linked with -Wl,--wrap=kc_finish into the
// emulated kernel tests: once a test has printed its verdict (kc_finish),
// what it launches afterwards only times kernels (test_cuda_attn's bench,
// minutes of work for the emulator and meaningless timings), so those
// launches are skipped, with a note. Everything before the verdict runs.
#include <stdio.h>

#include "emu_rt.h"

extern "C" int __real_kc_finish(void);

extern "C" int __wrap_kc_finish(void)
{
	int rc = __real_kc_finish();
	fflush(stdout);
	fprintf(stderr, "emu: verdict printed; kernels launched after it (timing only) are "
			"not run, their timings mean nothing\n");
	emu_after_verdict = true;
	return rc;
}
