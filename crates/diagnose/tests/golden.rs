//! Golden tests: each lab scenario's recording (tests/fixtures/diagnose/<scenario>/, captured
//! by scripts/capture-diagnose-fixtures.sh) diagnosed over the scenario's window must name the
//! scenario's mechanism first, with the right culprit and remediation; the controls must get
//! no mechanism finding.

use std::path::{Path, PathBuf};

use jitterscope_diagnose::{diagnose, Finding, Options, Report};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/diagnose")
}

/// Diagnoses a scenario's recording over the window `lab check` used.
fn run(scenario: &str) -> Report {
    let dir = fixtures();
    let check: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(format!("{scenario}.json"))).unwrap(),
    )
    .unwrap();
    let w = &check["windows"];
    let (base_from, from, to) = (
        w["baseline"][0].as_i64().unwrap(),
        w["active"][0].as_i64().unwrap(),
        w["active"][1].as_i64().unwrap(),
    );
    let r = diagnose(
        &dir.join(scenario),
        from,
        to,
        Options {
            lookback_ns: from - base_from + 1_000_000_000,
        },
    )
    .unwrap();
    assert!(
        r.samples >= 5,
        "{scenario}: {} samples in the window",
        r.samples
    );
    assert!(
        r.baseline_samples >= 2,
        "{scenario}: {} baseline samples",
        r.baseline_samples
    );
    r
}

fn first<'a>(r: &'a Report, rule: &str) -> &'a Finding {
    let f = r
        .findings
        .first()
        .unwrap_or_else(|| panic!("no finding; expected {rule}"));
    assert_eq!(f.rule_id, rule, "first finding: {}", f.title);
    assert!(f.confidence >= 0.5 && f.confidence <= 1.0);
    // The advisory rule names a cost and a risk, not a mechanism.
    assert_eq!(f.mechanism, rule != "fs.failing-lookups");
    assert!(!f.evidence.is_empty() && !f.remediation.is_empty() && !f.references.is_empty());
    f
}

fn has(list: &[String], needle: &str) -> bool {
    list.iter().any(|s| s.contains(needle))
}

fn evidence<'a>(f: &'a Finding, signal: &str) -> &'a jitterscope_diagnose::Evidence {
    f.evidence
        .iter()
        .find(|e| {
            e.signal.contains(signal) || e.series.as_deref().is_some_and(|s| s.contains(signal))
        })
        .unwrap_or_else(|| panic!("no evidence {signal} in {:#?}", f.evidence))
}

#[test]
fn cfs_throttle() {
    let r = run("cfs-throttle");
    let f = first(&r, "cpu.cfs-throttling");
    assert_eq!(
        f.culprit.cgroup.as_deref(),
        Some("/jitterscope-lab/cfs-throttle")
    );
    assert_eq!(f.culprit.comm.as_deref(), Some("lab-fibtest"));
    assert!(evidence(f, "cpu.throttled_pct").value >= 50.0);
    assert!((evidence(f, "cpu.quota_cores").value - 0.2).abs() < 0.01);
    assert!(
        has(&f.remediation, "raise the quota from 0.20 to at least"),
        "{:?}",
        f.remediation
    );
    assert!(
        has(&f.remediation, "cpu.max.burst"),
        "6.x kernels have burst: {:?}",
        f.remediation
    );
}

#[test]
fn negative_dentry() {
    let r = run("negative-dentry");
    let f = first(&r, "memory.dcache-bloat");
    assert_eq!(f.culprit.comm.as_deref(), Some("lab-nss-probe"));
    assert!(evidence(f, "dentry.nr_negative").value >= 100_000.0);
    assert!(
        evidence(f, "lookups.pattern")
            .note
            .contains("_dbaccess.tmp"),
        "{:?}",
        f.evidence
    );
    assert!(has(
        &f.remediation,
        "stop lab-nss-probe probing unique non-existent names"
    ));
}

#[test]
fn shrinker_scale() {
    let r = run("shrinker-scale");
    let f = first(&r, "memory.shrinker-cost");
    assert!(f.title.contains("super_cache_scan"), "{}", f.title);
    assert!(evidence(f, "memory cgroups").value >= 200.0);
    assert!(evidence(f, "super_cache_scan.calls_per_s").value >= 200.0);
}

