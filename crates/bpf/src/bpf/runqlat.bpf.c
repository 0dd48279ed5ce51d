// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Run-queue latency (wake-up to running) as a log2 histogram for the host and per CPU cgroup:
 * the delay a throttled or crowded container's threads see before they get a CPU (case 2).
 *
 * The tp_btf programs get the task pointers, so the latency is charged to the woken task's own
 * cgroup. Where BTF-typed tracepoints are unavailable user space loads the classic-tracepoint
 * programs instead, which see only pids: they fill the host histogram alone. */
#include "jitterscope.h"

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, u32);
	__type(value, u64);
} wakeup_ts SEC(".maps");

/* Keyed by the low 32 bits of the cgroup's kernfs id; JS_OTHER when the map is full. */
struct js_rq_stat {
	u64 cgroup;
	struct js_hist hist;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2048);
	__type(key, u32);
	__type(value, struct js_rq_stat);
} runq_cgroups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct js_hist);
} runq_host SEC(".maps");

u64 dropped = 0;
static const struct js_rq_stat zero_stat;

/* The programs are attached on demand (while threads wait for a CPU), and a task woken while
 * they were detached keeps the mark of its wake-up before that: measured from it, its wait would
 * span the whole detached time. User space sets this to the monotonic time of each attachment,
 * and an older mark is not counted. */
u64 marks_since = 0;

/* 5.13+: the wake-up time is kept in the task itself (task local storage) rather than in
 * wakeup_ts. These programs run at every wake-up and context switch on the host, and the hash
 * map's insert and delete were most of their cost: a pipe ping-pong between two processes on one
 * CPU (two wake-ups and two switches a round trip) took +531 ns a round trip with the hash map
 * and +307 ns with task storage (5 interleaved runs each, 2-CPU VM). Set by user space, which
 * creates only the store in use. */
const volatile bool use_task_storage = false;

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, u64);
} wakeup_at SEC(".maps");

static __always_inline void mark(u32 pid)
{
	if (!pid)
		return; /* the idle task */
	u64 ts = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&wakeup_ts, &pid, &ts, BPF_ANY))
		__sync_fetch_and_add(&dropped, 1);
}

/* mark() for a task pointer a BTF-typed program was given. */
static __always_inline void mark_task(struct task_struct *p)
{
	if (!use_task_storage) {
		mark(p->pid);
		return;
	}
	if (!p->pid)
		return;
	u64 *at = bpf_task_storage_get(&wakeup_at, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (at)
		*at = bpf_ktime_get_ns();
	else
		__sync_fetch_and_add(&dropped, 1);
}

/* When the task switched in was marked runnable (0: not marked), forgetting the mark. With task
 * storage the hash map is not created, so that path must be dead code for the verifier whatever
 * it knows of `next`: before 6.5 it does not take a BTF-typed argument for non-NULL. */
static __always_inline u64 take_mark(u32 pid, struct task_struct *next)
{
	if (use_task_storage) {
		if (!next)
			return 0;
		u64 *at = bpf_task_storage_get(&wakeup_at, next, 0, 0);
		if (!at)
			return 0;
		u64 t = *at;
		*at = 0;
		return t;
	}
	u64 *tsp = bpf_map_lookup_elem(&wakeup_ts, &pid);
	if (!tsp)
		return 0;
	u64 t = *tsp;
	bpf_map_delete_elem(&wakeup_ts, &pid);
	return t;
}

/* `next` is the task switched in (NULL in the classic fallback). */
static __always_inline void on_switch(u32 next_pid, struct task_struct *next)
{
	u64 marked = take_mark(next_pid, next);
	if (!marked || marked < marks_since)
		return;
	u64 ns = bpf_ktime_get_ns() - marked;
	/* With the woken task at hand every wait goes to its cgroup's histogram, and user space
	 * sums those into the host's (one histogram updated per switch instead of two). Only the
	 * classic fallback, which has no cgroups, fills the host histogram here. */
	if (!next) {
		u32 zero = 0;
		struct js_hist *h = bpf_map_lookup_elem(&runq_host, &zero);
		if (h)
			js_hist_add(h, ns);
		return;
	}
	u64 cg = js_task_cgroup_btf(next);
	u32 key = (u32)cg;
	bool fresh = false;
	struct js_rq_stat *c = js_lookup_or_init(&runq_cgroups, &key, &zero_stat, &fresh);
	if (!c) {
		__sync_fetch_and_add(&dropped, 1);
		return;
	}
	if (fresh && key != JS_OTHER)
		c->cgroup = cg;
	js_hist_add(&c->hist, ns);
}

/* A task preempted while runnable goes straight back to the run queue: its wait starts now. */
#define TASK_RUNNING 0

SEC("tp_btf/sched_wakeup")
int BPF_PROG(btf_wakeup, struct task_struct *p)
{
	mark_task(p);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(btf_wakeup_new, struct task_struct *p)
{
	mark_task(p);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(btf_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	if (preempt || prev_state == TASK_RUNNING)
		mark_task(prev);
	on_switch(next->pid, next);
	return 0;
}

/* Before 5.18 the tracepoint had no prev_state argument (reading it is an invalid context
 * access there): the state is read from the task, as tools did then. 5.14 renamed state to
 * __state. */
struct task_struct___pre514 {
	long state;
} __attribute__((preserve_access_index));

struct task_struct___state {
	unsigned int __state;
} __attribute__((preserve_access_index));

SEC("tp_btf/sched_switch")
int BPF_PROG(btf_switch_v3, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	long state;
	struct task_struct___state *now = (void *)prev;
	if (bpf_core_field_exists(now->__state))
		state = BPF_CORE_READ(now, __state);
	else
		state = BPF_CORE_READ((struct task_struct___pre514 *)prev, state);
	if (preempt || state == TASK_RUNNING)
		mark_task(prev);
	on_switch(next->pid, next);
	return 0;
}

struct sched_wakeup_args {
	struct trace_entry ent;
	char comm[16];
	pid_t pid;
	int prio;
	int target_cpu;
};

struct sched_switch_args {
	struct trace_entry ent;
	char prev_comm[16];
	pid_t prev_pid;
	int prev_prio;
	long prev_state;
	char next_comm[16];
	pid_t next_pid;
	int next_prio;
};

SEC("tracepoint/sched/sched_wakeup")
int tp_wakeup(struct sched_wakeup_args *ctx)
{
	mark(ctx->pid);
	return 0;
}

SEC("tracepoint/sched/sched_wakeup_new")
int tp_wakeup_new(struct sched_wakeup_args *ctx)
{
	mark(ctx->pid);
	return 0;
}

SEC("tracepoint/sched/sched_switch")
int tp_switch(struct sched_switch_args *ctx)
{
	/* The classic record's prev_state carries TASK_REPORT_MAX for a preempted task on some
	 * kernels and 0 on others; both mean "still runnable". */
	long st = ctx->prev_state;
	if (st == TASK_RUNNING || (st & 0x100))
		mark(ctx->prev_pid);
	on_switch(ctx->next_pid, NULL);
	return 0;
}
