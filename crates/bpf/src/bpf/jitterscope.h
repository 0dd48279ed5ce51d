/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Shared declarations of the jitterscope BPF programs.
 *
 * Instead of a generated vmlinux.h (2.8 MB, and it needs the build machine's BTF) this header
 * declares only the kernel types the programs touch, with preserve_access_index so libbpf
 * relocates every field access against the running kernel's BTF (CO-RE). Types are named as in
 * the kernel so the relocations find them; our own types carry a js_ prefix so they never clash.
 */
#ifndef JITTERSCOPE_H
#define JITTERSCOPE_H

typedef unsigned char __u8;
typedef short int __s16;
typedef short unsigned int __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long int __s64;
typedef long long unsigned int __u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __s32 s32;
typedef __u64 u64;
typedef __s64 s64;
typedef _Bool bool;
typedef int pid_t;
#define true 1
#define false 0
#define NULL ((void *)0)

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_HASH = 5,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};

/* Map flags and the local-storage lookup's flag (include/uapi/linux/bpf.h). */
#define BPF_F_NO_PREALLOC (1U << 0)
#define BPF_LOCAL_STORAGE_GET_F_CREATE (1ULL << 0)

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
	BPF_EXIST = 2,
};

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

/* Kernel types, only the members read here. */
struct kernfs_node {
	u64 id;
} __attribute__((preserve_access_index));

struct cgroup {
	struct kernfs_node *kn;
} __attribute__((preserve_access_index));

struct cgroup_subsys_state {
	struct cgroup *cgroup;
} __attribute__((preserve_access_index));

enum cgroup_subsys_id {
	cpu_cgrp_id = 1,
	memory_cgrp_id = 4,
};

struct css_set {
	struct cgroup_subsys_state *subsys[14];
	struct cgroup *dfl_cgrp;
} __attribute__((preserve_access_index));

struct rw_semaphore {
	long count;
} __attribute__((preserve_access_index));

struct mm_struct {
	struct rw_semaphore mmap_lock;
} __attribute__((preserve_access_index));

struct task_struct {
	pid_t pid;
	pid_t tgid;
	char comm[16];
	struct task_struct *group_leader;
	struct css_set *cgroups;
	struct mm_struct *mm;
} __attribute__((preserve_access_index));

/* The registers a task entered the kernel with (x86-64 only: other architectures name them
 * differently, and the programs that read them are built for x86 alone). During a system call
 * orig_ax holds its number and ax holds -ENOSYS until it returns; di, si, dx are its first
 * three arguments. */
#if defined(__TARGET_ARCH_x86)
struct pt_regs {
	unsigned long dx;
	unsigned long si;
	unsigned long di;
	unsigned long ax;
	unsigned long orig_ax;
} __attribute__((preserve_access_index));
#endif

struct trace_entry {
	unsigned short type;
	unsigned char flags;
	unsigned char preempt_count;
	int pid;
};

/* Bounded-map conventions. Every per-key map has a fixed size; an event whose key does not fit
 * goes to the key JS_OTHER (pre-created by user space, never deleted) and counts in the
 * tracer's `dropped` counter only when even that is impossible. Maps of in-flight start times
 * (by thread) are LRU: an entry whose end never comes (the thread died mid-stall) must age out
 * instead of filling the map. */
#define JS_OTHER 0xffffffffu
#define JS_SLOTS 32 /* log2 histogram slots, microseconds: slot i holds [2^i, 2^(i+1)) us */

struct js_hist {
	u64 slots[JS_SLOTS];
	u64 count;
	u64 sum_ns;
	u64 max_ns;
	u64 max_gen; /* js_gen when max_ns was last set */
};

/* Read generation: user space bumps it just before it reads the maps, so a maximum stamped with
 * the previous generation is the maximum of the interval that just ended. Counters are
 * cumulative and turned into per-interval deltas in user space; a maximum cannot be, hence this. */
u64 js_gen = 0;

static __always_inline u32 js_log2(u64 v)
{
	u32 r = 0;
	/* Unrolled binary search: the verifier accepts it without loops. */
	if (v >= (1ULL << 32)) { v >>= 32; r += 32; }
	if (v >= (1ULL << 16)) { v >>= 16; r += 16; }
	if (v >= (1ULL << 8)) { v >>= 8; r += 8; }
	if (v >= (1ULL << 4)) { v >>= 4; r += 4; }
	if (v >= (1ULL << 2)) { v >>= 2; r += 2; }
	if (v >= (1ULL << 1)) { r += 1; }
	return r;
}

static __always_inline void js_hist_add(struct js_hist *h, u64 ns)
{
	u32 slot = js_log2(ns / 1000);
	if (slot >= JS_SLOTS)
		slot = JS_SLOTS - 1;
	__sync_fetch_and_add(&h->slots[slot], 1);
	__sync_fetch_and_add(&h->count, 1);
	__sync_fetch_and_add(&h->sum_ns, ns);
	/* A lost race here under-reports one maximum by a little. */
	u64 gen = js_gen;
	if (h->max_gen != gen) {
		h->max_gen = gen;
		h->max_ns = ns;
	} else if (ns > h->max_ns) {
		h->max_ns = ns;
	}
}

/* Whether cgroup ids are taken from a v1 hierarchy (the controller's own) or the v2 one. Set by
 * user space before load from what is mounted. */
const volatile bool js_cgroup_v1 = false;

/* The kernfs id (= inode number of its cgroupfs directory) of the cgroup `t` is in, for the
 * controller `subsys` when cgroups are v1, else on the unified hierarchy. 0 when unreadable. */
