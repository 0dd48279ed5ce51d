//! Dirty-page write throttling per process: balance_dirty_pages sleeps (dirty.bpf.c).

use std::path::Path;

use jitterscope_model::tracers::{Dirty, DirtyProc, TracerId, Tracers};
use libbpf_rs::skel::SkelBuilder;

use crate::delta::{Deltas, Layout};
use crate::tp_format::{check, field, Record};
use crate::{begin_read, create_other, hist, need_tracepoints, Env, Tracer, TracerDef, HIST_WORDS};

use crate::{drain_procs, load_and_attach, open_skel};

#[allow(clippy::all, clippy::pedantic, non_camel_case_types, dead_code, unused)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/dirty.skel.rs"));
}
use skel::*;

/// js_dirty_proc: comm (2 words), cgroup, named_gen, pauses, then a histogram whose maximum
/// and generation (its last two words) are not counters.
const LAYOUT: Layout = Layout {
    words: 5 + HIST_WORDS,
    keep: &[0, 1, 2, 3, 5 + HIST_WORDS - 2, 5 + HIST_WORDS - 1],
    named_gen: Some(3),
};
const _: () = assert!(std::mem::size_of::<types::js_dirty_proc>() == LAYOUT.words * 8);

const TRACEPOINTS: &[(&str, &str)] = &[("writeback", "balance_dirty_pages")];

pub(crate) static DEF: TracerDef = TracerDef {
    id: TracerId::DIRTY,
    // Always attached: it fires only while a writer is over its dirty limits, which is the
    // symptom itself.
    demand: None,
    unmeasured_attaches: false,
    release_below: None,
    load: |env, tracefs| Ok(Box::new(load(env, tracefs?)?)),
    records,
};

pub(crate) struct DirtyTracer {
    links: Vec<libbpf_rs::Link>,
    skel: DirtySkel<'static>,
    procs: Deltas<u32>,
    procs_batch: crate::map_batch::Batch,
    dropped: u64,
}

/// The record field the program reads.
pub(crate) fn records() -> Vec<Record> {
    vec![Record {
        event: "writeback/balance_dirty_pages".into(),
        fields: vec![field!(types::bdp_args, pause, "pause")],
    }]
}

pub(crate) fn load(env: &mut Env, tracefs: &Path) -> Result<DirtyTracer, String> {
    need_tracepoints(tracefs, TRACEPOINTS)?;
    check(tracefs, &records())?;
    let open = open_skel!(DirtySkelBuilder, env);
    let (skel, links) = load_and_attach(
        open,
        |s| create_other(&s.maps.dirty_procs),
        "writeback:balance_dirty_pages",
        true,
    )?;
    Ok(DirtyTracer {
        links,
        skel,
        procs: Deltas::new(LAYOUT),
        procs_batch: Default::default(),
        dropped: 0,
    })
}

impl Tracer for DirtyTracer {
    fn new_generation(&mut self) {
        crate::next_generation!(self.skel);
    }

    fn how(&self) -> String {
        "tracepoint writeback:balance_dirty_pages (the sleeps, by the writer and its memory cgroup)"
            .into()
    }

    fn links(&mut self) -> &mut Vec<libbpf_rs::Link> {
        &mut self.links
    }

    fn object(&self) -> Option<&libbpf_rs::Object> {
        use libbpf_rs::skel::Skel;
        Some(self.skel.object())
    }

    fn read(&mut self, env: &mut Env, out: &mut Tracers) {
        let mut t = Dirty::default();
        let (gen, dropped) = begin_read!(self.skel, self.dropped);
        t.dropped = dropped;
        for e in drain_procs(
            &self.skel.maps.dirty_procs,
            &mut self.procs_batch,
            &mut self.procs,
            env.live_pids(),
        ) {
            t.procs.push(DirtyProc {
                pid: e.pid,
                comm: e.comm,
                cgroup: env.mem_cgroups.path(e.cgroup_id),
                pauses: e.d[4],
                pause: hist(&e.d[5..], gen),
            });
        }
        out.dirty = Some(t);
    }
}
