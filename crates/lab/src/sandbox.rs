//! The sandbox every scenario runs in: cgroups under one `jitterscope-lab` parent (in each
//! hierarchy that holds a controller the scenario needs, v1 or v2), a directory under
//! [`base_dir`], and worker processes placed in those cgroups before they exec.
//!
//! Everything a run creates can be found again without a record of it: cgroups are the
//! `jitterscope-lab` subtree of every mounted hierarchy, files and mounts are under
//! [`base_dir`], and processes are the members of those cgroups. That is what lets
//! [`cleanup_all`] remove the leftovers of a run that was killed with SIGKILL. Mounts are made
//! in a private mount namespace of the worker that needs them, so they vanish with it.

use std::ffi::CString;
use std::io::Read;
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use jitterscope_sources::cgroup::{discover, CgroupVersion, Hierarchy};
use jitterscope_sources::Root;

/// The parent cgroup of every lab cgroup, directly under each hierarchy's root.
pub const PARENT: &str = "jitterscope-lab";

/// The directory holding the lab's files: `jitterscope-lab` inside `$JITTERSCOPE_LAB_DIR`, else
/// inside `/var/tmp`. Cleanup deletes this directory wholesale, so it is always the lab's own
/// leaf, never the directory the user named. It must be on a disk-backed filesystem: the
/// page-cache scenarios need files whose pages can be evicted and read back (tmpfs pages cannot).
pub fn base_dir() -> PathBuf {
    std::env::var_os("JITTERSCOPE_LAB_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp"))
        .join("jitterscope-lab")
}

/// Fails with a one-line reason unless running as root.
pub fn require_root(what: &str) -> Result<()> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "{what} needs root: it creates cgroups with CPU and memory limits, mounts and \
             files, and kills what it started (run it with sudo)"
        );
    }
    Ok(())
}

/// Held for the whole of a lab run or cleanup: an abstract unix socket, which the kernel
/// releases when the process dies however it dies, and which leaves no file behind.
pub struct Lock(#[allow(dead_code)] UnixListener);

/// Takes the lab lock, or says that another run holds it.
pub fn lock() -> Result<Lock> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(b"jitterscope-lab")?;
    match UnixListener::bind_addr(&addr) {
        Ok(l) => Ok(Lock(l)),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            bail!("another `jitterscope lab` run is in progress on this host; wait for it to end")
        }
        Err(e) => Err(e).context("cannot take the lab lock (abstract socket @jitterscope-lab)"),
    }
}

/// One hierarchy a scenario's cgroups are created in.
#[derive(Debug, Clone)]
struct Place {
    version: CgroupVersion,
    mount_point: PathBuf,
    /// What the hierarchy shows at its top (`/` unless in a container without cgroupns).
    mount_root: String,
    /// The requested controllers this hierarchy provides.
    controllers: Vec<String>,
}

/// Picks, for each controller, the v1 hierarchy it is bound to or else the v2 hierarchy that
/// offers it; on v1, `cpuacct` comes along with `cpu` because the recorder reads a v1 cgroup's
/// CPU usage from it.
fn places(hs: &[Hierarchy], controllers: &[&str]) -> Result<Vec<Place>> {
    let mut out: Vec<Place> = Vec::new();
    let mut add =
        |h: &Hierarchy, c: &str| match out.iter_mut().find(|p| p.mount_point == h.mount_point) {
            Some(p) if !p.controllers.iter().any(|x| x == c) => p.controllers.push(c.to_string()),
            Some(_) => {}
            None => out.push(Place {
                version: h.version,
                mount_point: h.mount_point.clone(),
                mount_root: h.mount_root.clone(),
                controllers: vec![c.to_string()],
            }),
        };
    for &c in controllers {
        let v1 = hs
            .iter()
            .find(|h| h.version == CgroupVersion::V1 && h.has(c));
        let v2 = hs
            .iter()
            .find(|h| h.version == CgroupVersion::V2 && h.has(c));
        match (v1, v2) {
            (Some(h), _) => {
                add(h, c);
                if c == "cpu" {
                    if let Some(acct) = hs
                        .iter()
                        .find(|h| h.version == CgroupVersion::V1 && h.has("cpuacct"))
                    {
                        add(acct, "cpuacct");
                    }
                }
            }
            (None, Some(h)) => {
                let enabled = std::fs::read_to_string(h.mount_point.join("cgroup.subtree_control"))
                    .unwrap_or_default();
                if !enabled.split_whitespace().any(|x| x == c) {
                    bail!(
                        "cgroup v2 at {} offers the {c} controller but does not enable it for \
                         children; enable it with `echo +{c} > {}/cgroup.subtree_control`",
                        h.mount_point.display(),
                        h.mount_point.display()
                    );
                }
                add(h, c);
            }
            (None, None) => bail!(
                "no mounted cgroup hierarchy offers the {c} controller (neither a v1 mount nor \
                 cgroup2 with {c} in cgroup.controllers)"
            ),
        }
    }
    Ok(out)
}

