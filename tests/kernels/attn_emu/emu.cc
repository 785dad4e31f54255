// tests/kernels/attn_emu/emu.cc — the fiber scheduler of emu.h and the
// kcuda.h runtime on host memory (no-ops for streams; events switch launches
// off so the benchmark at the end of test_cuda_attn is skipped).
#include "emu.h"
extern "C" {
#include "kernels/cuda/kcuda.h"
#include "common/err.h"
}

uint3e threadIdx, blockIdx;
dim3 blockDim, gridDim;
unsigned char *emu_dyn_smem;
int emu_max_dyn_smem_set;
static bool emu_skip;

// ---- context switch (x86-64 SysV) ----
extern "C" void emu_switch(void **save_sp, void *new_sp);
asm(R"(
.text
.globl emu_switch
emu_switch:
	pushq %rbp
	pushq %rbx
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	movq %rsp, (%rdi)
	movq %rsi, %rsp
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %rbx
	popq %rbp
	ret
)");

enum fstate { RUN, WAIT_BLOCK, WAIT_WARP, DONE };
struct fiber {
	void *sp;
	unsigned char *stack;
	fstate st;
	float sh_val, sh_res;
	int sh_off;
	unsigned sh_mask;
	int sh_width;
};
static const size_t STACK = 256 * 1024;
static fiber *fibers;
static int n_fib, cur;
static void *sched_sp;
static const std::function<void()> *kernel_fn;
static long long n_shfl, n_sync;

static void yield_to_sched()
{
	emu_switch(&fibers[cur].sp, sched_sp);
}

static void fiber_main()
{
	(*kernel_fn)();
	fibers[cur].st = DONE;
	yield_to_sched();
	abort(); // never resumed
}

void __syncthreads(void)
{
	n_sync++;
	fibers[cur].st = WAIT_BLOCK;
	yield_to_sched();
}

float __shfl_xor_sync(unsigned mask, float v, int o, int width)
{
	n_shfl++;
	fiber &f = fibers[cur];
	f.sh_val = v;
	f.sh_off = o;
	f.sh_mask = mask;
	f.sh_width = width;
	f.st = WAIT_WARP;
	yield_to_sched();
	return f.sh_res;
}

static void fail(const char *msg)
{
	fprintf(stderr, "EMU ERROR: %s (block %u,%u,%u)\n", msg, blockIdx.x, blockIdx.y, blockIdx.z);
	for (int i = 0; i < n_fib; i++)
		fprintf(stderr, "%d", fibers[i].st);
	fprintf(stderr, "\n");
	exit(3);
}

static void run_block()
{
	for (int i = 0; i < n_fib; i++) {
		fiber &f = fibers[i];
		uintptr_t top = ((uintptr_t)(f.stack + STACK)) & ~(uintptr_t)15;
		void **sp = (void **)top;
		*--sp = nullptr;		  // fake return address of fiber_main
		*--sp = (void *)&fiber_main; // popped by ret
		for (int k = 0; k < 6; k++)
			*--sp = nullptr;
		f.sp = sp;
		f.st = RUN;
	}
	for (;;) {
		bool ran = false;
		for (int i = 0; i < n_fib; i++) {
			if (fibers[i].st != RUN)
				continue;
			cur = i;
			threadIdx.x = (unsigned)i;
			threadIdx.y = threadIdx.z = 0;
			emu_switch(&sched_sp, fibers[i].sp);
			ran = true;
		}
		int live = 0, at_block = 0;
		for (int i = 0; i < n_fib; i++) {
			live += fibers[i].st != DONE;
			at_block += fibers[i].st == WAIT_BLOCK;
		}
		if (live == 0)
			return;
		bool released = false;
		if (at_block == live && at_block > 0) {
			if (live != n_fib)
				fail("__syncthreads with exited threads");
			for (int i = 0; i < n_fib; i++)
				fibers[i].st = RUN;
			released = true;
		}
		for (int w = 0; w * 32 < n_fib; w++) {
			int n = 0, lanes = n_fib - w * 32 < 32 ? n_fib - w * 32 : 32;
			for (int l = 0; l < lanes; l++)
				n += fibers[w * 32 + l].st == WAIT_WARP;
			if (n == 0)
				continue;
			if (n != lanes)
				continue; // maybe later
			if (lanes != 32)
				fail("shuffle in a partial warp");
			fiber *L = &fibers[w * 32];
			for (int l = 0; l < 32; l++) {
				if (L[l].sh_mask != 0xffffffffu || L[l].sh_off != L[0].sh_off ||
				    L[l].sh_width != 32)
					fail("shuffle: mask/offset mismatch");
			}
			for (int l = 0; l < 32; l++)
				L[l].sh_res = L[l ^ L[0].sh_off].sh_val;
			for (int l = 0; l < 32; l++)
				L[l].st = RUN;
			released = true;
		}
		if (!ran && !released)
			fail("deadlock (lanes diverged at a shuffle or barrier)");
	}
}

