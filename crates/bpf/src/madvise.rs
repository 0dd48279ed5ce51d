//! madvise() calls and bytes per process and advice (madvise.bpf.c).

use std::path::Path;

use jitterscope_model::tracers::{Madvise, MadviseProc, Tracers, OTHER_PID};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::MapCore;

use crate::delta::{comm, pid_alive, words, Deltas, Layout};
use crate::format::{check, field, Record};
use crate::{create_other, entries, map_bytes, need_tracepoints, object_storage, Env, Tracer};

#[allow(clippy::all, clippy::pedantic, non_camel_case_types, dead_code, unused)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/madvise.skel.rs"));
}
use skel::*;

/// js_madvise_proc: comm (2 words), cgroup, calls[3], bytes[3] (DONTNEED, FREE, other).
const LAYOUT: Layout = Layout {
    words: 9,
    keep: &[0, 1, 2],
};
const _: () = assert!(std::mem::size_of::<types::js_madvise_proc>() == LAYOUT.words * 8);

pub(crate) struct MadviseTracer {
    skel: MadviseSkel<'static>,
    procs: Deltas<u32>,
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
    let mut open = MadviseSkelBuilder::default()
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
    create_other(&skel.maps.madvise_procs)?;
    skel.attach()
        .map_err(|e| format!("attaching to syscalls:sys_enter_madvise: {e}"))?;
    Ok(MadviseTracer {
        skel,
        procs: Deltas::new(LAYOUT),
        dropped: 0,
    })
}

impl Tracer for MadviseTracer {
    fn how(&self) -> String {
        "tracepoint syscalls:sys_enter_madvise".into()
    }

    fn map_bytes(&self) -> u64 {
        map_bytes(&self.skel.maps.madvise_procs, 4096)
    }

    fn read(&mut self, env: &mut Env, out: &mut Tracers) {
        let mut t = Madvise::default();
        if let Some(bss) = self.skel.maps.bss_data.as_deref() {
            t.dropped = bss.dropped.saturating_sub(self.dropped);
            self.dropped = bss.dropped;
        }
        let map = &self.skel.maps.madvise_procs;
        for (k, v) in entries(map) {
            let Ok(k4) = <[u8; 4]>::try_from(k.as_slice()) else {
                continue;
            };
            let pid = u32::from_ne_bytes(k4);
            if let Some(d) = self.procs.update(pid, words(&v, LAYOUT.words)) {
                let other = pid == OTHER_PID;
                t.procs.push(MadviseProc {
                    pid,
                    comm: if other { "(other)".into() } else { comm(&d) },
                    cgroup: env.cpu_cgroups.path(d[2]),
                    dontneed_calls: d[3],
                    free_calls: d[4],
                    other_calls: d[5],
                    dontneed_bytes: d[6],
                    free_bytes: d[7],
                    other_bytes: d[8],
                });
            }
            if pid != OTHER_PID && !pid_alive(pid) {
                let _ = map.delete(&k);
                self.procs.forget(&pid);
            }
        }
        out.madvise = Some(t);
    }
}
