//! `memory.leak` — processes whose memory grows steadily.
//!
//! **Mechanism.** Not a kernel mechanism but what sets several off: a process whose RSS only
//! grows pushes the host or its cgroup into reclaim, evicts page cache, and ends in the OOM
//! killer. Case 5: a gunicorn worker at 37 GB while Python saw 58 MB of objects.
//!
//! **Evidence.** `proc.<pid>.<comm>.rss_bytes` over the window: a least-squares slope and how
//! well a line fits (R²), the growth, and the anonymous share.
//!
//! **Thresholds.** A finding when a process with >= 5 samples grew by >= 16 MiB and >= 5% of
//! its starting RSS, with R² >= 0.8 (steady, not a spike) and at least 80% of its steps
//! non-negative. Confidence by R² and growth.
//!
//! **How long it grew, and whether it still does.** A steady line is not enough: a program
//! building its working set grows as steadily as a leak, only not for long, and then stops.
//! The shape of the growth ([`Shape`]) tells them apart: how long it grew (its 10%→90% rise,
//! scaled to the whole of a steady growth) and how long it has been flat since.
//! - Growth that stopped, flat for at least 10 s and a quarter of the time it grew, is a
//!   warm-up (a service filling its caches after a start, a batch's working set): no finding.
//!   A leak does not level off while the process lives.
//! - A process that grew for under 20 s and then exited, or still runs, is showing its working
//!   set: a compiler's `cc1` grows 20–30 MiB in 4–12 s on every large unit and exits normally.
//!   No finding.
//! - Steady growth that ran until a signal or the OOM killer ended the process is a leak
//!   however short: the kill cut the growth, not the program's work.
//! - A process still growing after 20 s but not yet 90 s may be warming up: a just-started
//!   Prometheus or recorder grows for about a minute and levels off. It is a finding below 0.5
//!   (advice), said so; after 90 s of unbroken growth it is a leak. The same holds for one
//!   that grew that long and then exited normally: on a busy host a compiler sharing the CPUs
//!   builds its working set for half a minute or more, and exits all the same; a batch job
//!   that leaked for minutes before it finished is a leak. The leak-trend detector, which
//!   cannot see what comes next, opens an episode only after 90 s.
//!
//! **The end of the process.** Most leaks end in a kill: the OOM killer, a supervisor's
//! restart, a deploy. An ended process has no memory map, so the kernel reports its RSS as 0
//! (a zombie), or it is gone from /proc; the recorder's series stop there instead of falling
//! to 0, and the trend is judged on the samples while it ran. A process that grew and then
//! ended is still a leak, with its end as evidence: `proc.<pid>.<comm>.exited`, the signal
//! that ended it when the recorder saw the zombie (`exit_signal`), and the kernel's OOM report
//! when the OOM killer was the one (its cgroup and the victim's size).
//!
//! **The recorder itself.** The recorder's own process (`RecorderStats::pid` of the samples)
//! is left out: its memory is the agent's budget, watched as `self.rss_bytes`, not a
//! workload's leak. When it grew in the window the report says so in a note instead
//! ([`recorder_notes`]).
//!
//! **Remediation.** Find where it grows (`jitterscope memleak --pid`: the mappings that grow,
//! Python heap or native, the strings that pile up); for worker servers,
//! recycle workers (gunicorn `max_requests` + `max_requests_jitter`, uwsgi `max-requests`,
//! celery `--max-tasks-per-child`); bound it with a memory limit.
//!
//! **References.** "Chasing memory leak in a Python web service" (case 5); gunicorn settings.

use jitterscope_model::metrics::process;
use jitterscope_sources::units::MIB;

use super::{confidence, finding, mib, proc_culprit, rule, series_fact, Take};
use crate::data::Data;
use crate::Finding;

rule! {
    "memory.leak", "a process's memory growing steadily", mechanism,
    reads: process::PROC_RSS_BYTES, process::PROC_ANON_BYTES, process::PROC_EXITED,
        process::PROC_EXIT_SIGNAL,
}

