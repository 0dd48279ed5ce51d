//! `jitterscope lab`: list, run and check the reproducers, and clean up after killed runs.
//! `check` records the run with this binary's own recorder and evaluates the scenario's
//! signature on what was recorded.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use jitterscope_lab::signature::{evaluate, CheckResult, Windows};
use jitterscope_lab::{fmt_duration, stop, Intensity, Outcome, Scenario, SCENARIOS};
use jitterscope_model::time::rfc3339;
use jitterscope_store::Reader;
use serde_json::json;

use crate::timearg::parse_duration;

/// Arguments of `lab`.
#[derive(Args, Debug)]
pub struct LabArgs {
    #[command(subcommand)]
    cmd: LabCmd,
}

#[derive(Subcommand, Debug)]
enum LabCmd {
    /// List the scenarios: what each reproduces, the seed case it mirrors, its signals and bounds.
    List {
        /// Print JSON Lines: one scenario per line.
        #[arg(long)]
        json: bool,
        /// Print Markdown (the scenario list of docs/LAB.md).
        #[arg(long, conflicts_with = "json")]
        markdown: bool,
    },
    /// Run a scenario in its sandbox, then remove everything it created.
    Run(RunArgs),
    /// Record while a scenario runs, then check that its signature shows in the recording.
    Check(CheckArgs),
    /// Remove what a killed lab run left behind (processes, cgroups, mounts, files).
    Cleanup,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// Scenario name (see `jitterscope lab list`).
    scenario: String,
    /// How long the workload runs [default: the scenario's, in `lab list`: 15 to 90 s]
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Low: small sizes, enough for every signature. High: the seed case's scale (still
    /// bounded; see `lab list`).
    #[arg(long, value_enum, default_value_t = Level::Low)]
    intensity: Level,
    /// Print the outcome as JSON.
    #[arg(long)]
    json: bool,
    /// Run a control scenario as background load (`soak`: a busy, healthy host) in the same
    /// sandbox, at a quarter of the default CPU weight: it starts first, runs alone for 8 s,
    /// then through the whole scenario.
    #[arg(long, value_name = "CONTROL")]
    beside: Option<String>,
}

#[derive(Args, Debug)]
struct CheckArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Keep the recording in this store directory (default: a temporary one, removed after).
    #[arg(long)]
    dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Level {
    Low,
    High,
}

impl From<Level> for Intensity {
    fn from(l: Level) -> Self {
        match l {
            Level::Low => Intensity::Low,
            Level::High => Intensity::High,
        }
    }
}

/// Longest workload a run accepts: scenarios are bounded in time as well as memory.
const MAX_DURATION: Duration = Duration::from_secs(3600);

/// Runs `lab`.
pub fn run(a: LabArgs) -> Result<()> {
    match a.cmd {
        LabCmd::List { json, markdown } => list(json, markdown),
        LabCmd::Run(r) => run_one(r),
        LabCmd::Check(c) => check(c),
        LabCmd::Cleanup => {
            let c = jitterscope_lab::sandbox::cleanup_all()?;
            let stores = remove_stale_temp_stores();
            if c.is_empty() && stores == 0 {
                outln!("nothing to clean up");
            } else {
                outln!("cleaned up: {c}, {stores} temporary recordings of killed checks");
            }
            Ok(())
        }
    }
}

