//! Helpers shared by the integration tests: running the binary with a deadline, guards that kill
//! children on every exit path and small parsers for `dump` output. Skips are reported with
//! `jitterscope_testkit::skip`.

// Each test file is its own crate and uses only some of these helpers; without this, every file
// would warn about the ones it does not use (and clippy runs with -D warnings).
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_jitterscope")
}

/// A command for the binary with an environment that cannot leak into the test: no inherited
/// store directory or configuration file, and backtraces on so a panic would be unmistakable in stderr.
pub fn cmd() -> Command {
    let mut c = Command::new(bin());
    // An empty configuration file: a host's /etc/jitterscope/jitterscope.toml must not change
    // what the tests run.
    c.env_remove("JITTERSCOPE_DIR")
        .env("JITTERSCOPE_CONFIG", "/dev/null")
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null());
    c
}

/// A child process killed and reaped when dropped, so a failed assertion never leaves a recorder
/// or a busy loop running.
pub struct ChildGuard {
    child: Option<Child>,
}

impl ChildGuard {
    /// Wraps a spawned child.
    pub fn new(child: Child) -> Self {
        ChildGuard { child: Some(child) }
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("child present").id()
    }

    /// Exit status if it has exited, without blocking.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .expect("child present")
            .try_wait()
            .expect("try_wait")
    }

    /// Sends `sig` to the child.
    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on the pid of a child we have not reaped yet, so it cannot be reused.
        let r = unsafe { libc::kill(self.pid() as libc::pid_t, sig) };
        assert_eq!(r, 0, "kill({}, {sig}) failed", self.pid());
    }

    /// Waits up to `timeout` for the child to exit; `None` if it is still running.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.try_wait() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Takes the child out of the guard (the caller now owns its cleanup).
    pub fn into_inner(mut self) -> Child {
        self.child.take().expect("child present")
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // Already exited (and reaped by try_wait) is fine: kill then fails harmlessly.
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs the binary with `args`, capturing stdout and stderr; panics (after killing it) if it
/// has not finished within `timeout`, so a hung command fails the test instead of hanging CI.
pub fn run(args: &[&str], timeout: Duration) -> Output {
    let mut c = cmd();
    c.args(args);
    run_command(c, timeout)
}

/// [`run`] for a command built by the caller.
pub fn run_command(mut c: Command, timeout: Duration) -> Output {
    let args: Vec<String> = c
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn jitterscope");
    let mut guard = ChildGuard::new(child);
    let child = guard.child.as_mut().expect("child present");
    // Drained on threads so a full pipe cannot block the child while we wait for it.
    let mut out = child.stdout.take().expect("stdout piped");
    let mut err = child.stderr.take().expect("stderr piped");
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let status = guard.wait_timeout(timeout);
    let Some(status) = status else {
        drop(guard);
        panic!("jitterscope {args:?} did not finish within {timeout:?}");
    };
    Output {
        status,
        stdout: t_out.join().expect("stdout reader"),
        stderr: t_err.join().expect("stderr reader"),
    }
}

/// Text of a captured stream.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Now as an RFC 3339 argument for `--from`/`--to`, with nanoseconds so a boundary taken just
/// before or after a run is exact.
pub fn now_arg() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

/// One CSV row of `dump`: `time,series,value,unit`.
#[derive(Debug, Clone)]
pub struct Row {
    pub time: String,
    pub series: String,
    pub value: Option<f64>,
    pub unit: String,
}

/// Parses `dump --format csv` output (header checked). Series names are the only field that can
/// need quoting, so value and unit are split off the right and time off the left.
pub fn parse_csv(out: &str) -> Vec<Row> {
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("time,series,value,unit"), "csv header");
    lines
        .map(|l| {
            let mut right = l.rsplitn(3, ',');
            let unit = right.next().expect("unit").to_string();
            let value = right.next().expect("value");
            let rest = right.next().expect("time,series");
            let (time, series) = rest.split_once(',').expect("time,series");
            let series = series
                .strip_prefix('"')
                .and_then(|s| s.strip_suffix('"'))
                .map_or_else(|| series.to_string(), |s| s.replace("\"\"", "\""));
            Row {
                time: time.to_string(),
                series,
                value: if value.is_empty() {
                    None
                } else {
                    Some(value.parse().unwrap_or_else(|_| panic!("value in {l:?}")))
                },
                unit,
            }
        })
        .collect()
}

/// Parses `dump --format json` output: one object per sample line.
pub fn parse_json_lines(out: &str) -> Vec<serde_json::Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect()
}