/// How a process ended in the window, when it did.
pub(crate) struct End {
    /// When the recorder first saw it ended (ns since the epoch).
    pub at: i64,
    /// The signal that ended it, when the recorder saw the zombie.
    pub signal: Option<i32>,
    /// The OOM killer's report of it.
    pub oom: Option<jitterscope_sources::system::kmsg::OomKill>,
}

/// The end of process `pid` (`comm`) in the window, if it ended there.
pub(crate) fn end_of(d: &Data, pid: u32, comm: &str) -> Option<End> {
    let pid_s = pid.to_string();
    let start = d.start as u32;
    let exited = d.get(&process::PROC_EXITED, &[&pid_s, comm])?;
    let &(i, _) = exited.points.iter().find(|(i, _)| *i >= start)?;
    let signal = d
        .get(&process::PROC_EXIT_SIGNAL, &[&pid_s, comm])
        .and_then(|s| s.points.iter().find(|(j, _)| *j >= start))
        .map(|&(_, v)| v as i32);
    let oom = d
        .oom_kills
        .iter()
        .find(|(_, k)| k.pid == pid)
        .map(|(_, k)| k.clone());
    Some(End {
        at: d.at(i),
        signal: signal.or(oom.as_ref().map(|_| 9)),
        oom,
    })
}

/// "SIGKILL (9)" for the signals a process is usually ended by.
pub(crate) fn signal_name(sig: i32) -> String {
    let name = match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        6 => "SIGABRT",
        7 => "SIGBUS",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        15 => "SIGTERM",
        _ => return format!("signal {sig}"),
    };
    format!("{name} ({sig})")
}

// The leak test and its thresholds are the leak-trend detector's as well, which the recorder
// runs: they live below the analysis, in jitterscope-detect.
pub use jitterscope_detect::trend::*;

/// Highest confidence of a growth too young to tell from a warm-up: advice, below 0.5.
pub const ADVISORY_MAX: f64 = 0.45;

/// The window's points of an RSS series: (seconds from the window's start, bytes).
fn window_points(d: &Data, s: &crate::data::Series) -> Vec<(f64, f64)> {
    let start = d.start as u32;
    s.points
        .iter()
        .filter(|(i, _)| *i >= start)
        .map(|&(i, v)| ((d.at(i) - d.ts[d.start]) as f64 / 1e9, v))
        .collect()
}

/// What the report notes of the recorder's own memory: that it grew in the window (by at
/// least what a leak must grow), as the agent's budget rather than a finding.
pub fn recorder_notes(d: &Data) -> Vec<String> {
    let mut out = Vec::new();
    for s in d.each(&process::PROC_RSS_BYTES) {
        let Some((pid, comm)) = s.pid_comm().filter(|(p, _)| d.recorder_pids.contains(p)) else {
            continue;
        };
        let pts = window_points(d, s);
        let Some((&(t0, first), &(t1, last))) = pts.first().zip(pts.last()) else {
            continue;
        };
        let growth = last - first;
        if growth >= MIN_GROWTH_BYTES && growth >= MIN_GROWTH_SHARE * first {
            out.push(format!(
                "the recorder itself ({comm}, pid {pid}) grew from {} to {} MiB in {:.0} s: the agent's own memory budget (self.rss_bytes), not a leak of this host's workloads; memory.leak leaves it out",
                mib(first),
                mib(last),
                t1 - t0
            ));
        }
    }
    out
}

