//! End to end on the live host: a busy loop in a cgroup with a 20% CPU quota is throttled in
//! nearly every enforcement period, and `record` then `dump` must show exactly that, under the
//! cgroup's own path, in all three output formats.
//!
//! Needs root and a writable cgroup hierarchy with the cpu controller (v1, or v2 with `cpu` in
//! `cgroup.controllers`); otherwise it prints `SKIPPED:` and returns (fails under
//! `JITTERSCOPE_REQUIRE_PRIVILEGED=1`, as in CI).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{
    json_values, median, now_arg, parse_csv, parse_json_lines, run, s, text, trouble_lines,
    ChildGuard,
};
use jitterscope_testkit::{is_root, skip};

const PERIOD_US: u64 = 100_000;
const QUOTA_US: u64 = 20_000;

/// Where the cpu controller lives on this host.
enum Layout {
    /// v1: the cpu hierarchy, and cpuacct's when mounted separately (usage comes from
    /// cpuacct.usage, so the test cgroup must exist there too, under the same path).
    V1 {
        cpu: PathBuf,
        cpuacct: Option<PathBuf>,
    },
    /// v2: a cgroup2 mount whose root offers the cpu controller.
    V2 { root: PathBuf },
}

fn detect() -> Result<Layout, String> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").map_err(|e| e.to_string())?;
    let mut v1_cpu = None;
    let mut v1_cpuacct = None;
    let mut v2 = None;
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [_, path, fstype, opts, ..] = f[..] else {
            continue;
        };
        let opts: Vec<&str> = opts.split(',').collect();
        match fstype {
            "cgroup" if opts.contains(&"cpu") => v1_cpu = Some(PathBuf::from(path)),
            "cgroup" if opts.contains(&"cpuacct") => v1_cpuacct = Some(PathBuf::from(path)),
            "cgroup2" => {
                let controllers =
                    std::fs::read_to_string(Path::new(path).join("cgroup.controllers"))
                        .unwrap_or_default();
                if controllers.split_whitespace().any(|c| c == "cpu") {
                    v2 = Some(PathBuf::from(path));
                }
            }
            _ => {}
        }
    }
    // A controller is bound to one hierarchy only, so at most one of these has it.
    match (v1_cpu, v2) {
        (Some(cpu), _) => Ok(Layout::V1 {
            cpu,
            cpuacct: v1_cpuacct,
        }),
        (None, Some(root)) => Ok(Layout::V2 { root }),
        (None, None) => Err("no cgroup hierarchy with the cpu controller is mounted".into()),
    }
}

/// The test cgroup(s) and the busy loop inside. Dropping kills the loop first (a cgroup with a
/// task cannot be removed), then removes the cgroups and undoes a subtree_control change.
struct ThrottledCgroup {
    /// Path of the cgroup as the recorder names it (`/jitterscope-test-<pid>`).
    path: String,
    dirs: Vec<PathBuf>,
    spinner: Option<ChildGuard>,
    /// v2 subtree_control file where this test enabled `cpu` (it was off before).
    enabled_cpu_in: Option<PathBuf>,
}

impl Drop for ThrottledCgroup {
    fn drop(&mut self) {
        drop(self.spinner.take());
        for d in self.dirs.iter().rev() {
            // The killed task leaves the cgroup asynchronously; rmdir is EBUSY until it has.
            for _ in 0..100 {
                if std::fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if d.exists() {
                let _ = std::io::Write::write_all(
                    &mut std::io::stderr(),
                    format!("warning: could not remove test cgroup {}\n", d.display()).as_bytes(),
                );
            }
        }
        if let Some(f) = &self.enabled_cpu_in {
            let _ = std::fs::write(f, "-cpu");
        }
    }
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value)
        .map_err(|e| format!("cannot write {value:?} to {}: {e}", path.display()))
}

