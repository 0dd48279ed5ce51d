//! `jitterscope record`: the sampling loop and the store writer thread.
//!
//! The loop does only collection: it wakes on an absolute monotonic schedule, collects, stamps
//! its own cost, and hands the sample to a writer thread through a bounded queue. Encoding,
//! compression, disk writes (which can block on a saturated or full disk) and the status line
//! happen on the writer thread, so a stuck disk never delays the next sample; if the queue
//! fills, samples are dropped and counted rather than the loop stalling.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::stop_signals::STOP;
use std::sync::mpsc::{sync_channel, Receiver, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use jitterscope_detect::Online;
use jitterscope_model::collector::Notes;
use jitterscope_model::sample::{monotonic_ns, wall_ns, HostInfo, RecorderStats, Sample};
use jitterscope_model::signals::{Mark, MarkState};
use jitterscope_model::sources::collectors;
use jitterscope_model::sources::CollectConfig;
use jitterscope_model::stored::{AppendError, SampleWriter};
use jitterscope_model::time::self_timing_ns;
use jitterscope_sources::Root;
use jitterscope_store::{StoreConfig, Writer};

use crate::timearg::{parse_duration, parse_size};

/// Arguments of `record`.
#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Log lines as text (`jitterscope: ...`) or as one JSON object per line (ts, level, msg).
    #[arg(long, value_enum, default_value_t = crate::logline::Format::Text)]
    log_format: crate::logline::Format,
    /// Sampling interval (100ms to 1h).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    interval: Duration,
    /// Store directory [default: $JITTERSCOPE_DIR or /var/lib/jitterscope]. It must not be a
    /// symbolic link, and an existing one must belong to the user who records (see
    /// --allow-other-owner).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Record into a store directory that belongs to another user: the files created are this
    /// user's, which that user's recorder cannot then rotate or delete. Refused without it.
    #[arg(long)]
    allow_other_owner: bool,
    /// This host's name in everything recorded and exported: the samples (the name `serve`,
    /// /metrics and `top` show), remote write's `host` label and ClickHouse's `host` column
    /// [default: the kernel's host name]. In a Kubernetes DaemonSet give the node's name
    /// (the downward API's spec.nodeName): the pod's own host name changes with every rollout.
    #[arg(long, value_name = "NAME", alias = "fleet-host", value_parser = parse_host)]
    host: Option<String>,
    /// Delete recorded data older than this (at least 1m: retention runs when the store
    /// opens, so less would delete the previous runs' data at start).
    #[arg(long, default_value = "7d", value_parser = parse_duration)]
    retain: Duration,
    /// Keep the store below this total size, deleting the oldest data first (at least 1MiB;
    /// a bare number is bytes).
    #[arg(long, default_value = "2GiB", value_parser = parse_size)]
    max_size: u64,
    /// Stop after this long, more than 0 (default: run until SIGINT/SIGTERM).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Print one status line per sample on stdout (cpu, reclaim scans, TLB IPIs, worst throttled cgroup).
    #[arg(long)]
    status: bool,
    /// Read kernel files under this directory instead of / (for recorded trees and tests).
    #[arg(long, default_value = "/")]
    root: PathBuf,
    /// Scheduling niceness to run at, -20 (the highest priority) to 19.
    #[arg(long, default_value_t = -20, allow_negative_numbers = true,
          value_parser = clap::value_parser!(i32).range(-20..=19))]
    nice: i32,
    /// Do not lock the recorder's memory (mlockall).
    #[arg(long)]
    no_mlock: bool,
    /// How often to read /proc/slabinfo, which holds slab locks while it is read (at most once
    /// per interval; 0s: every interval).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    slabinfo_interval: Duration,
    /// How often to read a cgroup's settings again: CPU quota, period, burst, shares or weight,
    /// memory limit, high, low and min (0s: every interval). Counters are read every interval;
    /// a new or re-created cgroup is read whole at once.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    cgroup_settings_interval: Duration,
    /// BPF tracers to run, comma-separated [default: all].
    #[arg(long, value_delimiter = ',', value_parser = TracerParser, conflicts_with = "no_tracers")]
    tracers: Option<Vec<jitterscope_bpf::Name>>,
    /// Run no BPF tracer.
    #[arg(long)]
    no_tracers: bool,
    /// When the on-demand tracers are attached: `auto` only while their symptom lasts, `always`
    /// for the whole run. They are madvise and lookups (attached on TLB shootdowns and growing
    /// negative dentries: their syscall-tracepoint fallbacks slow every system call on the host),
    /// tlb (on TLB shootdowns: it runs at every TLB flush, task switches included) and runqlat
    /// (while threads wait for a CPU, a mean run-queue wait of 20 us per timeslice: it runs at
    /// every context switch). `--syscall-tracers` is its older name.
    #[arg(long = "on-demand-tracers", visible_alias = "syscall-tracers", value_enum,
          default_value_t = SyscallTracers::Auto)]
    syscall_tracers: SyscallTracers,
    /// With `--on-demand-tracers auto`: attach each detached on-demand tracer for one interval
    /// this often, so a process making thousands of failing look-ups or madvise calls is seen
    /// even when the symptom that attaches the tracer does not show, and run-queue latency has
    /// a baseline (0s: never).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    census_every: Duration,
    /// Stack samples per second per CPU (kernel and user call chains, all processes); 0 turns
    /// the profiler off.
    #[arg(long, default_value_t = jitterscope_profile::sampler::DEFAULT_HZ,
          value_parser = clap::value_parser!(u32).range(0..=10_000))]
    profile_hz: u32,
    /// Bytes of each sampled thread's user stack the profiler copies, to unwind code built
    /// without frame pointers (most distribution libraries, Rust release builds) with its
    /// .eh_frame; 0 keeps the kernel's frame-pointer walk only (cheaper, but stacks of such
    /// code end at the leaf). A multiple of 8, at most 65528.
    #[arg(long, default_value_t = jitterscope_profile::unwind::DEFAULT_STACK_BYTES,
          value_parser = parse_stack_bytes)]
    profile_stack: u32,
    /// Do not read CPython's interpreter frames (3.8–3.13) at each stack sample; Python
    /// processes then show only the interpreter's native frames.
    #[arg(long)]
    no_profile_python: bool,
    /// Also mask the value of arguments with this name in the command lines recorded, as a
    /// glob matched without case (`*dsn*`, `conn-string`); repeat for more. Built in: values
    /// of names with password, passwd, secret, token, key, apikey, auth, credential(s) or
    /// cookie in them (`--password=x`, `--token x`, `PGPASSWORD=x`) and URL passwords
    /// (`postgres://u:x@db`). The command lines are masked before they are stored, shown or
    /// exported.
    #[arg(long, value_name = "GLOB")]
    redact_arg: Vec<String>,
    /// Record no command lines at all (each process keeps its name, comm).
    #[arg(long)]
    no_cmdline: bool,
    /// Where per-process data comes from: `bpf` one read of a BPF task iterator per sample
    /// (root or CAP_BPF + CAP_PERFMON, BTF, kernel 5.8+), `procfs` the /proc/<pid> files,
    /// `auto` the iterator when it loads, else /proc. The process table is the same either way.
    #[arg(long, value_enum, default_value_t = ProcSource::Auto)]
    proc_source: ProcSource,
    #[command(flatten)]
    remote: Box<crate::remote_write::RemoteWriteArgs>,
}

