//! `memory.high-throttling` — a cgroup v2 over its `memory.high`, its tasks made to reclaim
//! and then put to sleep.
//!
//! **Mechanism.** `memory.high` is cgroup v2's throttle, below the hard `memory.max`. When a
//! cgroup's usage goes over it, each task that charged memory reclaims from the cgroup on its
//! way back to user space (`mem_cgroup_handle_over_high`); when reclaim cannot bring usage
//! back under (anonymous memory without swap, a working set larger than the setting), the
//! kernel adds a penalty sleep that grows with the overage, up to 2 s per return (since 5.4;
//! before, only the reclaim). The tasks are never OOM-killed: they crawl. The sleep counts as
//! memory pressure of the cgroup (PSI `some`/`full`), and each time over is a `high` event in
//! `memory.events`. Container runtimes and systemd set it (`MemoryHigh=`; Kubernetes'
//! MemoryQoS sets it from the limit), so a cgroup can be throttled well below what its owner
//! thinks is its limit.
//!
//! **Evidence.** The cgroup's `memory.events.high_per_s`, its usage against its `memory.high`
//! (and `memory.max`), its memory pressure against the baseline, the process in it that grew
//! most.
//!
//! **Thresholds.** >= 10 `high` events in the window in a cgroup with a `memory.high` of its
//! own, and its memory pressure `some` >= 5% on average: the time its tasks lost. Events alone
//! are not throttling: page cache sitting at the line counts one at every charge past it and is
//! reclaimed cheaply. Confidence by the pressure (0.5 at 5%, 0.95 at 50%), at least 0.7 when
//! usage stood at or over `memory.high`. Without PSI (booted `psi=0`) the cost is unknown: a
//! cgroup at its `memory.high` with the events is reported at 0.55.
//!
//! **Remediation.** Raise `memory.high` (or remove it and rely on `memory.max`), or fix the
//! growth; what each setting does (`high` throttles, `max` OOM-kills); swap for the cgroup
//! (`memory.swap.max`) lets reclaim succeed instead of sleeping; proactive reclaim with
//! `memory.reclaim` (5.19+).
//!
//! **References.** Documentation/admin-guide/cgroup-v2.rst (memory.high, memory.events);
//! kernel commit 0e4b01df8659 ("mm, memcg: throttle allocators when failing reclaim over
//! memory.high", 5.4); systemd.resource-control(5) MemoryHigh=; the Kubernetes MemoryQoS KEP
//! (2570).

use jitterscope_model::metrics::{cgroup, process};
use jitterscope_sources::system::kernel::KernelVersion;

use super::{cgroup_culprit, confidence, finding, mib, moved_first, rule, top_procs_by, Take};
use crate::data::Data;
use crate::Finding;

rule! {
    "memory.high-throttling",
    "a cgroup over its memory.high: its tasks reclaim, then sleep (cgroup v2)",
    mechanism,
    reads: cgroup::MEMORY_EVENTS_PER_S["*", "high"], cgroup::MEMORY_HIGH_BYTES,
        cgroup::MEMORY_USAGE_BYTES, cgroup::MEMORY_LIMIT_BYTES,
        cgroup::PRESSURE_SOME_PCT["*", "memory"],
        cgroup::PRESSURE_FULL_PCT["*", "memory"], process::PROC_RSS_BYTES,
}

/// `high` events in the window from which the cgroup was throttled, not just touching it.
pub const EVENTS: f64 = 10.0;

/// The cgroup's mean memory pressure from which the throttling cost its tasks time, %.
pub const PRESSURE: f64 = 5.0;

fn run(d: &Data) -> Vec<Finding> {
    let mut found = Vec::new();
    for s in d.each(&cgroup::MEMORY_EVENTS_PER_S) {
        if s.label(1) != "high" {
            continue;
        }
        let cg = s.label(0);
        let events = d.stats_of(s);
        if events.sum < EVENTS {
            continue;
        }
        let high = d.stats(&cgroup::MEMORY_HIGH_BYTES, &[cg]);
        // Without a memory.high of its own, the cgroup's events are a descendant's.
        if high.n == 0 {
            continue;
        }
        let usage = d.stats(&cgroup::MEMORY_USAGE_BYTES, &[cg]);
        let some = d.stats(&cgroup::PRESSURE_SOME_PCT, &[cg, "memory"]);
        let at_high = usage.n > 0 && usage.max >= 0.95 * high.max;
        // A cgroup whose page cache sits at memory.high counts a `high` event at every charge
        // past it, and reclaims that clean cache cheaply: throttling is the time its tasks
        // lost, which memory pressure measures. Without PSI (psi=0) the time is unknown.
        let throttled = if some.n > 0 {
            some.mean >= PRESSURE
        } else {
            at_high
        };
        if !throttled {
            continue;
        }
        found.push((cg.to_string(), events, high, usage, some, at_high));
    }
    // memory.events counts in every ancestor too (memory.events.local is the cgroup's own):
    // a parent is named only when no cgroup below it went over.
    let paths: Vec<String> = found.iter().map(|f| f.0.clone()).collect();
    found.retain(|f| {
        !paths
            .iter()
            .any(|p| *p != f.0 && super::pagecache::within(p, &f.0))
    });
    // The most throttled cgroup first: by pressure, then by events.
    found.sort_by(|a, b| {
        b.4.mean
            .total_cmp(&a.4.mean)
            .then(b.1.sum.total_cmp(&a.1.sum))
    });
    found
        .into_iter()
        .take(3)
        .map(|(cg, events, high, usage, some, at_high)| {
            explain(d, &cg, events.sum, high.max, usage.max, some.mean, at_high)
        })
        .collect()
}

