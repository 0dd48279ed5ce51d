//! The store's `LOCK`: one writer at a time, the recorder's or a repair's. Below both
//! (`writer` takes it, `check`'s repairs take it and write through the writer's frames).

use std::fs::OpenOptions;
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use crate::{Result, StoreError};

/// The store's writer lock: held by the recorder while it writes, and by a repair so no
/// recorder writes while files move.
pub struct StoreLock {
    _file: std::fs::File,
}

/// Takes the store's `LOCK` (flock, as the writer does), or [`StoreError::Locked`] when a
/// recorder holds it.
pub fn lock_store(dir: &Path) -> Result<StoreLock> {
    let lock_path = dir.join("LOCK");
    let file = crate::perms::open(
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false),
        &lock_path,
    )
    .map_err(|e| StoreError::io(&lock_path, e))?;
    // SAFETY: flock on a file descriptor we own; no memory is passed.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let err = io::Error::last_os_error();
        return Err(if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            StoreError::Locked {
                dir: dir.to_path_buf(),
            }
        } else {
            StoreError::io(&lock_path, err)
        });
    }
    Ok(StoreLock { _file: file })
}