/// CPU and memory limits of a lab cgroup.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    /// CFS bandwidth: (quota, period) in microseconds.
    pub cpu_quota_us: Option<(u64, u64)>,
    /// Memory limit in bytes (v1 `memory.limit_in_bytes` and, with swap accounting,
    /// `memory.memsw.limit_in_bytes`; v2 `memory.max` with `memory.swap.max` 0).
    pub memory_bytes: Option<u64>,
    /// CPU weight in v2's units (1-10000, 100 the default; v1 `cpu.shares` is 1024 times it
    /// over 100). Applied only where the sandbox has the cpu controller.
    pub cpu_weight: Option<u64>,
    /// v2 `memory.high` in bytes: the throttle below `memory.max`. cgroup v1 has no
    /// equivalent, and a scenario asking for it there is refused.
    pub memory_high_bytes: Option<u64>,
    /// Swap the cgroup may use beside `memory_bytes` (v2 `memory.swap.max`; v1 with swap
    /// accounting, `memory.memsw.limit_in_bytes` is the sum). Without it a memory limit comes
    /// with no swap at all.
    pub swap_bytes: Option<u64>,
    /// v2 `io.max` write bandwidth on one disk: (major, minor, bytes per second). On cgroup v2
    /// the writeback of the cgroup's dirty pages is charged to it, so this slows the writeback
    /// of its own writes. cgroup v1 throttles only direct I/O, and a scenario asking for it
    /// there is refused.
    pub io_wbps: Option<(u32, u32, u64)>,
}

impl Limits {
    /// A memory limit only.
    pub fn memory(bytes: u64) -> Self {
        Limits {
            memory_bytes: Some(bytes),
            ..Default::default()
        }
    }

    /// A CPU weight only (v2 units: 100 is the default).
    pub fn weight(weight: u64) -> Self {
        Limits {
            cpu_weight: Some(weight),
            ..Default::default()
        }
    }

    /// A CFS quota only.
    pub fn cpu(quota_us: u64, period_us: u64) -> Self {
        Limits {
            cpu_quota_us: Some((quota_us, period_us)),
            ..Default::default()
        }
    }
}

/// A cgroup made by the sandbox: its path as the recorder names it and its directory in each
/// hierarchy.
#[derive(Debug, Clone)]
pub struct LabCgroup {
    /// The cgroup path as in `/proc/<pid>/cgroup` and the recorder's series names.
    pub path: String,
    /// (version, directory, controllers) per hierarchy.
    dirs: Vec<(CgroupVersion, PathBuf, Vec<String>)>,
}

impl LabCgroup {
    /// The directory of this cgroup in the hierarchy that holds `controller`.
    pub fn dir_of(&self, controller: &str) -> Option<&Path> {
        self.dirs
            .iter()
            .find(|(_, _, cs)| cs.iter().any(|c| c == controller))
            .map(|(_, d, _)| d.as_path())
    }

    /// Whether the hierarchy holding `controller` is v2.
    pub fn is_v2(&self, controller: &str) -> bool {
        self.dirs
            .iter()
            .any(|(v, _, cs)| *v == CgroupVersion::V2 && cs.iter().any(|c| c == controller))
    }

    /// A cgroup with a path and no directories, for tests of what is built from the path.
    #[doc(hidden)]
    pub fn for_test(path: &str) -> Self {
        LabCgroup {
            path: path.to_string(),
            dirs: Vec::new(),
        }
    }

    /// Every directory of this cgroup (one per hierarchy).
    pub fn dirs(&self) -> impl Iterator<Item = &Path> {
        self.dirs.iter().map(|(_, d, _)| d.as_path())
    }
}

