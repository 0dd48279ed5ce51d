//! TLB flushes by reason per process (task switches host-wide), and shootdown IPIs by sender
//! (tlb.bpf.c).

use std::path::Path;

use jitterscope_model::signals;
use jitterscope_model::tracers::{Madvise, Tlb, TlbProc, TracerId, Tracers};
use libbpf_rs::skel::SkelBuilder;
use libbpf_rs::{MapCore, MapFlags};

use crate::delta::{Deltas, Layout};
use crate::env::{has_tracepoint, Kallsyms};
use crate::tp_format::{check, field, Record};
use crate::{create_other, need_tracepoints, Env, Tracer, TracerDef};

use crate::{drain_procs, load_and_attach, open_skel, since};

#[allow(clippy::all, clippy::pedantic, non_camel_case_types, dead_code, unused)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/tlb.skel.rs"));
}
use skel::*;

/// js_tlb_proc: comm (2 words), cgroup, flushes[6], pages, full_flushes, ipis_sent, ipi_targets,
/// madvise calls[3] and bytes[3] (DONTNEED, FREE, other).
const LAYOUT: Layout = Layout {
    words: 20,
    keep: &[0, 1, 2, 3],
    named_gen: Some(3),
};
const _: () = assert!(std::mem::size_of::<types::js_tlb_proc>() == LAYOUT.words * 8);
/// task_switch_flushes: one counter per CPU.
const ONE_COUNTER: Layout = Layout {
    words: 1,
    keep: &[],
    named_gen: None,
};

pub(crate) static DEF: TracerDef = TracerDef {
    id: TracerId::TLB,
    // Its flush program runs at every TLB flush, task switches included (one a context switch
    // between processes: +3.5% of a context-switch storm's CPU time, bpf_stats); the rule it
    // gives evidence to reads its baseline from /proc/interrupts and needs the senders only
    // during a storm, the same symptom that attaches madvise.
    demand: Some(&signals::TLB_STORM),
    unmeasured_attaches: false,
    release_below: None,
    load: |env, tracefs| Ok(Box::new(load(env, tracefs?)?)),
    records,
};

