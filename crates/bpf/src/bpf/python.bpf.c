// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* CPython frames at the moment of each stack sample (issue 22). Attached to the stack sampler's
 * own cpu-clock events (SEC("perf_event")), so it runs in the same interrupt as the sample it
 * belongs to: for a thread of a registered interpreter it finds the thread's PyThreadState and
 * copies the interpreter's frame chain (code object and last instruction of each frame) into a
 * ring buffer record stamped with the thread and the time. User space pairs the record with the
 * perf sample of the same thread and time, and names the code objects.
 *
 * The interpreter's structures are not in the kernel's BTF: their offsets come from user space
 * per process (`js_py_procs`), for the CPython version it found mapped (see
 * jitterscope_profile::python). Every read is a bpf_probe_read_user that may fail (a page not
 * present, a structure being rebuilt); a failed read ends the walk, it never stalls the task. */
#include "jitterscope.h"

#define JS_PY_FRAMES 64
#define JS_PY_THREADS 32

/* Where the fields are, in bytes, and how to read them; set by user space for the
 * interpreter's version. JS_PY_NONE marks a field the version does not have. */
#define JS_PY_NONE 0xffffffffu

enum {
	/* how a thread state names its thread */
	JS_PY_TID_NATIVE = 0,  /* native_thread_id: gettid() (3.11+) */
	JS_PY_TID_PTHREAD = 1, /* thread_id: pthread_self(), the thread's fs base on x86-64 */
};

struct js_py_offsets {
	u32 runtime_interp_head;  /* _PyRuntimeState.interpreters.head */
	u32 runtime_tstate;       /* _PyRuntimeState.gilstate.tstate_current (the GIL holder) */
	u32 interp_threads_head;  /* PyInterpreterState.threads.head / tstate_head */
	u32 tstate_next;          /* PyThreadState.next */
	u32 tstate_tid;           /* PyThreadState.native_thread_id / thread_id */
	u32 tstate_frame;         /* PyThreadState.cframe / current_frame / frame */
	u32 cframe_current;       /* _PyCFrame.current_frame (JS_PY_NONE: tstate_frame is the frame) */
	u32 frame_code;           /* f_code / f_executable */
	u32 frame_previous;       /* previous / f_back */
	u32 frame_instr;          /* prev_instr / instr_ptr / f_lasti */
	u32 frame_entry;          /* is_entry (3.11) or owner (3.12+): copied as the frame's flag */
	u32 tid_kind;
};

struct js_py_proc {
	u64 runtime; /* address of _PyRuntime in the process */
	struct js_py_offsets off;
};

struct js_py_frame {
	u64 code;
	u64 instr;
};

struct js_py_sample {
	u32 pid;
	u32 tid;
	u64 time_ns;
	u32 frames;
	u32 pad;
	struct js_py_frame frame[JS_PY_FRAMES];
	/* each frame's is_entry (3.11) or owner (3.12+) byte */
	u8 flag[JS_PY_FRAMES];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, struct js_py_proc);
} js_py_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} js_py_samples SEC(".maps");

/* Only for the skeleton's generated types: the records are written to the ring, not here. */
struct js_py_sample js_py_sample_layout;

/* Samples of a registered process whose record could not be written (ring full). */
u64 js_py_missed = 0;

struct upid {
	int nr;
} __attribute__((preserve_access_index));

struct pid {
	unsigned int level;
	struct upid numbers[1];
} __attribute__((preserve_access_index));

struct task_struct___py {
	struct pid *thread_pid;
} __attribute__((preserve_access_index));

/* The thread's id as the process itself sees it (gettid() in its pid namespace), which is what
 * CPython stores: a container's threads have other ids on the host. */
static __always_inline u32 ns_tid(u32 host_tid)
{
	struct task_struct___py *t = (void *)bpf_get_current_task();
	struct pid *p = BPF_CORE_READ(t, thread_pid);
	unsigned int level = BPF_CORE_READ(p, level);
	int nr = 0;
	if (!p || level > 31)
		return host_tid;
	u64 at = (u64)p + bpf_core_field_offset(struct pid, numbers) +
		 (u64)level * bpf_core_type_size(struct upid) + bpf_core_field_offset(struct upid, nr);
	if (bpf_probe_read_kernel(&nr, sizeof(nr), (void *)at) || nr <= 0)
		return host_tid;
	return nr;
}

