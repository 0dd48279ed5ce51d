//! In-kernel tracers: BPF programs that aggregate in the kernel, read once per interval into the
//! sample's [`Tracers`] part.
//!
//! Each tracer is one `src/bpf/<name>.bpf.c` (CO-RE, classic tracepoints, BTF-typed tracepoints
//! where they add something) and one module here that loads it, reads its maps and turns the
//! kernel's cumulative counters into the interval's counts ([`delta`]). A tracer that cannot load
//! says why in one line and the others go on. Tracers with a [`Demand`] (the evidence tracers,
//! whose syscall-tracepoint fallbacks slow every system call while attached) can be kept
//! detached until their symptom shows ([`TracerCollector::start_on_demand`]).

use std::mem::MaybeUninit;
use std::time::Duration;

use jitterscope_model::collector::{Collector, Notes};
use jitterscope_model::derive::Ctx;
use jitterscope_model::sample::Sample;
use jitterscope_model::signals::Signal;
use jitterscope_model::tracers::{TracerId, Tracers};
use jitterscope_sources::Root;
use libbpf_rs::{MapCore, MapFlags, OpenObject};

pub mod delta;
mod dirty;
pub mod env;
mod lookups;
mod madvise;
mod map_batch;
mod mmaplock;
pub mod python_walker;
mod reclaim;
mod runqlat;
mod shrinker;
pub mod task_iter;
mod tlb;
pub mod tp_format;
mod verifier;

/// A tracer's registration: everything the collector and the CLI know of it. Each tracer module
/// defines one `DEF`, and [`TRACERS`] lists them.
pub(crate) struct TracerDef {
    /// Which tracer it is: its name and what it traces are the model's
    /// ([`TracerId::name`], [`TracerId::about`]).
    pub id: TracerId,
    /// The symptom that attaches it when it runs on demand (None: always attached).
    pub demand: Option<Demand>,
    /// With a demand: attached while its symptom cannot be measured (the signal has no value),
    /// rather than detached. For a tracer whose evidence matters more than its cost when
    /// nothing says it is not needed (runqlat).
    pub unmeasured_attaches: bool,
    /// With a demand: instead of staying attached for [`QUIET_SECONDS`] after its symptom was
    /// last seen, it stays attached while the signal is at least this (a lower bar than the
    /// floor, so that a signal hovering near the floor does not flap) and is detached at the
    /// first sample under it. For a tracer whose symptom's absence proves its evidence absent.
    pub release_below: Option<f64>,
    /// Loads it (and attaches it unless it waits for its demand).
    pub load: fn(&mut Env, Tracefs) -> LoadResult,
    /// The tracepoint record fields its programs read.
    pub records: fn() -> Vec<tp_format::Record>,
}

/// tracefs, or why there is none: passed to every `load` so that a tracer that can do without
/// it (runqlat's BTF-typed tracepoints) still loads.
pub(crate) type Tracefs<'a> = Result<&'a std::path::Path, &'a str>;

/// A loaded tracer, or why it did not load.
pub(crate) type LoadResult = Result<Box<dyn Tracer>, String>;

/// Every tracer, in the order they are loaded and listed. Registering a tracer is one line
/// here and its line in `model::tracers!` (its `TracerId` and its part of the sample), in
/// the same order (a test checks).
static TRACERS: &[&TracerDef] = &[
    &reclaim::DEF,
    &shrinker::DEF,
    &tlb::DEF,
    &madvise::DEF,
    &runqlat::DEF,
    &lookups::DEF,
    &mmaplock::DEF,
    &dirty::DEF,
];

/// One tracer (its place in the table, so it is `Copy` and orders as tracers are listed).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(usize);

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Name").field(&self.as_str()).finish()
    }
}

impl Name {
    /// Every tracer, in the order they are loaded and listed.
    pub fn all() -> impl ExactSizeIterator<Item = Name> + Clone {
        (0..TRACERS.len()).map(Name)
    }

    fn def(self) -> &'static TracerDef {
        TRACERS[self.0]
    }

    /// The tracer's name on the command line and in messages.
    pub fn as_str(self) -> &'static str {
        self.def().id.name()
    }

    /// Which tracer it is.
    pub fn id(self) -> TracerId {
        self.def().id
    }

    /// What it traces, for `tracers --check`.
    pub fn what(self) -> &'static str {
        self.def().id.about()
    }

    /// The symptom that attaches it on demand (None: always attached).
    pub fn demand(self) -> Option<Demand> {
        self.def().demand
    }

    /// Parses a tracer name.
    pub fn parse(s: &str) -> Result<Name, String> {
        Name::all().find(|n| n.as_str() == s).ok_or_else(|| {
            let all: Vec<_> = Name::all().map(Name::as_str).collect();
            format!("unknown tracer '{s}' (known: {})", all.join(", "))
        })
    }
}

/// Host facts every tracer's load needs, found once.
pub struct Env {
    /// tracefs, or why it is unavailable.
    pub tracefs: Result<std::path::PathBuf, String>,
    /// CPU-controller cgroup ids.
    pub cpu_cgroups: env::CgroupIds,
    /// Memory-controller cgroup ids.
    pub mem_cgroups: env::CgroupIds,
    /// Kernel symbols.
    pub kallsyms: env::Kallsyms,
    /// Load tracers that have a [`Demand`] without attaching them.
    pub defer_on_demand: bool,
    /// The pids of the sample's process table, sorted, when the sample has one: which
    /// per-process map entries belong to processes that have exited, without a `kill()` each.
    live_pids: Option<Vec<u32>>,
    /// The tracers being started.
    wanted: Vec<Name>,
    /// Tracers whose counting a tracer loaded before them took over (tlb's flush program also
    /// counts madvise() calls where it can: see tlb.bpf.c, btf_tlb_flush_madvise). Such a
    /// tracer loads nothing of its own and [`Tracer::follows`] the one that counts for it.
    counted_by_another: Vec<TracerId>,
}

impl Env {
    /// Looks at the host under `root` (cgroups) and the running kernel (tracefs, kallsyms).
    pub fn new(root: &Root) -> Self {
        Env {
            tracefs: env::tracefs(),
            cpu_cgroups: env::CgroupIds::new(root, "cpu"),
            mem_cgroups: env::CgroupIds::new(root, "memory"),
            kallsyms: env::Kallsyms::default(),
            defer_on_demand: false,
            live_pids: None,
            wanted: Vec::new(),
            counted_by_another: Vec::new(),
        }
    }

    /// Whether the tracer `def` is among those being started.
    fn wants(&self, id: TracerId) -> bool {
        self.wanted.iter().any(|n| n.id() == id)
    }

    /// The pids of the sample being collected, sorted (None: ask the kernel per pid).
    fn live_pids(&self) -> Option<&[u32]> {
        self.live_pids.as_deref()
    }

    /// Whether cgroup ids must be read from v1 controllers.
    fn cgroup_v1(&self) -> bool {
        self.cpu_cgroups.is_v1() || self.mem_cgroups.is_v1()
    }
}

