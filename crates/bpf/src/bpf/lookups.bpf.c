// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Path look-ups that failed with ENOENT (stat, access, open families) per process, with a
 * bounded random sample of the failing names each interval: the producers of negative dentries
 * and their name patterns (case 1: NSS probing `.<N>_dOeSnotExist_.db` filled the dcache).
 *
 * Any hook on system calls makes every system call of every task take the kernel's slow path
 * while it is attached (the enter/exit pairs cost a storm of failing stat() +85% of its CPU
 * time, measured), and this kernel refuses fentry, kprobes and BPF LSM, which could hook the
 * look-up alone. So:
 * - `lookups_exit` (x86-64): one BTF-typed program at raw_syscalls:sys_exit reading the call's
 *   number and path from its registers, which lookups.rs attaches in short windows (a few
 *   percent of the time, and while negative dentries are being created fast). Counts carry
 *   the window kind they were seen in, so user space can scale the sampled part.
 * - the enter/exit pairs of each syscall tracepoint (fallback on other architectures),
 *   attached for as long as the tracer is. */
#include "jitterscope.h"

#define ENOENT 2
enum { FAM_STAT, FAM_ACCESS, FAM_OPEN, FAM_N };
#define NAME_SLOTS 64
#define NAME_LEN 256

/* Windows: 0 = the regular sample (and the fallback's whole time), 1 = opened because negative
 * dentries were being created fast (seen in full while open, so never scaled). */
#define KINDS 2

struct js_lookup_proc {
	struct js_proc_head head;
	u64 calls[KINDS][FAM_N];  /* all calls of the traced syscalls */
	u64 enoent[KINDS][FAM_N]; /* of which failed with ENOENT */
};

struct js_lookup_pending {
	u64 name;   /* user pointer to the path */
	u32 family;
};

struct js_lookup_name {
	u32 tgid;
	u32 family;
	char comm[16];
	char name[NAME_LEN];
};

/* Per CPU, as madvise's: a process failing look-ups from several threads on several CPUs made
 * every call pay for a contended atomic on its one entry. User space sums the CPUs' copies;
 * sized at load from the number of CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, struct js_lookup_proc);
} lookup_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, u32);
	__type(value, struct js_lookup_pending);
} lookup_pending SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * NAME_SLOTS);
	__type(key, u32);
	__type(value, struct js_lookup_name);
} lookup_names SEC(".maps");

/* The name sample is double-buffered by the read generation (js_gen & 1): user space bumps the
 * generation, then reads and resets the half that is no longer written, so the next interval's
 * first failures cannot overwrite the sample while it is being read. */
u64 names_seen[2] = {};
u64 dropped = 0;

/* The kind of the window open now; user space sets it before it attaches the program (a map
 * of its own, written by the windows' thread with a syscall while the reader uses .bss). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u32);
} lookup_window SEC(".maps");
static const struct js_lookup_proc zero_proc;

struct sys_enter_args {
	struct trace_entry ent;
	int nr;
	unsigned long args[6];
};

struct sys_exit_args {
	struct trace_entry ent;
	int nr;
	long ret;
};

static __always_inline int on_enter(unsigned long name, u32 family)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct js_lookup_pending p = { .name = name, .family = family };
	if (bpf_map_update_elem(&lookup_pending, &tid, &p, BPF_ANY))
		__sync_fetch_and_add(&dropped, 1);
	return 0;
}

static __always_inline int count_exit(u64 name, u32 fam, long ret)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 zero = 0;
	u32 *window = bpf_map_lookup_elem(&lookup_window, &zero);
	u32 kind = window ? *window : 0;
	if (fam >= FAM_N || kind >= KINDS)
		return 0;

	u32 tgid = id >> 32;
	struct js_lookup_proc *p = js_proc_entry(&lookup_procs, &zero_proc, cpu_cgrp_id, &dropped);
	if (!p)
		return 0;
	p->calls[kind][fam] += 1;
	if (ret != -ENOENT)
		return 0;
	p->enoent[kind][fam] += 1;

	/* Reservoir sample: the k-th failure of the interval replaces a random slot with
	 * probability NAME_SLOTS/k, so every failure is equally likely to be kept. */
	u32 half = js_gen & 1;
	/* Read, then add without fetching: a fetching atomic (BPF_FETCH) needs 5.12, and 5.10
	 * refuses the program ("BPF_STX uses reserved fields"). Two CPUs failing at once may read
	 * the same k and share a slot: one name of the sample is lost, none is invented. */
	u64 k = names_seen[half];
	__sync_fetch_and_add(&names_seen[half], 1);
	u32 slot;
	if (k < NAME_SLOTS) {
		slot = (u32)k;
	} else {
		u64 r = bpf_get_prandom_u32() % (k + 1);
		if (r >= NAME_SLOTS)
			return 0;
		slot = (u32)r;
	}
	slot += half * NAME_SLOTS;
	struct js_lookup_name *n = bpf_map_lookup_elem(&lookup_names, &slot);
	if (!n)
		return 0;
	n->tgid = tgid;
	n->family = fam;
	js_process_comm(n->comm);
	bpf_probe_read_user_str(n->name, sizeof(n->name), (void *)name);
	return 0;
}

static __always_inline int on_exit(long ret)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct js_lookup_pending *pend = bpf_map_lookup_elem(&lookup_pending, &tid);
	if (!pend)
		return 0;
	u64 name = pend->name;
	u32 fam = pend->family;
	bpf_map_delete_elem(&lookup_pending, &tid);
	return count_exit(name, fam, ret);
}

#if defined(__TARGET_ARCH_x86)
/* x86-64 system call numbers (arch/x86/entry/syscalls/syscall_64.tbl): a stable ABI. */
SEC("tp_btf/sys_exit")
int BPF_PROG(lookups_exit, struct pt_regs *regs, long ret)
{
	switch (regs->orig_ax) {
	case 4:   /* stat */
	case 6:   /* lstat */
		return count_exit(regs->di, FAM_STAT, ret);
	case 262: /* newfstatat */
	case 332: /* statx */
		return count_exit(regs->si, FAM_STAT, ret);
	case 21:  /* access */
		return count_exit(regs->di, FAM_ACCESS, ret);
	case 269: /* faccessat */
	case 439: /* faccessat2 */
		return count_exit(regs->si, FAM_ACCESS, ret);
	case 2:   /* open */
		return count_exit(regs->di, FAM_OPEN, ret);
	case 257: /* openat */
	case 437: /* openat2 */
		return count_exit(regs->si, FAM_OPEN, ret);
	}
	return 0;
}
#endif

#define ENTER(sc, argi, fam)                                   \
	SEC("tracepoint/syscalls/sys_enter_" #sc)              \
	int enter_##sc(struct sys_enter_args *ctx)             \
	{                                                      \
		return on_enter(ctx->args[argi], fam);         \
	}                                                      \
	SEC("tracepoint/syscalls/sys_exit_" #sc)               \
	int exit_##sc(struct sys_exit_args *ctx)               \
	{                                                      \
		return on_exit(ctx->ret);                      \
	}

ENTER(newstat, 0, FAM_STAT)
ENTER(newlstat, 0, FAM_STAT)
ENTER(newfstatat, 1, FAM_STAT)
ENTER(statx, 1, FAM_STAT)
ENTER(access, 0, FAM_ACCESS)
ENTER(faccessat, 1, FAM_ACCESS)
ENTER(faccessat2, 1, FAM_ACCESS)
ENTER(open, 0, FAM_OPEN)
ENTER(openat, 1, FAM_OPEN)
ENTER(openat2, 1, FAM_OPEN)
