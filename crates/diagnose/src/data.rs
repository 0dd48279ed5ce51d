//! What the rules read: the selected series of a window and of the baseline before it, the
//! processes seen in the window, and the window's stack samples (hottest kernel functions,
//! libraries each process ran code from).
//!
//! Series come from the same registry as `dump` (so a rule's evidence names the series a user
//! can dump), stored sparsely by sample index. Only the series the rules ask for are
//! evaluated: on a busy host most of a sample's series are per-process and per-cgroup ones no
//! rule reads.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use anyhow::{Context, Result};
use jitterscope_model::codec::Parts;
use jitterscope_model::derive::Selection;
use jitterscope_model::glob::Pattern;
use jitterscope_model::profile::FrameKind;
use jitterscope_model::registry::{MetricDef, Select};
use jitterscope_model::stored::{Damage, SampleReader, PREV_LOOKBACK_NS};
use jitterscope_model::Sample;
use jitterscope_profile::window::{Filter, NoFiles, Space, Window};
use jitterscope_sources::cgroup::ProcCgroupPaths;
use jitterscope_sources::system::kernel::{parse_osrelease, KernelVersion};
use jitterscope_sources::system::kmsg::OomKill;

/// Points of the process-table series over the window (at the same spacing in the baseline,
/// up to [`BASELINE_PROCESS_POINTS`]).
pub const PROCESS_POINTS: i64 = 240;
/// Most points of the process-table series over the baseline: a median and a MAD need no
/// more, and at the window's spacing (a second, for a window under 4 minutes) a 10-minute
/// baseline of 300 processes held 50 MB of points, the bulk of the ClickHouse pusher's
/// memory at each episode close (issue 44).
const BASELINE_PROCESS_POINTS: i64 = 120;

/// One series: its metric and placeholder values, and (sample index, value) for the samples
/// where it had a value.
#[derive(Debug, Clone)]
pub struct Series {
    /// The metric.
    pub def: &'static MetricDef,
    /// Placeholder values, in template order.
    pub labels: Vec<String>,
    /// Points in sample order.
    pub points: Vec<(u32, f64)>,
}

impl Series {
    /// The series' metric and labels, without its points.
    pub fn source(&self) -> crate::SeriesRef {
        crate::SeriesRef {
            def: self.def,
            labels: self.labels.clone(),
        }
    }

    /// An empty series of `def` with `labels`.
    pub fn new(def: &'static MetricDef, labels: &[&str]) -> Self {
        Series {
            def,
            labels: labels.iter().map(|l| l.to_string()).collect(),
            points: Vec::new(),
        }
    }

    /// Its name, as `dump --select` takes it.
    pub fn name(&self) -> String {
        let l: Vec<&str> = self.labels.iter().map(String::as_str).collect();
        self.def.series_name(&l)
    }

    /// Placeholder value `i` (empty when the metric has fewer).
    pub fn label(&self, i: usize) -> &str {
        self.labels.get(i).map_or("", String::as_str)
    }

    /// For a per-process metric (`….<pid>.<comm>.…`): its pid and comm.
    pub fn pid_comm(&self) -> Option<(u32, &str)> {
        let ph = self.def.placeholders();
        let p = ph.iter().position(|p| *p == "pid")?;
        let c = ph.iter().position(|p| *p == "comm")?;
        Some((self.label(p).parse().ok()?, self.label(c)))
    }
}

/// A process seen in the window.
#[derive(Debug, Clone, Default)]
pub struct Proc {
    /// Command name.
    pub comm: String,
    /// Parent pid (as last seen).
    pub ppid: u32,
    /// Command line (NUL-separated arguments joined by spaces).
    pub cmdline: String,
    /// Cgroup path: v1 cpu, else v2.
    pub cgroup: Option<String>,
    /// Memory cgroup path: v1 memory, else v2.
    pub memory_cgroup: Option<String>,
    /// I/O cgroup path: v1 blkio, else v2.
    pub io_cgroup: Option<String>,
    /// Start time (clock ticks after boot), which with the boot id tells whether a live
    /// process of the same pid is this one.
    pub starttime: u64,
}