/// Creates the 20%-quota cgroup and starts a busy loop in it; `Err` is a reason to skip.
fn setup() -> Result<ThrottledCgroup, String> {
    // Named as systemd names a service's cgroup, so its owner is recognised (and exported).
    let name = format!("jitterscope-test-{}.service", std::process::id());
    let mut cg = ThrottledCgroup {
        path: format!("/{name}"),
        dirs: Vec::new(),
        spinner: None,
        enabled_cpu_in: None,
    };
    let mkdir = |cg: &mut ThrottledCgroup, parent: &Path| -> Result<PathBuf, String> {
        let d = parent.join(&name);
        std::fs::create_dir(&d)
            .map_err(|e| format!("cannot create cgroup {}: {e}", d.display()))?;
        cg.dirs.push(d.clone());
        Ok(d)
    };
    let mut procs = Vec::new();
    match detect()? {
        Layout::V1 { cpu, cpuacct } => {
            let d = mkdir(&mut cg, &cpu)?;
            write(&d.join("cpu.cfs_period_us"), &PERIOD_US.to_string())?;
            write(&d.join("cpu.cfs_quota_us"), &QUOTA_US.to_string())?;
            procs.push(d.join("cgroup.procs"));
            if let Some(acct) = cpuacct {
                let d = mkdir(&mut cg, &acct)?;
                procs.push(d.join("cgroup.procs"));
            }
        }
        Layout::V2 { root } => {
            let ctl = root.join("cgroup.subtree_control");
            let on = std::fs::read_to_string(&ctl).map_err(|e| e.to_string())?;
            if !on.split_whitespace().any(|c| c == "cpu") {
                write(&ctl, "+cpu")?;
                cg.enabled_cpu_in = Some(ctl);
            }
            let d = mkdir(&mut cg, &root)?;
            write(&d.join("cpu.max"), &format!("{QUOTA_US} {PERIOD_US}"))?;
            procs.push(d.join("cgroup.procs"));
        }
    }
    let child = Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start sh: {e}"))?;
    let spinner = ChildGuard::new(child);
    let pid = spinner.pid();
    cg.spinner = Some(spinner);
    for p in &procs {
        write(p, &pid.to_string())?;
    }
    // The kernel's own view, so a failure below is about the recorder, not the setup.
    let membership = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    assert!(
        membership.lines().any(|l| l.ends_with(&cg.path)),
        "busy loop not in {}: {membership}",
        cg.path
    );
    Ok(cg)
}

fn dump(dir: &Path, from: &str, to: &str, select: &str, format: &str) -> String {
    let o = run(
        &[
            "dump",
            "--dir",
            s(dir),
            "--from",
            from,
            "--to",
            to,
            "--select",
            select,
            "--format",
            format,
        ],
        Duration::from_secs(30),
    );
    let err = text(&o.stderr);
    assert!(o.status.success(), "dump {select} {format} failed: {err}");
    assert!(trouble_lines(&err).is_empty(), "dump complained: {err}");
    text(&o.stdout)
}

