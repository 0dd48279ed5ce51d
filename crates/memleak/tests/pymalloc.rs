//! The pymalloc scan against the interpreter's own count, on a live python3 (root).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use jitterscope_memleak::growth::scan_order;
use jitterscope_memleak::procmem::ProcMem;
use jitterscope_memleak::pymalloc;
use jitterscope_sources::smaps::parse_smaps;
use jitterscope_testkit as testkit;

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn counts_what_the_interpreter_counts_with_its_types() {
    const TEST: &str = "counts_what_the_interpreter_counts_with_its_types";
    if !testkit::is_root() {
        return testkit::skip(TEST, "reading another process's memory needs root");
    }
    let Some(python3) = testkit::which("python3", &[]) else {
        return testkit::skip(TEST, "python3 is not installed");
    };
    let mut child = Command::new(python3)
        .args([
            "-c",
            r#"
import sys, time
class JsLeakMarker:
    pass
keep = [{"req": i} for i in range(200000)]
marks = [JsLeakMarker() for _ in range(200000)]
while True:
    print(sys.getallocatedblocks(), flush=True)
    sys.stdin.readline()
"#,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 starts");
    let out = child.stdout.take().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let pid = child.id();
    let _k = Kill(child);
    let mut lines = BufReader::new(out).lines();
    let own: u64 = lines.next().unwrap().unwrap().trim().parse().unwrap();
    let smaps = std::fs::read(format!("/proc/{pid}/smaps")).unwrap();
    let regions = scan_order(&parse_smaps(&smaps).unwrap(), None);
    let t = std::time::Instant::now();
    let h = pymalloc::scan(&ProcMem::open(pid).unwrap(), &regions, 4 << 30);
    let secs = t.elapsed().as_secs_f64();
    // Ask again: the interpreter blocked on stdin meanwhile, so both counts see one heap.
    use std::io::Write;
    writeln!(stdin).unwrap();
    let again: u64 = lines.next().unwrap().unwrap().trim().parse().unwrap();
    eprintln!(
        "own {own}/{again}, scanned {} blocks in {} pools ({} changing), {:.0} MiB in {:.3} s = {:.0} MiB/s; types {:?}",
        h.allocated_blocks,
        h.pools,
        h.pools_changing,
        h.bytes_scanned as f64 / 1048576.0,
        secs,
        h.bytes_scanned as f64 / 1048576.0 / secs,
        &h.types[..h.types.len().min(6)]
    );
    let diff = (h.allocated_blocks as f64 - own as f64).abs() / own as f64;
    assert!(
        diff < 0.02,
        "scan {} vs interpreter {own}",
        h.allocated_blocks
    );
    let count = |n: &str| h.types.iter().find(|t| t.name == n).map_or(0, |t| t.count);
    assert!(count("JsLeakMarker") >= 200_000, "{:?}", h.types);
    assert!(count("dict") >= 200_000, "{:?}", h.types);
}
