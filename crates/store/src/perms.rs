//! Who may read a store: its owner writes, the owner's group reads, nobody else does.
//!
//! Samples hold every process's command line, and command lines carry secrets often enough
//! (`--password=…`, tokens in URLs) that a store readable by every user would hand them out.
//! The modes are set explicitly, whatever the umask of whoever runs the recorder: a umask of
//! 0022 (a shell's usual) would otherwise leave files 0644 and directories 0755, and one of
//! 0077 would lock the group out of what it is meant to read (`jitterscope` group members and
//! `jitterscope-serve`).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Mode of every file the store creates.
pub const FILE_MODE: u32 = 0o640;
/// Mode of every directory the store creates (the store itself, `damaged/`).
pub const DIR_MODE: u32 = 0o750;

/// Opens a store file with `opts`, creating it [`FILE_MODE`]; a file that existed with
/// another mode is given it too, where this user owns it.
pub(crate) fn open(opts: &mut OpenOptions, path: &Path) -> io::Result<File> {
    let f = opts.mode(FILE_MODE).open(path)?;
    set(&f)?;
    Ok(f)
}

fn set(f: &File) -> io::Result<()> {
    match f.set_permissions(std::fs::Permissions::from_mode(FILE_MODE)) {
        // Another user's file (a LOCK left by root, read by a group member): theirs to set.
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Ok(()),
        r => r,
    }
}

/// Opens an existing store file to read it: never through a symlink, never blocking on a FIFO
/// or device put in a segment's place, and refusing anything but a regular file (a directory,
/// a socket), so that a reader reports such an entry as damage instead of hanging on it or
/// reading another file.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                io::Error::other("a symbolic link, not followed in a store")
            } else {
                e
            }
        })?;
    let ty = f.metadata()?.file_type();
    if !ty.is_file() {
        use std::os::unix::fs::FileTypeExt;
        let what = if ty.is_dir() {
            "a directory"
        } else if ty.is_fifo() {
            "a FIFO"
        } else if ty.is_socket() {
            "a socket"
        } else {
            "a device"
        };
        return Err(io::Error::other(format!("not a regular file ({what})")));
    }
    Ok(f)
}

/// Reads a whole store file through [`open_regular`].
pub fn read_regular(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut f = open_regular(path)?;
    let mut v = Vec::new();
    f.read_to_end(&mut v)?;
    Ok(v)
}

/// Creates `dir` and its missing parents; the ones created are [`DIR_MODE`]. An existing
/// directory keeps its mode: its owner chose it.
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    // The parents a store path needs (`/var/lib/x/store`) get the same mode, which the umask
    // may narrow; the store directory itself is set exactly.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn modes_ignore_the_umask() {
        let t = tempfile::tempdir().unwrap();
        // SAFETY: umask only changes this process's creation mask; restored below. The
        // other tests of this binary that create files set their modes explicitly.
        let old = unsafe { libc::umask(0o077) };
        let d = t.path().join("a/store");
        create_dir_all(&d).unwrap();
        let f = open(OpenOptions::new().write(true).create(true), &d.join("x")).unwrap();
        drop(f);
        unsafe { libc::umask(0o002) };
        let g = open(OpenOptions::new().write(true).create(true), &d.join("y")).unwrap();
        drop(g);
        unsafe { libc::umask(old) };
        assert_eq!(std::fs::metadata(&d).unwrap().mode() & 0o777, DIR_MODE);
        assert_eq!(
            std::fs::metadata(d.join("x")).unwrap().mode() & 0o777,
            FILE_MODE
        );
        assert_eq!(
            std::fs::metadata(d.join("y")).unwrap().mode() & 0o777,
            FILE_MODE
        );
    }
}
