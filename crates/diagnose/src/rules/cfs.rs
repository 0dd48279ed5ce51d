//! `cpu.cfs-throttling` — CFS bandwidth control stops a cgroup's threads until the next period.
//!
//! **Mechanism.** A cgroup with a CPU limit (v1 `cpu.cfs_quota_us`/`cpu.cfs_period_us`, v2
//! `cpu.max`) may run `quota` per `period` across all CPUs. When its runnable threads have
//! spent it, all of them wait for the next period: tens of milliseconds of latency for a
//! request that needed one. Case 2 (Indeed): latency tracked `nr_throttled / nr_periods` while
//! CPU usage looked normal.
//!
//! **Evidence.** `cgroup.<cg>.cpu.throttled_pct` (throttled periods / periods),
//! `usage_of_quota_pct`, `quota_cores`, `usage_pct`, `throttled_ms_per_s`, the threads of the
//! cgroup's processes (`proc.<pid>.<comm>.threads`), the kernel release.
//!
//! **Thresholds.** A finding when the window's mean throttled % is >= 20 or its max >= 50: at
//! 20% of periods throttled, one request in five that spans a period boundary waits a period.
//! Confidence rises to 0.95 at a mean of 80%.
//!
//! **Kinds.** (a) usage of quota below 70% while throttled: the demand comes in bursts inside
//! periods (or, on 4.18 <= kernel < 5.4 without de53fd7aedb1, the per-CPU slice expiry bug);
//! (b) usage at the quota: demand exceeds the limit; (c) many threads x small quota: more
//! threads than 4x the quota in cores spend it in a fraction of the period; (d) throttled
//! without a quota of its own: the limit is on an ancestor.
//!
//! **Remediation.** Raise the quota to the usage peak with headroom; allow bursts
//! (`cpu.cfs_burst_us` v1 / `cpu.max.burst` v2, kernel 5.14+); fewer worker threads; or no CPU
//! limit (Kubernetes: keep requests, drop limits).
//!
//! **References.** Documentation/scheduler/sched-bwc.rst; kernel commits 512ac999d275 and
//! de53fd7aedb1; Indeed Engineering, "Unthrottled: fixing CPU limits in the cloud" (2019).

use super::{
    cgroup_culprit, confidence, evidence, fact, finding, kernel_version, moved_first, top_procs,
    Rule, Take,
};
use crate::data::Data;
use crate::Finding;

/// The rule.
pub const RULE: Rule = Rule {
    id: "cpu.cfs-throttling",
    summary: "a cgroup's threads stopped by its CFS quota in many periods",
    mechanism: true,
    select: &[
        "cgroup.*.cpu.throttled_pct",
        "cgroup.*.cpu.usage_of_quota_pct",
        "cgroup.*.cpu.quota_cores",
        "cgroup.*.cpu.burst_cores",
        "cgroup.*.cpu.usage_pct",
        "cgroup.*.cpu.throttled_ms_per_s",
        "proc.*.cpu_pct",
        "proc.*.threads",
    ],
    run,
};

