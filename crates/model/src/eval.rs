//! What a metric's evaluation sees and how it computes rates: the context of one sample and
//! the one before it ([`Ctx`]), counter deltas as rates ([`Rate`]), and the signature every
//! metric's `eval` has ([`EvalFn`]). Below both the registry (whose definitions hold an
//! `EvalFn`) and the derivation over many metrics (`derive.rs`), so neither needs the other
//! for it.
//!
//! Samples hold raw counters; every rate is computed at read time, so a better derivation
//! applies to old recordings too. The elapsed time comes from the monotonic clock stamped on each
//! sample, not the wall clock, which can jump.

use std::cell::OnceCell;
// Fx rather than SipHash: these maps are built once per sample and probed once per process,
// and SipHash was 6% of a one-minute dump of a busy host (perf); keys are pids, start times and
// cgroup paths from the recording, not attacker-chosen.
use rustc_hash::FxHashMap as HashMap;

use jitterscope_sources::process::Process;

use crate::sample::{Cgroup, Sample};

/// Receives the values a metric produces for one sample: the placeholder values (in template
/// order) and the value (`None` = unknown for this interval).
pub type Emit<'e> = dyn FnMut(&[&str], Option<f64>) + 'e;

/// How a metric produces its series for one sample.
pub type EvalFn = fn(&Ctx, &mut Emit);

/// What a metric's `eval` sees: the current sample, the previous one (if any) and the interval.
pub struct Ctx<'a> {
    /// The sample being described.
    pub cur: &'a Sample,
    /// The sample before it, when there is one and it is usable for rates.
    pub prev: Option<&'a Sample>,
    /// Seconds between the two samples' monotonic stamps (0 when there is no previous sample).
    pub dt_s: f64,
    prev_procs: OnceCell<HashMap<(u32, u64), &'a Process>>,
    prev_cgroups: OnceCell<HashMap<&'a str, &'a Cgroup>>,
    cur_procs: OnceCell<rustc_hash::FxHashSet<(u32, u64)>>,
}

/// Gaps longer than this break rate computation: after a recorder restart or a paused store, a
/// "rate" over hours would describe nothing useful.
pub const MAX_RATE_GAP_S: f64 = 300.0;

impl<'a> Ctx<'a> {
    /// A context for `cur`, with `prev` used for rates when it precedes `cur` on the same boot.
    pub fn new(cur: &'a Sample, prev: Option<&'a Sample>) -> Self {
        let prev = prev.filter(|p| {
            p.host.boot_id == cur.host.boot_id && p.mono_ns < cur.mono_ns && {
                let dt = (cur.mono_ns - p.mono_ns) as f64 / 1e9;
                dt <= MAX_RATE_GAP_S
            }
        });
        let dt_s = prev.map_or(0.0, |p| (cur.mono_ns - p.mono_ns) as f64 / 1e9);
        Ctx {
            cur,
            prev,
            dt_s,
            prev_procs: OnceCell::new(),
            prev_cgroups: OnceCell::new(),
            cur_procs: OnceCell::new(),
        }
    }

    /// Per-second rate of a counter: [`Rate::Absent`] without a previous value,
    /// [`Rate::Unknown`] when the counter went backwards.
    pub fn rate(&self, cur: Option<u64>, prev: Option<u64>) -> Rate {
        match (cur, prev) {
            (Some(c), Some(p)) if self.dt_s > 0.0 => {
                if c >= p {
                    Rate::Value((c - p) as f64 / self.dt_s)
                } else {
                    Rate::Unknown
                }
            }
            _ => Rate::Absent,
        }
    }

    /// The delta of a counter, or `None` when it is absent or went backwards.
    pub fn delta(&self, cur: Option<u64>, prev: Option<u64>) -> Option<u64> {
        match (cur, prev) {
            (Some(c), Some(p)) if c >= p && self.dt_s > 0.0 => Some(c - p),
            _ => None,
        }
    }

    /// The same process in the previous sample (matched by pid and start time, so a reused pid
    /// is a different process).
    pub fn prev_process(&self, pid: u32, starttime: u64) -> Option<&'a Process> {
        let prev = self.prev?;
        self.prev_procs
            .get_or_init(|| {
                prev.processes
                    .iter()
                    .flatten()
                    .map(|p| ((p.stat.pid, p.stat.starttime_ticks), p))
                    .collect()
            })
            .get(&(pid, starttime))
            .copied()
    }

    /// The same cgroup (by path) in the previous sample.
    pub fn prev_cgroup(&self, path: &str) -> Option<&'a Cgroup> {
        let prev = self.prev?;
        self.prev_cgroups
            .get_or_init(|| {
                prev.cgroups
                    .iter()
                    .flatten()
                    .map(|c| (c.path.as_str(), c))
                    .collect()
            })
            .get(path)
            .copied()
    }

    /// Whether the current sample holds the process (by pid and start time). Built once per
    /// sample: both exit metrics ask it for every process of the previous sample.
    pub fn has_process(&self, pid: u32, starttime: u64) -> bool {
        self.cur_procs
            .get_or_init(|| {
                self.cur
                    .processes
                    .iter()
                    .flatten()
                    .map(|p| (p.stat.pid, p.stat.starttime_ticks))
                    .collect()
            })
            .contains(&(pid, starttime))
    }

    /// USER_HZ of the recording host (ticks per second in /proc/stat and /proc/<pid>/stat).
    pub fn user_hz(&self) -> f64 {
        self.cur.host.user_hz.max(1) as f64
    }
}

/// Outcome of a rate computation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rate {
    /// No previous value: nothing to say (the first sample, a new process).
    Absent,
    /// The counter went backwards: the interval's value is unknown.
    Unknown,
    /// A per-second value.
    Value(f64),
}

impl Rate {
    /// Emits the rate (scaled by `k`) under `labels`, or nothing when absent.
    pub fn emit(self, out: &mut Emit, labels: &[&str], k: f64) {
        match self {
            Rate::Absent => {}
            Rate::Unknown => out(labels, None),
            Rate::Value(v) => out(labels, Some(v * k)),
        }
    }

    /// The value, if known.
    pub fn value(self) -> Option<f64> {
        match self {
            Rate::Value(v) => Some(v),
            _ => None,
        }
    }
}

/// Emits a ratio of two counter deltas in percent (`Δnum / Δden * 100`), e.g. throttled periods
/// over periods; unknown when either went backwards, nothing when `Δden` is 0.
pub fn emit_delta_pct(
    cx: &Ctx,
    out: &mut Emit,
    labels: &[&str],
    num: (Option<u64>, Option<u64>),
    den: (Option<u64>, Option<u64>),
) {
    if cx.prev.is_none() || num.1.is_none() || den.1.is_none() {
        return;
    }
    match (cx.delta(num.0, num.1), cx.delta(den.0, den.1)) {
        (Some(_), Some(0)) => {}
        (Some(n), Some(d)) => out(labels, Some(n as f64 / d as f64 * 100.0)),
        _ => out(labels, None),
    }
}
