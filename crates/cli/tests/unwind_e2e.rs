//! Whole user stacks of Debian's binaries, which keep no frame pointers, on the live host:
//!
//! - `certutil` (libnss3-tools): NSS softokn's probe of its database directory
//!   (`sdb_measureAccess`, a static function of libsoftokn3) calls NSPR's exported
//!   `PR_Access`, which calls glibc's `access`. The folded stacks hold the libsoftokn3 frame
//!   above `PR_Access;access`, down to `__libc_start_main`. With frame pointers alone the
//!   chain stops in glibc.
//! - `xz` and `gzip` compressing: the hottest user addresses and their top callers agree with
//!   `perf record --call-graph dwarf` sampling the same process in the same seconds.
//! - Debian's CPython 3.11 running `a → b → c`: the interpreter's frames stand above the
//!   evaluation loop's native frame (`_PyEval_EvalFrameDefault;py:<module> (…);py:a (…);…`),
//!   and `py-spy dump` (PyPI's) on the same process names the same frames.
//! - CPython compiling, running and freeing functions in turn, each put where a freed one
//!   stood: each is named after itself, and nothing is named from freed memory.
//!
//! Needs root (system-wide perf sampling); certutil, xz, gzip, perf, python3.11 and py-spy are
//! installed by `scripts/setup.sh --test`. Otherwise prints `SKIPPED:` (which fails under
//! `JITTERSCOPE_REQUIRE_PRIVILEGED=1`, as in CI).

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{cmd, now_arg, run, s, serial, text, ChildGuard};
use jitterscope_testkit::{is_root, skip};

const T: Duration = Duration::from_secs(60);

fn have(prog: &str) -> bool {
    jitterscope_testkit::which(prog, &[]).is_some()
}

/// `record` with the profiler (default settings plus `extra`) and no tracers for `secs`.
fn record(store: &Path, secs: &str, extra: &[&str]) -> ChildGuard {
    let mut args = vec![
        "record",
        "--dir",
        s(store),
        "--no-tracers",
        "--duration",
        secs,
    ];
    args.extend_from_slice(extra);
    ChildGuard::new(
        cmd()
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn record"),
    )
}

/// Waits for the recorder and returns its log; `None` when the profiler could not run.
fn finish(rec: ChildGuard) -> Option<String> {
    let mut c = rec.into_inner();
    let st = c.wait().expect("record ends");
    let mut err = String::new();
    use std::io::Read;
    c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(st.success(), "record failed: {err}");
    (!err.contains("profile: not running")).then_some(err)
}

fn folded(store: &Path, from: &str, to: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "flame",
        "--dir",
        s(store),
        "--from",
        from,
        "--to",
        to,
        "--folded",
    ];
    args.extend_from_slice(extra);
    let o = run(&args, T);
    assert!(o.status.success(), "flame: {}", text(&o.stderr));
    text(&o.stdout)
}

/// Samples of the folded lines that contain `needle`.
fn count(folded: &str, needle: &str) -> u64 {
    folded
        .lines()
        .filter(|l| l.contains(needle))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Runs `certutil -L` on a fresh database in a loop for `secs`, with NSS measuring the
/// directory's access time by probing (as case 1's hosts did).
fn certutil_loop(dir: &Path, secs: f64) {
    let db = dir.join("nssdb");
    std::fs::create_dir_all(&db).unwrap();
    let sql = format!("sql:{}", s(&db));
    let made = Command::new("certutil")
        .args(["-N", "--empty-password", "-d", &sql])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .expect("certutil -N");
    assert!(made.success(), "certutil -N {sql}: {made}");
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        let st = Command::new("certutil")
            .args(["-L", "-d", &sql])
            .env("NSS_SDB_USE_CACHE", "probe")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("certutil -L");
        assert!(st.success(), "certutil -L: {st}");
    }
}