/// A loaded tracer (attached, or waiting for its demand).
pub(crate) trait Tracer: Send {
    /// Reads the interval's counts into `out`.
    fn read(&mut self, env: &mut Env, out: &mut Tracers);
    /// The loaded BPF object (for its maps' memory); None for a tracer whose programs and maps
    /// are another tracer's (madvise counted by tlb's flush program).
    fn object(&self) -> Option<&libbpf_rs::Object>;
    /// Its attached programs: dropping them detaches the tracer, its maps stay.
    fn links(&mut self) -> &mut Vec<libbpf_rs::Link>;
    /// Attaches it on demand: the links made and, if one failed, why. By default every loaded
    /// program at its section's attach point; a tracer that attaches its programs only in
    /// windows of its own time (`lookups`) starts those instead and keeps no links here.
    fn attach(&mut self) -> (Vec<libbpf_rs::Link>, Option<String>) {
        self.object()
            .map_or_else(|| (Vec::new(), None), attach_each)
    }
    /// Detaches it on demand: the links to drop, which the caller drops off the sampling
    /// thread.
    fn detach(&mut self) -> Vec<libbpf_rs::Link> {
        std::mem::take(self.links())
    }
    /// How it attached (e.g. which tracepoint flavour), for `--check`.
    fn how(&self) -> String;
    /// The tracer whose programs count for this one (madvise counted by tlb's flush program):
    /// it is attached, detached and looked at by the census exactly when that one is.
    fn follows(&self) -> Option<TracerId> {
        None
    }
    /// Starts a read generation without reading, as it is attached again: every process entry
    /// is named at its next event. Without it, a process seen while a detach was still under
    /// way (it runs on a thread of its own) kept that name through the next attachment's
    /// first interval and beyond: issue 18's lab worker stayed `jitterscope`, the name it had
    /// before it renamed itself.
    fn new_generation(&mut self);
}

/// Why an on-demand tracer gets attached: the episode signal of the symptom it explains, at or
/// above the signal's floor. The evidence tracers (`madvise`, `lookups`) on their syscall
/// tracepoint fallbacks cost every system call on the host a trip through the traced syscall
/// path while attached (measured: +36% of a malloc storm's CPU time, +85% of a failing-stat
/// loop's), so by default they stay loaded but detached until the symptom they explain is
/// there, and detach again after [`QUIET_SECONDS`] without it. Their cheaper hooks (flush-time
/// madvise, windowed look-ups) keep the same demand, although attached they cost those storms
/// less than the bench's noise (median CPU time within ±3%). Sharing the
/// signal keeps the attach threshold and the episode floor one number, computed as `dump`
/// prints the series.
pub type Demand = &'static Signal;

/// Seconds without the symptom before an on-demand tracer detaches again.
pub const QUIET_SECONDS: u64 = 30;

/// How often the census attaches a detached on-demand tracer for one interval by default. A
/// symptom-gated tracer never sees the precursor whose symptom does not show on this kernel
/// (issue 18: 12,600 failing `access()` calls per second for 40 s, cached as a few negative
/// dentries that never grew, and nothing recorded who made them). One interval in 60 costs a
/// sixtieth of the attached tracer's slowdown (bench/tracers.sh measures it: `census` rows),
/// and still sees a pattern that lasts a minute or recurs, as the seed cases' did for hours.
pub const CENSUS_EVERY: Duration = Duration::from_secs(60);

/// The result of starting one tracer.
#[derive(Debug, Clone)]
pub struct Started {
    /// Which.
    pub name: Name,
    /// How it runs, or why it does not.
    pub outcome: Result<String, String>,
    /// Most kernel memory its maps can use, bytes (0 when it did not load).
    pub map_bytes: u64,
}

/// Set by [`fallbacks_only`].
static FALLBACKS_ONLY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// For tests: tracers load what older kernels get, so that it runs on kernels that never need
/// it: tlb its classic-tracepoint programs (as where BTF-typed and raw tracepoints are refused),
/// runqlat its wake-up hash map (as before task storage in tracing programs, 5.13).
#[doc(hidden)]
pub fn fallbacks_only(on: bool) {
    FALLBACKS_ONLY.store(on, std::sync::atomic::Ordering::Relaxed);
}

fn fallbacks_forced() -> bool {
    FALLBACKS_ONLY.load(std::sync::atomic::Ordering::Relaxed)
}

/// The names of the tracers that started.
pub fn running(started: &[Started]) -> Vec<&'static str> {
    started
        .iter()
        .filter(|s| s.outcome.is_ok())
        .map(|s| s.name.as_str())
        .collect()
}

/// Storage for a skeleton's object that lives as long as the process: a skeleton borrows it,
/// and tracers run until the recorder exits. A failed load leaks one small allocation, once.
fn object_storage() -> &'static mut MaybeUninit<OpenObject> {
    Box::leak(Box::new(MaybeUninit::uninit()))
}

fn load_one(name: Name, env: &mut Env) -> LoadResult {
    if !env::has_btf() {
        return Err("the kernel exposes no BTF (/sys/kernel/btf/vmlinux); CO-RE programs cannot be relocated".into());
    }
    // Gated on capabilities, not on the user id: the recorder runs as its own user with
    // CAP_BPF and CAP_PERFMON (and CAP_DAC_READ_SEARCH for tracefs).
    if !jitterscope_model::caps::can_trace() {
        return Err(
            "loading BPF tracers needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN), which this \
             process does not have (run as root or grant them)"
                .into(),
        );
    }
    let tracefs = env.tracefs.clone();
    let tracefs: Tracefs = tracefs.as_deref().map_err(String::as_str);
    (name.def().load)(env, tracefs).map_err(|e| {
        // Why tracefs is missing already says what to do; the remedy below is for libbpf's.
        if tracefs.err() == Some(e.as_str()) {
            e
        } else {
            explain(&e)
        }
    })
}

/// Turns libbpf's errors into the remedy an operator needs.
/// A refused load, with the verifier's reason when libbpf printed one.
fn load_error(e: &libbpf_rs::Error) -> String {
    let why = verifier::verdict(&verifier::take());
    explain(&match why {
        Some(why) => format!("loading into the kernel: {e}: {why}"),
        None => format!("loading into the kernel: {e}"),
    })
}

fn explain(e: &str) -> String {
    if e.contains("Operation not permitted") || e.contains("EPERM") {
        format!("{e} (loading BPF needs root or CAP_BPF + CAP_PERFMON)")
    } else {
        e.to_string()
    }
}

/// One loaded tracer and, for an on-demand one, its attachment state.
struct Slot {
    name: Name,
    tracer: Box<dyn Tracer>,
    attached: bool,
    /// Monotonic time the tracer's symptom was last seen, ns.
    last_hot_ns: u64,
    /// Consecutive samples with the symptom (for a tracer with a release bar).
    hot_streak: u32,
    /// Attached for one interval by the census, not by its symptom.
    census: bool,
    /// Monotonic time of its last census attachment, ns (None before the first).
    last_census_ns: Option<u64>,
    /// The thread dropping its last links. The kernel refuses to attach a program to a
    /// tracepoint it is still attached to, so no attach starts before this thread is done.
    detaching: Option<std::thread::JoinHandle<()>>,
}

