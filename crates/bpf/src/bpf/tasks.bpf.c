// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Every task's /proc/<pid>/{stat,status,io,schedstat} inputs in one read() of a task iterator
 * (iter/task, 5.8+): the process collector's fast path (issue 23). Reading /proc costs four
 * seq_file generations per process per second; this program copies the same kernel fields into
 * fixed binary records and user space (jitterscope_sources::task_records) computes what fs/proc/array.c
 * and fs/proc/base.c compute from them.
 *
 * Each task gets a `js_task_thread` record: the fields /proc sums over a thread group (faults,
 * CPU times, I/O accounting). A thread-group leader's record is followed by a `js_task_leader`
 * with the process-wide fields and the dead threads' sums that signal_struct holds. The iterator
 * walks tasks in pid order, threads included; user space groups them by tgid.
 *
 * Field accesses are CO-RE relocated against the running kernel's BTF; the members whose type
 * or presence changed between 5.10 and now are read through the `___old` flavours below and
 * `bpf_core_field_exists`, so one object loads on 5.10, 6.1 and current kernels. */
#include "jitterscope.h"

/* ---- Kernel types, only the members read here (`___js`: this program's view). ---- */

struct task_io_accounting___js {
	u64 rchar;
	u64 wchar;
	u64 syscr;
	u64 syscw;
	u64 read_bytes;
	u64 write_bytes;
	u64 cancelled_write_bytes;
} __attribute__((preserve_access_index));

struct prev_cputime___js {
	u64 utime;
	u64 stime;
} __attribute__((preserve_access_index));

struct signal_struct___js {
	int nr_threads;
	int group_exit_code;
	unsigned int flags;
	u64 utime;
	u64 stime;
	u64 cutime;
	u64 cstime;
	struct prev_cputime___js prev_cputime;
	unsigned long min_flt;
	unsigned long maj_flt;
	unsigned long cmin_flt;
	struct task_io_accounting___js ioac;
	unsigned long long sum_sched_runtime;
} __attribute__((preserve_access_index));

struct percpu_counter___js {
	s64 count;
	s32 *counters;
} __attribute__((preserve_access_index));

/* 6.2+: mm->rss_stat is an array of percpu_counter. */
struct mm_struct___js {
	unsigned long total_vm;
	struct percpu_counter___js rss_stat[4];
} __attribute__((preserve_access_index));

/* Before 6.2: struct mm_rss_stat { atomic_long_t count[NR_MM_COUNTERS]; }. atomic_long_t is a
 * struct wrapping the counter: declared as a plain long, the relocation of count[i] found the
 * kernel's member incompatible and 6.1 refused the whole program (the kernel matrix found it). */
struct atomic_long___js {
	s64 counter;
} __attribute__((preserve_access_index));

struct mm_rss_stat___old {
	struct atomic_long___js count[4];
} __attribute__((preserve_access_index));

struct mm_struct___old {
	struct mm_rss_stat___old rss_stat;
} __attribute__((preserve_access_index));

struct sched_entity___js {
	u64 sum_exec_runtime;
} __attribute__((preserve_access_index));

struct sched_info___js {
	unsigned long pcount;
	unsigned long long run_delay;
} __attribute__((preserve_access_index));

struct task_delay_info___js {
	u64 blkio_delay;
	u64 swapin_delay;
	/* Only since a3d5dc908a5f (5.18), which also stopped counting swap-in delays as block I/O
	 * in /proc's delayacct_blkio_ticks: its presence tells which sum /proc reports. */
	u64 swapin_start;
} __attribute__((preserve_access_index));

struct thread_info___js {
	u32 cpu;
} __attribute__((preserve_access_index));

struct workqueue_struct___js {
	char name[32];
} __attribute__((preserve_access_index));

struct workqueue_attrs___js {
	int nice;
} __attribute__((preserve_access_index));

struct worker_pool___js {
	int cpu;
	int id;
	struct workqueue_attrs___js *attrs;
} __attribute__((preserve_access_index));

struct worker___js {
	void *current_work;
	struct worker_pool___js *pool;
	int id;
	char desc[32];
	struct workqueue_struct___js *rescue_wq;
} __attribute__((preserve_access_index));

