//! Run-queue latency, host and per CPU cgroup (runqlat.bpf.c).

use std::path::Path;

use jitterscope_model::signals;
use jitterscope_model::tracers::{Hist, RunqCgroup, Runqlat, TracerId, Tracers};
use libbpf_rs::skel::SkelBuilder;
use libbpf_rs::{MapCore, MapFlags};

use crate::delta::{words, Deltas, Layout};
use crate::tp_format::{check, field, Record};
use crate::{begin_read, create_other, hist, need_tracepoints, Env, Tracer, TracerDef, HIST_WORDS};

use crate::{drain_cgroups, load_and_attach, open_skel};

#[allow(clippy::all, clippy::pedantic, non_camel_case_types, dead_code, unused)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/runqlat.skel.rs"));
}
use skel::*;

/// js_rq_stat: cgroup id, histogram.
const LAYOUT: Layout = Layout {
    words: 1 + HIST_WORDS,
    keep: &[0, HIST_WORDS - 1, HIST_WORDS],
    named_gen: None,
};
const _: () = assert!(std::mem::size_of::<types::js_rq_stat>() == LAYOUT.words * 8);
const HOST: Layout = Layout {
    words: HIST_WORDS,
    keep: &[HIST_WORDS - 2, HIST_WORDS - 1],
    named_gen: None,
};

pub(crate) static DEF: TracerDef = TracerDef {
    id: TracerId::RUNQLAT,
    // Its programs run at every wake-up and switch; they are worth that only while threads
    // wait for a CPU. Where the task iterator is missing the mean wait is unknown, and it stays
    // attached.
    demand: Some(&signals::RUNQ_WAIT),
    unmeasured_attaches: true,
    // Released at the first sample under 10 us, not held 30 s: under that mean no second can
    // have the p99 of 5 ms the rule looks for (it takes 41 us), so detaching loses no evidence,
    // and a context-switch storm that follows contention is not traced for half a minute.
    release_below: Some(10.0),
    // BTF-typed tracepoints need no tracefs: only the classic fallback does.
    load: |env, tracefs| Ok(Box::new(load(env, tracefs.ok())?)),
    records,
};

pub(crate) struct RunqlatTracer {
    links: Vec<libbpf_rs::Link>,
    skel: RunqlatSkel<'static>,
    mode: Mode,
    /// Wake-up times in task storage (else in the wakeup_ts hash map).
    storage: bool,
    host: Deltas<u32>,
    cgroups: Deltas<u32>,
    cgroups_batch: crate::map_batch::Batch,
    dropped: u64,
}

type Loaded = (RunqlatSkel<'static>, Vec<libbpf_rs::Link>);

/// Which programs run.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// BTF-typed tracepoints, sched_switch with its prev_state argument (5.18+).
    Btf,
    /// BTF-typed tracepoints, the switched-out task's state read from the task (before 5.18).
    BtfStateFromTask,
    /// Classic tracepoints: pids only, no cgroups.
    Classic,
}

fn open_and_load(env: &Env, mode: Mode, storage: bool) -> Result<Loaded, String> {
    let btf = mode != Mode::Classic;
    let mut open = open_skel!(RunqlatSkelBuilder, env);
    open.maps
        .rodata_data
        .as_deref_mut()
        .ok_or("the BPF object has no read-only data")?
        .use_task_storage = storage;
    // Only the store in use is created: a kernel before 5.11 has no task storage maps at all,
    // and the hash map is 16,384 preallocated entries.
    open.maps
        .wakeup_at
        .set_autocreate(storage)
        .map_err(|e| e.to_string())?;
    open.maps
        .wakeup_ts
        .set_autocreate(!storage)
        .map_err(|e| e.to_string())?;
    let p = &mut open.progs;
    for prog in [&mut p.btf_wakeup, &mut p.btf_wakeup_new] {
        prog.set_autoload(btf);
    }
    p.btf_switch.set_autoload(mode == Mode::Btf);
    p.btf_switch_v3.set_autoload(mode == Mode::BtfStateFromTask);
    for prog in [&mut p.tp_wakeup, &mut p.tp_wakeup_new, &mut p.tp_switch] {
        prog.set_autoload(!btf);
    }
    load_and_attach(
        open,
        |s| create_other(&s.maps.runq_cgroups),
        "sched tracepoints",
        !env.defer_on_demand,
    )
}

/// The record fields the classic (fallback) programs read.
pub(crate) fn records() -> Vec<Record> {
    let wakeup = |event: &str| Record {
        event: event.into(),
        fields: vec![field!(types::sched_wakeup_args, pid, "pid")],
    };
    vec![
        wakeup("sched/sched_wakeup"),
        wakeup("sched/sched_wakeup_new"),
        Record {
            event: "sched/sched_switch".into(),
            fields: vec![
                field!(types::sched_switch_args, prev_pid, "prev_pid"),
                field!(types::sched_switch_args, prev_state, "prev_state"),
                field!(types::sched_switch_args, next_pid, "next_pid"),
            ],
        },
    ]
}

