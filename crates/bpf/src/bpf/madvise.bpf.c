// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* madvise() calls and bytes per process and advice: the allocator purges (MADV_DONTNEED,
 * MADV_FREE) behind case 4's TLB-shootdown storm.
 *
 * When the tlb tracer runs too and its BTF-typed flush program loads with the test below
 * (tlb.bpf.c, btf_tlb_flush_madvise), that program counts these calls and nothing here is
 * loaded. Otherwise two ways in, one loaded (madvise.rs decides):
 * - `madvise_flush` (x86-64, 5.15+): at each TLB flush the calling CPU makes for its own mm
 *   (tlb:tlb_flush, BTF-typed), the task's entry registers say whether it is inside madvise()
 *   and with which range and advice. Only calls that flushed a TLB are seen, which are the
 *   calls that send shootdowns; nothing runs on any other system call.
 * - `sys_enter_madvise` (fallback): the syscall tracepoint sees every call, but while it is
 *   enabled every system call of every task takes the kernel's slow path (+31% on a malloc
 *   storm, measured), so the collector attaches it only while TLB shootdowns storm. */
#include "jitterscope.h"

struct js_madvise_proc {
	struct js_proc_head head;
	u64 calls[JS_ADV_N];
	u64 bytes[JS_ADV_N];
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
	u32 i = js_advice_slot(adv);
	p->calls[i] += 1;
	p->bytes[i] += len;
}

#if defined(__TARGET_ARCH_x86)
/* One count per flush made inside madvise() (js_madvise_flush says which). */
SEC("tp_btf/tlb_flush")
int BPF_PROG(madvise_flush, int reason, unsigned long pages)
{
	long advice;
	unsigned long len;
	if (js_madvise_flush(reason, &advice, &len))
		count(advice, len);
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