fn explain(
    d: &Data,
    cg: &str,
    events: f64,
    high: f64,
    usage: f64,
    pressure: f64,
    at_high: bool,
) -> Finding {
    // The largest process of that memory cgroup in the window (one that maps and unmaps, as
    // an allocator returning memory does, has no growth from first to last sample, yet it is
    // what fills the cgroup).
    let grower = top_procs_by(d, &process::PROC_RSS_BYTES, |st| st.max)
        .into_iter()
        .find(|p| d.procs.get(&p.pid).and_then(|x| x.memory_cgroup.as_deref()) == Some(cg));
    let mut culprit = cgroup_culprit(d, cg);
    if let Some(p) = &grower {
        culprit.pid = Some(p.pid);
        culprit.comm = Some(p.comm.clone());
    }
    let psi = d.get(&cgroup::PRESSURE_SOME_PCT, &[cg, "memory"]).is_some();
    let conf = if !psi {
        // Over the line, at a cost nobody measured.
        0.55
    } else if at_high {
        confidence(pressure, PRESSURE, 50.0).max(0.7)
    } else {
        confidence(pressure, PRESSURE, 50.0)
    };
    let mut f = finding(
        &RULE,
        d,
        format!(
            "memory.high throttling of {cg}: {events:.0} times over its memory.high{} in the window{}{}",
            if high > 0.0 {
                format!(" of {:.0} MiB (usage up to {:.0} MiB)", mib(high), mib(usage))
            } else {
                String::new()
            },
            if pressure > 0.0 {
                format!(", its tasks stalled {pressure:.0}% of the time")
            } else {
                String::new()
            },
            grower
                .as_ref()
                .map(|p| format!("; {} ({}) the largest in it", p.comm, p.pid))
                .unwrap_or_default()
        ),
        conf,
        culprit,
    );
    f.cite(
        d,
        &cgroup::MEMORY_EVENTS_PER_S,
        &[cg, "high"],
        Take::Sum,
        "times the cgroup went over memory.high (memory.events high)",
    );
    f.cite(
        d,
        &cgroup::MEMORY_HIGH_BYTES,
        &[cg],
        Take::Last,
        "its memory.high",
    );
    f.cite(
        d,
        &cgroup::MEMORY_USAGE_BYTES,
        &[cg],
        Take::Max,
        "its memory usage",
    );
    f.cite(
        d,
        &cgroup::MEMORY_LIMIT_BYTES,
        &[cg],
        Take::Last,
        "its memory.max (the hard limit, where the OOM killer acts)",
    );
    f.cite(
        d,
        &cgroup::PRESSURE_SOME_PCT,
        &[cg, "memory"],
        Take::Mean,
        "time some of its tasks waited on memory: reclaim and the over-high penalty sleep",
    );
    f.cite(
        d,
        &cgroup::PRESSURE_FULL_PCT,
        &[cg, "memory"],
        Take::Mean,
        "time all of its tasks waited on memory",
    );
    if let Some(p) = &grower {
        f.evidence.push(super::series_fact(
            p.series,
            p.value,
            Take::Max,
            format!(
                "{} ({})'s resident memory, the largest in the cgroup",
                p.comm, p.pid
            ),
        ));
    }
    f.moved_first = moved_first(
        d,
        &[
            (d.get(&cgroup::MEMORY_EVENTS_PER_S, &[cg, "high"]), 0.5),
            (d.get(&cgroup::PRESSURE_SOME_PCT, &[cg, "memory"]), 1.0),
        ],
    );
    f.onset = d
        .get(&cgroup::MEMORY_EVENTS_PER_S, &[cg, "high"])
        .and_then(|s| d.onset(s, 0.5));
    let kernel = d.kernel_version();
    f.remediation.push(format!(
        "raise memory.high of {cg}{} (systemd: MemoryHigh=; Kubernetes MemoryQoS derives it from the limit), or remove it and let memory.max bound the cgroup",
        if usage > 0.0 {
            format!(" above its working set (it reached {:.0} MiB)", mib(usage))
        } else {
            String::new()
        }
    ));
    if let Some(p) = &grower {
        f.remediation.push(format!(
            "or make {} ({}) use less: memory.high throttles it instead of failing it, so its growth (a leak, a cache without a bound) shows as slowness, not as an OOM kill",
            p.comm, p.pid
        ));
    }
    f.remediation.push("memory.high throttles (reclaim, then a sleep of up to 2 s per return to user space) and never kills; memory.max is the hard limit where the OOM killer acts. A cgroup that must not slow down needs memory.high unset or above its peak".into());
    f.remediation.push("anonymous memory over memory.high can only be reclaimed to swap: without swap for the cgroup (memory.swap.max 0), reclaim fails and the tasks sleep instead".into());
    if kernel.is_some_and(|v| v < KernelVersion::new(5, 4, 0)) {
        f.notes.push("before 5.4 the kernel only reclaims over memory.high, with no penalty sleep: usage can run far past it".into());
    }
    if kernel.is_some_and(|v| v >= KernelVersion::new(5, 19, 0)) {
        f.remediation.push(format!(
            "to keep the cgroup small without throttling it, reclaim proactively: echo <bytes> > memory.reclaim of {cg} (5.19+) when it is idle"
        ));
    }
    f.references = vec![
        "https://docs.kernel.org/admin-guide/cgroup-v2.html#memory-interface-files",
        "https://git.kernel.org/pub/scm/linux/kernel/git/torvalds/linux.git/commit/?id=0e4b01df8659",
        "https://github.com/kubernetes/enhancements/tree/master/keps/sig-node/2570-memory-qos",
    ];
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    const CG: &str = "/system.slice/app.service";

    /// Ten baseline seconds, ten in the window: the cgroup over its 64 MiB memory.high
    /// `events` times a second, memory pressure `some` %, `app` (pid 9) growing.
    fn data(events: f64, some: f64, usage_mib: f64) -> Data {
        let mut d = Data::seconds(20, 10);
        for i in 0..20u32 {
            let on = i >= 10;
            d.push(&cgroup::MEMORY_HIGH_BYTES, &[CG], i, 64.0 * 1048576.0);
            d.push(
                &cgroup::MEMORY_USAGE_BYTES,
                &[CG],
                i,
                if on { usage_mib } else { 40.0 } * 1048576.0,
            );
            d.push(
                &cgroup::MEMORY_EVENTS_PER_S,
                &[CG, "high"],
                i,
                if on { events } else { 0.0 },
            );
            d.push(
                &cgroup::PRESSURE_SOME_PCT,
                &[CG, "memory"],
                i,
                if on { some } else { 0.0 },
            );
            d.push(
                &process::PROC_RSS_BYTES,
                &["9", "app"],
                i,
                (30.0 + i as f64 * 3.0) * 1048576.0,
            );
        }
        d.procs.insert(
            9,
            crate::data::Proc {
                memory_cgroup: Some(CG.into()),
                ..Default::default()
            },
        );
        d
    }

    #[test]
    fn a_cgroup_over_its_high_is_named_with_its_grower() {
        let f = run(&data(20.0, 30.0, 66.0));
        assert_eq!(f.len(), 1, "{f:#?}");
        let f = &f[0];
        assert!(
            f.title.starts_with(
                "memory.high throttling of /system.slice/app.service: 200 times over its memory.high of 64 MiB (usage up to 66 MiB) in the window, its tasks stalled 30% of the time; app (9) the largest in it"
            ),
            "{}",
            f.title
        );
        assert_eq!(f.culprit.cgroup.as_deref(), Some(CG));
        assert_eq!(f.culprit.comm.as_deref(), Some("app"));
        assert!(f.confidence >= 0.7);
        assert!(f.remediation[0].starts_with("raise memory.high of"));
        assert!(f.onset.is_some());
    }

    #[test]
    fn the_parent_counting_its_childs_events_is_not_named() {
        let mut d = data(20.0, 30.0, 66.0);
        for i in 0..20u32 {
            let on = i >= 10;
            d.push(
                &cgroup::MEMORY_EVENTS_PER_S,
                &["/system.slice", "high"],
                i,
                if on { 20.0 } else { 0.0 },
            );
            d.push(
                &cgroup::PRESSURE_SOME_PCT,
                &["/system.slice", "memory"],
                i,
                if on { 31.0 } else { 0.0 },
            );
        }
        let f = run(&d);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].culprit.cgroup.as_deref(), Some(CG));
    }

    #[test]
    fn touching_the_line_now_and_then_is_not_throttling() {
        // Few events.
        assert!(run(&data(0.5, 30.0, 66.0)).is_empty());
        // At memory.high with many events, but no pressure: page cache at the line, reclaimed
        // as fast as it is charged.
        assert!(run(&data(20.0, 0.5, 66.0)).is_empty());
    }
}
