//! `top` and `replay` in a real terminal: tmux runs them in an 80x24 pane, the test sends keys
//! and reads the pane back. Each test uses a tmux server of its own (`-L`, no user config), so
//! nothing touches the user's sessions. Without tmux the terminal tests print `SKIPPED:` (fail
//! under `JITTERSCOPE_REQUIRE_PRIVILEGED=1`, as in CI).

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::cmd;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/diagnose")
        .join(name)
}

/// A private tmux server with one 80x24 session running a command; killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// Whether tmux runs here; if not, `test` is skipped.
    fn available(test: &str) -> bool {
        let ok = Command::new("tmux")
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            jitterscope_testkit::skip(test, "tmux is not installed (scripts/setup.sh installs it)");
        }
        ok
    }

    fn tmux(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("tmux runs")
    }

    /// Starts `command` (a shell line) in an 80x24 pane; the pane prints `EXIT=<status>` when
    /// it ends and stays open to be read.
    fn start(tag: &str, command: &str) -> Tmux {
        let t = Tmux {
            socket: format!("jsview-{}-{tag}", std::process::id()),
        };
        let line = format!("{command}; echo EXIT=$?; sleep 60");
        let o = t.tmux(&[
            "new-session",
            "-d",
            "-s",
            "v",
            "-x",
            "80",
            "-y",
            "24",
            "sh",
            "-c",
            &line,
        ]);
        assert!(
            o.status.success(),
            "tmux: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        t
    }

    fn screen(&self) -> Vec<String> {
        let o = self.tmux(&["capture-pane", "-p", "-t", "v"]);
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| l.trim_end().to_string())
            .collect()
    }

    fn keys(&self, literal: &str) {
        assert!(self
            .tmux(&["send-keys", "-t", "v", "-l", literal])
            .status
            .success());
    }

    fn key(&self, name: &str) {
        assert!(self.tmux(&["send-keys", "-t", "v", name]).status.success());
    }

    /// Waits until some line satisfies `f`; returns the screen then.
    fn wait(&self, what: &str, f: impl Fn(&str) -> bool) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = self.screen();
            if s.iter().any(|l| f(l)) {
                return s;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out waiting for {what}; the pane shows:\n{}",
                    s.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

fn title(s: &[String]) -> String {
    s.first().cloned().unwrap_or_default()
}

fn bin() -> &'static str {
    common::bin()
}

#[test]
fn replay_steps_jumps_and_quits_in_a_terminal() {
    if !Tmux::available("replay_steps_jumps_and_quits_in_a_terminal") {
        return;
    }
    let dir = fixture("tlb-shootdown");
    // 07:12:49.399Z: one second into the recorded TLB storm.
    let t = Tmux::start(
        "replay",
        &format!("{} replay --dir {} --at 1795331569.5", bin(), dir.display()),
    );
    let s = t.wait("the replay screen", |l| {
        l.starts_with("jitterscope replay 2026-11-22 07:12:49.399Z vm PAUSED")
    });
    assert!(
        s.iter()
            .any(|l| l.starts_with("IPI  TLB 4077/s CAL 4127/s")),
        "{s:?}"
    );
    assert!(s.iter().any(|l| l.contains("8686 lab-madvise")), "{s:?}");
    // The findings come from the analysis thread.
    t.wait("the findings", |l| {
        l.starts_with("0.60 MECH TLB-shootdown storm")
    });

    t.keys("T");
    t.wait("one sample back", |l| l.contains("07:12:48.399Z vm PAUSED"));
    t.keys("tt");
    t.wait("two samples forward", |l| {
        l.contains("07:12:50.399Z vm PAUSED")
    });
    t.keys("[");
    t.wait("the episode's start", |l| {
        l.contains("07:12:48.399Z vm PAUSED")
    });
    t.keys("g");
    t.keys("1795331571");
    t.wait("the time being typed", |l| l == "go to time: 1795331571_");
    t.key("Enter");
    t.wait("the time gone to", |l| {
        l.contains("07:12:50.399Z vm PAUSED")
    });
    t.keys("A");
    let s = t.wait("sorted by madvise", |l| l.contains("*MADV"));
    let head = s.iter().position(|l| l.contains("PID COMM")).unwrap();
    assert!(s[head + 1].contains("lab-madvise"), "{s:?}");
    t.keys("/");
    t.keys("victim");
    t.key("Enter");
    let s = t.wait("the filter", |l| l.contains("filter 'victim'"));
    let head = s.iter().position(|l| l.contains("PID COMM")).unwrap();
    assert!(s[head + 1].contains("lab-victim"), "{s:?}");
    let cgroups = s.iter().position(|l| l.starts_with("CGROUP ")).unwrap();
    assert!(
        s[head + 2..cgroups].iter().all(|l| l.is_empty()),
        "only the matching process: {s:?}"
    );
    t.keys("?");
    t.wait("the help", |l| l.contains(" KEYS"));
    t.keys("q");
    t.wait("the exit", |l| l == "EXIT=0");
}