/// A worker process started by the sandbox.
pub struct Worker {
    /// Its role in the scenario (`fast`, `victim`, ...), for messages.
    pub role: String,
    child: Child,
    exited: Option<ExitStatus>,
    /// Its end is part of the scenario (the OOM killer, a kill it stages): exiting before the
    /// run is over is not a failure.
    ends: bool,
}

impl Worker {
    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// What a stopped worker left: exit status and what it printed on stdout (its report).
#[derive(Debug)]
pub struct Stopped {
    /// Its role.
    pub role: String,
    /// Exit status.
    pub status: ExitStatus,
    /// Its stdout (workers print one JSON report when they stop).
    pub stdout: String,
    /// True when it had already exited before it was asked to stop.
    pub exited_early: bool,
}

/// A scenario's sandbox. Dropping it stops the workers and removes everything the lab created.
pub struct Sandbox {
    /// The scenario it was opened for.
    home: String,
    /// The scenario whose directory and cgroups are being made.
    scenario: String,
    /// Prepended to worker roles: `<load>/` while a background load starts (see
    /// [`Sandbox::scope`]), so its roles stay apart from the scenario's.
    role_prefix: String,
    places: Vec<Place>,
    dir: PathBuf,
    workers: Vec<Worker>,
    closed: bool,
    _lock: Lock,
}

impl Sandbox {
    /// Takes the lab lock, removes leftovers of an earlier run that was killed (saying so
    /// through `note`), and prepares the scenario's directory and parent cgroups.
    pub fn open(scenario: &str, controllers: &[&str], note: &mut dyn FnMut(&str)) -> Result<Self> {
        require_root("a lab scenario")?;
        let lock = lock()?;
        let left = cleanup_unlocked()?;
        if !left.is_empty() {
            note(&format!("removed leftovers of an earlier lab run: {left}"));
        }
        let hs = discover(&Root::new("/")).context("cannot list cgroup hierarchies")?;
        let places = places(&hs, controllers)?;
        let dir = base_dir().join(scenario);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create the lab directory {}", dir.display()))?;
        let mut sb = Sandbox {
            home: scenario.to_string(),
            scenario: scenario.to_string(),
            role_prefix: String::new(),
            places,
            dir,
            workers: Vec::new(),
            closed: false,
            _lock: lock,
        };
        sb.cgroup("", Limits::default())?;
        Ok(sb)
    }

    /// Makes what follows belong to `scenario`: its directory, its cgroups under
    /// `jitterscope-lab/<scenario>` (made with `limits`), and, unless it is the one the sandbox
    /// was opened for, its roles prefixed `<scenario>/`. A background load (`lab check
    /// --beside`) starts this way in the scenario's sandbox: one lock, one cleanup.
    pub fn scope(&mut self, scenario: &str, limits: Limits) -> Result<()> {
        self.role_prefix = if scenario == self.home {
            String::new()
        } else {
            format!("{scenario}/")
        };
        self.scenario = scenario.to_string();
        self.dir = base_dir().join(scenario);
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("cannot create the lab directory {}", self.dir.display()))?;
        self.cgroup("", limits)?;
        Ok(())
    }