/// The same scenario on a host whose dentry cache held 1.5M entries (as after a big build: CI
/// met it in a fresh clone). The first drop_caches round frees them, 1.5M objects in about a
/// second, and must not hide the walk over every memcg, in which most calls free nothing.
#[test]
fn shrinker_scale_after_a_full_dentry_cache() {
    let r = run("shrinker-scale-full-dcache");
    let f = first(&r, "memory.shrinker-cost");
    assert!(f.title.contains("super_cache_scan"), "{}", f.title);
    assert!(evidence(f, "memory cgroups").value >= 200.0);
    assert!(evidence(f, "super_cache_scan.freed_per_s").value >= 1_000_000.0);
    let wasted = evidence(f, "super_cache_scan.zero_freed_per_s").value;
    let calls = evidence(f, "super_cache_scan.calls_per_s").value;
    assert!(
        wasted >= 0.5 * calls,
        "{wasted} of {calls} calls freed nothing"
    );
}

/// The same scenario recorded in the kernel matrix's 6.1 guest with cgroup v2 only
/// (tests/vm, kept by tests/vm/capture-fixtures.sh): there its rounds write memory.reclaim,
/// which the reclaim tracer sees as memcg reclaim stalls of the writer. They must not outrank
/// the shrinker cost they cause.
#[test]
fn shrinker_scale_memory_reclaim_on_6_1() {
    let r = run("shrinker-scale-6.1-v2");
    let f = first(&r, "memory.shrinker-cost");
    assert!(f.title.contains("super_cache_scan"), "{}", f.title);
    assert!(evidence(f, "memory cgroups").value >= 200.0);
    let reclaim = r
        .findings
        .iter()
        .find(|f| f.rule_id == "memory.direct-reclaim")
        .expect("the writer's memcg reclaim is still reported");
    assert!(
        reclaim.title.contains("far from any limit"),
        "{}",
        reclaim.title
    );
    assert!(reclaim.confidence <= 0.5);
}

#[test]
fn tlb_shootdown() {
    let r = run("tlb-shootdown");
    let f = first(&r, "cpu.tlb-shootdown");
    assert_eq!(f.culprit.comm.as_deref(), Some("lab-madvise"));
    assert_eq!(
        f.culprit.cgroup.as_deref(),
        Some("/jitterscope-lab/tlb-shootdown/storm")
    );
    let e = evidence(f, "irq.tlb_per_s");
    assert!(
        e.value >= 1000.0 && e.value >= 10.0 * e.baseline.unwrap_or(0.0).max(1.0),
        "{e:?}"
    );
    assert!(evidence(f, "madvise.proc.").value > 0.0);
    assert!(has(&f.remediation, "confine lab-madvise to fewer CPUs"));
}

#[test]
fn softirq_storm() {
    let r = run("softirq-storm");
    let f = first(&r, "cpu.softirq-storm");
    assert_eq!(f.culprit.comm.as_deref(), Some("lab-flood"));
    assert_eq!(
        f.culprit.cgroup.as_deref(),
        Some("/jitterscope-lab/softirq-storm")
    );
    assert!(f.title.contains("mostly NET_RX"), "{}", f.title);
    // The CPU's share is the signal; the host-wide share, half of it on two CPUs, is what a
    // host-wide view would have shown.
    let cpu = evidence(f, "softirq_pct");
    assert!(cpu.value >= 10.0, "{cpu:?}");
    let host = evidence(f, "cpu.softirq_pct");
    assert!(host.value < cpu.value, "{host:?} {cpu:?}");
    assert!(evidence(f, "softirq.NET_RX_per_s").value >= 10_000.0);
    assert!(has(&f.remediation, "RPS"));
}

/// The threads' own waits are the signal: they waited for writing (mmap, munmap), and with the
/// pages never touched there is no shootdown storm to chain them under.
#[test]
fn mmap_lock() {
    let r = run("mmap-lock");
    let f = first(&r, "memory.mmap-lock-contention");
    assert_eq!(f.culprit.comm.as_deref(), Some("lab-mapper"));
    assert_eq!(
        f.culprit.cgroup.as_deref(),
        Some("/jitterscope-lab/mmap-lock")
    );
    let share = evidence(f, "wait_pct");
    assert!(share.value >= 10.0, "{share:?}");
    assert!(evidence(f, "write_waits").value >= 1000.0);
    assert!(has(&f.remediation, "maps and unmaps from many threads"));
    assert!(
        !r.findings.iter().any(|f| f.rule_id == "cpu.tlb-shootdown"),
        "{:#?}",
        r.findings
    );
}