fn run(d: &Data) -> Vec<Finding> {
    let mut out = Vec::new();
    let throttled: Vec<(String, f64, f64)> = d
        .matching("cgroup.*.cpu.throttled_pct")
        .filter_map(|(name, s)| {
            let cg = name
                .strip_prefix("cgroup.")?
                .strip_suffix(".cpu.throttled_pct")?;
            let st = d.stats_of(s);
            (st.n > 0 && (st.mean >= 20.0 || st.max >= 50.0))
                .then(|| (cg.to_string(), st.mean, st.max))
        })
        .collect();
    for (cg, mean, max) in &throttled {
        let key = |m: &str| format!("cgroup.{cg}.cpu.{m}");
        let quota = d.stats(&key("quota_cores"));
        let own_quota = quota.n > 0;
        let usage_of_quota = d.stats(&key("usage_of_quota_pct"));
        let usage = d.stats(&key("usage_pct"));
        // Processes of this cgroup: the busiest is the culprit, their threads the fan-out.
        let members: Vec<(u32, String)> = d
            .procs
            .iter()
            .filter(|(_, p)| p.cgroup.as_deref() == Some(cg.as_str()))
            .map(|(pid, p)| (*pid, p.comm.clone()))
            .collect();
        let threads: f64 = members
            .iter()
            .map(|(pid, comm)| d.stats(&format!("proc.{pid}.{comm}.threads")).last)
            .sum();
        let busiest = top_procs(d, "proc.", ".cpu_pct")
            .into_iter()
            .find(|(pid, _, _)| members.iter().any(|(p, _)| p == pid));
        let mut culprit = cgroup_culprit(cg);
        if let Some((pid, comm, _)) = &busiest {
            culprit.pid = Some(*pid);
            culprit.comm = Some(comm.clone());
        }
        let quota_cores = quota.last;
        let kind = if !own_quota {
            "throttled by an ancestor's quota"
        } else if usage_of_quota.n > 0 && usage_of_quota.mean < 70.0 {
            "throttled below its quota (bursts inside periods)"
        } else if threads > 4.0 * quota_cores.max(0.01) && threads >= 4.0 {
            "many threads sharing a small quota"
        } else {
            "demand above its quota"
        };
        let mut f = finding(
            &RULE,
            d,
            format!(
                "CFS throttling of {cg}: throttled in {mean:.0}% of periods ({kind}){}",
                busiest
                    .as_ref()
                    .map(|(p, c, _)| format!(", busiest process {c} ({p})"))
                    .unwrap_or_default()
            ),
            confidence(*mean, 20.0, 80.0).max(if *max >= 50.0 { 0.5 } else { 0.0 }),
            culprit,
        );
        f.evidence.push(evidence(
            d,
            &key("throttled_pct"),
            Take::Mean,
            "percent",
            format!("periods throttled (max {max:.0}%)"),
        ));
        if own_quota {
            f.evidence.push(evidence(
                d,
                &key("quota_cores"),
                Take::Last,
                "cores",
                "the CFS quota, in cores",
            ));
        }
        if usage_of_quota.n > 0 {
            f.evidence.push(evidence(
                d,
                &key("usage_of_quota_pct"),
                Take::Mean,
                "percent",
                "CPU used, % of the quota",
            ));
        }
        if usage.n > 0 {
            f.evidence.push(evidence(
                d,
                &key("usage_pct"),
                Take::Max,
                "percent",
                "CPU used, % of one core",
            ));
        }
        f.evidence.push(evidence(
            d,
            &key("throttled_ms_per_s"),
            Take::Mean,
            "ms/s",
            "time its threads spent throttled",
        ));
        if threads > 0.0 {
            f.evidence.push(fact(
                format!("threads in {cg}"),
                threads,
                "count",
                "threads of the cgroup's processes",
            ));
        }
        f.moved_first = moved_first(
            d,
            &[(&key("usage_pct"), 1.0), (&key("throttled_pct"), 20.0)],
        );
        let peak_cores = usage.max / 100.0;
        if own_quota {
            f.remediation.push(format!(
                "raise the quota from {quota_cores:.2} to at least {:.2} cores (the window's peak {peak_cores:.2} + 25%), e.g. v1: echo {} > cpu.cfs_quota_us (period 100000)",
                (peak_cores * 1.25).max(quota_cores * 1.5),
                ((peak_cores * 1.25).max(quota_cores * 1.5) * 100_000.0).round()
            ));
        } else if let Some((anc, _, _)) = throttled
            .iter()
            .filter(|(a, _, _)| cg.starts_with(&format!("{a}/")))
            .max_by_key(|(a, _, _)| a.len())
        {
            f.remediation.push(format!(
                "the limit is set on {anc}: raise or remove it there"
            ));
        }
        match kernel_version(&d.kernel) {
            Some(v) if v >= (5, 14) => f.remediation.push(
                "allow bursts: cpu.cfs_burst_us (v1) / cpu.max.burst (v2) up to the quota, so short peaks use what idle periods left".into(),
            ),
            _ => {}
        }
        if kind.starts_with("many threads") {
            f.remediation.push(format!(
                "fewer runnable threads ({threads:.0} share {quota_cores:.2} cores): size worker pools to the quota (e.g. GOMAXPROCS, -XX:ActiveProcessorCount)"
            ));
        }
        f.remediation.push(
            "or drop the CPU limit and keep the request (Kubernetes: requests without limits)"
                .into(),
        );
        if let Some(v) = kernel_version(&d.kernel) {
            if ((4, 18)..(5, 4)).contains(&v) {
                f.notes.push(format!(
                    "kernel {} is in the window of 512ac999d275 (4.18) without de53fd7aedb1 (5.4): per-CPU slices expire unused and throttle cgroups below their quota, unless your vendor backported the fix",
                    d.kernel
                ));
            }
        }
        f.references = vec![
            "https://docs.kernel.org/scheduler/sched-bwc.html",
            "https://git.kernel.org/linus/de53fd7aedb1",
            "https://engineering.indeedblog.com/blog/2019/12/unthrottled-fixing-cpu-limits-in-the-cloud/",
        ];
        out.push(f);
    }
    out
}
