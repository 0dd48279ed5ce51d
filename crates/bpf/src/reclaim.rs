//! Direct and memcg reclaim stalls per process and memory cgroup, kswapd wake-ups
//! (reclaim.bpf.c).

use std::path::Path;

use jitterscope_model::tracers::{Reclaim, ReclaimStat, TracerId, Tracers};
use libbpf_rs::skel::SkelBuilder;

use crate::delta::{Deltas, Layout};
use crate::tp_format::{check, field, Record};
use crate::{
    begin_read, create_other, hist, need_tracepoints, since, Env, Tracer, TracerDef, HIST_WORDS,
};

use crate::{drain_cgroups, drain_procs, load_and_attach, open_skel};

#[allow(clippy::all, clippy::pedantic, non_camel_case_types, dead_code, unused)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/reclaim.skel.rs"));
}
use skel::*;

/// js_reclaim_stat: comm (2 words), cgroup, stalls[2], reclaimed_pages, then a histogram whose
/// maximum and generation (its last two words) are not counters.
const LAYOUT: Layout = Layout {
    words: 7 + HIST_WORDS,
    keep: &[0, 1, 2, 3, 7 + HIST_WORDS - 2, 7 + HIST_WORDS - 1],
    named_gen: Some(3),
};
const _: () = assert!(std::mem::size_of::<types::js_reclaim_stat>() == LAYOUT.words * 8);

const TRACEPOINTS: &[(&str, &str)] = &[
    ("vmscan", "mm_vmscan_direct_reclaim_begin"),
    ("vmscan", "mm_vmscan_direct_reclaim_end"),
    ("vmscan", "mm_vmscan_memcg_reclaim_begin"),
    ("vmscan", "mm_vmscan_memcg_reclaim_end"),
    ("vmscan", "mm_vmscan_wakeup_kswapd"),
    ("vmscan", "mm_vmscan_kswapd_wake"),
];

pub(crate) static DEF: TracerDef = TracerDef {
    id: TracerId::RECLAIM,
    demand: None,
    unmeasured_attaches: false,
    release_below: None,
    load: |env, tracefs| Ok(Box::new(load(env, tracefs?)?)),
    records,
};

pub(crate) struct ReclaimTracer {
    links: Vec<libbpf_rs::Link>,
    skel: ReclaimSkel<'static>,
    procs: Deltas<u32>,
    procs_batch: crate::map_batch::Batch,
    cgroups: Deltas<u32>,
    cgroups_batch: crate::map_batch::Batch,
    /// kswapd wake-up requests, kswapd wakes, dropped: as last read.
    prev: [u64; 3],
}

/// The record fields the programs read (the begin events are only timestamps).
pub(crate) fn records() -> Vec<Record> {
    [
        "vmscan/mm_vmscan_direct_reclaim_end",
        "vmscan/mm_vmscan_memcg_reclaim_end",
    ]
    .into_iter()
    .map(|event| Record {
        event: event.into(),
        fields: vec![field!(
            types::reclaim_end_args,
            nr_reclaimed,
            "nr_reclaimed"
        )],
    })
    .collect()
}

pub(crate) fn load(env: &mut Env, tracefs: &Path) -> Result<ReclaimTracer, String> {
    need_tracepoints(tracefs, TRACEPOINTS)?;
    check(tracefs, &records())?;
    let open = open_skel!(ReclaimSkelBuilder, env);
    let (skel, links) = load_and_attach(
        open,
        |s| {
            create_other(&s.maps.reclaim_procs)?;
            create_other(&s.maps.reclaim_cgroups)
        },
        "vmscan tracepoints",
        true,
    )?;
    Ok(ReclaimTracer {
        links,
        skel,
        procs: Deltas::new(LAYOUT),
        procs_batch: Default::default(),
        cgroups: Deltas::new(LAYOUT),
        cgroups_batch: Default::default(),
        prev: [0; 3],
    })
}

fn stat(d: &[u64], gen: u64) -> ReclaimStat {
    ReclaimStat {
        direct_stalls: d[4],
        memcg_stalls: d[5],
        reclaimed_pages: d[6],
        latency: hist(&d[7..], gen),
        ..Default::default()
    }
}

impl Tracer for ReclaimTracer {
    fn new_generation(&mut self) {
        crate::next_generation!(self.skel);
    }

    fn how(&self) -> String {
        "tracepoints vmscan:mm_vmscan_{direct,memcg}_reclaim_{begin,end}, wakeup_kswapd, kswapd_wake".into()
    }

    fn links(&mut self) -> &mut Vec<libbpf_rs::Link> {
        &mut self.links
    }

    fn object(&self) -> Option<&libbpf_rs::Object> {
        use libbpf_rs::skel::Skel;
        Some(self.skel.object())
    }

    fn read(&mut self, env: &mut Env, out: &mut Tracers) {
        let mut t = Reclaim::default();
        let (gen, dropped) = begin_read!(self.skel, self.prev[2]);
        t.dropped = dropped;
        if let Some(bss) = self.skel.maps.bss_data.as_deref() {
            t.kswapd_wakeups = since(bss.kswapd[0], &mut self.prev[0]);
            t.kswapd_wakes = since(bss.kswapd[1], &mut self.prev[1]);
        }
        for e in drain_procs(
            &self.skel.maps.reclaim_procs,
            &mut self.procs_batch,
            &mut self.procs,
            env.live_pids(),
        ) {
            t.procs.push(ReclaimStat {
                pid: e.pid,
                comm: e.comm,
                cgroup: env.mem_cgroups.path(e.cgroup_id),
                ..stat(&e.d, gen)
            });
        }
        let maps = &self.skel.maps;
        for (cgroup, d) in drain_cgroups(
            &maps.reclaim_cgroups,
            &mut self.cgroups_batch,
            &mut self.cgroups,
            2,
            &mut env.mem_cgroups,
        ) {
            t.cgroups.push(ReclaimStat {
                cgroup,
                ..stat(&d, gen)
            });
        }
        out.reclaim = Some(t);
    }
}
