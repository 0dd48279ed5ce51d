//! The Linux capabilities the recorder uses, and which of them this process has.
//!
//! The recorder is meant to run as a dedicated user with only these (systemd's
//! `AmbientCapabilities=`), not as root. So features are gated on the capability they need, not on
//! the user id, and a missing one is reported by name with what it costs.

/// A capability, by its bit number (linux/capability.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cap(pub u8, pub &'static str);

/// Read any file and search any directory (slabinfo, tracefs, root-only files).
pub const DAC_READ_SEARCH: Cap = Cap(2, "CAP_DAC_READ_SEARCH");
/// Lock memory beyond RLIMIT_MEMLOCK.
pub const IPC_LOCK: Cap = Cap(14, "CAP_IPC_LOCK");
/// Read other users' /proc/<pid> files guarded by ptrace access (io, maps, stack).
pub const SYS_PTRACE: Cap = Cap(19, "CAP_SYS_PTRACE");
/// The catch-all that covers CAP_BPF and CAP_PERFMON (and is all kernels before 5.8 know).
pub const SYS_ADMIN: Cap = Cap(21, "CAP_SYS_ADMIN");
/// Raise the scheduling priority.
pub const SYS_NICE: Cap = Cap(23, "CAP_SYS_NICE");
/// Lower oom_score_adj and raise resource limits.
pub const SYS_RESOURCE: Cap = Cap(24, "CAP_SYS_RESOURCE");
/// Read the kernel log when kernel.dmesg_restrict is 1.
pub const SYSLOG: Cap = Cap(34, "CAP_SYSLOG");
/// perf events and BPF programs that read kernel memory (5.8+).
pub const PERFMON: Cap = Cap(38, "CAP_PERFMON");
/// Load BPF programs and create maps (5.8+).
pub const BPF: Cap = Cap(39, "CAP_BPF");

/// What `record` uses each capability for; the set a service should grant.
pub const RECORDER: &[(Cap, &str)] = &[
    (BPF, "the BPF tracers and the task iterator"),
    (
        PERFMON,
        "the tracers' tracepoints and kprobes, and the stack sampler on every CPU",
    ),
    (SYS_PTRACE, "other users' /proc/<pid>/io, maps and stacks"),
    (
        DAC_READ_SEARCH,
        "/proc/slabinfo, tracefs and the root-only cgroup and /proc files",
    ),
    (
        SYS_RESOURCE,
        "OOM protection (oom_score_adj) and raising RLIMIT_MEMLOCK to lock memory",
    ),
    (SYS_NICE, "running at a negative nice"),
    (
        SYSLOG,
        "the kernel log (/dev/kmsg: OOM kills) when kernel.dmesg_restrict is 1, and kernel addresses in /proc/kallsyms (kernel frames, shrinker names, TLB senders) unless kernel.kptr_restrict is 0 and kernel.perf_event_paranoid at most 1",
    ),
];

/// The effective set, parsed from `CapEff:` of `/proc/self/status` (a hex bit mask).
pub fn parse_eff(status: &str) -> Option<u64> {
    parse_set(status, "CapEff")
}

/// One capability set of a `/proc/<pid>/status` by its field name (`CapEff`, `CapBnd`, `CapAmb`).
pub fn parse_set(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
}

/// This process's effective capabilities. If they cannot be read, root is assumed to have all
/// and anyone else none, which is what a kernel without capabilities would do.
pub fn effective() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| parse_eff(&s))
        .unwrap_or_else(|| {
            // SAFETY: geteuid has no failure mode.
            if unsafe { libc::geteuid() } == 0 {
                u64::MAX
            } else {
                0
            }
        })
}

/// Whether `set` holds `c`.
pub fn has_in(set: u64, c: Cap) -> bool {
    c.0 < 64 && set & (1 << c.0) != 0
}

/// Whether this process holds `c`.
pub fn has(c: Cap) -> bool {
    has_in(effective(), c)
}

/// Whether BPF programs that read kernel memory and attach to tracepoints can load: CAP_BPF with
/// CAP_PERFMON (5.8+), or CAP_SYS_ADMIN, which covers both (and is all older kernels know).
pub fn can_trace_in(set: u64) -> bool {
    (has_in(set, BPF) && has_in(set, PERFMON)) || has_in(set, SYS_ADMIN)
}