impl Slot {
    /// Whether its links of an earlier attachment are still being dropped.
    fn detach_pending(&mut self) -> bool {
        if self.detaching.as_ref().is_some_and(|h| !h.is_finished()) {
            return true;
        }
        if let Some(h) = self.detaching.take() {
            let _ = h.join();
        }
        false
    }

    fn detach(&mut self) {
        self.detaching = detach(self.tracer.detach());
        self.attached = false;
        self.census = false;
    }
}

/// The symptom rates that decide the on-demand tracers, computed by the symptom signals' own
/// metrics so that they are the values `dump` prints and the episode detector sees.
#[derive(Debug, Default)]
struct Symptoms {
    /// The previous sample, holding only what the symptom metrics read: cloning the processes
    /// and cgroups every second would cost more than the tracers save.
    prev: Option<Sample>,
}

impl Symptoms {
    /// The rate of each signal's series in `cur` (None when it has no value, e.g. its source is
    /// missing), or None for all until there is a previous sample. Then remembers `cur`.
    fn rates(&mut self, cur: &Sample, signals: &[Demand]) -> Option<Vec<Option<f64>>> {
        let rates = self.prev.as_ref().map(|prev| {
            let cx = Ctx::new(cur, Some(prev));
            signals.iter().map(|s| symptom_rate(&cx, s)).collect()
        });
        let p = self.prev.get_or_insert_with(Sample::default);
        p.mono_ns = cur.mono_ns;
        // The boot id: rates never span a reboot.
        p.host.clone_from(&cur.host);
        p.interrupts.clone_from(&cur.interrupts);
        p.dentry.clone_from(&cur.dentry);
        p.process_scan.clone_from(&cur.process_scan);
        rates
    }
}

/// The value of `signal`'s series in `cx` (the largest, should it select several).
fn symptom_rate(cx: &Ctx, signal: &Signal) -> Option<f64> {
    let select = signal.select();
    let mut rate: Option<f64> = None;
    (signal.metric.eval)(cx, &mut |labels: &[&str], v: Option<f64>| {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            if select.matches(signal.metric, labels) {
                rate = Some(rate.map_or(v, |r| r.max(v)));
            }
        }
    });
    rate
}

/// Collects every started tracer's interval into the sample.
pub struct TracerCollector {
    env: Env,
    slots: Vec<Slot>,
    last_mono: Option<u64>,
    on_demand: bool,
    symptoms: Symptoms,
    /// Period of the census of detached on-demand tracers, ns (0: no census).
    census_every_ns: u64,
}

impl TracerCollector {
    /// Loads and attaches `names` (in [`Name::all`] order), saying for each how it runs or why
    /// it cannot. Every tracer stays attached.
    pub fn start(root: &Root, names: &[Name]) -> (Self, Vec<Started>) {
        Self::start_with(root, names, false)
    }

    /// Like [`TracerCollector::start`], but the tracers that have a [`Demand`] are loaded
    /// without being attached, and attach only while their symptom lasts (the recorder's
    /// default; `record --on-demand-tracers always` uses `start`).
    pub fn start_on_demand(root: &Root, names: &[Name]) -> (Self, Vec<Started>) {
        Self::start_with(root, names, true)
    }

    fn start_with(root: &Root, names: &[Name], on_demand: bool) -> (Self, Vec<Started>) {
        let mut env = Env::new(root);
        env.defer_on_demand = on_demand;
        env.wanted = names.to_vec();
        let mut slots = Vec::new();
        let mut report = Vec::new();
        for n in Name::all().filter(|n| names.contains(n)) {
            match load_one(n, &mut env) {
                Ok(t) => {
                    let waits = on_demand && n.demand().is_some();
                    report.push(Started {
                        name: n,
                        outcome: Ok(if waits {
                            format!("{} (attached on demand)", t.how())
                        } else {
                            t.how()
                        }),
                        map_bytes: t.object().map_or(0, kernel_map_bytes),
                    });
                    slots.push(Slot {
                        name: n,
                        tracer: t,
                        attached: !waits,
                        last_hot_ns: 0,
                        hot_streak: 0,
                        census: false,
                        last_census_ns: None,
                        detaching: None,
                    });
                }
                Err(e) => report.push(Started {
                    name: n,
                    outcome: Err(e),
                    map_bytes: 0,
                }),
            }
        }
        (
            TracerCollector {
                env,
                slots,
                last_mono: None,
                on_demand,
                symptoms: Symptoms::default(),
                census_every_ns: CENSUS_EVERY.as_nanos() as u64,
            },
            report,
        )
    }

    /// The tracers that wait for their symptom before attaching.
    pub fn waiting(&self) -> Vec<Name> {
        self.slots
            .iter()
            .filter(|s| self.on_demand && s.name.demand().is_some())
            .map(|s| s.name)
            .collect()
    }

    /// How often a detached on-demand tracer is attached for one interval (zero: never).
    pub fn set_census(&mut self, every: Duration) {
        self.census_every_ns = every.as_nanos().min(u64::MAX as u128) as u64;
    }

    /// Tracers loaded.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether none is loaded.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Reads every attached tracer's counts for the interval ending at monotonic time
    /// `mono_ns`; a detached on-demand tracer is listed in [`Tracers::idle`] instead.
    pub fn read(&mut self, mono_ns: u64) -> Tracers {
        let mut out = Tracers {
            span_ns: self
                .last_mono
                .map(|l| mono_ns.saturating_sub(l))
                .unwrap_or(0),
            ..Default::default()
        };
        self.last_mono = Some(mono_ns);
        for s in self.slots.iter_mut() {
            if s.attached {
                s.tracer.read(&mut self.env, &mut out);
                if s.census {
                    out.census.push(s.name.as_str().to_string());
                }
            } else {
                out.idle.push(s.name.as_str().to_string());
            }
        }
        out
    }

