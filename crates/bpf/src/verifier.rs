//! libbpf's messages, kept off the terminal, and the verifier's verdict put into the error.
//!
//! libbpf prints each refused program's whole verifier log to stderr: hundreds of lines at
//! every start of `record` on a kernel where a tracer takes its fallback (5.10 refuses
//! madvise's BTF program and runqlat's 4-argument sched_switch; the kernel matrix showed it).
//! Here they are collected instead, and a failed load names the program and the verifier's
//! last word ("invalid func unknown#158"), which is what `tracers --check` and KERNELS.md
//! need to say why. `JITTERSCOPE_BPF_LOG=1` prints them as they come, for debugging.

use std::sync::{Mutex, Once};

use libbpf_rs::PrintLevel;

/// Lines kept: a verifier log is cut by libbpf anyway, and only the last one matters.
const KEEP: usize = 2000;

static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());
static INSTALL: Once = Once::new();

fn print(level: PrintLevel, msg: String) {
    if std::env::var_os("JITTERSCOPE_BPF_LOG").is_some_and(|v| v != "0") {
        eprint!("{msg}");
    }
    if level == PrintLevel::Debug {
        return;
    }
    let mut lines = LINES.lock().unwrap_or_else(|e| e.into_inner());
    lines.extend(msg.lines().map(str::to_owned));
    let n = lines.len();
    if n > KEEP {
        lines.drain(..n - KEEP);
    }
}

/// Routes libbpf's messages here (once per process).
pub(crate) fn install() {
    INSTALL.call_once(|| {
        libbpf_rs::set_print(Some((PrintLevel::Info, print)));
    });
}

/// Empties the collected lines and returns them.
pub(crate) fn take() -> Vec<String> {
    std::mem::take(&mut *LINES.lock().unwrap_or_else(|e| e.into_inner()))
}

/// The refused program and the verifier's reason from libbpf's lines, as "prog X: reason".
/// The reason is the last line of the last load log before its statistics line, or the
/// CO-RE relocation libbpf could not resolve.
pub(crate) fn verdict(lines: &[String]) -> Option<String> {
    let begin = lines
        .iter()
        .rposition(|l| l.contains("-- BEGIN PROG LOAD LOG --"));
    let prog = begin.and_then(|b| prog_name(&lines[b]));
    if let Some(b) = begin {
        let log = &lines[b + 1..];
        let end = log
            .iter()
            .position(|l| l.contains("-- END PROG LOAD LOG --"))
            .unwrap_or(log.len());
        let log = &log[..end];
        let reason = log
            .iter()
            .find(|l| l.starts_with("failed to resolve CO-RE relocation"))
            .or_else(|| {
                let stats = log.iter().rposition(|l| l.starts_with("processed "))?;
                log[..stats].iter().rev().find(|l| !l.trim().is_empty())
            })?;
        return Some(match prog {
            Some(p) => format!("prog {p}: {}", reason.trim()),
            None => reason.trim().to_string(),
        });
    }
    // Refused before the verifier ran (a missing attach target, a CO-RE failure in libbpf).
    lines
        .iter()
        .rev()
        .find(|l| l.contains("libbpf: prog '") && !l.contains("failed to load"))
        .map(|l| l.trim_start_matches("libbpf: ").trim().to_string())
}

fn prog_name(line: &str) -> Option<String> {
    let start = line.find("prog '")? + 6;
    let len = line[start..].find('\'')?;
    Some(line[start..start + len].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &str) -> Vec<String> {
        s.lines().map(str::to_owned).collect()
    }

    // The logs below are the heads and tails of what 5.10.0-32-amd64 printed in the kernel
    // matrix (tests/vm), cut in the middle.
    #[test]
    fn verdict_is_the_line_before_the_statistics() {
        let l = lines(
            "libbpf: prog 'madvise_flush': BPF program load failed: -EINVAL\n\
             libbpf: prog 'madvise_flush': -- BEGIN PROG LOAD LOG --\n\
             arg#0 type is not a struct\n\
             Unrecognized arg#0 type PTR\n\
             4: (85) call unknown#158\n\
             invalid func unknown#158\n\
             processed 5 insns (limit 1000000) max_states_per_insn 0 total_states 0 peak_states 0 mark_read 0\n\
             -- END PROG LOAD LOG --\n\
             libbpf: prog 'madvise_flush': failed to load: -EINVAL\n\
             libbpf: failed to load object 'madvise_bpf'",
        );
        assert_eq!(
            verdict(&l).as_deref(),
            Some("prog madvise_flush: invalid func unknown#158")
        );
    }

    #[test]
    fn verdict_prefers_the_unresolved_relocation() {
        let l = lines(
            "libbpf: prog 'js_tasks': -- BEGIN PROG LOAD LOG --\n\
             330: <invalid CO-RE relocation>\n\
             failed to resolve CO-RE relocation <byte_off> [63] struct mm_struct___old.rss_stat.count[0] (0:0:0:0 @ offset 0)\n\
             processed 265 insns (limit 1000000) max_states_per_insn 0 total_states 12 peak_states 12 mark_read 6\n\
             -- END PROG LOAD LOG --",
        );
        assert!(verdict(&l)
            .unwrap()
            .starts_with("prog js_tasks: failed to resolve CO-RE relocation"));
    }

    #[test]
    fn no_log_no_verdict() {
        assert_eq!(verdict(&[]), None);
        assert_eq!(
            verdict(&lines("libbpf: prog 'x': failed to load: -EINVAL")),
            None
        );
    }

    #[test]
    fn verdict_survives_any_lines() {
        // A cut log (libbpf truncates long ones) or stray lines must not panic.
        for s in [
            "-- BEGIN PROG LOAD LOG --",
            "libbpf: prog ' -- BEGIN PROG LOAD LOG --\nprocessed ",
            "-- END PROG LOAD LOG --\n-- BEGIN PROG LOAD LOG --\n\nprocessed 1",
            "libbpf: prog 'a",
        ] {
            let _ = verdict(&lines(s));
        }
    }
}
