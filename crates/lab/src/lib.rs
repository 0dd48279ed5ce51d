//! `jitterscope lab`: safe, self-cleaning reproducers of the kernel mechanisms in the seed
//! cases, and the signature each must leave in the recorded data.
//!
//! A [`Scenario`] starts workers ([`worker`]) in a [`sandbox::Sandbox`] (cgroups under
//! `jitterscope-lab`, files under [`sandbox::base_dir`]) with memory and time bounds, lets them
//! run for the requested duration, stops them (their reports say what they did) and removes
//! everything. Its [`signature::Check`]s say what the recorder must have seen meanwhile;
//! `jitterscope lab check` records while the scenario runs and evaluates them.

#![deny(missing_docs)]

pub mod sandbox;
pub mod scenarios;
pub mod signature;
pub mod stop;
pub mod worker;

use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;
use serde_json::Value;

pub use scenarios::{find, SCENARIOS};
use signature::Check;

/// How hard a scenario pushes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Intensity {
    /// Small sizes, for tests and a first look: seconds, a few hundred MiB at most.
    Low,
    /// The seed case's scale (within the documented bounds).
    High,
}

impl Intensity {
    /// Picks the value for this intensity.
    pub fn pick<T>(self, low: T, high: T) -> T {
        match self {
            Intensity::Low => low,
            Intensity::High => high,
        }
    }
}

/// What a scenario's `start` hands back: its signature and what to tell the user.
pub struct Started {
    /// Checks on the recorded data.
    pub checks: Vec<Check>,
    /// Lines describing the set-up (limits, sizes, pids).
    pub notes: Vec<String>,
    /// The cgroup the first finding must name as its culprit's (the lab cgroup whose limit
    /// the mechanism hit), when the scenario knows it.
    pub culprit_cgroup: Option<String>,
    /// The name the first finding's culprit must have (the process that did the work), when
    /// the scenario's point is who is named.
    pub culprit_comm: Option<&'static str>,
    /// Incidents that must each be a root of the report, (rule, the lab cgroup its culprit
    /// is in), when a scenario runs several at once: none may be chained under another.
    pub roots: Vec<(&'static str, String)>,
}

/// The context a scenario starts in.
pub struct Env<'a> {
    /// Its sandbox.
    pub sb: &'a mut sandbox::Sandbox,
    /// Intensity.
    pub intensity: Intensity,
    /// How long the workload runs once started.
    pub duration: Duration,
}

/// One reproducer.
pub struct Scenario {
    /// Name on the command line.
    pub name: &'static str,
    /// The seed case it mirrors.
    pub mirrors: &'static str,
    /// What it reproduces and how.
    pub reproduces: &'static str,
    /// The signals it should move.
    pub signals: &'static str,
    /// Its resource bounds.
    pub bounds: &'static str,
    /// A benign control: no mechanism should be diagnosed.
    pub control: bool,
    /// The diagnosis rule that should rank first (issue 6's rule ids); `None` for controls.
    pub expected_rule: Option<&'static str>,
    /// Cause → consequence links between findings the diagnosis must make (rule ids).
    pub expected_links: &'static [(&'static str, &'static str)],
    /// Rules that must each be a root of the report when the scenario runs several incidents
    /// at once (their cgroups come from [`Started::roots`]); `expected_rule` is then one of
    /// them and either may rank first.
    pub expected_roots: &'static [&'static str],
    /// Options of the recorder `lab check` runs for it, beyond `--interval 1s --dir`.
    pub record_args: &'static [&'static str],
    /// How long `lab run` and `lab check` run it unless told: what its signature and its
    /// rule need on a busy host, with room to spare (a leak must grow for tens of seconds
    /// to be told from a working set; a throttled cgroup shows in seconds).
    pub default_duration: Duration,
    /// Controllers its cgroups need.
    pub controllers: &'static [&'static str],
    /// Creates its cgroups and files and starts its workers.
    pub start: fn(&mut Env) -> Result<Started>,
}

/// A worker's report after the run.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerReport {
    /// Its role.
    pub role: String,
    /// Its pid.
    pub pid: u32,
    /// What it printed (JSON), or null.
    pub report: Value,
}