    /// The scenario's directory (under [`base_dir`]).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Creates `jitterscope-lab/<scenario>/<rel>` (`rel` may be empty) in every hierarchy of
    /// the scenario and applies `limits`. On v2 the controllers are enabled down the path;
    /// processes must then only go to leaves (the kernel refuses them in inner cgroups).
    pub fn cgroup(&mut self, rel: &str, limits: Limits) -> Result<LabCgroup> {
        let mut rel_path = format!("{PARENT}/{}", self.scenario);
        if !rel.is_empty() {
            rel_path.push('/');
            rel_path.push_str(rel.trim_matches('/'));
        }
        let mut dirs = Vec::new();
        let mut path = String::new();
        for p in &self.places {
            let mut cur = p.mount_point.clone();
            for (i, part) in rel_path.split('/').enumerate() {
                if i > 0 && p.version == CgroupVersion::V2 {
                    // Enable the controllers in the parent before descending.
                    let ctl = cur.join("cgroup.subtree_control");
                    let want: Vec<String> = p.controllers.iter().map(|c| format!("+{c}")).collect();
                    write(&ctl, &want.join(" "))?;
                }
                cur.push(part);
                match std::fs::create_dir(&cur) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => {
                        return Err(e)
                            .with_context(|| format!("cannot create cgroup {}", cur.display()))
                    }
                }
            }
            let root = p.mount_root.trim_end_matches('/');
            path = format!("{root}/{rel_path}");
            dirs.push((p.version, cur, p.controllers.clone()));
        }
        let cg = LabCgroup { path, dirs };
        if let Some((quota, period)) = limits.cpu_quota_us {
            let d = cg
                .dir_of("cpu")
                .ok_or_else(|| anyhow!("scenario has no cpu controller"))?;
            if cg.is_v2("cpu") {
                write(&d.join("cpu.max"), &format!("{quota} {period}"))?;
            } else {
                write(&d.join("cpu.cfs_period_us"), &period.to_string())?;
                write(&d.join("cpu.cfs_quota_us"), &quota.to_string())?;
            }
        }
        if let (Some(w), Some(d)) = (limits.cpu_weight, cg.dir_of("cpu")) {
            let w = w.clamp(1, 10_000);
            if cg.is_v2("cpu") {
                write(&d.join("cpu.weight"), &w.to_string())?;
            } else {
                write(&d.join("cpu.shares"), &(w * 1024 / 100).max(2).to_string())?;
            }
        }
        if let Some(bytes) = limits.memory_bytes {
            let d = cg
                .dir_of("memory")
                .ok_or_else(|| anyhow!("scenario has no memory controller"))?;
            if cg.is_v2("memory") {
                write(&d.join("memory.max"), &bytes.to_string())?;
                let swap = d.join("memory.swap.max");
                if swap.exists() {
                    write(&swap, &limits.swap_bytes.unwrap_or(0).to_string())?;
                }
            } else {
                write(&d.join("memory.limit_in_bytes"), &bytes.to_string())?;
                // With swap accounting, memory + swap too: the limit must not spill into swap.
                let memsw = d.join("memory.memsw.limit_in_bytes");
                if memsw.exists() {
                    let total = bytes + limits.swap_bytes.unwrap_or(0);
                    write(&memsw, &total.to_string())?;
                }
            }
        }
        if let Some((major, minor, bps)) = limits.io_wbps {
            let d = cg
                .dir_of("io")
                .ok_or_else(|| anyhow!("scenario has no io controller"))?;
            if !cg.is_v2("io") {
                bail!("io.max needs the io controller on cgroup v2");
            }
            write(&d.join("io.max"), &format!("{major}:{minor} wbps={bps}"))?;
        }
        if let Some(bytes) = limits.memory_high_bytes {
            let d = cg
                .dir_of("memory")
                .ok_or_else(|| anyhow!("scenario has no memory controller"))?;
            if !cg.is_v2("memory") {
                bail!(
                    "memory.high needs the memory controller on cgroup v2; this host has it on v1"
                );
            }
            write(&d.join("memory.high"), &bytes.to_string())?;
        }
        Ok(cg)
    }

    /// A command that runs this binary's worker `kind` (see [`crate::worker`]).
    pub fn worker_command(kind: &str) -> Result<Command> {
        let exe = std::env::current_exe().context("cannot find this executable for the workers")?;
        warm_page_cache(&exe);
        let mut c = Command::new(exe);
        c.arg(crate::worker::ARG).arg(kind);
        Ok(c)
    }

    /// Starts `cmd` inside `cg`: it joins the cgroup before exec (so nothing it does is
    /// charged elsewhere), gets its own process group (a terminal's Ctrl-C reaches only the
    /// lab, which then stops it in order) and is killed if the lab dies. Its stdout is kept
    /// for its report.
    pub fn spawn(&mut self, cg: &LabCgroup, role: &str, cmd: Command) -> Result<u32> {
        self.spawn_with(cg, role, cmd, false)
    }

    /// Like [`spawn`](Sandbox::spawn), for a worker whose end is part of the scenario: the
    /// OOM killer ends it, or it stages its own kill. Its early exit is recorded, not an error.
    pub fn spawn_ending(&mut self, cg: &LabCgroup, role: &str, cmd: Command) -> Result<u32> {
        self.spawn_with(cg, role, cmd, true)
    }

    fn spawn_with(
        &mut self,
        cg: &LabCgroup,
        role: &str,
        mut cmd: Command,
        ends: bool,
    ) -> Result<u32> {
        if cmd.get_program() == "python3" {
            warm_python();
        }
        let procs: Vec<CString> = cg
            .dirs()
            .map(|d| CString::new(d.join("cgroup.procs").into_os_string().into_encoded_bytes()))
            .collect::<Result<_, _>>()
            .context("cgroup path with a NUL byte")?;
        // SAFETY: getpid has no failure mode.
        let lab_pid = unsafe { libc::getpid() };
        cmd.stdin(Stdio::null()).stdout(Stdio::piped());
        // SAFETY: between fork and exec the closure only makes system calls on memory prepared
        // before the fork; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0
                    || libc::getppid() != lab_pid
                {
                    // The lab died while starting it (no allocation between fork and exec).
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                libc::setpgid(0, 0);
                for p in &procs {
                    let fd = libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                    if fd < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    let r = libc::write(fd, b"0".as_ptr().cast(), 1);
                    let err = std::io::Error::last_os_error();
                    libc::close(fd);
                    if r != 1 {
                        return Err(err);
                    }
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start the {role} worker in {}", cg.path))?;
        let pid = child.id();
        self.workers.push(Worker {
            role: format!("{}{role}", self.role_prefix),
            child,
            exited: None,
            ends,
        });
        Ok(pid)
    }

    /// The running workers.
    pub fn workers(&self) -> &[Worker] {
        &self.workers
    }

    /// Fails if a worker exited on its own (a workload that dies early proves nothing).
    pub fn check_workers(&mut self) -> Result<()> {
        for w in &mut self.workers {
            if w.exited.is_none() {
                if let Some(st) = w.child.try_wait()? {
                    w.exited = Some(st);
                    if w.ends {
                        continue;
                    }
                    bail!(
                        "the {} worker (pid {}) exited early: {st}",
                        w.role,
                        w.child.id()
                    );
                }
            }
        }
        Ok(())
    }

    /// Asks every worker to stop (SIGTERM, so it can print its report), kills those still
    /// running after `grace`, and returns their reports.
    pub fn stop_workers(&mut self, grace: Duration) -> Vec<Stopped> {
        for w in &self.workers {
            if w.exited.is_none() {
                // SAFETY: signalling our own child, which has not been reaped.
                unsafe { libc::kill(w.child.id() as i32, libc::SIGTERM) };
            }
        }
        let deadline = Instant::now() + grace;
        let mut out = Vec::new();
        for mut w in std::mem::take(&mut self.workers) {
            let early = w.exited.is_some();
            let status = loop {
                match w.child.try_wait() {
                    Ok(Some(st)) => break Some(st),
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    Ok(None) => {
                        let _ = w.child.kill();
                        break w.child.wait().ok();
                    }
                    Err(_) => break w.exited,
                }
            };
            let mut stdout = String::new();
            if let Some(mut o) = w.child.stdout.take() {
                let _ = o.read_to_string(&mut stdout);
            }
            if let Some(status) = status.or(w.exited) {
                out.push(Stopped {
                    role: w.role,
                    status,
                    stdout,
                    exited_early: early,
                });
            }
        }
        out
    }

    /// Stops the workers and removes everything the lab created. Errors say what is left.
    pub fn close(mut self) -> Result<Cleaned> {
        self.closed = true;
        self.stop_workers(Duration::from_secs(3));
        cleanup_unlocked()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if !self.closed {
            self.stop_workers(Duration::from_secs(1));
            if let Err(e) = cleanup_unlocked() {
                eprintln!(
                    "jitterscope: lab cleanup incomplete: {e:#} (run `jitterscope lab cleanup`)"
                );
            }
        }
    }
}

fn write(path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value)
        .with_context(|| format!("cannot write {value:?} to {}", path.display()))
}