/// See `RecordArgs::proc_source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ProcSource {
    Auto,
    Bpf,
    Procfs,
}

/// See `RecordArgs::syscall_tracers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SyscallTracers {
    Auto,
    Always,
}

/// A host name as it goes into labels and rows: printable, no white space, at most 253
/// bytes (a DNS name's limit).
fn parse_host(s: &str) -> Result<String, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("the host name is empty".into());
    }
    if s.len() > 253 {
        return Err(format!(
            "{}…: longer than 253 bytes",
            &s[..s.floor_char_boundary(40)]
        ));
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "{s:?}: a host name has no white space or control characters"
        ));
    }
    Ok(s.to_string())
}

fn parse_tracer(s: &str) -> Result<jitterscope_bpf::Name, String> {
    jitterscope_bpf::Name::parse(s.trim())
}

/// Parses `--tracers` values as [`parse_tracer`] does (same errors) and offers the tracers'
/// names to the help from the tracer table, so the help never lists them by hand.
#[derive(Clone)]
struct TracerParser;

impl clap::builder::TypedValueParser for TracerParser {
    type Value = jitterscope_bpf::Name;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Self::Value, clap::Error> {
        clap::builder::TypedValueParser::parse_ref(&parse_tracer, cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(jitterscope_bpf::Name::all().map(|n| {
            clap::builder::PossibleValue::new(n.as_str()).help(n.what())
        })))
    }
}

