//! mmap_lock contention per process: waits and wait time (mmaplock.bpf.c).

use jitterscope_model::tracers::{MmapLock, MmapLockProc, TracerId, Tracers};
use libbpf_rs::skel::SkelBuilder;

use crate::delta::{Deltas, Layout};
use crate::env::has_tracepoint;
use crate::{begin_read, create_other, hist, Env, Tracer, TracerDef, HIST_WORDS};

use crate::{drain_procs, load_and_attach, open_skel};

#[allow(clippy::all, clippy::pedantic, non_camel_case_types, dead_code, unused)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/mmaplock.skel.rs"));
}
use skel::*;

/// js_mmaplock_proc: comm (2 words), cgroup, named_gen, waits[2], then a histogram whose
/// maximum and generation (its last two words) are not counters.
const LAYOUT: Layout = Layout {
    words: 6 + HIST_WORDS,
    keep: &[0, 1, 2, 3, 6 + HIST_WORDS - 2, 6 + HIST_WORDS - 1],
    named_gen: Some(3),
};
const _: () = assert!(std::mem::size_of::<types::js_mmaplock_proc>() == LAYOUT.words * 8);

pub(crate) static DEF: TracerDef = TracerDef {
    id: TracerId::MMAPLOCK,
    // Always attached: the tracepoints fire only on contended locks, so an idle lock costs
    // nothing, and contention is the symptom itself.
    demand: None,
    unmeasured_attaches: false,
    release_below: None,
    load: |env, tracefs| Ok(Box::new(load(env, tracefs.ok())?)),
    // BTF-typed: no record layout to check.
    records: Vec::new,
};

pub(crate) struct MmapLockTracer {
    links: Vec<libbpf_rs::Link>,
    skel: MmaplockSkel<'static>,
    procs: Deltas<u32>,
    procs_batch: crate::map_batch::Batch,
    dropped: u64,
}

pub(crate) fn load(
    env: &mut Env,
    tracefs: Option<&std::path::Path>,
) -> Result<MmapLockTracer, String> {
    if let Some(t) = tracefs {
        if !has_tracepoint(t, "lock", "contention_begin") {
            return Err(
                "tracepoint lock:contention_begin does not exist (lock contention tracepoints are 5.19+)"
                    .into(),
            );
        }
    }
    let open = open_skel!(MmaplockSkelBuilder, env);
    let (skel, links) = load_and_attach(
        open,
        |s| create_other(&s.maps.mmaplock_procs),
        "tp_btf/contention_begin",
        true,
    )?;
    Ok(MmapLockTracer {
        links,
        skel,
        procs: Deltas::new(LAYOUT),
        procs_batch: Default::default(),
        dropped: 0,
    })
}

impl Tracer for MmapLockTracer {
    fn new_generation(&mut self) {
        crate::next_generation!(self.skel);
    }

    fn how(&self) -> String {
        "BTF-typed tracepoints lock:contention_{begin,end}, kept when the lock is the waiter's own mm->mmap_lock".into()
    }

    fn links(&mut self) -> &mut Vec<libbpf_rs::Link> {
        &mut self.links
    }

    fn object(&self) -> Option<&libbpf_rs::Object> {
        use libbpf_rs::skel::Skel;
        Some(self.skel.object())
    }

    fn read(&mut self, env: &mut Env, out: &mut Tracers) {
        let mut t = MmapLock::default();
        let (gen, dropped) = begin_read!(self.skel, self.dropped);
        t.dropped = dropped;
        for e in drain_procs(
            &self.skel.maps.mmaplock_procs,
            &mut self.procs_batch,
            &mut self.procs,
            env.live_pids(),
        ) {
            let cgroup = env.cpu_cgroups.path(e.cgroup_id);
            t.procs.push(MmapLockProc {
                pid: e.pid,
                comm: e.comm,
                cgroup,
                read_waits: e.d[4],
                write_waits: e.d[5],
                wait: hist(&e.d[6..], gen),
            });
        }
        out.mmaplock = Some(t);
    }
}