/// What a cleanup removed.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Cleaned {
    /// Processes killed.
    pub processes: usize,
    /// Mounts detached.
    pub mounts: usize,
    /// Cgroup directories removed.
    pub cgroups: usize,
    /// Whether the lab directory existed and was removed.
    pub files: bool,
}

impl Cleaned {
    /// True when there was nothing to remove.
    pub fn is_empty(&self) -> bool {
        *self == Cleaned::default()
    }
}

impl std::fmt::Display for Cleaned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} processes killed, {} mounts detached, {} cgroups removed, lab directory {}",
            self.processes,
            self.mounts,
            self.cgroups,
            if self.files { "removed" } else { "absent" }
        )
    }
}

/// Removes every trace of the lab (for `jitterscope lab cleanup`): refuses while a lab run
/// holds the lock.
pub fn cleanup_all() -> Result<Cleaned> {
    require_root("`jitterscope lab cleanup`")?;
    let _lock = lock()?;
    cleanup_unlocked()
}

/// The `jitterscope-lab` directory of every mounted cgroup hierarchy that has one.
pub fn lab_cgroup_dirs() -> Result<Vec<PathBuf>> {
    let hs = discover(&Root::new("/")).context("cannot list cgroup hierarchies")?;
    Ok(hs
        .iter()
        .map(|h| h.mount_point.join(PARENT))
        .filter(|d| d.is_dir())
        .collect())
}