/// A function's share of the window's stack samples.
#[derive(Debug, Clone, PartialEq)]
pub struct HotFn {
    /// Function name.
    pub name: String,
    /// Percent of all samples with it as the kernel leaf.
    pub self_pct: f64,
}

/// The loaded data of one diagnosis.
#[derive(Debug, Default)]
pub struct Data {
    /// Sample times (ns since the epoch), by index.
    pub ts: Vec<i64>,
    /// First index of the diagnosed window; indexes before it are the baseline.
    pub start: usize,
    /// Seconds each sample's values cover, by index: the rates of host series span the time
    /// since the sample before; those of process series, evaluated on a subsample, span the
    /// time since the previous sample with processes (0 where none was evaluated). Empty for
    /// data that did not come from samples (the signals lane).
    pub spans: Vec<(f64, f64)>,
    /// Selected series by name.
    pub series: BTreeMap<String, Series>,
    /// Kernel release of the recorded host.
    pub kernel: String,
    /// Boot id of the recorded host.
    pub boot_id: String,
    /// CPUs of the recorded host.
    pub ncpu: u32,
    /// Processes seen in the window, by pid.
    pub procs: HashMap<u32, Proc>,
    /// Executable files each process ran code from in the window's stack samples, by pid.
    pub modules: HashMap<u32, BTreeSet<String>>,
    /// Hottest kernel functions of the window (self %, of the non-idle samples).
    pub kernel_hot: Vec<HotFn>,
    /// Stack samples in the window.
    pub profile_samples: u64,
    /// Records the read skipped (undecodable samples, unreadable segments).
    pub damage: Damage,
    /// The OOM killer's victims in the window (from its reports in the kernel log), with the
    /// time of each kill (ns since the epoch).
    pub oom_kills: Vec<(i64, OomKill)>,
    /// The window asked for, `(from, to]`, when the data was read from a store; the samples
    /// may not reach its ends.
    pub asked: Option<(i64, i64)>,
    /// The identity of each container cgroup the window's records named (by path), so a
    /// culprit is named as its runtime names it, not only by id.
    pub containers: HashMap<String, jitterscope_sources::cgroup::Identity>,
    /// The process ids of the recorders that took the samples (`RecorderStats::pid`; none in
    /// recordings from before it was kept): the agent itself, whose memory is its budget,
    /// never a culprit.
    pub recorder_pids: BTreeSet<u32>,
    /// The command names the lookups tracer saw failing each name pattern in the window (up
    /// to four per pattern and interval): which producer probed which names.
    pub lookup_comms: HashMap<String, BTreeSet<String>>,
}

/// Summary statistics of a series over the window and over the baseline.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stats {
    /// Window: samples with a value.
    pub n: usize,
    /// Window: largest value.
    pub max: f64,
    /// Window: mean, `sum / n` (so a value that covers more seconds weighs more).
    pub mean: f64,
    /// Window: each value times the seconds it covers (`Data::spans`; without them, the time
    /// since the series' previous point): a per-second rate integrated, a count.
    pub sum: f64,
    /// Window: the seconds its values cover (what `sum` integrated over).
    pub covered_s: f64,
    /// Window: first and last values.
    pub first: f64,
    /// Window: last value.
    pub last: f64,
    /// Baseline: samples with a value.
    pub base_n: usize,
    /// Baseline: median.
    pub base_median: f64,
    /// Baseline: median absolute deviation.
    pub base_mad: f64,
}

pub use jitterscope_detect::stats::{median, median_mad};

/// Builds the series of a read: the series of a host come out of every sample in the same
/// order, so each value is first tried against the series the same position held in the
/// sample before (one string comparison), and looked up only when that is not it. Finding
/// each of 50 cgroups' series in an ordered map by name was a third of diagnosing 10
/// minutes (perf: the map walk and its string comparisons).
#[derive(Default)]
struct Builder {
    series: Vec<(String, Series)>,
    index: HashMap<String, usize>,
    /// Slot of each position in the previous sample, and of this one so far.
    before: Vec<usize>,
    now: Vec<usize>,
}

impl Builder {
    /// Starts a sample.
    fn begin(&mut self) {
        if !self.now.is_empty() {
            std::mem::swap(&mut self.before, &mut self.now);
            self.now.clear();
        }
    }

