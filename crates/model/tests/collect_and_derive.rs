//! Collection from recorded fixture trees and derivation of metrics from pairs of samples.

use jitterscope_model::collector::Notes;
use jitterscope_model::derive::evaluate;
use jitterscope_model::glob::Pattern;
use jitterscope_model::metrics::all;
use jitterscope_model::sample::{HostInfo, Sample};
use jitterscope_model::sources::collectors;
use jitterscope_model::sources::CollectConfig;
use jitterscope_sources::Root;

const FX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

fn collect(root: &str, mono_ns: u64) -> (Sample, Vec<String>) {
    let root = Root::new(format!("{FX}/{root}"));
    let mut set = collectors(&root, &CollectConfig::default());
    let mut notes = Notes::default();
    let host = HostInfo {
        user_hz: 100,
        page_size_bytes: 4096,
        boot_id: "b".into(),
        ..Default::default()
    };
    let mut s = Sample::new(1_795_348_800_000_000_000, mono_ns, 1_000_000_000, host);
    set.collect(&mut s, &mut notes);
    (s, notes.drain())
}

fn value(vals: &[jitterscope_model::derive::SeriesValue], series: &str) -> Option<Option<f64>> {
    vals.iter().find(|v| v.series == series).map(|v| v.value)
}

#[test]
fn captured_host_tree_fills_every_part() {
    let (s, notes) = collect("host", 1);
    assert!(s.stat.as_ref().unwrap().cpus.len() == 2);
    for (name, present) in [
        ("loadavg", s.loadavg.is_some()),
        ("vmstat", s.vmstat.is_some()),
        ("meminfo", s.meminfo.is_some()),
        ("zoneinfo", s.zoneinfo.is_some()),
        ("buddyinfo", s.buddyinfo.is_some()),
        ("slabinfo", s.slabinfo.is_some()),
        ("dentry", s.dentry.is_some()),
        ("interrupts", s.interrupts.is_some()),
        ("softirqs", s.softirqs.is_some()),
        ("diskstats", s.diskstats.is_some()),
        ("netdev", s.netdev.is_some()),
        ("psi cpu", s.pressure.cpu.is_some()),
        ("psi memory", s.pressure.memory.is_some()),
    ] {
        assert!(present, "{name} missing; notes: {notes:?}");
    }
    // This kernel has nr_negative (6.18) and no /proc/pressure/irq: said once, not an error.
    assert!(s.dentry.as_ref().unwrap().nr_negative.is_some());
    assert!(s.pressure.irq.is_none());
    assert!(
        notes
            .iter()
            .any(|n| n.contains("pressure.irq") && n.contains("does not exist")),
        "{notes:?}"
    );
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    let cg = s.cgroups.as_ref().unwrap();
    let fx = cg
        .iter()
        .find(|c| c.path == "/jitterscope-fixture")
        .expect("fixture cgroup");
    assert_eq!(fx.cpu.as_ref().unwrap().quota_us, Some(20_000));
    let procs = s.processes.as_ref().unwrap();
    assert!(procs.iter().any(|p| p.stat.pid == 1));
    // Every collector timed itself.
    assert!(s.collector_ns.iter().any(|(n, _)| n == "processes"));
}

#[test]
fn edge_roots_degrade_to_missing_parts_with_one_note_each() {
    // v2-only Kubernetes node: cgroups present, no /proc files at all in this tree.
    let (s, notes) = collect("edge/cgroup-v2-only", 1);
    let cg = s.cgroups.as_ref().expect("cgroups from a v2-only tree");
    assert!(cg.iter().any(|c| c.path.contains("kubepods-burstable-pod")
        && c.cpu.as_ref().is_some_and(|c| c.quota_us.is_some())));
    assert!(s.stat.is_none() && s.pressure.cpu.is_none());
    assert!(
        notes.iter().any(|n| n.starts_with("stat: not collected")),
        "{notes:?}"
    );
    // v1-only Docker host: cgroups without pressure, said once.
    let (s, notes) = collect("edge/cgroup-v1-only", 1);
    assert!(s
        .cgroups
        .as_ref()
        .unwrap()
        .iter()
        .any(|c| c.path.starts_with("/docker/")));
    assert!(
        notes.iter().any(|n| n.contains("cgroup v1 only")),
        "{notes:?}"
    );
    // Pre-5.0 kernel: the dentry-state dummy field is not reported as a negative dentry count.
    let (s, _) = collect("edge/dentry-4.19", 1);
    assert_eq!(s.dentry.as_ref().unwrap().nr_negative, None);
    let vals = evaluate(all(), &s, None, &[Pattern::new("dentry.*")]);
    assert!(value(&vals, "dentry.nr_dentry").is_some());
    assert!(value(&vals, "dentry.nr_negative").is_none());
}

