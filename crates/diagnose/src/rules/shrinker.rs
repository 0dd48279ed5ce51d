//! `memory.shrinker-cost` — slab shrinking that costs CPU out of proportion to what it frees.
//!
//! **Mechanism.** Reclaim calls every registered shrinker for every memory cgroup it visits.
//! Each mount has its own superblock shrinker; with M memcgs and S superblocks, a reclaim pass
//! makes up to M x S calls. Before 4.19 every pair was called (case 3: 200 containers x 20
//! memcgs x 20 mounts, 16 million calls, 5-14 s per `drop_caches`); since, only pairs with
//! objects, but hosts with thousands of memcgs still pay per memcg.
//!
//! **Evidence.** Per shrinker (`shrinker.<fn>.*`): calls, calls that freed nothing, time in the
//! shrinker (% of the interval) and its longest call; the number of memory cgroups recorded;
//! sys CPU; the kernel release.
//!
//! **Thresholds.** A finding when one shrinker takes >= 5% of the interval on average or a
//! call lasts >= 10 ms while freeing < 128 objects per call, or when shrinker calls jump >= 10x
//! over the baseline to >= 1,000 in the window with >= 100 memcgs and either that few objects
//! per call or >= half the calls freeing nothing: the scaling case-3 pattern.
//!
//! **Remediation.** Fewer memcgs and mounts per host (collapse per-container systemd slices,
//! remove dead cgroups), kernel >= 4.19 for the shrinker bitmap; avoid host-wide
//! `drop_caches` on container hosts.
//!
//! **References.** Kirill Tkhai's shrinker patchset (4.19, "mm: Speed up shrink_slab()");
//! Virtuozzo, "How and why we optimized the algorithm of cleaning SLAB-caches" (2018).

use jitterscope_model::metrics::{cgroup, cpu, tracer};
use jitterscope_model::registry::Unit;
use jitterscope_sources::system::kernel::KernelVersion;

use super::{confidence, fact, finding, moved_first, rule, top_series, Take};
use crate::data::Data;
use crate::Finding;

rule! {
    "memory.shrinker-cost",
    "slab shrinkers called out of proportion to what they free",
    mechanism,
    reads: tracer::SHRINKER_CALLS_PER_S, tracer::SHRINKER_ZERO_FREED_PER_S,
        tracer::SHRINKER_TIME_PCT, tracer::SHRINKER_MAX_USEC, tracer::SHRINKER_FREED_PER_S,
        cgroup::MEMORY_USAGE_BYTES, cpu::SYS_PCT,
}

fn run(d: &Data) -> Vec<Finding> {
    let by_time = top_series(d, &tracer::SHRINKER_TIME_PCT, |s| s.mean);
    let by_calls = top_series(d, &tracer::SHRINKER_CALLS_PER_S, |s| s.sum);
    let memcgs = d
        .each(&cgroup::MEMORY_USAGE_BYTES)
        .filter(|s| d.stats_of(s).n > 0)
        .count();
    let Some((top, calls)) = by_calls.first().map(|(s, v)| (s.label(0), *v)) else {
        return Vec::new();
    };
    let at: &[&str] = &[top];
    let cs = d.stats(&tracer::SHRINKER_CALLS_PER_S, at);
    let time = by_time
        .iter()
        .find(|(s, _)| s.label(0) == top)
        .map(|x| x.1)
        .unwrap_or(0.0);
    let max_us = d.stats(&tracer::SHRINKER_MAX_USEC, at).max;
    let base_rate = if cs.base_n > 0 { cs.base_median } else { 0.0 };
    let jump = cs.mean / base_rate.max(1.0);
    // Shrinking that frees a lot is reclaim doing its job (a bloated cache, see
    // memory.dcache-bloat): long calls count only when the window freed little per call.
    let freed = d.stats(&tracer::SHRINKER_FREED_PER_S, at).sum;
    let few_objects = freed < 128.0 * calls.max(1.0);
    let slow = (time >= 5.0 || max_us >= 10_000.0) && few_objects;
    // The walk over every memcg is judged by its calls instead: when most of them found
    // nothing to free, they are case 3's cost even if one memcg's list freed millions. On a
    // host with a big dentry cache, a host-wide drop_caches frees it in its first round (1.5M
    // objects, 0.9 s, in 1.9k calls of which 89% freed nothing), which hid the empty rounds
    // after it when only the objects per call were judged.
    let zero = d.stats(&tracer::SHRINKER_ZERO_FREED_PER_S, at);
    let wasted = zero.sum;
    let mostly_empty = zero.n > 0 && wasted >= 0.5 * calls;
    let scaling = calls >= 1000.0 && jump >= 10.0 && memcgs >= 100 && (few_objects || mostly_empty);
    if !(slow || scaling) {
        return Vec::new();
    }
    let mut f = finding(
        &RULE,
        d,
        format!(
            "slab shrinking cost: {top} called {calls:.0} times ({}) across {memcgs} memory cgroups",
            if zero.n > 0 && calls > 0.0 {
                format!("{:.0}% freed nothing", wasted * 100.0 / calls)
            } else {
                "how many freed nothing is unknown".into()
            }
        ),
        if slow {
            confidence(time.max(max_us / 2000.0), 5.0, 50.0)
        } else {
            confidence(jump, 10.0, 200.0).min(0.8)
        },
        Default::default(),
    );
    f.cite(
        d,
        &tracer::SHRINKER_CALLS_PER_S,
        at,
        Take::Sum,
        format!("calls in the window ({jump:.0}x the baseline rate)"),
    );
    f.cite(
        d,
        &tracer::SHRINKER_ZERO_FREED_PER_S,
        at,
        Take::Sum,
        "calls that freed nothing",
    );
    f.cite(
        d,
        &tracer::SHRINKER_FREED_PER_S,
        at,
        Take::Sum,
        "objects freed",
    );
    f.cite(
        d,
        &tracer::SHRINKER_TIME_PCT,
        at,
        Take::Max,
        "time in the shrinker, % of the interval",
    );
    f.cite(d, &tracer::SHRINKER_MAX_USEC, at, Take::Max, "longest call");
    f.evidence.push(fact(
        "memory cgroups",
        memcgs as f64,
        Unit::Count,
        "memory cgroups recorded in the window: reclaim visits each",
    ));
    f.cite(d, &cpu::SYS_PCT, &[], Take::Max, "system CPU");
    f.moved_first = moved_first(
        d,
        &[
            (d.get(&tracer::SHRINKER_CALLS_PER_S, at), 10.0),
            (d.get(&cpu::SYS_PCT, &[]), 10.0),
        ],
    );
    if let Some(v) = d.kernel_version() {
        if v < KernelVersion::new(4, 19, 0) {
            f.notes.push(format!(
                "kernel {} predates the 4.19 shrinker bitmap: every shrinker is called for every memcg (M x S calls per pass)",
                d.kernel
            ));
            f.remediation.push("upgrade to 4.19+ (or a vendor kernel with \"mm: Speed up shrink_slab()\" backported)".into());
        }
    }
    f.remediation.push(format!("fewer memory cgroups ({memcgs}) and mounts per host: remove dead and per-task cgroups, collapse slices"));
    f.remediation.push("avoid host-wide drop_caches and global memory pressure on hosts with thousands of memcgs; give containers memory limits so reclaim stays inside each".into());
    f.references = vec![
        "https://lore.kernel.org/all/153063036670.1818.16010062622751502.stgit@localhost.localdomain/",
        "https://habr.com/en/companies/virtuozzo/articles/417419/",
    ];
    vec![f]
}
