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
        if lock_memory && !lock_all() {
            // Over RLIMIT_MEMLOCK without CAP_IPC_LOCK: CAP_SYS_RESOURCE may raise the limit.
            let unlimited = libc::rlimit {
                rlim_cur: libc::RLIM_INFINITY,
                rlim_max: libc::RLIM_INFINITY,
            };
            if libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) != 0 || !lock_all() {
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

/// Locks every page mapped now (populating them), and each page mapped later when it is first
/// touched. `MCL_FUTURE` alone populates and locks a later mapping whole when it is made: each
/// ELF file the stack sampler or the ClickHouse pusher maps to read a build id or symbols
/// (blazesym maps the whole file: 109 MB for this binary with its line tables, 150 MB for a
/// `librustc_driver` on a build host) became resident at once, which was the recorder's peak
/// RSS at start (260 MB) and at each episode close (up to 770 MB; issue 44). `MCL_ONFAULT`
/// (Linux 4.4) locks only the pages read. Kernels without it get `MCL_FUTURE` alone.
unsafe fn lock_all() -> bool {
    if libc::mlockall(libc::MCL_CURRENT) != 0 {
        return false;
    }
    libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE | libc::MCL_ONFAULT) == 0
        || libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) == 0
}
