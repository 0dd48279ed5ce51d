//! The recorder as a systemd service (`Type=notify`): it says it is ready once its sources and
//! writer run, and, when the unit sets `WatchdogSec=`, the sampling loop feeds the watchdog.
//! The loop is what must not stop (a read of a wedged `/proc` file, a lock never released):
//! every other thread can fall behind without the recording stopping, so only the loop pings,
//! and a loop that stops pinging is killed and restarted by systemd. Outside systemd
//! (`NOTIFY_SOCKET` unset) all of this does nothing.

use std::time::{Duration, Instant};

use sd_notify::NotifyState;

/// The service manager's watchdog, fed from the sampling loop.
pub struct Watchdog {
    /// How often a ping is sent: a quarter of `WatchdogSec=`, so two lost or late pings still
    /// leave time before the manager gives up.
    every: Option<Duration>,
    last: Option<Instant>,
}

impl Watchdog {
    /// Reads `WATCHDOG_USEC` (for this process only: `WATCHDOG_PID`).
    pub fn from_env() -> Watchdog {
        let every = sd_notify::watchdog_enabled()
            .map(|d| d / 4)
            .filter(|d| !d.is_zero());
        Watchdog { every, last: None }
    }

    /// The longest the loop may sleep and still ping in time; `None` without a watchdog.
    pub fn max_sleep(&self) -> Option<Duration> {
        self.every
    }

    /// Pings if one is due. Cheap when none is: one comparison.
    pub fn feed(&mut self) {
        let Some(every) = self.every else {
            return;
        };
        if self.last.is_some_and(|t| t.elapsed() < every) {
            return;
        }
        self.last = Some(Instant::now());
        let _ = sd_notify::notify(&[NotifyState::Watchdog]);
    }
}

/// Startup is finished: with `Type=notify`, `systemctl start` returns now, and units ordered
/// after this one start. `status` is what `systemctl status` shows.
pub fn ready(status: &str) {
    let _ = sd_notify::notify(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// The recorder is stopping (its last writes and pushes follow).
pub fn stopping() {
    let _ = sd_notify::notify(&[NotifyState::Stopping]);
}
