//! The capture-time [`Resolver`] of the running system: kernel names from kallsyms, user
//! addresses normalized against the process's mappings (blazesym), JIT code named from
//! `/tmp/perf-<pid>.map`, thread names and cgroup from /proc; and the read-time
//! [`FileSymbolizer`].

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use blazesym::helper::read_elf_build_id;
use blazesym::normalize::{Normalizer, UserMeta};
use blazesym::symbolize::source::{Elf, Kernel, Process, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use blazesym::{MaybeDefault, Pid};
use jitterscope_sources::cgroup::parse_proc_pid_cgroup;

use crate::capture::{Resolver, Task, UserFrame};
use crate::window::Symbolize;

/// See the module documentation.
pub struct SystemResolver {
    normalizer: Normalizer,
    symbolizer: Symbolizer,
    /// Whether kallsyms shows addresses (it shows zeros under kptr_restrict without
    /// CAP_SYSLOG); without them kernel frames stay addresses.
    pub kallsyms_readable: bool,
    mount_ns: Option<u64>,
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
            // Build ids are cached per file (they do not change while a file is mapped);
            // mappings are read again for each batch because a process maps new code at any
            // time and blazesym cannot tell a stale cache.
            normalizer: Normalizer::builder()
                .enable_build_ids(true)
                .enable_build_id_caching(true)
                .build(),
            symbolizer: Symbolizer::new(),
            kallsyms_readable: kallsyms_readable(),
            mount_ns: mount_ns("self"),
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

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn read_trim(p: &str) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim_end_matches('\n').to_string())
}

fn mount_ns(pid: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/ns/mnt"))
        .ok()
        .map(|m| m.ino())
}

impl SystemResolver {
    /// Whether `pid` sees another file system tree than the recorder.
    fn foreign_mounts(&self, pid: u32) -> bool {
        match (self.mount_ns, mount_ns(&pid.to_string())) {
            (Some(a), Some(b)) => a != b,
            _ => false,
        }
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
        let Ok(n) = self.normalizer.normalize_user_addrs(Pid::from(pid), addrs) else {
            return out; // the process is gone or its maps unreadable
        };
        let mut anon = Vec::new();
        for (i, (off, meta)) in n.outputs.iter().enumerate() {
            match n.meta.get(*meta) {
                Some(UserMeta::Elf(e)) => {
                    out[i] = UserFrame::Elf {
                        path: e.path.to_string_lossy().as_ref().into(),
                        build_id: e.build_id.as_deref().map(hex).unwrap_or_default().into(),
                        offset: *off,
                    }
                }
                Some(UserMeta::Sym(s)) => out[i] = UserFrame::Named(s.name.as_ref().into()),
                _ => anon.push(i),
            }
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
        // Code outside any file: a JIT that writes a perf map names it (read now, while the
        // process and its map exist).
        if !anon.is_empty() && Path::new(&format!("/tmp/perf-{pid}.map")).exists() {
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
        let cgroup = std::fs::read(format!("/proc/{pid}/cgroup"))
            .ok()
            .and_then(|b| {
                let p = parse_proc_pid_cgroup(&b).ok()?.to_paths();
                p.cpu.or(p.v2)
            })
            .unwrap_or_default();
        Task {
            comm: comm.into(),
            thread: thread.into(),
            cgroup: cgroup.into(),
        }
    }
}

/// Names user frames when a window is read: the recorded file, if it is still the same file
/// (same build id), symbolized from its ELF symbols by blazesym, which caches each parsed file.
pub struct FileSymbolizer {
    symbolizer: Symbolizer,
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
        FileSymbolizer {
            symbolizer: Symbolizer::new(),
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
        let mut elf = Elf::new(path);
        elf.debug_syms = false;
        match self
            .symbolizer
            .symbolize(&Source::Elf(elf), Input::FileOffset(offsets))
        {
            Ok(syms) => syms
                .into_iter()
                .map(|s| match s {
                    Symbolized::Sym(s) => Some(s.name.into_owned()),
                    Symbolized::Unknown(_) => None,
                })
                .collect(),
            Err(_) => none,
        }
    }
}
