//! The signals lane: the key jitter series the recorder derives from every sample, and the
//! episode marks its online detector writes beside them.
//!
//! [`SIGNALS`] is the one catalogue of watched signals: the series (a metric handle, with label
//! globs where one instance of a metric is meant), the episode kind it raises and its floor.
//! Episode detection (`jitterscope_diagnose::events`), the on-demand tracers (whose
//! symptoms are two of these signals) and the web UI's fast path all read it from here. Besides
//! them the lane holds the RSS of the [`RSS_TOP`] largest processes of each sample (the
//! recorder's own left out), which leak trends are detected on, and the few [`SHOWN`] series
//! the web UI's timelines draw besides the signals.
//!
//! A record of the lane is [`SignalRecord`]: values by series name and the marks, MessagePack
//! with field names behind a codec byte, as samples are.

use serde::{Deserialize, Serialize};

use crate::codec::Parts;
use crate::derive::Selection;
use crate::metrics::{cgroup, cpu, irq, mem, process, psi, tracer};
use crate::registry::{MetricDef, Sel, Select};
use crate::sample::Sample;

/// A signal watched for episodes.
#[derive(Debug)]
pub struct Signal {
    /// Episode kind, in ids (`tlb-storm`).
    pub kind: &'static str,
    /// What an episode of it is, for people.
    pub what: &'static str,
    /// The metric.
    pub metric: &'static MetricDef,
    /// Label globs, one per placeholder (empty: every series of the metric, one episode stream
    /// each, e.g. per cgroup).
    pub labels: &'static [&'static str],
    /// Below this, never an episode.
    pub floor: f64,
}

// Kinds are unique (a test checks): a signal is known by its kind.
impl PartialEq for Signal {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind
    }
}

impl Signal {
    /// Its series as a selection.
    pub fn select(&self) -> Select {
        Select::labels(self.metric, self.labels)
    }

    /// Whether series `labels` of metric `def` is this signal's. (Called for every value the
    /// recorder derives: no allocation.)
    pub fn matches(&self, def: &MetricDef, labels: &[&str]) -> bool {
        def == self.metric
            && self
                .labels
                .iter()
                .zip(labels)
                .all(|(g, l)| crate::glob::matches(g, l))
    }
}

/// System CPU.
pub static SYS_CPU: Signal = Signal {
    kind: "sys-cpu",
    what: "system CPU spike",
    metric: &cpu::SYS_PCT,
    labels: &[],
    floor: 20.0,
};
/// Run-queue latency p99 (runqlat tracer).
pub static RUNQ_LATENCY: Signal = Signal {
    kind: "runq-latency",
    what: "run-queue latency spike (p99)",
    metric: &tracer::RUNQLAT_P99_USEC,
    labels: &[],
    floor: 5000.0,
};
/// Throttled periods, per cgroup.
pub static THROTTLING: Signal = Signal {
    kind: "throttling",
    what: "CFS throttling burst",
    metric: &cgroup::CPU_THROTTLED_PCT,
    labels: &[],
    floor: 20.0,
};
/// Reclaim stalls (reclaim tracer).
pub static RECLAIM_STALLS: Signal = Signal {
    kind: "reclaim-stalls",
    what: "reclaim stall burst",
    metric: &tracer::RECLAIM_STALLS_PER_S,
    labels: &[],
    floor: 1.0,
};
/// Direct-reclaim entries (vmstat).
pub static ALLOCSTALL: Signal = Signal {
    kind: "allocstall",
    what: "direct-reclaim entries",
    metric: &mem::RECLAIM_ALLOCSTALL_PER_S,
    labels: &[],
    floor: 1.0,
};
/// TLB-shootdown IPIs received. Also the symptom that attaches the `tlb` and `madvise` tracers:
/// case 4 ran at ~2,000 IPIs/s.
pub static TLB_STORM: Signal = Signal {
    kind: "tlb-storm",
    what: "TLB-shootdown IPI storm",
    metric: &irq::TLB_PER_S,
    labels: &[],
    floor: 1000.0,
};
/// Memory pressure (PSI some).
pub static MEMORY_PRESSURE: Signal = Signal {
    kind: "memory-pressure",
    what: "memory pressure spike (PSI some)",
    metric: &psi::SOME_PCT,
    labels: &["memory"],
    floor: 5.0,
};
/// Tasks in D state.
pub static D_STATE: Signal = Signal {
    kind: "d-state",
    what: "surge of tasks blocked on I/O (D state)",
    metric: &cpu::SCHED_PROCS_BLOCKED,
    labels: &[],
    floor: 4.0,
};
/// Negative dentries created per second. Also the symptom that attaches the `lookups` tracer:
/// a quiet host makes a few, NSS probing in case 1 made thousands per certutil run.
pub static NEGATIVE_DENTRIES: Signal = Signal {
    kind: "negative-dentries",
    what: "negative dentries growing",
    metric: &mem::DENTRY_NEGATIVE_GROWTH_PER_S,
    labels: &[],
    floor: 1000.0,
};

