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

use jitterscope_model::metrics::{cgroup, process};
use jitterscope_model::registry::Unit;
use jitterscope_sources::system::kernel::KernelVersion;

use super::{cgroup_culprit, confidence, fact, finding, moved_first, rule, top_procs, Take};
use crate::data::Data;
use crate::Finding;

rule! {
    "cpu.cfs-throttling",
    "a cgroup's threads stopped by its CFS quota in many periods",
    mechanism,
    reads: cgroup::CPU_THROTTLED_PCT, cgroup::CPU_USAGE_OF_QUOTA_PCT, cgroup::CPU_QUOTA_CORES,
        cgroup::CPU_BURST_CORES, cgroup::CPU_USAGE_PCT, cgroup::CPU_THROTTLED_MS_PER_S,
        process::PROC_CPU_PCT, process::PROC_THREADS,
}

/// Why a cgroup is throttled, which decides the remediation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// No quota of its own: the limit is on an ancestor.
    Ancestor,
    /// Throttled while using well under its quota: demand comes in bursts inside periods
    /// (or the 4.18–5.4 slice-expiry bug).
    BelowQuota,
    /// More runnable threads than the quota can serve in a period.
    ManyThreads,
    /// Demand simply exceeds the quota.
    AboveQuota,
}

impl Kind {
    /// How the title says it.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::Ancestor => "throttled by an ancestor's quota",
            Kind::BelowQuota => "throttled below its quota (bursts inside periods)",
            Kind::ManyThreads => "many threads sharing a small quota",
            Kind::AboveQuota => "demand above its quota",
        }
    }

    /// Classifies from the quota (None: no quota of its own), the mean usage of the quota
    /// (None: unknown) and the cgroup's threads.
    pub fn of(quota_cores: Option<f64>, usage_of_quota_pct: Option<f64>, threads: f64) -> Kind {
        match (quota_cores, usage_of_quota_pct) {
            (None, _) => Kind::Ancestor,
            (Some(_), Some(u)) if u < 70.0 => Kind::BelowQuota,
            (Some(q), _) if threads > 4.0 * q.max(0.01) && threads >= 4.0 => Kind::ManyThreads,
            _ => Kind::AboveQuota,
        }
    }
}

