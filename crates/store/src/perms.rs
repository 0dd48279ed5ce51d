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
    // Never through a link planted in the store: creating or truncating an index, or opening
    // LOCK, would write to (and chmod) whatever it points at.
    let f = opts
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
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

/// Whether this process may write the store directory `dir` (create it, take its lock, add
/// and remove segments); `Err` says why not and what to do. A run as root is a write primitive
/// into any directory it is pointed at, so:
/// - `dir` itself must not be a symbolic link: a link left in `/tmp` or in a shared path would
///   send LOCK and the segments next to whatever it points at. (Links above it are the
///   administrator's layout and are followed.)
/// - an existing `dir` must belong to this user unless `allow_other_owner`: files created in
///   another user's directory would be this user's, which its owner's recorder then cannot
///   rotate or delete, and a directory of another user (0700, nobody) is not ours to fill.
pub fn writable_store_dir(dir: &Path, allow_other_owner: bool) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let m = match dir.symlink_metadata() {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.to_string()),
    };
    if m.file_type().is_symlink() {
        let to = std::fs::read_link(dir)
            .map(|t| format!(" (to {})", t.display()))
            .unwrap_or_default();
        return Err(format!(
            "is a symbolic link{to}: give the directory itself, so that no link can send the store's files elsewhere"
        ));
    }
    if !m.is_dir() {
        return Err("is not a directory".into());
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if m.uid() != me && !allow_other_owner {
        return Err(format!(
            "belongs to {}, not to {} who runs this: run as its owner, or give --allow-other-owner to write to it anyway",
            user_name(m.uid()),
            user_name(me)
        ));
    }
    Ok(())
}

/// `name (uid N)` from /etc/passwd, or `uid N`.
fn user_name(uid: u32) -> String {
    let name = std::fs::read_to_string("/etc/passwd").ok().and_then(|p| {
        p.lines().find_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let id: u32 = f.nth(1)?.parse().ok()?;
            (id == uid).then(|| name.to_string())
        })
    });
    match name {
        Some(n) => format!("{n} (uid {uid})"),
        None => format!("uid {uid}"),
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
/// directory keeps its mode: its owner chose it. A symbolic link in `dir`'s place is refused,
/// not followed (a repair's `damaged/` pointing elsewhere would move the store's files there).
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    match dir.symlink_metadata() {
        Ok(m) if m.file_type().is_symlink() => {
            return Err(io::Error::other("a symbolic link, not followed in a store"))
        }
        Ok(m) if m.is_dir() => return Ok(()),
        _ => {}
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
