// tests/emu/emu_fiber.cpp — the thread emulation of emu_cuda.h: runs a grid
// one CTA after another, one fiber per CUDA thread, on the calling OS thread
// (state is thread_local: host threads may launch concurrently). Barriers and
// warp collectives release when their last participant arrives; the fiber
// that completes one runs on without a switch. Everything undefined on the
// device (a barrier or collective some threads cannot reach, a full-mask
// collective over missing lanes) stops the program with "emu: ...".
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#if !defined(__x86_64__) || defined(EMU_UCONTEXT)
#include <ucontext.h>
#endif

#include <mutex>
#include <vector>

#include "emu_cuda.h"
#include "emu_rt.h"

thread_local emu_ids emu_id;

namespace {

#if defined(__x86_64__) && !defined(EMU_UCONTEXT)
// Saves the callee-saved registers on the current stack, stores the stack
// pointer in *save, switches to next and restores its registers (SysV ABI).
extern "C" void emu_ctx_switch(void **save, void *next);
asm(R"(
	.text
	.p2align 4
	.type emu_ctx_switch, @function
emu_ctx_switch:
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
	.size emu_ctx_switch, .-emu_ctx_switch
)");
#define EMU_FAST_SWITCH 1
#else
#define EMU_FAST_SWITCH 0
#endif

enum fstate { F_RUN, F_BAR, F_WARP, F_DONE };

struct fiber {
	unsigned char *stack;
#if EMU_FAST_SWITCH
	void *sp;
#else
	ucontext_t ctx;
#endif
	fstate st;
	uint3 tid;
	// barrier
	int bar_op, bar_pred, bar_res;
	// warp collective
	int w_op, w_param, w_width;
	unsigned w_mask;
	uint64_t w_val, w_res;
	void (*w_fn)(void *args[32]); // emu_warp_exec
};

struct warp {
	unsigned exist;	  // lanes present in the CTA
	unsigned waiting; // lanes waiting in a collective
};

const size_t STACK_BYTES = 256 * 1024;

struct sched {
	std::vector<fiber> f;
	std::vector<warp> w;
	int n, cur, n_live, n_bar;
#if EMU_FAST_SWITCH
	void *main_sp;
#else
	ucontext_t main_ctx;
#endif
	const std::function<void()> *body;
	unsigned char *dyn;
	size_t dyn_bytes, dyn_cap;
	const char *kernel;
};
thread_local sched S;

// The running fiber (its state already set: waiting or done) gives the
// CPU to the next runnable fiber after it, round robin, without going
// through the scheduler; to the scheduler when none can run (the block is
// finished or deadlocked).
void switch_to_main()
{
	fiber &f = S.f[S.cur];
	const int n = S.n, c = S.cur;
	for (int k = 1; k < n; k++) {
		const int j = c + k < n ? c + k : c + k - n;
		if (S.f[j].st != F_RUN)
			continue;
		S.cur = j;
		emu_id.thread = S.f[j].tid;
#if EMU_FAST_SWITCH
		emu_ctx_switch(&f.sp, S.f[j].sp);
#else
		swapcontext(&f.ctx, &S.f[j].ctx);
#endif
		return;
	}
#if EMU_FAST_SWITCH
	emu_ctx_switch(&f.sp, S.main_sp);
#else
	swapcontext(&f.ctx, &S.main_ctx);
#endif
}

[[noreturn]] void fail_here(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fail_here(const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	emu_fatal("%s: %s (block %u,%u,%u; thread %u,%u,%u)", S.kernel, msg, emu_id.block.x,
		  emu_id.block.y, emu_id.block.z, emu_id.thread.x, emu_id.thread.y,
		  emu_id.thread.z);
}

void wait_check_exit();

void fiber_main()
{
	(*S.body)();
	fiber &f = S.f[S.cur];
	f.st = F_DONE;
	S.n_live--;
	wait_check_exit();
	switch_to_main();
	abort(); // a finished fiber is never resumed
}

#if !EMU_FAST_SWITCH
void fiber_entry_uc(void)
{
	fiber_main();
}
#endif

// A thread exits: nobody may be left waiting for it.
void wait_check_exit()
{
	const int me = S.cur;
	if (S.n_bar > 0)
		fail_here("thread exited while %d others wait at __syncthreads", S.n_bar);
	warp &w = S.w[me / 32];
	const unsigned bit = 1u << (me & 31);
	for (unsigned l = 0; l < 32; l++)
		if ((w.waiting >> l) & 1 && S.f[(me & ~31) + l].w_mask & bit)
			fail_here("thread exited while lane %u waits for it in a warp collective", l);
}

void run_block()
{
	for (int i = 0; i < S.n; i++) {
		fiber &f = S.f[i];
		f.st = F_RUN;
		const unsigned bx = emu_id.block_dim.x, by = emu_id.block_dim.y;
		f.tid = make_uint3(i % bx, (i / bx) % by, i / (bx * by));
#if EMU_FAST_SWITCH
		uintptr_t top = ((uintptr_t)(f.stack + STACK_BYTES)) & ~(uintptr_t)15;
		void **sp = (void **)top;
		*--sp = nullptr;		     // fiber_main's (never used) return address
		*--sp = (void *)&fiber_main; // where the first switch's ret goes
		for (int k = 0; k < 6; k++)
			*--sp = nullptr; // rbp rbx r12-r15
		f.sp = sp;
#else
		getcontext(&f.ctx);
		f.ctx.uc_stack.ss_sp = f.stack;
		f.ctx.uc_stack.ss_size = STACK_BYTES;
		f.ctx.uc_link = nullptr;
		makecontext(&f.ctx, fiber_entry_uc, 0);
#endif
	}
	for (auto &w : S.w)
		w.waiting = 0;
	S.n_live = S.n;
	S.n_bar = 0;
	if (S.dyn_bytes)
		memset(S.dyn, 0xff, S.dyn_bytes);
	// Fibers hand over to each other; control comes back here only when
	// none is runnable.
	S.cur = 0;
	emu_id.thread = S.f[0].tid;
#if EMU_FAST_SWITCH
	emu_ctx_switch(&S.main_sp, S.f[0].sp);
#else
	swapcontext(&S.main_ctx, &S.f[0].ctx);
#endif
	if (S.n_live > 0) {
		int n_warp = 0;
		for (int i = 0; i < S.n; i++)
			n_warp += S.f[i].st == F_WARP;
		emu_id.thread = make_uint3(0, 0, 0);
		fail_here("deadlock: %d threads at __syncthreads, %d in warp collectives, "
			  "%d exited (diverged barrier or collective?)",
			  S.n_bar, n_warp, S.n - S.n_live);
	}
}

} // namespace

void *emu_dyn_smem(void)
{
	return S.dyn;
}

int emu_barrier(enum emu_bar_op op, int pred)
{
	fiber &f = S.f[S.cur];
	if (S.n_live != S.n)
		fail_here("__syncthreads after %d threads of the block exited", S.n - S.n_live);
	f.bar_op = op;
	f.bar_pred = pred != 0;
	if (++S.n_bar < S.n_live) {
		f.st = F_BAR;
		switch_to_main();
		return f.bar_res;
	}
	// last arrival: check the kind, reduce, release
	int any = 0, all = 1, count = 0;
	for (int i = 0; i < S.n; i++) {
		if (S.f[i].bar_op != op)
			fail_here("threads meet at different barrier kinds (%d, %d)", S.f[i].bar_op,
				  (int)op);
		any |= S.f[i].bar_pred;
		all &= S.f[i].bar_pred;
		count += S.f[i].bar_pred;
	}
	const int res = op == EMU_BAR_OR ? any : op == EMU_BAR_AND ? all : count;
	for (int i = 0; i < S.n; i++) {
		S.f[i].bar_res = res;
		if (i != S.cur)
			S.f[i].st = F_RUN;
	}
	S.n_bar = 0;
	return res;
}

static int src_lane(const fiber &f, int lane)
{
	const int width = f.w_width, base = lane & ~(width - 1);
	switch (f.w_op) {
	case EMU_W_IDX:
		return base + (f.w_param & (width - 1));
	case EMU_W_UP:
		return lane - f.w_param >= base ? lane - f.w_param : lane;
	case EMU_W_DOWN:
		return lane + f.w_param < base + width ? lane + f.w_param : lane;
	case EMU_W_XOR:
		return (lane ^ f.w_param) < base + width ? lane ^ f.w_param : lane;
	}
	return lane;
}

uint64_t emu_warp(enum emu_warp_op op, unsigned mask, uint64_t v, int param, int width)
{
	const int me = S.cur, lane = me & 31, w0 = me & ~31;
	warp &w = S.w[me / 32];
	fiber &f = S.f[me];
	if (!((mask >> lane) & 1))
		fail_here("warp collective whose mask 0x%08x leaves out the calling lane %d", mask,
			  lane);
	if (mask & ~w.exist)
		fail_here("warp collective with mask 0x%08x over lanes the block does not have "
			  "(warp has 0x%08x)",
			  mask, w.exist);
	if (width <= 0 || width > 32 || (width & (width - 1)))
		fail_here("shuffle width %d", width);
	f.w_op = op;
	f.w_mask = mask;
	f.w_val = v;
	f.w_param = param;
	f.w_width = width;
	w.waiting |= 1u << lane;
	if ((w.waiting & mask) != mask) {
		f.st = F_WARP;
		switch_to_main();
		return f.w_res;
	}
	// every lane of the mask is here: check they agree, compute, release
	fiber *L = &S.f[w0];
	uint64_t val[32];
	unsigned pred_mask = 0;
	for (int l = 0; l < 32; l++) {
		if (!((mask >> l) & 1))
			continue;
		const fiber &o = L[l];
		if (o.w_mask != mask || o.w_op != op || o.w_width != width)
			fail_here("lanes %d and %d meet in different warp collectives (op %d/%d, "
				  "mask 0x%08x/0x%08x)",
				  lane, l, o.w_op, (int)op, o.w_mask, mask);
		val[l] = o.w_val;
		pred_mask |= (o.w_val != 0) << l;
	}
	for (int l = 0; l < 32; l++) {
		if (!((mask >> l) & 1))
			continue;
		fiber &o = L[l];
		switch (op) {
		case EMU_W_SYNC:
			o.w_res = 0;
			break;
		case EMU_W_IDX:
		case EMU_W_UP:
		case EMU_W_DOWN:
		case EMU_W_XOR: {
			const int src = src_lane(o, l);
			if (!((mask >> src) & 1))
				fail_here("lane %d reads lane %d outside the shuffle mask 0x%08x", l,
					  src, mask);
			o.w_res = val[src];
			break;
		}
		case EMU_W_BALLOT:
			o.w_res = pred_mask;
			break;
		case EMU_W_ANY:
			o.w_res = pred_mask != 0;
			break;
		case EMU_W_ALL:
			o.w_res = pred_mask == mask;
			break;
		case EMU_W_MATCH_ANY:
		case EMU_W_MATCH_ALL: {
			unsigned m = 0;
			for (int j = 0; j < 32; j++)
				if ((mask >> j) & 1 && val[j] == val[l])
					m |= 1u << j;
			o.w_res = op == EMU_W_MATCH_ANY ? m : m == mask ? mask : 0;
			break;
		}
		}
		o.st = F_RUN;
	}
	w.waiting &= ~mask;
	return f.w_res;
}

void emu_warp_exec(int kind, void *arg, void (*fn)(void *args[32]))
{
	const unsigned mask = 0xffffffffu;
	const int me = S.cur, lane = me & 31, w0 = me & ~31;
	warp &w = S.w[me / 32];
	fiber &f = S.f[me];
	if (w.exist != mask)
		fail_here("warp-wide operation %d in a partial warp (lanes 0x%08x)", kind, w.exist);
	f.w_op = -1 - kind; // never an emu_warp_op: meeting a shuffle is an error
	f.w_mask = mask;
	f.w_val = (uint64_t)(uintptr_t)arg;
	f.w_param = kind;
	f.w_width = 32;
	f.w_fn = fn;
	w.waiting |= 1u << lane;
	if (w.waiting != mask) {
		f.st = F_WARP;
		switch_to_main();
		return;
	}
	// the last lane runs fn over every lane's argument (the others wait, their
	// stacks intact), then releases them
	fiber *L = &S.f[w0];
	void *args[32];
	for (int l = 0; l < 32; l++) {
		const fiber &o = L[l];
		if (o.w_mask != mask || o.w_op != f.w_op || o.w_fn != fn)
			fail_here("lanes %d and %d meet in different warp collectives (op %d/%d)", lane,
				  l, o.w_op, f.w_op);
		args[l] = (void *)(uintptr_t)o.w_val;
	}
	fn(args);
	for (int l = 0; l < 32; l++)
		L[l].st = F_RUN;
	w.waiting = 0;
}

unsigned emu_activemask(void)
{
	const int w0 = S.cur & ~31;
	unsigned m = 0;
	for (int l = 0; l < 32 && w0 + l < S.n; l++)
		if (S.f[w0 + l].st != F_DONE)
			m |= 1u << l;
	return m;
}

// Runs one launch, already validated, on this OS thread.
void emu_run_grid(dim3 grid, dim3 block, size_t smem, const char *name,
		  const std::function<void()> &body)
{
	if (S.body)
		emu_fatal("%s launched from inside kernel %s (dynamic parallelism)", name, S.kernel);
	// __shared__ variables are statics: one grid at a time in the process.
	static std::mutex grid_mu;
	std::lock_guard<std::mutex> lock(grid_mu);
	const int n = (int)(block.x * block.y * block.z);
	while ((int)S.f.size() < n) {
		fiber f = {};
		void *p = mmap(nullptr, STACK_BYTES + 4096, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p == MAP_FAILED)
			emu_fatal("no memory for fiber stacks");
		mprotect(p, 4096, PROT_NONE); // guard page: a stack overflow faults
		f.stack = (unsigned char *)p + 4096;
		S.f.push_back(f);
	}
	S.n = n;
	S.w.assign((n + 31) / 32, warp{});
	for (int i = 0; i < (int)S.w.size(); i++) {
		const int lanes = n - 32 * i < 32 ? n - 32 * i : 32;
		S.w[i].exist = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
	}
	if (smem > S.dyn_cap || !S.dyn) {
		free(S.dyn);
		S.dyn_cap = (smem + 127) / 128 * 128;
		S.dyn = (unsigned char *)aligned_alloc(128, S.dyn_cap + 128);
		if (!S.dyn)
			emu_fatal("no memory for %zu bytes of dynamic shared memory", smem);
	}
	S.dyn_bytes = smem;
	S.body = &body;
	S.kernel = name;
	emu_id.block_dim = block;
	emu_id.grid_dim = grid;
	for (unsigned z = 0; z < grid.z; z++)
		for (unsigned y = 0; y < grid.y; y++)
			for (unsigned x = 0; x < grid.x; x++) {
				emu_id.block = make_uint3(x, y, z);
				run_block();
			}
	S.body = nullptr;
}
