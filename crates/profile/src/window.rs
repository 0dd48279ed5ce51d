//! Reading stored slices back: a window of slices → filtered, named stacks → folded lines,
//! flame graph, pprof, hottest functions.
//!
//! Stacks are first added up per (process, frames) across the window with user frames still as
//! (module, file offset), so each module is symbolized once per window in one batch; names are
//! then applied and stacks that became equal (two offsets in one function) merge.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use jitterscope_model::profile::{FrameKind, Profile};

/// Which samples of a window to keep.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only this process.
    pub pid: Option<u32>,
    /// Only processes or threads with exactly this name.
    pub comm: Option<String>,
    /// Only tasks whose cgroup path contains this.
    pub cgroup: Option<String>,
    /// Only kernel frames, and only samples that were in the kernel.
    pub kernel_only: bool,
    /// Leave out the idle tasks (pid 0): what the CPUs did when they worked.
    pub skip_idle: bool,
}

impl Filter {
    fn keeps(&self, p: &Profile, s: &jitterscope_model::profile::Stack) -> bool {
        self.pid.is_none_or(|pid| s.pid == pid)
            && !(self.skip_idle && s.pid == 0)
            && self
                .comm
                .as_deref()
                .is_none_or(|c| p.str(s.comm) == c || p.str(s.thread) == c)
            && self
                .cgroup
                .as_deref()
                .is_none_or(|g| p.str(s.cgroup).contains(g))
    }
}

/// A frame before naming.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Raw {
    Kernel(Arc<str>),
    User(u32, u64),
    Named(Arc<str>),
    Unknown(u64),
}

/// Where a named frame ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Space {
    /// Kernel.
    Kernel,
    /// User space.
    User,
}

/// A named frame.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Func {
    /// Function name (or `module+0xoffset` when it could not be named).
    pub name: Arc<str>,
    /// Kernel or user.
    pub space: Space,
    /// File it is in (user frames), empty otherwise.
    pub module: Arc<str>,
}

/// Names the functions at file offsets of a module (the read-time half of symbolization).
pub trait Symbolize {
    /// Names of `offsets` in the file at `path` whose build id was `build_id` (hex, may be
    /// empty) when recorded; `None` where unknown or the file is not the one recorded.
    fn names(&mut self, path: &str, build_id: &str, offsets: &[u64]) -> Vec<Option<String>>;
}

/// A symbolizer that never reads files: user frames stay `module+0xoffset`.
pub struct NoFiles;

impl Symbolize for NoFiles {
    fn names(&mut self, _: &str, _: &str, offsets: &[u64]) -> Vec<Option<String>> {
        vec![None; offsets.len()]
    }
}

/// Stacks of a window, added up, before naming.
#[derive(Debug, Default)]
pub struct Window {
    modules: Vec<(String, String)>,
    module_ids: HashMap<(String, String), u32>,
    stacks: HashMap<(Arc<str>, Vec<Raw>), u64>,
    names: std::collections::HashSet<Arc<str>>,
    /// Samples kept by the filter.
    pub samples: u64,
    /// Samples in the window before filtering.
    pub total: u64,
    /// Samples lost by the kernel in the window (all processes).
    pub lost: u64,
    /// Slices read.
    pub slices: u64,
    /// Sampling frequency of the slices (the last one's).
    pub hz: u32,
}

impl Window {
    /// An empty window.
    pub fn new() -> Self {
        Self::default()
    }

    fn name(&mut self, s: &str) -> Arc<str> {
        if let Some(n) = self.names.get(s) {
            return n.clone();
        }
        let n: Arc<str> = s.into();
        self.names.insert(n.clone());
        n
    }

