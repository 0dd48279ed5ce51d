//! The one-line-per-second status of `record --status`: the four signals the seed cases needed
//! first (sys vs usr, reclaim scanning, TLB shootdowns, the worst-throttled cgroup).

use jitterscope_model::derive::evaluate;
use jitterscope_model::metrics::{cgroup, cpu, irq, mem, tracer};
use jitterscope_model::registry::MetricDef;
use jitterscope_model::Sample;

static METRICS: [&MetricDef; 9] = [
    &cpu::USR_PCT,
    &cpu::SYS_PCT,
    &mem::RECLAIM_PGSCAN_KSWAPD_PER_S,
    &mem::RECLAIM_PGSCAN_DIRECT_PER_S,
    &irq::TLB_PER_S,
    &cgroup::CPU_THROTTLED_PCT,
    &tracer::RECLAIM_STALLS_PER_S,
    &tracer::RUNQLAT_P99_USEC,
    &tracer::LOOKUPS_ENOENT_PER_S,
];

fn fmt(v: Option<f64>, unit: &str) -> String {
    match v {
        Some(v) if v >= 100.0 || unit != "%" => format!("{v:.0}{unit}"),
        Some(v) => format!("{v:.1}{unit}"),
        None => "-".to_string(),
    }
}

/// Formats the status line of `cur` (rates need `prev`; without it they print as `-`).
pub fn line(prev: Option<&Sample>, cur: &Sample) -> String {
    let vals = evaluate(&METRICS, cur, prev, &[]);
    let get = |def: &MetricDef| vals.iter().find(|v| v.def == def).and_then(|v| v.value);
    let worst = vals
        .iter()
        .filter(|v| v.def == &cgroup::CPU_THROTTLED_PCT)
        .filter_map(|v| Some((v.value?, v.labels.first()?.as_str())))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let scan = match (
        get(&mem::RECLAIM_PGSCAN_KSWAPD_PER_S),
        get(&mem::RECLAIM_PGSCAN_DIRECT_PER_S),
    ) {
        (Some(k), Some(d)) => format!("{:.0}/s (kswapd {k:.0} direct {d:.0})", k + d),
        _ => "-".into(),
    };
    let throttled = match worst {
        Some((v, path)) => format!("{} {path}", fmt(Some(v), "%")),
        None => "-".into(),
    };
    // Only when the tracers ran: reclaim stalls, run-queue p99 and failed look-ups.
    let traced = if cur.tracers.is_some() {
        format!(
            " | stalls {} | runq p99 {} | enoent {}",
            fmt(get(&tracer::RECLAIM_STALLS_PER_S), "/s"),
            match get(&tracer::RUNQLAT_P99_USEC) {
                Some(us) => format!("{:.1}ms", us / 1000.0),
                None => "-".into(),
            },
            fmt(get(&tracer::LOOKUPS_ENOENT_PER_S), "/s"),
        )
    } else {
        String::new()
    };
    let lag = cur
        .recorder
        .as_ref()
        .map(|r| format!(" | lag {:.1}ms", r.lateness_ns as f64 / 1e6))
        .unwrap_or_default();
    format!(
        "{} usr {} sys {} | scan {} | tlb {} | worst throttled {}{}{}",
        jitterscope_model::time::rfc3339(cur.ts_ns),
        fmt(get(&cpu::USR_PCT), "%"),
        fmt(get(&cpu::SYS_PCT), "%"),
        scan,
        fmt(get(&irq::TLB_PER_S), "/s"),
        throttled,
        traced,
        lag
    )
}

#[cfg(test)]
mod tests {
    use jitterscope_model::collector::Notes;
    use jitterscope_model::sample::HostInfo;
    use jitterscope_model::sources::collectors;
    use jitterscope_model::sources::CollectConfig;
    use jitterscope_model::Sample;
    use jitterscope_sources::Root;

    #[test]
    fn names_cpu_reclaim_tlb_and_the_worst_throttled_cgroup() {
        let root = Root::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/host"
        ));
        let mut set = collectors(&root, &CollectConfig::default());
        let host = HostInfo {
            user_hz: 100,
            boot_id: "b".into(),
            ..Default::default()
        };
        let mut prev = Sample::new(0, 1_000_000_000, 1_000_000_000, host);
        set.collect(&mut prev, &mut Notes::default());
        let mut cur = prev.clone();
        cur.mono_ns += 1_000_000_000;
        let st = cur.stat.as_mut().unwrap();
        st.total.user_ticks += 30;
        st.total.system_ticks += 50;
        st.total.idle_ticks += 120;
        for (k, v) in cur.vmstat.as_mut().unwrap().counters.iter_mut() {
            if k == "pgscan_direct" {
                *v += 1000;
            }
        }
        let tlb = cur
            .interrupts
            .as_mut()
            .unwrap()
            .irqs
            .iter_mut()
            .find(|i| i.name == "TLB")
            .unwrap();
        tlb.total += 42;
        let cg = cur
            .cgroups
            .as_mut()
            .unwrap()
            .iter_mut()
            .find(|c| c.path == "/jitterscope-fixture")
            .unwrap();
        let cpu = cg.cpu.as_mut().unwrap();
        cpu.nr_periods = Some(cpu.nr_periods.unwrap() + 10);
        cpu.nr_throttled = Some(cpu.nr_throttled.unwrap() + 8);
        let line = super::line(Some(&prev), &cur);
        assert!(line.contains("usr 15.0% sys 25.0%"), "{line}");
        assert!(
            line.contains("scan 1000/s (kswapd 0 direct 1000)"),
            "{line}"
        );
        assert!(line.contains("tlb 42/s"), "{line}");
        assert!(
            line.contains("worst throttled 80.0% /jitterscope-fixture"),
            "{line}"
        );
        assert!(
            !line.contains("runq"),
            "no tracer part without tracers: {line}"
        );
        // Without a previous sample, rates are unknown, not zero.
        assert!(super::line(None, &cur).contains("usr - sys -"));

        // With tracers: stalls and failed look-ups per second, run-queue p99.
        use jitterscope_model::tracers::*;
        cur.tracers = Some(Tracers {
            span_ns: 1_000_000_000,
            reclaim: Some(Reclaim {
                procs: vec![ReclaimStat {
                    pid: 9,
                    direct_stalls: 12,
                    ..Default::default()
                }],
                ..Default::default()
            }),
            runqlat: Some(Runqlat {
                host: Hist {
                    slots: vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5],
                    count: 5,
                    sum_ns: 1,
                    max_ns: 6_500_000,
                },
                ..Default::default()
            }),
            ..Default::default()
        });
        let line = super::line(Some(&prev), &cur);
        assert!(
            line.contains("| stalls 12/s | runq p99 6.5ms | enoent -"),
            "{line}"
        );
    }
}