struct kthread___js {
	void *data;
	char *full_name;
} __attribute__((preserve_access_index));

struct task_struct___js {
	struct thread_info___js thread_info;
	unsigned int __state;
	unsigned int flags;
	int static_prio;
	struct sched_entity___js se;
	struct sched_info___js sched_info;
	struct mm_struct___js *mm;
	int exit_state;
	int exit_code;
	pid_t pid;
	pid_t tgid;
	struct task_struct___js *real_parent;
	void *worker_private;
	u64 utime;
	u64 stime;
	unsigned long nvcsw;
	unsigned long nivcsw;
	u64 start_boottime;
	unsigned long min_flt;
	unsigned long maj_flt;
	char comm[16];
	struct signal_struct___js *signal;
	void *sighand;
	struct task_io_accounting___js ioac;
	struct task_delay_info___js *delays;
} __attribute__((preserve_access_index));

/* Before 5.14 the state was `long state`; before 5.16 (x86) the CPU was task->cpu; before 5.17
 * struct kthread hung off set_child_tid. */
struct task_struct___old {
	long state;
	unsigned int cpu;
	int *set_child_tid;
} __attribute__((preserve_access_index));

struct seq_file;

/* 6.10+ (format_worker_id()); only its presence is read. */
enum wq_internal_consts {
	WORKER_ID_LEN = 42,
};

/* The per-CPU array map's per-CPU pointer follows its `aux` member (an 8-byte aligned union of
 * flexible arrays, too deep in anonymous structs for a CO-RE field access of its own). */
struct bpf_array___js {
	void *aux;
} __attribute__((preserve_access_index));

struct bpf_iter_meta {
	void *seq;
	u64 session_id;
	u64 seq_num;
} __attribute__((preserve_access_index));

struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct___js *task;
} __attribute__((preserve_access_index));

#define PF_KTHREAD 0x00200000
#define PF_WQ_WORKER 0x00000020
#define JS_MAX_CPUS 1024

/* ---- Records (mirrored by crates/bpf/src/task_iter.rs through the skeleton's types). ---- */

enum {
	JS_T_LEADER = 1 << 0,	/* a js_task_leader follows */
	JS_T_MM = 1 << 1,	/* get_task_mm() would return an mm: memory fields are valid */
	JS_T_SIGHAND = 1 << 2,	/* lock_task_sighand() would succeed: ppid, threads, exit code */
	JS_T_SCHED_INFO = 1 << 3, /* CONFIG_SCHED_INFO: /proc/<pid>/schedstat exists */
	JS_T_IO = 1 << 4,	/* CONFIG_TASK_XACCT: /proc/<pid>/io has values */
	JS_T_RSS_SUM = 1 << 5,	/* rss_sum holds per-CPU sums (percpu_counter kernels) */
	JS_T_WQ_ID_FMT = 1 << 6, /* 6.10+: wq workers are named by format_worker_id() */
	JS_T_WQ_POOL = 1 << 7,	/* a wq worker attached to a pool */
	JS_T_WQ_BUSY = 1 << 8,	/* ... running a work item (its desc gets '+', else '-') */
	JS_T_WQ_RESCUER = 1 << 9, /* ... a rescuer (kworker/R-<wq>) */
	JS_T_FULL_NAME = 1 << 10, /* `name` holds a kthread's untruncated name */
};

struct js_task_thread {
	u32 tid;
	u32 tgid;
	u32 bits;	/* JS_T_* */
	u32 flags;	/* task->flags */
	u64 min_flt;
	u64 maj_flt;
	u64 utime_ns;
	u64 stime_ns;
	u64 sum_exec_runtime_ns;
	u64 io[7];	/* rchar, wchar, syscr, syscw, read_bytes, write_bytes, cancelled */
	/* sched_info: run-queue wait and timeslices of this thread (/proc/<tid>/schedstat). Every
	 * thread's, for the host's mean wait per timeslice that decides runqlat's attachment. */
	u64 run_delay_ns;
	u64 pcount;
};