#[test]
fn top_follows_a_running_recorder() {
    if !Tmux::available("top_follows_a_running_recorder") {
        return;
    }
    let store = tempfile::tempdir().unwrap();
    let _rec = common::recorder(store.path());
    let deadline = Instant::now() + Duration::from_secs(15);
    // Two samples, so the first screen has rates.
    while jitterscope_store::Reader::open(store.path())
        .ok()
        .and_then(|r| r.range_main(i64::MIN, i64::MAX).ok())
        .map_or(0, |r| r.count())
        < 2
    {
        assert!(Instant::now() < deadline, "the recorder wrote no samples");
        std::thread::sleep(Duration::from_millis(200));
    }
    let t = Tmux::start(
        "follow",
        &format!("{} top --dir {}", bin(), store.path().display()),
    );
    let s = t.wait("top following the store", |l| {
        l.starts_with("jitterscope top ") && l.contains(" LIVE following")
    });
    let first = title(&s);
    // A new sample moves the screen on by itself.
    t.wait("the next sample", |l| {
        l.starts_with("jitterscope top ") && l.contains(" LIVE ") && *l != first
    });
    t.keys("T");
    t.wait("paused one sample back", |l| {
        l.starts_with("jitterscope top ") && l.contains(" PAUSED ")
    });
    t.keys("f");
    t.wait("following again", |l| {
        l.starts_with("jitterscope top ") && l.contains(" LIVE ")
    });
    t.keys("q");
    t.wait("the exit", |l| l == "EXIT=0");
}

#[test]
fn top_collects_directly_without_a_recorder() {
    if !Tmux::available("top_collects_directly_without_a_recorder") {
        return;
    }
    let empty = tempfile::tempdir().unwrap();
    let t = Tmux::start(
        "direct",
        &format!(
            "{} top --no-tracers --dir {}",
            bin(),
            empty.path().join("none").display()
        ),
    );
    let s = t.wait("top collecting", |l| l.starts_with("jitterscope top "));
    let first = title(&s);
    assert!(first.ends_with(" LIVE direct, no BPF"), "{first}");
    assert!(
        s.iter()
            .any(|l| l.starts_with("CPU  usr ") && !l.contains("usr -")),
        "{s:?}"
    );
    assert!(
        s.iter()
            .any(|l| l.starts_with("FINDINGS: findings need a recording")),
        "{s:?}"
    );
    t.wait("the next sample", |l| {
        l.starts_with("jitterscope top ") && *l != first
    });
    t.keys("T");
    t.wait("one sample back, from memory", |l| {
        l.starts_with("jitterscope top ") && l.contains(" PAUSED ")
    });
    t.keys("q");
    t.wait("the exit", |l| l == "EXIT=0");
}

