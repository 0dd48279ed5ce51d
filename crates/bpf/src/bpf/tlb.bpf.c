// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* TLB flushes by reason per process, and TLB-shootdown IPIs attributed to the process that sent
 * them (case 4: jemalloc purging with madvise(DONTNEED) made every thread's CPU flush). */
#include "jitterscope.h"

#define TLB_REASONS 6 /* TLB_FLUSH_ON_TASK_SWITCH .. TLB_REMOTE_WRONG_CPU; more go to the last */

struct js_tlb_proc {
	struct js_proc_head head;
	u64 flushes[TLB_REASONS]; /* [0], task switch, stays 0: counted in task_switch_flushes */
	/* Sum of pages of ranged flushes; a full flush (pages = -1) counts in full_flushes. */
	u64 pages;
	u64 full_flushes;
	u64 ipis_sent;       /* shootdown requests sent (one per target CPU from csd_queue_cpu) */
	u64 ipi_targets;     /* CPUs those requests went to */
	/* The madvise tracer's counts (madvise.bpf.c), when this object counts them for it. */
	u64 madvise_calls[JS_ADV_N];
	u64 madvise_bytes[JS_ADV_N];
};

/* One entry per process for all CPUs, not per CPU as madvise_procs: every process that flushes
 * (munmap, mprotect, exec, exit) or is interrupted by a shootdown has one, and a per-CPU copy of
 * each would cut the processes a map of a given size holds by the number of possible CPUs (256
 * at 52 of them) before the storm's sender comes. Adds are atomic: a shootdown's flush in the
 * IPI handler can interrupt this object's programs on the same entry. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, struct js_tlb_proc);
} tlb_procs SEC(".maps");

/* Flushes on task switch (reason 0), host-wide, per CPU. They follow context switches: on a busy
 * host nearly every process that ran has some, and counting them per process made five in six of
 * this map's entries exist for them alone, each one read, copied and stored every second. No rule
 * reads them per process, so they are counted here and a process gets an entry only for a
 * shootdown or a flush it asked for. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} task_switch_flushes SEC(".maps");

/* Address of flush_tlb_func (from kallsyms), set by user space; 0 = IPIs not attributed. */
const volatile u64 flush_tlb_func_addr = 0;
u64 dropped = 0;

static const struct js_tlb_proc zero_proc;

/* The process's entry, its flush counted; NULL for a task switch or when dropped. */
static __always_inline struct js_tlb_proc *on_flush(int reason, unsigned long pages)
{
	if (reason == 0) {
		u32 zero = 0;
		u64 *n = bpf_map_lookup_elem(&task_switch_flushes, &zero);
		if (n)
			__sync_fetch_and_add(n, 1);
		return NULL;
	}
	struct js_tlb_proc *p = js_proc_entry(&tlb_procs, &zero_proc, cpu_cgrp_id, &dropped);
	if (!p)
		return NULL;
	/* A negative reason is a huge u32 and goes to the last slot with the unknown ones. The
	 * bound is checked on the index itself, so that the verifier sees it (with the BTF-typed
	 * program's 64-bit argument, clang otherwise bounded a copy). */
	u32 r = (u32)reason;
	if (r >= TLB_REASONS)
		r = TLB_REASONS - 1;
	barrier_var(r);
	if (r >= TLB_REASONS)
		return NULL;
	__sync_fetch_and_add(&p->flushes[r], 1);
	if (pages == (unsigned long)-1)
		__sync_fetch_and_add(&p->full_flushes, 1);
	else
		__sync_fetch_and_add(&p->pages, pages);
	return p;
}

/* tlb_flush fires at every flush on the host. The BTF-typed tracepoint is called with the event's
 * arguments; the classic one (the fallback, below) goes through the perf trace buffer first, its
 * record filled and the caller's registers fetched on every event. A madvise(DONTNEED) loop with
 * one flush per 1.85 us iteration, on a 2-CPU VM, 5 interleaved runs each: +211 ns per flush with
 * the classic program, +139 ns with this one, about +100 ns with a program that only counts in a
 * per-CPU array (the rest is the per-process hash lookup). */
SEC("tp_btf/tlb_flush")
int BPF_PROG(btf_tlb_flush, int reason, unsigned long pages)
{
	on_flush(reason, pages);
	return 0;
}

#if defined(__TARGET_ARCH_x86)
/* btf_tlb_flush that also counts madvise() calls for the madvise tracer, loaded instead of it
 * when both tracers run (x86-64, 5.15+ for bpf_task_pt_regs). The madvise tracer's own program
 * at the same event cost a madvise(DONTNEED) loop +100 ns a flush for its dispatch alone (one
 * flush per 1.7 us iteration, before its body ran): here one program and one lookup serve both. */
SEC("tp_btf/tlb_flush")
int BPF_PROG(btf_tlb_flush_madvise, int reason, unsigned long pages)
{
	struct js_tlb_proc *p = on_flush(reason, pages);
	long advice;
	unsigned long len;
	if (!p || !js_madvise_flush(reason, &advice, &len))
		return 0;
	u32 i = js_advice_slot(advice);
	__sync_fetch_and_add(&p->madvise_calls[i], 1);
	__sync_fetch_and_add(&p->madvise_bytes[i], len);
	return 0;
}
#endif

static __always_inline int ipi_sent(u64 targets)
{
	struct js_tlb_proc *p = js_proc_entry(&tlb_procs, &zero_proc, cpu_cgrp_id, &dropped);
	if (!p)
		return 0;
	__sync_fetch_and_add(&p->ipis_sent, 1);
	__sync_fetch_and_add(&p->ipi_targets, targets);
	return 0;
}

/* A raw tracepoint, as cheap: the BTF-typed one refuses to read a function pointer argument
 * ("invalid bpf_context access" on 6.18). */
SEC("raw_tp/csd_queue_cpu")
int BPF_PROG(btf_csd_queue_cpu, unsigned int cpu, unsigned long callsite, void *func, void *csd)
{
	if (!flush_tlb_func_addr || (u64)func != flush_tlb_func_addr)
		return 0;
	return ipi_sent(1);
}

/* Its size is the kernel's (NR_CPUS bits), relocated from the kernel's BTF. */
struct cpumask {
	unsigned long bits[1];
} __attribute__((preserve_access_index));

/* Words of a cpumask that hold possible CPUs, set by user space. With CONFIG_CPUMASK_OFFSTACK
 * (distribution kernels) a mask is allocated only that long, not NR_CPUS bits. */
const volatile u32 cpu_words = 1;

SEC("tp_btf/ipi_send_cpumask")
int BPF_PROG(btf_ipi_send_cpumask, struct cpumask *mask, unsigned long callsite, void *callback)
{
	if (!flush_tlb_func_addr || (u64)callback != flush_tlb_func_addr)
		return 0;
	/* Up to 512 CPUs, no further than the possible CPUs and the kernel's cpumask reach. */
	u32 words = bpf_core_type_size(struct cpumask) / 8;
	u64 targets = 0;
	for (u32 i = 0; i < 8; i++) {
		u64 word = 0;
		if (i >= words || i >= cpu_words)
			break;
		if (bpf_probe_read_kernel(&word, sizeof(word), (void *)mask + i * 8))
			break;
		targets += __builtin_popcountll(word);
	}
	return ipi_sent(targets);
}

struct tlb_flush_args {
	struct trace_entry ent;
	int reason;
	unsigned long pages;
};

SEC("tracepoint/tlb/tlb_flush")
int tlb_flush(struct tlb_flush_args *ctx)
{
	on_flush(ctx->reason, ctx->pages);
	return 0;
}

/* 6.6+: every cross-CPU function call is queued per target CPU, and only this event still names
 * the function (the IPI events report the generic interrupt handler as their callback, and a
 * single-target IPI goes through ipi_send_cpu, which has no callback at all). */
struct csd_queue_cpu_args {
	struct trace_entry ent;
	unsigned int cpu;
	void *callsite;
	void *func;
	void *csd;
};

SEC("tracepoint/csd/csd_queue_cpu")
int csd_queue_cpu(struct csd_queue_cpu_args *ctx)
{
	if (!flush_tlb_func_addr || (u64)ctx->func != flush_tlb_func_addr)
		return 0;
	return ipi_sent(1);
}

/* 6.3–6.5: the IPI event itself names flush_tlb_func and carries the whole target mask. */
struct ipi_send_cpumask_args {
	struct trace_entry ent;
	u32 cpumask_loc; /* __data_loc: offset in the low 16 bits, length in the high 16 */
	void *callsite;
	void *callback;
};

SEC("tracepoint/ipi/ipi_send_cpumask")
int ipi_send_cpumask(struct ipi_send_cpumask_args *ctx)
{
	if (!flush_tlb_func_addr || (u64)ctx->callback != flush_tlb_func_addr)
		return 0;
	u32 off = ctx->cpumask_loc & 0xffff;
	u32 len = ctx->cpumask_loc >> 16;
	u64 targets = 0;
	/* Up to 512 CPUs; a larger mask counts its first 512. */
	for (int i = 0; i < 8; i++) {
		u64 word = 0;
		if ((u32)(i + 1) * 8 > len)
			break;
		if (bpf_probe_read_kernel(&word, sizeof(word), (void *)ctx + off + i * 8))
			break;
		targets += __builtin_popcountll(word);
	}
	return ipi_sent(targets);
}