fn sleep_until_monotonic(ns: u64) {
    let ts = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: absolute sleep on the monotonic clock; an EINTR return is handled by the caller
    // re-checking the stop flag and the schedule.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    };
}

fn self_cpu_ns() -> (u64, u64) {
    // SAFETY: getrusage writes the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let ns = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1000;
    (ns(ru.ru_utime), ns(ru.ru_stime))
}

fn self_rss_bytes(buf: &mut Vec<u8>) -> u64 {
    // statm's second field is resident pages; cheaper than status.
    if jitterscope_sources::fileio::read_into(std::path::Path::new("/proc/self/statm"), buf)
        .is_err()
    {
        return 0;
    }
    let page = HostInfo::page_size();
    jitterscope_sources::fileio::fields(buf)
        .nth(1)
        .and_then(|f| jitterscope_sources::fileio::parse_u64(f, 1, "rss").ok())
        .map_or(0, |p| p * page)
}

/// Counters shared between the sampling loop and the writer thread.
#[derive(Default)]
struct Shared {
    bytes_written: AtomicU64,
    dropped: AtomicU64,
    queued: AtomicU64,
}

fn log(msg: &str) {
    crate::logline::emit(crate::logline::Level::Info, msg);
}

/// Something the recorder cannot do or collect: it goes on without it.
fn warn(msg: &str) {
    crate::logline::emit(crate::logline::Level::Warn, msg);
}

/// A sample lost (not encoded or not written).
fn error(msg: &str) {
    crate::logline::emit(crate::logline::Level::Error, msg);
}

/// Shortest `--retain`: anything shorter empties the store it opens.
const MIN_RETAIN: Duration = Duration::from_secs(60);

/// Smallest `--max-size`. A bare number is bytes, so `--max-size 2` meant as gigabytes would
/// otherwise delete every closed segment.
const MIN_MAX_SIZE: u64 = 1 << 20;

/// The checks on values that clap's parsers cannot make alone; the configuration file's
/// values go through them too (`config check`), so a bad one names its line.
pub fn validate(a: &RecordArgs) -> Result<()> {
    if a.interval < Duration::from_millis(100) || a.interval > Duration::from_secs(3600) {
        bail!("--interval must be between 100ms and 1h");
    }
    // Checked before the store opens: opening it applies retention, at once.
    if a.retain < MIN_RETAIN {
        bail!(
            "--retain {} would delete the data as soon as it is written, the previous runs' too: \
             give how long to keep it, at least 1m (default 7d)",
            humantime::format_duration(a.retain)
        );
    }
    if a.max_size < MIN_MAX_SIZE {
        bail!(
            "--max-size {} bytes leaves no room for the data, the previous runs' included: \
             give the most the store may use, at least 1MiB (e.g. 500MiB; default 2GiB)",
            a.max_size
        );
    }
    a.remote.validate()?;
    redactor(a)?;
    if a.no_cmdline && !a.redact_arg.is_empty() {
        bail!("--redact-arg cannot be used with --no-cmdline: no command line is recorded");
    }
    if a.no_tracers && a.tracers.is_some() {
        bail!("--tracers cannot be used with --no-tracers: give the tracers to run, or none");
    }
    if a.duration == Some(Duration::ZERO) {
        bail!(
            "--duration 0 would stop before the first sample: leave it out to record until stopped"
        );
    }
    Ok(())
}