/// Two samples of the captured tree one second apart, with the fixture cgroup's counters moved.
fn pair(throttled: u64, periods: u64) -> (Sample, Sample) {
    let (prev, _) = collect("host", 1_000_000_000);
    let mut cur = prev.clone();
    cur.mono_ns += 1_000_000_000;
    cur.ts_ns += 1_000_000_000;
    let c = cur
        .cgroups
        .as_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c.path == "/jitterscope-fixture")
        .unwrap();
    let cpu = c.cpu.as_mut().unwrap();
    cpu.nr_throttled = Some(cpu.nr_throttled.unwrap() + throttled);
    cpu.nr_periods = Some(cpu.nr_periods.unwrap() + periods);
    cpu.usage_ns = Some(cpu.usage_ns.unwrap() + 200_000_000);
    (prev, cur)
}

#[test]
fn throttled_pct_is_delta_throttled_over_delta_periods() {
    let (prev, cur) = pair(8, 10);
    let sel = [Pattern::new("cgroup./jitterscope-fixture.cpu.*")];
    let vals = evaluate(all(), &cur, Some(&prev), &sel);
    assert_eq!(
        value(&vals, "cgroup./jitterscope-fixture.cpu.throttled_pct"),
        Some(Some(80.0))
    );
    // 200 ms of CPU in 1 s = 20% of one CPU = 100% of a 0.2-CPU quota.
    let usage = value(&vals, "cgroup./jitterscope-fixture.cpu.usage_pct")
        .unwrap()
        .unwrap();
    assert!((usage - 20.0).abs() < 1e-9, "{usage}");
    let of_quota = value(&vals, "cgroup./jitterscope-fixture.cpu.usage_of_quota_pct")
        .unwrap()
        .unwrap();
    assert!((of_quota - 100.0).abs() < 1e-9, "{of_quota}");
    assert_eq!(
        value(&vals, "cgroup./jitterscope-fixture.cpu.quota_cores"),
        Some(Some(0.2))
    );
    // No periods elapsed: no throttled percentage at all (not 0, not unknown).
    let (prev, cur) = pair(0, 0);
    let vals = evaluate(all(), &cur, Some(&prev), &sel);
    assert_eq!(
        value(&vals, "cgroup./jitterscope-fixture.cpu.throttled_pct"),
        None
    );
}

#[test]
fn counter_going_backwards_is_unknown_not_a_made_up_rate() {
    let (prev, mut cur) = pair(1, 1);
    let c = cur
        .cgroups
        .as_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c.path == "/jitterscope-fixture")
        .unwrap();
    c.cpu.as_mut().unwrap().usage_ns = Some(0);
    let vals = evaluate(
        all(),
        &cur,
        Some(&prev),
        &[Pattern::new("cgroup./jitterscope-fixture.cpu.usage_pct")],
    );
    assert_eq!(
        value(&vals, "cgroup./jitterscope-fixture.cpu.usage_pct"),
        Some(None)
    );
    // A vmstat counter reset likewise.
    let mut cur2 = cur.clone();
    for (k, v) in cur2.vmstat.as_mut().unwrap().counters.iter_mut() {
        if k == "pgfault" {
            *v = 0;
        }
    }
    let vals = evaluate(
        all(),
        &cur2,
        Some(&prev),
        &[Pattern::new("vmstat.pgfault_per_s")],
    );
    assert_eq!(value(&vals, "vmstat.pgfault_per_s"), Some(None));
}