#[test]
fn json_once_and_bad_input() {
    // --json-once needs no terminal.
    let o = cmd()
        .args([
            "replay",
            "--json-once",
            "--limit",
            "2",
            "--sort",
            "madvise",
            "--at",
        ])
        .arg("1795331569.5")
        .arg("--dir")
        .arg(fixture("tlb-shootdown"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    common::check_schema("view", &v);
    assert_eq!(v["snapshot"]["time"], "2026-11-22T07:12:49.399Z");
    assert_eq!(v["snapshot"]["processes"][0]["comm"], "lab-madvise");
    assert_eq!(v["snapshot"]["processes"].as_array().unwrap().len(), 2);
    assert_eq!(v["findings"][0]["rule_id"], "cpu.tlb-shootdown");

    let o = cmd()
        .args(["top", "--json-once", "--no-tracers", "--interval", "200ms"])
        .args(["--dir", "/nonexistent/jitterscope"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    common::check_schema("view", &v);
    assert!(
        v["snapshot"]["cpu"]["idle_pct"].as_f64().is_some(),
        "two samples give rates"
    );
    assert!(v["findings"]["unavailable"].is_string());

    let one_line_error = |args: &[&str], want: &str| {
        let o = cmd().args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains(want), "{args:?}: {e}");
    };
    one_line_error(
        &["replay", "--dir", "/nonexistent/js"],
        "no store at /nonexistent/js",
    );
    one_line_error(
        &[
            "replay",
            "--at",
            "soon",
            "--dir",
            fixture("idle").to_str().unwrap(),
        ],
        "invalid time \"soon\"",
    );
    let empty = tempfile::tempdir().unwrap();
    one_line_error(
        &["replay", "--dir", empty.path().to_str().unwrap()],
        "holds no samples",
    );
    one_line_error(
        &["replay", "--dir", fixture("idle").to_str().unwrap()],
        "standard output is not a terminal",
    );
    one_line_error(&["top", "--interval", "10ms"], "--interval must be between");
    // Argument errors are clap's (exit 2, with a usage hint).
    let o = cmd()
        .args(["replay", "--sort", "colour", "--json-once"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown sort key \"colour\""));
}

/// A replay in tmux started by a shell line (`exec` or not), on its screen; returns the pane
/// and the shell's pid (the replay's own when `exec`ed).
fn replay_with_pid(tag: &str, exec: bool) -> (Tmux, u32, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let pidfile = tmp.path().join("pid");
    let t = Tmux::start(
        tag,
        &format!(
            "echo $$ > {}; {}{} replay --dir {}",
            pidfile.display(),
            if exec { "exec " } else { "" },
            bin(),
            fixture("tlb-shootdown").display()
        ),
    );
    t.wait("the replay screen", |l| {
        l.starts_with("jitterscope replay ")
    });
    let pid = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (t, pid, tmp)
}

#[test]
fn a_closed_terminal_ends_the_view() {
    if !Tmux::available("a_closed_terminal_ends_the_view") {
        return;
    }
    let (t, pid, _tmp) = replay_with_pid("hangup", true);
    drop(t); // kills the tmux server: the pane's terminal hangs up
    let gone = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z "))
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gone(pid) {
        assert!(
            Instant::now() < deadline,
            "replay (pid {pid}) still runs 10 s after its terminal closed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn sigterm_restores_the_terminal_and_exits_cleanly() {
    if !Tmux::available("sigterm_restores_the_terminal_and_exits_cleanly") {
        return;
    }
    let (t, shell, _tmp) = replay_with_pid("term", false);
    let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).unwrap();
    let pid: i32 = children.split_whitespace().next().unwrap().parse().unwrap();
    // SAFETY: signalling the replay process this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    // Back on the normal screen (the alternate screen left), with a clean exit.
    let s = t.wait("the exit", |l| l == "EXIT=0");
    assert!(
        !s.iter().any(|l| l.starts_with("jitterscope replay ")),
        "{s:?}"
    );
}