/// dirty-throttle recorded in the kernel matrix's 6.12 guest with cgroup v2 only (per-cgroup
/// writeback; kept by tests/vm/capture-fixtures.sh): the writer is named in its cgroup, with
/// the limit its dirty limits are a share of.
#[test]
fn dirty_throttle_on_6_12() {
    let r = run("dirty-throttle-6.12-v2");
    let f = first(&r, "io.dirty-throttling");
    assert_eq!(f.culprit.comm.as_deref(), Some("lab-writer"));
    assert_eq!(
        f.culprit.cgroup.as_deref(),
        Some("/jitterscope-lab/dirty-throttle")
    );
    assert!(f.title.contains("limited to 128 MiB"), "{}", f.title);
    let share = evidence(f, "paused_pct");
    assert!(share.value >= 10.0, "{share:?}");
    assert!(evidence(f, "pauses").value >= 20.0);
    assert!(has(&f.remediation, "128 MiB"));
    // The lab's own io.max holds the writeback back while the disk idles: that cap is the lead.
    assert!(has(
        &f.remediation,
        "io.max (wbps/wiops) on /jitterscope-lab/dirty-throttle"
    ));
}

/// memory-high recorded in the kernel matrix's 6.12 guest with cgroup v2 only (the host has
/// memory on v1; kept by tests/vm/capture-fixtures.sh). The lab's parent counts the child's
/// `high` events too (memory.events is hierarchical): the child whose memory.high it is must
/// be named, with its process, and its memcg reclaim stalls chained under it.
#[test]
fn memory_high_on_6_12() {
    let r = run("memory-high-6.12-v2");
    let f = first(&r, "memory.high-throttling");
    assert_eq!(
        f.culprit.cgroup.as_deref(),
        Some("/jitterscope-lab/memory-high")
    );
    assert_eq!(f.culprit.comm.as_deref(), Some("lab-overhigh"));
    assert!(evidence(f, "memory.events.high").value >= 10.0);
    assert!(has(
        &f.remediation,
        "raise memory.high of /jitterscope-lab/memory-high"
    ));
    let reclaim = r
        .findings
        .iter()
        .find(|x| x.rule_id == "memory.direct-reclaim")
        .expect("the over-high reclaim is reported");
    assert!(
        !reclaim.caused_by.is_empty(),
        "the over-high reclaim is a root of its own: {:#?}",
        r.findings
    );
}

/// swap-in recorded in the kernel matrix's 6.12 guest with a swap file (kept by
/// tests/vm/capture-fixtures.sh; the host has no swap). Every swap-in is a major fault too: the
/// page-cache rule must leave them to memory.swap-in, and the reclaim at the cgroup's limit is
/// the swap storm's cost, chained under it.
#[test]
fn swap_in_on_6_12() {
    let r = run("swap-in-6.12-v2");
    let f = first(&r, "memory.swap-in");
    assert_eq!(f.culprit.comm.as_deref(), Some("lab-swapper"));
    assert_eq!(
        f.culprit.cgroup.as_deref(),
        Some("/jitterscope-lab/swap-in")
    );
    assert!(
        f.title
            .contains("evicted by its memory cgroup /jitterscope-lab/swap-in at its limit"),
        "{}",
        f.title
    );
    assert!(evidence(f, "pswpin").value >= 1000.0);
    assert!(
        r.findings
            .iter()
            .all(|x| x.rule_id != "memory.pagecache-thrash"),
        "{:#?}",
        r.findings
    );
    let reclaim = r
        .findings
        .iter()
        .find(|x| x.rule_id == "memory.direct-reclaim")
        .expect("the reclaim at the limit is reported");
    assert!(!reclaim.caused_by.is_empty(), "{:#?}", r.findings);
}

#[test]
fn reclaim_storm() {
    let r = run("reclaim-storm");
    let f = first(&r, "memory.direct-reclaim");
    assert_eq!(f.culprit.comm.as_deref(), Some("lab-reclaim"));
    assert!(
        f.title
            .contains("memory-cgroup reclaim at the limit of /jitterscope-lab/reclaim-storm"),
        "{}",
        f.title
    );
    assert!(has(
        &f.remediation,
        "raise the memory limit of /jitterscope-lab/reclaim-storm"
    ));
    assert!(evidence(f, "reclaim.stalls_per_s").value >= 5.0);
}

