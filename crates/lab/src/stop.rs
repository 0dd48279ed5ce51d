//! SIGINT/SIGTERM/SIGHUP as a flag, so a lab run (and each worker) can leave its loops and
//! clean up instead of dying with its cgroups, mounts and files still in place.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

static STOP: AtomicBool = AtomicBool::new(false);
static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only async-signal-safe work here: two atomic stores.
    SIGNAL.store(sig, Ordering::SeqCst);
    STOP.store(true, Ordering::SeqCst);
}

/// Routes SIGINT, SIGTERM and SIGHUP to the flag. Idempotent.
pub fn install() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to atomics; sigaction is given a zeroed, valid struct.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// True once a stop signal arrived.
pub fn requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// The signal that asked to stop, if any (for the exit code: 128 + signal).
pub fn signal() -> Option<i32> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// Sleeps up to `d` in short steps; false when a stop signal cut it short.
pub fn sleep(d: Duration) -> bool {
    sleep_until(Instant::now() + d)
}

/// Sleeps until `deadline` in short steps; false when a stop signal cut it short.
pub fn sleep_until(deadline: Instant) -> bool {
    loop {
        if requested() {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(50)));
    }
}
