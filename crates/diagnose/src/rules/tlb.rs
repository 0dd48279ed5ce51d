//! `cpu.tlb-shootdown` — inter-processor interrupts flushing other CPUs' TLBs.
//!
//! **Mechanism.** When a multi-threaded process unmaps or frees pages (`munmap`,
//! `madvise(MADV_DONTNEED/FREE)`), every other CPU currently running one of its threads must
//! drop the stale translations: the freeing CPU sends IPIs and waits for all of them. Under a
//! purging allocator (jemalloc returning dirty pages) that is thousands of IPIs per second; on
//! VMs each IPI is a VM exit. Case 4 (ByteDance): sys-CPU surges traced to jemalloc's madvise.
//!
//! **Evidence.** `irq.tlb_per_s` (TLB shootdown IPIs received, /proc/interrupts TLB row) vs
//! the baseline and per CPU (`cpu.<n>.tlb_per_s`), the sending processes
//! (`tlb.proc.*.shootdown_ipis_sent_per_s`), their `madvise` rates by advice, and the allocator
//! in their stack samples or mappings (jemalloc with its version string, tcmalloc, mimalloc,
//! glibc).
//!
//! **Thresholds.** A finding when the window's mean is >= 1,000 IPIs/s and >= 10x the baseline
//! median (a host that always runs at that rate has no episode; one without a baseline needs
//! the absolute rate only). Confidence 0.5 at 10x, 0.95 at 100x.
//!
//! **Remediation.** jemalloc 5.x: `MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1` (or a
//! long decay, e.g. 10000, to bound memory); 4.x: `MALLOC_CONF=purge:decay,decay_time:-1`;
//! glibc: raise `M_TRIM_THRESHOLD` (`MALLOC_TRIM_THRESHOLD_`) and `M_MMAP_THRESHOLD`; in
//! general, free in batches, and pin the process to fewer CPUs.
//!
//! **References.** jemalloc issue 1422 and TUNING.md; ByteDance infrastructure, "TLB shootdown"
//! case study (2021); Documentation/x86/tlb.rst.

use jitterscope_model::metrics::{cpu, irq, tracer};

use super::{
    confidence, fact, finding, moved_first, proc_culprit, rule, top_procs, top_series, Take,
};
use crate::data::Data;
use crate::Finding;

rule! {
    "cpu.tlb-shootdown",
    "TLB-shootdown IPI storms from a process freeing pages on many CPUs",
    mechanism,
    reads: irq::TLB_PER_S, irq::PER_CPU_TLB_PER_S, tracer::TLB_SHOOTDOWN_IPIS_SENT_PER_S,
        tracer::TLB_PROC_SHOOTDOWN_IPIS_SENT_PER_S, tracer::MADVISE_PROC_DONTNEED_PER_S,
        tracer::MADVISE_PROC_FREE_PER_S, cpu::SYS_PCT,
}

/// The allocator a process uses, from the libraries it ran code in or maps: (name, library).
pub(crate) fn allocator(d: &Data, pid: u32) -> Option<(String, String)> {
    let mut paths: Vec<String> = d
        .modules
        .get(&pid)
        .map(|m| m.iter().cloned().collect())
        .unwrap_or_default();
    if let Some(maps) = d.live_file(pid, "maps") {
        paths.extend(
            maps.lines()
                .filter_map(|l| l.split_whitespace().nth(5))
                .map(str::to_string),
        );
    }
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    let a = jitterscope_memleak::runtime::allocator(&refs)?;
    Some((a.name, a.library.unwrap_or_default()))
}