/// Seed 5 inside a container: the thrash of the limited cgroup first, its culprit the reader
/// inside it (not the launcher in another cgroup that reaped it), the stalls chained under it.
#[test]
fn memcg_thrash() {
    let r = run("memcg-thrash");
    let f = first(&r, "memory.pagecache-thrash");
    assert_eq!(f.culprit.comm.as_deref(), Some("cat"), "{}", f.title);
    assert_eq!(
        f.culprit.cgroup.as_deref(),
        Some("/jitterscope-lab/memcg-thrash/limited")
    );
    assert!(f.title.contains("at its limit"), "{}", f.title);
    assert!(f.title.contains("lab-reread"), "{}", f.title);
    assert!(f.confidence >= 0.85);
    assert!(
        evidence(
            f,
            "cgroup./jitterscope-lab/memcg-thrash/limited.memory.refault_file_per_s"
        )
        .value
            >= 1000.0
    );
    assert!(has(&f.remediation, "have cat bypass the page cache"));
    let second = &r.findings[1];
    assert_eq!(second.rule_id, "memory.direct-reclaim");
    assert_eq!(f.causes[0].finding, 2);
    assert_eq!(second.caused_by[0].finding, 1);
}

/// Throttling in one cgroup and a thrash in another: two roots, each with its own culprit.
#[test]
fn two_incidents() {
    let r = run("two-incidents");
    let root = |rule: &str| {
        r.findings
            .iter()
            .find(|f| f.rule_id == rule)
            .unwrap_or_else(|| panic!("no {rule} in {:#?}", r.findings))
    };
    let cpu = root("cpu.cfs-throttling");
    let mem = root("memory.pagecache-thrash");
    assert!(cpu.caused_by.is_empty() && mem.caused_by.is_empty());
    assert_eq!(
        cpu.culprit.cgroup.as_deref(),
        Some("/jitterscope-lab/two-incidents/throttled")
    );
    assert_eq!(mem.culprit.comm.as_deref(), Some("cat"));
    assert_eq!(
        mem.culprit.cgroup.as_deref(),
        Some("/jitterscope-lab/two-incidents/memcg/limited")
    );
    // The stalls are the thrash's, not the throttling's.
    let stalls = root("memory.direct-reclaim");
    assert_eq!(stalls.caused_by.len(), 1);
    assert_eq!(stalls.caused_by[0].rule_id, "memory.pagecache-thrash");
}

#[test]
fn pagecache_thrash() {
    let r = run("pagecache-thrash");
    let f = first(&r, "memory.pagecache-thrash");
    assert_eq!(f.culprit.comm.as_deref(), Some("lab-stream"));
    assert!(f.title.contains("lab-workset"), "{}", f.title);
    assert!(evidence(f, "lab-workset.majflt_per_s").value >= 1000.0);
    // The thrash is the cgroup's, at its limit: the limit and the stream are what to change.
    assert!(f
        .title
        .contains("in memory cgroup /jitterscope-lab/pagecache-thrash at its limit"));
    assert!(has(&f.remediation, "lab-stream in a cgroup of its own"));
    assert!(has(&f.remediation, "have lab-stream bypass the page cache"));
    assert!(
        evidence(
            f,
            "cgroup./jitterscope-lab/pagecache-thrash.memory.refault_file_per_s"
        )
        .value
            >= 10_000.0
    );
    assert!(!f.moved_first.is_empty());
    // The reader is in a memory cgroup of its own and the root cpu cgroup (v1): the culprit
    // is named by the cgroup whose limit it filled.
    assert_eq!(
        f.culprit.cgroup.as_deref(),
        Some("/jitterscope-lab/pagecache-thrash")
    );
    // The memcg stalls are there too, as the thrash's consequence, right under it.
    let second = &r.findings[1];
    assert_eq!(second.rule_id, "memory.direct-reclaim");
    assert_eq!(f.causes[0].finding, 2);
    assert_eq!(second.caused_by[0].finding, 1);
    assert!(
        second.caused_by[0].reason.contains("lab-stream"),
        "{:?}",
        second.caused_by
    );
    // A window total is named as one, never under the rate's name.
    let read = evidence(f, "lab-stream.read_bytes");
    assert!(read.signal.ends_with(".read_bytes_total"), "{read:?}");
    assert_eq!((read.stat, read.unit.as_str()), ("total", "bytes"));
    // The lab's own process reaped the workers: their I/O is not credited to it as reads.
    assert!(
        !f.evidence
            .iter()
            .any(|e| e.signal.contains(".jitterscope.read_bytes")),
        "{:?}",
        f.evidence
    );
}

