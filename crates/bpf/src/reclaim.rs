//! Direct and memcg reclaim stalls per process and memory cgroup, kswapd wake-ups
//! (reclaim.bpf.c).

use std::path::Path;

use jitterscope_model::tracers::{Reclaim, ReclaimStat, Tracers, OTHER_PID};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::MapCore;

use crate::delta::{comm, pid_alive, words, Deltas, Layout};
use crate::format::{check, field, Record};
use crate::{
    create_other, entries, hist, map_bytes, need_tracepoints, object_storage, Env, Tracer,
    HIST_WORDS,
};

#[allow(clippy::all, clippy::pedantic, non_camel_case_types, dead_code, unused)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/reclaim.skel.rs"));
}
use skel::*;

/// js_reclaim_stat: comm (2 words), cgroup, stalls[2], reclaimed_pages, then a histogram whose
/// maximum and generation (its last two words) are not counters.
const LAYOUT: Layout = Layout {
    words: 6 + HIST_WORDS,
    keep: &[0, 1, 2, 6 + HIST_WORDS - 2, 6 + HIST_WORDS - 1],
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

pub(crate) struct ReclaimTracer {
    skel: ReclaimSkel<'static>,
    procs: Deltas<u32>,
    cgroups: Deltas<u32>,
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
    let mut open = ReclaimSkelBuilder::default()
        .open(object_storage())
        .map_err(|e| format!("opening the BPF object: {e}"))?;
    let ro = open
        .maps
        .rodata_data
        .as_deref_mut()
        .ok_or("the BPF object has no read-only data")?;
    ro.js_cgroup_v1 = env.cgroup_v1();
    let mut skel = open
        .load()
        .map_err(|e| format!("loading into the kernel: {e}"))?;
    create_other(&skel.maps.reclaim_procs)?;
    create_other(&skel.maps.reclaim_cgroups)?;
    skel.attach()
        .map_err(|e| format!("attaching to vmscan tracepoints: {e}"))?;
    Ok(ReclaimTracer {
        skel,
        procs: Deltas::new(LAYOUT),
        cgroups: Deltas::new(LAYOUT),
        prev: [0; 3],
    })
}

fn stat(d: &[u64], gen: u64) -> ReclaimStat {
    ReclaimStat {
        direct_stalls: d[3],
        memcg_stalls: d[4],
        reclaimed_pages: d[5],
        latency: hist(&d[6..], gen),
        ..Default::default()
    }
}

impl Tracer for ReclaimTracer {
    fn how(&self) -> String {
        "tracepoints vmscan:mm_vmscan_{direct,memcg}_reclaim_{begin,end}, wakeup_kswapd, kswapd_wake".into()
    }

    fn map_bytes(&self) -> u64 {
        map_bytes(&self.skel.maps.reclaim_procs, 4096)
            + map_bytes(&self.skel.maps.reclaim_cgroups, 2048)
            + map_bytes(&self.skel.maps.reclaim_start, 8192)
    }

    fn read(&mut self, env: &mut Env, out: &mut Tracers) {
        let mut t = Reclaim::default();
        let mut gen = 0;
        if let Some(bss) = self.skel.maps.bss_data.as_deref_mut() {
            gen = bss.js_gen;
            bss.js_gen = gen + 1;
            let cur = [bss.kswapd[0], bss.kswapd[1], bss.dropped];
            t.kswapd_wakeups = cur[0].saturating_sub(self.prev[0]);
            t.kswapd_wakes = cur[1].saturating_sub(self.prev[1]);
            t.dropped = cur[2].saturating_sub(self.prev[2]);
            self.prev = cur;
        }
        let map = &self.skel.maps.reclaim_procs;
        for (k, v) in entries(map) {
            let Ok(k4) = <[u8; 4]>::try_from(k.as_slice()) else {
                continue;
            };
            let pid = u32::from_ne_bytes(k4);
            if let Some(d) = self.procs.update(pid, words(&v, LAYOUT.words)) {
                let other = pid == OTHER_PID;
                t.procs.push(ReclaimStat {
                    pid,
                    comm: if other { "(other)".into() } else { comm(&d) },
                    cgroup: env.mem_cgroups.path(d[2]),
                    ..stat(&d, gen)
                });
            }
            if pid != OTHER_PID && !pid_alive(pid) {
                let _ = map.delete(&k);
                self.procs.forget(&pid);
            }
        }
        let map = &self.skel.maps.reclaim_cgroups;
        for (k, v) in entries(map) {
            let Ok(k4) = <[u8; 4]>::try_from(k.as_slice()) else {
                continue;
            };
            let key = u32::from_ne_bytes(k4);
            let w = words(&v, LAYOUT.words);
            let id = w[2];
            if let Some(d) = self.cgroups.update(key, w) {
                t.cgroups.push(ReclaimStat {
                    cgroup: if key == OTHER_PID {
                        "(other)".into()
                    } else {
                        env.mem_cgroups.path(id)
                    },
                    ..stat(&d, gen)
                });
            }
            // A removed cgroup's entry is read one last time, then dropped.
            if key != OTHER_PID && env.mem_cgroups.path(id).is_empty() {
                let _ = map.delete(&k);
                self.cgroups.forget(&key);
            }
        }
        out.reclaim = Some(t);
    }
}