    fn push(&mut self, def: &'static MetricDef, labels: &[&str], name: &str, idx: u32, v: f64) {
        let k = self.now.len();
        let slot = match self.before.get(k) {
            Some(&i) if self.series[i].0 == name => i,
            _ => match self.index.get(name) {
                Some(&i) => i,
                None => {
                    self.series
                        .push((name.to_string(), Series::new(def, labels)));
                    self.index.insert(name.to_string(), self.series.len() - 1);
                    self.series.len() - 1
                }
            },
        };
        self.series[slot].1.points.push((idx, v));
        self.now.push(slot);
    }

    /// Hands the series to `d`.
    fn finish(self, d: &mut Data) {
        d.series.extend(self.series);
    }
}

impl Data {
    /// `n` empty samples one second apart from time 0, the window starting at index `start`
    /// (for data built by hand: tests, tools).
    pub fn seconds(n: usize, start: usize) -> Data {
        Data {
            ts: (0..n as i64).map(|i| i * 1_000_000_000).collect(),
            start: start.min(n),
            ..Default::default()
        }
    }

    /// Loads the samples in `(from - lookback, to]`: the series `select` names, and with
    /// `detail`, for the window `(from, to]`, the processes and stack samples (reading host
    /// series over a long range needs neither, and skips decoding them).
    pub fn load(
        dir: &Path,
        from: i64,
        to: i64,
        lookback_ns: i64,
        select: &[Select],
        detail: bool,
    ) -> Result<Data> {
        let (proc_sel, host_sel): (Vec<Select>, Vec<Select>) = select
            .iter()
            .cloned()
            .partition(|s| s.def.parts().contains(Parts::PROCESSES));
        Self::load_with(
            dir,
            from,
            to,
            lookback_ns,
            &Selection::of(&host_sel),
            &Selection::of(&proc_sel),
            detail,
        )
    }

    /// Like [`load`](Data::load), for series named by user globs (`dump --select` style).
    pub fn load_globs(dir: &Path, from: i64, to: i64, globs: &[&str]) -> Result<Data> {
        let all = jitterscope_model::metrics::all();
        let pats: Vec<Pattern> = globs.iter().map(|s| Pattern::new(s)).collect();
        let (proc_pats, host_pats): (Vec<Pattern>, Vec<Pattern>) =
            pats.into_iter().partition(|p| {
                jitterscope_model::metrics::parts_for(std::slice::from_ref(p))
                    .contains(Parts::PROCESSES)
            });
        let proc_sel = if proc_pats.is_empty() {
            Selection::of(&[])
        } else {
            Selection::new(all, &proc_pats)
        };
        let host_sel = if host_pats.is_empty() {
            Selection::of(&[])
        } else {
            Selection::new(all, &host_pats)
        };
        Self::load_with(dir, from, to, 0, &host_sel, &proc_sel, false)
    }