/// Known values of `series` across the JSON lines of a dump.
pub fn json_values(lines: &[serde_json::Value], series: &str) -> Vec<f64> {
    lines
        .iter()
        .filter_map(|l| l["values"].get(series))
        .filter_map(|v| v.as_f64())
        .collect()
}

/// Median of a non-empty list (diagnosis's own).
pub fn median(v: &[f64]) -> f64 {
    assert!(!v.is_empty(), "median of nothing");
    jitterscope_diagnose::data::median(&mut v.to_vec())
}

/// Lines of a dump's stderr that suggest it read damaged or undecodable data.
pub fn trouble_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("undecodable") || l.contains("error") || l.contains("panicked")
        })
        .collect()
}

/// Counts samples in a store with `dump --format json` (one line per sample; every sample has
/// the recorder's own `self.collect_ms`). Asserts the dump succeeded without complaints. A store
/// a just-started recorder has not created yet, or one with no sample yet, holds 0 samples (a
/// loaded host takes longer than the first poll to get there).
pub fn count_samples(dir: &Path, from: &str, to: &str) -> usize {
    if !dir.is_dir() {
        return 0;
    }
    let d = dir.to_str().expect("utf-8 path");
    let o = run(
        &[
            "dump",
            "--dir",
            d,
            "--from",
            from,
            "--to",
            to,
            "--select",
            "self.collect_ms",
            "--format",
            "json",
        ],
        Duration::from_secs(30),
    );
    let err = text(&o.stderr);
    // No sample in the window yet is its own status (3), with that one line.
    if o.status.code() == Some(3)
        && err.trim().lines().count() == 1
        && err.contains("no samples between")
    {
        assert!(text(&o.stdout).trim().is_empty(), "{}", text(&o.stdout));
        return 0;
    }
    assert!(o.status.success(), "dump failed: {err}");
    assert!(trouble_lines(&err).is_empty(), "dump complained: {err}");
    let lines = parse_json_lines(&text(&o.stdout));
    for l in &lines {
        assert!(
            l["values"]["self.collect_ms"].is_number(),
            "sample without self.collect_ms: {l}"
        );
    }
    lines.len()
}

/// Store damage as seen by the store crate, after decoding every payload with the model codec.
pub struct StoreCheck {
    pub records: u64,
    pub stats: jitterscope_store::RangeStats,
}

/// Reads the whole store with the store crate and decodes every payload; panics on a segment
/// error or an undecodable payload.
pub fn check_store(dir: &Path) -> StoreCheck {
    let reader = jitterscope_store::Reader::open(dir).expect("open store");
    let mut range = reader.range(i64::MIN, i64::MAX).expect("range");
    let mut records = 0;
    for rec in &mut range {
        let rec = rec.expect("segment readable");
        let s = jitterscope_model::codec::decode_lanes(
            &rec.payload,
            rec.detail.as_deref(),
            jitterscope_model::codec::Parts::ALL,
        )
        .unwrap_or_else(|e| panic!("payload at {} undecodable: {e}", rec.ts_ns));
        assert_eq!(s.ts_ns, rec.ts_ns, "payload and record disagree on time");
        records += 1;
    }
    StoreCheck {
        records,
        stats: range.stats(),
    }
}

/// A path as `&str` for arguments (test paths are always UTF-8).
pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The workspace root (the fixtures live under `tests/fixtures` there).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A copy of the binary that `nobody` may execute (the build directory may be closed to it),
/// in a directory `nobody` cannot write; removed when dropped.
pub struct NobodyBin {
    _dir: tempfile::TempDir,
    exe: PathBuf,
}

impl NobodyBin {
    /// Copies the binary.
    pub fn new() -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("jitterscope-nobody")
            .tempdir()
            .unwrap();
        let exe = dir.path().join("jitterscope");
        std::fs::copy(bin(), &exe).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        NobodyBin { _dir: dir, exe }
    }

    /// Runs it as uid and gid 65534 (`nobody`).
    pub fn run(&self, args: &[&str]) -> Output {
        self.run_for(args, Duration::from_secs(600))
    }

    /// Runs it as `nobody`, failing the test if it has not finished within `timeout` (a
    /// command that should refuse to start would otherwise hang the test when it starts).
    pub fn run_for(&self, args: &[&str], timeout: Duration) -> Output {
        use std::os::unix::process::CommandExt;
        let mut c = Command::new(&self.exe);
        c.args(args)
            .env_remove("JITTERSCOPE_DIR")
            .uid(65534)
            .gid(65534)
            .stdin(Stdio::null());
        run_command(c, timeout)
    }
}