/// Members of the lab cgroups (all hierarchies, all levels).
pub fn lab_pids() -> Result<Vec<u32>> {
    let mut pids = Vec::new();
    for d in lab_cgroup_dirs()? {
        walk_dirs(&d, &mut |dir| {
            if let Ok(s) = std::fs::read_to_string(dir.join("cgroup.procs")) {
                pids.extend(s.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
            }
        });
    }
    pids.sort_unstable();
    pids.dedup();
    Ok(pids)
}

/// Mount points at or under the lab directory, deepest first.
pub fn lab_mounts() -> Result<Vec<PathBuf>> {
    let base = base_dir();
    let info = std::fs::read("/proc/self/mountinfo").context("cannot read mountinfo")?;
    let mut out: Vec<PathBuf> = jitterscope_sources::cgroup::mount_points(&info)
        .into_iter()
        .filter(|m| m.starts_with(&base))
        .collect();
    out.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    out.dedup();
    Ok(out)
}

fn walk_dirs(dir: &Path, f: &mut dyn FnMut(&Path)) {
    f(dir);
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk_dirs(&e.path(), f);
            }
        }
    }
}

/// SIGKILLs `pid` only if it is (still) in a lab cgroup. Workers orphaned by a killed lab are
/// reaped by init, so a pid read from `cgroup.procs` may be reused by the time it is signalled:
/// a pidfd pins the process, /proc confirms it is the lab's, and the signal goes through the
/// pidfd (to a process that died meanwhile it fails harmlessly). Without pidfds (before 5.3),
/// plain kill.
fn kill_lab_process(pid: u32) {
    // SAFETY: plain system calls; the fd is closed below.
    unsafe {
        let fd = libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) as libc::c_int;
        if fd < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
                libc::kill(pid as i32, libc::SIGKILL);
            }
            return;
        }
        let ours = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .is_ok_and(|c| c.contains(&format!("/{PARENT}/")));
        if ours {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd,
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            );
        }
        libc::close(fd);
    }
}

/// Kills, unmounts, removes. The caller holds the lock. Goes on after a failure, so that one
/// stuck mount does not keep everything else in place, and reports every failure.
fn cleanup_unlocked() -> Result<Cleaned> {
    let mut done = Cleaned::default();
    let mut failed: Vec<String> = Vec::new();
    // Processes first: a cgroup with members cannot be removed, and a worker may hold mounts.
    // v2's cgroup.kill (5.14+) kills a whole subtree at once, new forks included.
    for d in lab_cgroup_dirs()? {
        let kill = d.join("cgroup.kill");
        if kill.exists() {
            let _ = std::fs::write(kill, "1");
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut killed = std::collections::BTreeSet::new();
    loop {
        let pids = lab_pids()?;
        if pids.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            failed.push(format!("lab processes survive SIGKILL: {pids:?}"));
            break;
        }
        for p in pids {
            kill_lab_process(p);
            killed.insert(p);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done.processes = killed.len();
    for m in lab_mounts()? {
        let c = CString::new(m.clone().into_os_string().into_encoded_bytes())?;
        // SAFETY: valid NUL-terminated path.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
            let e = std::io::Error::last_os_error();
            failed.push(format!("cannot unmount {}: {e}", m.display()));
        } else {
            done.mounts += 1;
        }
    }
    for d in lab_cgroup_dirs()? {
        let mut all = Vec::new();
        walk_dirs(&d, &mut |p| all.push(p.to_path_buf()));
        // Children before parents.
        all.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for p in all {
            match rmdir_retry(&p) {
                Ok(()) => done.cgroups += 1,
                Err(e) => failed.push(format!("{e:#}")),
            }
        }
    }
    let base = base_dir();
    if base.exists() {
        match std::fs::remove_dir_all(&base) {
            Ok(()) => done.files = true,
            Err(e) => failed.push(format!(
                "cannot remove the lab directory {}: {e}",
                base.display()
            )),
        }
    }
    if !failed.is_empty() {
        bail!("{} (removed meanwhile: {done})", failed.join("; "));
    }
    Ok(done)
}

/// A cgroup whose last member just died can stay busy for a moment.
fn rmdir_retry(p: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match std::fs::remove_dir(p) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if Instant::now() < deadline && e.raw_os_error() == Some(libc::EBUSY) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                return Err(e).with_context(|| format!("cannot remove cgroup {}", p.display()))
            }
        }
    }
}