    fn load_with(
        dir: &Path,
        from: i64,
        to: i64,
        lookback_ns: i64,
        host_sel: &Selection,
        proc_sel: &Selection,
        detail: bool,
    ) -> Result<Data> {
        let reader = SampleReader::open(dir)
            .with_context(|| format!("cannot open store {}", dir.display()))?;
        // Series computed from the process table are evaluated on a subsample: decoding 500
        // processes per sample was nearly all the time of diagnosing an hour. Rates then span
        // the subsample's interval (derive uses the two samples' monotonic times), and
        // `Stats::sum` integrates over each point's interval, so totals stay totals.
        let mut host_parts = host_sel
            .parts()
            .union(proc_sel.parts().without(Parts::PROCESSES));
        if detail {
            // The cgroup records carry the containers' names.
            host_parts = host_parts.union(Parts::CGROUPS);
        }
        let lo = from.saturating_sub(lookback_ns);
        let stride = (to.saturating_sub(from) / PROCESS_POINTS).max(1_000_000_000);
        let base_stride = (lookback_ns / BASELINE_PROCESS_POINTS).max(stride);
        let mut d = Data {
            asked: Some((from, to)),
            ..Default::default()
        };
        let mut win = Window::new();
        let (mut host_series, mut proc_series) = (Builder::default(), Builder::default());
        let mut prev: Option<Sample> = None;
        let mut prev_procs: Option<Sample> = None;
        let mut next_procs = i64::MIN;
        let mut started = false;
        // One sample before the range so its first sample has rates. Process tables are in
        // the detail lane; when no process series or detail is wanted, it is not read at all.
        let with_procs =
            |ts: i64, next: i64| (!proc_sel.is_empty() || (detail && ts > from)) && ts >= next;
        let mut samples = reader.samples_lanes(
            lo.saturating_sub(PREV_LOOKBACK_NS),
            to,
            host_parts,
            !proc_sel.is_empty() || detail,
        )?;
        loop {
            let next = next_procs;
            let Some(sample) = samples.next_with(|ts| {
                let mut parts = host_parts;
                if with_procs(ts, next) {
                    parts = parts.union(Parts::PROCESSES);
                    if detail && ts > from {
                        parts = parts.union(Parts::PROFILE);
                    }
                }
                parts
            }) else {
                break;
            };
            let in_window = sample.ts_ns > from;
            if in_window && sample.ts_ns <= to {
                for c in sample.cgroups.iter().flatten() {
                    if c.identity.name.is_some() && !d.containers.contains_key(&c.path) {
                        d.containers.insert(c.path.clone(), c.identity.clone());
                    }
                }
                let lookups = sample.tracers.as_ref().and_then(|t| t.lookups.as_ref());
                for p in lookups.iter().flat_map(|l| &l.patterns) {
                    let comms = d.lookup_comms.entry(p.pattern.clone()).or_default();
                    comms.extend(p.comms.iter().cloned());
                }
                for k in sample.oom_kills.iter().flatten() {
                    // The log's clock counts from boot like the sample's monotonic one; a
                    // report is read in the interval after it, so anything further off means
                    // the clocks disagree, and the sample's time is the best there is.
                    let ago = sample.mono_ns as i64 - (k.at_usec as i64).saturating_mul(1000);
                    let at = if k.at_usec > 0
                        && (0..=2 * sample.interval_ns.max(1_000_000_000) as i64).contains(&ago)
                    {
                        sample.ts_ns - ago
                    } else {
                        sample.ts_ns
                    };
                    d.oom_kills.push((at, k.clone()));
                }
            }
            let procs_here = with_procs(sample.ts_ns, next);
            if sample.ts_ns > lo {
                if let Some(p) = prev.as_ref() {
                    let idx = d.ts.len() as u32;
                    if in_window && !started {
                        d.start = d.ts.len();
                        started = true;
                    }
                    d.ts.push(sample.ts_ns);
                    let secs = |a: &Sample| sample.mono_ns.saturating_sub(a.mono_ns) as f64 / 1e9;
                    d.spans.push((
                        secs(p),
                        match (procs_here, prev_procs.as_ref()) {
                            (true, Some(pp)) => secs(pp),
                            _ => 0.0,
                        },
                    ));
                    if !host_sel.is_empty() {
                        d.add_series(&sample, p, host_sel, idx, &mut host_series);
                    }
                    if procs_here {
                        if let (Some(pp), false) = (prev_procs.as_ref(), proc_sel.is_empty()) {
                            d.add_series(&sample, pp, proc_sel, idx, &mut proc_series);
                        }
                        if in_window && detail {
                            d.absorb(&sample, &mut win);
                        }
                    }
                }
            }
            if let Some(pid) = sample.recorder.as_ref().map(|r| r.pid).filter(|&p| p != 0) {
                d.recorder_pids.insert(pid);
            }
            if d.kernel.is_empty() {
                d.kernel = sample.host.kernel.clone();
                d.boot_id = sample.host.boot_id.clone();
                d.ncpu = sample.host.ncpu;
            }
            if procs_here {
                // The baseline's spacing up to the window, whose first process point then
                // comes at its start.
                let step = if sample.ts_ns > from {
                    stride
                } else {
                    base_stride
                };
                next_procs =
                    sample
                        .ts_ns
                        .saturating_add(step - step / 10)
                        .min(if sample.ts_ns > from {
                            i64::MAX
                        } else {
                            from + 1
                        });
                prev_procs = Some(sample.clone());
            }
            prev = Some(sample);
        }
        d.damage = samples.damage();
        host_series.finish(&mut d);
        proc_series.finish(&mut d);
        if !started {
            d.start = d.ts.len();
        }
        let named = win.resolve(&mut NoFiles);
        d.profile_samples = named.total;
        let (kernel, _) = named.hottest(15);
        d.kernel_hot = kernel
            .into_iter()
            .filter(|h| h.func.space == Space::Kernel && h.self_samples > 0)
            .map(|h| HotFn {
                name: h.func.name.to_string(),
                self_pct: h.self_samples as f64 * 100.0 / named.total.max(1) as f64,
            })
            .collect();
        Ok(d)
    }

