//! TLB flushes by reason per process, and shootdown IPIs by sender (tlb.bpf.c).

use std::path::Path;

use jitterscope_model::tracers::{Tlb, TlbProc, Tracers, OTHER_PID};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::MapCore;

use crate::delta::{comm, pid_alive, words, Deltas, Layout};
use crate::env::{has_tracepoint, Kallsyms};
use crate::format::{check, field, Record};
use crate::{create_other, entries, map_bytes, need_tracepoints, object_storage, Env, Tracer};

#[allow(clippy::all, clippy::pedantic, non_camel_case_types, dead_code, unused)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/tlb.skel.rs"));
}
use skel::*;

/// js_tlb_proc: comm (2 words), cgroup, flushes[6], pages, full_flushes, ipis_sent, ipi_targets.
const LAYOUT: Layout = Layout {
    words: 13,
    keep: &[0, 1, 2],
};
const _: () = assert!(std::mem::size_of::<types::js_tlb_proc>() == LAYOUT.words * 8);

pub(crate) struct TlbTracer {
    skel: TlbSkel<'static>,
    procs: Deltas<u32>,
    ipis: Result<(), &'static str>,
    dropped: u64,
}

/// The record fields the programs read.
pub(crate) fn records() -> Vec<Record> {
    vec![
        Record {
            event: "tlb/tlb_flush".into(),
            fields: vec![
                field!(types::tlb_flush_args, reason, "reason"),
                field!(types::tlb_flush_args, pages, "pages"),
            ],
        },
        Record {
            event: "ipi/ipi_send_cpumask".into(),
            fields: vec![
                field!(types::ipi_send_cpumask_args, cpumask_loc, "cpumask"),
                field!(types::ipi_send_cpumask_args, callback, "callback"),
            ],
        },
    ]
}

pub(crate) fn load(env: &mut Env, tracefs: &Path) -> Result<TlbTracer, String> {
    need_tracepoints(tracefs, &[("tlb", "tlb_flush")])?;
    check(tracefs, &records())?;
    let flush = Kallsyms::address_of("flush_tlb_func");
    let ipis = if !has_tracepoint(tracefs, "ipi", "ipi_send_cpumask") {
        Err("no ipi:ipi_send_cpumask tracepoint (kernel < 6.6)")
    } else if flush.is_none() {
        Err("flush_tlb_func is not in /proc/kallsyms (or kptr_restrict hides it)")
    } else {
        Ok(())
    };
    let mut open = TlbSkelBuilder::default()
        .open(object_storage())
        .map_err(|e| format!("opening the BPF object: {e}"))?;
    let ro = open
        .maps
        .rodata_data
        .as_deref_mut()
        .ok_or("the BPF object has no read-only data")?;
    ro.js_cgroup_v1 = env.cgroup_v1();
    ro.flush_tlb_func_addr = flush.unwrap_or(0);
    if ipis.is_err() {
        open.progs.ipi_send_cpumask.set_autoload(false);
    }
    let mut skel = open
        .load()
        .map_err(|e| format!("loading into the kernel: {e}"))?;
    create_other(&skel.maps.tlb_procs)?;
    skel.attach()
        .map_err(|e| format!("attaching to tlb:tlb_flush: {e}"))?;
    Ok(TlbTracer {
        skel,
        procs: Deltas::new(LAYOUT),
        ipis,
        dropped: 0,
    })
}

impl Tracer for TlbTracer {
    fn how(&self) -> String {
        match self.ipis {
            Ok(()) => {
                "tracepoints tlb:tlb_flush, ipi:ipi_send_cpumask (shootdown IPIs attributed)".into()
            }
            Err(why) => format!("tracepoint tlb:tlb_flush; shootdown IPIs not attributed: {why}"),
        }
    }

    fn map_bytes(&self) -> u64 {
        map_bytes(&self.skel.maps.tlb_procs, 4096)
    }

    fn read(&mut self, env: &mut Env, out: &mut Tracers) {
        let mut t = Tlb {
            ipis_attributed: self.ipis.is_ok(),
            ..Default::default()
        };
        if let Some(bss) = self.skel.maps.bss_data.as_deref() {
            t.dropped = bss.dropped.saturating_sub(self.dropped);
            self.dropped = bss.dropped;
        }
        let map = &self.skel.maps.tlb_procs;
        for (k, v) in entries(map) {
            let Ok(k4) = <[u8; 4]>::try_from(k.as_slice()) else {
                continue;
            };
            let pid = u32::from_ne_bytes(k4);
            if let Some(d) = self.procs.update(pid, words(&v, LAYOUT.words)) {
                let other = pid == OTHER_PID;
                t.procs.push(TlbProc {
                    pid,
                    comm: if other { "(other)".into() } else { comm(&d) },
                    cgroup: env.cpu_cgroups.path(d[2]),
                    task_switch: d[3],
                    remote_shootdown: d[4],
                    local_shootdown: d[5],
                    local_mm_shootdown: d[6],
                    remote_send_ipi: d[7],
                    other: d[8],
                    pages: d[9],
                    full_flushes: d[10],
                    ipis_sent: d[11],
                    ipi_targets: d[12],
                });
            }
            if pid != OTHER_PID && !pid_alive(pid) {
                let _ = map.delete(&k);
                self.procs.forget(&pid);
            }
        }
        out.tlb = Some(t);
    }
}
