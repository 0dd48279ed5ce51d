//! Slab shrinker calls per shrinker scan function (shrinker.bpf.c).

use std::path::Path;

use jitterscope_model::tracers::{ShrinkerStat, Shrinkers, TracerId, Tracers};
use libbpf_rs::skel::SkelBuilder;
use libbpf_rs::{MapCore, MapFlags};

use crate::delta::{words, Deltas, Layout};
use crate::tp_format::{check, field, Record};
use crate::{
    begin_read, hist, need_tracepoints, object_storage, Env, Tracer, TracerDef, HIST_WORDS,
};

use crate::load_and_attach;

#[allow(clippy::all, clippy::pedantic, non_camel_case_types, dead_code, unused)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/shrinker.skel.rs"));
}
use skel::*;

/// js_shrink_stat: calls, zero_freed, to_scan, scanned, freed, cache_items, histogram.
const LAYOUT: Layout = Layout {
    words: 6 + HIST_WORDS,
    keep: &[6 + HIST_WORDS - 2, 6 + HIST_WORDS - 1],
    named_gen: None,
};
const _: () = assert!(std::mem::size_of::<types::js_shrink_stat>() == LAYOUT.words * 8);

/// Key of the overflow entry (no function lives at the last address).
const OTHER_FN: u64 = u64::MAX;

pub(crate) static DEF: TracerDef = TracerDef {
    id: TracerId::SHRINKER,
    demand: None,
    unmeasured_attaches: false,
    release_below: None,
    load: |env, tracefs| Ok(Box::new(load(env, tracefs?)?)),
    records,
};

pub(crate) struct ShrinkerTracer {
    links: Vec<libbpf_rs::Link>,
    skel: ShrinkerSkel<'static>,
    fns: Deltas<u64>,
    batch: crate::map_batch::Batch,
    dropped: u64,
}

/// The record fields the programs read.
pub(crate) fn records() -> Vec<Record> {
    vec![
        Record {
            event: "vmscan/mm_shrink_slab_start".into(),
            fields: vec![
                field!(types::shrink_slab_start_args, shrink, "shrink"),
                field!(types::shrink_slab_start_args, cache_items, "cache_items"),
                field!(types::shrink_slab_start_args, total_scan, "total_scan"),
            ],
        },
        Record {
            event: "vmscan/mm_shrink_slab_end".into(),
            fields: vec![
                field!(types::shrink_slab_end_args, retval, "retval"),
                field!(types::shrink_slab_end_args, total_scan, "total_scan"),
            ],
        },
    ]
}

pub(crate) fn load(_env: &mut Env, tracefs: &Path) -> Result<ShrinkerTracer, String> {
    need_tracepoints(
        tracefs,
        &[
            ("vmscan", "mm_shrink_slab_start"),
            ("vmscan", "mm_shrink_slab_end"),
        ],
    )?;
    check(tracefs, &records())?;
    let open = ShrinkerSkelBuilder::default()
        .open(object_storage())
        .map_err(|e| format!("opening the BPF object: {e}"))?;
    let (skel, links) = load_and_attach(
        open,
        |s| {
            let zero = vec![0u8; s.maps.shrinkers.value_size() as usize];
            s.maps
                .shrinkers
                .update(&OTHER_FN.to_ne_bytes(), &zero, MapFlags::NO_EXIST)
                .map_err(|e| format!("creating the overflow entry: {e}"))
        },
        "vmscan:mm_shrink_slab_start/end",
        true,
    )?;
    Ok(ShrinkerTracer {
        links,
        skel,
        fns: Deltas::new(LAYOUT),
        batch: Default::default(),
        dropped: 0,
    })
}

impl Tracer for ShrinkerTracer {
    fn new_generation(&mut self) {
        crate::next_generation!(self.skel);
    }

    fn how(&self) -> String {
        "tracepoints vmscan:mm_shrink_slab_start/end, shrinkers named by their scan function (kallsyms)".into()
    }

    fn links(&mut self) -> &mut Vec<libbpf_rs::Link> {
        &mut self.links
    }

    fn object(&self) -> Option<&libbpf_rs::Object> {
        use libbpf_rs::skel::Skel;
        Some(self.skel.object())
    }

    fn read(&mut self, env: &mut Env, out: &mut Tracers) {
        let mut t = Shrinkers::default();
        let (gen, dropped) = begin_read!(self.skel, self.dropped);
        t.dropped = dropped;
        let mut moved = Vec::new();
        for i in 0..self.batch.read(&self.skel.maps.shrinkers) {
            let Ok(k8) = <[u8; 8]>::try_from(self.batch.key(i)) else {
                continue;
            };
            let addr = u64::from_ne_bytes(k8);
            if let Some(d) = self
                .fns
                .update(addr, words(self.batch.value(i), LAYOUT.words))
            {
                moved.push((addr, d));
            }
        }
        let addrs: Vec<u64> = moved
            .iter()
            .map(|(a, _)| *a)
            .filter(|&a| a != OTHER_FN)
            .collect();
        let mut names = env.kallsyms.resolve(&addrs).into_iter();
        for (addr, d) in moved {
            let function = if addr == OTHER_FN {
                "(other)".into()
            } else {
                names.next().unwrap_or_else(|| format!("0x{addr:x}"))
            };
            t.shrinkers.push(ShrinkerStat {
                function,
                calls: d[0],
                zero_freed: d[1],
                to_scan: d[2],
                scanned: d[3],
                freed: d[4],
                cache_items: d[5],
                latency: hist(&d[6..], gen),
            });
        }
        out.shrinker = Some(t);
    }
}
