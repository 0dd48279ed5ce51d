//! The capture-time [`Resolver`] of the running system: kernel names from kallsyms (blazesym),
//! user addresses turned into file offsets against each process's mapping table
//! ([`crate::maps`]: read from /proc once, then kept current from perf's records), JIT code
//! named from `/tmp/perf-<pid>.map` and containers' code named through their own view
//! (blazesym), thread names and cgroup from /proc; and the read-time [`FileSymbolizer`].

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use blazesym::helper::read_elf_build_id;
use blazesym::symbolize::source::{Elf, Kernel, Process, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use blazesym::{MaybeDefault, Pid};
use jitterscope_sources::cgroup::{parse_proc_pid_cgroup, CgroupNs};

use crate::capture::{Resolver, Task, UserFrame};
use crate::maps::{parse_maps, Mapping, Table};
use crate::unwind::{StackUnwinder, UserStack};
use crate::window::Symbolize;

/// See the module documentation.
pub struct SystemResolver {
    symbolizer: Symbolizer,
    /// Executable mappings per process; shared between a parent and the children it forked
    /// until one of them maps something.
    tables: HashMap<u32, Arc<Table>>,
    /// Whether a process lives in another mount namespace.
    foreign: HashMap<u32, bool>,
    /// Children forked by a process whose mappings were never read, by child: until it execs,
    /// a child has its parent's mappings, read once for all of its siblings.
    parents: HashMap<u32, u32>,
    /// Build ids read from files, by (path, inode).
    build_ids: HashMap<(Arc<str>, u64), Arc<str>>,
    /// Whether kallsyms shows addresses (it shows zeros under kptr_restrict without
    /// CAP_SYSLOG); without them kernel frames stay addresses.
    pub kallsyms_readable: bool,
    mount_ns: Option<u64>,
    unwinder: StackUnwinder,
    python: Python,
    /// One-line messages for the recorder's log (each said once).
    pub notes: Vec<String>,
}

/// Interpreter frames: the sampler's events to hang the walker on, the walker once an
/// interpreter is found (loaded then, so a host without Python never loads it), and what
/// pairs its records with samples.
#[derive(Default)]
struct Python {
    fds: Vec<std::os::fd::RawFd>,
    walker: Option<Result<jitterscope_bpf::python_walker::PyWalker, ()>>,
    frames: crate::python::Frames,
    probed: std::collections::HashSet<u32>,
    images: HashMap<(Arc<str>, u64), Option<crate::python::Image>>,
    unsupported: std::collections::HashSet<(u8, u8)>,
    buf: Vec<jitterscope_bpf::python_walker::PyRecord>,
}

impl Default for SystemResolver {
    fn default() -> Self {
        Self::new()
    }
}

impl SystemResolver {
    /// A resolver for this host.
    pub fn new() -> Self {
        SystemResolver {
            symbolizer: Symbolizer::new(),
            tables: HashMap::new(),
            foreign: HashMap::new(),
            parents: HashMap::new(),
            build_ids: HashMap::new(),
            kallsyms_readable: kallsyms_readable(),
            mount_ns: mount_ns("self"),
            unwinder: StackUnwinder::default(),
            python: Python::default(),
            notes: Vec::new(),
        }
    }

    /// Reads interpreter frames at the samples of the perf events `fds` (the sampler's, which
    /// must outlive this resolver).
    pub fn enable_python(&mut self, fds: Vec<std::os::fd::RawFd>) {
        self.python.fds = fds;
    }

    /// Takes the interpreter frame records written since the last call; records older than
    /// two seconds lost their samples (a full ring) and go.
    pub fn drain_python(&mut self, now_ns: u64) {
        if let Some(Ok(w)) = &mut self.python.walker {
            w.drain(&mut self.python.buf);
            let recs = std::mem::take(&mut self.python.buf);
            self.python.frames.feed(recs);
            self.python.frames.expire(now_ns, 2_000_000_000);
        }
    }

    /// Interpreter frame records read and paired with samples so far (for tests and notes).
    pub fn python_counts(&self) -> (u64, u64) {
        (self.python.frames.records, self.python.frames.paired)
    }

    /// Whether `pid` runs an interpreter the walker can read; registers it with the walker
    /// (loaded at the first one).
    fn probe_python(&mut self, pid: u32) {
        let root = if self.foreign_mounts(pid) {
            format!("/proc/{pid}/root")
        } else {
            String::new()
        };
        let table = self.table(pid);
        let interp = match crate::python::find(&table, &root, &mut self.python.images) {
            Ok(Some(i)) => i,
            Ok(None) => return,
            Err((major, minor)) => {
                if self.python.unsupported.insert((major, minor)) {
                    self.notes.push(format!(
                        "profile: CPython {major}.{minor} (pid {pid}): its interpreter frames \
                         are not read; this build reads CPython 3.8 to 3.13"
                    ));
                }
                return;
            }
        };
        let fds = &self.python.fds;
        let walker = self.python.walker.get_or_insert_with(|| {
            jitterscope_bpf::python_walker::PyWalker::load(fds).map_err(|e| {
                self.notes
                    .push(format!("profile: no Python frames in stacks: {e}"));
            })
        });
        let Ok(w) = walker else { return };
        match w.add(pid, interp.runtime, &interp.layout.walk) {
            Ok(()) => {
                self.python.frames.interpreters.insert(pid, interp);
            }
            Err(e) => self.notes.push(format!("profile: {e}")),
        }
    }
}

/// Whether /proc/kallsyms shows real addresses to this process.
pub fn kallsyms_readable() -> bool {
    use std::io::{BufRead, BufReader};
    let Ok(f) = std::fs::File::open("/proc/kallsyms") else {
        return false;
    };
    BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .take(64)
        .any(|l| {
            l.split(' ')
                .next()
                .is_some_and(|a| a.bytes().any(|c| c != b'0'))
        })
}

/// Lower-case hex of `b`. Written by hand rather than with `format!` per byte: every exec on a
/// busy host brings a dozen MMAP2 records with build ids, and the per-byte strings were 4% of
/// the recorder's CPU under a fork/exec churn of 50 a second (perf, bench/busy.sh's load).
pub fn hex(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &x in b {
        s.push(DIGITS[usize::from(x >> 4)] as char);
        s.push(DIGITS[usize::from(x & 15)] as char);
    }
    s
}

/// A /proc file's bytes. Through the sources' reader rather than `std::fs::read`, which first
/// asks for the size (a statx that procfs answers with 0): the profiler reads a new process's
/// comm, cgroup and maps when it is first sampled, tens of times a second under a fork/exec
/// churn (bench/busy.sh's load).
fn read_proc(p: &str) -> Option<Vec<u8>> {
    let mut b = Vec::with_capacity(4096);
    jitterscope_sources::fileio::read_into(std::path::Path::new(p), &mut b).ok()?;
    Some(b)
}

fn read_trim(p: &str) -> Option<String> {
    let b = read_proc(p)?;
    let s = String::from_utf8(b).ok()?;
    Some(s.trim_end_matches('\n').to_string())
}

/// The inode of `pid`'s mount namespace, from the text of its `ns/mnt` link (`mnt:[4026531841]`),
/// which is the inode a stat of the link's target reports. readlink formats the number, where
/// stat resolves the link to the namespace's nsfs file: 2.4 against 1.0 µs a process measured
/// on an idle host, and the stat was 3% of the recorder's samples under a fork/exec churn.
fn mount_ns(pid: &str) -> Option<u64> {
    let l = std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok()?;
    parse_ns_link(l.to_str()?)
}

fn parse_ns_link(l: &str) -> Option<u64> {
    l.strip_prefix("mnt:[")?.strip_suffix(']')?.parse().ok()
}

impl SystemResolver {
    /// Whether `pid` sees another file system tree than the recorder.
    fn foreign_mounts(&mut self, pid: u32) -> bool {
        let ours = self.mount_ns;
        *self
            .foreign
            .entry(pid)
            .or_insert_with(|| match (ours, mount_ns(&pid.to_string())) {
                (Some(a), Some(b)) => a != b,
                _ => false,
            })
    }

    /// The build id of a mapped file, read once per (path, inode).
    fn build_id(&mut self, m: &Mapping) -> Arc<str> {
        if let Some(b) = &m.build_id {
            return b.clone();
        }
        let key = (m.path.clone(), m.inode);
        if let Some(b) = self.build_ids.get(&key) {
            return b.clone();
        }
        let b: Arc<str> = match read_elf_build_id(m.path.as_ref()) {
            Ok(Some(b)) => hex(&b).into(),
            _ => "".into(),
        };
        self.build_ids.insert(key, b.clone());
        b
    }

    /// The mapping table of `pid`, read from /proc the first time. A child forked by a process
    /// whose table was unknown takes its parent's, read then and kept: a shell or supervisor
    /// that starts a process a second has its /proc/<pid>/maps read once, not once per child
    /// sampled between its fork and its exec (a quarter of the profiler's time on such a host).
    fn table(&mut self, pid: u32) -> Arc<Table> {
        if let Some(t) = self.tables.get(&pid) {
            return t.clone();
        }
        let inherited = self.parents.remove(&pid).and_then(|parent| {
            if let Some(t) = self.tables.get(&parent) {
                return Some(t.clone());
            }
            let t = Arc::new(read_table(parent)?);
            self.tables.insert(parent, t.clone());
            Some(t)
        });
        let t = inherited.unwrap_or_else(|| Arc::new(read_table(pid).unwrap_or_default()));
        self.tables.insert(pid, t.clone());
        t
    }

    /// The cgroup of `pid` (v1 cpu hierarchy, else v2), empty when unreadable.
    fn cgroup(pid: u32) -> Arc<str> {
        read_proc(&format!("/proc/{pid}/cgroup"))
            .and_then(|b| {
                let p = CgroupNs::for_root(&jitterscope_sources::fileio::Root::new("/"))
                    .resolve(&parse_proc_pid_cgroup(&b).ok()?);
                p.cpu.or(p.v2)
            })
            .unwrap_or_default()
            .into()
    }
}

/// The executable mappings in /proc/<pid>/maps, if it can be read.
fn read_table(pid: u32) -> Option<Table> {
    let b = read_proc(&format!("/proc/{pid}/maps"))?;
    Some(Table::new(parse_maps(&b)))
}

/// Bound of [`SystemResolver`]'s pending parents: forks whose children are never sampled and
/// whose exits were lost must not grow it without end.
const MAX_PENDING_PARENTS: usize = 1 << 16;

impl SystemResolver {
    /// Whether `pid`'s table is known (for tests).
    #[cfg(test)]
    fn knows(&self, pid: u32) -> bool {
        self.tables.contains_key(&pid)
    }
}

impl Resolver for SystemResolver {
    fn kernel(&mut self, addrs: &[u64]) -> Vec<Arc<str>> {
        let unknown = || addrs.iter().map(|a| format!("0x{a:x}").into()).collect();
        if !self.kallsyms_readable {
            return unknown();
        }
        let src = Source::Kernel(Kernel {
            kallsyms: MaybeDefault::Default,
            vmlinux: MaybeDefault::None,
            debug_syms: false,
            ..Default::default()
        });
        match self.symbolizer.symbolize(&src, Input::AbsAddr(addrs)) {
            Ok(syms) => syms
                .iter()
                .zip(addrs)
                .map(|(s, a)| match s {
                    Symbolized::Sym(s) => Arc::from(s.name.as_ref()),
                    Symbolized::Unknown(_) => format!("0x{a:x}").into(),
                })
                .collect(),
            Err(_) => unknown(),
        }
    }

    fn user(&mut self, pid: u32, addrs: &[u64]) -> Vec<UserFrame> {
        let mut out: Vec<UserFrame> = addrs.iter().map(|&a| UserFrame::Unknown(a)).collect();
        if pid == 0 {
            return out;
        }
        // A process in another mount namespace (a container) maps files by paths that mean
        // nothing on the host when the window is read: name its code now, through the
        // process's own view (/proc/<pid>/map_files).
        if self.foreign_mounts(pid) {
            let src = Source::Process(Process {
                perf_map: true,
                map_files: true,
                debug_syms: false,
                ..Process::new(Pid::from(pid))
            });
            if let Ok(syms) = self.symbolizer.symbolize(&src, Input::AbsAddr(addrs)) {
                for (o, s) in out.iter_mut().zip(syms.iter()) {
                    if let Symbolized::Sym(s) = s {
                        *o = UserFrame::Named(s.name.as_ref().into());
                    }
                }
            }
            return out;
        }
        let table = self.table(pid);
        let mut anon = Vec::new();
        for (i, &a) in addrs.iter().enumerate() {
            match table.find(a) {
                Some(m) if m.path.as_ref() == "[vdso]" => {
                    out[i] = UserFrame::Named("[vdso]".into())
                }
                Some(m) => {
                    out[i] = UserFrame::Elf {
                        path: m.path.clone(),
                        build_id: self.build_id(m),
                        offset: m.file_offset(a),
                    }
                }
                None => anon.push(i),
            }
        }
        // Code outside any file: a JIT that writes a perf map names it (read now, while the
        // process and its map exist).
        if !anon.is_empty() && Path::new(&format!("/proc/{pid}/root/tmp/perf-{pid}.map")).exists() {
            let src = Source::Process(Process {
                perf_map: true,
                map_files: false,
                debug_syms: false,
                ..Process::new(Pid::from(pid))
            });
            let a: Vec<u64> = anon.iter().map(|&i| addrs[i]).collect();
            if let Ok(syms) = self.symbolizer.symbolize(&src, Input::AbsAddr(&a)) {
                for (&i, s) in anon.iter().zip(syms.iter()) {
                    if let Symbolized::Sym(s) = s {
                        out[i] = UserFrame::Named(s.name.as_ref().into());
                    }
                }
            }
        }
        out
    }

    fn unwind(&mut self, pid: u32, stack: &UserStack) -> Option<Vec<u64>> {
        if pid == 0 {
            return None;
        }
        // A container's files are opened through its own root.
        let root = if self.foreign_mounts(pid) {
            format!("/proc/{pid}/root")
        } else {
            String::new()
        };
        let table = self.table(pid);
        Some(self.unwinder.unwind(pid, &table, &root, stack))
    }

    fn interpreted(
        &mut self,
        pid: u32,
        tid: u32,
        time_ns: u64,
        user: &[u64],
    ) -> Vec<(u32, Arc<str>)> {
        if self.python.fds.is_empty() {
            return Vec::new();
        }
        if self.python.probed.insert(pid) {
            self.probe_python(pid);
        }
        self.python.frames.of_sample(pid, tid, time_ns, user)
    }

    fn mmap(&mut self, pid: u32, m: Mapping) {
        // An interpreter loaded now (exec of python, an embedding program's libpython) is
        // looked for again at the next sample.
        if crate::python::version_of_path(&m.path).is_some() {
            self.python.probed.remove(&pid);
        }
        // A child that maps code before it is sampled (a pre-forked worker loading a library)
        // takes its parent's table now, so that this mapping is not lost to it.
        if self.parents.contains_key(&pid) {
            self.table(pid);
        }
        // A process never sampled has no table yet; reading /proc when it is sampled will
        // include this mapping.
        if let Some(t) = self.tables.get_mut(&pid) {
            Arc::make_mut(t).insert(m);
        }
    }

    fn fork(&mut self, parent: u32, child: u32) {
        if let Some(t) = self.tables.get(&parent).cloned() {
            self.tables.insert(child, t);
        } else {
            if self.parents.len() >= MAX_PENDING_PARENTS {
                self.parents.clear();
            }
            self.parents.insert(child, parent);
        }
    }

    fn gone(&mut self, pid: u32, exec: bool) {
        self.unwinder.forget(pid);
        if self.python.probed.remove(&pid) && self.python.frames.interpreters.contains_key(&pid) {
            if let Some(Ok(w)) = &self.python.walker {
                w.remove(pid);
            }
        }
        self.python.frames.forget(pid);
        self.foreign.remove(&pid);
        self.parents.remove(&pid);
        if exec {
            // The new image's mappings follow as MMAP2 records.
            self.tables.insert(pid, Arc::new(Table::default()));
        } else {
            self.tables.remove(&pid);
        }
    }

    fn task(&mut self, pid: u32, tid: u32) -> Task {
        if pid == 0 {
            return Task {
                comm: "swapper".into(),
                thread: "swapper".into(),
                cgroup: "/".into(),
            };
        }
        let comm = read_trim(&format!("/proc/{pid}/comm")).unwrap_or_default();
        let thread = if tid == pid {
            comm.clone()
        } else {
            read_trim(&format!("/proc/{pid}/task/{tid}/comm")).unwrap_or_default()
        };
        Task {
            comm: comm.into(),
            thread: thread.into(),
            cgroup: Self::cgroup(pid),
        }
    }

    fn task_named(&mut self, pid: u32, _tid: u32, comm: Arc<str>, thread: Arc<str>) -> Task {
        if pid == 0 {
            return self.task(0, 0);
        }
        Task {
            comm,
            thread,
            cgroup: Self::cgroup(pid),
        }
    }
}

/// Names user frames when a window is read: the recorded file, if it is still the same file
/// (same build id), symbolized by blazesym (which caches each parsed file) from its `.symtab`
/// and `.dynsym` (a stripped library's exported functions), then, for what those leave
/// unnamed, from debug info: DWARF in the file, or the separate file its `.gnu_debuglink`
/// names, looked up under the debug directories and their `.build-id/ab/` (what Debian's
/// `-dbgsym` and `libc6-dbg` packages install).
///
/// The debug directories are `/usr/lib/debug` and `/lib/debug`, or the colon-separated list in
/// `JITTERSCOPE_DEBUG_DIRS`.
///
/// One file at a time: [`Window::resolve`](crate::window::Window::resolve) asks once per file,
/// so the parsed symbols, debug info and mapping of a file are dropped once its names are
/// taken. Kept for the whole window, as blazesym's cache keeps them, every file of a busy
/// host's stacks was resident at once, on the recorder's ClickHouse pusher too (issue 44).
pub struct FileSymbolizer {
    symbolizer: Symbolizer,
    debug_dirs: Option<Vec<std::path::PathBuf>>,
    same_file: HashMap<(String, String), bool>,
}

impl Default for FileSymbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl FileSymbolizer {
    /// A symbolizer reading files of this host.
    pub fn new() -> Self {
        let dirs: Option<Vec<std::path::PathBuf>> =
            std::env::var_os("JITTERSCOPE_DEBUG_DIRS").map(|v| std::env::split_paths(&v).collect());
        Self::with_debug_dirs(dirs)
    }

    /// A symbolizer looking for separate debug info in `dirs` (`None`: the default ones).
    pub fn with_debug_dirs(dirs: Option<Vec<std::path::PathBuf>>) -> Self {
        FileSymbolizer {
            symbolizer: Symbolizer::builder().set_debug_dirs(dirs.clone()).build(),
            debug_dirs: dirs,
            same_file: HashMap::new(),
        }
    }

    /// Whether the file at `path` is the one recorded with `build_id`. Without a recorded
    /// build id only its existence can be checked.
    fn same(&mut self, path: &str, build_id: &str) -> bool {
        let key = (path.to_string(), build_id.to_string());
        if let Some(&ok) = self.same_file.get(&key) {
            return ok;
        }
        let ok = if build_id.is_empty() {
            Path::new(path).is_file()
        } else {
            matches!(read_elf_build_id(path), Ok(Some(b)) if hex(&b) == build_id)
        };
        self.same_file.insert(key, ok);
        ok
    }
}

impl Symbolize for FileSymbolizer {
    fn names(&mut self, path: &str, build_id: &str, offsets: &[u64]) -> Vec<Option<String>> {
        let none = vec![None; offsets.len()];
        // "(deleted)" paths and pseudo-files ([vdso]) have nothing to read.
        if !path.starts_with('/') || path.ends_with(" (deleted)") || !self.same(path, build_id) {
            return none;
        }
        // The file's own symbols first (.symtab, .dynsym): cheap, and the names perf and the
        // user know (`access`, not DWARF's `__GI___access`). Only what they leave unnamed
        // (a stripped file's static functions) is looked up in debug info, whose parse costs
        // about 5x the read of a window when done for every file (bench/profile.sh).
        let mut names = self.symbolize(path, offsets, false).unwrap_or(none);
        let missing: Vec<usize> = (0..offsets.len()).filter(|&i| names[i].is_none()).collect();
        if !missing.is_empty() {
            let offs: Vec<u64> = missing.iter().map(|&i| offsets[i]).collect();
            if let Some(more) = self.symbolize(path, &offs, true) {
                for (i, n) in missing.into_iter().zip(more) {
                    names[i] = n;
                }
            }
        }
        self.symbolizer = Symbolizer::builder()
            .set_debug_dirs(self.debug_dirs.clone())
            .build();
        names
    }
}

impl FileSymbolizer {
    fn symbolize(
        &mut self,
        path: &str,
        offsets: &[u64],
        debug: bool,
    ) -> Option<Vec<Option<String>>> {
        let mut elf = Elf::new(path);
        elf.debug_syms = debug;
        let syms = self
            .symbolizer
            .symbolize(&Source::Elf(elf), Input::FileOffset(offsets))
            .ok()?;
        Some(
            syms.into_iter()
                .map(|s| match s {
                    Symbolized::Sym(s) => Some(s.name.into_owned()),
                    Symbolized::Unknown(_) => None,
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_matches_the_formatted_bytes() {
        let all: Vec<u8> = (0..=255).collect();
        let want: String = all.iter().map(|x| format!("{x:02x}")).collect();
        assert_eq!(hex(&all), want);
        assert_eq!(hex(&[]), "");
    }

    #[test]
    fn mount_ns_is_the_inode_a_stat_of_the_link_reports() {
        use std::os::unix::fs::MetadataExt;
        let stat = |pid: &str| {
            std::fs::metadata(format!("/proc/{pid}/ns/mnt"))
                .ok()
                .map(|m| m.ino())
        };
        let ours = mount_ns("self");
        assert!(ours.is_some(), "this process's mount namespace");
        assert_eq!(ours, stat("self"));
        // Another process (pid 1 is readable as root; otherwise both sides are None).
        assert_eq!(mount_ns("1"), stat("1"));
        assert_eq!(mount_ns("4194305"), None, "no such process");
        assert_eq!(parse_ns_link("mnt:[4026531841]"), Some(4026531841));
        for bad in [
            "",
            "mnt:[",
            "mnt:[]",
            "mnt:[x1]",
            "net:[4026531840]",
            "mnt:4026531841",
        ] {
            assert_eq!(parse_ns_link(bad), None, "{bad:?}");
        }
    }

    /// An address inside this test binary's code.
    fn own_code() -> u64 {
        own_code as *const () as u64
    }

    /// Pids above any pid_max (2^22): no /proc entry, so whatever their tables hold was
    /// inherited, not read.
    const CHILD: u32 = 4_100_000;

    #[test]
    fn a_child_of_an_unread_parent_takes_the_parents_mappings_read_once() {
        let me = std::process::id();
        let mut r = SystemResolver::new();
        r.fork(me, CHILD);
        r.fork(me, CHILD + 1);
        assert!(!r.knows(me), "nothing is read at fork");
        let f = r.user(CHILD, &[own_code()]);
        assert!(
            matches!(&f[0], UserFrame::Elf { path, .. } if !path.is_empty()),
            "{f:?}"
        );
        assert!(
            r.knows(me),
            "the parent's table is kept for its other children"
        );
        let g = r.user(CHILD + 1, &[own_code()]);
        assert_eq!(f, g);
    }

    #[test]
    fn a_childs_own_mappings_before_its_first_sample_are_kept() {
        let me = std::process::id();
        let mut r = SystemResolver::new();
        r.fork(me, CHILD + 2);
        r.mmap(
            CHILD + 2,
            Mapping {
                start: 0x7000_0000_0000,
                end: 0x7000_0001_0000,
                pgoff: 0x2000,
                path: "/usr/lib/plugin.so".into(),
                inode: 1,
                build_id: Some("ab".into()),
            },
        );
        let f = r.user(CHILD + 2, &[0x7000_0000_0010, own_code()]);
        assert_eq!(
            f[0],
            UserFrame::Elf {
                path: "/usr/lib/plugin.so".into(),
                build_id: "ab".into(),
                offset: 0x2010
            }
        );
        assert!(matches!(&f[1], UserFrame::Elf { .. }), "{f:?}");
    }

    #[test]
    fn an_exec_or_exit_forgets_the_parent() {
        let me = std::process::id();
        let mut r = SystemResolver::new();
        r.fork(me, CHILD + 3);
        r.gone(CHILD + 3, true);
        // After exec its mappings are the ones that follow (none here), not its parent's.
        assert_eq!(
            r.user(CHILD + 3, &[own_code()]),
            vec![UserFrame::Unknown(own_code())]
        );
        r.fork(me, CHILD + 4);
        r.gone(CHILD + 4, false);
        // Exited: nothing to read, nothing inherited.
        assert_eq!(
            r.user(CHILD + 4, &[own_code()]),
            vec![UserFrame::Unknown(own_code())]
        );
    }

    /// This thread's registers and the copy of its stack, as a perf sample would carry them.
    #[inline(never)]
    fn snapshot() -> UserStack {
        let (ip, sp, bp): (u64, u64, u64);
        // SAFETY: reads three registers.
        unsafe {
            std::arch::asm!("lea {}, [rip]", out(reg) ip);
            std::arch::asm!("mov {}, rsp", out(reg) sp);
            std::arch::asm!("mov {}, rbp", out(reg) bp);
        }
        // SAFETY: pthread_getattr_np fills the attributes of this thread; its stack is
        // [addr, addr + size), and [sp, top) is inside it.
        let top = unsafe {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            assert_eq!(libc::pthread_getattr_np(libc::pthread_self(), &mut attr), 0);
            let (mut addr, mut size) = (std::ptr::null_mut(), 0usize);
            libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
            libc::pthread_attr_destroy(&mut attr);
            addr as u64 + size as u64
        };
        let n = (top - sp).min(crate::unwind::DEFAULT_STACK_BYTES as u64) as usize;
        // SAFETY: see above.
        let bytes = unsafe { std::slice::from_raw_parts(sp as *const u8, n) }.to_vec();
        UserStack { ip, sp, bp, bytes }
    }

    #[inline(never)]
    fn unwind_me_c() -> UserStack {
        std::hint::black_box(snapshot())
    }
    #[inline(never)]
    fn unwind_me_b() -> UserStack {
        std::hint::black_box(unwind_me_c())
    }
    #[inline(never)]
    fn unwind_me_a() -> UserStack {
        std::hint::black_box(unwind_me_b())
    }

    #[test]
    fn a_copied_stack_unwinds_through_its_callers() {
        let me = std::process::id();
        let stack = unwind_me_a();
        let mut r = SystemResolver::new();
        let addrs = r.unwind(me, &stack).expect("unwinds");
        let src = Source::Process(Process::new(Pid::from(me)));
        let names: Vec<String> = Symbolizer::new()
            .symbolize(&src, Input::AbsAddr(&addrs))
            .unwrap()
            .iter()
            .map(|s| match s {
                Symbolized::Sym(s) => s.name.to_string(),
                Symbolized::Unknown(_) => "?".into(),
            })
            .collect();
        let pos = |f: &str| names.iter().position(|n| n.ends_with(f));
        let (s, c, b, a, t) = (
            pos("snapshot"),
            pos("unwind_me_c"),
            pos("unwind_me_b"),
            pos("unwind_me_a"),
            pos("a_copied_stack_unwinds_through_its_callers"),
        );
        assert!(
            s < c && c < b && b < a && a < t && s.is_some(),
            "callers out of order or missing: {names:?}"
        );
        // The same stack through frame pointers alone would be whatever rbp chain this build
        // keeps; the unwind does not depend on it.
        assert!(addrs.len() > 5, "{names:?}");
    }

    fn sh(cmd: &str, dir: &Path) -> bool {
        std::process::Command::new("sh")
            .args(["-c", cmd])
            .current_dir(dir)
            .status()
            .is_ok_and(|s| s.success())
    }

    /// The file offset of symbol `name` in the ELF file at `path`.
    fn symbol_offset(path: &Path, name: &str) -> u64 {
        use object::{Object, ObjectSegment, ObjectSymbol};
        let data = std::fs::read(path).unwrap();
        let f = object::File::parse(&*data).unwrap();
        let addr = f
            .symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap_or_else(|| panic!("{name} in {}", path.display()))
            .address();
        f.segments()
            .find_map(|s| {
                let (off, size) = s.file_range();
                (addr >= s.address() && addr < s.address() + size).then(|| addr - s.address() + off)
            })
            .unwrap()
    }

    #[test]
    fn stripped_code_is_named_from_debug_info_found_by_build_id() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::write(
            d.join("lib.c"),
            "__attribute__((noinline)) static int hidden_worker(int x) { return x * 7 + 3; }\n\
             int exported_api(int x) { return hidden_worker(x) + 1; }\n",
        )
        .unwrap();
        if !sh("gcc -g -O1 -shared -fPIC -Wl,--build-id -o lib.so lib.c", d) {
            eprintln!(
                "SKIPPED: stripped_code_is_named_from_debug_info_found_by_build_id: gcc failed"
            );
            return;
        }
        let lib = d.join("lib.so");
        let hidden = symbol_offset(&lib, "hidden_worker");
        let api = symbol_offset(&lib, "exported_api");
        let id = hex(&read_elf_build_id(&lib).unwrap().unwrap());
        // What Debian's dh_strip does for a -dbgsym package: the (compressed) debug info under
        // its build id, the library stripped of everything but its dynamic symbols and linked
        // to that file by name (`<rest of the build id>.debug`, looked up under .build-id/).
        let dbg = d.join("debug/.build-id").join(&id[..2]);
        std::fs::create_dir_all(&dbg).unwrap();
        let file = format!("debug/.build-id/{}/{}.debug", &id[..2], &id[2..]);
        let split = format!(
            "objcopy --only-keep-debug --compress-debug-sections lib.so {file} && \
             strip --strip-unneeded lib.so && objcopy --add-gnu-debuglink={file} lib.so"
        );
        assert!(sh(&split, d), "{split}");
        let path = s_(&lib);

        let mut none = FileSymbolizer::with_debug_dirs(Some(vec![d.join("elsewhere")]));
        assert_eq!(
            none.names(path, &id, &[hidden, api]),
            vec![None, Some("exported_api".to_string())],
            "stripped: only the exported function (.dynsym) has a name"
        );
        let mut with = FileSymbolizer::with_debug_dirs(Some(vec![d.join("debug")]));
        assert_eq!(
            with.names(path, &id, &[hidden, api]),
            vec![
                Some("hidden_worker".to_string()),
                Some("exported_api".to_string())
            ]
        );
    }

    fn s_(p: &Path) -> &str {
        p.to_str().unwrap()
    }

    #[test]
    fn a_named_task_reads_only_its_cgroup() {
        let me = std::process::id();
        let mut r = SystemResolver::new();
        let read = r.task(me, me);
        let named = r.task_named(me, me, "from-comm".into(), "from-record".into());
        assert_eq!(named.comm.as_ref(), "from-comm");
        assert_eq!(named.thread.as_ref(), "from-record");
        assert_eq!(named.cgroup, read.cgroup);
        assert_eq!(
            r.task_named(0, 0, "x".into(), "y".into()).comm.as_ref(),
            "swapper"
        );
    }
}