/// [`can_trace_in`] for this process.
pub fn can_trace() -> bool {
    can_trace_in(effective())
}

/// One line per recorder capability missing from `set`: what is lost without it.
pub fn missing_in(set: u64) -> Vec<String> {
    let admin = has_in(set, SYS_ADMIN);
    RECORDER
        .iter()
        .filter(|(c, _)| !(has_in(set, *c) || admin && matches!(c.0, 38 | 39)))
        .map(|(c, what)| format!("without {}: {what}", c.1))
        .collect()
}

/// `kernel.perf_event_paranoid`, if readable.
pub fn perf_paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Debian's and Ubuntu's kernels add levels of `kernel.perf_event_paranoid` above 2 (Debian's
/// default is 3, Ubuntu's 4) at which perf_event_open refuses every caller without
/// CAP_SYS_ADMIN, CAP_PERFMON included: measured on Debian's 6.1 in the package test's guest
/// (tests/vm/deb.sh), where the recorder's seven capabilities sampled nothing and attached no
/// tracepoint until the level was 2. The line that says so and what to do, if it applies to
/// `set`.
pub fn perf_restricted_in(set: u64, paranoid: Option<i32>) -> Option<String> {
    let level = paranoid?;
    (level > 2 && !has_in(set, SYS_ADMIN)).then(|| {
        format!(
            "kernel.perf_event_paranoid is {level}: above 2 (Debian's and Ubuntu's kernels) perf \
             events need CAP_SYS_ADMIN, so the stack sampler and the tracers that attach to \
             tracepoints are off; set it to 2, the kernel's own default (the Debian package's \
             /usr/lib/sysctl.d/60-jitterscope.conf does), or grant CAP_SYS_ADMIN"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_effective_set() {
        let s = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000000c000880004\n";
        let e = parse_eff(s).unwrap();
        for c in [DAC_READ_SEARCH, SYS_PTRACE, SYS_NICE, PERFMON, BPF] {
            assert!(has_in(e, c), "{c:?}");
        }
        assert!(!has_in(e, SYS_RESOURCE) && !has_in(e, SYS_ADMIN));
        assert!(can_trace_in(e));
        assert_eq!(
            missing_in(e),
            [
                "without CAP_SYS_RESOURCE: OOM protection (oom_score_adj) and raising RLIMIT_MEMLOCK to lock memory",
                "without CAP_SYSLOG: the kernel log (/dev/kmsg: OOM kills) when kernel.dmesg_restrict is 1, and kernel addresses in /proc/kallsyms (kernel frames, shrinker names, TLB senders) unless kernel.kptr_restrict is 0 and kernel.perf_event_paranoid at most 1"
            ]
        );
        assert!(missing_in(u64::MAX).is_empty());
        assert_eq!(missing_in(0).len(), RECORDER.len());
        // CAP_SYS_ADMIN covers CAP_BPF and CAP_PERFMON.
        assert!(can_trace_in(1 << 21));
        assert_eq!(missing_in(1 << 21).len(), RECORDER.len() - 2);
        assert_eq!(parse_eff("CapEff:\tzz\n"), None);
        assert_eq!(
            parse_set("CapBnd:\t000001ffffffffff\n", "CapBnd"),
            Some(0x1ff_ffff_ffff)
        );
        assert_eq!(parse_set("CapBndX:\t1\n", "CapBnd"), None);
        assert_eq!(parse_eff(""), None);
    }

    #[test]
    fn paranoid_levels_above_two_need_sys_admin() {
        let recorder = RECORDER.iter().fold(0u64, |m, (c, _)| m | 1 << c.0);
        let line = perf_restricted_in(recorder, Some(3)).unwrap();
        assert!(
            line.starts_with("kernel.perf_event_paranoid is 3:"),
            "{line}"
        );
        assert!(perf_restricted_in(recorder, Some(4)).is_some());
        assert_eq!(perf_restricted_in(recorder, Some(2)), None);
        assert_eq!(perf_restricted_in(recorder, Some(-1)), None);
        assert_eq!(perf_restricted_in(recorder, None), None);
        assert_eq!(perf_restricted_in(recorder | 1 << 21, Some(3)), None);
    }
}