fn list(json: bool, markdown: bool) -> Result<()> {
    if json {
        // JSON Lines: one scenario per line (docs/JSON.md).
        for s in SCENARIOS {
            outln!(
                "{}",
                crate::jsonout::versioned(json!({
                    "name": s.name, "mirrors": s.mirrors, "reproduces": s.reproduces,
                    "signals": s.signals, "bounds": s.bounds, "control": s.control,
                    "expected_rule": s.expected_rule, "expected_roots": s.expected_roots,
                    "controllers": s.controllers,
                    "default_duration_s": s.default_duration.as_secs(),
                }))
            );
        }
        return Ok(());
    }
    if markdown {
        // Series templates such as `proc.<pid>.<comm>` would read as HTML tags.
        let md = |t: &str| t.replace('<', "&lt;").replace('>', "&gt;");
        for s in SCENARIOS {
            outln!(
                "### `{}`{}\n",
                s.name,
                if s.control { " (control)" } else { "" }
            );
            outln!("- **Mirrors**: {}", md(s.mirrors));
            outln!("- **Reproduces**: {}", md(s.reproduces));
            outln!("- **Signals**: {}", md(s.signals));
            outln!("- **Bounds**: {}", md(s.bounds));
            outln!(
                "- **Default duration**: {}",
                fmt_duration(s.default_duration)
            );
            let links: Vec<String> = s
                .expected_links
                .iter()
                .map(|(_, e)| format!(", which must cause `{e}`"))
                .collect();
            match s.expected_rule {
                Some(_) if !s.expected_roots.is_empty() => {
                    let roots: Vec<String> =
                        s.expected_roots.iter().map(|r| format!("`{r}`")).collect();
                    outln!(
                        "- **Expected findings**: {}, each a root with its culprit in its own cgroup, neither chained under the other\n",
                        roots.join(" and ")
                    )
                }
                Some(r) => outln!("- **Expected finding**: `{r}` first{}\n", links.concat()),
                None => outln!(
                    "- **Expected finding**: none (no mechanism rule may claim a cause: advice below 0.5 at most)\n"
                ),
            }
        }
        return Ok(());
    }
    for s in SCENARIOS {
        outln!("{}{}", s.name, if s.control { "  (control)" } else { "" });
        outln!("  mirrors:    {}", s.mirrors);
        outln!("  reproduces: {}", s.reproduces);
        outln!("  signals:    {}", s.signals);
        outln!("  bounds:     {}", s.bounds);
        outln!(
            "  duration:   {} unless --duration",
            fmt_duration(s.default_duration)
        );
        outln!();
    }
    Ok(())
}

/// The scenario and the background load it runs beside, if any.
fn validate(r: &RunArgs) -> Result<(&'static Scenario, Option<&'static Scenario>, Duration)> {
    let s = jitterscope_lab::find(&r.scenario)?;
    let duration = r.duration.unwrap_or(s.default_duration);
    let beside = match r.beside.as_deref() {
        None => None,
        Some(b) => {
            let b = jitterscope_lab::find(b)?;
            if !b.control {
                bail!(
                    "--beside {} is not a control scenario: only benign load (soak, \
                     cpu-saturation, idle) can run beside another",
                    b.name
                );
            }
            if b.name == s.name {
                bail!("--beside {} is the scenario itself", b.name);
            }
            Some(b)
        }
    };
    if duration < Duration::from_secs(1) || duration > MAX_DURATION {
        bail!(
            "--duration {} is outside 1s..{}",
            fmt_duration(duration),
            fmt_duration(MAX_DURATION)
        );
    }
    Ok((s, beside, duration))
}

fn progress(line: &str) {
    errln!("lab: {line}");
}

/// The temporary store of a running `lab check`, removed on every way out (`process::exit`
/// skips destructors).
static TEMP_STORE: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

fn remove_temp_store() {
    let taken = TEMP_STORE.lock().map(|mut g| g.take()).unwrap_or(None);
    if let Some(p) = taken {
        let _ = std::fs::remove_dir_all(p);
    }
}

/// Temporary stores are `jitterscope-lab-check-<pid>` in the temporary directory.
const TEMP_PREFIX: &str = "jitterscope-lab-check-";

/// Removes the temporary stores of `lab check` runs that were killed (their pid is gone).
fn remove_stale_temp_stores() -> usize {
    let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) else {
        return 0;
    };
    let mut n = 0;
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(TEMP_PREFIX)
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() && std::fs::remove_dir_all(e.path()).is_ok()
        {
            n += 1;
        }
    }
    n
}

/// An error caused by a stop signal (set-up cut short) exits 128 + signal after saying so;
/// other errors pass through.
fn exit_if_stopped(e: anyhow::Error) -> anyhow::Error {
    if let Some(sig) = stop::signal() {
        remove_temp_store();
        progress(&format!("interrupted: {e:#}"));
        std::process::exit(128 + sig);
    }
    e
}

/// After cleanup, a run cut short by a signal exits 128 + signal, as a shell would.
fn exit_interrupted(o: &Outcome) -> ! {
    remove_temp_store();
    progress(&format!("interrupted; cleaned up: {}", o.cleaned));
    std::process::exit(128 + stop::signal().unwrap_or(libc::SIGINT));
}