struct js_task_leader {
	char comm[16];
	char name[64];	/* kthread full name, or a rescuer's workqueue name */
	char desc[32];	/* wq worker's last work description */
	u32 state;	/* __state */
	u32 exit_state;
	s32 exit_code;
	s32 group_exit_code;
	u32 sig_flags;
	u32 ppid;
	s32 static_prio;
	u32 nr_threads;
	u32 cpu;
	s32 wq_pool_cpu;
	s32 wq_pool_id;
	s32 wq_worker_id;
	s32 wq_nice;
	u32 pad;
	u64 start_boottime_ns;
	u64 total_vm;	/* pages */
	s64 rss_count[4]; /* percpu_counter .count (or the atomic), MM_FILEPAGES.. order */
	s64 rss_sum[4];	/* .count plus every CPU's share */
	u64 nvcsw;
	u64 nivcsw;
	u64 blkio_delay_ns;
	u64 sig_min_flt;
	u64 sig_maj_flt;
	u64 sig_cmin_flt;
	u64 sig_utime_ns;
	u64 sig_stime_ns;
	u64 sig_sum_sched_runtime_ns;
	u64 sig_cutime_ns;
	u64 sig_cstime_ns;
	u64 sig_io[7];
	u64 prev_utime_ns;	/* signal->prev_cputime: cputime_adjust()'s state */
	u64 prev_stime_ns;
};

/* Scratch for the leader record (too large for the BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct js_task_leader);
} leader_buf SEC(".maps");

/* Only its per-CPU addresses are used (find_pcpu_offsets). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} pcpu_probe SEC(".maps");

/* Set by user space before load: possible CPUs, for the per-CPU sums. */
const volatile u32 js_nr_cpus = 1;

/* Per-CPU offsets, found at the first task of each read; js_pcpu_ready once they are. */
s64 js_pcpu_off[JS_MAX_CPUS];
u32 js_pcpu_ready = 0;
/* Gives the skeleton a Rust type of the thread record (crates/bpf/src/task_iter.rs reads them). */
struct js_task_thread js_thread_layout;
/* Tasks whose leader record could not be written (no scratch); user space says so. */
u64 js_missed = 0;

/* Fields are read by direct loads from the task's BTF-typed pointer (faulting loads read 0),
 * several times cheaper than a bpf_probe_read_kernel() call each; only what the verifier does
 * not type (void * members, per-CPU addresses) goes through the helper. */
static __always_inline void read_io(u64 *out, struct task_io_accounting___js *ioac)
{
	out[0] = ioac->rchar;
	out[1] = ioac->wchar;
	out[2] = ioac->syscr;
	out[3] = ioac->syscw;
	if (bpf_core_field_exists(ioac->read_bytes)) {
		out[4] = ioac->read_bytes;
		out[5] = ioac->write_bytes;
		out[6] = ioac->cancelled_write_bytes;
	}
}

/* A kernel address as a number. Needs CAP_PERFMON (the verifier's allow_ptr_leaks), which
 * loading a task iterator needs anyway. */
static __always_inline u64 js_addr(const void *p)
{
	u64 v = 0;
	bpf_probe_read_kernel(&v, sizeof(v), &p);
	return v;
}

/* Each CPU's per-CPU offset (__per_cpu_offset[cpu], which no BTF or kallsyms entry gives here):
 * a per-CPU map value's address on that CPU minus the map's per-CPU pointer. A CPU that cannot
 * be looked up gets -1 and its share of a per-CPU counter is not added. */
static __always_inline void find_pcpu_offsets(void)
{
	u32 zero = 0;
	u64 pptr = 0;
	u64 map = js_addr(&pcpu_probe);
	if (bpf_probe_read_kernel(&pptr, sizeof(pptr),
				  (void *)(map + bpf_core_field_offset(struct bpf_array___js, aux) + 8)) ||
	    !pptr)
		return;
	for (u32 cpu = 0; cpu < JS_MAX_CPUS; cpu++) {
		if (cpu >= js_nr_cpus)
			break;
		void *v = bpf_map_lookup_percpu_elem(&pcpu_probe, &zero, cpu);
		js_pcpu_off[cpu] = v ? (s64)(js_addr(v) - pptr) : -1;
	}
	js_pcpu_ready = 1;
}