/// Reads `file` once per lab run, from the lab's own cgroup. A page is charged to the memory
/// cgroup of the task that first brings it into the page cache, and a worker in a tight lab
/// cgroup that faulted in its own program (this binary: 170 MB in a debug build) after a cold
/// cache (a drop_caches, a fresh machine) had its text evicted at the limit and faulted it back
/// all run: the lab's oom-leak then thrashed instead of leaking to its kill in the run's 10 s
/// (CI: no OOM kill, 8,897 major faults of the worker). Read here first, the pages are the
/// lab's, and the worker's cgroup holds only what the scenario makes.
fn warm_page_cache(file: &std::path::Path) {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| read_through(file));
}

/// [`warm_page_cache`] for the Python workers: the interpreter, its libraries and the modules
/// they import, as listed by the mappings of a Python that imported them (run here, in the
/// lab's cgroup). The lab's oom-leak on a cold cache had its worker read 1.1 GB of its own
/// files back in 10 s at the limit of its cgroup, and never reach its kill.
fn warm_python() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        let maps = Command::new("python3")
            .arg("-c")
            .arg("import ctypes, gc, json, os, signal, sys, time; sys.stdout.write(open('/proc/self/maps').read())")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output();
        let Ok(out) = maps else { return };
        let maps = String::from_utf8_lossy(&out.stdout);
        let mut files: Vec<&str> = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .filter(|p| p.starts_with('/'))
            .collect();
        files.sort_unstable();
        files.dedup();
        for f in files {
            read_through(std::path::Path::new(f));
        }
    });
}

/// Reads a file to its end, into the page cache (errors ignored: warming is best effort).
fn read_through(file: &std::path::Path) {
    if let Ok(mut f) = std::fs::File::open(file) {
        let _ = std::io::copy(&mut f, &mut std::io::sink());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(version: CgroupVersion, mp: &str, cs: &[&str]) -> Hierarchy {
        Hierarchy {
            version,
            mount_point: PathBuf::from(mp),
            mount_root: "/".into(),
            controllers: cs.iter().map(|s| s.to_string()).collect(),
            name: None,
            device: mp.into(),
            ns_root: None,
        }
    }

    #[test]
    fn v1_cpu_brings_cpuacct_and_prefers_v1() {
        let hs = vec![
            h(CgroupVersion::V1, "/sys/fs/cgroup/cpu", &["cpu"]),
            h(CgroupVersion::V1, "/sys/fs/cgroup/cpuacct", &["cpuacct"]),
            h(CgroupVersion::V1, "/sys/fs/cgroup/memory", &["memory"]),
            h(CgroupVersion::V2, "/sys/fs/cgroup/unified", &[]),
        ];
        let p = places(&hs, &["cpu", "memory"]).unwrap();
        let mps: Vec<_> = p.iter().map(|p| p.mount_point.to_str().unwrap()).collect();
        assert_eq!(
            mps,
            [
                "/sys/fs/cgroup/cpu",
                "/sys/fs/cgroup/cpuacct",
                "/sys/fs/cgroup/memory"
            ]
        );
    }

    #[test]
    fn combined_v1_mount_is_one_place() {
        let hs = vec![h(
            CgroupVersion::V1,
            "/sys/fs/cgroup/cpu,cpuacct",
            &["cpu", "cpuacct"],
        )];
        let p = places(&hs, &["cpu"]).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].controllers, ["cpu", "cpuacct"]);
    }

    #[test]
    fn missing_controller_is_an_error() {
        let hs = vec![h(CgroupVersion::V2, "/nonexistent-cgroup2", &["cpu"])];
        let e = places(&hs, &["memory"]).unwrap_err().to_string();
        assert!(e.contains("memory controller"), "{e}");
        // v2 offers cpu but its subtree_control (unreadable here) does not enable it.
        let e = places(&hs, &["cpu"]).unwrap_err().to_string();
        assert!(e.contains("+cpu"), "{e}");
    }
}