#[test]
fn certutil_stacks_reach_their_callers_through_glibc() {
    // Each measures samples of its own workload: alone on the CPUs.
    let _serial = serial();
    const TEST: &str = "certutil_stacks_reach_their_callers_through_glibc";
    if !is_root() {
        return skip(TEST, "needs root for system-wide perf sampling");
    }
    if !have("certutil") {
        return skip(TEST, "certutil is not installed (Debian: libnss3-tools)");
    }
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let rec = record(&store, "9s", &[]);
    std::thread::sleep(Duration::from_millis(1500));
    let from = now_arg();
    certutil_loop(tmp.path(), 5.0);
    let to = now_arg();
    let Some(log) = finish(rec) else {
        return skip(TEST, "the profiler cannot run here");
    };
    assert!(log.contains("unwound with .eh_frame"), "{log}");
    let f = folded(&store, &from, &to, &[]);
    let mine: String = f
        .lines()
        .filter(|l| l.starts_with("certutil;"))
        .map(|l| format!("{l}\n"))
        .collect();
    let total = count(&mine, "");
    assert!(total >= 20, "{total} certutil samples:\n{mine}");
    // The probe: libsoftokn3's own (static, so unnamed) function above NSPR's exported
    // PR_Access above glibc's access, and the whole stack down to the C runtime's entry.
    let probe = mine
        .lines()
        .filter(|l| {
            let fr: Vec<&str> = l.split(';').collect();
            // glibc's `access` is `__GI___access` where its debug info names it.
            fr.windows(3).any(|w| {
                w[0].starts_with("libsoftokn3.so+0x")
                    && w[1] == "PR_Access"
                    && w[2].ends_with("access")
            }) && l.contains("__libc_start")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum::<u64>();
    assert!(
        probe >= 3,
        "{probe} samples of libsoftokn3 -> PR_Access -> access from __libc_start_main:\n{mine}"
    );
    // Most certutil samples in user code reach the root (NSS_Initialize is on the way of all
    // the database work).
    let rooted = count(&mine, "__libc_start");
    assert!(
        rooted * 2 >= total,
        "{rooted} of {total} certutil samples reach __libc_start_main:\n{mine}"
    );

    // glibc's static __libc_start_call_main has no symbol in the shipped library: with
    // libc6-dbg installed it is named from the debug info found by build id, without it the
    // frame is an offset.
    if !Path::new("/usr/share/doc/libc6-dbg").exists() {
        return skip(
            TEST,
            "libc6-dbg is not installed: debug-info naming not checked",
        );
    }
    assert!(count(&mine, ";__libc_start_call_main;") > 0, "{mine}");
    let o = run_env(
        &[
            "flame",
            "--dir",
            s(&store),
            "--from",
            &from,
            "--to",
            &to,
            "--folded",
            "--comm",
            "certutil",
        ],
        ("JITTERSCOPE_DEBUG_DIRS", s(&tmp.path().join("no-debug"))),
    );
    assert_eq!(count(&o, "__libc_start_call_main"), 0, "{o}");
    assert!(count(&o, ";libc.so.6+0x") > 0, "{o}");
}

/// Runs jitterscope with one more environment variable; its stdout.
fn run_env(args: &[&str], (k, v): (&str, &str)) -> String {
    let mut c = cmd();
    c.args(args).env(k, v);
    let o = common::run_command(c, T);
    assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
    text(&o.stdout)
}

/// The leaf and its caller in `perf script` lines of `pid`, as `module+0xoffset` (file offset,
/// callers' return addresses minus one, as jitterscope keeps them) or perf's symbol name.
fn perf_pairs(
    script: &str,
    pid: u32,
    maps: &[jitterscope_profile::maps::Mapping],
) -> Vec<(String, String)> {
    let table = jitterscope_profile::maps::Table::new(maps.to_vec());
    let name = |ip: u64, sym: &str, dso: &str, caller: bool| -> Option<String> {
        if sym != "[unknown]" {
            return Some(sym.split("+0x").next().unwrap_or(sym).to_string());
        }
        let a = if caller { ip - 1 } else { ip };
        // perf prints addresses it could not name relative to their file already.
        let Some(m) = table.find(a) else {
            let base = dso.rsplit('/').next().unwrap_or(dso);
            return Some(format!("{base}+0x{ip:x}"));
        };
        let base = m.path.rsplit('/').next().unwrap_or(&m.path);
        Some(format!("{base}+0x{:x}", m.file_offset(a)))
    };
    let mut out = Vec::new();
    let mut cur: Option<u32> = None;
    let mut frames: Vec<String> = Vec::new();
    let flush = |cur: Option<u32>, frames: &mut Vec<String>, out: &mut Vec<(String, String)>| {
        if cur == Some(pid) && frames.len() >= 2 {
            out.push((frames[0].clone(), frames[1].clone()));
        }
        frames.clear();
    };
    for l in script.lines() {
        if l.trim().is_empty() {
            continue;
        }
        if !l.starts_with(char::is_whitespace) {
            flush(cur, &mut frames, &mut out);
            // "xz 1234 ..." : comm, pid
            cur = l.split_whitespace().nth(1).and_then(|p| p.parse().ok());
            continue;
        }
        // "\t    7f12345678 sym+0x12 (/usr/lib/...)"
        let mut it = l.split_whitespace();
        let (Some(ip), Some(sym)) = (it.next(), it.next()) else {
            continue;
        };
        let Ok(ip) = u64::from_str_radix(ip, 16) else {
            continue;
        };
        if ip >= 0xffff_8000_0000_0000 {
            continue; // kernel frames
        }
        let dso = l
            .rsplit_once('(')
            .map(|(_, d)| d.trim_end().trim_end_matches(')'))
            .unwrap_or("");
        let caller = !frames.is_empty();
        frames.push(name(ip, sym, dso, caller).unwrap_or_else(|| format!("0x{ip:x}")));
    }
    flush(cur, &mut frames, &mut out);
    out
}

/// Leaves by samples, most first, each with its callers by samples, most first.
type Leaves = Vec<(String, u64, Vec<(String, u64)>)>;

fn by_leaf(pairs: &[(String, String)]) -> Leaves {
    let mut m: HashMap<&str, HashMap<&str, u64>> = HashMap::new();
    for (l, c) in pairs {
        *m.entry(l).or_default().entry(c).or_default() += 1;
    }
    let mut v: Leaves = m
        .into_iter()
        .map(|(l, cs)| {
            let mut cs: Vec<(String, u64)> =
                cs.into_iter().map(|(c, n)| (c.to_string(), n)).collect();
            cs.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            (l.to_string(), cs.iter().map(|c| c.1).sum(), cs)
        })
        .collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

#[test]
fn xz_stacks_agree_with_perf_dwarf() {
    compressor_agrees_with_perf(
        "xz_stacks_agree_with_perf_dwarf",
        "xz",
        "exec xz -T1 -6 -c \"$1\" >/dev/null",
    );
}

/// gzip keeps its hot loop (`deflate`, `longest_match`) in its own stripped executable rather
/// than in a library: the unwinding starts from code named by file offset in the main binary.
#[test]
fn gzip_stacks_agree_with_perf_dwarf() {
    compressor_agrees_with_perf(
        "gzip_stacks_agree_with_perf_dwarf",
        "gzip",
        "exec gzip -6 -c \"$1\" \"$1\" \"$1\" >/dev/null",
    );
}

/// `prog` (run by the shell line `script`, `$1` the input) compressing for five seconds,
/// sampled by the recorder and by `perf record --call-graph dwarf` at once: the hottest user
/// addresses and their top callers agree.
fn compressor_agrees_with_perf(test: &str, prog: &str, script: &str) {
    // Each measures samples of its own workload: alone on the CPUs.
    let _serial = serial();
    if !is_root() {
        return skip(test, "needs root for system-wide perf sampling");
    }
    for p in [prog, "perf"] {
        if !have(p) {
            return skip(test, &format!("{p} is not installed"));
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    // Input: this binary, compressible but not trivially.
    let input = common::bin();
    let store = tmp.path().join("store");
    let rec = record(&store, "14s", &[]);
    std::thread::sleep(Duration::from_millis(1500));
    let data = tmp.path().join("perf.data");
    let mut perf = ChildGuard::new(
        Command::new("perf")
            .args([
                "record",
                "-q",
                "-F",
                "99",
                "--call-graph",
                "dwarf",
                "-o",
                s(&data),
                "-a",
                "--",
                "sleep",
                "9",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("perf record"),
    );
    std::thread::sleep(Duration::from_millis(1500));
    let from = now_arg();
    let mut worker = ChildGuard::new(
        Command::new("sh")
            .args(["-c", script, "sh", input])
            .spawn()
            .expect(prog),
    );
    let pid = worker.pid();
    std::thread::sleep(Duration::from_millis(500));
    let maps = jitterscope_profile::maps::parse_maps(
        &std::fs::read(format!("/proc/{pid}/maps")).expect("maps"),
    );
    std::thread::sleep(Duration::from_millis(4500));
    worker.signal(libc::SIGKILL);
    let _ = worker.wait_timeout(Duration::from_secs(5));
    let to = now_arg();
    let st = perf
        .wait_timeout(Duration::from_secs(30))
        .expect("perf ends");
    assert!(st.success(), "perf record: {st:?}");
    let Some(_) = finish(rec) else {
        return skip(test, "the profiler cannot run here");
    };

    let o = Command::new("perf")
        .args([
            "script",
            "-i",
            s(&data),
            "-F",
            "comm,pid,ip,sym,dso",
            "--pid",
            &pid.to_string(),
        ])
        .output()
        .expect("perf script");
    assert!(o.status.success(), "perf script: {}", text(&o.stderr));
    let theirs = perf_pairs(&text(&o.stdout), pid, &maps);

    let f = folded(&store, &from, &to, &["--pid", &pid.to_string()]);
    let mut ours: Vec<(String, String)> = Vec::new();
    for l in f.lines() {
        let Some((stack, n)) = l.rsplit_once(' ') else {
            continue;
        };
        // comm first, then root .. leaf; the user part only, as on perf's side.
        let fr: Vec<&str> = stack.split(';').filter(|f| !f.ends_with("_[k]")).collect();
        let n: usize = n.parse().unwrap_or(0);
        if fr.len() >= 3 {
            let (leaf, caller) = (fr[fr.len() - 1], fr[fr.len() - 2]);
            for _ in 0..n {
                ours.push((leaf.to_string(), caller.to_string()));
            }
        }
    }
    assert!(
        ours.len() >= 200,
        "{} {prog} samples of ours:\n{f}",
        ours.len()
    );
    assert!(
        theirs.len() >= 200,
        "{} {prog} samples of perf's",
        theirs.len()
    );
    let (mine, perfs) = (by_leaf(&ours), by_leaf(&theirs));
    let show = |v: &Leaves| -> String {
        v.iter()
            .take(8)
            .map(|(l, n, cs)| format!("  {n:4} {l} <- {:?}\n", &cs[..cs.len().min(3)]))
            .collect()
    };
    let report = format!(
        "ours ({} samples):\n{}perf's ({} samples):\n{}",
        ours.len(),
        show(&mine),
        theirs.len(),
        show(&perfs)
    );
    eprintln!("{report}");
    // The hot addresses are the same: most of our five hottest are among perf's ten.
    let perf_top: Vec<&str> = perfs.iter().take(10).map(|(l, _, _)| l.as_str()).collect();
    let shared = mine
        .iter()
        .take(5)
        .filter(|(l, _, _)| perf_top.contains(&l.as_str()))
        .count();
    assert!(
        shared >= 4,
        "{shared} of our 5 hottest in perf's 10\n{report}"
    );
    // And so are their callers: for each hot address both sampled well, the same top caller
    // (the unwinding's own result: these are internal functions of stripped liblzma).
    let mut compared = 0;
    for (l, n, cs) in mine.iter().take(5) {
        let Some((_, pn, pcs)) = perfs.iter().find(|(pl, _, _)| pl == l) else {
            continue;
        };
        if *n < 15 || *pn < 15 {
            continue;
        }
        compared += 1;
        assert_eq!(cs[0].0, pcs[0].0, "top caller of {l} differs\n{report}");
    }
    assert!(
        compared >= 1,
        "no hot address sampled enough by both\n{report}"
    );
}

/// Where `scripts/setup.sh --test` puts PyPI's py-spy, else PATH.
fn py_spy() -> Option<std::path::PathBuf> {
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/py-spy");
    if local.is_file() {
        return Some(local);
    }
    jitterscope_testkit::which("py-spy", &[])
}

/// `py-spy dump`'s frames of `pid`'s first thread, innermost first: (function, file base
/// name, line).
fn py_spy_dump(py_spy: &Path, pid: u32) -> Vec<(String, String, u32)> {
    let o = Command::new(py_spy)
        .args(["dump", "--pid", &pid.to_string()])
        .output()
        .expect("py-spy dump");
    assert!(o.status.success(), "py-spy dump: {}", text(&o.stderr));
    let out = text(&o.stdout);
    let mut frames = Vec::new();
    let mut in_thread = false;
    for l in out.lines() {
        if l.starts_with("Thread ") {
            if in_thread {
                break;
            }
            in_thread = true;
            continue;
        }
        // "    c (abc.py:4)"
        let Some(f) = l.strip_prefix("    ").filter(|_| in_thread) else {
            continue;
        };
        frames.extend(parse_py_frame(f));
    }
    assert!(!frames.is_empty(), "no frames in py-spy's dump:\n{out}");
    frames
}

/// `name (path:line)`, as py-spy prints a frame and as our `py:` frames are named (folded
/// output writes their spaces as `_`).
fn parse_py_frame(f: &str) -> Option<(String, String, u32)> {
    let f = f.strip_prefix("py:").unwrap_or(f);
    let (name, rest) = f.rsplit_once(" (").or_else(|| f.rsplit_once("_("))?;
    let (path, line) = rest.strip_suffix(')')?.rsplit_once(':')?;
    let base = path.rsplit('/').next().unwrap_or(path);
    Some((name.to_string(), base.to_string(), line.parse().ok()?))
}

/// The interpreters to run: Debian's 3.11 (required), and pyenv's 3.8–3.10, 3.12 and 3.13
/// where this machine has them.
fn interpreters() -> (Vec<(String, std::path::PathBuf)>, Vec<String>) {
    let mut found = vec![("3.11 (Debian)".to_string(), "/usr/bin/python3.11".into())];
    let mut missing = Vec::new();
    let root = std::env::var_os("PYENV_ROOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(&std::env::var_os("HOME").unwrap_or_default()).join(".pyenv"));
    for minor in [8, 9, 10, 12, 13] {
        let bin = std::fs::read_dir(root.join("versions"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("3.{minor}.")))
            })
            .map(|p| p.join(format!("bin/python3.{minor}")))
            .find(|b| b.is_file());
        match bin {
            Some(b) => found.push((format!("3.{minor}"), b)),
            None => missing.push(format!("3.{minor}")),
        }
    }
    (found, missing)
}

/// The `py:` frames of a folded stack (root first), if each run of them stands right above
/// the evaluation loop's native frame.
fn py_chain(stack: &str) -> Option<Vec<(String, String, u32)>> {
    let frames: Vec<&str> = stack.split(';').collect();
    let mut out = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        if !f.starts_with("py:") {
            continue;
        }
        let prev = frames[i - 1];
        if !prev.starts_with("py:") && prev != "_PyEval_EvalFrameDefault" {
            return None;
        }
        out.push(parse_py_frame(f)?);
    }
    Some(out)
}

/// Stops the recorder of a Python test: `None` (said SKIPPED) when the profiler could not run,
/// and a failure when it could but did not read the interpreters' frames.
fn finish_python(rec: ChildGuard, test: &str) -> Option<()> {
    let Some(log) = finish(rec) else {
        skip(test, "the profiler cannot run here");
        return None;
    };
    assert!(
        !log.contains("Python frames") && !log.contains("are not read"),
        "{log}"
    );
    Some(())
}

/// Root and Debian's python3.11, which both Python tests need; says SKIPPED when one lacks.
fn python_can_be_sampled(test: &str) -> bool {
    if !is_root() {
        skip(test, "needs root for system-wide perf sampling and BPF");
        return false;
    }
    if !Path::new("/usr/bin/python3.11").is_file() {
        skip(test, "Debian's python3.11 is not installed");
        return false;
    }
    true
}

#[test]
fn python_frames_stand_above_the_evaluation_loop_and_agree_with_py_spy() {
    // Each measures samples of its own workload: alone on the CPUs.
    let _serial = serial();
    const TEST: &str = "python_frames_stand_above_the_evaluation_loop_and_agree_with_py_spy";
    if !python_can_be_sampled(TEST) {
        return;
    }
    let Some(py_spy) = py_spy() else {
        return skip(
            TEST,
            "py-spy is not installed (scripts/setup.sh --test puts PyPI's in target/tools)",
        );
    };
    let (pythons, missing) = interpreters();
    for v in &missing {
        // Debian's 3.11 is what this test requires; the other versions are checked where the
        // machine has them, and said when it does not.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: {TEST}[CPython {v}]: not installed (pyenv)"
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("nested.py");
    std::fs::write(
        &script,
        "def c():\n    x = 0\n    for i in range(200000):\n        x += i\n    return x\n\n\n\
         def b():\n    return c()\n\n\n\
         def a():\n    while True:\n        b()\n\n\n\
         a()\n",
    )
    .unwrap();
    let store = tmp.path().join("store");
    let rec = record(&store, "11s", &[]);
    std::thread::sleep(Duration::from_millis(1500));
    let from = now_arg();
    let mut running = Vec::new();
    for (v, bin) in &pythons {
        let c = ChildGuard::new(Command::new(bin).arg(&script).spawn().expect("python"));
        running.push((v.clone(), c));
    }
    std::thread::sleep(Duration::from_millis(3000));
    let dumps: Vec<_> = running
        .iter()
        .map(|(_, c)| py_spy_dump(&py_spy, c.pid()))
        .collect();
    std::thread::sleep(Duration::from_millis(4000));
    for (_, c) in &mut running {
        c.signal(libc::SIGKILL);
        let _ = c.wait_timeout(Duration::from_secs(5));
    }
    let to = now_arg();
    let Some(()) = finish_python(rec, TEST) else {
        return;
    };

    for ((v, c), theirs) in running.iter().zip(&dumps) {
        let pid = c.pid();
        let f = folded(&store, &from, &to, &["--pid", &pid.to_string()]);
        let mut total = 0u64;
        let mut nested = 0u64;
        let mut chains: HashMap<Vec<(String, String, u32)>, u64> = HashMap::new();
        for l in f.lines() {
            let Some((stack, n)) = l.rsplit_once(' ') else {
                continue;
            };
            let n: u64 = n.parse().unwrap_or(0);
            total += n;
            let Some(py) = py_chain(stack) else { continue };
            let names: Vec<&str> = py.iter().map(|(n, _, _)| n.as_str()).collect();
            if names == ["<module>", "a", "b", "c"] {
                nested += n;
                *chains.entry(py).or_default() += n;
            }
        }
        eprintln!(
            "CPython {v}: {nested} of {total} samples show <module> → a → b → c; \
             py-spy: {theirs:?}"
        );
        assert!(total >= 60, "CPython {v}: {total} samples:\n{f}");
        // The first samples of a process come before it is known to be an interpreter.
        assert!(
            nested * 100 >= total * 85,
            "CPython {v}: {nested} of {total} samples with py:<module>;py:a;py:b;py:c \
             above the loop:\n{f}"
        );
        // py-spy agrees: the same functions in the same files, and the callers at the same
        // lines (the innermost frame's line moves with the loop).
        let (ours, _) = chains.iter().max_by_key(|(_, n)| **n).expect("a chain");
        let mut ours: Vec<(String, String, u32)> = ours.clone();
        ours.reverse();
        assert_eq!(
            ours.len(),
            theirs.len(),
            "CPython {v}: ours {ours:?}\npy-spy {theirs:?}"
        );
        for (i, (o, t)) in ours.iter().zip(theirs).enumerate() {
            assert_eq!(
                (&o.0, &o.1),
                (&t.0, &t.1),
                "CPython {v}, frame {i}: ours {ours:?}\npy-spy {theirs:?}"
            );
            if i > 0 {
                assert_eq!(
                    o.2, t.2,
                    "CPython {v}, line of frame {i}: ours {ours:?}\npy-spy {theirs:?}"
                );
            }
        }
    }
}

/// CPython frees code objects as it runs and puts new ones where they were (a CI run named
/// `b` after `_distutils_hack`'s class body, sampled at the interpreter's start, whose code
/// had stood at the same address). Here twelve functions are compiled, run for half a second
/// and freed in turn, and CPython says by `id()` that they share addresses: each is named
/// after itself, not after the first that stood where it stands.
#[test]
fn python_code_put_where_freed_code_was_is_named_after_itself() {
    let _serial = serial();
    const TEST: &str = "python_code_put_where_freed_code_was_is_named_after_itself";
    if !python_can_be_sampled(TEST) {
        return;
    }
    const GENS: usize = 12;
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("gens.py");
    // The function's globals hold the function: a cycle, freed by the collector.
    std::fs::write(
        &script,
        format!(
            "import gc, time\n\
             for k in range({GENS}):\n    \
                 src = f'def gen{{k}}(t):\\n    end = t() + 0.5\\n    x = 0\\n    \
                 while t() < end:\\n        x += 1\\n    return x\\n'\n    \
                 ns = {{}}\n    \
                 exec(compile(src, f'gen{{k}}.py', 'exec'), ns)\n    \
                 f = ns[f'gen{{k}}']\n    \
                 print(hex(id(f.__code__)), flush=True)\n    \
                 f(time.monotonic)\n    \
                 del f, ns\n    \
                 gc.collect()\n"
        ),
    )
    .unwrap();
    let store = tmp.path().join("store");
    let rec = record(&store, "10s", &[]);
    std::thread::sleep(Duration::from_millis(1500));
    let from = now_arg();
    let py = Command::new("/usr/bin/python3.11")
        .arg(&script)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python");
    let pid = py.id();
    let out = py.wait_with_output().expect("python runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    // `--to` is whole seconds: past the second the last function ran in.
    std::thread::sleep(Duration::from_millis(1500));
    let to = now_arg();
    let Some(()) = finish_python(rec, TEST) else {
        return;
    };
    let ids: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    let distinct: std::collections::HashSet<&String> = ids.iter().collect();
    assert!(
        ids.len() == GENS && distinct.len() <= GENS / 2,
        "CPython gave the functions' code {} addresses of {GENS}, not the reuse this test \
         is about: {ids:?}",
        distinct.len()
    );
    let f = folded(&store, &from, &to, &["--pid", &pid.to_string()]);
    let mut by_gen: HashMap<String, u64> = HashMap::new();
    let mut other = Vec::new();
    for l in f.lines() {
        let Some((stack, n)) = l.rsplit_once(' ') else {
            continue;
        };
        let n: u64 = n.parse().unwrap_or(0);
        for frame in stack.split(';').filter(|f| f.starts_with("py:")) {
            match parse_py_frame(frame) {
                Some((name, file, _)) if name.starts_with("gen") => {
                    assert_eq!(format!("{name}.py"), file, "{frame}");
                    *by_gen.entry(name).or_default() += n;
                }
                Some((name, _, _)) if name == "<module>" => {}
                _ => other.push(frame.to_string()),
            }
        }
    }
    eprintln!("samples by function: {by_gen:?}; code at {ids:?}");
    // Each ran for half a second and the profiler reads an address again every quarter
    // second: each has about as many samples as the others.
    let most = by_gen.values().copied().max().unwrap_or(0);
    assert!(
        by_gen.len() == GENS && by_gen.values().all(|&n| n * 10 >= most * 6) && most >= 10,
        "{} of {GENS} functions named in their own samples: {by_gen:?}\n{f}",
        by_gen.len()
    );
    // A freed code object is not read as if it were alive (its strings are freed too).
    assert!(
        other.is_empty(),
        "frames named from freed memory: {other:?}"
    );
}