#[test]
fn oom_leak() {
    let r = run("oom-leak");
    let f = first(&r, "memory.leak");
    assert_eq!(f.culprit.comm.as_deref(), Some("lab-oom-leak"));
    assert_eq!(
        f.culprit.cgroup.as_deref(),
        Some("/jitterscope-lab/oom-leak")
    );
    assert!(
        f.title.contains(
            "then the OOM killer killed it at the limit of cgroup /jitterscope-lab/oom-leak"
        ),
        "{}",
        f.title
    );
    assert!(evidence(f, "lab-oom-leak.exited")
        .note
        .contains("OOM killer"));
    let oom = r
        .findings
        .iter()
        .find(|x| x.rule_id == "memory.oom-kill")
        .expect("an OOM-kill finding");
    assert_eq!(oom.culprit.comm.as_deref(), Some("lab-oom-leak"));
    assert!(oom
        .title
        .contains("at the memory limit of cgroup /jitterscope-lab/oom-leak"));
    assert!(evidence(oom, "memory.limit_bytes").value > 0.0);
    assert!(oom
        .caused_by
        .iter()
        .any(|l| l.rule_id == "memory.leak" && l.finding == 1));
    assert!(f.causes.iter().any(|l| l.rule_id == "memory.oom-kill"));
}

#[test]
fn worker_leak() {
    let r = run("worker-leak");
    let f = first(&r, "memory.leak");
    assert_eq!(f.culprit.comm.as_deref(), Some("lab-leak-worker"));
    assert_eq!(
        f.culprit.cgroup.as_deref(),
        Some("/jitterscope-lab/worker-leak")
    );
    // Both workers, each with its death as evidence.
    let leaks: Vec<&Finding> = r
        .findings
        .iter()
        .filter(|x| x.rule_id == "memory.leak")
        .collect();
    assert_eq!(
        leaks.len(),
        2,
        "{:?}",
        r.findings.iter().map(|f| &f.title).collect::<Vec<_>>()
    );
    for l in leaks {
        assert!(
            l.title.ends_with("then it was killed by SIGKILL (9)"),
            "{}",
            l.title
        );
        // The fit is on the samples while it ran: no zombie zero drags it.
        assert!(evidence(l, "rss_bytes").value > 16.0 * 1048576.0);
    }
}

/// Issue 18's precursor: certutil's failed look-ups, traced by the census while negative
/// dentries stayed put, named with NSS softokn and its fix.
#[test]
fn nss_probe() {
    let r = run("nss-probe");
    let f = first(&r, "fs.failing-lookups");
    assert_eq!(f.culprit.comm.as_deref(), Some("certutil"));
    assert_eq!(
        f.culprit.cgroup.as_deref(),
        Some("/jitterscope-lab/nss-probe")
    );
    assert!(f
        .culprit
        .library
        .as_deref()
        .is_some_and(|l| l.contains("libsoftokn3")));
    assert!(f.evidence[0].value >= 1000.0, "{:?}", f.evidence[0]);
    assert!(
        f.evidence[0].note.contains("by the census"),
        "{}",
        f.evidence[0].note
    );
    let patterns = &evidence(f, "lookups.pattern").note;
    assert!(
        patterns.contains("/dbTemp.*/.*_dOeSnotExist_.db"),
        "one pattern for every run's temporary directory: {patterns}"
    );
    assert!(f.remediation[0].contains("NSS_SDB_USE_CACHE=yes"));
    assert!(r
        .findings
        .iter()
        .all(|x| x.rule_id != "memory.dcache-bloat"));
}

