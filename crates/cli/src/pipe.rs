//! Closed pipes: `jitterscope diagnose --json | head`.
//!
//! Rust's runtime ignores SIGPIPE, so a write to a pipe whose reader has gone fails with EPIPE,
//! and `println!` panics on it. Commands that only read and print let SIGPIPE end them, as it
//! ends `cat` ([`die_on_closed_pipe`]): a shell then reports 141. The others keep it ignored
//! and print through [`outln!`] and [`errln!`], which never panic:
//! - `record`, `serve` and `fleet` write to sockets (a server may close a pooled connection;
//!   `serve` must outlive a client that hangs up), where SIGPIPE would kill them; their log
//!   lines go on being dropped if stderr is closed, and recording goes on;
//! - `record --status` stops as on SIGTERM, flushing, once its reader has gone;
//! - `lab` has cgroups, mounts and processes to clean up whatever happens to its output, and
//!   `store check --repair` files to repair.
//!
//! Those end with [`STATUS`] when their output was closed, as a tool killed by SIGPIPE would.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// What a shell reports for a process killed by SIGPIPE: 128 + 13.
pub const STATUS: u8 = 128 + libc::SIGPIPE as u8;

static CLOSED: AtomicBool = AtomicBool::new(false);

/// Stderr's reader has gone: what is said there is dropped, nothing else changes.
static ERR_CLOSED: AtomicBool = AtomicBool::new(false);

/// The first write error other than a closed pipe (a full disk behind `> file`).
static FAILED: OnceLock<String> = OnceLock::new();

/// Lets a write to a closed pipe end the process by SIGPIPE, for a command with nothing to
/// clean up.
pub fn die_on_closed_pipe() {
    // SAFETY: restores the default disposition of one signal; no handler of ours is replaced
    // (nothing here installs one for SIGPIPE) and no other thread runs yet.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Whether a reader closed this process's stdout.
pub fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// The first error writing the output that was not a closed pipe.
pub fn failed() -> Option<&'static str> {
    FAILED.get().map(String::as_str)
}

/// Whether an error, or one of its causes, is a write to a closed pipe.
pub fn is_closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// `failed`: where to keep an error other than a closed pipe (stdout's; there is nowhere to say
/// that stderr failed).
fn write(
    mut w: impl Write,
    closed: &AtomicBool,
    failed: Option<&OnceLock<String>>,
    args: std::fmt::Arguments,
) -> bool {
    if closed.load(Ordering::Relaxed) {
        return false;
    }
    match w.write_fmt(args).and_then(|()| w.flush()) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            closed.store(true, Ordering::Relaxed);
            false
        }
        Err(e) => {
            if let Some(f) = failed {
                let _ = f.set(e.to_string());
            }
            false
        }
    }
}

/// Writes to stdout; false once it cannot (see [`closed`] and [`failed`]).
pub fn write_out(args: std::fmt::Arguments) -> bool {
    write(std::io::stdout().lock(), &CLOSED, Some(&FAILED), args)
}

/// Writes to stderr; false once it cannot.
pub fn write_err(args: std::fmt::Arguments) -> bool {
    write(std::io::stderr().lock(), &ERR_CLOSED, None, args)
}

/// `print!` that does not panic on a closed pipe.
macro_rules! out {
    ($($t:tt)*) => {{
        $crate::pipe::write_out(format_args!($($t)*));
    }};
}

/// `println!` that does not panic on a closed pipe.
macro_rules! outln {
    () => {{
        $crate::pipe::write_out(format_args!("\n"));
    }};
    ($($t:tt)*) => {{
        $crate::pipe::write_out(format_args!("{}\n", format_args!($($t)*)));
    }};
}

/// `eprintln!` that does not panic on a closed pipe.
macro_rules! errln {
    ($($t:tt)*) => {{
        $crate::pipe::write_err(format_args!("{}\n", format_args!($($t)*)));
    }};
}
