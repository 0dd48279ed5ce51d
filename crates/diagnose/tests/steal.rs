//! `cpu.steal` on /proc/stat recorded on this machine (tests/fixtures/steal, captured by
//! scripts/capture-steal-fixtures.sh), through the store and the diagnosis as a recording
//! would go. No machine here can be made to suffer steal (TCG guests have no steal time and
//! KVM does not boot Debian's kernels on it), so the episode is this recording with idle ticks
//! of one CPU moved into its steal column, as a hypervisor that stops running the vCPU does:
//! every other column, and the parse, are the real file's.

use std::path::{Path, PathBuf};

use jitterscope_diagnose::{diagnose, Options, Report};
use jitterscope_model::sample::Sample;
use jitterscope_model::signals::SignalRecord;
use jitterscope_sources::system::stat::parse_stat;

const S: i64 = 1_000_000_000;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/steal")
}

/// Writes the 20 recorded /proc/stat files one second apart; from the 11th on, CPU `cpu`
/// loses `per_s` ticks a second of idle to steal (cumulative, as the kernel counts).
fn store(dir: &Path, cpu: u32, per_s: u64) {
    let mut w = jitterscope_testkit::sample_writer(dir).unwrap();
    let mut prev_idle: Option<u64> = None;
    for n in 0..20u64 {
        let raw = std::fs::read(fixtures().join(format!("stat.{n}"))).unwrap();
        let mut stat = parse_stat(&raw).unwrap();
        let moved = n.saturating_sub(10) * per_s;
        for c in stat.cpus.iter_mut().filter(|c| c.cpu == cpu) {
            // Each second moved from idle to steal must have been idle in the recording.
            if let Some(p) = prev_idle.filter(|_| n > 10) {
                let idle = c.times.idle_ticks - p;
                assert!(
                    idle >= per_s,
                    "CPU {cpu} was idle {idle} ticks in second {n} of the recording, less than the {per_s} moved"
                );
            }
            prev_idle = Some(c.times.idle_ticks);
            c.times.idle_ticks -= moved;
            *c.times.steal_ticks.get_or_insert(0) += moved;
        }
        stat.total.idle_ticks -= moved;
        *stat.total.steal_ticks.get_or_insert(0) += moved;
        let ns = (n as i64 + 1) * S;
        let mut s = Sample {
            ts_ns: ns,
            mono_ns: ns as u64,
            interval_ns: S as u64,
            stat: Some(stat),
            ..Default::default()
        };
        jitterscope_model::codec::round_as_stored(&mut s);
        w.append(&mut s, &SignalRecord::default()).unwrap();
    }
    w.close().unwrap();
}

fn run(cpu: u32, per_s: u64) -> Report {
    let dir = tempfile::tempdir().unwrap();
    store(dir.path(), cpu, per_s);
    diagnose(
        dir.path(),
        11 * S,
        20 * S,
        Options {
            lookback_ns: 10 * S,
        },
    )
    .unwrap()
}

#[test]
fn the_recording_as_it_was_has_no_steal_episode() {
    let r = run(0, 0);
    assert!(r.samples >= 5, "{} samples", r.samples);
    assert!(
        r.findings.iter().all(|f| f.rule_id != "cpu.steal"),
        "{:#?}",
        r.findings
    );
}

#[test]
fn a_cpu_the_hypervisor_stops_running_is_named_and_no_process_is_blamed() {
    // USER_HZ is 100: 30 ticks a second is 30% of CPU 1.
    let r = run(1, 30);
    let f = r
        .findings
        .iter()
        .find(|f| f.rule_id == "cpu.steal")
        .unwrap_or_else(|| panic!("no cpu.steal finding: {:#?}", r.findings));
    assert!(f.title.contains("CPU 1 30%"), "{}", f.title);
    assert!(f.title.contains("no process in this machine caused it"));
    assert_eq!(f.culprit.pid, None);
    assert_eq!(f.culprit.cgroup, None);
    let e = f
        .evidence
        .iter()
        .find(|e| e.signal == "cpu.1.steal_pct")
        .expect("per-CPU evidence");
    assert!((e.value - 30.0).abs() < 1.0, "{e:?}");
    assert!(e.baseline.is_some_and(|b| b < 1.0), "{e:?}");
    assert_eq!(r.findings[0].rule_id, "cpu.steal", "{:#?}", r.findings);
}