    /// Attaches an on-demand tracer whose symptom is present, detaches one whose symptom has
    /// been absent for [`QUIET_SECONDS`].
    fn update_demand(&mut self, sample: &mut Sample, notes: &mut Notes) {
        let demands: Vec<Demand> = self.slots.iter().filter_map(|s| s.name.demand()).collect();
        if demands.is_empty() {
            return;
        }
        let Some(rates) = self.symptoms.rates(sample, &demands) else {
            return;
        };
        let mut rates = rates.into_iter();
        let now = sample.mono_ns;
        let quiet = QUIET_SECONDS * 1_000_000_000;
        for s in self.slots.iter_mut() {
            let Some(signal) = s.name.demand() else {
                continue;
            };
            let rate = rates.next().flatten();
            if s.tracer.follows().is_some() {
                continue;
            }
            let mut hot = match rate {
                Some(r) => r >= signal.floor,
                None => s.name.def().unmeasured_attaches,
            };
            // A tracer held by the signal itself attaches on the second sample in a row with the
            // symptom: a single second of it is a process starting (stress-ng's start made
            // 37-55 us of mean run-queue wait here, in a storm whose mean is 0.4 us), and the
            // attachment it caused cost the next second of the storm +27%.
            s.hot_streak = if hot {
                s.hot_streak.saturating_add(1)
            } else {
                0
            };
            if s.name.def().release_below.is_some() && rate.is_some() && !s.attached {
                hot &= s.hot_streak >= 2;
            }
            if hot {
                s.last_hot_ns = now;
                // A census look that found the symptom stays, held by the symptom now.
                s.census = false;
            }
            // Wanted from the symptom until it has been absent for `quiet`, not only in the
            // seconds it shows: an attach that has to wait (a detach still under way) or
            // fails is tried again while the symptom is recent, and a burst that recurs every
            // few seconds keeps its tracer. A tracer with a release bar is held by the signal
            // itself instead (a census look is not: it ends after its interval).
            let wanted = match s.name.def().release_below {
                Some(bar) => {
                    hot || (s.attached
                        && !s.census
                        && rate.map_or(s.name.def().unmeasured_attaches, |r| r >= bar))
                }
                None => s.last_hot_ns > 0 && now.saturating_sub(s.last_hot_ns) < quiet,
            };
            if wanted {
                if !s.attached && !s.detach_pending() {
                    attach_slot(s, sample, notes);
                }
            } else if s.attached {
                // The census interval has been read, or the symptom has been gone long enough.
                s.detach();
            } else if self.census_every_ns > 0
                && s.last_census_ns
                    .is_none_or(|t| now.saturating_sub(t) >= self.census_every_ns)
                && !s.detach_pending()
            {
                s.last_census_ns = Some(now);
                if attach_slot(s, sample, notes) {
                    s.census = true;
                }
            }
        }
        for i in 0..self.slots.len() {
            let Some(leader) = self.slots[i].tracer.follows() else {
                continue;
            };
            if let Some(l) = self.slots.iter().find(|l| l.name.id() == leader) {
                let (attached, census) = (l.attached, l.census);
                let f = &mut self.slots[i];
                f.attached = attached;
                f.census = census;
            }
        }
    }
}

/// Attaches a detached tracer's programs; an error is noted once and in the sample.
fn attach_slot(s: &mut Slot, sample: &mut Sample, notes: &mut Notes) -> bool {
    s.tracer.new_generation();
    match s.tracer.attach() {
        (links, None) => {
            *s.tracer.links() = links;
            s.attached = true;
            true
        }
        (made, Some(e)) => {
            s.detaching = detach(made);
            let name = s.name.as_str();
            notes.once(&format!("attach:{name}"), || {
                format!("tracer {name}: cannot attach on demand: {e}")
            });
            if sample.errors.len() < 32 {
                sample.errors.push(format!("tracer {name}: attach: {e}"));
            }
            false
        }
    }
}

impl Collector for TracerCollector {
    fn name(&self) -> &'static str {
        "tracers"
    }

    fn collect(&mut self, sample: &mut Sample, notes: &mut Notes) {
        if self.slots.is_empty() {
            return;
        }
        let first = self.last_mono.is_none();
        // The process collector runs before the tracers: its table says who is alive.
        self.env.live_pids = sample.processes.as_ref().map(|ps| {
            let mut pids: Vec<u32> = ps.iter().map(|p| p.stat.pid).collect();
            pids.sort_unstable();
            pids
        });
        let t = self.read(sample.mono_ns);
        // The first read only sets the baseline: its counts cover the time since load, not an
        // interval.
        if !first {
            sample.tracers = Some(t);
        }
        if self.on_demand {
            self.update_demand(sample, notes);
        }
    }

    fn period(&self) -> Duration {
        Duration::ZERO
    }
}

/// Opens a tracer's skeleton and tells its programs which cgroup hierarchy the ids come from.
macro_rules! open_skel {
    ($builder:ty, $env:expr) => {{
        $crate::verifier::install();
        let _ = $crate::verifier::take();
        let mut open = <$builder>::default()
            .open($crate::object_storage())
            .map_err(|e| format!("opening the BPF object: {e}"))?;
        let ro = open
            .maps
            .rodata_data
            .as_deref_mut()
            .ok_or("the BPF object has no read-only data")?;
        ro.js_cgroup_v1 = $env.cgroup_v1();
        open
    }};
}
pub(crate) use open_skel;

/// Loads an opened skeleton, lets `prepare` fill maps before any program runs (the overflow
/// entries), then attaches every program left to autoload. The links are kept by the tracer
/// (not the skeleton) so that an on-demand tracer can drop and re-create them.
fn load_and_attach<'o, O>(
    open: O,
    prepare: impl FnOnce(&O::Output) -> Result<(), String>,
    attach_what: &str,
    attach_now: bool,
) -> Result<(O::Output, Vec<libbpf_rs::Link>), String>
where
    O: libbpf_rs::skel::OpenSkel<'o>,
    O::Output: libbpf_rs::skel::Skel<'o>,
{
    use libbpf_rs::skel::Skel;
    let skel = open.load().map_err(|e| load_error(&e))?;
    prepare(&skel)?;
    if !attach_now {
        return Ok((skel, Vec::new()));
    }
    let links =
        attach_all(skel.object()).map_err(|e| format!("attaching to {attach_what}: {e}"))?;
    Ok((skel, links))
}

/// Detaches by dropping `links`, on a thread of its own: removing a tracepoint program waits for
/// RCU grace periods (about 70 ms per syscall tracepoint here, 1.5 s for `lookups`' 20), which
/// must not stall the sampling loop.
fn detach(links: Vec<libbpf_rs::Link>) -> Option<std::thread::JoinHandle<()>> {
    if links.is_empty() {
        return None;
    }
    let slot = std::sync::Arc::new(std::sync::Mutex::new(Some(links)));
    let theirs = slot.clone();
    let spawned = std::thread::Builder::new()
        .name("bpf-detach".into())
        .spawn(move || drop(theirs.lock().map(|mut l| l.take())));
    match spawned {
        Ok(h) => Some(h),
        Err(_) => {
            // No thread: detach here rather than never.
            drop(slot.lock().map(|mut l| l.take()));
            None
        }
    }
}

/// Attaches every loaded program of `obj` at its section's attach point.
fn attach_all(obj: &libbpf_rs::Object) -> Result<Vec<libbpf_rs::Link>, String> {
    match attach_each(obj) {
        (links, None) => Ok(links),
        (_, Some(e)) => Err(e),
    }
}

/// Like [`attach_all`], but when a program fails the links made so far are returned with the
/// error, for the caller to drop off its thread (dropped at once, they held one sample for
/// most of a second).
fn attach_each(obj: &libbpf_rs::Object) -> (Vec<libbpf_rs::Link>, Option<String>) {
    let mut links = Vec::new();
    for p in obj.progs_mut().filter(|p| p.autoload()) {
        match p.attach() {
            Ok(l) => links.push(l),
            Err(e) => {
                return (
                    links,
                    Some(format!("{}: {e}", p.section().to_string_lossy())),
                )
            }
        }
    }
    (links, None)
}

/// Starts a read of a tracer whose `.bss` has `js_gen` and `dropped`: bumps the histogram
/// generation and yields (the generation of the interval just ended, events dropped in it).
macro_rules! begin_read {
    ($skel:expr, $prev_dropped:expr) => {{
        match $skel.maps.bss_data.as_deref_mut() {
            Some(bss) => {
                let gen = bss.js_gen;
                bss.js_gen = gen + 1;
                (gen, $crate::since(bss.dropped, &mut $prev_dropped))
            }
            None => (0, 0),
        }
    }};
}
pub(crate) use begin_read;