/// Every report over every recording: evidence says what it is. A total is named as one and
/// has the summed unit of its rate; other statistics have their series' unit; percentages
/// are possible ones.
#[test]
fn evidence_is_physically_possible() {
    let all = jitterscope_model::metrics::all();
    for name in scenario_names() {
        let r = run(&name);
        for f in &r.findings {
            for e in &f.evidence {
                let ctx = format!("{name} {}: {e:?}", f.rule_id);
                assert!(e.value.is_finite(), "{ctx}");
                let Some(series) = &e.series else { continue };
                let (def, _) = jitterscope_model::registry::parse_series(all, series)
                    .unwrap_or_else(|| panic!("unknown series {ctx}"));
                match e.stat {
                    "total" => {
                        assert_ne!(def.unit.summed(), def.unit, "a total of a level: {ctx}");
                        assert_eq!(e.unit, def.unit.summed(), "{ctx}");
                        assert!(!e.signal.ends_with("_per_s"), "{ctx}");
                        assert!(e.over_s.is_some_and(|s| s > 0.0), "{ctx}");
                    }
                    "growth" => assert_eq!(e.unit, def.unit, "{ctx}"),
                    _ => {
                        assert_eq!(e.unit, def.unit, "{ctx}");
                        assert_eq!(&e.signal, series, "{ctx}");
                    }
                }
                if e.unit == jitterscope_model::registry::Unit::Percent && e.stat != "growth" {
                    // "% of one CPU" and "summed over threads" reach 100 x the CPUs at most.
                    let per_cpu =
                        def.help.contains("of one CPU") || def.help.contains("summed over threads");
                    let top = if per_cpu { 100.0 * 64.0 } else { 100.0 };
                    assert!((0.0..=top).contains(&e.value), "{ctx}");
                }
            }
        }
    }
}

/// No process reads from storage faster than the host's disks do in the same sample: the
/// reads of reaped children, which the kernel folds into the parent, are recorded apart.
#[test]
fn no_process_outreads_the_disks() {
    use jitterscope_model::metrics::{disk, process};
    use jitterscope_model::registry::Select;
    for name in scenario_names() {
        let d = jitterscope_diagnose::Data::load(
            &fixtures().join(&name),
            i64::MIN / 2,
            i64::MAX / 2,
            0,
            &[
                Select::all(&process::PROC_READ_BYTES_PER_S),
                Select::all(&disk::READ_BYTES_PER_S),
            ],
            false,
        )
        .unwrap();
        let mut disks = vec![0.0; d.ts.len()];
        for s in d.each(&disk::READ_BYTES_PER_S) {
            for &(i, v) in &s.points {
                disks[i as usize] += v;
            }
        }
        for s in d.each(&process::PROC_READ_BYTES_PER_S) {
            for &(i, v) in &s.points {
                // The process and the disks are read a few ms apart within a sample.
                let bound = disks[i as usize] * 1.25 + 16.0 * 1048576.0;
                assert!(
                    v <= bound,
                    "{name}: {} reads {v} B/s at sample {i}, the disks {}",
                    s.name(),
                    disks[i as usize]
                );
            }
        }
    }
}

fn scenario_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures())
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path();
            (p.extension()? == "json").then(|| p.file_stem()?.to_str().map(str::to_string))?
        })
        .collect();
    names.sort();
    names
}

#[test]
fn leaks() {
    for (s, comm) in [
        ("native-leak", "lab-native-leak"),
        ("python-leak", "lab-python-leak"),
    ] {
        let r = run(s);
        let f = first(&r, "memory.leak");
        assert_eq!(f.culprit.comm.as_deref(), Some(comm));
        assert!(f.title.contains("grows steadily"), "{}", f.title);
        assert!(
            has(&f.remediation, "Python: compare"),
            "{:?}",
            f.remediation
        );
    }
}

#[test]
fn controls_get_no_mechanism() {
    for s in ["cpu-saturation", "idle"] {
        let r = run(s);
        let m: Vec<&str> = r
            .findings
            .iter()
            .filter(|f| f.mechanism)
            .map(|f| f.rule_id)
            .collect();
        assert!(m.is_empty(), "{s}: {m:?}");
    }
    let r = run("cpu-saturation");
    let f = r.findings.first().expect("saturation");
    assert_eq!(f.rule_id, "cpu.saturation");
    assert_eq!(f.culprit.comm.as_deref(), Some("lab-busy"));
}

