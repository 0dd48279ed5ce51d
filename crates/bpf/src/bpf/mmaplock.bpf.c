// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* mmap_lock contention per process: how often its threads slept waiting for their own
 * address space's lock, reading or writing, and for how long.
 *
 * The kernel's lock:contention_begin/end tracepoints (5.19+) fire only when a lock is contended,
 * not at every acquisition, so an uncontended host pays nothing. They name the lock by address;
 * the waiter's own mm_struct says whether that address is its mmap_lock (the way `perf lock
 * contention` tells mmap_lock apart). The mmap_lock tracepoints (5.10+) fire at every
 * acquisition instead, and format the memory cgroup's path each time on 5.10-6.x: too dear for
 * an always-on recorder, so they are not used. */
#include "jitterscope.h"

/* include/trace/events/lock.h */
#define LCB_F_SPIN (1U << 0)
#define LCB_F_READ (1U << 1)
#define LCB_F_WRITE (1U << 2)

struct js_mmaplock_proc {
	struct js_proc_head head;
	u64 waits[2]; /* read, write */
	struct js_hist hist; /* every wait, both kinds */
};

struct js_mmaplock_start {
	u64 ts;
	u64 lock;
	u32 write;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024); /* processes that contend at once are few */
	__type(key, u32);
	__type(value, struct js_mmaplock_proc);
} mmaplock_procs SEC(".maps");

/* Waits in progress, by thread. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, struct js_mmaplock_start);
} mmaplock_start SEC(".maps");

u64 dropped = 0;
static const struct js_mmaplock_proc zero_proc;

/* The address of the current task's mmap_lock, 0 for a kernel thread. */
static __always_inline u64 own_mmap_lock(void)
{
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();
	struct mm_struct *mm = BPF_CORE_READ(t, mm);
	if (!mm)
		return 0;
	return (u64)mm + bpf_core_field_offset(struct mm_struct, mmap_lock);
}

SEC("tp_btf/contention_begin")
int BPF_PROG(mmaplock_begin, void *lock, unsigned int flags)
{
	/* Spinning locks (and rwlock_t) never are an mmap_lock: leave before reading the task. */
	if ((flags & LCB_F_SPIN) || !(flags & (LCB_F_READ | LCB_F_WRITE)))
		return 0;
	u64 own = own_mmap_lock();
	if (!own || own != (u64)lock)
		return 0;
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct js_mmaplock_start s = {
		.ts = bpf_ktime_get_ns(),
		.lock = own,
		.write = (flags & LCB_F_WRITE) ? 1 : 0,
	};
	if (bpf_map_update_elem(&mmaplock_start, &tid, &s, BPF_ANY))
		__sync_fetch_and_add(&dropped, 1);
	return 0;
}

SEC("tp_btf/contention_end")
int BPF_PROG(mmaplock_end, void *lock, int ret)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct js_mmaplock_start *s = bpf_map_lookup_elem(&mmaplock_start, &tid);
	if (!s)
		return 0; /* not an mmap_lock wait, or it began before the tracer attached */
	if (s->lock != (u64)lock)
		return 0;
	u64 ns = bpf_ktime_get_ns() - s->ts;
	u32 write = s->write & 1;
	bpf_map_delete_elem(&mmaplock_start, &tid);
	struct js_mmaplock_proc *p = js_proc_entry(&mmaplock_procs, &zero_proc, cpu_cgrp_id, &dropped);
	if (!p)
		return 0;
	__sync_fetch_and_add(&p->waits[write], 1);
	js_hist_add(&p->hist, ns);
	return 0;
}
