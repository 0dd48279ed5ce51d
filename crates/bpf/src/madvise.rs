//! madvise() calls and bytes per process and advice (madvise.bpf.c).

use std::path::Path;

use jitterscope_model::signals;
use jitterscope_model::tracers::{Madvise, MadviseProc, TracerId, Tracers};
use libbpf_rs::skel::SkelBuilder;

use crate::delta::{Deltas, Layout};
use crate::env::has_tracepoint;
use crate::tp_format::{check, field, Record};
use crate::{create_other, need_tracepoints, Env, Tracer, TracerDef};

use crate::{drain_procs, load_and_attach, open_skel, since};

#[allow(clippy::all, clippy::pedantic, non_camel_case_types, dead_code, unused)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/madvise.skel.rs"));
}
use skel::*;

/// js_madvise_proc: comm (2 words), cgroup, calls[3], bytes[3] (DONTNEED, FREE, other).
const LAYOUT: Layout = Layout {
    words: 10,
    keep: &[0, 1, 2, 3],
    named_gen: Some(3),
};
const _: () = assert!(std::mem::size_of::<types::js_madvise_proc>() == LAYOUT.words * 8);

pub(crate) static DEF: TracerDef = TracerDef {
    id: TracerId::MADVISE,
    // Shootdowns other CPUs receive (/proc/interrupts TLB), not every flush: local mm flushes
    // come with every exec and exit (a shell script makes thousands a second) and disturb no
    // other CPU.
    demand: Some(&signals::TLB_STORM),
    unmeasured_attaches: false,
    release_below: None,
    load: |env, tracefs| {
        if env.counted_by_another.contains(&TracerId::MADVISE) {
            return Ok(Box::new(InTlb::default()));
        }
        Ok(Box::new(load(env, tracefs?)?))
    },
    records,
};

/// A process's row from its six counts as both programs that count them lay them out: calls per
/// advice (DONTNEED, FREE, other), then bytes per advice.
pub(crate) fn proc_row(pid: u32, comm: String, cgroup: String, c: &[u64]) -> MadviseProc {
    let at = |i: usize| c.get(i).copied().unwrap_or(0);
    MadviseProc {
        pid,
        comm,
        cgroup,
        dontneed_calls: at(0),
        free_calls: at(1),
        other_calls: at(2),
        dontneed_bytes: at(3),
        free_bytes: at(4),
        other_bytes: at(5),
    }
}

/// madvise counted by the tlb tracer's flush program (tlb.bpf.c, btf_tlb_flush_madvise), which
/// also reads its counts into the sample: nothing of its own to load, attach or read, and
/// attached whenever tlb is.
#[derive(Default)]
struct InTlb {
    links: Vec<libbpf_rs::Link>,
}

impl Tracer for InTlb {
    fn read(&mut self, _: &mut Env, _: &mut Tracers) {}

    fn object(&self) -> Option<&libbpf_rs::Object> {
        None
    }

    fn links(&mut self) -> &mut Vec<libbpf_rs::Link> {
        &mut self.links
    }

    fn follows(&self) -> Option<TracerId> {
        Some(TracerId::TLB)
    }

    fn how(&self) -> String {
        "BTF-typed tracepoint tlb_flush, in the tlb tracer's program: calls that flushed the TLB, from the flushing task's syscall registers".into()
    }

    fn new_generation(&mut self) {}
}

pub(crate) struct MadviseTracer {
    links: Vec<libbpf_rs::Link>,
    skel: MadviseSkel<'static>,
    procs: Deltas<u32>,
    procs_batch: crate::map_batch::Batch,
    /// Seen at TLB flushes (the registers of the flushing task), not at the syscall tracepoint.
    at_flush: bool,
    /// Why the flush-time program could not run, for `how`.
    refused: Option<String>,
    dropped: u64,
}

/// The record fields the programs read (the syscall tracepoint fallback's; the flush program
/// is BTF-typed and needs no record layout).
pub(crate) fn records() -> Vec<Record> {
    vec![Record {
        event: "syscalls/sys_enter_madvise".into(),
        fields: vec![
            field!(types::sys_enter_madvise_args, len, "len_in"),
            field!(types::sys_enter_madvise_args, behavior, "behavior"),
        ],
    }]
}