fn run(d: &Data) -> Vec<Finding> {
    let mut out = Vec::new();
    let start = d.start as u32;
    for s in d.each(&process::PROC_RSS_BYTES) {
        let Some((pid, comm)) = s.pid_comm() else {
            continue;
        };
        // The agent's budget, noted by `recorder_notes`.
        if d.recorder_pids.contains(&pid) {
            continue;
        }
        let pts = window_points(d, s);
        let Some((&(_, first), &(_, last))) = pts.first().zip(pts.last()) else {
            continue;
        };
        let growth = last - first;
        let ups = pts.windows(2).filter(|w| w[1].1 >= w[0].1).count();
        let Some((slope, r2)) = steady_growth(pts.len(), first, last, ups, || fit(&pts)) else {
            continue;
        };
        let end = end_of(d, pid, comm);
        let killed = end
            .as_ref()
            .is_some_and(|e| e.signal.is_some() || e.oom.is_some());
        let Some(shape) = Shape::of(&pts) else {
            continue;
        };
        let Some(verdict) = judge(shape, killed) else {
            continue;
        };
        let ended = match &end {
            None => String::new(),
            Some(e) => match (&e.oom, e.signal) {
                (Some(k), _) => format!(
                    ", then the OOM killer killed it{}",
                    k.oom_memcg
                        .as_deref()
                        .filter(|_| k.memcg())
                        .map(|c| format!(" at the limit of cgroup {c}"))
                        .unwrap_or_else(|| " (the host ran out of memory)".into())
                ),
                (None, Some(sig)) => format!(", then it was killed by {}", signal_name(sig)),
                (None, None) => ", then it ended".into(),
            },
        };
        let mut conf =
            confidence(r2, 0.8, 0.99) * 0.6 + confidence(growth / MIB, 16.0, 512.0) * 0.4;
        // Too young to tell from a warm-up: advice, said so in the title.
        let young = match verdict {
            Verdict::Leak => String::new(),
            Verdict::Unconfirmed if end.is_some() => {
                conf = conf.min(ADVISORY_MAX);
                format!(
                    ", after {:.0} s of growth: a leak, or the working set of what it did (a leak keeps growing past {:.0} s)",
                    shape.grew_s, CONFIRM_S
                )
            }
            Verdict::Unconfirmed => {
                conf = conf.min(ADVISORY_MAX);
                format!(
                    ", for {:.0} s so far: a leak, or a warm-up that will level off (after {:.0} s of unbroken growth it is a leak)",
                    shape.grew_s, CONFIRM_S
                )
            }
        };
        let mut f = finding(
            &RULE,
            d,
            format!(
                "{comm} ({pid}) grows steadily: +{} MiB in {:.0} s ({} MiB/min, R² {r2:.2}){ended}{young}",
                mib(growth),
                pts[pts.len() - 1].0 - pts[0].0,
                mib(slope * 60.0)
            ),
            (conf * 100.0).round() / 100.0,
            proc_culprit(d, pid, comm, super::Res::Memory),
        );
        f.onset = s
            .points
            .iter()
            .find(|(i, _)| *i >= start)
            .map(|&(i, _)| d.at(i));
        f.evidence.push(series_fact(
            s,
            last,
            Take::Last,
            format!("RSS from {} to {} MiB", mib(first), mib(last)),
        ));
        f.evidence.push(super::fact(
            format!("{} slope", s.name()),
            slope,
            jitterscope_model::registry::Unit::BytesPerSecond,
            format!("least-squares slope, R² {r2:.3}"),
        ));
        let pid_s = pid.to_string();
        if let Some(anon) = d.get(&process::PROC_ANON_BYTES, &[&pid_s, comm]) {
            let st = d.stats_of(anon);
            if st.n > 1 {
                f.evidence.push(series_fact(
                    anon,
                    st.last - st.first,
                    Take::Growth,
                    format!(
                        "anonymous memory grew {} MiB of it",
                        mib(st.last - st.first)
                    ),
                ));
            }
        }
        if let Some(e) = &end {
            let pid_s = pid.to_string();
            let exited = d.get(&process::PROC_EXITED, &[&pid_s, comm]);
            let how = match (&e.oom, e.signal) {
                (Some(k), _) => format!(
                    "was killed by the OOM killer ({}) with {} MiB resident",
                    k.constraint.as_deref().unwrap_or("constraint not reported"),
                    k.rss_bytes()
                        .map_or("an unreported".into(), |b| mib(b as f64).to_string())
                ),
                (None, Some(sig)) => format!("was killed by {}", signal_name(sig)),
                (None, None) => "ended (exited or was killed; the recorder did not see how)".into(),
            };
            f.evidence.push(super::Evidence {
                signal: exited.map_or_else(|| format!("proc.{pid}.{comm}.exited"), |s| s.name()),
                series: exited.map(|s| s.name()),
                source: exited.map(|s| s.source()),
                value: 1.0,
                stat: "last",
                over_s: None,
                baseline: None,
                unit: jitterscope_model::registry::Unit::Count,
                note: format!(
                    "it {how} at {}, {:.0} s after its last growing sample: the growth stopped because the process did",
                    jitterscope_model::time::rfc3339(e.at),
                    (e.at - d.ts[d.start]) as f64 / 1e9 - pts[pts.len() - 1].0
                ),
            });
        }
        if end.is_some() {
            f.remediation.push(format!(
                "it has ended: when the next one runs, see where it grows and what piles up with jitterscope memleak --pid <its pid> (the mappings that grow, Python heap or native, the strings that pile up); a {comm} that grows again will show here again"
            ));
        } else {
            f.remediation.push(format!(
                "see where it grows and what piles up, while it runs: jitterscope memleak --pid {pid} (the mappings that grow, Python heap or native, the strings that pile up)"
            ));
        }
        let cmd = d.procs.get(&pid).map(|p| p.cmdline.as_str()).unwrap_or("");
        if let Some(w) = jitterscope_memleak::runtime::worker_server(cmd) {
            f.remediation.push(format!("{}: {}", w.name, w.mitigation));
        } else if comm.starts_with("python") || cmd.contains("python") {
            f.remediation.push("Python: compare the interpreter's own accounting (tracemalloc, sys.getallocatedblocks) with RSS; growth outside it is native (a C extension)".into());
        }
        f.remediation.push("bound it meanwhile: a memory limit on its cgroup turns a host-wide stall into a restart of one process".into());
        f.references = vec!["https://docs.gunicorn.org/en/stable/settings.html#max-requests"];
        out.push(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window of `n` one-second samples from index 0 (no baseline), with one process's RSS
    /// (MiB) at the given indexes and, when `end` is `Some((index, signal))`, its end there.
    fn data(n: usize, rss: &[(u32, f64)], end: Option<(u32, Option<f64>)>) -> Data {
        let mut d = Data {
            ts: (0..n as i64).map(|i| (1_000 + i) * 1_000_000_000).collect(),
            start: 0,
            ..Default::default()
        };
        for &(i, v) in rss {
            d.push(&process::PROC_RSS_BYTES, &["7", "app"], i, v * MIB);
        }
        if let Some((i, sig)) = end {
            d.push(&process::PROC_EXITED, &["7", "app"], i, 1.0);
            if let Some(sig) = sig {
                d.push(&process::PROC_EXIT_SIGNAL, &["7", "app"], i, sig);
            }
        }
        d
    }

    /// RSS (MiB) from `from` for `secs` samples: `base`, then `rate` MiB/s for `grow` samples,
    /// then flat.
    fn ramp(from: u32, secs: u32, base: f64, rate: f64, grow: u32) -> Vec<(u32, f64)> {
        (0..secs)
            .map(|k| (from + k, base + rate * k.min(grow) as f64))
            .collect()
    }

    #[test]
    fn a_tool_that_grows_for_seconds_and_exits_normally_shows_its_working_set() {
        // gcc's cc1: +22.5 MiB in 4 s, R² ~1, then it exits (no signal), in a 60 s window.
        let d = data(60, &ramp(20, 6, 8.0, 5.6, 5), Some((26, None)));
        assert!(run(&d).is_empty(), "{:?}", run(&d));
        // A large unit: +30 MiB over 12 s, then it exits.
        let d = data(60, &ramp(20, 13, 8.0, 2.5, 12), Some((33, None)));
        assert!(run(&d).is_empty(), "{:?}", run(&d));
        // The same growth still running at the window's end: too short to be anything.
        let d = data(30, &ramp(18, 12, 8.0, 2.5, 12), None);
        assert!(run(&d).is_empty(), "{:?}", run(&d));
    }

    #[test]
    fn growth_that_levels_off_is_a_warm_up() {
        // A recorder just started: 60 -> 84 MiB in 45 s, then flat for a minute.
        let d = data(110, &ramp(0, 110, 60.0, 24.0 / 45.0, 45), None);
        assert!(run(&d).is_empty(), "{:?}", run(&d));
        // A database filling its caches for a minute, then flat, in a 10-minute window.
        let d = data(600, &ramp(0, 600, 200.0, 1.5, 60), None);
        assert!(run(&d).is_empty(), "{:?}", run(&d));
        // Warm-up, then a deploy's SIGTERM: the plateau says it had stopped growing.
        let d = data(120, &ramp(0, 110, 60.0, 1.0, 40), Some((110, Some(15.0))));
        assert!(run(&d).is_empty(), "{:?}", run(&d));
    }

    #[test]
    fn steady_growth_for_minutes_is_a_leak_whether_it_lives_or_exits() {
        // Alive, 1 MiB/s for all of a 5-minute window.
        let d = data(300, &ramp(0, 300, 100.0, 1.0, 300), None);
        let f = run(&d);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].confidence >= 0.5, "{f:?}");
        assert!(!f[0].title.contains("warm-up"), "{}", f[0].title);
        // 2 minutes of steady growth, then a normal exit: a leak that ran until the job
        // finished.
        let d = data(150, &ramp(5, 120, 50.0, 1.0, 120), Some((125, None)));
        let f = run(&d);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].confidence >= 0.5, "{f:?}");
        assert!(f[0].title.ends_with("then it ended"), "{}", f[0].title);
        // 40 s of it, then a normal exit (a compiler slowed down on a busy host): advice.
        let d = data(60, &ramp(5, 40, 50.0, 1.0, 40), Some((45, None)));
        let f = run(&d);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].confidence < 0.5, "{f:?}");
        assert!(
            f[0].title.contains("the working set of what it did"),
            "{}",
            f[0].title
        );
    }

    #[test]
    fn a_kill_cuts_the_growth_short_and_it_is_still_a_leak() {
        // 8 s of growth at 8 MiB/s, then SIGKILL (a supervisor, kill -9).
        let d = data(30, &ramp(10, 9, 20.0, 8.0, 8), Some((19, Some(9.0))));
        let f = run(&d);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].title.ends_with("killed by SIGKILL (9)"),
            "{}",
            f[0].title
        );
        assert!(f[0].confidence >= 0.5, "{f:?}");
    }

    #[test]
    fn a_live_process_growing_for_under_a_minute_and_a_half_is_only_advice() {
        // Started 40 s ago and still growing at the window's end: a leak or a warm-up.
        let d = data(40, &ramp(0, 40, 60.0, 1.0, 40), None);
        let f = run(&d);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].confidence < 0.5, "{f:?}");
        assert!(
            f[0].title.contains("warm-up that will level off"),
            "{}",
            f[0].title
        );
        // The same growth kept up past 90 s is a leak.
        let d = data(120, &ramp(0, 120, 60.0, 1.0, 120), None);
        let f = run(&d);
        assert!(f[0].confidence >= 0.5, "{f:?}");
    }

    #[test]
    fn shapes_measure_the_rise_and_the_plateau() {
        let line: Vec<(f64, f64)> = (0..=100).map(|i| (i as f64, i as f64)).collect();
        let s = Shape::of(&line).unwrap();
        assert!((s.grew_s - 100.0).abs() < 2.0, "{s:?}");
        assert!(s.flat_s <= 10.0 && !s.stopped(), "{s:?}");
        let plateau: Vec<(f64, f64)> = (0..=100).map(|i| (i as f64, i.min(40) as f64)).collect();
        let s = Shape::of(&plateau).unwrap();
        assert!((s.grew_s - 40.0).abs() < 2.0 && s.stopped(), "{s:?}");
        assert_eq!(Shape::of(&[(0.0, 5.0), (1.0, 5.0)]), None);
    }

    #[test]
    fn fits_lines() {
        let pts: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, 5.0 + 2.0 * i as f64)).collect();
        let (s, r2) = fit(&pts).unwrap();
        assert!((s - 2.0).abs() < 1e-9 && (r2 - 1.0).abs() < 1e-9);
        let flat: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, 5.0)).collect();
        assert_eq!(fit(&flat), Some((0.0, 0.0)));
        assert_eq!(fit(&pts[..2]), None);
    }
}