    /// Evaluates `sel` on `cur` against `prev` and appends the values at index `idx`.
    fn add_series(
        &mut self,
        cur: &Sample,
        prev: &Sample,
        sel: &Selection,
        idx: u32,
        b: &mut Builder,
    ) {
        b.begin();
        sel.for_each(cur, Some(prev), |def, labels, name, v| {
            if let Some(v) = v.filter(|v| v.is_finite()) {
                b.push(def, labels, name, idx, v);
            }
        });
    }

    /// Appends the value of series `name` (of `def`, with `labels`) at sample `idx`; the
    /// series is built only the first time it is seen. (A store's samples go through a
    /// [`Builder`] instead.)
    pub fn push_point(
        &mut self,
        def: &'static MetricDef,
        labels: &[&str],
        name: &str,
        idx: u32,
        v: f64,
    ) {
        match self.series.get_mut(name) {
            Some(s) => s.points.push((idx, v)),
            None => {
                let mut s = Series::new(def, labels);
                s.points.push((idx, v));
                self.series.insert(name.to_string(), s);
            }
        }
    }

    /// Appends a value of the series of `def` with `labels` (tests and callers that build
    /// data by hand).
    pub fn push(&mut self, def: &'static MetricDef, labels: &[&str], idx: u32, v: f64) {
        let name = def.series_name(labels);
        self.push_point(def, labels, &name, idx, v);
    }

    /// Processes, libraries and kernel stacks of one window sample.
    fn absorb(&mut self, s: &Sample, win: &mut Window) {
        let bound = V1Bound::of(
            s.processes
                .iter()
                .flatten()
                .filter_map(|p| p.cgroups.as_deref()),
        );
        for p in s.processes.iter().flatten() {
            let e = self.procs.entry(p.stat.pid).or_default();
            e.comm.clone_from(&p.stat.comm);
            e.ppid = p.stat.ppid;
            e.starttime = p.stat.starttime_ticks;
            if e.cmdline.is_empty() {
                e.cmdline = p.cmdline.replace('\0', " ").trim().to_string();
            }
            // Stores recorded before issue 18 hold an exited process's v1 paths as "/" (what the
            // kernel shows for an exiting task): the cgroups it ran in stand.
            let ran_in = e.cgroup.is_some() || e.memory_cgroup.is_some();
            if let Some(c) = p.cgroups.as_ref().filter(|_| !(p.stat.exited() && ran_in)) {
                let [cpu, memory, io] = bound.paths(c);
                for (slot, path) in [
                    (&mut e.cgroup, cpu),
                    (&mut e.memory_cgroup, memory),
                    (&mut e.io_cgroup, io),
                ] {
                    if let Some(path) = path {
                        *slot = Some(path.to_string());
                    }
                }
            }
        }
        if let Some(prof) = &s.profile {
            win.add(
                prof,
                &Filter {
                    kernel_only: true,
                    skip_idle: true,
                    ..Default::default()
                },
            );
            for st in &prof.stacks {
                for &f in &st.frames {
                    let Some(fr) = prof.frame(f) else { continue };
                    if fr.kind != FrameKind::User {
                        continue;
                    }
                    if let Some(m) = prof.module(fr.module) {
                        let path = prof.str(m.path);
                        if !path.is_empty() {
                            let set = self.modules.entry(st.pid).or_default();
                            if !set.contains(path) {
                                set.insert(path.to_string());
                            }
                        }
                    }
                }
            }
        }
    }