/* percpu_counter_sum(): the central count plus each CPU's unflushed share. */
static __always_inline s64 pcpu_sum(struct percpu_counter___js *c)
{
	s64 sum = c->count;
	u64 counters = (u64)c->counters;
	if (!counters || !js_pcpu_ready)
		return sum;
	for (u32 cpu = 0; cpu < JS_MAX_CPUS; cpu++) {
		if (cpu >= js_nr_cpus)
			break;
		s64 off = js_pcpu_off[cpu & (JS_MAX_CPUS - 1)];
		if (off == -1)
			continue;
		s32 v = 0;
		bpf_probe_read_kernel(&v, sizeof(v), (void *)(counters + off));
		sum += v;
	}
	return sum;
}

static __always_inline void read_mm(struct js_task_leader *l, struct task_struct___js *t, u32 *bits)
{
	struct mm_struct___js *mm = t->mm;
	/* get_task_mm(): none for kernel threads, even one borrowing a user mm. */
	if (!mm || (t->flags & PF_KTHREAD))
		return;
	*bits |= JS_T_MM;
	l->total_vm = mm->total_vm;
	/* Literal indexes: a CO-RE relocation scales only a constant index by the kernel's
	 * element size (percpu_counter is larger there than the two members declared here). */
	if (bpf_core_type_exists(struct mm_rss_stat___old)) {
		struct mm_struct___old *old = (void *)mm;
	/* Read, not dereferenced: 5.10's verifier cannot walk into atomic_long_t (a typedef of a
	 * typedef of a struct) through a BTF pointer ("Type 'atomic_long_t' is not a struct"). */
#define JS_RSS_OLD(i)                                                    \
	bpf_core_read(&l->rss_count[i], sizeof(l->rss_count[i]),        \
		      &old->rss_stat.count[i].counter);                  \
	l->rss_sum[i] = l->rss_count[i];
		JS_RSS_OLD(0) JS_RSS_OLD(1) JS_RSS_OLD(2) JS_RSS_OLD(3)
		return;
	}
	if (js_pcpu_ready)
		*bits |= JS_T_RSS_SUM;
#define JS_RSS(i)                                                        \
	l->rss_count[i] = mm->rss_stat[i].count;          \
	l->rss_sum[i] = pcpu_sum(&mm->rss_stat[i]);
	JS_RSS(0) JS_RSS(1) JS_RSS(2) JS_RSS(3)
}

/* What proc_task_name() needs beyond task->comm for kernel threads. */
static __always_inline void read_kthread_name(struct js_task_leader *l, struct task_struct___js *t,
					      u32 flags, u32 *bits)
{
	if (!(flags & PF_KTHREAD))
		return;
	/* to_kthread() */
	struct kthread___js *k;
	if (bpf_core_field_exists(t->worker_private))
		k = BPF_CORE_READ(t, worker_private);
	else
		k = (void *)BPF_CORE_READ((struct task_struct___old *)t, set_child_tid);
	if (!k)
		return;
	if (flags & PF_WQ_WORKER) {
		struct worker___js *w = BPF_CORE_READ(k, data);
		if (!w)
			return;
		if (bpf_core_enum_value_exists(enum wq_internal_consts, WORKER_ID_LEN))
			*bits |= JS_T_WQ_ID_FMT;
		struct workqueue_struct___js *rescue = BPF_CORE_READ(w, rescue_wq);
		if (rescue) {
			*bits |= JS_T_WQ_RESCUER;
			bpf_probe_read_kernel_str(l->name, sizeof(rescue->name), &rescue->name);
		}
		struct worker_pool___js *pool = BPF_CORE_READ(w, pool);
		l->wq_worker_id = BPF_CORE_READ(w, id);
		if (pool) {
			*bits |= JS_T_WQ_POOL;
			l->wq_pool_cpu = BPF_CORE_READ(pool, cpu);
			l->wq_pool_id = BPF_CORE_READ(pool, id);
			l->wq_nice = BPF_CORE_READ(pool, attrs, nice);
			if (BPF_CORE_READ(w, current_work))
				*bits |= JS_T_WQ_BUSY;
			bpf_probe_read_kernel_str(l->desc, sizeof(l->desc), &w->desc);
		}
		return;
	}
	if (!bpf_core_field_exists(k->full_name))
		return;
	char *full = BPF_CORE_READ(k, full_name);
	if (full && bpf_probe_read_kernel_str(l->name, sizeof(l->name), full) > 0)
		*bits |= JS_T_FULL_NAME;
}