/// io.stat rates per cgroup from the sums over devices, on the v2-only node (its files follow
/// the documented format); half a second apart, so they are per second, not per interval.
#[test]
fn cgroup_io_rates_from_io_stat() {
    let (prev, _) = collect("edge/cgroup-v2-only", 1_000_000_000);
    let mut cur = prev.clone();
    cur.mono_ns += 500_000_000;
    let pod = "kubepods-burstable-pod3b1f6c2e_8a4d_4f0e_9c5b_7d2a1e6f4c38.slice";
    let path = |c: &jitterscope_model::sample::Cgroup| c.path.ends_with(pod);
    let io = cur
        .cgroups
        .as_mut()
        .unwrap()
        .iter_mut()
        .find(|c| path(c))
        .and_then(|c| c.io.as_mut())
        .expect("the pod's io.stat");
    io.read_bytes += 4 << 20;
    io.write_bytes += 1 << 20;
    io.read_ios += 50;
    io.write_ios += 8;
    // (`*` spans dots: `cgroup.*.io.*` would take `pressure.io.some_pct` too.)
    let vals = evaluate(
        all(),
        &cur,
        Some(&prev),
        &[Pattern::new("cgroup.*.io.*_per_s")],
    );
    let got = |m: &str| {
        vals.iter()
            .find(|v| v.series.contains(pod) && v.series.ends_with(m))
            .and_then(|v| v.value)
    };
    assert_eq!(got(".io.read_bytes_per_s"), Some(8.0 * 1048576.0));
    assert_eq!(got(".io.write_bytes_per_s"), Some(2.0 * 1048576.0));
    assert_eq!(got(".io.reads_per_s"), Some(100.0));
    assert_eq!(got(".io.writes_per_s"), Some(16.0));
    // Unmoved cgroups with io.stat read 0; nginx.service (no io below system.slice) has none.
    assert_eq!(
        value(&vals, "cgroup./system.slice.io.read_bytes_per_s"),
        Some(Some(0.0))
    );
    assert!(vals.iter().all(|v| !v.series.contains("nginx")));
    // A device gone (sums going back) is an unknown interval, not a negative rate.
    let mut gone = prev.clone();
    gone.mono_ns += 1_000_000_000;
    for c in gone.cgroups.as_mut().unwrap() {
        if c.path == "/system.slice" {
            c.io = Some(jitterscope_sources::cgroup::IoStats::default());
        }
    }
    let vals = evaluate(
        all(),
        &gone,
        Some(&prev),
        &[Pattern::new("cgroup./system.slice.io.*")],
    );
    assert_eq!(vals.len(), 4);
    assert!(vals.iter().all(|v| v.value.is_none()), "{vals:?}");
}

#[test]
fn reused_pid_is_a_new_process_without_rates() {
    let (prev, mut cur) = pair(0, 0);
    let p = cur
        .processes
        .as_mut()
        .unwrap()
        .iter_mut()
        .find(|p| p.stat.pid == 1)
        .unwrap();
    p.stat.starttime_ticks += 1;
    p.stat.utime_ticks = 0;
    let vals = evaluate(all(), &cur, Some(&prev), &[Pattern::new("proc.1.*")]);
    assert!(
        vals.iter().all(|v| !v.series.ends_with("cpu_pct")),
        "rate across pid reuse"
    );
    assert!(vals.iter().any(|v| v.series.ends_with("rss_bytes")));
}

#[test]
fn no_rates_across_reboots_or_long_gaps() {
    let (prev, mut cur) = pair(5, 10);
    cur.host.boot_id = "other".into();
    let vals = evaluate(
        all(),
        &cur,
        Some(&prev),
        &[Pattern::new("cgroup.*.cpu.throttled_pct")],
    );
    assert!(vals.is_empty());
    let (prev, mut cur) = pair(5, 10);
    cur.mono_ns += 3_600_000_000_000;
    let vals = evaluate(
        all(),
        &cur,
        Some(&prev),
        &[Pattern::new("cgroup.*.cpu.throttled_pct")],
    );
    assert!(vals.is_empty());
}