/// What a run did.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// Scenario name.
    pub scenario: String,
    /// Intensity.
    pub intensity: Intensity,
    /// Requested workload duration in seconds.
    pub duration_s: f64,
    /// When set-up started (ns since the epoch).
    pub setup_from_ns: i64,
    /// With a background load, when it had settled: the baseline is from there to
    /// `setup_from_ns`.
    pub load_from_ns: Option<i64>,
    /// When the workload started.
    pub active_from_ns: i64,
    /// When the workload was stopped.
    pub active_to_ns: i64,
    /// Set-up notes.
    pub notes: Vec<String>,
    /// Worker reports.
    pub workers: Vec<WorkerReport>,
    /// The signature to check.
    pub checks: Vec<Check>,
    /// The cgroup the first finding's culprit must be in (see [`Started::culprit_cgroup`]).
    pub culprit_cgroup: Option<String>,
    /// The name the first finding's culprit must have (see [`Started::culprit_comm`]).
    pub culprit_comm: Option<&'static str>,
    /// The roots the report must have (see [`Started::roots`]).
    pub roots: Vec<(&'static str, String)>,
    /// Cut short by a signal.
    pub interrupted: bool,
    /// What the cleanup removed.
    pub cleaned: sandbox::Cleaned,
    /// For a leaking worker (role `*-leak`), what `jitterscope memleak` reported on it while
    /// it ran.
    pub memleak: Option<Value>,
}

/// Wall-clock time, ns since the Unix epoch.
pub use jitterscope_sources::units::wall_ns as now_ns;

/// How long a background load runs before the scenario starts: its set-up (a compiler's
/// first build, the web server's first requests) is over and the seconds before the scenario
/// are a baseline of the busy host, not of an idle one.
pub const BESIDE_SETTLE: Duration = Duration::from_secs(8);

/// Of [`BESIDE_SETTLE`], the part still starting up; the rest is the baseline.
const BESIDE_WARMUP: Duration = Duration::from_secs(3);

/// The CPU weight of a background load's cgroup (v2 units; 100 is the default, v1 shares
/// 256): a quarter of the scenario's, as batch work (builds, backups) beside a service
/// commonly has (a Kubernetes BestEffort pod has the least there is). At equal weight on this
/// 2-CPU host (kernel 6.18, cgroup v1 cpu) the soak's eight busy cgroups took 155-185% of the
/// CPUs, and two-incidents' fibtest thread, pinned to CPU 0, ran 110-440 ms of each 4 s and
/// waited for the CPU the rest (its schedstat): its cgroup used 3-8% of a CPU, under half
/// its 20% quota, with or without the quota, and one CI run saw it throttled in 4% of
/// periods, too few for `cpu.cfs-throttling` to fire. With the soak at a quarter (or the
/// scenario at 10 times), it ran 790 ms of 4 s, its quota. The soak still takes every CPU
/// second the scenario leaves.
pub const BESIDE_CPU_WEIGHT: u64 = 25;