/// Runs `record`; `ignored`: the options given that do nothing, said first.
pub fn run(a: RecordArgs, ignored: &[String]) -> Result<()> {
    crate::logline::set_format(a.log_format);
    validate(&a)?;
    for n in ignored {
        warn(n);
    }
    // Before any thread starts, so every thread is under the filter from its first call.
    let families = crate::confine::families(a.remote.exports());
    match crate::confine::restrict_families(&families) {
        Ok(()) => log(&format!(
            "sockets: {} only",
            families
                .iter()
                .map(|&f| crate::confine::name(f))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        Err(e) => warn(&format!("sockets: not restricted: {e:#}")),
    }
    let dir = crate::store_dir(a.dir.clone());
    let mut cfg = StoreConfig::new(&dir);
    cfg.allow_other_owner = a.allow_other_owner;
    cfg.retain = a.retain;
    cfg.max_bytes = a.max_size;
    // Validate the root before touching the store: opening the writer applies retention.
    let root = Root::new(&a.root);
    if !root.path("/proc/stat").exists() {
        bail!(
            "{} has no proc/stat: not a Linux /proc root",
            a.root.display()
        );
    }
    let writer =
        Writer::open(cfg).with_context(|| format!("cannot open store {}", dir.display()))?;
    // Headers and indexes only (no decompression): a start on a big store stays fast. The
    // writer never appends to an existing segment, so damage found here costs only itself.
    if let Ok(found) = jitterscope_store::check_store(&dir, false) {
        if let Some(first) = found.first() {
            warn(&format!(
                "the store has {} damaged files (readers skip them; `jitterscope store check` lists them, `--repair` fixes what it can); first: {}: {}",
                found.len(),
                first.path.display(),
                first.what
            ));
        }
    }

    crate::stop_signals::install();
    for n in crate::prio::harden(a.nice, !a.no_mlock).notes {
        warn(&n);
    }
    // What each missing capability costs, by name, so a service's unit can be fixed.
    let caps = jitterscope_model::caps::effective();
    for m in jitterscope_model::caps::missing_in(caps) {
        warn(&m);
    }
    let paranoid = jitterscope_model::caps::perf_paranoid();
    if let Some(m) = jitterscope_model::caps::perf_restricted_in(caps, paranoid) {
        warn(&m);
    }

    let mut host = HostInfo::read(&root);
    match &a.host {
        Some(name) => host.hostname = name.clone(),
        None => {
            if let Some(m) = container_hostname(&root, &host.hostname) {
                warn(&m);
            }
        }
    }
    let cmdlines = std::sync::Arc::new(redactor(&a)?);
    let mut sources = collectors(
        &root,
        &CollectConfig {
            slabinfo_period: a.slabinfo_interval,
            cgroup_settings_period: a.cgroup_settings_interval,
            cmdlines: cmdlines.clone(),
        },
    );
    if a.proc_source != ProcSource::Procfs {
        match jitterscope_bpf::task_iter::TaskCollector::start(&root, cmdlines) {
            Ok(c) => {
                sources.replace(Box::new(c));
                log("processes: read through the BPF task iterator");
            }
            Err(why) if a.proc_source == ProcSource::Bpf => {
                anyhow::bail!("--proc-source bpf: the task iterator cannot be used: {why}")
            }
            Err(why) => warn(&format!(
                "processes: read from /proc (task iterator: {why})"
            )),
        }
    }
    let tracers: Vec<jitterscope_bpf::Name> = if a.no_tracers {
        Vec::new()
    } else if a.root != std::path::Path::new("/") {
        // The tracers watch the running kernel, which a recorded tree under --root is not.
        if a.tracers.is_some() {
            warn("tracers: not started: they trace the running kernel, not the tree under --root");
        }
        Vec::new()
    } else {
        a.tracers
            .clone()
            .unwrap_or_else(|| jitterscope_bpf::Name::all().collect())
    };
    if !tracers.is_empty() {
        let (c, started) = if a.syscall_tracers == SyscallTracers::Auto {
            let (mut c, started) =
                jitterscope_bpf::TracerCollector::start_on_demand(&root, &tracers);
            c.set_census(a.census_every);
            (c, started)
        } else {
            jitterscope_bpf::TracerCollector::start(&root, &tracers)
        };
        for s in &started {
            match &s.outcome {
                Ok(_) => {}
                Err(why) => warn(&format!("tracer {}: not running: {why}", s.name.as_str())),
            }
        }
        let up = jitterscope_bpf::running(&started);
        if !up.is_empty() {
            log(&format!("tracers running: {}", up.join(", ")));
            let waiting = c.waiting();
            if !waiting.is_empty() {
                let names: Vec<&str> = waiting.iter().map(|n| n.as_str()).collect();
                let symptoms: Vec<String> = waiting
                    .iter()
                    .filter_map(|n| n.demand())
                    .map(|d| format!("{} ≥ {:.0}", d.metric.name, d.floor))
                    .collect();
                let census = if a.census_every.is_zero() {
                    String::new()
                } else {
                    format!(
                        ", and for one interval every {} (census)",
                        humantime::format_duration(a.census_every)
                    )
                };
                log(&format!(
                    "tracers {}: attached only while their symptom lasts ({}{census}; --on-demand-tracers always to keep them on)",
                    names.join(", "),
                    symptoms.join(", ")
                ));
            }
            sources.push(Box::new(c));
        }
    }
    if a.profile_hz > 0 {
        if a.root != std::path::Path::new("/") {
            warn("profile: not started: it samples the running kernel, not the tree under --root");
        } else {
            let cfg = if a.profile_stack == 0 {
                jitterscope_profile::sampler::Config::frame_pointers(a.profile_hz)
            } else {
                jitterscope_profile::sampler::Config {
                    hz: a.profile_hz,
                    stack_bytes: a.profile_stack,
                    ..Default::default()
                }
            };
            let cfg = jitterscope_profile::sampler::Config {
                python: !a.no_profile_python,
                ..cfg
            };
            match jitterscope_profile::sampler::ProfileCollector::start(&cfg) {
                Ok(c) => {
                    let how = if a.profile_stack == 0 {
                        "frame pointers".to_string()
                    } else {
                        format!(
                            "{} bytes of user stack unwound with .eh_frame",
                            a.profile_stack
                        )
                    };
                    log(&format!(
                        "profile: sampling stacks at {} Hz per CPU ({how})",
                        a.profile_hz
                    ));
                    sources.push(Box::new(c));
                }
                Err(why) => warn(&format!("profile: not running: {why}")),
            }
        }
    }
    let mut notes = Notes::default();
    let shared = Arc::new(Shared::default());
    // Samples from this moment on are this run's; a receiver never sent to before gets
    // those, and one with a cursor gets everything the store holds after it.
    let senders = a.remote.start(&dir, &host.hostname, wall_ns())?;
    let remote_stats: Vec<_> = senders.iter().map(|s| s.stats()).collect();
    // Five minutes of one-second samples: enough to ride out a stalled or full disk.
    let (tx, rx) = sync_channel::<Box<Sample>>(300);
    let writer_thread = {
        let shared = shared.clone();
        let status = a.status;
        std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || write_loop(writer, rx, shared, status, senders))
            .context("cannot start the store writer thread")?
    };
    // Episodes reach ClickHouse from the store, after the writer put them there.
    let pusher = a.remote.start_clickhouse(&dir, &host.hostname)?;
    log(&format!(
        "recording every {:?} into {} ({} sources)",
        a.interval,
        dir.display(),
        sources.len()
    ));

    let interval_ns = a.interval.as_nanos() as u64;
    let started = Instant::now();
    let mut next = monotonic_ns();
    let mut ticks_missed = 0u64;
    let mut statm_buf = Vec::with_capacity(128);
    let mut watchdog = crate::service::Watchdog::from_env();
    // A long interval must not starve the watchdog: the loop wakes in time to feed it.
    let wake_ns = watchdog.max_sleep().map(|d| d.as_nanos() as u64);
    crate::service::ready(&format!(
        "recording every {:?} into {}",
        a.interval,
        dir.display()
    ));
    while !STOP.load(Ordering::SeqCst) {
        watchdog.feed();
        if let Some(d) = a.duration {
            if started.elapsed() >= d {
                break;
            }
        }
        let now = monotonic_ns();
        if now < next {
            sleep_until_monotonic(wake_ns.map_or(next, |w| next.min(now + w)));
            continue; // re-check the stop flag and the clock after every wake-up
        }
        let lateness_ns = now - next;
        // If a tick was missed entirely (the host starved us), skip to the next slot instead of
        // collecting a burst of back-to-back samples; the gap stays visible in the data.
        let behind = lateness_ns / interval_ns;
        ticks_missed += behind;
        next += (behind + 1) * interval_ns;

        let mut sample = Box::new(Sample::new(wall_ns(), now, interval_ns, host.clone()));
        sources.collect(&mut sample, &mut notes);
        if let (Some(t), Some(ps)) = (sample.tracers.as_mut(), sample.processes.as_deref()) {
            t.name_procs_as(ps);
        }
        let (cpu_user_ns, cpu_system_ns) = self_cpu_ns();
        sample.recorder = Some(RecorderStats {
            lateness_ns: self_timing_ns(lateness_ns),
            collect_ns: self_timing_ns(monotonic_ns() - now),
            cpu_user_ns,
            cpu_system_ns,
            rss_bytes: self_rss_bytes(&mut statm_buf),
            store_bytes_written: shared.bytes_written.load(Ordering::Relaxed),
            samples_dropped: shared.dropped.load(Ordering::Relaxed),
            write_queue: shared.queued.load(Ordering::Relaxed),
            source_errors: notes.errors_total,
            ticks_missed,
            remote_write: jitterscope_fleet::remote_write::combined(&remote_stats),
            pid: std::process::id(),
        });
        for n in notes.drain() {
            warn(&n);
        }
        shared.queued.fetch_add(1, Ordering::Relaxed);
        match tx.try_send(sample) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                shared.queued.fetch_sub(1, Ordering::Relaxed);
                shared.dropped.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Disconnected(_)) => bail!("the store writer thread stopped"),
        }
    }
    crate::service::stopping();
    drop(tx);
    let w = writer_thread
        .join()
        .map_err(|_| anyhow::anyhow!("store writer thread panicked"))?;
    if let Some(p) = pusher {
        p.stop();
    }
    w?;
    log(&format!(
        "stopped; {} bytes written, {} samples dropped",
        shared.bytes_written.load(Ordering::Relaxed),
        shared.dropped.load(Ordering::Relaxed)
    ));
    Ok(())
}