fn run(d: &Data) -> Vec<Finding> {
    let st = d.stats(&irq::TLB_PER_S, &[]);
    if st.n == 0 || st.mean < 1000.0 {
        return Vec::new();
    }
    let base = if st.base_n > 0 { st.base_median } else { 0.0 };
    let ratio = st.mean / base.max(1.0);
    if st.base_n > 0 && ratio < 10.0 {
        return Vec::new();
    }
    let senders = top_procs(d, &tracer::TLB_PROC_SHOOTDOWN_IPIS_SENT_PER_S);
    let madv = top_procs(d, &tracer::MADVISE_PROC_DONTNEED_PER_S);
    let madv_free = top_procs(d, &tracer::MADVISE_PROC_FREE_PER_S);
    let lead = senders
        .first()
        .or(madv.first())
        .map(|p| (p.pid, p.comm.clone()));
    let mut culprit = lead
        .as_ref()
        .map(|(p, c)| proc_culprit(d, *p, c, super::Res::Cpu))
        .unwrap_or_default();
    let alloc = lead.as_ref().and_then(|(p, _)| allocator(d, *p));
    let version = alloc
        .as_ref()
        .filter(|(n, _)| n == "jemalloc")
        .and_then(|(_, p)| jitterscope_memleak::runtime::jemalloc_version(p));
    if let Some((name, path)) = &alloc {
        culprit.library = Some(format!("{name} ({path})"));
        culprit.library_version = version.clone();
    }
    let mut f = finding(
        &RULE,
        d,
        format!(
            "TLB-shootdown storm: {:.0} IPIs/s ({ratio:.0}x the baseline){}",
            st.mean,
            lead.as_ref()
                .map(|(p, c)| format!(
                    ", sent by {c} ({p}){}",
                    alloc
                        .as_ref()
                        .map(|a| format!(" using {}", a.0))
                        .unwrap_or_default()
                ))
                .unwrap_or_default()
        ),
        if st.base_n > 0 {
            confidence(ratio, 10.0, 100.0)
        } else {
            0.6
        },
        culprit,
    );
    f.cite(
        d,
        &irq::TLB_PER_S,
        &[],
        Take::Mean,
        "TLB-shootdown IPIs received (all CPUs)",
    );
    let per_cpu = top_series(d, &irq::PER_CPU_TLB_PER_S, |s| s.mean);
    if let Some((first, v)) = per_cpu.first() {
        let list: Vec<String> = per_cpu
            .iter()
            .take(4)
            .map(|(s, v)| format!("cpu{} {v:.0}/s", s.label(0)))
            .collect();
        f.evidence.push(fact(
            irq::PER_CPU_TLB_PER_S.name,
            *v,
            first.def.unit,
            format!("per CPU (mean): {}", list.join(", ")),
        ));
    }
    f.cite_procs(&senders, 3, "shootdown IPIs sent by", " in the window");
    f.cite_procs(&madv, 2, "madvise(MADV_DONTNEED) calls by", "");
    f.cite_procs(&madv_free, 1, "madvise(MADV_FREE) calls by", "");
    f.cite(d, &cpu::SYS_PCT, &[], Take::Mean, "system CPU");
    if let Some(h) = super::kernel_hot_note(d, 5) {
        f.evidence.push(h);
    }
    f.moved_first = moved_first(
        d,
        &[
            (d.get(&irq::TLB_PER_S, &[]), 1000.0),
            (d.get(&cpu::SYS_PCT, &[]), 5.0),
        ],
    );
    let who = lead
        .as_ref()
        .map(|(_, c)| c.clone())
        .unwrap_or_else(|| "the sender".into());
    match (alloc.as_ref().map(|a| a.0.as_str()), version.as_deref()) {
        (Some("jemalloc"), Some(v)) if v.starts_with('4') => f.remediation.push(format!(
            "{who} uses jemalloc {v}: start it with MALLOC_CONF=purge:decay,decay_time:-1 (no purging) or a long decay_time"
        )),
        (Some("jemalloc"), v) => f.remediation.push(format!(
            "{who} uses jemalloc{}: start it with MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1 (no purging; or e.g. dirty_decay_ms:10000 to bound memory)",
            v.map(|v| format!(" {v}")).unwrap_or_default()
        )),
        (Some("glibc malloc"), _) => f.remediation.push(format!(
            "{who} maps only glibc's allocator: if the madvise calls come from malloc trimming, raise MALLOC_TRIM_THRESHOLD_ and MALLOC_MMAP_THRESHOLD_ (e.g. 256 MiB) so freed memory is kept; if the program calls madvise itself, batch those calls"
        )),
        (Some(other), _) => f.remediation.push(format!("{who} uses {other}: lengthen its release/decay interval so pages are returned in batches")),
        (None, _) => f.remediation.push(format!("{who}: return memory in batches rather than per free (the allocator could not be identified from its mappings)")),
    }
    f.remediation.push(format!("confine {who} to fewer CPUs (cpuset/taskset): a shootdown interrupts only the CPUs that ran its threads"));
    f.references = vec![
        "https://github.com/jemalloc/jemalloc/issues/1422",
        "https://github.com/jemalloc/jemalloc/blob/dev/TUNING.md",
        "https://docs.kernel.org/arch/x86/tlb.html",
    ];
    vec![f]
}
