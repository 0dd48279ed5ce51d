//! The loader of python.bpf.c: CPython frame chains copied at the stack sampler's own samples
//! (issue 22). This module only moves bytes: `jitterscope_profile::python` finds interpreters,
//! gives their structures' offsets and names what the records point at.
//!
//! Not a tracer: it hangs off the sampler's perf events (PERF_EVENT_IOC_SET_BPF), so it runs
//! only when a sample is taken, and costs a process that is not a registered interpreter one
//! hash look-up per sample.

use std::cell::RefCell;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::rc::Rc;
use std::time::Duration;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, RingBuffer, RingBufferBuilder};

#[allow(clippy::all, clippy::pedantic, non_camel_case_types, dead_code, unused)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/python.skel.rs"));
}
use skel::*;

/// Frames a record holds at most (`JS_PY_FRAMES`); deeper chains are cut at the root end.
pub const MAX_FRAMES: usize = 64;

/// A field the version does not have (`JS_PY_NONE`).
pub const NONE: u32 = u32::MAX;

/// How a thread state names its thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TidKind {
    /// `native_thread_id`, gettid() in the process's pid namespace (3.11+).
    #[default]
    Native = 0,
    /// `thread_id`, pthread_self(): the thread's fs base on x86-64 (3.8–3.10).
    Pthread = 1,
}

/// How a frame keeps its last instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InstrKind {
    /// A pointer into the code object's bytecode (3.11+).
    #[default]
    Pointer = 0,
    /// `f_lasti`, an int (3.8–3.10): the low 4 bytes of what the record holds.
    Int = 1,
}

/// Which frames a C call of the evaluation loop entered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EntryKind {
    /// The frame's `is_entry` byte (3.11).
    #[default]
    Flag = 0,
    /// The frame above a shim frame whose `owner` is FRAME_OWNED_BY_CSTACK (3.12+).
    Shim = 1,
    /// Every frame: one C call per Python frame (3.8–3.10).
    All = 2,
}

/// Where the interpreter's fields are, in bytes, and how to read them
/// (`struct js_py_offsets`); [`NONE`] for a field the version lacks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offsets {
    /// `_PyRuntimeState.interpreters.head`.
    pub runtime_interp_head: u32,
    /// `_PyRuntimeState.gilstate.tstate_current` (to 3.11).
    pub runtime_tstate: u32,
    /// `PyInterpreterState.threads.head` (`tstate_head` to 3.10).
    pub interp_threads_head: u32,
    /// `PyThreadState.next`.
    pub tstate_next: u32,
    /// `PyThreadState.native_thread_id` or `thread_id` (see `tid_kind`).
    pub tstate_tid: u32,
    /// `PyThreadState.cframe` (3.11, 3.12), `current_frame` (3.13), `frame` (to 3.10).
    pub tstate_frame: u32,
    /// `_PyCFrame.current_frame`, when `tstate_frame` is a cframe.
    pub cframe_current: u32,
    /// `f_code` (`f_executable` in 3.13).
    pub frame_code: u32,
    /// `previous` (`f_back` to 3.10).
    pub frame_previous: u32,
    /// `prev_instr` (3.11, 3.12), `instr_ptr` (3.13), `f_lasti` (to 3.10): 8 bytes are read,
    /// see [`InstrKind`].
    pub frame_instr: u32,
    /// `is_entry` (3.11) or `owner` (3.12+).
    pub frame_entry: u32,
    /// FRAME_OWNED_BY_CSTACK's value (3.12+).
    pub owner_cstack: u32,
    /// See [`TidKind`].
    pub tid_kind: TidKind,
    /// See [`InstrKind`].
    pub instr_kind: InstrKind,
    /// See [`EntryKind`].
    pub entry_kind: EntryKind,
}

/// One sample's interpreter frames, innermost first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PyRecord {
    /// Process and thread, as the host sees them.
    pub pid: u32,
    pub tid: u32,
    /// CLOCK_MONOTONIC, ns, taken just after the perf sample's own time.
    pub time_ns: u64,
    /// (code object, last instruction field's 8 bytes) of each frame.
    pub frames: Vec<(u64, u64)>,
    /// Each frame's flag byte: `is_entry` (3.11) or `owner` (3.12+); see [`EntryKind`].
    pub flags: Vec<u8>,
}

const RECORD: usize = std::mem::size_of::<types::js_py_sample>();