    /// Adds the stacks of one slice that `f` keeps.
    pub fn add(&mut self, p: &Profile, f: &Filter) {
        self.slices += 1;
        self.total += p.samples;
        self.lost += p.lost;
        if p.hz > 0 {
            self.hz = p.hz;
        }
        // Frames of this slice, mapped once.
        let mut frames: Vec<Option<Raw>> = Vec::with_capacity(p.frames.len());
        for fr in &p.frames {
            frames.push(Some(match fr.kind {
                FrameKind::Kernel => Raw::Kernel(self.name(p.str(fr.name))),
                FrameKind::Jit => Raw::Named(self.name(p.str(fr.name))),
                FrameKind::Unknown => Raw::Unknown(fr.offset),
                FrameKind::User => match p.module(fr.module) {
                    Some(m) => {
                        let key = (p.str(m.path).to_string(), m.build_id.clone());
                        let next = self.modules.len() as u32;
                        let id = *self.module_ids.entry(key.clone()).or_insert(next);
                        if id == next {
                            self.modules.push(key);
                        }
                        Raw::User(id, fr.offset)
                    }
                    None => Raw::Unknown(fr.offset),
                },
            }));
        }
        for s in &p.stacks {
            if !f.keeps(p, s) {
                continue;
            }
            // Root first, as folded stacks and flame graphs read.
            let mut chain: Vec<Raw> = s
                .frames
                .iter()
                .rev()
                .filter_map(|&i| frames.get(i as usize).cloned().flatten())
                .collect();
            if f.kernel_only {
                chain.retain(|r| matches!(r, Raw::Kernel(_)));
                if chain.is_empty() {
                    continue;
                }
            }
            let comm = self.name(match p.str(s.comm) {
                "" => "?",
                c => c,
            });
            *self.stacks.entry((comm, chain)).or_default() += s.count as u64;
            self.samples += s.count as u64;
        }
    }

    /// Names every frame (each module's offsets in one batch) and merges what became equal.
    pub fn resolve(self, sym: &mut dyn Symbolize) -> Named {
        let mut by_module: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for (_, chain) in self.stacks.keys() {
            for r in chain {
                if let Raw::User(m, o) = r {
                    by_module.entry(*m).or_default().push(*o);
                }
            }
        }
        let mut user: HashMap<(u32, u64), Func> = HashMap::new();
        for (m, mut offs) in by_module {
            offs.sort_unstable();
            offs.dedup();
            let (path, build_id) = &self.modules[m as usize];
            let base = path.rsplit('/').next().unwrap_or(path);
            let module: Arc<str> = path.as_str().into();
            let names = sym.names(path, build_id, &offs);
            for (o, n) in offs.into_iter().zip(names) {
                let name = n.unwrap_or_else(|| format!("{base}+0x{o:x}"));
                user.insert(
                    (m, o),
                    Func {
                        name: name.into(),
                        space: Space::User,
                        module: module.clone(),
                    },
                );
            }
        }
        let empty: Arc<str> = "".into();
        let mut merged: HashMap<(Arc<str>, Vec<Func>), u64> = HashMap::new();
        for ((comm, chain), n) in self.stacks {
            let funcs: Vec<Func> = chain
                .into_iter()
                .map(|r| match r {
                    Raw::Kernel(name) => Func {
                        name,
                        space: Space::Kernel,
                        module: empty.clone(),
                    },
                    Raw::Named(name) => Func {
                        name,
                        space: Space::User,
                        module: empty.clone(),
                    },
                    Raw::Unknown(a) => Func {
                        name: format!("0x{a:x}").into(),
                        space: Space::User,
                        module: empty.clone(),
                    },
                    Raw::User(m, o) => user[&(m, o)].clone(),
                })
                .collect();
            *merged.entry((comm, funcs)).or_default() += n;
        }
        let mut stacks: Vec<NamedStack> = merged
            .into_iter()
            .map(|((comm, frames), count)| NamedStack {
                comm,
                frames,
                count,
            })
            .collect();
        stacks.sort_by(|a, b| (&a.comm, &a.frames).cmp(&(&b.comm, &b.frames)));
        Named {
            stacks,
            samples: self.samples,
            total: self.total,
            lost: self.lost,
            slices: self.slices,
            hz: self.hz,
        }
    }
}

/// One named stack of a window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedStack {
    /// Process name.
    pub comm: Arc<str>,
    /// Frames, root first.
    pub frames: Vec<Func>,
    /// Samples.
    pub count: u64,
}

/// The named stacks of a window.
#[derive(Debug, Clone, Default)]
pub struct Named {
    /// Stacks, sorted by process then frames.
    pub stacks: Vec<NamedStack>,
    /// Samples kept by the filter.
    pub samples: u64,
    /// Samples in the window before filtering.
    pub total: u64,
    /// Samples the kernel lost in the window.
    pub lost: u64,
    /// Slices read.
    pub slices: u64,
    /// Sampling frequency.
    pub hz: u32,
}

/// One function's share of a window.
#[derive(Debug, Clone, PartialEq)]
pub struct Hot {
    /// The function.
    pub func: Func,
    /// Samples with it as the leaf of its space (kernel leaf, or user leaf).
    pub self_samples: u64,
    /// Samples with it anywhere in the stack.
    pub total_samples: u64,
}