#[test]
fn json_schema_fields() {
    let r = run("cfs-throttle");
    let v = serde_json::to_value(&r).unwrap();
    for k in ["from", "to"] {
        assert!(v["window"][k].is_string());
    }
    let f = &v["findings"][0];
    for k in [
        "rule_id",
        "title",
        "confidence",
        "window",
        "culprit",
        "evidence",
        "moved_first",
        "remediation",
    ] {
        assert!(!f[k].is_null(), "missing {k}");
    }
    for k in [
        "pid",
        "comm",
        "cgroup",
        "container",
        "library",
        "library_version",
    ] {
        assert!(f["culprit"].get(k).is_some(), "culprit.{k}");
    }
    for k in ["causes", "caused_by"] {
        assert!(f[k].is_array(), "missing {k}");
    }
    // Mechanism findings first, each tier by confidence, except that a consequence follows
    // the finding that caused it.
    let fs = v["findings"].as_array().unwrap();
    let roots: Vec<(bool, f64)> = fs
        .iter()
        .filter(|f| f["caused_by"].as_array().unwrap().is_empty())
        .map(|f| {
            (
                f["mechanism"].as_bool().unwrap(),
                f["confidence"].as_f64().unwrap(),
            )
        })
        .collect();
    assert!(
        roots
            .windows(2)
            .all(|w| (w[0].0 && !w[1].0) || (w[0].0 == w[1].0 && w[0].1 >= w[1].1)),
        "ranked: {roots:?}"
    );
}

#[test]
fn empty_window_says_so() {
    let r = diagnose(
        &fixtures().join("idle"),
        0,
        1_000_000_000,
        Options::default(),
    )
    .unwrap();
    assert_eq!(r.samples, 0);
    assert!(jitterscope_diagnose::text::render(&r).contains("no samples in this window"));
}

/// Up to `max` JSON paths at which `got` and `want` differ.
fn differences(
    path: &str,
    got: &serde_json::Value,
    want: &serde_json::Value,
    out: &mut Vec<String>,
    max: usize,
) {
    use serde_json::Value;
    if out.len() >= max || got == want {
        return;
    }
    match (got, want) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let (x, y) = (
                    a.get(k).unwrap_or(&Value::Null),
                    b.get(k).unwrap_or(&Value::Null),
                );
                differences(&format!("{path}.{k}"), x, y, out, max);
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differences(&format!("{path}[{i}]"), x, y, out, max);
            }
        }
        _ => out.push(format!("{path}: now {got}, captured {want}")),
    }
}

/// Every scenario's report, whole, against the one stored beside its recording
/// (`diagnosis.report` of `<scenario>.json`): any change to a finding's title, evidence,
/// culprit, remediation or ranking shows here. A change made on purpose is blessed with
/// `JITTERSCOPE_BLESS=1 cargo test -p jitterscope-diagnose --test golden`, which rewrites the
/// stored reports (and the first and mechanism rules beside them); review the diff before
/// committing it.
#[test]
fn reports_match_the_blessed_ones() {
    let bless = std::env::var("JITTERSCOPE_BLESS").is_ok_and(|v| v == "1");
    let names = scenario_names();
    assert!(names.len() >= 11, "{names:?}");
    let mut failed = Vec::new();
    for name in &names {
        let path = fixtures().join(format!("{name}.json"));
        let mut doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let got = serde_json::to_value(run(name)).unwrap();
        if bless {
            let findings = got["findings"].as_array().cloned().unwrap_or_default();
            let dg = &mut doc["diagnosis"];
            dg["first_rule"] = findings
                .first()
                .map_or(serde_json::Value::Null, |f| f["rule_id"].clone());
            // As `lab check` lists them: the mechanism findings that claim a cause (0.5 and
            // up), not those that only advise.
            dg["mechanism_rules"] = findings
                .iter()
                .filter(|f| f["mechanism"] == true && f["confidence"].as_f64() >= Some(0.5))
                .map(|f| f["rule_id"].clone())
                .collect();
            dg["report"] = got;
            let mut text = serde_json::to_string_pretty(&doc).unwrap();
            text.push('\n');
            std::fs::write(&path, text).unwrap();
            continue;
        }
        let mut diff = Vec::new();
        differences("report", &got, &doc["diagnosis"]["report"], &mut diff, 12);
        if !diff.is_empty() {
            failed.push(format!("{name}:\n  {}", diff.join("\n  ")));
        }
    }
    assert!(
        failed.is_empty(),
        "reports differ from the blessed ones (rerun with JITTERSCOPE_BLESS=1 if the change is meant, and review the diff):\n{}",
        failed.join("\n")
    );
}
