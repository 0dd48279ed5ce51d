//! The task iterator's process table against the /proc reader's, on the live host (issue 23:
//! "the sample's content and the metric definitions stay identical; prove it").
//!
//! Both readers read the same host back to back. Fields that cannot move between the two reads
//! must be equal; those that move (CPU time, faults and RSS of a busy process) must be within
//! what the time between the reads allows. Needs root; prints `SKIPPED` (or fails under
//! `JITTERSCOPE_REQUIRE_PRIVILEGED=1`) where the iterator cannot load.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use jitterscope_bpf::task_iter::TaskCollector;
use jitterscope_sources::process::{default_fd_budget, Process, ProcessReader};
use jitterscope_sources::Root;
use jitterscope_testkit::{is_root, skip};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

fn iterator(test: &str) -> Option<TaskCollector> {
    if !is_root() {
        skip(test, "needs root (BPF task iterator)");
        return None;
    }
    match TaskCollector::start(&Root::default(), Default::default()) {
        Ok(c) => Some(c),
        Err(e) => {
            skip(test, &format!("the task iterator cannot load here: {e}"));
            None
        }
    }
}

/// Children killed and reaped when the test ends, however it ends.
struct Kids(Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn(kids: &mut Kids, cmd: &mut Command) -> u32 {
    let c = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn");
    let pid = c.id();
    kids.0.push(c);
    pid
}

fn by_pid(v: Vec<Process>) -> HashMap<u32, Process> {
    v.into_iter().map(|p| (p.stat.pid, p)).collect()
}

fn proc_scan(r: &mut ProcessReader) -> HashMap<u32, Process> {
    let mut out = Vec::new();
    r.scan(&mut out, None).expect("/proc scan");
    by_pid(out)
}

/// Waits until `pred` holds on the process `pid` as /proc shows it.
fn wait_for(pid: u32, what: &str, pred: impl Fn(&Process) -> bool) {
    let mut r = ProcessReader::new(&Root::default(), 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if proc_scan(&mut r).get(&pid).is_some_and(&pred) {
            return;
        }
        assert!(Instant::now() < deadline, "pid {pid} never got {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn near(what: &str, a: u64, b: u64, tol: u64) {
    assert!(
        a.abs_diff(b) <= tol,
        "{what}: /proc {a} vs iterator {b} (tolerance {tol})"
    );
}

#[test]
fn stable_processes_read_the_same_both_ways() {
    let _g = serial();
    let t = "stable_processes_read_the_same_both_ways";
    let Some(mut it) = iterator(t) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("data");
    let mut kids = Kids(Vec::new());
    let sleeper = spawn(&mut kids, Command::new("sleep").arg("1000"));
    let spinner = spawn(
        &mut kids,
        Command::new("sh").args(["-c", "while :; do :; done"]),
    );
    // I/O, then asleep: its io counters are non-zero and stay put.
    let io = spawn(
        &mut kids,
        Command::new("sh").args([
            "-c",
            &format!(
                "head -c 3000000 /dev/urandom > {0}; cat {0} > /dev/null; sync; exec sleep 1000",
                f.display()
            ),
        ]),
    );
    // Several threads that burn some CPU, fault memory and do I/O, one of which exits (its
    // counts move into signal_struct), then all sleep: the sums over threads are stable.
    let threads = spawn(
        &mut kids,
        Command::new("python3").args([
            "-c",
            &format!(
                r#"
import threading, time, os
def work(n, stay):
    x = bytearray(2_000_000 * n)
    s = 0
    for i in range(200_000 * n): s += i
    with open("{0}.%d" % n, "wb") as fh: fh.write(os.urandom(100_000 * n)); fh.flush(); os.fsync(fh.fileno())
    with open("{0}.%d" % n, "rb") as fh: fh.read()
    if stay: time.sleep(1000)
gone = threading.Thread(target=work, args=(1, False)); gone.start(); gone.join()
for n in (2, 3, 4): threading.Thread(target=work, args=(n, True), daemon=True).start()
time.sleep(1000)
"#,
                f.display()
            ),
        ]),
    );
    wait_for(io, "exec'd sleep", |p| p.stat.comm == "sleep");
    wait_for(threads, "4 threads", |p| p.stat.num_threads == 4);
    // Let the workers finish their work and settle.
    std::thread::sleep(Duration::from_secs(3));

    let mut proc_reader = ProcessReader::new(&Root::default(), default_fd_budget());
    let (before, _) = it.scan().expect("iterator scan");
    let procfs = proc_scan(&mut proc_reader);
    let (after, st) = it.scan().expect("iterator scan");
    assert!(st.task_iter);
    let (before, after) = (by_pid(before), by_pid(after));

    for (pid, name) in [(sleeper, "sleeper"), (io, "io"), (threads, "threads")] {
        let p = &procfs[&pid];
        let b = &after[&pid];
        // Nothing about them moves between the reads (checked on the iterator's two reads),
        // so every field of the process table must be equal, cgroups and command line too.
        assert_eq!(before[&pid], *b, "{name} moved during the test");
        assert_eq!(p, b, "{name} (pid {pid}): /proc vs iterator");
    }
    let io_p = &procfs[&io];
    assert!(io_p.io.as_ref().unwrap().wchar >= 3_000_000, "{io_p:?}");
    let th = &procfs[&threads];
    assert!(th.stat.utime_ticks + th.stat.stime_ticks > 0);
    assert!(th.io.as_ref().unwrap().wchar >= 1_000_000);

    // The spinner runs throughout: its identity is exact, its counters within the time the
    // reads took (each read takes milliseconds; 250 ms of slack for a loaded machine).
    let (p, b) = (&procfs[&spinner], &after[&spinner]);
    let (ps, bs) = (&p.stat, &b.stat);
    assert_eq!(
        (
            &ps.comm,
            ps.ppid,
            ps.nice,
            ps.num_threads,
            ps.starttime_ticks,
            ps.vsize_bytes
        ),
        (
            &bs.comm,
            bs.ppid,
            bs.nice,
            bs.num_threads,
            bs.starttime_ticks,
            bs.vsize_bytes
        )
    );
    assert_eq!(
        (ps.flags, &p.cgroups, &p.cmdline),
        (bs.flags, &b.cgroups, &b.cmdline)
    );
    near(
        "spinner cpu ticks",
        ps.utime_ticks + ps.stime_ticks,
        bs.utime_ticks + bs.stime_ticks,
        25,
    );
    let (pr, br) = (
        p.schedstat.as_ref().unwrap().run_ns,
        b.schedstat.as_ref().unwrap().run_ns,
    );
    assert!(br >= pr, "run time went back: {pr} then {br}");
    near("spinner run_ns", pr, br, 250_000_000);
    near("spinner rss pages", ps.rss_pages, bs.rss_pages, 64);
}

#[test]
fn the_whole_host_reads_the_same_both_ways() {
    let _g = serial();
    let t = "the_whole_host_reads_the_same_both_ways";
    let Some(mut it) = iterator(t) else {
        return;
    };
    let mut proc_reader = ProcessReader::new(&Root::default(), default_fd_budget());
    let (before, _) = it.scan().expect("iterator scan");
    let procfs = proc_scan(&mut proc_reader);
    let (after, _) = it.scan().expect("iterator scan");
    let (before, after) = (by_pid(before), by_pid(after));

    // Same pids, minus those that started or ended between the reads: a process the iterator
    // saw before and after (same start time) was there for /proc, and one /proc saw was there
    // for the iterator before or after.
    let same = |a: &Process, b: &Process| a.stat.starttime_ticks == b.stat.starttime_ticks;
    let mut checked = 0;
    let mut exact = 0;
    for (pid, a) in &after {
        let Some(b) = before.get(pid).filter(|b| same(a, b)) else {
            continue;
        };
        let p = procfs.get(pid).unwrap_or_else(|| {
            panic!(
                "pid {pid} ({}) lived throughout but /proc missed it",
                a.stat.comm
            )
        });
        assert!(same(p, a), "pid {pid}: start time {p:?} vs {a:?}");
        checked += 1;
        // Identity fields cannot change while a process lives (comm can, by exec or prctl,
        // but then the iterator's two reads differ too).
        if a.stat.comm == b.stat.comm {
            assert_eq!(p.stat.comm, a.stat.comm, "pid {pid}");
        }
        assert_eq!(p.stat.ppid, a.stat.ppid, "pid {pid} {}", a.stat.comm);
        // A process that did not move at all between the iterator's reads must read the same
        // from /proc in every field.
        if a == b {
            assert_eq!(p, a, "pid {pid} ({}): /proc vs iterator", a.stat.comm);
            exact += 1;
        }
    }
    for pid in procfs.keys() {
        assert!(
            before.contains_key(pid) || after.contains_key(pid),
            "pid {pid} ({}) is in /proc but the iterator never showed it",
            procfs[pid].stat.comm
        );
    }
    eprintln!("{checked} processes compared, {exact} of them field by field");
    assert!(checked >= 20, "only {checked} processes lived throughout");
    assert!(
        exact >= 10,
        "only {exact} processes stood still to be compared exactly"
    );
}
