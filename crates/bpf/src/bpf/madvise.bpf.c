// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* madvise() calls and bytes per process and advice: the allocator purges (MADV_DONTNEED,
 * MADV_FREE) behind case 4's TLB-shootdown storm. */
#include "jitterscope.h"

#define MADV_DONTNEED 4
#define MADV_FREE 8
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
	struct js_madvise_proc *p = js_proc_entry(&madvise_procs, &zero_proc, cpu_cgrp_id, &dropped);
	if (!p)
		return 0;
	int adv = (int)ctx->behavior;
	u32 i = adv == MADV_DONTNEED ? ADV_DONTNEED : adv == MADV_FREE ? ADV_FREE : ADV_OTHER;
	p->calls[i] += 1;
	p->bytes[i] += ctx->len;
	return 0;
}