#[test]
fn throttled_cgroup_is_recorded_and_dumped() {
    const TEST: &str = "throttled_cgroup_is_recorded_and_dumped";
    if !is_root() {
        return skip(TEST, "needs root to create cgroups");
    }
    let cg = match setup() {
        Ok(cg) => cg,
        Err(reason) => return skip(TEST, &reason),
    };
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");

    let from = now_arg();
    let o = run(
        &[
            "record",
            "--dir",
            s(&store),
            "--duration",
            "10s",
            "--interval",
            "1s",
        ],
        Duration::from_secs(40),
    );
    let to = now_arg();
    assert!(o.status.success(), "record failed: {}", text(&o.stderr));

    let series = format!("cgroup.{}.cpu.throttled_pct", cg.path);
    let csv = dump(&store, &from, &to, "cgroup.*.cpu.throttled_pct", "csv");
    let rows: Vec<_> = parse_csv(&csv)
        .into_iter()
        .filter(|r| r.series == series)
        .collect();
    for r in &rows {
        assert_eq!(r.unit, "percent", "{r:?}");
    }
    let values: Vec<f64> = rows.iter().filter_map(|r| r.value).collect();
    // Ten samples give nine rates (the first has no predecessor); allow for a slow start.
    assert!(
        values.len() >= 5,
        "want >= 5 values of {series}, got {values:?}\n{csv}"
    );
    // Spinning at a 20% quota is throttled in (nearly) every period it runs in.
    assert!(
        median(&values) > 50.0,
        "{series} median {} <= 50: {values:?}",
        median(&values)
    );

    // JSON lines: every line parses, and the same selection gives the same values.
    let json = dump(&store, &from, &to, "cgroup.*.cpu.throttled_pct", "json");
    let lines = parse_json_lines(&json);
    for l in &lines {
        assert!(l["time"].is_string() && l["ts_ns"].is_i64(), "{l}");
        assert!(l["values"].is_object(), "{l}");
    }
    let jv = json_values(&lines, &series);
    assert_eq!(jv.len(), values.len(), "json {jv:?} vs csv {values:?}");
    for (a, b) in jv.iter().zip(&values) {
        // CSV rounds to 4 decimals.
        assert!((a - b).abs() < 1e-3, "json {a} vs csv {b}");
    }

    // OpenMetrics: one family, the cgroup as a label, terminated by # EOF.
    let om = dump(
        &store,
        &from,
        &to,
        "cgroup.*.cpu.throttled_pct",
        "openmetrics",
    );
    assert!(om.ends_with("# EOF\n"), "no # EOF terminator:\n{om}");
    assert!(
        om.lines()
            .any(|l| l == "# TYPE jitterscope_cgroup_cpu_throttled_pct gauge"),
        "{om}"
    );
    let prefix = format!(
        "jitterscope_cgroup_cpu_throttled_pct{{cgroup=\"{}\"}} ",
        cg.path
    );
    let omv: Vec<f64> = om
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|rest| {
            let f: Vec<&str> = rest.split(' ').collect();
            assert_eq!(f.len(), 2, "value and timestamp expected: {rest:?}");
            let ts: f64 = f[1].parse().expect("timestamp");
            assert!(ts > 1.0e9, "timestamp in seconds: {rest:?}");
            f[0].parse().expect("value")
        })
        .collect();
    assert_eq!(
        omv.len(),
        values.len(),
        "openmetrics {omv:?} vs csv {values:?}"
    );
    assert!(median(&omv) > 50.0, "{omv:?}");
    // Who owns the cgroup, as an info family before the # EOF.
    let unit = cg.path.trim_start_matches('/');
    let info = format!(
        "jitterscope_cgroup_info{{cgroup=\"{}\",runtime=\"systemd\",unit=\"{unit}\"}} 1 ",
        cg.path
    );
    // Timestamped like every other line of a dump.
    assert!(
        om.lines().any(|l| l
            .strip_prefix(&info)
            .is_some_and(|ts| ts.parse::<f64>().is_ok_and(|t| t > 1.0e9))),
        "no {info}<timestamp>:\n{om}"
    );
    assert!(om.contains("# TYPE jitterscope_cgroup info\n"), "{om}");

    // The quota caps usage at 20% of one CPU; the loop never sleeps, so it uses about that.
    let usage_series = format!("cgroup.{}.cpu.usage_pct", cg.path);
    let usage: Vec<f64> = parse_csv(&dump(&store, &from, &to, &usage_series, "csv"))
        .into_iter()
        .filter(|r| r.series == usage_series)
        .filter_map(|r| r.value)
        .collect();
    assert!(
        usage.len() >= 5,
        "want >= 5 values of {usage_series}: {usage:?}"
    );
    let m = median(&usage);
    assert!(
        (10.0..=30.0).contains(&m),
        "{usage_series} median {m}: {usage:?}"
    );

    drop(cg);
}