/// Mean run-queue wait per timeslice, every thread: not an episode signal, the symptom that
/// attaches the `runqlat` tracer, whose programs run at every wake-up and context switch (+29%
/// of a context-switch storm's CPU time, measured). Its floor follows from the run-queue rule:
/// a second whose p99 is at least 5 ms (a log2 upper edge of 8,192 us, so waits of 4,096 us or
/// more) has at least 1% of its waits that long, so a mean per wait of at least 41 us over the
/// same waits. 20 us leaves half of that for waits the two count differently (a thread that
/// exits within the second). Measured on this 2-CPU VM: 0.4 us in a context-switch storm, ~20 us
/// quiet, ~70 us under bench/busy.sh, 3,450 us with two hogs pinned to one CPU.
pub static RUNQ_WAIT: Signal = Signal {
    kind: "runq-wait",
    what: "mean run-queue wait per timeslice",
    metric: &cpu::SCHED_WAIT_PER_SLICE_USEC,
    labels: &[],
    floor: 20.0,
};

/// OOM kills on the host. Any kill is an incident: the floor is 0, so one kill in a sample is
/// an episode.
pub static OOM_KILL: Signal = Signal {
    kind: "oom-kill",
    what: "OOM kills (vmstat oom_kill)",
    metric: &mem::RECLAIM_OOM_KILL_PER_S,
    labels: &[],
    floor: 0.0,
};

/// Signals that only attach a tracer, never raise an episode.
pub static DEMAND_ONLY: &[&Signal] = &[&RUNQ_WAIT];

/// The watched signals.
pub static SIGNALS: &[&Signal] = &[
    &SYS_CPU,
    &RUNQ_LATENCY,
    &THROTTLING,
    &RECLAIM_STALLS,
    &ALLOCSTALL,
    &TLB_STORM,
    &MEMORY_PRESSURE,
    &D_STATE,
    &NEGATIVE_DENTRIES,
    &OOM_KILL,
];

/// Series the lane keeps for the web UI's timelines, watched by no detector. With the signals
/// they make every timeline that is not per process or per cgroup readable from the lane: an
/// hour of `cpu.usr_pct` decoded from the samples took 240 ms, from the lane 13 ms.
pub static SHOWN: &[Sel] = &[
    Sel::all(&cpu::USR_PCT),
    Sel::of(&psi::SOME_PCT, &["cpu"]),
    Sel::of(&psi::SOME_PCT, &["io"]),
];

/// What the lane's records hold, written in each ([`SignalRecord::version`]): 0, the signals
/// and the RSS top; 1, also [`SHOWN`]. Raised whenever `SHOWN` grows, so a reader knows a
/// record without a series did not have it rather than was written before it was kept.
pub const LANE_VERSION: u8 = 1;

/// Whether series `labels` of `def` is one the lane keeps for the timelines only.
pub fn shown(def: &MetricDef, labels: &[&str]) -> bool {
    SHOWN.iter().any(|s| {
        s.def == def
            && s.labels
                .iter()
                .zip(labels)
                .all(|(g, l)| crate::glob::matches(g, l))
    })
}

/// The metric of leak trends, kept for the [`RSS_TOP`] largest processes of each sample.
pub static RSS: &MetricDef = &process::PROC_RSS_BYTES;
/// Processes whose RSS the lane keeps per sample.
pub const RSS_TOP: usize = 10;

/// The signal of a series, or `None` (the RSS series of leak trends, or no signal at all).
pub fn signal_of(def: &MetricDef, labels: &[&str]) -> Option<&'static Signal> {
    SIGNALS.iter().copied().find(|s| s.matches(def, labels))
}

