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

/* Where the fields are, in bytes; set by user space for the interpreter's version. */
struct js_py_offsets {
	u32 runtime_interp_head;  /* _PyRuntimeState.interpreters.head */
	u32 runtime_tstate;       /* _PyRuntimeState.gilstate.tstate_current (the GIL holder) */
	u32 interp_threads_head;  /* PyInterpreterState.threads.head */
	u32 tstate_next;          /* PyThreadState.next */
	u32 tstate_native_tid;    /* PyThreadState.native_thread_id */
	u32 tstate_cframe;        /* PyThreadState.cframe */
	u32 cframe_current;       /* _PyCFrame.current_frame */
	u32 frame_code;           /* _PyInterpreterFrame.f_code */
	u32 frame_previous;       /* _PyInterpreterFrame.previous */
	u32 frame_instr;          /* _PyInterpreterFrame.prev_instr */
	u32 frame_entry;          /* _PyInterpreterFrame.is_entry */
	u32 pad;
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
	/* bit i: frame i was entered by a C call to _PyEval_EvalFrameDefault (3.11's is_entry) */
	u32 pad;
	u64 entry;
	struct js_py_frame frame[JS_PY_FRAMES];
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

static __always_inline bool is_thread(u64 ts, const struct js_py_proc *p, u32 tid)
{
	return ts && read_ptr(ts + p->off.tstate_native_tid) == tid;
}

SEC("perf_event")
int js_py_stack(void *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32;
	struct js_py_proc *p = bpf_map_lookup_elem(&js_py_procs, &tgid);
	if (!p)
		return 1;
	u32 tid = ns_tid((u32)id);
	/* The GIL holder first: on a CPU-bound interpreter that is the thread on the CPU. */
	u64 ts = read_ptr(p->runtime + p->off.runtime_tstate);
	if (!is_thread(ts, p, tid)) {
		u64 interp = read_ptr(p->runtime + p->off.runtime_interp_head);
		ts = interp ? read_ptr(interp + p->off.interp_threads_head) : 0;
		for (int i = 0; i < JS_PY_THREADS && ts; i++) {
			if (is_thread(ts, p, tid))
				break;
			ts = read_ptr(ts + p->off.tstate_next);
		}
		if (!is_thread(ts, p, tid))
			return 1; /* not a Python thread, or not one this walk reaches */
	}
	u64 cframe = read_ptr(ts + p->off.tstate_cframe);
	u64 frame = cframe ? read_ptr(cframe + p->off.cframe_current) : 0;
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
	r->entry = 0;
	r->pad = 0;
	u32 n = 0;
	for (int i = 0; i < JS_PY_FRAMES; i++) {
		if (!frame)
			break;
		u64 code = read_ptr(frame + p->off.frame_code);
		if (!code)
			break;
		r->frame[i].code = code;
		r->frame[i].instr = read_ptr(frame + p->off.frame_instr);
		u8 entry = 0;
		bpf_probe_read_user(&entry, 1, (void *)(frame + p->off.frame_entry));
		if (entry)
			r->entry |= 1ULL << i;
		n = i + 1;
		frame = read_ptr(frame + p->off.frame_previous);
	}
	r->frames = n;
	bpf_ringbuf_submit(r, 0);
	return 1;
}