impl Named {
    /// Folded stacks (`comm;root;…;leaf count`, kernel frames suffixed `_[k]` as
    /// stackcollapse-perf does), one per line, sorted.
    pub fn folded(&self) -> Vec<String> {
        self.stacks
            .iter()
            .map(|s| {
                let mut line = sanitize(&s.comm);
                for f in &s.frames {
                    line.push(';');
                    line.push_str(&sanitize(&f.name));
                    if f.space == Space::Kernel {
                        line.push_str("_[k]");
                    }
                }
                format!("{line} {}", s.count)
            })
            .collect()
    }

    /// The hottest functions of each space, by self samples then total, at most `n` each.
    ///
    /// Self counts the leaf of the space: for a sample in a system call, the kernel leaf and
    /// the user frame that made the call are each "self" in their own table, so the user table
    /// says which code entered the kernel.
    pub fn hottest(&self, n: usize) -> (Vec<Hot>, Vec<Hot>) {
        let mut acc: HashMap<&Func, (u64, u64)> = HashMap::new();
        for s in &self.stacks {
            let mut seen: Vec<&Func> = Vec::new();
            for f in &s.frames {
                if !seen.contains(&f) {
                    seen.push(f);
                    acc.entry(f).or_default().1 += s.count;
                }
            }
            for space in [Space::Kernel, Space::User] {
                if let Some(leaf) = s.frames.iter().rev().find(|f| f.space == space) {
                    acc.entry(leaf).or_default().0 += s.count;
                }
            }
        }
        let mut all: Vec<Hot> = acc
            .into_iter()
            .map(|(f, (s, t))| Hot {
                func: f.clone(),
                self_samples: s,
                total_samples: t,
            })
            .collect();
        all.sort_by(|a, b| {
            (b.self_samples, b.total_samples, &a.func).cmp(&(
                a.self_samples,
                a.total_samples,
                &b.func,
            ))
        });
        let pick = |sp: Space| -> Vec<Hot> {
            all.iter()
                .filter(|h| h.func.space == sp && h.self_samples > 0)
                .take(n)
                .cloned()
                .collect()
        };
        (pick(Space::Kernel), pick(Space::User))
    }
}

impl Named {
    /// Writes the window as an interactive SVG flame graph (inferno). Kernel frames are
    /// orange, user frames red/yellow (inferno's "java" palette, which keys on the `_[k]`
    /// suffix).
    pub fn svg(&self, title: &str, subtitle: &str, w: impl std::io::Write) -> std::io::Result<()> {
        svg_of_folded(&self.folded(), title, subtitle, w)
    }
}

/// Writes folded stacks (`comm;root;…;leaf count`) as the interactive SVG flame graph of
/// [`Named::svg`]: also for stacks merged elsewhere (`fleet flame`, across hosts).
pub fn svg_of_folded(
    lines: &[String],
    title: &str,
    subtitle: &str,
    w: impl std::io::Write,
) -> std::io::Result<()> {
    use inferno::flamegraph::{color, from_lines, Options};
    let mut o = Options::default();
    o.title = title.to_string();
    o.subtitle = Some(subtitle.to_string());
    o.count_name = "samples".into();
    o.colors = color::Palette::Multi(color::MultiPalette::Java);
    o.hash = true;
    from_lines(&mut o, lines.iter().map(|l| l.as_str()), w)
}

/// Folded-format separators inside a name would split it into frames or columns.
fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            ';' => ':',
            c if c.is_whitespace() => '_',
            c => c,
        })
        .collect()
}