type Loaded = (MadviseSkel<'static>, Vec<libbpf_rs::Link>);

fn open_and_load(env: &Env, at_flush: bool, attach_now: bool) -> Result<Loaded, String> {
    let mut open = open_skel!(MadviseSkelBuilder, env);
    #[cfg(target_arch = "x86_64")]
    open.progs.madvise_flush.set_autoload(at_flush);
    #[cfg(not(target_arch = "x86_64"))]
    if at_flush {
        return Err("the flush program reads x86-64 registers".into());
    }
    open.progs.sys_enter_madvise.set_autoload(!at_flush);
    // Per-CPU values: keep the map near 2 MiB whatever the number of CPUs.
    let cpus = libbpf_rs::num_possible_cpus().unwrap_or(1).max(1);
    let per_entry = std::mem::size_of::<types::js_madvise_proc>() * cpus;
    let entries = ((2 << 20) / per_entry).clamp(256, 4096) as u32;
    open.maps
        .madvise_procs
        .set_max_entries(entries)
        .map_err(|e| format!("sizing madvise_procs: {e}"))?;
    load_and_attach(
        open,
        |s| create_other(&s.maps.madvise_procs),
        if at_flush {
            "tp_btf/tlb_flush"
        } else {
            "syscalls:sys_enter_madvise"
        },
        attach_now,
    )
}

pub(crate) fn load(env: &mut Env, tracefs: &Path) -> Result<MadviseTracer, String> {
    let attach_now = !env.defer_on_demand;
    // At the TLB flushes of the calling task when the kernel has them (tlb:tlb_flush, x86) and
    // gives a program the task's entry registers (bpf_task_pt_regs, 5.15): nothing then runs
    // on other system calls. Else the syscall tracepoint, whose cost is every system call's.
    let flush = if has_tracepoint(tracefs, "tlb", "tlb_flush") {
        open_and_load(env, true, attach_now)
    } else {
        Err("tracepoint tlb:tlb_flush does not exist on this kernel".into())
    };
    let mut refused = None;
    let ((skel, links), at_flush) = match flush {
        Ok(s) => (s, true),
        Err(flush_err) => {
            let fallback = need_tracepoints(tracefs, &[("syscalls", "sys_enter_madvise")])
                .and_then(|()| check(tracefs, &records()))
                .and_then(|()| open_and_load(env, false, attach_now));
            refused = Some(flush_err.clone());
            match fallback {
                Ok(s) => (s, false),
                Err(e) => {
                    return Err(format!(
                        "at TLB flushes: {flush_err}; syscall tracepoint: {e}"
                    ))
                }
            }
        }
    };
    Ok(MadviseTracer {
        links,
        skel,
        procs: Deltas::new(LAYOUT),
        procs_batch: Default::default(),
        at_flush,
        refused,
        dropped: 0,
    })
}

impl Tracer for MadviseTracer {
    fn new_generation(&mut self) {
        crate::next_generation!(self.skel);
    }

    fn how(&self) -> String {
        if self.at_flush {
            "BTF-typed tracepoint tlb_flush: calls that flushed the TLB, from the flushing task's syscall registers".into()
        } else {
            format!(
                "tracepoint syscalls:sys_enter_madvise (fallback: every system call takes the slow path while attached; at TLB flushes: {})",
                self.refused.as_deref().unwrap_or("refused")
            )
        }
    }

    fn links(&mut self) -> &mut Vec<libbpf_rs::Link> {
        &mut self.links
    }

    fn object(&self) -> Option<&libbpf_rs::Object> {
        use libbpf_rs::skel::Skel;
        Some(self.skel.object())
    }

    fn read(&mut self, env: &mut Env, out: &mut Tracers) {
        let mut t = Madvise::default();
        if let Some(bss) = self.skel.maps.bss_data.as_deref_mut() {
            // A new interval: each process is named again at its next event.
            bss.js_gen += 1;
            t.dropped = since(bss.dropped, &mut self.dropped);
        }
        for e in drain_procs(
            &self.skel.maps.madvise_procs,
            &mut self.procs_batch,
            &mut self.procs,
            env.live_pids(),
        ) {
            let cgroup = env.cpu_cgroups.path(e.cgroup_id);
            t.procs.push(proc_row(e.pid, e.comm, cgroup, &e.d[4..10]));
        }
        out.madvise = Some(t);
    }
}