/// What a lane series is: a watched signal's or an RSS series of leak trends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Watched {
    /// A spike signal.
    Spike(&'static Signal),
    /// The RSS of one of the largest processes.
    Rss,
    /// Kept for the timelines ([`SHOWN`]).
    Shown,
}

/// One derived value of the lane.
#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    /// The series name.
    pub series: String,
    /// Its value (finite).
    pub value: f64,
    /// What it is.
    pub watched: Watched,
}

/// Derives the lane's values of a sample: every series of [`SIGNALS`] and of [`SHOWN`], and the
/// RSS of the [`RSS_TOP`] largest processes other than the recorder (`RecorderStats::pid`). The
/// recorder and the fallback for stores without the lane both call this, so the lane holds
/// exactly what would be derived from the samples.
pub struct Derive {
    spikes: Selection,
    rss: Selection,
    shown: Selection,
}

impl Default for Derive {
    fn default() -> Self {
        Self::new()
    }
}

impl Derive {
    /// Prepares the selections.
    pub fn new() -> Self {
        let sel: Vec<Select> = SIGNALS.iter().map(|s| s.select()).collect();
        Derive {
            spikes: Selection::of(&sel),
            rss: Selection::of(&[Select::all(RSS)]),
            shown: Selection::of(&SHOWN.iter().map(Sel::select).collect::<Vec<_>>()),
        }
    }

    /// The sample parts [`values`](Derive::values) reads.
    pub fn parts(&self) -> Parts {
        self.spikes
            .parts()
            .union(self.rss.parts())
            .union(self.shown.parts())
    }

    /// The lane values of `cur` (rates against `prev`), finite values only, into `out`.
    pub fn values(&self, cur: &Sample, prev: &Sample, out: &mut Vec<Value>) {
        out.clear();
        self.spikes
            .for_each(cur, Some(prev), |def, labels, name, v| {
                let (Some(v), Some(sig)) = (v.filter(|v| v.is_finite()), signal_of(def, labels))
                else {
                    return;
                };
                out.push(Value {
                    series: name.to_string(),
                    value: v,
                    watched: Watched::Spike(sig),
                });
            });
        self.shown.for_each(cur, Some(prev), |_, _, name, v| {
            if let Some(v) = v.filter(|v| v.is_finite()) {
                out.push(Value {
                    series: name.to_string(),
                    value: v,
                    watched: Watched::Shown,
                });
            }
        });
        let mut rss: Vec<Value> = Vec::new();
        // The recorder's own memory is the agent's budget (`self.rss_bytes`), not a host
        // process that may leak: it takes no place in the top, so no leak trend is found on it.
        let own = cur
            .recorder
            .as_ref()
            .map(|r| r.pid)
            .filter(|&p| p != 0)
            .map(|p| p.to_string());
        self.rss.for_each(cur, Some(prev), |_, labels, name, v| {
            if own.is_some() && labels.first().copied() == own.as_deref() {
                return;
            }
            if let Some(v) = v.filter(|v| v.is_finite()) {
                rss.push(Value {
                    series: name.to_string(),
                    value: v,
                    watched: Watched::Rss,
                });
            }
        });
        // Largest first; equal sizes by name, so the same processes are kept every second.
        rss.sort_by(|a, b| {
            b.value
                .total_cmp(&a.value)
                .then_with(|| a.series.cmp(&b.series))
        });
        rss.truncate(RSS_TOP);
        out.extend(rss);
    }
}

/// Whether an episode mark opens or closes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MarkState {
    /// The episode's first up sample.
    Start,
    /// The episode ended (written a few samples after its last up sample).
    End,
}

/// An episode mark the recorder wrote as it happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mark {
    /// Episode kind.
    pub kind: String,
    /// The series.
    pub series: String,
    /// Start or end.
    pub state: MarkState,
    /// The episode so far.
    pub from_ns: i64,
    /// Its last up sample so far.
    pub to_ns: i64,
    /// Its largest value so far.
    pub peak: f64,
    /// Its baseline.
    pub baseline: f64,
    /// Its threshold.
    pub threshold: f64,
}

/// One sample's record in the signals lane.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SignalRecord {
    /// The sample's signal values.
    pub values: Vec<(String, f64)>,
    /// Episodes that started or ended at this sample.
    pub marks: Vec<Mark>,
    /// [`LANE_VERSION`] when written (0 in records written before it was kept).
    pub version: u8,
}

