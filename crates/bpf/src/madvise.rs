//! madvise() calls and bytes per process and advice (madvise.bpf.c).

use std::path::Path;

use jitterscope_model::signals;
use jitterscope_model::tracers::{Madvise, MadviseProc, Tracers};
use libbpf_rs::skel::SkelBuilder;

use crate::delta::{Deltas, Layout};
use crate::format::{check, field, Record};
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
    name: "madvise",
    what: "madvise() calls and bytes per process and advice",
    // Shootdowns other CPUs receive (/proc/interrupts TLB), not every flush: local mm flushes
    // come with every exec and exit (a shell script makes thousands a second) and disturb no
    // other CPU.
    demand: Some(&signals::TLB_STORM),
    load: |env, tracefs| Ok(Box::new(load(env, tracefs?)?)),
    records,
};

pub(crate) struct MadviseTracer {
    links: Vec<libbpf_rs::Link>,
    skel: MadviseSkel<'static>,
    procs: Deltas<u32>,
    procs_batch: crate::batch::Batch,
    dropped: u64,
}

/// The record fields the program reads.
pub(crate) fn records() -> Vec<Record> {
    vec![Record {
        event: "syscalls/sys_enter_madvise".into(),
        fields: vec![
            field!(types::sys_enter_madvise_args, len, "len_in"),
            field!(types::sys_enter_madvise_args, behavior, "behavior"),
        ],
    }]
}

pub(crate) fn load(env: &mut Env, tracefs: &Path) -> Result<MadviseTracer, String> {
    need_tracepoints(tracefs, &[("syscalls", "sys_enter_madvise")])?;
    check(tracefs, &records())?;
    let mut open = open_skel!(MadviseSkelBuilder, env);
    // Per-CPU values: keep the map near 2 MiB whatever the number of CPUs.
    let cpus = libbpf_rs::num_possible_cpus().unwrap_or(1).max(1);
    let per_entry = std::mem::size_of::<types::js_madvise_proc>() * cpus;
    let entries = ((2 << 20) / per_entry).clamp(256, 4096) as u32;
    open.maps
        .madvise_procs
        .set_max_entries(entries)
        .map_err(|e| format!("sizing madvise_procs: {e}"))?;
    let (skel, links) = load_and_attach(
        open,
        |s| create_other(&s.maps.madvise_procs),
        "syscalls:sys_enter_madvise",
        !env.defer_on_demand,
    )?;
    Ok(MadviseTracer {
        links,
        skel,
        procs: Deltas::new(LAYOUT),
        procs_batch: Default::default(),
        dropped: 0,
    })
}

impl Tracer for MadviseTracer {
    fn new_generation(&mut self) {
        crate::next_generation!(self.skel);
    }

    fn how(&self) -> String {
        "tracepoint syscalls:sys_enter_madvise".into()
    }

    fn links(&mut self) -> &mut Vec<libbpf_rs::Link> {
        &mut self.links
    }

    fn object(&self) -> &libbpf_rs::Object {
        use libbpf_rs::skel::Skel;
        self.skel.object()
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
            let d = &e.d;
            t.procs.push(MadviseProc {
                pid: e.pid,
                comm: e.comm,
                cgroup: env.cpu_cgroups.path(e.cgroup_id),
                dontneed_calls: d[4],
                free_calls: d[5],
                other_calls: d[6],
                dontneed_bytes: d[7],
                free_bytes: d[8],
                other_bytes: d[9],
            });
        }
        out.madvise = Some(t);
    }
}