#[test]
fn host_cpu_shares_sum_to_100() {
    let (prev, mut cur) = pair(0, 0);
    let st = cur.stat.as_mut().unwrap();
    st.total.user_ticks += 30;
    st.total.system_ticks += 50;
    st.total.idle_ticks += 120;
    let vals = evaluate(all(), &cur, Some(&prev), &[Pattern::new("cpu.*_pct")]);
    assert_eq!(value(&vals, "cpu.usr_pct"), Some(Some(15.0)));
    assert_eq!(value(&vals, "cpu.sys_pct"), Some(Some(25.0)));
    let sum: f64 = [
        "usr", "nice", "sys", "irq", "softirq", "iowait", "steal", "idle",
    ]
    .iter()
    .filter_map(|f| value(&vals, &format!("cpu.{f}_pct")).flatten())
    .sum();
    assert!((sum - 100.0).abs() < 1e-9, "{sum}");
}

#[test]
fn every_metric_evaluates_on_real_data_without_panicking() {
    let (prev, _) = collect("host", 1_000_000_000);
    let (mut cur, _) = collect("host", 2_000_000_000);
    cur.ts_ns += 1_000_000_000;
    let vals = evaluate(all(), &cur, Some(&prev), &[]);
    // Identical counters: rates are 0 (known), gauges present; CPU shares are absent because no
    // tick elapsed (0 of 0 is not a percentage).
    assert!(value(&vals, "cpu.sys_pct").is_none());
    for name in [
        "sched.ctxt_per_s",
        "irq.tlb_per_s",
        "mem.free_bytes",
        "dentry.nr_negative",
        "procs.count",
    ] {
        assert!(value(&vals, name).flatten().is_some(), "{name}");
    }
    assert!(vals.iter().all(|v| v.value.is_none_or(f64::is_finite)));
}

#[test]
fn slow_sources_are_collected_at_their_own_period() {
    let root = Root::new(format!("{FX}/host"));
    let cfg = CollectConfig {
        slabinfo_period: std::time::Duration::from_secs(5),
        ..CollectConfig::default()
    };
    let mut set = collectors(&root, &cfg);
    let mut notes = Notes::default();
    let mut with_slab = Vec::new();
    for i in 0..12u64 {
        // Wake-ups a little early or late must not shift the cadence.
        let jitter = if i % 2 == 0 { 3_000_000 } else { 0 };
        let mut s = Sample::new(
            0,
            10_000_000_000 + i * 1_000_000_000 - jitter,
            1_000_000_000,
            HostInfo::default(),
        );
        set.collect(&mut s, &mut notes);
        assert!(s.stat.is_some());
        if s.slabinfo.is_some() {
            with_slab.push(i);
        }
    }
    assert_eq!(with_slab, vec![0, 5, 10]);
}

#[test]
fn each_metric_reads_only_the_parts_it_declares() {
    use jitterscope_model::codec::{decode_parts, encode};
    let (mut prev, _) = collect("host", 1_000_000_000);
    let (_, mut cur) = pair(3, 10);
    // Stack slices recorded on a real host (scripts/capture-profile-fixtures.sh).
    let slices: Vec<jitterscope_model::profile::Profile> = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../tests/fixtures/profile/slices.json"),
        )
        .unwrap(),
    )
    .unwrap();
    prev.profile = Some(slices[0].clone());
    cur.profile = Some(slices[1].clone());
    let (pb, cb) = (encode(&prev).unwrap(), encode(&cur).unwrap());
    assert_eq!(
        jitterscope_model::codec::decode(&cb).unwrap(),
        cur,
        "round trip"
    );
    for &d in all() {
        let full = evaluate(&[d], &cur, Some(&prev), &[]);
        let (p2, c2) = (
            decode_parts(&pb, d.parts()).unwrap(),
            decode_parts(&cb, d.parts()).unwrap(),
        );
        let part = evaluate(&[d], &c2, Some(&p2), &[]);
        let key = |v: &[jitterscope_model::derive::SeriesValue]| {
            v.iter()
                .map(|s| (s.series.clone(), s.value.map(f64::to_bits)))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            key(&full),
            key(&part),
            "{} needs more than {:?}",
            d.name,
            d.parts()
        );
    }
    // And the projection really leaves the heavy parts out.
    let s = decode_parts(&cb, jitterscope_model::codec::Parts::NONE).unwrap();
    assert!(s.processes.is_none() && s.cgroups.is_none() && s.slabinfo.is_none());
    assert!(s.profile.is_none());
    assert!(s.stat.is_some() && s.process_scan.is_some());
}