SEC("iter/task")
int js_tasks(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct___js *t = ctx->task;
	if (!t)
		return 0;
	/* Per-CPU rss counters exist only where mm_rss_stat does not (6.2+), and so does the
	 * helper that locates them (6.0+): on older kernels this is dead code the verifier drops. */
	if (ctx->meta->seq_num == 0 && !bpf_core_type_exists(struct mm_rss_stat___old))
		find_pcpu_offsets();

	struct js_task_thread th = {};
	th.tid = t->pid;
	th.tgid = t->tgid;
	th.flags = t->flags;
	th.min_flt = t->min_flt;
	th.maj_flt = t->maj_flt;
	/* task_cputime(): the tick-accounted times (no VIRT_CPU_ACCOUNTING_GEN vtime here). */
	th.utime_ns = t->utime;
	th.stime_ns = t->stime;
	th.sum_exec_runtime_ns = t->se.sum_exec_runtime;
	if (bpf_core_field_exists(t->ioac.rchar)) {
		th.bits |= JS_T_IO;
		read_io(th.io, &t->ioac);
	}
	if (bpf_core_field_exists(t->sched_info)) {
		th.bits |= JS_T_SCHED_INFO;
		th.run_delay_ns = t->sched_info.run_delay;
		th.pcount = t->sched_info.pcount;
	}
	bool leader = th.tid == th.tgid;
	if (!leader) {
		bpf_seq_write(seq, &th, sizeof(th));
		return 0;
	}

	u32 zero = 0;
	struct js_task_leader *l = bpf_map_lookup_elem(&leader_buf, &zero);
	if (!l) {
		__sync_fetch_and_add(&js_missed, 1);
		return 0;
	}
	__builtin_memset(l, 0, sizeof(*l));
	th.bits |= JS_T_LEADER;
	bpf_probe_read_kernel_str(l->comm, sizeof(l->comm), &t->comm);
	if (bpf_core_field_exists(t->__state))
		l->state = t->__state;
	else
		l->state = ((struct task_struct___old *)t)->state;
	l->exit_state = t->exit_state;
	l->exit_code = t->exit_code;
	l->static_prio = t->static_prio;
	if (bpf_core_field_exists(t->thread_info.cpu))
		l->cpu = t->thread_info.cpu;
	else
		l->cpu = ((struct task_struct___old *)t)->cpu;
	l->start_boottime_ns = t->start_boottime;
	l->nvcsw = t->nvcsw;
	l->nivcsw = t->nivcsw;
	struct task_delay_info___js *d = t->delays;
	if (d) {
		l->blkio_delay_ns = d->blkio_delay;
		if (!bpf_core_field_exists(d->swapin_start))
			l->blkio_delay_ns += d->swapin_delay;
	}
	if (t->sighand) {
		th.bits |= JS_T_SIGHAND;
		l->ppid = t->real_parent->tgid;
	}
	struct signal_struct___js *sig = t->signal;
	if (sig) {
		l->nr_threads = sig->nr_threads;
		l->group_exit_code = sig->group_exit_code;
		l->sig_flags = sig->flags;
		l->sig_min_flt = sig->min_flt;
		l->sig_maj_flt = sig->maj_flt;
		l->sig_cmin_flt = sig->cmin_flt;
		l->sig_utime_ns = sig->utime;
		l->sig_stime_ns = sig->stime;
		l->sig_sum_sched_runtime_ns = sig->sum_sched_runtime;
		l->sig_cutime_ns = sig->cutime;
		l->sig_cstime_ns = sig->cstime;
		l->prev_utime_ns = sig->prev_cputime.utime;
		l->prev_stime_ns = sig->prev_cputime.stime;
		if (th.bits & JS_T_IO)
			read_io(l->sig_io, &sig->ioac);
	}
	read_mm(l, t, &th.bits);
	read_kthread_name(l, t, th.flags, &th.bits);
	bpf_seq_write(seq, &th, sizeof(th));
	bpf_seq_write(seq, l, sizeof(*l));
	return 0;
}