impl RecordArgs {
    /// See `RemoteWriteArgs::url_problems`.
    pub fn url_problems(&self) -> Vec<String> {
        self.remote.url_problems()
    }
}

/// What of each command line the recorder keeps.
fn redactor(a: &RecordArgs) -> Result<jitterscope_sources::redact::Redactor> {
    if a.no_cmdline {
        return Ok(jitterscope_sources::redact::Redactor::off());
    }
    jitterscope_sources::redact::Redactor::new(&a.redact_arg)
        .map_err(|e| anyhow::anyhow!("--redact-arg {e}"))
}

/// When the kernel's host name is a container's (this process is in another UTS namespace
/// than PID 1, as a pod without hostNetwork is), what that costs: the fleet would key this
/// node by a name that changes with every rollout.
fn container_hostname(root: &Root, hostname: &str) -> Option<String> {
    let ns = |p: &str| std::fs::read_link(root.path(p)).ok();
    let (own, init) = (ns("/proc/self/ns/uts")?, ns("/proc/1/ns/uts")?);
    (own != init).then(|| {
        format!(
            "host: `{hostname}` is this container's host name, not the node's (another UTS \
             namespace than PID 1's): set `host` (--host, JITTERSCOPE_HOST; in Kubernetes the \
             downward API's spec.nodeName) so that the node keeps one name across restarts"
        )
    })
}