/// Codec byte of signals records (MessagePack with field names, as samples).
pub const SIGNALS_CODEC: u8 = 1;

impl SignalRecord {
    /// Encodes into `out` (cleared first).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        out.push(SIGNALS_CODEC);
        let mut ser = rmp_serde::Serializer::new(&mut *out).with_struct_map();
        // Strings and floats only: cannot fail.
        Serialize::serialize(self, &mut ser).expect("signals record encodes");
    }

    /// Decodes a record; `None` for anything else.
    pub fn decode(b: &[u8]) -> Option<Self> {
        match b.split_first() {
            Some((&SIGNALS_CODEC, rest)) => rmp_serde::from_slice(rest).ok(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_series_belong_to_their_signal() {
        let of = |name: &str| {
            let defs: Vec<&MetricDef> = SIGNALS.iter().map(|s| s.metric).collect();
            let (d, l) = crate::registry::parse_series(&defs, name)?;
            let l: Vec<&str> = l.iter().map(String::as_str).collect();
            signal_of(d, &l).map(|s| s.kind)
        };
        assert_eq!(of("irq.tlb_per_s"), Some("tlb-storm"));
        assert_eq!(of("psi.memory.some_pct"), Some("memory-pressure"));
        assert_eq!(
            of("psi.io.some_pct"),
            None,
            "only memory pressure is watched"
        );
        assert_eq!(of("cgroup./a.b/c.cpu.throttled_pct"), Some("throttling"));
        assert_eq!(of("cpu.usr_pct"), None);
        // Every signal's labels fit its metric (Select::labels panics otherwise).
        for s in SIGNALS {
            let _ = s.select();
        }
    }

    #[test]
    fn kinds_are_unique() {
        jitterscope_testkit::assert_unique(
            SIGNALS.iter().chain(DEMAND_ONLY).map(|s| s.kind),
            "signal kinds",
        );
    }

    #[test]
    fn records_round_trip_and_garbage_is_refused() {
        let r = SignalRecord {
            values: vec![("irq.tlb_per_s".into(), 3000.0)],
            marks: vec![Mark {
                kind: "tlb-storm".into(),
                series: "irq.tlb_per_s".into(),
                state: MarkState::Start,
                from_ns: 1,
                to_ns: 1,
                peak: 3000.0,
                baseline: 1.5,
                threshold: 1000.0,
            }],
            version: LANE_VERSION,
        };
        let mut b = Vec::new();
        r.encode(&mut b);
        assert_eq!(SignalRecord::decode(&b), Some(r));
        assert_eq!(SignalRecord::decode(&[]), None);
        assert_eq!(SignalRecord::decode(&[9, 0x80]), None);
    }

    #[test]
    fn a_record_of_the_previous_release_reads_as_version_0() {
        // What the recorder wrote before `version` existed: values and marks only.
        #[derive(Serialize)]
        struct Before {
            values: Vec<(String, f64)>,
            marks: Vec<Mark>,
        }
        let mut b = vec![SIGNALS_CODEC];
        let before = Before {
            values: vec![("cpu.sys_pct".into(), 12.5)],
            marks: Vec::new(),
        };
        let mut ser = rmp_serde::Serializer::new(&mut b).with_struct_map();
        Serialize::serialize(&before, &mut ser).unwrap();
        let r = SignalRecord::decode(&b).unwrap();
        assert_eq!(r.version, 0);
        assert_eq!(r.values, before.values);
    }

    #[test]
    fn shown_series_are_the_timelines_not_the_signals() {
        assert!(shown(&cpu::USR_PCT, &[]));
        assert!(shown(&psi::SOME_PCT, &["io"]));
        assert!(!shown(&psi::SOME_PCT, &["memory"]), "a signal already");
        assert!(!shown(&cpu::SYS_PCT, &[]));
        // None is also a signal: each lane series is derived once.
        for s in SHOWN {
            for sig in SIGNALS {
                assert!(
                    !(sig.metric == s.def && sig.labels == s.labels),
                    "{} is a signal",
                    s.def.name
                );
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_decode_or_are_refused(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let mut with_codec = vec![SIGNALS_CODEC];
            with_codec.extend(&b);
            let _ = SignalRecord::decode(&with_codec);
            let _ = SignalRecord::decode(&b);
        }
    }
}