fn run_one(r: RunArgs) -> Result<()> {
    let (s, beside, duration) = validate(&r)?;
    stop::install();
    let o = jitterscope_lab::run(s, beside, r.intensity.into(), duration, &mut |l| {
        progress(l)
    })
    .map_err(exit_if_stopped)?;
    if o.interrupted {
        exit_interrupted(&o);
    }
    if r.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&crate::jsonout::versioned_of(&o)?)?
        );
    } else {
        print_workers(&o);
        outln!("cleaned up: {}", o.cleaned);
    }
    Ok(())
}

fn print_workers(o: &Outcome) {
    for w in &o.workers {
        outln!("{} (pid {}): {}", w.role, w.pid, w.report);
    }
}

/// The recorder `check` runs: this binary, into the check's store, stopped with SIGTERM.
struct Recorder {
    child: Child,
    stderr: std::thread::JoinHandle<String>,
}

impl Recorder {
    fn start(dir: &Path, more: &[&str]) -> Result<Self> {
        let exe = std::env::current_exe().context("cannot find this executable")?;
        let mut cmd = Command::new(exe);
        // Nor from the environment: no exporter, and no host name of the fleet's.
        for (k, _) in std::env::vars_os() {
            if k.to_str().is_some_and(|k| {
                k.starts_with("JITTERSCOPE_REMOTE_WRITE")
                    || k.starts_with("JITTERSCOPE_CLICKHOUSE")
                    || k == "JITTERSCOPE_HOST"
                    || k == "JITTERSCOPE_FLEET_HOST"
            }) {
                cmd.env_remove(k);
            }
        }
        cmd.args(["record", "--interval", "1s", "--dir"])
            .arg(dir)
            .args(more)
            // The lab's recording checks this kernel; it is not the host's data. Under the
            // host's configuration it would be sent to the fleet's engines under the host's
            // name, beside the real recorder's seconds.
            .env("JITTERSCOPE_CONFIG", "/dev/null")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // Its own group: a terminal's Ctrl-C reaches the lab, which stops it in order.
            .process_group(0);
        // SAFETY: prctl only, between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                // If the check dies, the recorder stops cleanly (SIGTERM flushes the store).
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong);
                Ok(())
            });
        }
        let mut child = cmd.spawn().context("cannot start the recorder")?;
        let mut err = child.stderr.take().expect("piped");
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        Ok(Recorder { child, stderr })
    }

    /// Samples in the store so far (0 while it does not exist yet).
    fn samples(dir: &Path) -> Vec<i64> {
        let Ok(r) = Reader::open(dir) else {
            return Vec::new();
        };
        let Ok(range) = r.range_main(i64::MIN, i64::MAX) else {
            return Vec::new();
        };
        range.filter_map(|r| r.ok().map(|r| r.ts_ns)).collect()
    }

    /// Waits until `ok(samples)` holds; fails if the recorder exits or `timeout` passes.
    fn wait_for(
        &mut self,
        dir: &Path,
        timeout: Duration,
        ok: impl Fn(&[i64]) -> bool,
    ) -> Result<Vec<i64>> {
        let deadline = Instant::now() + timeout;
        loop {
            let ts = Self::samples(dir);
            if ok(&ts) {
                return Ok(ts);
            }
            if let Some(st) = self.child.try_wait()? {
                bail!("the recorder exited ({st}) before the check could use it");
            }
            if Instant::now() > deadline {
                bail!(
                    "the recorder wrote {} samples in {:?}; expected more",
                    ts.len(),
                    timeout
                );
            }
            if stop::requested() {
                bail!("interrupted");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM, wait (kill after 15 s); returns its stderr.
    fn stop(mut self) -> String {
        // SAFETY: signalling our own unreaped child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(15);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stderr.join().unwrap_or_default()
    }
}

/// A store directory for the check: the user's (kept) or a fresh temporary one (removed).
struct StoreDir {
    path: PathBuf,
    temporary: bool,
}

impl Drop for StoreDir {
    fn drop(&mut self) {
        if self.temporary {
            remove_temp_store();
        }
    }
}

fn check(c: CheckArgs) -> Result<()> {
    let (s, beside, duration) = validate(&c.run)?;
    jitterscope_lab::sandbox::require_root("`jitterscope lab check`")?;
    stop::install();
    let store = match c.dir {
        Some(d) => StoreDir {
            path: d,
            temporary: false,
        },
        None => {
            let p = std::env::temp_dir().join(format!("{TEMP_PREFIX}{}", std::process::id()));
            std::fs::create_dir_all(&p)
                .with_context(|| format!("cannot create {}", p.display()))?;
            *TEMP_STORE.lock().unwrap_or_else(|e| e.into_inner()) = Some(p.clone());
            StoreDir {
                path: p,
                temporary: true,
            }
        }
    };
    let mut rec = Recorder::start(&store.path, s.record_args)?;
    // Three samples: the first has no rates, the next two are the baseline. Beside a load,
    // the baseline comes from the seconds the load runs alone, and one sample will do.
    let first = if beside.is_some() { 1 } else { 3 };
    let baseline_from =
        match rec.wait_for(&store.path, Duration::from_secs(30), |t| t.len() >= first) {
            Ok(ts) => ts[0],
            Err(e) => {
                let err = rec.stop();
                bail!("{e}: {}", err.trim().replace('\n', " | "));
            }
        };
    progress(&format!("recording into {}", store.path.display()));
    let outcome = jitterscope_lab::run(s, beside, c.run.intensity.into(), duration, &mut |l| {
        progress(l)
    });
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            rec.stop();
            return Err(exit_if_stopped(e));
        }
    };
    if outcome.interrupted {
        rec.stop();
        exit_interrupted(&outcome);
    }
    // The sample after the workload stopped covers its last second.
    let tail = outcome.active_to_ns + 1_100_000_000;
    let waited = rec.wait_for(&store.path, Duration::from_secs(15), |t| {
        t.last().is_some_and(|&l| l >= tail)
    });
    let rec_err = rec.stop();
    waited?;
    // Beside a load, the baseline is the busy host's, not the idle seconds before the load.
    let baseline_from = outcome.load_from_ns.unwrap_or(baseline_from);
    let windows = Windows {
        baseline: (baseline_from, outcome.setup_from_ns),
        active: (outcome.active_from_ns, tail),
    };
    let (results, damaged) = evaluate(&store.path, &outcome.checks, windows)?;
    if let Some(note) = damaged.note() {
        errln!("jitterscope: lab check: the recording's read {note}");
    }
    let signature_pass = results.iter().all(|r| r.pass);
    // Diagnose the workload's window against the baseline recorded before it.
    let report = jitterscope_diagnose::diagnose(
        &store.path,
        windows.active.0,
        windows.active.1,
        jitterscope_diagnose::Options {
            lookback_ns: windows.active.0 - baseline_from + 1_000_000_000,
        },
    )?;
    let verdict = Verdict::of(
        s,
        &report,
        outcome.culprit_cgroup.as_deref(),
        outcome.culprit_comm,
        &outcome.roots,
        beside.map(|b| b.name),
    );
    // The episodes of the workload's window, flagged where the recorder marked them live.
    let (episodes, _) =
        jitterscope_diagnose::events(&store.path, windows.active.0, windows.active.1)?;
    let pass = signature_pass && verdict.pass;
    let trouble: Vec<&str> = rec_err
        .lines()
        .filter(|l| l.starts_with("jitterscope: error") || l.contains("panicked"))
        .collect();
    if c.run.json {
        let v = json!({
            "scenario": outcome.scenario,
            "beside": beside.map(|b| b.name),
            "intensity": outcome.intensity,
            "duration_s": outcome.duration_s,
            "store": (!store.temporary).then(|| store.path.display().to_string()),
            "windows": windows,
            "checks": results,
            "pass": pass,
            "signature_pass": signature_pass,
            "damaged": damaged,
            "diagnosis": {
                "expected_rule": s.expected_rule,
                "expected_links": s.expected_links,
                "expected_culprit_cgroup": outcome.culprit_cgroup,
                "expected_culprit_comm": outcome.culprit_comm,
                "expected_roots": outcome.roots,
                "first_rule": verdict.first,
                "problems": verdict.problems,
                "mechanism_rules": verdict.mechanisms,
                "pass": verdict.pass,
                "report": report,
            },
            "events": episodes,
            "memleak": outcome.memleak,
            "notes": outcome.notes,
            "workers": outcome.workers,
            "recorder_errors": trouble,
            "cleaned": outcome.cleaned,
        });
        outln!(
            "{}",
            serde_json::to_string_pretty(&crate::jsonout::versioned(v))?
        );
    } else {
        print_check(s, &outcome, &results, windows, &store, &trouble);
        if let Some(m) = &outcome.memleak {
            match (m["verdict"].as_str(), m["error"].as_str()) {
                (Some(v), _) => {
                    outln!("memleak on the leaking worker: {v}");
                    if let Some(s) = m["strings"].get(0) {
                        outln!(
                            "  the string that piles up most: {} ({} -> {})",
                            s["string"],
                            s["before"],
                            s["after"]
                        );
                    }
                }
                (None, Some(e)) => outln!("memleak on the leaking worker failed: {e}"),
                _ => {}
            }
        }
        for e in &episodes {
            outln!(
                "episode {} on {} (peak {:.1}){}",
                e.id,
                e.series,
                e.peak,
                if e.online {
                    ", marked live by the recorder"
                } else {
                    ""
                }
            );
        }
        out!("{}", jitterscope_diagnose::text::render(&report));
        outln!("{}", verdict.line(s));
    }
    if !signature_pass {
        let failed = results.iter().filter(|r| !r.pass).count();
        bail!(
            "{}: signature not found in the recording ({failed} of {} checks failed)",
            s.name,
            results.len()
        );
    }
    if !verdict.pass {
        bail!("{}: {}", s.name, verdict.line(s));
    }
    Ok(())
}