static __always_inline u64 read_ptr(u64 at)
{
	u64 v = 0;
	if (bpf_probe_read_user(&v, sizeof(v), (void *)at))
		return 0;
	return v;
}

struct thread_struct___py {
	unsigned long fsbase;
} __attribute__((preserve_access_index));

struct task_struct___fs {
	struct thread_struct___py thread;
} __attribute__((preserve_access_index));

/* What the thread state of the current thread holds in its tid field. */
static __always_inline u64 own_tid(const struct js_py_proc *p, u32 host_tid)
{
	if (p->off.tid_kind == JS_PY_TID_PTHREAD) {
		struct task_struct___fs *t = (void *)bpf_get_current_task();
		if (bpf_core_field_exists(t->thread.fsbase))
			return BPF_CORE_READ(t, thread.fsbase);
		return 0;
	}
	return ns_tid(host_tid);
}

static __always_inline bool is_thread(u64 ts, const struct js_py_proc *p, u64 tid)
{
	return ts && tid && read_ptr(ts + p->off.tstate_tid) == tid;
}

SEC("perf_event")
int js_py_stack(void *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32;
	struct js_py_proc *p = bpf_map_lookup_elem(&js_py_procs, &tgid);
	if (!p)
		return 1;
	u64 tid = own_tid(p, (u32)id);
	/* The GIL holder first, where the version keeps it: on a CPU-bound interpreter that is
	 * the thread on the CPU. */
	u64 ts = 0;
	if (p->off.runtime_tstate != JS_PY_NONE)
		ts = read_ptr(p->runtime + p->off.runtime_tstate);
	if (!is_thread(ts, p, tid)) {
		u64 interp = read_ptr(p->runtime + p->off.runtime_interp_head);
		ts = interp ? read_ptr(interp + p->off.interp_threads_head) : 0;
#pragma clang loop unroll(disable)
		for (int i = 0; i < JS_PY_THREADS && ts; i++) {
			if (is_thread(ts, p, tid))
				break;
			ts = read_ptr(ts + p->off.tstate_next);
		}
		if (!is_thread(ts, p, tid))
			return 1; /* not a Python thread, or not one this walk reaches */
	}
	u64 frame = read_ptr(ts + p->off.tstate_frame);
	if (frame && p->off.cframe_current != JS_PY_NONE)
		frame = read_ptr(frame + p->off.cframe_current);
	if (!frame)
		return 1;
	struct js_py_sample *r = bpf_ringbuf_reserve(&js_py_samples, sizeof(*r), 0);
	if (!r) {
		__sync_fetch_and_add(&js_py_missed, 1);
		return 1;
	}
	r->pid = tgid;
	r->tid = (u32)id;
	r->time_ns = bpf_ktime_get_ns();
	r->pad = 0;
	u32 n = 0;
	/* Every frame the same way, whatever the version: what the flag byte means (3.11's
	 * is_entry, 3.12's owner that marks a shim frame) and how wide the instruction field is
	 * are decided in user space. Branching on them here multiplied the verifier's states past
	 * its limit. Not unrolled: the verifier walks the loop (bounded loops, 5.3+). */
#pragma clang loop unroll(disable)
	for (int i = 0; i < JS_PY_FRAMES; i++) {
		if (!frame)
			break;
		u64 code = read_ptr(frame + p->off.frame_code);
		if (!code)
			break;
		r->frame[i].code = code;
		r->frame[i].instr = read_ptr(frame + p->off.frame_instr);
		u8 flag = 0;
		bpf_probe_read_user(&flag, 1, (void *)(frame + p->off.frame_entry));
		r->flag[i] = flag;
		n = i + 1;
		frame = read_ptr(frame + p->off.frame_previous);
	}
	r->frames = n;
	bpf_ringbuf_submit(r, 0);
	return 1;
}