/// Runs `s`: set-up, `duration` of workload, stop, clean up. With `beside`, that scenario
/// (a control: the `soak` load) starts first in the same sandbox, runs for
/// [`BESIDE_SETTLE`] alone and then through the whole of `s`. `progress` gets one line per
/// step. A stop signal (see [`stop::install`]) ends the workload early; cleanup still runs.
pub fn run(
    s: &Scenario,
    beside: Option<&Scenario>,
    intensity: Intensity,
    duration: Duration,
    progress: &mut dyn FnMut(&str),
) -> Result<Outcome> {
    let mut controllers: Vec<&str> = s.controllers.to_vec();
    for c in beside.map(|b| b.controllers).unwrap_or_default() {
        if !controllers.contains(c) {
            controllers.push(c);
        }
    }
    let mut setup_from_ns = now_ns();
    let mut sb = sandbox::Sandbox::open(s.name, &controllers, progress)?;
    let mut load_from_ns = None;
    if let Some(b) = beside {
        sb.scope(b.name, sandbox::Limits::weight(BESIDE_CPU_WEIGHT))?;
        let started = (b.start)(&mut Env {
            sb: &mut sb,
            intensity,
            duration: duration + BESIDE_SETTLE,
        })?;
        sb.scope(s.name, sandbox::Limits::default())?;
        for n in &started.notes {
            progress(n);
        }
        progress(&format!(
            "{} runs alone for {} before {} starts beside it (at CPU weight {BESIDE_CPU_WEIGHT}, \
             a quarter of the scenario's)",
            b.name,
            fmt_duration(BESIDE_SETTLE),
            s.name
        ));
        let from = Instant::now();
        let mut baseline = None;
        while stop::sleep(Duration::from_millis(200)) && from.elapsed() < BESIDE_SETTLE {
            sb.check_workers()?;
            if baseline.is_none() && from.elapsed() >= BESIDE_WARMUP {
                baseline = Some(now_ns());
            }
        }
        load_from_ns = baseline;
        setup_from_ns = now_ns();
    }
    let started = {
        let mut env = Env {
            sb: &mut sb,
            intensity,
            duration,
        };
        (s.start)(&mut env)?
    };
    for n in &started.notes {
        progress(n);
    }
    let pids: Vec<(String, u32)> = sb
        .workers()
        .iter()
        .map(|w| (w.role.clone(), w.pid()))
        .collect();
    let active_from_ns = now_ns();
    progress(&format!(
        "running {} for {} ({} workers)",
        s.name,
        fmt_duration(duration),
        pids.len()
    ));
    let deadline = Instant::now() + duration;
    // A leaking worker is also read by `memleak` while it runs, as an operator would: two
    // readings most of the workload apart.
    let inspect = pids
        .iter()
        .find(|(role, _)| role.ends_with("-leak"))
        .map(|(role, pid)| {
            let (role, pid) = (role.clone(), *pid);
            let gap = duration.mul_f64(0.6).max(Duration::from_millis(500));
            std::thread::spawn(move || memleak(pid, &role, gap))
        });
    let mut failure = None;
    while stop::sleep(
        Duration::from_millis(200).min(deadline.saturating_duration_since(Instant::now())),
    ) {
        if let Err(e) = sb.check_workers() {
            failure = Some(e);
            break;
        }
        if Instant::now() >= deadline {
            break;
        }
    }
    let memleak = inspect.map(|h| {
        h.join()
            .unwrap_or_else(|_| serde_json::json!({"error": "memleak panicked"}))
    });
    let active_to_ns = now_ns();
    let stopped = sb.stop_workers(Duration::from_secs(5));
    let cleaned = sb.close()?;
    if let Some(e) = failure {
        let mut msg = e.to_string();
        for st in stopped.iter().filter(|s| s.exited_early) {
            msg.push_str(&format!(" ({} status {})", st.role, st.status));
        }
        anyhow::bail!("{msg}; everything the scenario created was removed");
    }
    let workers = stopped
        .into_iter()
        .map(|st| {
            let pid = pids
                .iter()
                .find(|(r, _)| *r == st.role)
                .map(|(_, p)| *p)
                .unwrap_or(0);
            let report = st
                .stdout
                .lines()
                .rev()
                .find_map(|l| serde_json::from_str::<Value>(l).ok())
                .unwrap_or(Value::Null);
            WorkerReport {
                role: st.role,
                pid,
                report,
            }
        })
        .collect();
    Ok(Outcome {
        scenario: s.name.to_string(),
        intensity,
        duration_s: duration.as_secs_f64(),
        setup_from_ns,
        load_from_ns,
        active_from_ns,
        active_to_ns,
        notes: started.notes,
        workers,
        checks: started.checks,
        culprit_cgroup: started.culprit_cgroup,
        culprit_comm: started.culprit_comm,
        roots: started.roots,
        interrupted: stop::requested(),
        cleaned,
        memleak,
    })
}

/// `jitterscope memleak` on a worker: its report, or `{"error": ...}`. It waits for the worker
/// to have renamed itself `role`: until then the pid may still be a launcher (pyenv's shim is
/// a shell script that execs python) and reading it would measure the wrong program.
fn memleak(pid: u32, role: &str, gap: Duration) -> Value {
    let deadline = Instant::now() + Duration::from_secs(3);
    while std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() != role)
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = jitterscope_memleak::Target::open(pid)
        .and_then(|t| jitterscope_memleak::run(&t, Default::default(), gap, 2, None, |_, _| {}));
    match r {
        Ok((report, _)) => serde_json::to_value(report).unwrap_or(Value::Null),
        Err(e) => serde_json::json!({ "error": e.to_string() }),
    }
}

/// `5s`, `1m30s`.
pub fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 60, s % 60) {
        (0, s) => format!("{s}s"),
        (m, 0) => format!("{m}m"),
        (m, s) => format!("{m}m{s}s"),
    }
}