/// Confidence from which a finding claims a cause rather than advises.
const CLAIM: f64 = 0.5;

/// Whether the diagnosis named what the scenario reproduces: its rule ranked first, with the
/// cause links it must make and the culprit's cgroup it must name; for a control, no
/// mechanism rule at [`CLAIM`] or above.
struct Verdict {
    first: Option<&'static str>,
    mechanisms: Vec<&'static str>,
    /// What is wrong beyond the first rule: a missing link, the wrong culprit cgroup.
    problems: Vec<String>,
    pass: bool,
}

impl Verdict {
    fn of(
        s: &Scenario,
        r: &jitterscope_diagnose::Report,
        cgroup: Option<&str>,
        comm: Option<&str>,
        roots: &[(&'static str, String)],
        beside: Option<&str>,
    ) -> Self {
        // Beside a load, the load's own findings (a saturated CPU, an SQLite's look-ups: the
        // busy host) may rank anywhere; what the scenario reproduces must rank first among
        // the rest. A claim that blames the load is a problem of its own (below).
        let load = beside.map(|b| format!("/{}/{b}", jitterscope_lab::sandbox::PARENT));
        let in_load = |f: &&jitterscope_diagnose::Finding| {
            let cg = f.culprit.cgroup.as_deref().unwrap_or("");
            load.as_deref().is_some_and(|l| {
                cg == l || cg.strip_prefix(l).is_some_and(|rest| rest.starts_with('/'))
            })
        };
        let ours: Vec<&jitterscope_diagnose::Finding> =
            r.findings.iter().filter(|f| !in_load(f)).collect();
        let first = ours.first().map(|f| f.rule_id);
        // A control passes when no mechanism rule claims a cause: advice below 0.5 (a growth
        // too young to tell from a warm-up) is allowed on a busy host, a claim is not.
        let mechanisms: Vec<&'static str> = r
            .findings
            .iter()
            .filter(|f| f.mechanism && f.confidence >= CLAIM)
            .map(|f| f.rule_id)
            .collect();
        let mut problems = Vec::new();
        for (cause, effect) in s.expected_links {
            let linked = r
                .findings
                .iter()
                .any(|f| f.rule_id == *cause && f.causes.iter().any(|l| l.rule_id == *effect));
            if !linked {
                problems.push(format!("no link {cause} → {effect}"));
            }
        }
        if let (Some(want), Some(f)) = (cgroup, ours.first()) {
            if f.culprit.cgroup.as_deref() != Some(want) {
                problems.push(format!(
                    "culprit cgroup {} instead of {want}",
                    f.culprit.cgroup.as_deref().unwrap_or("(none)")
                ));
            }
        }
        if let (Some(want), Some(f)) = (comm, ours.first()) {
            if f.culprit.comm.as_deref() != Some(want) {
                problems.push(format!(
                    "culprit {} instead of {want}",
                    f.culprit.comm.as_deref().unwrap_or("(none)")
                ));
            }
        }
        // Several incidents at once: each a root, with its culprit in its own cgroup; the
        // first may be either.
        for rule in s.expected_roots {
            if !roots.iter().any(|(r, _)| r == rule) {
                problems.push(format!("the scenario did not say where {rule} happens"));
            }
        }
        for (rule, cg) in roots {
            let root = r
                .findings
                .iter()
                .find(|f| f.rule_id == *rule && f.culprit.cgroup.as_deref() == Some(cg.as_str()));
            match root {
                None => problems.push(format!("no {rule} finding with its culprit in {cg}")),
                Some(f) if !f.caused_by.is_empty() => problems.push(format!(
                    "{rule} in {cg} is chained under {}",
                    f.caused_by[0].rule_id
                )),
                Some(_) => {}
            }
        }
        // The background load is a busy, healthy host: a claim with its culprit there is a
        // false alarm, whatever the scenario beside it does.
        for f in r
            .findings
            .iter()
            .filter(|f| f.mechanism && f.confidence >= CLAIM)
        {
            if in_load(&f) {
                problems.push(format!(
                    "{} at {:.2} blames the background load ({})",
                    f.rule_id,
                    f.confidence,
                    f.culprit.cgroup.as_deref().unwrap_or("")
                ));
            }
        }
        let first_ok = |rule: &str| match roots.is_empty() {
            true => first == Some(rule),
            false => roots.iter().any(|(r, _)| first == Some(*r)),
        };
        let pass = match s.expected_rule {
            Some(rule) => first_ok(rule) && problems.is_empty(),
            None => mechanisms.is_empty() && problems.is_empty(),
        };
        Verdict {
            first,
            mechanisms,
            problems,
            pass,
        }
    }

    fn line(&self, s: &Scenario) -> String {
        match (s.expected_rule, self.pass) {
            (Some(rule), true) => {
                let mut l = format!("diagnosis: PASS — {rule} ranked first");
                for (c, e) in s.expected_links {
                    l.push_str(&format!(", {c} → {e} linked"));
                }
                l
            }
            (Some(rule), false) if self.first == Some(rule) => format!(
                "diagnosis: FAIL — {rule} ranked first, but: {}",
                self.problems.join("; ")
            ),
            (Some(rule), false) => format!(
                "diagnosis: FAIL — expected {rule} first, got {}",
                self.first.unwrap_or("no finding")
            ),
            (None, true) => "diagnosis: PASS — no mechanism rule fired on the control".into(),
            (None, false) => format!(
                "diagnosis: FAIL — mechanism rules fired on the control: {}",
                self.mechanisms.join(", ")
            ),
        }
    }
}

fn print_check(
    s: &Scenario,
    o: &Outcome,
    results: &[CheckResult],
    w: Windows,
    store: &StoreDir,
    trouble: &[&str],
) {
    outln!(
        "{}: {:?} intensity, {} of workload from {} to {}",
        s.name,
        o.intensity,
        fmt_duration(Duration::from_secs_f64(o.duration_s)),
        rfc3339(w.active.0),
        rfc3339(o.active_to_ns)
    );
    outln!("signature:");
    for r in results {
        outln!("  {}", r.line());
    }
    outln!("workers:");
    for wr in &o.workers {
        outln!("  {} (pid {}): {}", wr.role, wr.pid, wr.report);
    }
    for t in trouble {
        outln!("recorder: {t}");
    }
    if !store.temporary {
        outln!("recording kept in {}", store.path.display());
    }
    outln!("cleaned up: {}", o.cleaned);
    let passed = results.iter().filter(|r| r.pass).count();
    outln!(
        "signature {}: {passed}/{} checks passed",
        if passed == results.len() {
            "PASS"
        } else {
            "FAIL"
        },
        results.len()
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use jitterscope_diagnose::chain::CONSEQUENCES;
    use jitterscope_diagnose::rules::RULES;

    /// The lab cannot name rules by handle (it does not depend on the analysis crate): every
    /// rule id a scenario expects is checked here, where both are known, so a renamed rule
    /// fails this test rather than only a privileged `lab check`.
    #[test]
    fn every_rule_a_scenario_expects_exists_and_every_link_it_expects_can_form() {
        let known = |id: &str| RULES.iter().any(|r| r.id == id);
        for s in SCENARIOS {
            for id in s.expected_rule.iter().chain(s.expected_roots) {
                assert!(known(id), "{}: no rule {id}", s.name);
            }
            for (cause, effect) in s.expected_links {
                assert!(
                    known(cause) && known(effect),
                    "{}: {cause} → {effect}",
                    s.name
                );
                assert!(
                    CONSEQUENCES
                        .iter()
                        .any(|(c, e, _)| c.id == *cause && e.id == *effect),
                    "{}: {cause} → {effect} is not a known consequence",
                    s.name
                );
            }
        }
    }
}
