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

/// Fewest points a trend is judged on.
pub const MIN_POINTS: usize = 5;
/// Least growth, bytes (and at least [`MIN_GROWTH_SHARE`] of where it started).
pub const MIN_GROWTH_BYTES: f64 = 16.0 * MIB;
/// Least growth as a share of the starting RSS.
pub const MIN_GROWTH_SHARE: f64 = 0.05;
/// Least share of steps that did not go down.
pub const MIN_UP_SHARE: f64 = 0.8;
/// Least R² of the line fit.
pub const MIN_R2: f64 = 0.8;

/// The leak test, shared by this rule (over a window) and the leak-trend detector (over a
/// sliding five minutes): `n` points from `first` to `last`, `ups` of the `n - 1` steps not
/// down, and the line `fit` gives (slope per second, R²). The cheap tests go first: most
/// processes fail them, and the fit runs only for the few that grow. The slope and R² when it
/// passes.
pub fn steady_growth(
    n: usize,
    first: f64,
    last: f64,
    ups: usize,
    fit: impl FnOnce() -> Option<(f64, f64)>,
) -> Option<(f64, f64)> {
    if n < MIN_POINTS {
        return None;
    }
    let growth = last - first;
    if growth < MIN_GROWTH_BYTES || growth < MIN_GROWTH_SHARE * first {
        return None;
    }
    if (ups as f64) < MIN_UP_SHARE * (n - 1) as f64 {
        return None;
    }
    fit().filter(|&(slope, r2)| slope > 0.0 && r2 >= MIN_R2)
}

/// Slope per second and R² of points (t seconds, value).
pub fn fit(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    if points.len() < 3 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let syy: f64 = points.iter().map(|p| (p.1 - my).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let r2 = if syy == 0.0 {
        0.0
    } else {
        (sxy * sxy) / (sxx * syy)
    };
    Some((slope, r2))
}

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
        let mut f = finding(
            &RULE,
            d,
            format!(
                "{comm} ({pid}) grows steadily: +{} MiB in {:.0} s ({} MiB/min, R² {r2:.2}){ended}",
                mib(growth),
                pts[pts.len() - 1].0 - pts[0].0,
                mib(slope * 60.0)
            ),
            ((confidence(r2, 0.8, 0.99) * 0.6 + confidence(growth / MIB, 16.0, 512.0) * 0.4)
                * 100.0)
                .round()
                / 100.0,
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
        if let Some(w) = jitterscope_memleak::process::worker_server(cmd) {
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