pub(crate) struct TlbTracer {
    links: Vec<libbpf_rs::Link>,
    skel: TlbSkel<'static>,
    procs: Deltas<u32>,
    procs_batch: crate::map_batch::Batch,
    ipis: Ipis,
    /// BTF-typed tracepoints (else the classic ones).
    btf: bool,
    /// Its flush program counts madvise() calls for the madvise tracer.
    madvise: bool,
    dropped: u64,
    task_switch: u64,
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
            event: "csd/csd_queue_cpu".into(),
            fields: vec![field!(types::csd_queue_cpu_args, func, "func")],
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

type Loaded = (TlbSkel<'static>, Vec<libbpf_rs::Link>);

fn open_and_load(
    env: &Env,
    btf: bool,
    madvise: bool,
    flush: u64,
    ipis: Ipis,
) -> Result<Loaded, String> {
    let mut open = open_skel!(TlbSkelBuilder, env);
    let ro = open
        .maps
        .rodata_data
        .as_deref_mut()
        .ok_or("the BPF object has no read-only data")?;
    ro.flush_tlb_func_addr = flush;
    ro.cpu_words = libbpf_rs::num_possible_cpus()
        .map_or(1, |n| n.div_ceil(64))
        .clamp(1, 8) as u32;
    let p = &mut open.progs;
    #[cfg(target_arch = "x86_64")]
    {
        p.btf_tlb_flush.set_autoload(btf && !madvise);
        p.btf_tlb_flush_madvise.set_autoload(btf && madvise);
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        if madvise {
            return Err("the madvise count reads x86-64 registers".into());
        }
        p.btf_tlb_flush.set_autoload(btf);
    }
    p.tlb_flush.set_autoload(!btf);
    let csd = ipis == Ok("csd:csd_queue_cpu");
    p.btf_csd_queue_cpu.set_autoload(btf && csd);
    p.csd_queue_cpu.set_autoload(!btf && csd);
    let cpumask = ipis == Ok("ipi:ipi_send_cpumask");
    p.btf_ipi_send_cpumask.set_autoload(btf && cpumask);
    p.ipi_send_cpumask.set_autoload(!btf && cpumask);
    load_and_attach(
        open,
        |s| create_other(&s.maps.tlb_procs),
        "tlb:tlb_flush",
        !env.defer_on_demand,
    )
}

/// Which event names the function a cross-CPU call runs, or why none does.
type Ipis = Result<&'static str, &'static str>;

pub(crate) fn load(env: &mut Env, tracefs: &Path) -> Result<TlbTracer, String> {
    need_tracepoints(tracefs, &[("tlb", "tlb_flush")])?;
    let flush = Kallsyms::address_of("flush_tlb_func");
    // csd:csd_queue_cpu from 6.6 (the IPI events then report only the generic handler),
    // ipi:ipi_send_cpumask on 6.3–6.5.
    let ipis = if flush.is_none() {
        Err("flush_tlb_func is not in /proc/kallsyms (or kptr_restrict hides it)")
    } else if has_tracepoint(tracefs, "csd", "csd_queue_cpu") {
        Ok("csd:csd_queue_cpu")
    } else if has_tracepoint(tracefs, "ipi", "ipi_send_cpumask") {
        Ok("ipi:ipi_send_cpumask")
    } else {
        Err("neither csd:csd_queue_cpu nor ipi:ipi_send_cpumask exists (kernel < 6.3)")
    };
    let flush = flush.unwrap_or(0);
    // BTF-typed and raw tracepoints first (5.5+): tlb_flush fires at every flush on the host, and
    // they skip the perf trace buffer that a classic one fills per event (a third of the
    // tracer's cost per flush here, see tlb.bpf.c). Classic tracepoints where the kernel refuses
    // them; the first refusal is kept as the reason.
    // With the madvise tracer, one flush program counts for both (tlb.bpf.c says what that
    // saves); where it is refused (bpf_task_pt_regs is 5.15+), madvise loads its own.
    let with_madvise = env.wants(TracerId::MADVISE) && cfg!(target_arch = "x86_64");
    let first = if crate::fallbacks_forced() {
        Err("not tried (fallbacks only)".to_string())
    } else if with_madvise {
        open_and_load(env, true, true, flush, ipis)
            .map(|l| (l, true))
            .or_else(|_| open_and_load(env, true, false, flush, ipis).map(|l| (l, false)))
    } else {
        open_and_load(env, true, false, flush, ipis).map(|l| (l, false))
    };
    let (skel, links, btf, madvise) = match first {
        Ok(((s, l), madvise)) => (s, l, true, madvise),
        Err(btf_err) => {
            check(tracefs, &records()).map_err(|e| format!("tp_btf: {btf_err}; classic: {e}"))?;
            let (s, l) = open_and_load(env, false, false, flush, ipis)
                .map_err(|e| format!("tp_btf: {btf_err}; classic: {e}"))?;
            (s, l, false, false)
        }
    };
    if madvise {
        env.counted_by_another.push(TracerId::MADVISE);
    }
    Ok(TlbTracer {
        links,
        skel,
        procs: Deltas::new(LAYOUT),
        procs_batch: Default::default(),
        ipis,
        btf,
        madvise,
        dropped: 0,
        task_switch: 0,
    })
}

impl Tracer for TlbTracer {
    fn new_generation(&mut self) {
        crate::next_generation!(self.skel);
    }

    fn how(&self) -> String {
        let kind = match (self.btf, self.ipis) {
            (false, _) => "classic",
            (true, Ok("csd:csd_queue_cpu")) => "BTF-typed and raw",
            (true, _) => "BTF-typed",
        };
        let madvise = if self.madvise {
            "; its flush program also counts madvise() calls for the madvise tracer"
        } else {
            ""
        };
        match self.ipis {
            Ok(ev) => format!(
                "{kind} tracepoints tlb:tlb_flush, {ev} with flush_tlb_func (shootdowns attributed to the sender){madvise}"
            ),
            Err(why) => format!(
                "{kind} tracepoint tlb:tlb_flush; shootdown senders from their own TLB_REMOTE_SEND_IPI flushes (fallback: one per flush, not per target CPU; {why}){madvise}"
            ),
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
        // Before 6.3 no event names the function an IPI runs, but the sender's own flush is
        // traced with reason TLB_REMOTE_SEND_IPI (native_flush_tlb_multi, in its context): one
        // per flush that interrupted other CPUs, whatever their number. Case 4's sender is then
        // still named, with rounds of shootdowns rather than IPIs per target.
        let per_flush = self.ipis.is_err();
        let mut t = Tlb {
            ipis_attributed: true,
            ..Default::default()
        };
        let mut m = Madvise::default();
        if let Some(bss) = self.skel.maps.bss_data.as_deref_mut() {
            // A new interval: each process is named again at its next event.
            bss.js_gen += 1;
            t.dropped = since(bss.dropped, &mut self.dropped);
        }
        if let Ok(Some(cpus)) = self
            .skel
            .maps
            .task_switch_flushes
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
        {
            let total = crate::delta::sum_cpus(cpus.iter().map(Vec::as_slice), ONE_COUNTER)[0];
            t.task_switch = since(total, &mut self.task_switch);
        }
        for e in drain_procs(
            &self.skel.maps.tlb_procs,
            &mut self.procs_batch,
            &mut self.procs,
            env.live_pids(),
        ) {
            let d = &e.d;
            // As the madvise tracer's own map would hold them: processes that called it.
            if self.madvise && d[14..20].iter().any(|&v| v != 0) {
                let cgroup = env.cpu_cgroups.path(e.cgroup_id);
                m.procs.push(crate::madvise::proc_row(
                    e.pid,
                    e.comm.clone(),
                    cgroup,
                    &d[14..20],
                ));
            }
            t.procs.push(TlbProc {
                pid: e.pid,
                comm: e.comm,
                cgroup: env.cpu_cgroups.path(e.cgroup_id),
                // d[4], flushes on task switch, is 0: they are counted host-wide.
                task_switch: 0,
                remote_shootdown: d[5],
                local_shootdown: d[6],
                local_mm_shootdown: d[7],
                remote_send_ipi: d[8],
                other: d[9],
                pages: d[10],
                full_flushes: d[11],
                ipis_sent: if per_flush { d[8] } else { d[12] },
                ipi_targets: if per_flush { 0 } else { d[13] },
            });
        }
        if self.madvise {
            // tlb's drops: any of its events that found no entry, a madvise call's flush among
            // them (which of them were is not known).
            m.dropped = t.dropped;
            out.madvise = Some(m);
        }
        out.tlb = Some(t);
    }
}