/// [`Tracer::new_generation`] for a tracer whose `.bss` has `js_gen`.
macro_rules! next_generation {
    ($skel:expr) => {
        if let Some(bss) = $skel.maps.bss_data.as_deref_mut() {
            bss.js_gen += 1;
        }
    };
}
pub(crate) use next_generation;

/// The increase of a cumulative counter since the last call, remembering it in `prev`.
fn since(cur: u64, prev: &mut u64) -> u64 {
    let d = cur.saturating_sub(*prev);
    *prev = cur;
    d
}

/// One moved entry of a per-process map: every value struct starts with the command name
/// (2 words) and the cgroup id (1 word).
struct ProcEntry {
    pid: u32,
    comm: String,
    cgroup_id: u64,
    /// The value's change in the interval, as words.
    d: Vec<u64>,
}

/// Reads a map keyed by tgid: the change of each entry that moved, then removes the entries of
/// processes that have exited (this was their last read; pid reuse restarts them at zero).
///
/// The map is read in one batch call into `batch` (kept by the tracer between reads). An
/// entry is dead when its pid is not in `live`, the sorted pids of the sample's process table
/// (or, without one, when `kill(pid, 0)` says so), and it did not move in this interval: a
/// process started after the table was read is still counting, so it is not taken for dead,
/// and one that exited is deleted at the next read, once its last counts are out.
fn drain_procs(
    map: &dyn MapCore,
    batch: &mut map_batch::Batch,
    deltas: &mut delta::Deltas<u32>,
    live: Option<&[u32]>,
) -> Vec<ProcEntry> {
    use jitterscope_model::tracers::OTHER_PID;
    let mut out = Vec::new();
    let layout = deltas.layout();
    let mut dead = Vec::new();
    for i in 0..batch.read(map) {
        let Ok(k4) = <[u8; 4]>::try_from(batch.key(i)) else {
            continue;
        };
        let pid = u32::from_ne_bytes(k4);
        let w = delta::sum_cpus(batch.cpu_copies(i), layout);
        let moved = match deltas.update(pid, w) {
            Some(d) => {
                out.push(ProcEntry {
                    pid,
                    comm: if pid == OTHER_PID {
                        "(other)".into()
                    } else {
                        delta::comm(&d)
                    },
                    cgroup_id: d.get(2).copied().unwrap_or(0),
                    d,
                });
                true
            }
            None => false,
        };
        let alive = |pid: u32| match live {
            Some(l) => pid == 0 || l.binary_search(&pid).is_ok(),
            None => delta::pid_alive(pid),
        };
        if pid != OTHER_PID && !moved && !alive(pid) {
            dead.extend_from_slice(&k4);
            deltas.forget(&pid);
        }
    }
    map_batch::delete(map, &dead);
    out
}

/// Reads a map keyed by (the low half of) a cgroup id whose full id is word `id_word` of the
/// value: each moved entry's cgroup path and change; entries of cgroups seen removed are read
/// one last time, then deleted.
fn drain_cgroups(
    map: &dyn MapCore,
    batch: &mut map_batch::Batch,
    deltas: &mut delta::Deltas<u32>,
    id_word: usize,
    ids: &mut env::CgroupIds,
) -> Vec<(String, Vec<u64>)> {
    use jitterscope_model::tracers::OTHER_PID;
    let mut out = Vec::new();
    let layout = deltas.layout();
    let mut removed = Vec::new();
    for i in 0..batch.read(map) {
        let Ok(k4) = <[u8; 4]>::try_from(batch.key(i)) else {
            continue;
        };
        let key = u32::from_ne_bytes(k4);
        let w = delta::sum_cpus(batch.cpu_copies(i), layout);
        let id = w.get(id_word).copied().unwrap_or(0);
        let path = if key == OTHER_PID {
            "(other)".to_string()
        } else {
            ids.path(id)
        };
        if let Some(d) = deltas.update(key, w) {
            out.push((path, d));
        }
        if key != OTHER_PID && ids.take_removed(id) {
            removed.extend_from_slice(&k4);
            deltas.forget(&key);
        }
    }
    map_batch::delete(map, &removed);
    out
}

/// Creates the overflow entry of a u32-keyed map so the kernel side always finds it.
fn create_other(map: &dyn MapCore) -> Result<(), String> {
    let zero = vec![0u8; map.value_size() as usize];
    let key = u32::MAX.to_ne_bytes();
    let r = if map.map_type().is_percpu() {
        let cpus = libbpf_rs::num_possible_cpus().map_err(|e| format!("possible CPUs: {e}"))?;
        map.update_percpu(&key, &vec![zero; cpus], MapFlags::NO_EXIST)
    } else {
        map.update(&key, &zero, MapFlags::NO_EXIST)
    };
    r.map_err(|e| format!("creating the overflow entry: {e}"))
}

/// Kernel memory of every map of `obj` (hash maps are preallocated: this is what they hold
/// whatever the load), as the kernel accounts it: `memlock` in the maps' fdinfo.
fn kernel_map_bytes(obj: &libbpf_rs::Object) -> u64 {
    use std::os::fd::{AsFd, AsRawFd};
    obj.maps()
        .map(|m| {
            let fd = m.as_fd().as_raw_fd();
            std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))
                .ok()
                .and_then(|s| memlock(&s))
                .unwrap_or(0)
        })
        .sum()
}

/// The `memlock:` value of a map's fdinfo.
fn memlock(fdinfo: &str) -> Option<u64> {
    fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("memlock:"))
        .and_then(|v| v.trim().parse().ok())
}

/// A histogram from its 36 words (32 slots, count, sum, max, max generation); `gen` is the
/// generation in effect during the interval just read.
fn hist(w: &[u64], gen: u64) -> jitterscope_model::tracers::Hist {
    use jitterscope_model::tracers::HIST_SLOTS;
    let mut slots: Vec<u64> = w.iter().take(HIST_SLOTS).copied().collect();
    while slots.last() == Some(&0) {
        slots.pop();
    }
    let at = |i: usize| w.get(i).copied().unwrap_or(0);
    let count = at(HIST_SLOTS);
    jitterscope_model::tracers::Hist {
        slots,
        count,
        sum_ns: at(HIST_SLOTS + 1),
        max_ns: if count > 0 && at(HIST_SLOTS + 3) >= gen {
            at(HIST_SLOTS + 2)
        } else {
            0
        },
    }
}

/// Words of a histogram; the last two (max, its generation) are not counters.
const HIST_WORDS: usize = 36;

/// Checks that each named classic tracepoint exists; the first missing one is the error.
fn need_tracepoints(tracefs: &std::path::Path, tps: &[(&str, &str)]) -> Result<(), String> {
    for (c, n) in tps {
        if !env::has_tracepoint(tracefs, c, n) {
            return Err(format!("tracepoint {c}:{n} does not exist on this kernel"));
        }
    }
    Ok(())
}

