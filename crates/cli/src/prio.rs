//! Making the recorder keep its cadence when the host is saturated in kernel mode: the seed
//! cases lost their evidence because monitoring "could not be scheduled" during the storm.

/// What could and could not be arranged, for the one-time notes.
pub struct Hardening {
    /// Human-readable results, one per measure.
    pub notes: Vec<String>,
}

/// Raises the scheduling priority (nice -20, as atop does as root), locks current and future
/// memory so reclaim cannot page the recorder out in the middle of a storm, shields it from the
/// OOM killer, and raises the descriptor limit for the process reader's kept-open files. Each
/// failure is reported, none is fatal.
pub fn harden(nice: i32, lock_memory: bool) -> Hardening {
    let mut notes = Vec::new();
    // SAFETY: plain syscalls on the calling process with valid arguments.
    unsafe {
        if libc::setpriority(libc::PRIO_PROCESS, 0, nice) != 0 {
            notes.push(format!(
                "cannot raise priority to nice {nice}: {} (needs CAP_SYS_NICE)",
                std::io::Error::last_os_error()
            ));
        }
        if lock_memory && libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) != 0 {
            // Over RLIMIT_MEMLOCK without CAP_IPC_LOCK: CAP_SYS_RESOURCE may raise the limit.
            let unlimited = libc::rlimit {
                rlim_cur: libc::RLIM_INFINITY,
                rlim_max: libc::RLIM_INFINITY,
            };
            if libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) != 0
                || libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) != 0
            {
                notes.push(format!(
                    "cannot lock memory: {} (needs CAP_IPC_LOCK, CAP_SYS_RESOURCE or a higher RLIMIT_MEMLOCK, e.g. systemd's LimitMEMLOCK=infinity); the recorder may be paged out under memory pressure",
                    std::io::Error::last_os_error()
                ));
            }
        }
        let mut rl = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) == 0 && rl.rlim_cur < rl.rlim_max {
            rl.rlim_cur = rl.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &rl);
        }
    }
    if let Err(e) = std::fs::write("/proc/self/oom_score_adj", "-999") {
        notes.push(format!(
            "cannot protect from the OOM killer: {e} (needs CAP_SYS_RESOURCE)"
        ));
    }
    Hardening { notes }
}
