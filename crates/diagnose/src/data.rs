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
use jitterscope_model::codec::{self, Parts};
use jitterscope_model::derive::Selection;
use jitterscope_model::glob::Pattern;
use jitterscope_model::profile::FrameKind;
use jitterscope_model::registry::{all, parts_for};
use jitterscope_model::Sample;
use jitterscope_profile::window::{Filter, NoFiles, Space, Window};
use jitterscope_store::{Reader, Record};

/// Points of the process-table series over the window (at the same spacing in the baseline).
const PROCESS_POINTS: i64 = 240;

/// One series: (sample index, value) for the samples where it had a value.
#[derive(Debug, Clone, Default)]
pub struct Series {
    /// Points in sample order.
    pub points: Vec<(u32, f64)>,
}

/// A process seen in the window.
#[derive(Debug, Clone, Default)]
pub struct Proc {
    /// Command name.
    pub comm: String,
    /// Command line (NUL-separated arguments joined by spaces).
    pub cmdline: String,
    /// Cgroup path: v1 cpu, else v2.
    pub cgroup: Option<String>,
    /// Memory cgroup path: v1 memory, else v2.
    pub memory_cgroup: Option<String>,
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
    /// Samples that could not be decoded.
    pub undecodable: u64,
}

/// Summary statistics of a series over the window and over the baseline.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stats {
    /// Window: samples with a value.
    pub n: usize,
    /// Window: largest value.
    pub max: f64,
    /// Window: mean.
    pub mean: f64,
    /// Window: each value times the seconds since the series' previous point (a per-second
    /// rate integrated: a count).
    pub sum: f64,
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

/// The median and the median absolute deviation of `v` (reordered): the robust centre and
/// spread that baselines here are built on.
pub fn median_mad(v: &mut [f64]) -> (f64, f64) {
    let m = median(v);
    let mut dev: Vec<f64> = v.iter().map(|x| (x - m).abs()).collect();
    (m, median(&mut dev))
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Parses `proc.<pid>.<comm>.<suffix>`-style names (the comm may contain dots): the pid and
/// the comm of a series named `prefix<pid>.<comm>suffix`.
pub fn pid_comm<'a>(name: &'a str, prefix: &str, suffix: &str) -> Option<(u32, &'a str)> {
    let rest = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    let (pid, comm) = rest.split_once('.')?;
    Some((pid.parse().ok()?, comm))
}

