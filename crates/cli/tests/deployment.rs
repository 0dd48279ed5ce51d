//! The recorder as a service manager and an operator's umask see it: readiness and the
//! watchdog over systemd's notification protocol (a real datagram socket, as systemd binds
//! one), journald's priorities, the store's modes under a shell's umask, command lines with
//! secrets recorded masked, and the socket filter it puts itself under.

mod common;

use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{recorder_cmd, run_command, s, text, ChildGuard};

/// Datagrams received on `sock` for `dur`, in order.
fn listen(sock: &UnixDatagram, dur: Duration) -> Vec<String> {
    let end = Instant::now() + dur;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        sock.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match sock.recv(&mut buf) {
            Ok(n) => out.push(String::from_utf8_lossy(&buf[..n]).into_owned()),
            Err(_) => break,
        }
    }
    out
}

fn pings(msgs: &[String]) -> usize {
    msgs.iter()
        .filter(|m| m.lines().any(|l| l == "WATCHDOG=1"))
        .count()
}

#[test]
fn ready_then_the_sampling_loop_feeds_the_watchdog() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("notify");
    let sock = UnixDatagram::bind(&path).unwrap();
    // A watchdog of 2 s: pings every half second. An hour between samples: the loop must
    // still wake to feed it.
    let child = recorder_cmd(&t.path().join("store"))
        .args(["--interval", "1h"])
        .env("NOTIFY_SOCKET", &path)
        .env("WATCHDOG_USEC", "2000000")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let rec = ChildGuard::new(child);
    let first = listen(&sock, Duration::from_secs(4));
    let ready = first
        .iter()
        .position(|m| m.lines().any(|l| l == "READY=1"))
        .unwrap_or_else(|| panic!("no READY=1 in {first:?}"));
    assert!(first[ready].contains("STATUS=recording every"), "{first:?}");
    assert!(
        pings(&first[ready..]) >= 4,
        "fewer than 4 pings in 4 s of a 2 s watchdog: {first:?}"
    );
    // A loop that does not run does not ping: systemd would kill it after 2 s.
    rec.signal(libc::SIGSTOP);
    // What was in flight when it stopped.
    listen(&sock, Duration::from_millis(300));
    let stopped = listen(&sock, Duration::from_secs(3));
    assert_eq!(pings(&stopped), 0, "a stopped recorder pinged: {stopped:?}");
    rec.signal(libc::SIGCONT);
    let again = listen(&sock, Duration::from_secs(2));
    assert!(pings(&again) >= 1, "no ping after SIGCONT: {again:?}");
    rec.signal(libc::SIGTERM);
    let last = listen(&sock, Duration::from_secs(2));
    assert!(
        last.iter().any(|m| m.lines().any(|l| l == "STOPPING=1")),
        "{last:?}"
    );
}

#[test]
fn log_lines_carry_priorities_only_into_journald() {
    let t = tempfile::tempdir().unwrap();
    let log = t.path().join("stderr");
    let run = |journal: Option<&str>| {
        let f = std::fs::File::create(&log).unwrap();
        let m = f.metadata().unwrap();
        let mut c = recorder_cmd(&t.path().join("store"));
        c.args(["--duration", "1s", "--root", "/nonexistent"]);
        match journal {
            // systemd names the stream by device and inode: this file is it.
            None => c.env("JOURNAL_STREAM", format!("{}:{}", m.dev(), m.ino())),
            Some(j) => c.env("JOURNAL_STREAM", j),
        };
        c.stdout(Stdio::null()).stderr(f);
        let _ = c.status().unwrap();
        std::fs::read_to_string(&log).unwrap()
    };
    let into_journal = run(None);
    assert!(
        into_journal.starts_with("<6>jitterscope: "),
        "{into_journal}"
    );
    assert!(
        into_journal
            .lines()
            .any(|l| l.starts_with("<3>jitterscope: error: /nonexistent has no proc/stat")),
        "{into_journal}"
    );
    // The variable, inherited, naming another file: no prefix.
    let elsewhere = run(Some("1:1"));
    assert!(
        elsewhere.lines().all(|l| l.starts_with("jitterscope: ")),
        "{elsewhere}"
    );
}