static __always_inline u64 js_task_cgroup(struct task_struct *t, int subsys)
{
	if (js_cgroup_v1) {
		if (!bpf_core_enum_value_exists(enum cgroup_subsys_id, memory_cgrp_id) ||
		    !bpf_core_enum_value_exists(enum cgroup_subsys_id, cpu_cgrp_id))
			return 0;
		if (subsys == memory_cgrp_id)
			return BPF_CORE_READ(t, cgroups, subsys[bpf_core_enum_value(enum cgroup_subsys_id, memory_cgrp_id)], cgroup, kn, id);
		return BPF_CORE_READ(t, cgroups, subsys[bpf_core_enum_value(enum cgroup_subsys_id, cpu_cgrp_id)], cgroup, kn, id);
	}
	return BPF_CORE_READ(t, cgroups, dfl_cgrp, kn, id);
}

/* js_task_cgroup(t, cpu_cgrp_id) for a task pointer a BTF-typed program was given: read
 * directly, each hop a plain load the verifier guards, instead of one bpf_probe_read_kernel call
 * per hop. */
static __always_inline u64 js_task_cgroup_btf(struct task_struct *t)
{
	if (js_cgroup_v1) {
		if (!bpf_core_enum_value_exists(enum cgroup_subsys_id, cpu_cgrp_id))
			return 0;
		return t->cgroups->subsys[bpf_core_enum_value(enum cgroup_subsys_id, cpu_cgrp_id)]->cgroup->kn->id;
	}
	return t->cgroups->dfl_cgrp->kn->id;
}

static __always_inline u64 js_current_cgroup(int subsys)
{
	return js_task_cgroup((struct task_struct *)bpf_get_current_task(), subsys);
}

/* The process's name: its main thread's comm. Entries are per process, and the thread that
 * happened to cause the first event (`store-writer`, `jemalloc_bg_thd`) would misname it. */
static __always_inline void js_process_comm(char *buf)
{
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();
	struct task_struct *leader = BPF_CORE_READ(t, group_leader);
	if (!leader || bpf_core_read_str(buf, 16, &leader->comm) < 0)
		bpf_get_current_comm(buf, 16);
}

/* madvise() calls per advice: the slots of the madvise counts (madvise.bpf.c, and tlb.bpf.c when
 * its flush program counts them for the madvise tracer). */
enum { JS_ADV_DONTNEED, JS_ADV_FREE, JS_ADV_OTHER, JS_ADV_N };

static __always_inline u32 js_advice_slot(long advice)
{
	return advice == 4 /* MADV_DONTNEED */ ? JS_ADV_DONTNEED
	       : advice == 8 /* MADV_FREE */ ? JS_ADV_FREE
					     : JS_ADV_OTHER;
}

#if defined(__TARGET_ARCH_x86)
/* Whether a TLB flush (tlb:tlb_flush's `reason`) is made by the current task inside madvise():
 * then its advice and length. One flush per call unless the call spans several mappings or
 * unmaps more resident pages than one gather batch holds (thousands), when it is one per flush;
 * a call over pages that were not resident flushes nothing and sends no shootdown, and is not
 * seen. Needs bpf_task_pt_regs (5.15+). */
static __always_inline bool js_madvise_flush(int reason, long *advice, unsigned long *len)
{
	/* TLB_LOCAL_MM_SHOOTDOWN: the flush of the CPU that changed the mapping, in the changing
	 * task's context; the other reasons are task switches and the flushes other CPUs run for
	 * it. */
	if (reason != 3)
		return false;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	/* orig_ax is the system call's number (madvise: 28) and ax is -ENOSYS for the whole of
	 * it; a page fault's saved registers hold the user's rax and its error code in orig_ax, so
	 * both must match. */
	if (regs->orig_ax != 28 || (long)regs->ax != -38)
		return false;
	*advice = (int)regs->dx;
	*len = regs->si;
	return true;
}
#endif

/* The first members of every per-process value. */
struct js_proc_head {
	char comm[16];
	u64 cgroup;
	u64 named_gen; /* js_gen when comm and cgroup were last taken */
};

/* Finds `key` in `map`, creating it zeroed if absent; when the map is full, the JS_OTHER entry.
 * NULL only if even that is missing (counted by the caller as dropped). */
static __always_inline void *js_lookup_or_init(void *map, u32 *key, const void *zero, bool *fresh)
{
	void *v = bpf_map_lookup_elem(map, key);
	if (v)
		return v;
	/* EEXIST (another CPU created it first) is as good as success. */
	bpf_map_update_elem(map, key, zero, BPF_NOEXIST);
	v = bpf_map_lookup_elem(map, key);
	if (v) {
		*fresh = true;
		return v;
	}
	*key = JS_OTHER;
	return bpf_map_lookup_elem(map, key);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The current process's entry of per-process `map` (values start with struct js_proc_head),
 * named and placed in its `subsys` cgroup when created; the overflow entry when the map is full;
 * NULL (counted in `*dropped`) when even that is missing. */
static __always_inline void *js_proc_entry(void *map, const void *zero, int subsys, u64 *dropped)
{
	u32 tgid = bpf_get_current_pid_tgid() >> 32;
	bool fresh = false;
	struct js_proc_head *p = js_lookup_or_init(map, &tgid, zero, &fresh);
	if (!p) {
		__sync_fetch_and_add(dropped, 1);
		return NULL;
	}
	/* Named again at its first event of each read interval, not only at its first event ever:
	 * a forked child's first events (a task-switch flush, a page fault) come before its exec
	 * and its move into its own cgroup, and a process may rename itself. */
	u64 gen = js_gen;
	if (tgid != JS_OTHER && (fresh || p->named_gen != gen)) {
		js_process_comm(p->comm);
		p->cgroup = js_current_cgroup(subsys);
		p->named_gen = gen;
	}
	return p;
}

#endif