impl Data {
    /// Loads the samples in `(from - lookback, to]`: the series matching `select` (all of
    /// them when empty), and with `detail`, for the window `(from, to]`, the processes and
    /// stack samples (episode detection over a day needs neither, and skips decoding them).
    pub fn load(
        dir: &Path,
        from: i64,
        to: i64,
        lookback_ns: i64,
        select: &[&str],
        detail: bool,
    ) -> Result<Data> {
        let reader =
            Reader::open(dir).with_context(|| format!("cannot open store {}", dir.display()))?;
        let pats: Vec<Pattern> = select.iter().map(|s| Pattern::new(s)).collect();
        // Series computed from the process table are evaluated on a subsample: decoding 500
        // processes per sample was nearly all the time of diagnosing an hour. Rates then span
        // the subsample's interval (derive uses the two samples' monotonic times), and
        // `Stats::sum` integrates over each point's interval, so totals stay totals.
        let (proc_pats, host_pats): (Vec<Pattern>, Vec<Pattern>) = pats
            .into_iter()
            .partition(|p| parts_for(std::slice::from_ref(p)).contains(Parts::PROCESSES));
        let host_parts =
            parts_for(&host_pats).union(parts_for(&proc_pats).without(Parts::PROCESSES));
        let host_sel = Selection::new(all(), &host_pats);
        let proc_sel = Selection::new(all(), &proc_pats);
        let lo = from.saturating_sub(lookback_ns);
        let stride = (to.saturating_sub(from) / PROCESS_POINTS).max(1_000_000_000);
        let mut d = Data::default();
        let mut win = Window::new();
        let mut prev: Option<Sample> = None;
        let mut prev_procs: Option<Sample> = None;
        let mut next_procs = i64::MIN;
        let mut started = false;
        // One sample before the range so its first sample has rates. Process tables are in
        // the detail lane; without them (episode detection), it is not read at all.
        let range_lo = lo.saturating_sub(5_000_000_000);
        let range = if proc_pats.is_empty() && !detail {
            reader.range_main(range_lo, to)?
        } else {
            reader.range(range_lo, to)?
        };
        for rec in range {
            let rec = rec?;
            let in_window = rec.ts_ns > from;
            let with_procs =
                (!proc_pats.is_empty() || (detail && in_window)) && rec.ts_ns >= next_procs;
            let mut parts = host_parts;
            if with_procs {
                parts = parts.union(Parts::PROCESSES);
                if detail && in_window {
                    parts = parts.union(Parts::PROFILE);
                }
            }
            let Some(sample) = d.decode(&rec, parts) else {
                continue;
            };
            if sample.ts_ns > lo {
                if let Some(p) = prev.as_ref() {
                    let idx = d.ts.len() as u32;
                    if in_window && !started {
                        d.start = d.ts.len();
                        started = true;
                    }
                    d.ts.push(sample.ts_ns);
                    if !host_pats.is_empty() {
                        d.add_series(&sample, p, &host_sel, idx);
                    }
                    if with_procs {
                        // (An empty selection would mean every series.)
                        if let (Some(pp), false) = (prev_procs.as_ref(), proc_pats.is_empty()) {
                            d.add_series(&sample, pp, &proc_sel, idx);
                        }
                        if in_window && detail {
                            d.absorb(&sample, &mut win);
                        }
                    }
                }
            }
            if d.kernel.is_empty() {
                d.kernel = sample.host.kernel.clone();
                d.boot_id = sample.host.boot_id.clone();
                d.ncpu = sample.host.ncpu;
            }
            if with_procs {
                next_procs = sample.ts_ns.saturating_add(stride - stride / 10);
                prev_procs = Some(sample.clone());
            }
            prev = Some(sample);
        }
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
    fn add_series(&mut self, cur: &Sample, prev: &Sample, sel: &Selection, idx: u32) {
        sel.for_each(cur, Some(prev), |_, _, name, v| {
            if let Some(v) = v.filter(|v| v.is_finite()) {
                self.push_point(name, idx, v);
            }
        });
    }

    /// Decodes a record's `parts`, counting it in `undecodable` when it cannot be.
    pub fn decode(&mut self, rec: &Record, parts: Parts) -> Option<Sample> {
        let s = codec::decode_lanes(&rec.payload, rec.detail.as_deref(), parts).ok();
        if s.is_none() {
            self.undecodable += 1;
        }
        s
    }

    /// Appends the value of series `name` at sample `idx` (the name is copied only the first
    /// time a series is seen).
    pub fn push_point(&mut self, name: &str, idx: u32, v: f64) {
        match self.series.get_mut(name) {
            Some(s) => s.points.push((idx, v)),
            None => {
                self.series.insert(
                    name.to_string(),
                    Series {
                        points: vec![(idx, v)],
                    },
                );
            }
        }
    }

    /// Processes, libraries and kernel stacks of one window sample.
    fn absorb(&mut self, s: &Sample, win: &mut Window) {
        for p in s.processes.iter().flatten() {
            let e = self.procs.entry(p.stat.pid).or_default();
            e.comm.clone_from(&p.stat.comm);
            e.starttime = p.stat.starttime_ticks;
            if e.cmdline.is_empty() {
                e.cmdline = p.cmdline.replace('\0', " ").trim().to_string();
            }
            if let Some(c) = &p.cgroups {
                e.cgroup = c.cpu.clone().or_else(|| c.v2.clone());
                e.memory_cgroup = c.memory.clone().or_else(|| c.v2.clone());
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

    /// Samples in the window.
    pub fn window_len(&self) -> usize {
        self.ts.len() - self.start
    }

    /// Series whose names match `glob`.
    pub fn matching<'a>(&'a self, glob: &str) -> impl Iterator<Item = (&'a str, &'a Series)> {
        let p = Pattern::new(glob);
        let prefix = p.literal_prefix().to_string();
        self.series
            .range(prefix.clone()..)
            .take_while(move |(k, _)| k.starts_with(&prefix))
            .filter(move |(k, _)| p.matches(k))
            .map(|(k, v)| (k.as_str(), v))
    }

    /// Statistics of series `name` (all zero when absent).
    pub fn stats(&self, name: &str) -> Stats {
        self.series
            .get(name)
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
        for &(i, v) in &s.points {
            // Each point stands for the time since the series' previous point (1 s when it has
            // none), so a rate sums to a count whether the series has a point every second or
            // every minute (process series are subsampled over long windows).
            let t = self.at(i);
            let dt = last_t.map_or(1.0, |l| ((t - l) as f64 / 1e9).clamp(0.0, 300.0));
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
            st.last = v;
        }
        if st.n > 0 {
            st.mean = st.sum / st.n as f64;
        }
        st.base_n = base.len();
        (st.base_median, st.base_mad) = median_mad(&mut base);
        st
    }

    /// First window time at which `name` reached `threshold`.
    pub fn onset(&self, name: &str, threshold: f64) -> Option<i64> {
        let start = self.start as u32;
        self.series
            .get(name)?
            .points
            .iter()
            .find_map(|&(i, v)| (i >= start && v >= threshold).then(|| self.at(i)))
    }

    /// First window time at which `name` rose clearly above its baseline: past
    /// `median + 4 x MAD` of the baseline and past `floor`.
    pub fn onset_over_baseline(&self, name: &str, floor: f64) -> Option<i64> {
        let st = self.stats(name);
        let t = (st.base_median + 4.0 * st.base_mad).max(floor);
        self.onset(name, t)
    }

    /// Values of `name` in the window, by sample (None where absent).
    pub fn window_values(&self, name: &str) -> Vec<Option<f64>> {
        let mut out = vec![None; self.window_len()];
        if let Some(s) = self.series.get(name) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn data(points: &[(u32, f64)], start: usize, n: usize) -> Data {
        let mut d = Data {
            ts: (0..n as i64).map(|i| i * 1_000_000_000).collect(),
            start,
            ..Default::default()
        };
        d.series.insert(
            "x".into(),
            Series {
                points: points.to_vec(),
            },
        );
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
        let s = d.stats("x");
        assert_eq!((s.n, s.max, s.mean, s.sum), (3, 30.0, 20.0, 60.0));
        assert_eq!((s.first, s.last), (10.0, 20.0));
        assert_eq!((s.base_n, s.base_median, s.base_mad), (3, 2.0, 1.0));
        assert_eq!(d.onset("x", 25.0), Some(4_000_000_000));
        // median 2 + 4 x MAD 1 = 6: the first window sample already exceeds it.
        assert_eq!(d.onset_over_baseline("x", 0.0), Some(3_000_000_000));
        assert_eq!(d.onset_over_baseline("x", 100.0), None);
        assert_eq!(
            d.window_values("x"),
            vec![Some(10.0), Some(30.0), Some(20.0)]
        );
        assert_eq!(d.stats("absent"), Stats::default());
    }

    #[test]
    fn names_with_dots_in_comm() {
        assert_eq!(
            pid_comm("proc.42.python3.11.rss_bytes", "proc.", ".rss_bytes"),
            Some((42, "python3.11"))
        );
        assert_eq!(pid_comm("proc.x.y.rss_bytes", "proc.", ".rss_bytes"), None);
        assert_eq!(pid_comm("cpu.usr_pct", "proc.", ".rss_bytes"), None);
    }

    #[test]
    fn matching_uses_the_prefix_and_the_glob() {
        let mut d = data(&[(0, 1.0)], 0, 1);
        for n in [
            "cgroup./a.cpu.throttled_pct",
            "cgroup./a.cpu.usage_pct",
            "cpu.sys_pct",
        ] {
            d.series.insert(n.into(), Series::default());
        }
        let m: Vec<&str> = d
            .matching("cgroup.*.cpu.throttled_pct")
            .map(|(k, _)| k)
            .collect();
        assert_eq!(m, ["cgroup./a.cpu.throttled_pct"]);
    }
}