/// A log line for an episode mark.
fn mark_line(m: &Mark) -> String {
    match m.state {
        MarkState::Start => format!(
            "episode started: {} on {} = {:.1} (baseline {:.1}, threshold {:.1})",
            m.kind, m.series, m.peak, m.baseline, m.threshold
        ),
        MarkState::End => format!(
            "episode ended: {} on {} after {} s, peak {:.1}",
            m.kind,
            m.series,
            ((m.to_ns - m.from_ns) / 1_000_000_000).max(1),
            m.peak
        ),
    }
}

/// How long writes must go through after a pause for space before it is said to be over.
const RESUME_AFTER: Duration = Duration::from_secs(5);

fn write_loop(
    w: Writer,
    rx: Receiver<Box<Sample>>,
    shared: Arc<Shared>,
    status: bool,
    senders: Vec<jitterscope_fleet::remote_write::Sender>,
) -> Result<()> {
    // Episodes are detected here, on the writer thread, so the collector's tick never waits
    // on them; they reach the store in the same record as the sample they were seen in.
    let mut online = Online::new();
    let mut w = SampleWriter::new(w);
    // Shared with the remote-write sender, which derives its points from the samples while it
    // keeps up: no copy.
    let mut prev: Option<Arc<Sample>> = None;
    let mut last_written: Option<i64> = None;
    let mut last_error_log: Option<Instant> = None;
    let mut written_before = w.writer().bytes_written();
    // One pause spans every sample that waits for space, so it is announced once. It ends once
    // writes have gone through for RESUME_AFTER: a disk another process keeps filling takes
    // the room retention freed within seconds, and "resumed" then "pausing" again at once
    // said nothing true.
    let mut paused_since: Option<Instant> = None;
    // The first write that went through in the pause, and how long the pause had lasted then.
    let mut resuming: Option<(Instant, Duration)> = None;
    let say_resumed = |after: Duration| {
        log(&format!(
            "store has space again after {after:.0?}; writing resumed ({} samples dropped so far)",
            shared.dropped.load(Ordering::Relaxed)
        ));
    };
    while let Ok(mut sample) = rx.recv() {
        shared.queued.fetch_sub(1, Ordering::Relaxed);
        // What the detection and the remote-write sender see is what the store will hold.
        jitterscope_model::codec::round_as_stored(&mut sample);
        let signals = online.step(&sample, prev.as_deref());
        for m in &signals.marks {
            log(&mark_line(m));
        }
        let mut written = false;
        loop {
            match w.append(&mut sample, &signals) {
                Ok(_) => {
                    written = true;
                    if let Some(t) = paused_since {
                        match resuming {
                            None => resuming = Some((Instant::now(), t.elapsed())),
                            Some((since, after)) if since.elapsed() >= RESUME_AFTER => {
                                say_resumed(after);
                                paused_since = None;
                                resuming = None;
                            }
                            Some(_) => {}
                        }
                    }
                    break;
                }
                Err(e) if e.is_no_space() => {
                    // Still the same pause.
                    resuming = None;
                    if paused_since.is_none() {
                        paused_since = Some(Instant::now());
                        warn(&format!(
                            "{e}; pausing writes until space returns (new samples queue, then are dropped and counted)"
                        ));
                    }
                    if STOP.load(Ordering::SeqCst) {
                        shared.dropped.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
                Err(e @ AppendError::Encode(_)) => {
                    error(&e.to_string());
                    shared.dropped.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Err(e) => {
                    if last_error_log.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                        error(&format!("cannot write a sample: {e}"));
                        last_error_log = Some(Instant::now());
                    }
                    shared.dropped.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
        }
        let total = w.writer().bytes_written();
        shared
            .bytes_written
            .fetch_add(total - written_before, Ordering::Relaxed);
        written_before = total;
        if status {
            outln!("{}", crate::status::line(prev.as_deref(), &sample));
            // `record --status | head`: once the reader has gone, stop as on SIGTERM (the
            // samples in flight are written) and exit as SIGPIPE would have.
            if crate::pipe::closed() {
                STOP.store(true, Ordering::SeqCst);
            }
        }
        let sample: Arc<Sample> = Arc::from(sample);
        if written {
            for s in &senders {
                s.offer(last_written, sample.clone());
            }
            last_written = Some(sample.ts_ns);
        }
        prev = Some(sample);
    }
    if let Some((_, after)) = resuming {
        say_resumed(after);
    }
    jitterscope_fleet::remote_write::stop_all(senders);
    Ok(())
}

/// `--profile-stack`: the kernel copies whole 8-byte words, so it takes a multiple of 8 (0 to
/// 65528); another value is refused rather than rounded down (7 became 0, the profiler without
/// its unwinder, with no word said).
fn parse_stack_bytes(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of bytes (a multiple of 8, 0 to 65528)"))?;
    if n > 65_528 || !n.is_multiple_of(8) {
        return Err(format!("{n} is not a multiple of 8 from 0 to 65528"));
    }
    Ok(n)
}