/// The stack slices of `(from, to]` in the store at `dir`, kept as `filter` says, with the
/// recorded host name and what the read skipped. A slice belongs to the window when it ends
/// inside it (its sample's time), so adjacent windows split the slices between them without
/// overlap.
pub fn read_store(
    dir: &std::path::Path,
    from: i64,
    to: i64,
    filter: &Filter,
) -> Result<(Window, String, jitterscope_model::stored::Damage), jitterscope_store::StoreError> {
    use jitterscope_model::codec::Parts;
    let reader = jitterscope_model::stored::SampleReader::open(dir)?;
    let mut w = Window::new();
    let mut host = String::new();
    let mut samples = reader.samples(from.saturating_add(1), to, Parts::PROFILE)?;
    for s in samples.by_ref() {
        if let Some(p) = &s.profile {
            w.add(p, filter);
            host = s.host.hostname;
        }
    }
    Ok((w, host, samples.damage()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use jitterscope_model::profile::{Builder, Frame};

    fn slice() -> Profile {
        let mut b = Builder::new(99, 0, 1);
        let k = |b: &mut Builder, n: &str| {
            let name = b.string(n);
            b.frame(Frame {
                kind: FrameKind::Kernel,
                name,
                ..Default::default()
            })
        };
        let idle = k(&mut b, "do_idle");
        let stat = k(&mut b, "vfs_statx");
        let sys = k(&mut b, "do_syscall_64");
        let m = b.module("/usr/bin/app", "");
        let u = |b: &mut Builder, o: u64| {
            b.frame(Frame {
                kind: FrameKind::User,
                module: m,
                offset: o,
                ..Default::default()
            })
        };
        let (main, spin1, spin2, libc) = (
            u(&mut b, 0x100),
            u(&mut b, 0x200),
            u(&mut b, 0x204),
            u(&mut b, 0x300),
        );
        b.add_stack(0, 0, "swapper", "swapper", "/", vec![idle], 5);
        b.add_stack(7, 7, "app", "app", "/g/a", vec![spin1, main], 3);
        b.add_stack(7, 8, "app", "worker", "/g/a", vec![spin2, main], 2);
        b.add_stack(7, 7, "app", "app", "/g/a", vec![stat, sys, libc, main], 4);
        b.finish()
    }

    struct Names;
    impl Symbolize for Names {
        fn names(&mut self, path: &str, _: &str, offsets: &[u64]) -> Vec<Option<String>> {
            assert_eq!(path, "/usr/bin/app");
            offsets
                .iter()
                .map(|o| match o {
                    0x100 => Some("main".into()),
                    0x200..=0x2ff => Some("spin".into()),
                    _ => None,
                })
                .collect()
        }
    }

    #[test]
    fn folds_merges_offsets_of_one_function() {
        let mut w = Window::new();
        w.add(&slice(), &Filter::default());
        let n = w.resolve(&mut Names);
        assert_eq!(
            n.folded(),
            [
                "app;main;app+0x300;do_syscall_64_[k];vfs_statx_[k] 4",
                "app;main;spin 5",
                "swapper;do_idle_[k] 5",
            ]
        );
        assert_eq!((n.samples, n.total), (14, 14));
    }

    #[test]
    fn filters() {
        let p = slice();
        let fold = |f: Filter| {
            let mut w = Window::new();
            w.add(&p, &f);
            w.resolve(&mut NoFiles).folded()
        };
        assert_eq!(
            fold(Filter {
                pid: Some(0),
                ..Default::default()
            }),
            ["swapper;do_idle_[k] 5"]
        );
        assert_eq!(
            fold(Filter {
                comm: Some("worker".into()),
                ..Default::default()
            }),
            ["app;app+0x100;app+0x204 2"]
        );
        assert_eq!(
            fold(Filter {
                cgroup: Some("/g".into()),
                ..Default::default()
            })
            .len(),
            3
        );
        assert_eq!(
            fold(Filter {
                kernel_only: true,
                pid: Some(7),
                ..Default::default()
            }),
            ["app;do_syscall_64_[k];vfs_statx_[k] 4"]
        );
        assert!(fold(Filter {
            pid: Some(99),
            ..Default::default()
        })
        .is_empty());
        assert!(fold(Filter {
            skip_idle: true,
            ..Default::default()
        })
        .iter()
        .all(|l| !l.starts_with("swapper")));
    }

    #[test]
    fn hottest_per_space() {
        let mut w = Window::new();
        w.add(&slice(), &Filter::default());
        let (k, u) = w.resolve(&mut Names).hottest(10);
        assert_eq!(k[0].func.name.as_ref(), "do_idle");
        assert_eq!((k[0].self_samples, k[0].total_samples), (5, 5));
        assert_eq!(k[1].func.name.as_ref(), "vfs_statx");
        assert!(
            k.iter().all(|h| h.func.name.as_ref() != "do_syscall_64"),
            "not a leaf"
        );
        assert_eq!(u[0].func.name.as_ref(), "spin");
        assert_eq!(u[0].self_samples, 5);
        let main = u.iter().find(|h| h.func.name.as_ref() == "main");
        assert!(main.is_none(), "main is never a user leaf");
        assert_eq!(u[1].func.name.as_ref(), "app+0x300");
        assert_eq!((u[1].self_samples, u[1].total_samples), (4, 4));
    }

    #[test]
    fn damaged_slices_do_not_panic() {
        let mut p = slice();
        p.modules.clear();
        p.strings.truncate(1);
        p.stacks[0].frames.push(999);
        let mut w = Window::new();
        w.add(&p, &Filter::default());
        assert_eq!(w.resolve(&mut NoFiles).samples, 14);
    }
}