/// The command of a cheap `record` into `dir` every second: no tracers, profiler or priority
/// changes, so any user can run it.
pub fn recorder_cmd(dir: &Path) -> Command {
    let mut c = cmd();
    c.args([
        "record",
        "--no-tracers",
        "--profile-hz",
        "0",
        "--no-mlock",
        "--nice",
        "0",
    ])
    .arg("--dir")
    .arg(dir);
    c
}

/// `record` into `dir` (see [`recorder_cmd`]), stopped when dropped.
pub fn recorder(dir: &Path) -> ChildGuard {
    let child = recorder_cmd(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("record starts");
    ChildGuard::new(child)
}

/// `record` into `dir` as shipped but for the stack sampler and the memory lock: with the BPF
/// tracers (where this host can load them).
pub fn traced_recorder_cmd(dir: &Path) -> Command {
    let mut c = cmd();
    c.args([
        "record",
        "--profile-hz",
        "0",
        "--no-mlock",
        "--nice",
        "0",
        "--dir",
    ])
    .arg(dir);
    c
}

/// `jitterscope serve` over `dir` on a free loopback port with `extra` arguments, waited for
/// until it accepts connections.
pub fn serve(dir: &Path, extra: &[&str]) -> (ChildGuard, std::net::SocketAddr) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let child = cmd()
        .arg("serve")
        .arg("--dir")
        .arg(dir)
        .args(["--listen", &addr.to_string()])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let g = ChildGuard::new(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "serve did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    (g, addr)
}

/// Runs one test of a file at a time: for tests that measure (sample counts, perf side by
/// side) or share host-wide state (cgroups, tracers), which libtest's parallel threads would
/// otherwise starve or disturb. Each test binary has its own lock.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// `GET path` from a server on `addr`: its status and body, whatever the status.
pub fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(60)))
        .http_status_as_error(false)
        .build()
        .into();
    let mut r = agent.get(&format!("http://{addr}{path}")).call().unwrap();
    let status = r.status().as_u16();
    (status, r.body_mut().read_to_string().unwrap_or_default())
}

/// A recorded lab check under tests/fixtures/diagnose: its store directory and its workload's
/// window as epoch seconds, `[from, to)`.
pub fn lab_recording(name: &str) -> (String, i64, i64) {
    let root = workspace_root().join("tests/fixtures/diagnose");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(format!("{name}.json"))).unwrap())
            .unwrap();
    let secs = |i: usize| v["windows"]["active"][i].as_i64().unwrap() / 1_000_000_000;
    (root.join(name).display().to_string(), secs(0), secs(1) + 1)
}

/// Checks `v` against `docs/schema/<name>.schema.json` (the JSON contract, docs/JSON.md) and
/// panics naming each violation with where it is, so an output that drifts from its published
/// schema fails the test that produced it.
pub fn check_schema(name: &str, v: &serde_json::Value) {
    let path = workspace_root()
        .join("docs/schema")
        .join(format!("{name}.schema.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let schema: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()));
    let validator = jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&schema)
        .unwrap_or_else(|e| panic!("{}: not a valid schema: {e}", path.display()));
    let errors: Vec<String> = validator
        .iter_errors(v)
        .take(20)
        .map(|e| format!("  at {}: {e}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "output does not match {}:\n{}\n{}",
        path.display(),
        errors.join("\n"),
        serde_json::to_string(v)
            .unwrap_or_default()
            .chars()
            .take(2000)
            .collect::<String>()
    );
}

/// [`check_schema`] for each line of a JSON Lines output; returns the parsed lines.
pub fn check_schema_lines(name: &str, out: &str) -> Vec<serde_json::Value> {
    let lines = parse_json_lines(out);
    for l in &lines {
        check_schema(name, l);
    }
    lines
}

/// The names of the entries of directory `d`, sorted.
pub fn names_in(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Headless Chromium on `url` with `args` (`--dump-dom`, `--screenshot=…`), bounded at two
/// minutes; the page's scripts get 20 s of virtual time, the window is 1400×1700.
pub fn chromium(args: &[&str], url: &str) -> Output {
    Command::new("timeout")
        .args([
            "120",
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
        ])
        .args([
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--no-first-run",
        ])
        .args(["--virtual-time-budget=20000", "--window-size=1400,1700"])
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .expect("chromium runs")
}