    /// `/proc/<pid>/<file>` of the recorded process, if it still runs on this host (same boot,
    /// same pid and start time): live files may add what the recording lacks, but a recycled
    /// pid or another host's recording must not be read as the recorded process.
    pub fn live_file(&self, pid: u32, file: &str) -> Option<String> {
        let p = self.procs.get(&pid)?;
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        if self.boot_id.is_empty() || boot.trim() != self.boot_id {
            return None;
        }
        let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
        let start = jitterscope_sources::process::parse_pid_stat(&stat)
            .ok()?
            .starttime_ticks;
        if start != p.starttime {
            return None;
        }
        std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()
    }

    /// Time of sample `i`.
    pub fn at(&self, i: u32) -> i64 {
        self.ts.get(i as usize).copied().unwrap_or(0)
    }

    /// Window start and end times (the first and last sample of the window).
    pub fn span(&self) -> (i64, i64) {
        (
            self.ts.get(self.start).copied().unwrap_or(0),
            self.ts.last().copied().unwrap_or(0),
        )
    }

    /// Seconds the window's values cover: each sample's rates span the time since the sample
    /// before it, so a window of n samples one second apart covers n seconds.
    pub fn window_seconds(&self) -> f64 {
        if self.spans.len() == self.ts.len() && !self.spans.is_empty() {
            return self.spans[self.start..].iter().map(|s| s.0).sum();
        }
        match (self.start.checked_sub(1), self.ts.last()) {
            (Some(b), Some(&l)) => (l - self.ts[b]) as f64 / 1e9,
            _ => self.window_len() as f64,
        }
    }

    /// Samples in the window.
    pub fn window_len(&self) -> usize {
        self.ts.len() - self.start
    }

    /// The kernel release of the recorded host, parsed.
    pub fn kernel_version(&self) -> Option<KernelVersion> {
        parse_osrelease(self.kernel.as_bytes()).ok()
    }

    /// Every series of metric `def`.
    pub fn each(&self, def: &'static MetricDef) -> impl Iterator<Item = &Series> {
        let prefix = def.literal_prefix();
        self.series
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(move |(k, _)| k.starts_with(prefix))
            .map(|(_, s)| s)
            .filter(move |s| s.def == def)
    }

    /// The series of `def` with placeholder values `labels`.
    pub fn get(&self, def: &'static MetricDef, labels: &[&str]) -> Option<&Series> {
        self.series.get(&def.series_name(labels))
    }

    /// Statistics of the series of `def` with `labels` (all zero when absent).
    pub fn stats(&self, def: &'static MetricDef, labels: &[&str]) -> Stats {
        self.get(def, labels)
            .map(|s| self.stats_of(s))
            .unwrap_or_default()
    }

    /// Statistics of a series.
    pub fn stats_of(&self, s: &Series) -> Stats {
        let start = self.start as u32;
        let mut base: Vec<f64> = Vec::new();
        let mut st = Stats::default();
        let mut first = true;
        let mut last_t: Option<i64> = None;
        let procs = s.def.parts().contains(Parts::PROCESSES);
        for &(i, v) in &s.points {
            // Each point stands for the time its rate covers, so a rate sums to a count whether
            // the series has a point every second, every minute (process series are subsampled
            // over long windows) or only in the seconds something happened (a tracer's entry
            // of a process that moved). Without recorded spans: the time since the series'
            // previous point, 1 s for its first.
            let t = self.at(i);
            let dt = match self.spans.get(i as usize) {
                Some(&(host, proc)) => {
                    if procs {
                        proc
                    } else {
                        host
                    }
                }
                None => last_t.map_or(1.0, |l| (t - l) as f64 / 1e9),
            }
            .clamp(0.0, 300.0);
            last_t = Some(t);
            if i < start {
                base.push(v);
                continue;
            }
            if first {
                st.first = v;
                st.max = v;
                first = false;
            }
            st.n += 1;
            st.max = st.max.max(v);
            st.sum += v * dt;
            st.covered_s += dt;
            st.last = v;
        }
        if st.n > 0 {
            st.mean = st.sum / st.n as f64;
        }
        st.base_n = base.len();
        (st.base_median, st.base_mad) = median_mad(&mut base);
        st
    }

