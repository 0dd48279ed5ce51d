// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* madvise() calls and bytes per process and advice: the allocator purges (MADV_DONTNEED,
 * MADV_FREE) behind case 4's TLB-shootdown storm.
 *
 * When the tlb tracer runs too and its BTF-typed flush program loads with the test below
 * (tlb.bpf.c, btf_tlb_flush_madvise), that program counts these calls and nothing here is
 * loaded. Otherwise two ways in, one loaded
 * (madvise.rs decides):
 * - `madvise_flush` (x86-64, 5.15+): at each TLB flush the calling CPU makes for its own mm
 *   (tlb:tlb_flush, BTF-typed), the task's entry registers say whether it is inside madvise()
 *   and with which range and advice. Only calls that flushed a TLB are seen, which are the
 *   calls that send shootdowns; nothing runs on any other system call.
 * - `sys_enter_madvise` (fallback): the syscall tracepoint sees every call, but while it is
 *   enabled every system call of every task takes the kernel's slow path (+31% on a malloc
 *   storm, measured), so the collector attaches it only while TLB shootdowns storm. */
#include "jitterscope.h"

#define MADV_DONTNEED 4
#define MADV_FREE 8
#define ENOSYS 38
#define NR_MADVISE_X86_64 28
#define TLB_LOCAL_MM_SHOOTDOWN 3
enum { ADV_DONTNEED, ADV_FREE, ADV_OTHER, ADV_N };

struct js_madvise_proc {
	struct js_proc_head head;
	u64 calls[ADV_N];
	u64 bytes[ADV_N];
};

/* Per CPU: a purging allocator calls madvise from every thread on every CPU, and one shared
 * entry per process made each call pay for a contended atomic (52 ns per call measured). User
 * space sums the CPUs' copies. Sized at load from the number of CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, struct js_madvise_proc);
} madvise_procs SEC(".maps");

u64 dropped = 0;
static const struct js_madvise_proc zero_proc;

static __always_inline void count(long adv, unsigned long len)
{
	struct js_madvise_proc *p = js_proc_entry(&madvise_procs, &zero_proc, cpu_cgrp_id, &dropped);
	if (!p)
		return;
	u32 i = adv == MADV_DONTNEED ? ADV_DONTNEED : adv == MADV_FREE ? ADV_FREE : ADV_OTHER;
	p->calls[i] += 1;
	p->bytes[i] += len;
}

#if defined(__TARGET_ARCH_x86)
/* One count per flush: a call is one flush unless it spans several mappings or unmaps more
 * resident pages than one gather batch holds (thousands), when it counts once per flush. A call
 * over pages that were not resident flushes nothing and sends no shootdown: it is not seen. */
SEC("tp_btf/tlb_flush")
int BPF_PROG(madvise_flush, int reason, unsigned long pages)
{
	/* The flush of the CPU that changed the mapping, in the changing task's context; the
	 * other reasons are task switches and the flushes other CPUs run for it. */
	if (reason != TLB_LOCAL_MM_SHOOTDOWN)
		return 0;
	struct task_struct *t = bpf_get_current_task_btf();
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(t);
	/* ax is -ENOSYS for the whole of a system call; a page fault's saved registers hold
	 * the user's rax and its error code in orig_ax, so both must match. */
	if (regs->orig_ax != NR_MADVISE_X86_64 || (long)regs->ax != -ENOSYS)
		return 0;
	count((int)regs->dx, regs->si);
	return 0;
}
#endif

struct sys_enter_madvise_args {
	struct trace_entry ent;
	int nr;
	unsigned long start;
	unsigned long len;
	long behavior;
};

SEC("tracepoint/syscalls/sys_enter_madvise")
int sys_enter_madvise(struct sys_enter_madvise_args *ctx)
{
	count((int)ctx->behavior, ctx->len);
	return 0;
}
