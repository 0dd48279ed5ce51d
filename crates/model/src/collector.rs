//! Collection: the `Collector` trait, the single missing-data policy, and the one list of
//! every source ([`crate::sources::collectors`]). A new source is a reader in
//! `jitterscope-sources`, a field of the sample and one line in that list (docs/ARCHITECTURE.md,
//! "How to add a collector").

use std::collections::HashSet;
use std::time::{Duration, Instant};

use jitterscope_sources::fileio::ReadError;
use jitterscope_sources::system::SystemReader;
use jitterscope_sources::Root;

use crate::sample::Sample;

/// Messages about what cannot be collected, each said once per recorder run rather than every
/// second, plus a count of errors for the self-metrics.
#[derive(Debug, Default)]
pub struct Notes {
    said: HashSet<String>,
    pending: Vec<String>,
    /// Source errors since start (parse failures, unexpected I/O errors).
    pub errors_total: u64,
}

impl Notes {
    /// Queues `msg` unless a message with `key` was already queued in this run.
    pub fn once(&mut self, key: &str, msg: impl FnOnce() -> String) {
        if !self.said.contains(key) {
            self.said.insert(key.to_string());
            self.pending.push(msg());
        }
    }

    /// Takes the messages queued since the last call.
    pub fn drain(&mut self) -> Vec<String> {
        std::mem::take(&mut self.pending)
    }

    /// Applies the missing-data policy to one read of source `name`: absent data is noted once
    /// and yields `None`; permission problems likewise (with the remedy); anything else (a
    /// malformed file, an I/O error) is counted, noted once per source, recorded in the sample's
    /// error list, and yields `None` so one bad file never costs the rest of the sample.
    pub fn handle<T>(
        &mut self,
        name: &str,
        sample: &mut Sample,
        r: Result<T, ReadError>,
    ) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) if e.is_missing() => {
                self.once(&format!("missing:{name}"), || {
                    format!(
                        "{name}: not collected: {} does not exist on this host",
                        e.path().display()
                    )
                });
                None
            }
            Err(e) if e.is_permission() => {
                self.once(&format!("perm:{name}"), || {
                    format!(
                        "{name}: not collected: permission denied on {} (run as root)",
                        e.path().display()
                    )
                });
                None
            }
            Err(e) => {
                self.errors_total += 1;
                let msg = e.to_string();
                self.once(&format!("err:{name}"), || {
                    format!("{name}: {msg} (will keep trying)")
                });
                if sample.errors.len() < 32 {
                    sample.errors.push(format!("{name}: {msg}"));
                }
                None
            }
        }
    }
}

/// A source of one part of the sample.
pub trait Collector: Send {
    /// Short name used in notes and self-metrics (`stat`, `cgroups`, `processes`).
    fn name(&self) -> &'static str;
    /// Reads the source into its part of `sample`; failures go through `notes`.
    fn collect(&mut self, sample: &mut Sample, notes: &mut Notes);
    /// How often to collect: `Duration::ZERO` (the default) means every interval. A source that
    /// is expensive to read, or disturbs the host when read, can ask for less.
    fn period(&self) -> Duration {
        Duration::ZERO
    }
}

/// A collector of one system file, read through the sources' [`SystemReader`] (which knows the
/// path and the parser): most system sources are this.
pub struct SystemCollector<T> {
    name: &'static str,
    reader: SystemReader,
    read: fn(&mut SystemReader) -> Result<T, ReadError>,
    put: fn(&mut Sample, T),
    period: Duration,
}

impl<T: Send + 'static> SystemCollector<T> {
    /// Like [`SystemCollector::boxed`], collected at most once per `period`.
    pub fn boxed_every(
        root: &Root,
        name: &'static str,
        read: fn(&mut SystemReader) -> Result<T, ReadError>,
        put: fn(&mut Sample, T),
        period: Duration,
    ) -> Box<dyn Collector> {
        Box::new(SystemCollector {
            name,
            reader: SystemReader::new(root.clone()),
            read,
            put,
            period,
        })
    }

    /// A collector named `name` that reads with `read` and stores with `put`.
    pub fn boxed(
        root: &Root,
        name: &'static str,
        read: fn(&mut SystemReader) -> Result<T, ReadError>,
        put: fn(&mut Sample, T),
    ) -> Box<dyn Collector> {
        Self::boxed_every(root, name, read, put, Duration::ZERO)
    }
}

impl<T: Send> Collector for SystemCollector<T> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn collect(&mut self, sample: &mut Sample, notes: &mut Notes) {
        let r = (self.read)(&mut self.reader);
        if let Some(v) = notes.handle(self.name, sample, r) {
            (self.put)(sample, v);
        }
    }

    fn period(&self) -> Duration {
        self.period
    }
}

/// The registered collectors with their schedule.
pub struct CollectorSet {
    items: Vec<(Box<dyn Collector>, Option<u64>)>,
}

impl CollectorSet {
    /// A set of `collectors`, each first run at the next collection.
    pub fn new(collectors: Vec<Box<dyn Collector>>) -> Self {
        CollectorSet {
            items: collectors.into_iter().map(|c| (c, None)).collect(),
        }
    }

    /// Adds a collector after the others (sources that live outside this crate, like the BPF
    /// tracers).
    pub fn push(&mut self, c: Box<dyn Collector>) {
        self.items.push((c, None));
    }

    /// Puts `c` in the place of the collector of the same name (an alternative reader of the
    /// same source, such as the BPF task iterator for `processes`), keeping the collection
    /// order; false, and `c` dropped, when there is none.
    pub fn replace(&mut self, c: Box<dyn Collector>) -> bool {
        match self
            .items
            .iter_mut()
            .find(|(old, _)| old.name() == c.name())
        {
            Some(slot) => {
                *slot = (c, None);
                true
            }
            None => false,
        }
    }

    /// Number of collectors.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Runs every collector that is due (by `sample.mono_ns`) into `sample`, recording how long
    /// each took.
    pub fn collect(&mut self, sample: &mut Sample, notes: &mut Notes) {
        for (c, last) in self.items.iter_mut() {
            let period = c.period().as_nanos() as u64;
            // Half an interval of slack so a period of 5 s at 1 s intervals is every 5th sample
            // even when a wake-up is a little early.
            let slack = sample.interval_ns / 2;
            if let Some(l) = *last {
                if period > 0 && sample.mono_ns.saturating_sub(l) + slack < period {
                    continue;
                }
            }
            *last = Some(sample.mono_ns);
            let t = Instant::now();
            c.collect(sample, notes);
            let ns = crate::time::self_timing_ns(t.elapsed().as_nanos() as u64);
            sample.collector_ns.push((c.name().to_string(), ns));
        }
    }
}