    /// The time-weighted average of a series over the seconds it covers: `sum` over
    /// `covered_s`. Unlike `Stats::mean` (the sum over the number of points), it is a rate's
    /// level whatever the spacing of the points (process series are read at spaced samples
    /// over long windows), and a process that started in the window is not diluted by the
    /// seconds before it.
    pub fn avg(st: &Stats) -> f64 {
        if st.covered_s > 0.0 {
            st.sum / st.covered_s
        } else {
            0.0
        }
    }

    /// First window time at which series `s` reached `threshold`.
    pub fn onset(&self, s: &Series, threshold: f64) -> Option<i64> {
        let start = self.start as u32;
        s.points
            .iter()
            .find_map(|&(i, v)| (i >= start && v >= threshold).then(|| self.at(i)))
    }

    /// First window time at which series `s` rose clearly above its baseline: past
    /// `median + 4 x MAD` of the baseline and past `floor`.
    pub fn onset_over_baseline(&self, s: &Series, floor: f64) -> Option<i64> {
        let st = self.stats_of(s);
        let t = (st.base_median + 4.0 * st.base_mad).max(floor);
        self.onset(s, t)
    }

    /// Values of series `s` in the window, by sample (None where absent).
    pub fn window_values(&self, s: Option<&Series>) -> Vec<Option<f64>> {
        let mut out = vec![None; self.window_len()];
        if let Some(s) = s {
            for &(i, v) in &s.points {
                if let Some(k) = (i as usize).checked_sub(self.start) {
                    if let Some(slot) = out.get_mut(k) {
                        *slot = Some(v);
                    }
                }
            }
        }
        out
    }
}

/// Which controllers the host binds to a v1 hierarchy, as one sample's processes show it.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct V1Bound {
    cpu: bool,
    memory: bool,
    io: bool,
}