#[test]
fn store_modes_hold_under_a_shell_s_umask() {
    let t = tempfile::tempdir().unwrap();
    let store = t.path().join("new/store");
    let mut c = recorder_cmd(&store);
    c.args(["--duration", "2s"]);
    // SAFETY: umask in the child before exec; no allocation.
    unsafe {
        c.pre_exec(|| {
            libc::umask(0o022);
            Ok(())
        });
    }
    let o = run_command(c, Duration::from_secs(30));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
    assert_eq!(mode(&store), 0o750, "the store directory");
    let mut files = 0;
    for e in std::fs::read_dir(&store).unwrap() {
        let p = e.unwrap().path();
        assert_eq!(mode(&p), 0o640, "{}", p.display());
        files += 1;
    }
    assert!(files >= 3, "{files} files");
}

/// `replay --json-once`'s process rows whose command line contains `needle`.
fn recorded_cmdlines(store: &Path, needle: &str) -> Vec<String> {
    let o = run_command(
        {
            let mut c = common::cmd();
            c.args([
                "replay",
                "--json-once",
                "--limit",
                "10000",
                "--filter",
                needle,
                "--dir",
                s(store),
            ]);
            c
        },
        Duration::from_secs(30),
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["snapshot"]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["cmdline"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn secrets_in_command_lines_are_recorded_masked() {
    let t = tempfile::tempdir().unwrap();
    // A shell that keeps its own command line: `sh -c SCRIPT NAME ARGS...`.
    let victim = Command::new("sh")
        .args([
            "-c",
            "sleep 60; : jsredact",
            "jsredact",
            "--password=hunter2",
            "--token",
            "hunter3",
            "postgres://app:hunter4@db:5432/x",
            "--db-dsn",
            "hunter5",
            "--verbose",
        ])
        .spawn()
        .unwrap();
    let _victim = ChildGuard::new(victim);
    for (name, extra, want) in [
        (
            "builtin",
            &[][..],
            "sh -c sleep 60; : jsredact jsredact --password=*** --token *** postgres://app:***@db:5432/x --db-dsn hunter5 --verbose",
        ),
        (
            "pattern",
            &["--redact-arg", "*dsn*"][..],
            "sh -c sleep 60; : jsredact jsredact --password=*** --token *** postgres://app:***@db:5432/x --db-dsn *** --verbose",
        ),
        ("off", &["--no-cmdline"][..], ""),
    ] {
        let store = t.path().join(name);
        let mut c = recorder_cmd(&store);
        c.args(["--duration", "3s"]).args(extra);
        if name != "builtin" {
            // The task iterator's table takes command lines from the same reader; /proc's
            // reader is the other path.
            c.args(["--proc-source", "procfs"]);
        }
        let o = run_command(c, Duration::from_secs(30));
        assert!(o.status.success(), "{name}: {}", text(&o.stderr));
        let needle = if want.is_empty() { "" } else { "jsredact" };
        let lines = recorded_cmdlines(&store, needle);
        if want.is_empty() {
            assert!(lines.iter().all(String::is_empty), "{name}: {lines:?}");
            continue;
        }
        assert!(lines.iter().any(|l| l == want), "{name}: {lines:?}");
        assert!(
            !lines.iter().any(|l| l.contains("hunter2") || l.contains("hunter3") || l.contains("hunter4")),
            "{name}: {lines:?}"
        );
    }
}

#[test]
fn the_recorder_is_under_its_socket_filter() {
    let t = tempfile::tempdir().unwrap();
    let child = recorder_cmd(&t.path().join("store"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rec = ChildGuard::new(child);
    let status = Path::new("/proc")
        .join(rec.pid().to_string())
        .join("status");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let st = std::fs::read_to_string(&status).unwrap_or_default();
        // 2: SECCOMP_MODE_FILTER. Every thread, TSYNC: the sampling loop's too.
        if st.lines().any(|l| l == "Seccomp:\t2") {
            break;
        }
        assert!(Instant::now() < deadline, "no seccomp filter: {st}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let task = Path::new("/proc").join(rec.pid().to_string()).join("task");
    for e in std::fs::read_dir(task).unwrap() {
        let st = std::fs::read_to_string(e.unwrap().path().join("status")).unwrap_or_default();
        assert!(
            st.is_empty() || st.lines().any(|l| l == "Seccomp:\t2"),
            "a thread without the filter: {st}"
        );
    }
}