void emu_run_grid(dim3 grid, dim3 block, size_t smem, const std::function<void()> &fn)
{
	if (emu_skip)
		return;
	if (block.x > 1024 || block.y != 1 || block.z != 1 || grid.y > 65535 || grid.z > 65535 ||
	    grid.x == 0 || grid.y == 0 || grid.z == 0)
		fail("bad launch dims");
	if (smem > 99 * 1024)
		fail("dynamic smem over sm_89's 99 KB");
	if (smem > 48 * 1024 && (int)smem > emu_max_dyn_smem_set)
		fail("dynamic smem over 48 KB without cudaFuncSetAttribute");
	n_fib = (int)block.x;
	if (!fibers) {
		fibers = (fiber *)calloc(1024, sizeof(fiber));
		for (int i = 0; i < 1024; i++)
			fibers[i].stack = (unsigned char *)malloc(STACK);
	}
	free(emu_dyn_smem);
	emu_dyn_smem = (unsigned char *)aligned_alloc(256, smem + 256);
	memset(emu_dyn_smem, 0xff, smem + 256); // garbage: NaN floats
	blockDim = block;
	gridDim = grid;
	kernel_fn = &fn;
	for (unsigned z = 0; z < grid.z; z++)
		for (unsigned y = 0; y < grid.y; y++)
			for (unsigned x = 0; x < grid.x; x++) {
				blockIdx.x = x, blockIdx.y = y, blockIdx.z = z;
				run_block();
			}
}

cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t) { return "emu error"; }

// ---- kcuda.h runtime on host memory ----
static char g_err[256];
int kcu_check(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return 0;
	snprintf(g_err, sizeof g_err, "%s: emu", what);
	return ERR_DEVICE;
}
int kcu_launched(const char *what) { return kcu_check(cudaGetLastError(), what); }
extern "C" {
const char *k_cuda_last_error(void) { return g_err; }
int k_cuda_device_count(int *n) { *n = 1; return 0; }
int k_cuda_set_device(int) { return 0; }
int k_cuda_malloc(void **p, size_t b) { *p = aligned_alloc(256, (b + 255) / 256 * 256); return *p ? 0 : ERR_NOMEM; }
void k_cuda_free(void *p) { free(p); }
int k_cuda_memcpy_h2d(void *d, const void *s, size_t b) { memcpy(d, s, b); return 0; }
int k_cuda_memcpy_d2h(void *d, const void *s, size_t b) { memcpy(d, s, b); return 0; }
int k_cuda_memset_async(void *, void *d, int v, size_t b) { memset(d, v, b); return 0; }
int k_cuda_sync(void) { return 0; }
int k_cuda_stream_create(void **s) { *s = (void *)0x1; return 0; }
void k_cuda_stream_destroy(void *) {}
int k_cuda_event_create(void **e)
{
	if (!emu_skip)
		fprintf(stderr, "emu: %lld shuffles, %lld barriers; no timing (bench figures are NaN)\n",
			n_shfl, n_sync);
	emu_skip = true; // the benchmark's launches would take hours here
	*e = (void *)0x1;
	return 0;
}
void k_cuda_event_destroy(void *) {}
int k_cuda_event_record(void *, void *) { return 0; }
int k_cuda_event_elapsed_ms(void *, void *, float *ms) { *ms = NAN; return 0; } // no timing here
}