impl V1Bound {
    fn of<'a>(paths: impl Iterator<Item = &'a ProcCgroupPaths>) -> Self {
        paths.fold(V1Bound::default(), |b, c| V1Bound {
            cpu: b.cpu || c.cpu.is_some(),
            memory: b.memory || c.memory.is_some(),
            io: b.io || c.blkio.is_some(),
        })
    }

    /// A process's CPU, memory and I/O cgroups. Where the host binds a controller to v1 and the
    /// record has no v1 path for it, the cgroup is unknown, not the v2 one: the recorder keeps
    /// no v1 paths for a task first seen exiting (they read "/"), and on a hybrid host whose
    /// controllers are all on v1 its v2 path is the root. A short-lived certutil seen only as
    /// it exited was so charged to "/" beside the lab's soak.
    fn paths(self, c: &ProcCgroupPaths) -> [Option<&str>; 3] {
        fn pick<'c>(bound: bool, v1: &Option<String>, either: Option<&'c str>) -> Option<&'c str> {
            if bound && v1.is_none() {
                None
            } else {
                either
            }
        }
        [
            pick(self.cpu, &c.cpu, c.for_cpu()),
            pick(self.memory, &c.memory, c.for_memory()),
            pick(self.io, &c.blkio, c.for_io()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jitterscope_model::metrics::{cgroup, cpu, process};

    #[test]
    fn a_process_without_v1_paths_on_a_v1_host_has_no_cgroup_rather_than_the_v2_root() {
        let running = ProcCgroupPaths {
            cpu: Some("/jitterscope-lab/nss-probe".into()),
            cpuacct: Some("/jitterscope-lab/nss-probe".into()),
            memory: Some("/jitterscope-lab/nss-probe".into()),
            blkio: None,
            v2: Some("/".into()),
        };
        // First seen exiting: the recorder dropped its v1 paths.
        let exiting = ProcCgroupPaths {
            v2: Some("/".into()),
            ..Default::default()
        };
        let hybrid = V1Bound::of([&running, &exiting].into_iter());
        assert_eq!(
            hybrid,
            V1Bound {
                cpu: true,
                memory: true,
                io: false
            }
        );
        assert_eq!(
            hybrid.paths(&running),
            [
                Some("/jitterscope-lab/nss-probe"),
                Some("/jitterscope-lab/nss-probe"),
                Some("/")
            ]
        );
        assert_eq!(hybrid.paths(&exiting), [None, None, Some("/")]);
        // On a v2-only host the v2 path is every controller's.
        let v2 = ProcCgroupPaths {
            v2: Some("/lab".into()),
            ..Default::default()
        };
        let unified = V1Bound::of([&v2, &exiting].into_iter());
        assert_eq!(unified.paths(&v2), [Some("/lab"); 3]);
        assert_eq!(unified.paths(&exiting), [Some("/"); 3]);
    }

    fn data(points: &[(u32, f64)], start: usize, n: usize) -> Data {
        let mut d = Data::seconds(n, start);
        for &(i, v) in points {
            d.push(&cpu::SYS_PCT, &[], i, v);
        }
        d
    }

    #[test]
    fn stats_split_baseline_and_window() {
        let d = data(
            &[
                (0, 1.0),
                (1, 3.0),
                (2, 2.0),
                (3, 10.0),
                (4, 30.0),
                (5, 20.0),
            ],
            3,
            6,
        );
        let s = d.stats(&cpu::SYS_PCT, &[]);
        assert_eq!((s.n, s.max, s.mean, s.sum), (3, 30.0, 20.0, 60.0));
        assert_eq!((s.first, s.last), (10.0, 20.0));
        assert_eq!((s.base_n, s.base_median, s.base_mad), (3, 2.0, 1.0));
        let x = d.get(&cpu::SYS_PCT, &[]).unwrap();
        assert_eq!(d.onset(x, 25.0), Some(4_000_000_000));
        // median 2 + 4 x MAD 1 = 6: the first window sample already exceeds it.
        assert_eq!(d.onset_over_baseline(x, 0.0), Some(3_000_000_000));
        assert_eq!(d.onset_over_baseline(x, 100.0), None);
        assert_eq!(
            d.window_values(Some(x)),
            vec![Some(10.0), Some(30.0), Some(20.0)]
        );
        assert_eq!(d.stats(&cpu::USR_PCT, &[]), Stats::default());
    }

    #[test]
    fn sums_weigh_each_point_by_the_time_its_rate_covers() {
        // A tracer series with points only where something happened: 64/s at samples 4 and 7,
        // each covering one second, is 128 events; not 64 + 3 x 64.
        let mut d = data(&[], 0, 8);
        d.spans = vec![(1.0, 0.0); 8];
        d.push(&cpu::SYS_PCT, &[], 4, 64.0);
        d.push(&cpu::SYS_PCT, &[], 7, 64.0);
        assert_eq!(d.stats(&cpu::SYS_PCT, &[]).sum, 128.0);
        // A process series evaluated every 30 s covers 30 s a point.
        d.spans[3] = (1.0, 30.0);
        d.push(&process::PROC_CPU_PCT, &["1", "x"], 3, 2.0);
        assert_eq!(d.stats(&process::PROC_CPU_PCT, &["1", "x"]).sum, 60.0);
        // Without spans (the signals lane), the gap since the previous point stands in.
        d.spans.clear();
        assert_eq!(d.stats(&cpu::SYS_PCT, &[]).sum, 64.0 + 3.0 * 64.0);
    }

    #[test]
    fn process_series_know_their_pid_and_comm_with_dots() {
        let mut d = data(&[], 0, 1);
        d.push(&process::PROC_RSS_BYTES, &["42", "python3.11"], 0, 1.0);
        let s = d.each(&process::PROC_RSS_BYTES).next().unwrap();
        assert_eq!(s.pid_comm(), Some((42, "python3.11")));
        assert_eq!(s.name(), "proc.42.python3.11.rss_bytes");
    }

    #[test]
    fn each_takes_one_metric_of_those_sharing_a_prefix() {
        let mut d = data(&[(0, 1.0)], 0, 1);
        d.push(&cgroup::CPU_THROTTLED_PCT, &["/a"], 0, 1.0);
        d.push(&cgroup::CPU_USAGE_PCT, &["/a"], 0, 1.0);
        d.push(&cgroup::CPU_USAGE_PCT, &["/b.cpu.throttled_pct"], 0, 1.0);
        let m: Vec<String> = d
            .each(&cgroup::CPU_THROTTLED_PCT)
            .map(|s| s.name())
            .collect();
        assert_eq!(m, ["cgroup./a.cpu.throttled_pct"]);
    }
}