pub(crate) fn load(env: &mut Env, tracefs: Option<&Path>) -> Result<RunqlatTracer, String> {
    // BTF-typed tracepoints see the woken task and so its cgroup; the classic ones see only
    // pids, so they are the fallback that keeps the host histogram. Task storage (5.13+ in
    // tracing programs) before the hash map, and sched_switch's prev_state argument (5.18+)
    // before reading the state from the task. When all are refused, the reason given is the
    // first hash-map attempt's: every kernel before 5.13 refuses task storage, which says
    // nothing of why the rest failed.
    let mut first = Err(String::new());
    for (mode, storage) in [
        (Mode::Btf, true),
        (Mode::BtfStateFromTask, true),
        (Mode::Btf, false),
        (Mode::BtfStateFromTask, false),
    ] {
        if storage && crate::fallbacks_forced() {
            continue;
        }
        match open_and_load(env, mode, storage) {
            Ok(s) => {
                first = Ok((s, mode, storage));
                break;
            }
            Err(e) if !storage && first.as_ref().is_err_and(String::is_empty) => first = Err(e),
            Err(_) => {}
        }
    }
    let ((skel, links), mode, storage) = match first {
        Ok(s) => s,
        Err(btf_err) => {
            let Some(tracefs) = tracefs else {
                return Err(format!(
                    "tp_btf: {btf_err}; classic tracepoints: no tracefs"
                ));
            };
            need_tracepoints(
                tracefs,
                &[
                    ("sched", "sched_wakeup"),
                    ("sched", "sched_wakeup_new"),
                    ("sched", "sched_switch"),
                ],
            )
            .map_err(|e| format!("tp_btf: {btf_err}; classic: {e}"))?;
            check(tracefs, &records()).map_err(|e| format!("tp_btf: {btf_err}; classic: {e}"))?;
            let s = open_and_load(env, Mode::Classic, false)
                .map_err(|e| format!("tp_btf: {btf_err}; classic: {e}"))?;
            (s, Mode::Classic, false)
        }
    };
    Ok(RunqlatTracer {
        links,
        skel,
        mode,
        storage,
        host: Deltas::new(HOST),
        cgroups: Deltas::new(LAYOUT),
        cgroups_batch: Default::default(),
        dropped: 0,
    })
}

impl Tracer for RunqlatTracer {
    fn new_generation(&mut self) {
        crate::next_generation!(self.skel);
        // Called as it is attached again: marks from before are stale.
        if let Some(bss) = self.skel.maps.bss_data.as_deref_mut() {
            bss.marks_since = jitterscope_model::sample::monotonic_ns();
        }
    }

    fn how(&self) -> String {
        let store = if self.storage {
            "wake-up times in task storage"
        } else {
            "wake-up times in a hash map"
        };
        match self.mode {
            Mode::Btf => format!("BTF-typed tracepoints sched_wakeup, sched_wakeup_new, sched_switch (host and per cgroup; {store})"),
            Mode::BtfStateFromTask => format!("BTF-typed tracepoints sched_wakeup, sched_wakeup_new, sched_switch without prev_state (before 5.18: the state read from the task) (host and per cgroup; {store})"),
            Mode::Classic => "classic tracepoints sched:sched_wakeup/_new/switch (fallback: host histogram only, no per-cgroup latency)".into(),
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
        let mut t = Runqlat::default();
        let (gen, dropped) = begin_read!(self.skel, self.dropped);
        t.dropped = dropped;
        // Only the classic programs fill the host histogram; the BTF-typed ones' is the sum of
        // the cgroups' (below).
        let host = match self.mode {
            Mode::Classic => self
                .skel
                .maps
                .runq_host
                .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
                .ok()
                .flatten(),
            _ => None,
        };
        if let Some(v) = host {
            if let Some(d) = self.host.update(0, words(&v, HOST.words)) {
                t.host = hist(&d, gen);
            }
        }
        let maps = &self.skel.maps;
        for (cgroup, d) in drain_cgroups(
            &maps.runq_cgroups,
            &mut self.cgroups_batch,
            &mut self.cgroups,
            0,
            &mut env.cpu_cgroups,
        ) {
            t.cgroups.push(RunqCgroup {
                cgroup,
                latency: hist(&d[1..], gen),
            });
        }
        // The BTF-typed programs charge every wait to a cgroup only (the overflow entry
        // included): the host's histogram is their sum.
        if self.mode != Mode::Classic {
            t.host = Hist::default();
            for c in &t.cgroups {
                t.host.merge(&c.latency);
            }
        }
        out.runqlat = Some(t);
    }
}