fn run(d: &Data) -> Vec<Finding> {
    let mut out = Vec::new();
    let throttled: Vec<(String, f64, f64)> = d
        .each(&cgroup::CPU_THROTTLED_PCT)
        .filter_map(|s| {
            let st = d.stats_of(s);
            (st.n > 0 && (st.mean >= 20.0 || st.max >= 50.0))
                .then(|| (s.label(0).to_string(), st.mean, st.max))
        })
        .collect();
    for (cg, mean, max) in &throttled {
        let at: &[&str] = &[cg.as_str()];
        let quota = d.stats(&cgroup::CPU_QUOTA_CORES, at);
        let own_quota = quota.n > 0;
        let usage_of_quota = d.stats(&cgroup::CPU_USAGE_OF_QUOTA_PCT, at);
        let usage = d.stats(&cgroup::CPU_USAGE_PCT, at);
        // Processes of this cgroup: the busiest is the culprit, their threads the fan-out.
        let members: Vec<(u32, String)> = d
            .procs
            .iter()
            .filter(|(_, p)| p.cgroup.as_deref() == Some(cg.as_str()))
            .map(|(pid, p)| (*pid, p.comm.clone()))
            .collect();
        let threads: f64 = members
            .iter()
            .map(|(pid, comm)| {
                d.stats(&process::PROC_THREADS, &[&pid.to_string(), comm])
                    .last
            })
            .sum();
        let busiest = top_procs(d, &process::PROC_CPU_PCT)
            .into_iter()
            .find(|p| members.iter().any(|(m, _)| *m == p.pid));
        let mut culprit = cgroup_culprit(d, cg);
        if let Some(p) = &busiest {
            culprit.pid = Some(p.pid);
            culprit.comm = Some(p.comm.clone());
        }
        let quota_cores = quota.last;
        let kind = Kind::of(
            own_quota.then_some(quota_cores),
            (usage_of_quota.n > 0).then_some(usage_of_quota.mean),
            threads,
        );
        let mut f = finding(
            &RULE,
            d,
            format!(
                "CFS throttling of {cg}: throttled in {mean:.0}% of periods ({}){}",
                kind.describe(),
                busiest
                    .as_ref()
                    .map(|p| format!(", busiest process {} ({})", p.comm, p.pid))
                    .unwrap_or_default()
            ),
            confidence(*mean, 20.0, 80.0).max(if *max >= 50.0 { 0.5 } else { 0.0 }),
            culprit,
        );
        f.cite(
            d,
            &cgroup::CPU_THROTTLED_PCT,
            at,
            Take::Mean,
            format!("periods throttled (max {max:.0}%)"),
        );
        if own_quota {
            f.cite(
                d,
                &cgroup::CPU_QUOTA_CORES,
                at,
                Take::Last,
                "the CFS quota, in cores",
            );
        }
        if usage_of_quota.n > 0 {
            f.cite(
                d,
                &cgroup::CPU_USAGE_OF_QUOTA_PCT,
                at,
                Take::Mean,
                "CPU used, % of the quota",
            );
        }
        if usage.n > 0 {
            f.cite(
                d,
                &cgroup::CPU_USAGE_PCT,
                at,
                Take::Max,
                "CPU used, % of one core",
            );
        }
        f.cite(
            d,
            &cgroup::CPU_THROTTLED_MS_PER_S,
            at,
            Take::Mean,
            "time its threads spent throttled",
        );
        if threads > 0.0 {
            f.evidence.push(fact(
                format!("threads in {cg}"),
                threads,
                Unit::Count,
                "threads of the cgroup's processes",
            ));
        }
        f.moved_first = moved_first(
            d,
            &[
                (d.get(&cgroup::CPU_USAGE_PCT, at), 1.0),
                (d.get(&cgroup::CPU_THROTTLED_PCT, at), 20.0),
            ],
        );
        let peak_cores = usage.max / 100.0;
        if own_quota && usage.n == 0 {
            // No usage series (a v1 cpu group without a cpuacct group of the same path): the
            // peak is unknown, and a remedy computed from it would read as "peak 0".
            f.remediation.push(format!(
                "raise the quota from {quota_cores:.2} cores, e.g. to {:.2} (1.5x; its CPU usage is unknown: no cpuacct group at {cg}, so the peak cannot size it), v1: echo {} > cpu.cfs_quota_us (period 100000), then watch throttled_pct",
                quota_cores * 1.5,
                (quota_cores * 1.5 * 100_000.0).round()
            ));
        } else if own_quota {
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
        let kernel = d.kernel_version();
        if kernel.is_some_and(|v| v >= KernelVersion::new(5, 14, 0)) {
            f.remediation.push(
                "allow bursts: cpu.cfs_burst_us (v1) / cpu.max.burst (v2) up to the quota, so short peaks use what idle periods left".into(),
            );
        }
        if kind == Kind::ManyThreads {
            f.remediation.push(format!(
                "fewer runnable threads ({threads:.0} share {quota_cores:.2} cores): size worker pools to the quota (e.g. GOMAXPROCS, -XX:ActiveProcessorCount)"
            ));
        }
        f.remediation.push(
            "or drop the CPU limit and keep the request (Kubernetes: requests without limits)"
                .into(),
        );
        if kernel.is_some_and(|v| {
            (KernelVersion::new(4, 18, 0)..KernelVersion::new(5, 4, 0)).contains(&v)
        }) {
            f.notes.push(format!(
                "kernel {} is in the window of 512ac999d275 (4.18) without de53fd7aedb1 (5.4): per-CPU slices expire unused and throttle cgroups below their quota, unless your vendor backported the fix",
                d.kernel
            ));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Two baseline samples, then `n` in the window, of cgroup `/app` throttled in 90% of
    /// periods, with `quota` cores, using `usage_of_quota` % of it, and one process of
    /// `threads` threads.
    fn data(quota: Option<f64>, usage_of_quota: f64, threads: f64) -> Data {
        let n = 8u32;
        let mut d = Data::seconds(n as usize, 2);
        d.kernel = "6.1.0-13-amd64".into();
        d.procs.insert(
            7,
            crate::data::Proc {
                comm: "worker".into(),
                cgroup: Some("/app".into()),
                ..Default::default()
            },
        );
        for i in 0..n {
            let (thr, use_pct) = if i >= 2 {
                (90.0, usage_of_quota)
            } else {
                (0.0, 5.0)
            };
            d.push(&cgroup::CPU_THROTTLED_PCT, &["/app"], i, thr);
            d.push(&cgroup::CPU_THROTTLED_MS_PER_S, &["/app"], i, thr * 5.0);
            if let Some(q) = quota {
                d.push(&cgroup::CPU_QUOTA_CORES, &["/app"], i, q);
                d.push(&cgroup::CPU_USAGE_OF_QUOTA_PCT, &["/app"], i, use_pct);
                d.push(&cgroup::CPU_USAGE_PCT, &["/app"], i, use_pct * q);
            }
            d.push(&process::PROC_CPU_PCT, &["7", "worker"], i, 20.0);
            d.push(&process::PROC_THREADS, &["7", "worker"], i, threads);
        }
        d
    }

    #[test]
    fn unknown_usage_is_not_a_peak_of_zero() {
        // A v1 cpu group with a quota and no cpuacct group: usage series absent.
        let mut d = data(None, 0.0, 4.0);
        for i in 0..8 {
            d.push(&cgroup::CPU_QUOTA_CORES, &["/app"], i, 0.2);
        }
        let f = run(&d);
        let r = f[0].remediation.join("\n");
        assert!(!r.contains("peak 0"), "{r}");
        assert!(r.contains("usage is unknown"), "{r}");
        assert!(r.contains("0.30"), "{r}");
    }

    #[test]
    fn kinds_come_from_quota_usage_and_threads() {
        assert_eq!(Kind::of(None, Some(10.0), 50.0), Kind::Ancestor);
        assert_eq!(Kind::of(Some(0.5), Some(30.0), 50.0), Kind::BelowQuota);
        assert_eq!(Kind::of(Some(0.5), Some(95.0), 50.0), Kind::ManyThreads);
        assert_eq!(Kind::of(Some(0.5), None, 3.0), Kind::AboveQuota);
        assert_eq!(Kind::of(Some(2.0), Some(99.0), 8.0), Kind::AboveQuota);
    }

    #[test]
    fn each_kind_reaches_the_title_and_its_remediation() {
        let f = &run(&data(Some(0.5), 98.0, 40.0))[0];
        assert!(
            f.title.contains(Kind::ManyThreads.describe()),
            "{}",
            f.title
        );
        assert!(f
            .remediation
            .iter()
            .any(|r| r.contains("fewer runnable threads (40 share 0.50 cores)")));
        assert_eq!(f.culprit.comm.as_deref(), Some("worker"));
        assert_eq!(f.culprit.cgroup.as_deref(), Some("/app"));
        let e = f
            .evidence
            .iter()
            .find(|e| e.signal == "cgroup./app.cpu.quota_cores")
            .unwrap();
        assert_eq!((e.value, e.unit.as_str()), (0.5, "cores"));

        let f = &run(&data(Some(2.0), 30.0, 2.0))[0];
        assert!(f.title.contains(Kind::BelowQuota.describe()), "{}", f.title);
        assert!(!f
            .remediation
            .iter()
            .any(|r| r.contains("fewer runnable threads")));
        assert!(
            f.remediation.iter().any(|r| r.contains("allow bursts")),
            "6.1 has cpu.cfs_burst_us"
        );

        let f = &run(&data(Some(2.0), 99.0, 2.0))[0];
        assert!(f.title.contains(Kind::AboveQuota.describe()), "{}", f.title);

        let f = &run(&data(None, 0.0, 2.0))[0];
        assert!(f.title.contains(Kind::Ancestor.describe()), "{}", f.title);
        assert!(!f.remediation.iter().any(|r| r.contains("raise the quota")));
    }
}