/// Every record field every tracer reads, for the layout tests.
pub fn all_records() -> Vec<tp_format::Record> {
    TRACERS.iter().flat_map(|t| (t.records)()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture_tracefs() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/host/sys/kernel/tracing")
    }

    #[test]
    fn record_layouts_match_the_captured_formats() {
        let root = fixture_tracefs();
        let records = all_records();
        assert!(records.len() >= 30);
        for r in &records {
            assert!(
                root.join("events").join(&r.event).join("format").exists(),
                "no captured format for {} (scripts/capture-tracepoint-formats.sh)",
                r.event
            );
        }
        assert_eq!(tp_format::check(&root, &records), Ok(()));
    }

    #[test]
    fn record_layouts_match_the_running_kernel() {
        let Ok(tracefs) = env::tracefs() else {
            return jitterscope_testkit::skip(
                "record_layouts_match_the_running_kernel",
                "no tracefs (not root, or it cannot be mounted)",
            );
        };
        assert_eq!(tp_format::check(&tracefs, &all_records()), Ok(()));
    }

    /// A BPF map made by the test (root or CAP_BPF), or `None` after saying SKIPPED.
    fn test_map(
        test: &str,
        ty: libbpf_rs::MapType,
        key: u32,
        value: u32,
    ) -> Option<libbpf_rs::MapHandle> {
        let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
            sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
            ..Default::default()
        };
        match libbpf_rs::MapHandle::create(ty, Some("js_test_map"), key, value, 1024, &opts) {
            Ok(m) => Some(m),
            Err(e) => {
                jitterscope_testkit::skip(
                    test,
                    &format!("cannot create a BPF map (needs root or CAP_BPF): {e}"),
                );
                None
            }
        }
    }

    /// The u32 keys left in a map.
    fn pids_in(map: &dyn MapCore) -> Vec<u32> {
        let mut v: Vec<u32> = map
            .keys()
            .map(|k| u32::from_ne_bytes(k[..4].try_into().unwrap()))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// A drain while processes die and others keep counting reads each process once, by batch
    /// and by the key-by-key walk of kernels without batch calls, with liveness from a process
    /// table and from `kill()`. Before the walk deduplicated its keys, every deleted (dead)
    /// entry sent the kernel's walk back to the first key, and the live entries, read again
    /// after they had counted a little more, came out a second time.
    #[test]
    fn a_drain_reads_each_process_once_while_others_die() {
        const WORDS: usize = 6;
        const TEST: &str = "a_drain_reads_each_process_once_while_others_die";
        let Some(map) = test_map(TEST, libbpf_rs::MapType::Hash, 4, (WORDS * 8) as u32) else {
            return;
        };
        let value = |count: u64| {
            let mut w = [0u64; WORDS];
            w[0] = u64::from_ne_bytes(*b"proc\0\0\0\0");
            w[4] = count;
            w.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>()
        };
        // Alive: this process and init. Dead: pids above any pid_max (2^22).
        let mut live = [std::process::id(), 1];
        live.sort_unstable();
        let layout = delta::Layout {
            words: WORDS,
            keep: &[0, 1, 2, 3],
            named_gen: None,
        };
        for walked in [false, true] {
            for table in [true, false] {
                let mut deltas = delta::Deltas::new(layout);
                let mut batch = map_batch::Batch::default();
                if walked {
                    batch.force_walk();
                }
                let live_list = table.then_some(&live[..]);
                let stop = std::sync::atomic::AtomicBool::new(false);
                // In the map before the first drain, whether or not the counting thread below
                // gets a CPU before the rounds end (on a loaded two-core host it did not, and
                // the living were never in the map).
                for pid in live {
                    map.update(&pid.to_ne_bytes(), &value(1), MapFlags::ANY)
                        .expect("a live process's entry");
                }
                // The drains' pids per round, checked once the writer has stopped (a failed
                // assert inside the scope would wait forever for it).
                let rounds: Vec<Vec<u32>> = std::thread::scope(|t| {
                    // The kernel side: the live processes keep counting while the drain reads.
                    t.spawn(|| {
                        let mut n = 1u64;
                        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                            for pid in live {
                                let _ = map.update(&pid.to_ne_bytes(), &value(n), MapFlags::ANY);
                            }
                            n += 1;
                        }
                    });
                    let mut rounds = Vec::new();
                    for round in 0..20u32 {
                        for i in 0..40u32 {
                            let pid = 4_200_000 + round * 100 + i;
                            let _ = map.update(&pid.to_ne_bytes(), &value(1), MapFlags::ANY);
                        }
                        let got = drain_procs(&map, &mut batch, &mut deltas, live_list);
                        rounds.push(got.iter().map(|e| e.pid).collect());
                        assert_eq!(batch.walked(), walked);
                    }
                    stop.store(true, std::sync::atomic::Ordering::Relaxed);
                    rounds
                });
                let how = format!("walked {walked}, process table {table}");
                for (round, got) in rounds.iter().enumerate() {
                    let mut pids = got.clone();
                    pids.sort_unstable();
                    pids.dedup();
                    assert_eq!(
                        pids.len(),
                        got.len(),
                        "{how}: round {round}: a process read twice: {got:?}"
                    );
                    assert_eq!(
                        got.iter().filter(|&&p| p >= 4_200_000).count(),
                        40,
                        "{how}: round {round}: every dead process's last counts are read"
                    );
                }
                // A dead entry goes at the read after its last counts: the last round's dead
                // are still there, and one more read removes them; the living stay.
                assert_eq!(pids_in(&map).len(), 42, "{how}");
                drain_procs(&map, &mut batch, &mut deltas, live_list);
                assert_eq!(pids_in(&map), live.to_vec(), "{how}");
                for pid in live {
                    let _ = map.delete(&pid.to_ne_bytes());
                }
            }
        }
    }

    /// A process the table does not list yet (it started after the table was read) is not
    /// taken for dead while it counts; once it stops counting and is still unlisted, it goes.
    #[test]
    fn an_unlisted_process_that_counts_is_kept() {
        const TEST: &str = "an_unlisted_process_that_counts_is_kept";
        let Some(map) = test_map(TEST, libbpf_rs::MapType::Hash, 4, 48) else {
            return;
        };
        let layout = delta::Layout {
            words: 6,
            keep: &[0, 1, 2, 3],
            named_gen: None,
        };
        let mut deltas = delta::Deltas::new(layout);
        let mut batch = map_batch::Batch::default();
        let put = |pid: u32, n: u64| {
            let mut v = vec![0u8; 48];
            v[32..40].copy_from_slice(&n.to_ne_bytes());
            map.update(&pid.to_ne_bytes(), &v, MapFlags::ANY).unwrap();
        };
        let table: &[u32] = &[1];
        put(4_300_000, 1);
        assert_eq!(
            drain_procs(&map, &mut batch, &mut deltas, Some(table)).len(),
            1
        );
        put(4_300_000, 2);
        let got = drain_procs(&map, &mut batch, &mut deltas, Some(table));
        assert_eq!(got[0].d[4], 1, "the interval's count");
        assert_eq!(pids_in(&map), vec![4_300_000], "kept while it counts");
        assert!(drain_procs(&map, &mut batch, &mut deltas, Some(table)).is_empty());
        assert!(pids_in(&map).is_empty(), "gone once it stops, unlisted");
    }

    /// A per-CPU map read in one batch gives the same sums as reading each key: the values come
    /// back as one copy per possible CPU, each rounded up to 8 bytes.
    #[test]
    fn a_per_cpu_batch_sums_every_cpu_like_the_walk() {
        const TEST: &str = "a_per_cpu_batch_sums_every_cpu_like_the_walk";
        // 20 bytes: not a multiple of 8, so the kernel's per-CPU rounding is exercised.
        let Some(map) = test_map(TEST, libbpf_rs::MapType::PercpuHash, 4, 20) else {
            return;
        };
        let cpus = libbpf_rs::num_possible_cpus().unwrap();
        for pid in 1..=50u32 {
            let per_cpu: Vec<Vec<u8>> = (0..cpus)
                .map(|c| {
                    let mut v = vec![0u8; 20];
                    v[..8].copy_from_slice(&(u64::from(pid) * 1000 + c as u64).to_ne_bytes());
                    v[8..16].copy_from_slice(&(c as u64 + 1).to_ne_bytes());
                    v
                })
                .collect();
            map.update_percpu(&pid.to_ne_bytes(), &per_cpu, MapFlags::ANY)
                .unwrap();
        }
        let layout = delta::Layout {
            words: 3,
            keep: &[],
            named_gen: None,
        };
        let sums = |walk: bool| {
            let mut b = map_batch::Batch::default();
            if walk {
                b.force_walk();
            }
            let n = b.read(&map);
            assert_eq!(b.walked(), walk);
            let mut v: Vec<(u32, Vec<u64>)> = (0..n)
                .map(|i| {
                    let pid = u32::from_ne_bytes(b.key(i).try_into().unwrap());
                    (pid, delta::sum_cpus(b.cpu_copies(i), layout))
                })
                .collect();
            v.sort();
            v
        };
        let batched = sums(false);
        assert_eq!(batched.len(), 50);
        let c = cpus as u64;
        assert_eq!(
            batched[0],
            (1, vec![1000 * c + c * (c - 1) / 2, c * (c + 1) / 2, 0])
        );
        assert_eq!(batched, sums(true));
    }

    #[test]
    fn names_round_trip_and_reject_unknown() {
        for n in Name::all() {
            assert_eq!(Name::parse(n.as_str()), Ok(n));
        }
        let e = Name::parse("kprobe").unwrap_err();
        assert!(
            e.contains("unknown tracer 'kprobe'") && e.contains("runqlat"),
            "{e}"
        );
    }

    #[test]
    fn symptoms_are_negative_dentry_growth_and_tlb_ipis() {
        use jitterscope_model::signals::{NEGATIVE_DENTRIES, TLB_STORM};
        use jitterscope_sources::system::dentry::DentryState;
        use jitterscope_sources::system::interrupts::{Interrupts, Irq};
        let sample = |mono_ns: u64, neg: u64, tlb: u64| {
            let mut s = Sample {
                mono_ns,
                ..Default::default()
            };
            s.dentry = Some(DentryState {
                nr_negative: Some(neg),
                ..Default::default()
            });
            s.interrupts = Some(Interrupts {
                cpus: vec![0, 1],
                irqs: vec![Irq {
                    name: "TLB".into(),
                    per_cpu: vec![tlb / 2, tlb - tlb / 2],
                    total: tlb,
                    description: "TLB shootdowns".into(),
                }],
            });
            s
        };
        let demands = [&NEGATIVE_DENTRIES, &TLB_STORM];
        let mut sy = Symptoms::default();
        assert_eq!(
            sy.rates(&sample(1_000_000_000, 100, 50), &demands),
            None,
            "no previous sample"
        );
        // 2 s later: 3000 more negative dentries, 4000 more TLB IPIs, both over their floors.
        assert_eq!(
            sy.rates(&sample(3_000_000_000, 3_100, 4_050), &demands),
            Some(vec![Some(1500.0), Some(2000.0)])
        );
        assert!(1500.0 >= NEGATIVE_DENTRIES.floor && 2000.0 >= TLB_STORM.floor);
        // The very values the signals lane (and `dump`) derive from the whole samples.
        let mut lane = Vec::new();
        jitterscope_model::signals::Derive::new().values(
            &sample(3_000_000_000, 3_100, 4_050),
            &sample(1_000_000_000, 100, 50),
            &mut lane,
        );
        let lane = |series: &str| lane.iter().find(|v| v.series == series).map(|v| v.value);
        assert_eq!(lane("dentry.negative_growth_per_s"), Some(1500.0));
        assert_eq!(lane("irq.tlb_per_s"), Some(2000.0));
        // Shrinking is negative growth, below any floor; a missing source gives no rate.
        let mut s = sample(4_000_000_000, 10, 4_050);
        assert_eq!(sy.rates(&s, &demands), Some(vec![Some(-3090.0), Some(0.0)]));
        s.mono_ns = 5_000_000_000;
        s.dentry = None;
        s.interrupts = None;
        assert_eq!(sy.rates(&s, &demands), Some(vec![None, None]));
        // The sources are back but the previous sample lacked them: still no rate.
        assert_eq!(
            sy.rates(&sample(6_000_000_000, 10, 4_050), &demands),
            Some(vec![None, None])
        );
        // Only what the symptom metrics read is kept of the previous sample.
        let prev = sy.prev.as_ref().unwrap();
        assert!(prev.processes.is_none() && prev.cgroups.is_none());
    }

    #[test]
    fn table_and_sample_model_name_the_same_tracers() {
        let mut table: Vec<&str> = Name::all().map(Name::as_str).collect();
        table.sort_unstable();
        table.dedup();
        assert_eq!(table.len(), TRACERS.len(), "tracer names are unique");
        // Listed in the same order, so that `Name` and `TracerId` order alike.
        let ids: Vec<TracerId> = Name::all().map(Name::id).collect();
        assert_eq!(
            ids,
            TracerId::ALL,
            "each TracerDef has its part in model::tracers::Tracers and vice versa, in order"
        );
    }

    #[test]
    fn demands_are_catalogued_signals() {
        use jitterscope_model::signals::{DEMAND_ONLY, SIGNALS};
        for n in Name::all() {
            if let Some(d) = n.demand() {
                assert!(
                    SIGNALS.contains(&d) || DEMAND_ONLY.contains(&d),
                    "{}: {}",
                    n.as_str(),
                    d.kind
                );
            }
        }
        for d in DEMAND_ONLY {
            assert!(!SIGNALS.contains(d), "{} is both", d.kind);
        }
    }

    #[test]
    fn memlock_from_fdinfo() {
        let fdinfo = "pos:\t0\nflags:\t02000002\nmap_type:\t1\nmemlock:\t2461696\nmap_id:\t42\n";
        assert_eq!(memlock(fdinfo), Some(2_461_696));
        assert_eq!(memlock("memlock: x\n"), None);
        assert_eq!(memlock(""), None);
    }

    #[test]
    fn hist_words_trim_and_take_the_interval_max() {
        let mut w = vec![0u64; HIST_WORDS];
        w[0] = 3;
        w[5] = 1;
        w[32] = 4;
        w[33] = 100_000;
        w[34] = 40_000;
        w[35] = 7;
        let h = hist(&w, 7);
        assert_eq!(h.slots, vec![3, 0, 0, 0, 0, 1]);
        assert_eq!((h.count, h.sum_ns, h.max_ns), (4, 100_000, 40_000));
        // A maximum stamped in an older generation belongs to an older interval.
        assert_eq!(hist(&w, 8).max_ns, 0);
        assert!(hist(&[], 0).is_empty());
    }

    /// A collector of the lookups tracer alone (loaded detached when `on_demand`), or `None`
    /// after saying SKIPPED and why.
    fn lookups_alone(test: &str, on_demand: bool) -> Option<TracerCollector> {
        if !jitterscope_testkit::is_root() {
            jitterscope_testkit::skip(test, "needs root to load BPF programs");
            return None;
        }
        let lookups = [Name::parse("lookups").expect("the lookups tracer")];
        let root = Root::new("/");
        let (c, started) = if on_demand {
            TracerCollector::start_on_demand(&root, &lookups)
        } else {
            TracerCollector::start(&root, &lookups)
        };
        if let Some(e) = started.iter().find_map(|s| s.outcome.as_ref().err()) {
            jitterscope_testkit::skip(test, &format!("lookups did not load: {e}"));
            return None;
        }
        Some(c)
    }

    /// A process renamed while its tracer was detached carries its new name once the tracer is
    /// attached again, although no read came between. That is the census's case: its detach
    /// runs on a thread of its own, a process can be counted meanwhile, and the next attachment
    /// kept the name from then (issue 18's lab worker stayed `jitterscope`, never
    /// `lab-nss-probe`).
    #[test]
    fn a_reattached_tracer_names_processes_again() {
        let Some(mut c) = lookups_alone("a_reattached_tracer_names_processes_again", false) else {
            return;
        };
        // The tracer names a process by its main thread's comm: /proc/self/comm.
        let own = std::fs::read_to_string("/proc/self/comm").expect("own comm");
        let rename = |n: &str| std::fs::write("/proc/self/comm", n).expect("rename");
        let missing = std::ffi::CString::new("/nonexistent-jitterscope-test/x").unwrap();
        // Failing for 1.1 s: on the windowed path a regular window opens within every second
        // of the tracer's attachment, and a single call would most likely fall outside it.
        let fail = || {
            let t0 = std::time::Instant::now();
            while t0.elapsed() < Duration::from_millis(1100) {
                // SAFETY: a NUL-terminated path; access only reads it.
                unsafe { libc::access(missing.as_ptr(), libc::F_OK) };
            }
        };
        c.read(1);
        rename("js-gen-before");
        fail();
        let slot = &mut c.slots[0];
        drop(slot.tracer.detach());
        slot.attached = false;
        rename("js-gen-after");
        let attached = attach_slot(slot, &mut Sample::default(), &mut Notes::default());
        fail();
        let t = c.read(2);
        rename(own.trim_end());
        assert!(attached, "the tracer attaches again");
        let pid = std::process::id();
        let ours: Vec<&str> = t
            .lookups
            .iter()
            .flat_map(|l| &l.procs)
            .filter(|p| p.pid == pid)
            .map(|p| p.comm.as_str())
            .collect();
        assert_eq!(ours, ["js-gen-after"], "this process's entries");
    }

    /// madvise counted by tlb's flush program is attached, detached and looked at by the census
    /// exactly when tlb is: its marks in the sample (attached, census, idle) must say whether
    /// its calls were being counted.
    #[test]
    fn madvise_counted_in_tlb_follows_tlb() {
        const TEST: &str = "madvise_counted_in_tlb_follows_tlb";
        let names = [Name::parse("tlb").unwrap(), Name::parse("madvise").unwrap()];
        let (mut c, started) = TracerCollector::start_on_demand(&Root::new("/"), &names);
        let how = started
            .iter()
            .map(|s| format!("{}: {:?}", s.name.as_str(), s.outcome))
            .collect::<Vec<_>>()
            .join("; ");
        if c.len() < 2 || !how.contains("tlb tracer's program") {
            return jitterscope_testkit::skip(
                TEST,
                &format!("madvise is not counted by tlb's program here: {how}"),
            );
        }
        c.set_census(Duration::from_secs(2));
        let mut notes = Notes::default();
        let (mut census, mut idle) = (0, 0);
        for secs in 100..108 {
            let mut s = Sample {
                mono_ns: secs * 1_000_000_000,
                ..Default::default()
            };
            c.collect(&mut s, &mut notes);
            let state: Vec<(bool, bool)> = c.slots.iter().map(|s| (s.attached, s.census)).collect();
            assert_eq!(
                state[0], state[1],
                "at {secs} s: (attached, census) of tlb, madvise"
            );
            if let Some(t) = &s.tracers {
                assert_eq!(
                    t.idle.contains(&"tlb".to_string()),
                    t.idle.contains(&"madvise".to_string()),
                    "at {secs} s: idle {:?}",
                    t.idle
                );
                assert_eq!(t.census.len() % 2, 0, "at {secs} s: census {:?}", t.census);
                assert_eq!(t.madvise.is_some(), t.tlb.is_some(), "at {secs} s");
            }
            census += usize::from(state[0].1);
            idle += usize::from(!state[0].0);
        }
        assert!(
            census > 0 && idle > 0,
            "{census} census looks, {idle} idle seconds"
        );
    }

    /// An on-demand tracer whose symptom returns while its last detach is still under way is
    /// attached once that detach is done, even if the symptom has paused by then. Before, the
    /// attach ran at once, the kernel refused it (the programs were still attached), and the
    /// tracer stayed detached until the symptom came back: issue 18's lab lost the first
    /// NSS-probe burst that way.
    #[test]
    fn an_on_demand_tracer_attaches_once_its_detach_is_done() {
        let Some(mut c) =
            lookups_alone("an_on_demand_tracer_attaches_once_its_detach_is_done", true)
        else {
            return;
        };
        c.set_census(Duration::ZERO);
        let mut notes = Notes::default();
        let mut errors = Vec::new();
        // A sample at `secs` (monotonic) with `negative` negative dentries: the symptom is
        // their growth.
        let mut at = |c: &mut TracerCollector, secs: u64, negative: u64| {
            let mut s = Sample {
                mono_ns: secs * 1_000_000_000,
                dentry: Some(jitterscope_sources::system::dentry::DentryState {
                    nr_negative: Some(negative),
                    ..Default::default()
                }),
                ..Default::default()
            };
            c.collect(&mut s, &mut notes);
            errors.extend(s.errors);
            c.slots[0].attached
        };
        assert!(!at(&mut c, 100, 0));
        assert!(!at(&mut c, 101, 0));
        assert!(at(&mut c, 102, 100_000), "attached by the symptom");
        assert!(
            !at(&mut c, 102 + QUIET_SECONDS, 100_000),
            "detached once quiet"
        );
        // The symptom again at once, then a pause: the tracer is attached within a few
        // samples, whenever the detach thread is done.
        let mut attached = at(&mut c, 103 + QUIET_SECONDS, 200_000);
        for k in 0..50 {
            if attached {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
            attached = at(&mut c, 104 + QUIET_SECONDS + k, 200_000);
        }
        assert!(attached, "attached again");
        assert_eq!(errors, Vec::<String>::new(), "errors in the samples");
    }
}