/// Decodes one ring record; `None` when it is not one (a short read never panics).
pub fn parse(b: &[u8]) -> Option<PyRecord> {
    if b.len() < RECORD {
        return None;
    }
    // SAFETY: RECORD bytes are there; the type is plain old data (integers only).
    let r: types::js_py_sample = unsafe { std::ptr::read_unaligned(b.as_ptr().cast()) };
    let n = (r.frames as usize).min(MAX_FRAMES);
    Some(PyRecord {
        pid: r.pid,
        tid: r.tid,
        time_ns: r.time_ns,
        frames: r.frame[..n].iter().map(|f| (f.code, f.instr)).collect(),
        flags: r.flag[..n].to_vec(),
    })
}

/// The loaded program, attached to the sampler's events.
pub struct PyWalker {
    skel: PythonSkel<'static>,
    ring: RingBuffer<'static>,
    got: Rc<RefCell<Vec<PyRecord>>>,
}

/// `_IOW('$', 8, __u32)`.
const PERF_EVENT_IOC_SET_BPF: libc::c_ulong = 0x4004_2408;

impl PyWalker {
    /// Loads the program and attaches it to each of `perf_fds` (the sampler's cpu-clock
    /// events). The error says what is missing.
    pub fn load(perf_fds: &[RawFd]) -> Result<Self, String> {
        if !crate::env::has_btf() {
            return Err("the kernel exposes no BTF (/sys/kernel/btf/vmlinux)".into());
        }
        if !jitterscope_model::caps::can_trace() {
            return Err("reading interpreter frames needs CAP_BPF and CAP_PERFMON".into());
        }
        crate::verifier::install();
        let _ = crate::verifier::take();
        let open = PythonSkelBuilder::default()
            .open(crate::object_storage())
            .map_err(|e| format!("opening the BPF object: {e}"))?;
        let skel = open.load().map_err(|e| crate::load_error(&e))?;
        let prog = skel.progs.js_py_stack.as_fd().as_raw_fd();
        for &fd in perf_fds {
            // The ioctl rather than a libbpf link: a perf link owns the event's descriptor and
            // closes it when dropped, and that descriptor is the sampler's.
            // SAFETY: plain ioctl on descriptors we hold.
            if unsafe { libc::ioctl(fd, PERF_EVENT_IOC_SET_BPF as _, prog) } != 0 {
                return Err(format!(
                    "attaching to the sampler's events: {}",
                    std::io::Error::last_os_error()
                ));
            }
        }
        let got = Rc::new(RefCell::new(Vec::new()));
        let sink = got.clone();
        let mut b = RingBufferBuilder::new();
        b.add(&skel.maps.js_py_samples, move |data: &[u8]| {
            if let Some(r) = parse(data) {
                sink.borrow_mut().push(r);
            }
            0
        })
        .map_err(|e| format!("the frames' ring buffer: {e}"))?;
        let ring = b
            .build()
            .map_err(|e| format!("the frames' ring buffer: {e}"))?;
        Ok(PyWalker { skel, ring, got })
    }

    /// Registers interpreter `pid`: `runtime` is the address of its `_PyRuntime`.
    pub fn add(&self, pid: u32, runtime: u64, off: &Offsets) -> Result<(), String> {
        let v = types::js_py_proc {
            runtime,
            off: types::js_py_offsets {
                runtime_interp_head: off.runtime_interp_head,
                runtime_tstate: off.runtime_tstate,
                interp_threads_head: off.interp_threads_head,
                tstate_next: off.tstate_next,
                tstate_tid: off.tstate_tid,
                tstate_frame: off.tstate_frame,
                cframe_current: off.cframe_current,
                frame_code: off.frame_code,
                frame_previous: off.frame_previous,
                frame_instr: off.frame_instr,
                frame_entry: off.frame_entry,
                tid_kind: off.tid_kind as u32,
            },
        };
        // SAFETY: plain old data viewed as its bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&v as *const types::js_py_proc).cast::<u8>(),
                std::mem::size_of_val(&v),
            )
        };
        self.skel
            .maps
            .js_py_procs
            .update(&pid.to_ne_bytes(), bytes, MapFlags::ANY)
            .map_err(|e| format!("registering interpreter {pid}: {e}"))
    }

    /// Forgets `pid` (it exec'd or exited).
    pub fn remove(&self, pid: u32) {
        let _ = self.skel.maps.js_py_procs.delete(&pid.to_ne_bytes());
    }

    /// Every record written since the last call, appended to `out` in ring order.
    pub fn drain(&mut self, out: &mut Vec<PyRecord>) {
        let _ = self.ring.poll(Duration::ZERO);
        out.append(&mut self.got.borrow_mut());
    }

    /// Samples of registered processes whose record did not fit in the ring, since load.
    pub fn missed(&self) -> u64 {
        self.skel
            .maps
            .bss_data
            .as_deref()
            .map_or(0, |b| b.js_py_missed)
    }
}
