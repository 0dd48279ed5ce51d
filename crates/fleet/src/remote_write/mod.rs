//! `record --remote-write`: the recorder's samples sent to a Prometheus remote-write receiver
//! (Prometheus, VictoriaMetrics, Mimir, Thanos, Cortex), per second, with the local store as
//! the write-ahead log.
//!
//! The sender runs on its own thread and never delays a sample: the store writer offers it
//! each sample it has written ([`Sender::offer`], which never blocks and drops the offer when
//! the sender is behind). While the sender keeps up, it derives the points from those
//! samples in memory. Whenever what it is offered does not follow what it last took (it was
//! behind, the receiver was down, the recorder restarted), it reads the missing samples back
//! from the store, in order, a bounded batch at a time, so memory stays bounded however long
//! the outage. A cursor file in the store directory (`remote-write.json`: the URL and the
//! newest sample the receiver accepted) survives restarts; it is replaced by rename after
//! every accepted request, so a `kill -9` between a request and its cursor costs at most
//! that request sent twice, with the same timestamps and values. A resumed sender sends one
//! sample per request until one is accepted: Prometheus refuses a whole request when it
//! holds any of its samples already, so the samples it has are refused alone.
//!
//! Failures: a receiver that is down, slow, overloaded (429) or failing (5xx) is retried with
//! exponential backoff (0.5 s doubling to 4 s), holding one encoded request; a refusal (any
//! other 4xx, such as a bad request or wrong credentials) and a target that cannot work (a bad
//! scheme) count the request's points as failed and move on. Each kind of failure is logged
//! once per streak, and the counters are the recorder's own metrics
//! (`self.remote_write.*`).
//!
//! Metadata: each family's type, help and unit go in a request of their own before the first
//! samples and then once a minute, as Prometheus sends them; a failed one is tried again a
//! minute later and never holds samples back.

pub mod batch;
pub mod client;
pub mod proto;

use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jitterscope_model::sample::RemoteWriteStats;
use jitterscope_model::stored::{SampleReader, PREV_LOOKBACK_NS};
use jitterscope_model::Sample;

pub use batch::{Batch, Choice};
pub use client::{Auth, Client, Outcome, Target};

/// Most points in one request: ~1 MB of protobuf before compression, well under every
/// receiver's default limit (Prometheus has none, VictoriaMetrics 32 MB), and the bound on
/// the sender's memory.
pub const MAX_POINTS: usize = 20_000;

/// Most samples in one request.
pub const MAX_SAMPLES: usize = 120;

/// The longest pause between attempts at a receiver that does not answer.
pub const MAX_BACKOFF: Duration = Duration::from_secs(4);

const FIRST_BACKOFF: Duration = Duration::from_millis(500);

/// How often the families' metadata (type, help, unit) is sent: first before the first
/// samples, then as often as Prometheus sends it (`metadata_config.send_interval`, 1 m), in a
/// request of its own, so engines that keep it (Mimir, Cortex) never lose it for long.
pub const METADATA_EVERY: Duration = Duration::from_secs(60);

/// Offers the writer may have waiting before the sender takes them; more are dropped (the
/// sender reads them back from the store).
const OFFERS: usize = 8;

/// The sender's configuration.
pub struct Config {
    /// The receiver.
    pub target: Target,
    /// Labels on every series (`host` and the user's).
    pub labels: Vec<(String, String)>,
    /// The labels of `jitterscope_build_info` (`version`, `revision`).
    pub build: Vec<(String, String)>,
    /// Which series.
    pub choice: Choice,
    /// How long points may wait to be sent with others (a request per this, at most, while
    /// keeping up).
    pub flush: Duration,
    /// The store directory (the write-ahead log, and where the cursor is kept).
    pub dir: PathBuf,
    /// Where to start when no cursor says otherwise (the recorder's start, ns since the
    /// epoch): samples from before it are not sent to a receiver never sent to before.
    pub start_ns: i64,
}

/// A log line from the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Progress.
    Info,
    /// Something failed.
    Warn,
}

/// Where the sender's log lines go.
pub type Log = Box<dyn Fn(Level, &str) + Send>;

/// One written sample offered to the sender, with the time of the sample written before it
/// (`None` for the first of a run).
pub struct Offer {
    /// The time of the previous sample in the store.
    pub prev_ts: Option<i64>,
    /// The sample.
    pub sample: Arc<Sample>,
}

/// Counters shared with the recorder (read into each sample's `RecorderStats`).
#[derive(Default)]
pub struct Stats {
    points_sent: AtomicU64,
    points_failed: AtomicU64,
    requests_failed: AtomicU64,
    bytes_sent: AtomicU64,
    acked_ts_ns: AtomicI64,
}

impl Stats {
    /// The counters now.
    pub fn snapshot(&self) -> RemoteWriteStats {
        RemoteWriteStats {
            points_sent: self.points_sent.load(Ordering::Relaxed),
            points_failed: self.points_failed.load(Ordering::Relaxed),
            requests_failed: self.requests_failed.load(Ordering::Relaxed),
            bytes_sent: self.bytes_sent.load(Ordering::Relaxed),
            acked_ts_ns: self.acked_ts_ns.load(Ordering::Relaxed),
        }
    }
}

/// The counters of several senders as one: sums, and the newest sample the slowest receiver
/// holds (of those that accepted any; one that never did shows in the failures). `None`
/// without a sender.
pub fn combined(stats: &[Arc<Stats>]) -> Option<RemoteWriteStats> {
    let mut all = stats.iter().map(|s| s.snapshot());
    let mut out = all.next()?;
    for s in all {
        out.points_sent += s.points_sent;
        out.points_failed += s.points_failed;
        out.requests_failed += s.requests_failed;
        out.bytes_sent += s.bytes_sent;
        out.acked_ts_ns = match (out.acked_ts_ns, s.acked_ts_ns) {
            (0, b) => b,
            (a, 0) => a,
            (a, b) => a.min(b),
        };
    }
    Some(out)
}

/// The running sender.
pub struct Sender {
    tx: SyncSender<Offer>,
    stats: Arc<Stats>,
    thread: std::thread::JoinHandle<()>,
}

impl Sender {
    /// Starts the sender's thread.
    pub fn start(cfg: Config, log: Log) -> std::io::Result<Sender> {
        let (tx, rx) = sync_channel(OFFERS);
        let stats = Arc::new(Stats::default());
        let st = stats.clone();
        let thread = std::thread::Builder::new()
            .name("remote-write".into())
            .spawn(move || Run::new(cfg, st, log).run(rx))?;
        Ok(Sender { tx, stats, thread })
    }

    /// Offers a written sample; never blocks.
    pub fn offer(&self, prev_ts: Option<i64>, sample: Arc<Sample>) {
        let _ = self.tx.try_send(Offer { prev_ts, sample });
    }

    /// The counters, for the recorder's samples.
    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// Stops the thread after one last attempt at what it holds.
    pub fn stop(self) {
        stop_all(vec![self]);
    }
}

/// Stops senders together: each makes its last attempt at once, so a stop waits for the
/// slowest receiver, not for the sum of them.
pub fn stop_all(senders: Vec<Sender>) {
    let threads: Vec<_> = senders
        .into_iter()
        .map(|s| {
            drop(s.tx);
            s.thread
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

/// The remote-write cursor file's name in the store directory.
const CURSOR: &str = "remote-write.json";

/// The cursor file of a store directory.
pub fn cursor_path(dir: &Path) -> PathBuf {
    crate::cursor::path(dir, CURSOR)
}

fn load_cursor(dir: &Path, url: &str) -> Option<i64> {
    crate::cursor::load(dir, CURSOR, url)
}

fn save_cursor(dir: &Path, url: &str, ts: i64) -> std::io::Result<()> {
    crate::cursor::save(dir, CURSOR, url, ts)
}

/// A request built and not yet accepted.
struct Pending {
    body: Vec<u8>,
    points: usize,
    /// The newest sample in it.
    upto: i64,
    /// Metadata only: sending it moves no cursor.
    metadata: bool,
}

struct Run {
    cfg: Config,
    stats: Arc<Stats>,
    log: Log,
    client: Client,
    batch: Batch,
    /// When the batch got its first sample.
    batch_since: Option<Instant>,
    /// Whether the batch holds samples read back from the store (sent at once: it is
    /// catching up).
    backfilling: bool,
    /// The newest sample taken into a batch, and the sample itself when it is at hand.
    consumed: i64,
    prev: Option<Arc<Sample>>,
    queue: VecDeque<Offer>,
    pending: Option<Pending>,
    next_try: Instant,
    backoff: Duration,
    /// The failures said in this streak, by kind, so each is said once.
    said: HashSet<String>,
    failed_requests_in_streak: u64,
    /// Whether saving the cursor fails (said once until it works again).
    cursor_failing: bool,
    /// Resuming from a cursor: one sample per request until one is accepted (see
    /// [`Run::attempt`]).
    resuming: bool,
    /// When the metadata was last tried.
    metadata_at: Option<Instant>,
    /// Why it failed, until samples are accepted (then it is said).
    metadata_failed: Option<String>,
    /// The metadata's failures said, by kind, until it is accepted again.
    metadata_said: HashSet<String>,
}

impl Run {
    fn new(cfg: Config, stats: Arc<Stats>, log: Log) -> Run {
        let client = Client::new(&cfg.target);
        let mut cursor = load_cursor(&cfg.dir, &cfg.target.url);
        if let Some(c) = cursor.filter(|&c| c >= cfg.start_ns) {
            // The clock went back (or the host was restored from a snapshot): every sample
            // would look already sent. Start from now; the receiver may refuse the overlap.
            log(
                Level::Warn,
                &format!(
                    "remote write: the cursor of {} ({}) is ahead of the clock; sending from now",
                    cfg.target.url,
                    fmt_ts(c)
                ),
            );
            cursor = None;
        }
        let consumed = cursor.unwrap_or(cfg.start_ns - 1);
        if cursor.is_some() {
            // Resuming where the receiver's data ends: anything the store still holds after it.
            log(
                Level::Info,
                &format!(
                    "remote write: resuming after {} (the newest sample {} accepted)",
                    fmt_ts(consumed),
                    cfg.target.url
                ),
            );
        }
        stats
            .acked_ts_ns
            .store(cursor.unwrap_or(0), Ordering::Relaxed);
        let batch = Batch::new(&cfg.labels, &cfg.build);
        Run {
            cfg,
            stats,
            log,
            client,
            batch,
            batch_since: None,
            backfilling: false,
            consumed,
            prev: None,
            queue: VecDeque::new(),
            pending: None,
            next_try: Instant::now(),
            backoff: FIRST_BACKOFF,
            said: HashSet::new(),
            failed_requests_in_streak: 0,
            cursor_failing: false,
            resuming: cursor.is_some(),
            metadata_at: None,
            metadata_failed: None,
            metadata_said: HashSet::new(),
        }
    }

    fn run(mut self, rx: Receiver<Offer>) {
        if let Some(why) = self.client.broken() {
            (self.log)(
                Level::Warn,
                &format!(
                    "remote write: cannot send: {why}; recording goes on, points are counted as failed (self.remote_write.points_failed)"
                ),
            );
        }
        let mut stopping = false;
        let mut more = false;
        while !stopping {
            // Catching up goes request after request, looking for a stop in between.
            let wait = if more { Duration::ZERO } else { self.wait() };
            match rx.recv_timeout(wait) {
                Ok(o) => self.offered(o),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => stopping = true,
            }
            while let Ok(o) = rx.try_recv() {
                self.offered(o);
            }
            more = self.step(stopping);
        }
    }

    /// Keeps an offer while fewer than [`OFFERS`] wait, else lets it go: the offers after it
    /// then do not follow, and the gap is read back from the store. However long the receiver
    /// is down, the sender holds one request and a few samples.
    fn offered(&mut self, o: Offer) {
        if self.queue.len() < OFFERS {
            self.queue.push_back(o);
        }
    }

    /// How long to wait for the next offer.
    fn wait(&self) -> Duration {
        let now = Instant::now();
        if self.pending.is_some() {
            return self.next_try.saturating_duration_since(now);
        }
        match self.batch_since {
            Some(t) => (t + self.cfg.flush).saturating_duration_since(now),
            None => Duration::from_secs(1),
        }
    }

    /// Takes what is offered into batches and sends what is due: one request, then true when
    /// more may be due at once (catching up). When stopping, everything at hand, once.
    fn step(&mut self, stopping: bool) -> bool {
        loop {
            if self.pending.is_none() {
                // Stopping sends what is at hand, not a catch-up from the store: the cursor
                // brings the next run back to the rest.
                self.fill(!stopping);
                let due = !self.batch.is_empty()
                    && (stopping
                        || self.backfilling
                        || self.resuming
                        || self.batch.points() >= MAX_POINTS
                        || self.batch.samples() >= MAX_SAMPLES
                        || self
                            .batch_since
                            .is_some_and(|t| t.elapsed() >= self.cfg.flush));
                if !due {
                    return false;
                }
                if !stopping && self.metadata_due() {
                    self.seal_metadata();
                } else {
                    self.seal();
                }
            }
            if Instant::now() < self.next_try && !stopping {
                return false;
            }
            if !self.attempt() {
                return false;
            }
            if !stopping {
                return true;
            }
            if self.queue.is_empty() && self.batch.is_empty() {
                return false;
            }
        }
    }

    /// Encodes the batch into the pending request.
    fn seal(&mut self) {
        let points = self.batch.points();
        let req = self.batch.take();
        self.pending = Some(Pending {
            body: proto::encode(&req),
            points,
            upto: self.consumed,
            metadata: false,
        });
        self.batch_since = None;
        self.backfilling = false;
    }

    /// Whether the families' metadata is to go before the next samples: never tried, or
    /// [`METADATA_EVERY`] since it last was.
    fn metadata_due(&self) -> bool {
        self.batch.families() > 0
            && self
                .metadata_at
                .is_none_or(|t| t.elapsed() >= METADATA_EVERY)
    }

    /// The metadata of every family sent so far as the pending request; the batch waits.
    fn seal_metadata(&mut self) {
        self.pending = Some(Pending {
            body: proto::encode(&self.batch.metadata()),
            points: 0,
            upto: self.consumed,
            metadata: true,
        });
    }

    /// Tries the pending request; true when it is settled (sent or given up on).
    fn attempt(&mut self) -> bool {
        let Some(p) = &self.pending else {
            return true;
        };
        let outcome = self.client.send(&p.body);
        let (points, upto, bytes) = (p.points as u64, p.upto, p.body.len() as u64);
        if p.metadata {
            return self.settle_metadata(outcome, bytes);
        }
        match outcome {
            Outcome::Sent => {
                self.resuming = false;
                if let Some(why) = self.metadata_failed.take() {
                    self.say_metadata(&why);
                }
                self.stats.points_sent.fetch_add(points, Ordering::Relaxed);
                self.stats.bytes_sent.fetch_add(bytes, Ordering::Relaxed);
                if self.failed_requests_in_streak > 0 {
                    (self.log)(
                        Level::Info,
                        &format!(
                            "remote write: {} accepts again after {} failed requests; sending from the store up to now",
                            self.cfg.target.url, self.failed_requests_in_streak
                        ),
                    );
                }
                self.said.clear();
                self.failed_requests_in_streak = 0;
                self.stats.acked_ts_ns.store(upto, Ordering::Relaxed);
                self.settle(upto);
                true
            }
            Outcome::Reject(why) if self.resuming && already_held(&why) => {
                // The request that was in flight when the recorder last stopped: the receiver
                // took it, the cursor did not say so. Prometheus refuses a whole request for
                // one sample it holds newer data for, so resuming goes one sample per
                // request, and each such refusal is a second the receiver already has.
                if self.said.insert("already held".into()) {
                    (self.log)(
                        Level::Info,
                        &format!(
                            "remote write: {} already holds the seconds after the cursor (sent as the recorder stopped); going on from there",
                            self.cfg.target.url
                        ),
                    );
                }
                self.settle(upto);
                true
            }
            Outcome::Reject(why) => {
                self.stats
                    .points_failed
                    .fetch_add(points, Ordering::Relaxed);
                self.stats.requests_failed.fetch_add(1, Ordering::Relaxed);
                self.say(&why, "refused", points);
                // The points are given up on; what was said stays said until a request
                // gets through, so a receiver refusing every request is said once.
                self.settle(upto);
                true
            }
            Outcome::Retry(why) => {
                self.stats.requests_failed.fetch_add(1, Ordering::Relaxed);
                self.failed_requests_in_streak += 1;
                self.say(&why, "will retry", points);
                self.next_try = Instant::now() + self.backoff;
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                false
            }
        }
    }

    /// The metadata request's outcome. Whatever it is, the samples go next, and the metadata
    /// again in [`METADATA_EVERY`]: samples must not wait behind a description of themselves,
    /// and their own failure is what says points are held back or dropped. Said once per
    /// kind; no points are counted failed, as it holds none.
    fn settle_metadata(&mut self, outcome: Outcome, bytes: u64) -> bool {
        match outcome {
            Outcome::Sent => {
                self.stats.bytes_sent.fetch_add(bytes, Ordering::Relaxed);
                self.metadata_failed = None;
                self.metadata_said.clear();
            }
            Outcome::Retry(why) | Outcome::Reject(why) => {
                self.stats.requests_failed.fetch_add(1, Ordering::Relaxed);
                // Said only if the samples then go through: a receiver that refuses both is
                // said once, by the samples' failure, which is the one that costs points.
                self.metadata_failed = Some(why);
            }
        }
        self.metadata_at = Some(Instant::now());
        self.pending = None;
        true
    }

    /// The request up to `upto` is done with (sent, or given up on): move the cursor past it.
    /// A target that cannot work saves no cursor: it would say nothing of what a receiver
    /// holds.
    fn settle(&mut self, upto: i64) {
        self.pending = None;
        self.backoff = FIRST_BACKOFF;
        self.next_try = Instant::now();
        if self.client.broken().is_some() {
            return;
        }
        match save_cursor(&self.cfg.dir, &self.cfg.target.url, upto) {
            Ok(()) => self.cursor_failing = false,
            Err(e) if !self.cursor_failing => {
                self.cursor_failing = true;
                (self.log)(
                    Level::Warn,
                    &format!(
                        "remote write: cannot save the cursor of {} in {}: {e} (a restart will send again what was sent since)",
                        self.cfg.target.url,
                        self.cfg.dir.display()
                    ),
                );
            }
            Err(_) => {}
        }
    }

    /// Says a failure once per kind per streak: the kind is its text up to the receiver's own
    /// words (the URL and status, or the connection error's first clause).
    fn say(&mut self, why: &str, what: &str, points: u64) {
        // A target that cannot work was said when the sender started.
        if self.client.broken().is_some() {
            return;
        }
        let kind: String = why.split(": ").take(2).collect::<Vec<_>>().join(": ");
        if self.said.insert(kind) {
            (self.log)(
                Level::Warn,
                &format!("remote write: {why} ({what}; {points} points in the request)"),
            );
        }
    }

    /// Says a failure of the metadata of a receiver that takes the samples, once per kind.
    fn say_metadata(&mut self, why: &str) {
        if self.client.broken().is_some() {
            return;
        }
        let kind: String = why.split(": ").take(2).collect::<Vec<_>>().join(": ");
        if self.metadata_said.insert(kind) {
            (self.log)(
                Level::Warn,
                &format!("remote write: {why} (the families' metadata; sent again in a minute)"),
            );
        }
    }

    /// Takes offers, or reads from the store when offers do not follow, into the batch until
    /// it is full or nothing more is at hand.
    fn fill(&mut self, from_store: bool) {
        while !self.full() {
            while self
                .queue
                .front()
                .is_some_and(|o| o.sample.ts_ns <= self.consumed)
            {
                self.queue.pop_front();
            }
            let Some(o) = self.queue.front() else { return };
            let follows = o.prev_ts == Some(self.consumed)
                && self.prev.as_ref().is_some_and(|p| p.ts_ns == self.consumed);
            if follows {
                let o = self.queue.pop_front().expect("front");
                self.batch
                    .add(&self.cfg.choice, &o.sample, self.prev.as_deref());
                self.took(o.sample);
                continue;
            }
            if !from_store {
                return;
            }
            let until = o.sample.ts_ns;
            if !self.backfill(until) {
                // The store gave nothing up to an offered sample (it is unreadable): take the
                // offer rather than stall, against the sample at hand when it is the one before.
                let o = self.queue.pop_front().expect("front");
                let prev = self.prev.as_deref().filter(|p| Some(p.ts_ns) == o.prev_ts);
                self.batch.add(&self.cfg.choice, &o.sample, prev);
                self.took(o.sample);
            }
        }
    }

    /// Whether the batch takes no more: its caps, or one sample while resuming.
    fn full(&self) -> bool {
        self.batch.points() >= MAX_POINTS
            || self.batch.samples() >= MAX_SAMPLES
            || self.resuming && self.batch.samples() >= 1
    }

    fn took(&mut self, s: Arc<Sample>) {
        self.consumed = s.ts_ns;
        self.prev = Some(s);
        self.batch_since.get_or_insert_with(Instant::now);
    }

    /// Reads the samples after `consumed` up to `until` from the store into the batch, as
    /// many as it has room for; false when none could be read.
    fn backfill(&mut self, until: i64) -> bool {
        // The cgroups for `jitterscope_cgroup_info` whatever the choice reads.
        let parts = self
            .cfg
            .choice
            .parts()
            .union(jitterscope_model::codec::Parts::CGROUPS);
        let reader = match SampleReader::open(&self.cfg.dir) {
            Ok(r) => r,
            Err(e) => {
                let why = format!("cannot read the store {}: {e}", self.cfg.dir.display());
                if self.said.insert(why.clone()) {
                    (self.log)(Level::Warn, &format!("remote write: {why}"));
                }
                return false;
            }
        };
        // The sample before the first one sent is needed for rates: the one at hand, or the
        // store's (within the look-back that `dump` uses too, so the values are the same).
        let held = self.prev.take().filter(|p| p.ts_ns == self.consumed);
        let from = if held.is_some() {
            self.consumed + 1
        } else {
            (self.consumed + 1).saturating_sub(PREV_LOOKBACK_NS)
        };
        let Ok(samples) = reader.samples(from, until, parts) else {
            self.prev = held;
            return false;
        };
        let mut before: Option<Sample> = None;
        let mut any = false;
        for cur in samples {
            if cur.ts_ns > self.consumed {
                let prev = before.as_ref().or(held.as_deref());
                self.batch.add(&self.cfg.choice, &cur, prev);
                self.consumed = cur.ts_ns;
                self.batch_since.get_or_insert_with(Instant::now);
                self.backfilling = true;
                any = true;
            }
            before = Some(cur);
            if any && self.full() {
                break;
            }
        }
        self.prev = match before {
            Some(s) if s.ts_ns == self.consumed => Some(Arc::new(s)),
            _ => held,
        };
        any
    }
}

/// Whether a refusal says the receiver holds the sample or newer (Prometheus: "out of order
/// sample", "duplicate sample for timestamp"; Mimir and Cortex: "out-of-order").
fn already_held(why: &str) -> bool {
    let w = why.to_ascii_lowercase();
    w.contains("out of order") || w.contains("out-of-order") || w.contains("duplicate sample")
}

fn fmt_ts(ns: i64) -> String {
    let s = ns.div_euclid(1_000_000_000);
    let ms = ns.rem_euclid(1_000_000_000) / 1_000_000;
    format!("{s}.{ms:03} (Unix time)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cursor_is_kept_per_receiver_and_garbage_is_no_cursor() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert_eq!(load_cursor(d, "http://a/api/v1/write"), None);
        save_cursor(d, "http://a/api/v1/write", 42).unwrap();
        assert_eq!(load_cursor(d, "http://a/api/v1/write"), Some(42));
        // Another receiver starts from the recorder's start, not from a's cursor, and its own
        // cursor leaves a's.
        assert_eq!(load_cursor(d, "http://b/api/v1/write"), None);
        save_cursor(d, "http://b/api/v1/write", 9).unwrap();
        assert_eq!(load_cursor(d, "http://a/api/v1/write"), Some(42));
        assert_eq!(load_cursor(d, "http://b/api/v1/write"), Some(9));
        // A torn or foreign file is no cursor (the sender starts from now), never a panic.
        for junk in [&b""[..], b"{", b"null", b"{\"receivers\":1}", &[0xff; 64]] {
            std::fs::write(cursor_path(d), junk).unwrap();
            assert_eq!(load_cursor(d, "http://a/api/v1/write"), None);
        }
        // No temporary file is left behind by a save.
        save_cursor(d, "http://a/api/v1/write", 7).unwrap();
        let names: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["remote-write.json"]);
    }
}

#[cfg(test)]
mod catch_up {
    use super::*;
    use jitterscope_model::signals::SignalRecord;
    use jitterscope_model::stored::Encoder;
    use jitterscope_sources::system::loadavg::LoadAvg;
    use jitterscope_store::{StoreConfig, Writer};
    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::atomic::AtomicUsize;

    /// What a receiver was sent, in order.
    type Bodies = Arc<std::sync::Mutex<Vec<proto::WriteRequest>>>;

    /// A receiver that takes `delay` per request and accepts it: the number of requests, and
    /// what they held.
    fn slow_receiver(delay: Duration) -> (String, Arc<AtomicUsize>, Bodies) {
        receiver(delay, false)
    }

    /// A receiver as [`slow_receiver`], which refuses metadata with a 400 when `no_metadata`.
    fn receiver(delay: Duration, no_metadata: bool) -> (String, Arc<AtomicUsize>, Bodies) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/api/v1/write", l.local_addr().unwrap());
        let n = Arc::new(AtomicUsize::new(0));
        let seen = n.clone();
        let bodies = Bodies::default();
        let kept = bodies.clone();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(c) = c else { continue };
                let (seen, kept) = (seen.clone(), kept.clone());
                std::thread::spawn(move || {
                    let mut r = BufReader::new(c.try_clone().unwrap());
                    let mut w = c;
                    loop {
                        let mut len = 0;
                        loop {
                            let mut line = String::new();
                            if r.read_line(&mut line).unwrap_or(0) == 0 {
                                return;
                            }
                            if let Some(v) =
                                line.to_ascii_lowercase().strip_prefix("content-length:")
                            {
                                len = v.trim().parse().unwrap_or(0);
                            }
                            if line == "\r\n" {
                                break;
                            }
                        }
                        let mut body = vec![0; len];
                        if r.read_exact(&mut body).is_err() {
                            return;
                        }
                        std::thread::sleep(delay);
                        let req = proto::decode(&body).unwrap();
                        let answer: &[u8] = if no_metadata && req.timeseries.is_empty() {
                            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 3\r\n\r\nno\n"
                        } else {
                            b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n"
                        };
                        kept.lock().unwrap().push(req);
                        seen.fetch_add(1, Ordering::SeqCst);
                        if w.write_all(answer).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (url, n, bodies)
    }

    /// A store of `n` samples one second apart from a far-future `t0` (load1 = i), and `t0`.
    fn store_of(n: i64) -> (tempfile::TempDir, i64) {
        let dir = tempfile::tempdir().unwrap();
        let mut c = StoreConfig::new(dir.path());
        c.retain = Duration::from_secs(100 * 365 * 86400);
        let mut w = Writer::open(c).unwrap();
        let mut enc = Encoder::new();
        let t0 = 1_000_000_000_000_000_000i64;
        for i in 0..n {
            let mut s = Sample {
                ts_ns: t0 + i * 1_000_000_000,
                mono_ns: (i as u64 + 1) * 1_000_000_000,
                loadavg: Some(LoadAvg {
                    load1: i as f64,
                    ..Default::default()
                }),
                ..Default::default()
            };
            let e = enc.encode(&mut s, &SignalRecord::default()).unwrap();
            w.append_lanes(s.ts_ns, e.main, &e.lanes).unwrap();
        }
        w.close().unwrap();
        (dir, t0)
    }

    /// A sender's configuration for `url` and the store `dir`, everything else the tests'
    /// usual: no credentials, `host="t"`, the default choice without processes.
    fn config(url: &str, dir: &Path) -> Config {
        Config {
            target: Target {
                url: url.to_string(),
                auth: Auth::None,
                ca_file: None,
                timeout: Duration::from_secs(5),
                headers: Vec::new(),
            },
            labels: vec![("host".into(), "t".into())],
            build: Vec::new(),
            choice: Choice::new(0),
            flush: Duration::from_secs(5),
            dir: dir.to_path_buf(),
            start_ns: 0,
        }
    }

    /// Offers the store's sample at `ts` as the one just written.
    fn offer_newest(sender: &Sender, dir: &Path, ts: i64) {
        let last = SampleReader::open(dir)
            .unwrap()
            .samples(ts, i64::MAX, jitterscope_model::codec::Parts::ALL)
            .unwrap()
            .next()
            .unwrap();
        sender.offer(Some(last.ts_ns - 1_000_000_000), Arc::new(last));
    }

    #[test]
    fn a_stop_during_a_long_catch_up_is_prompt_and_the_cursor_says_how_far() {
        // 2,000 seconds behind: a catch-up of 17 requests of 120 samples at 200 ms each.
        let (dir, t0) = store_of(2000);
        let (url, requests, bodies) = slow_receiver(Duration::from_millis(200));
        save_cursor(dir.path(), &url, t0 - 1).unwrap();
        let sender = Sender::start(
            Config {
                flush: Duration::from_secs(5),
                start_ns: t0 + 2000 * 1_000_000_000,
                ..config(&url, dir.path())
            },
            Box::new(|_, _| {}),
        )
        .unwrap();
        // The newest sample is offered: it does not follow the cursor, so the store is read.
        offer_newest(&sender, dir.path(), t0 + 1999 * 1_000_000_000);
        std::thread::sleep(Duration::from_millis(700));
        let stats = sender.stats();
        let asked = Instant::now();
        sender.stop();
        let took = asked.elapsed();
        // The stop ends the catch-up: a sender that finished it first would have made all 17
        // requests (and the metadata's) before `stop` returned.
        let n = requests.load(Ordering::SeqCst);
        assert!((3..18).contains(&n), "{n} requests; stop took {took:?}");
        // The metadata went first, on its own; the samples after it.
        let sent = bodies.lock().unwrap().clone();
        assert!(sent[0].timeseries.is_empty() && !sent[0].metadata.is_empty());
        assert!(sent[1..]
            .iter()
            .all(|r| r.metadata.is_empty() && !r.timeseries.is_empty()));
        // The cursor is where the receiver's data ends, in order from the start.
        let cur = load_cursor(dir.path(), &url).unwrap();
        assert_eq!(cur, stats.snapshot().acked_ts_ns);
        // Resuming, the first request is one sample; the others are full.
        assert_eq!(
            (cur - t0) / 1_000_000_000 + 1,
            1 + (n as i64 - 2) * MAX_SAMPLES as i64
        );
    }

    /// A receiver that takes the samples and refuses the metadata: said once, and the samples
    /// are all there.
    #[test]
    fn refused_metadata_is_said_once_and_holds_nothing_back() {
        let (sent, log) = send_five(true);
        assert_eq!(sent.len(), 2);
        assert!(!sent[1].timeseries.is_empty());
        let said: Vec<&String> = log.iter().filter(|l| l.contains("metadata")).collect();
        assert_eq!(said.len(), 1, "{log:?}");
        assert!(said[0].contains("HTTP 400"), "{said:?}");
    }

    /// Five samples in a store, sent to a receiver (refusing metadata when `no_metadata`):
    /// the requests it got, and the sender's log.
    fn send_five(no_metadata: bool) -> (Vec<proto::WriteRequest>, Vec<String>) {
        let (dir, t0) = store_of(5);
        let (url, _, bodies) = receiver(Duration::ZERO, no_metadata);
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let lines = log.clone();
        let sender = Sender::start(
            Config {
                build: vec![("version".into(), "1".into())],
                flush: Duration::from_millis(100),
                start_ns: t0,
                ..config(&url, dir.path())
            },
            Box::new(move |_, l| lines.lock().unwrap().push(l.to_string())),
        )
        .unwrap();
        offer_newest(&sender, dir.path(), t0 + 4 * 1_000_000_000);
        std::thread::sleep(Duration::from_millis(1500));
        sender.stop();
        // The samples' request moved the cursor to the last sample, the metadata's nothing.
        assert_eq!(load_cursor(dir.path(), &url), Some(t0 + 4 * 1_000_000_000));
        let sent = bodies.lock().unwrap().clone();
        let log = log.lock().unwrap().clone();
        (sent, log)
    }

    /// Each family's type, help and unit go first, then again once a minute, never with
    /// samples and never moving the cursor.
    #[test]
    fn metadata_goes_first_on_its_own() {
        let (sent, log) = send_five(false);
        assert!(log.iter().all(|l| !l.contains("metadata")), "{log:?}");
        assert_eq!(sent.len(), 2, "{sent:?}");
        let meta = &sent[0].metadata;
        assert!(sent[0].timeseries.is_empty());
        let family = |name: &str| {
            meta.iter()
                .find(|m| m.metric_family_name == name)
                .unwrap_or_else(|| panic!("no metadata of {name}: {meta:?}"))
        };
        let load = family("jitterscope_load_avg1");
        assert_eq!(load.r#type, proto::MetricType::Gauge as i32);
        assert!(load.help.contains("load"), "{load:?}");
        assert_eq!(
            family("jitterscope_build_info").r#type,
            proto::MetricType::Info as i32
        );
        // Every series sent has its family described, and nothing else is.
        let mut names: Vec<&str> = sent[1]
            .timeseries
            .iter()
            .map(|t| t.labels[0].value.as_str())
            .collect();
        names.sort();
        names.dedup();
        let described: Vec<&str> = meta.iter().map(|m| m.metric_family_name.as_str()).collect();
        assert_eq!(names, described);
    }

    #[test]
    fn several_senders_sum_and_the_slowest_receiver_sets_the_lag() {
        assert_eq!(combined(&[]), None);
        let st = |sent, failed, acked| {
            let s = Stats::default();
            s.points_sent.store(sent, Ordering::Relaxed);
            s.points_failed.store(failed, Ordering::Relaxed);
            s.requests_failed.store(failed / 10, Ordering::Relaxed);
            s.bytes_sent.store(sent * 2, Ordering::Relaxed);
            s.acked_ts_ns.store(acked, Ordering::Relaxed);
            Arc::new(s)
        };
        let c = combined(&[st(100, 0, 30), st(50, 20, 10), st(0, 40, 0)]).unwrap();
        assert_eq!(
            c,
            RemoteWriteStats {
                points_sent: 150,
                points_failed: 60,
                requests_failed: 6,
                bytes_sent: 300,
                acked_ts_ns: 10,
            }
        );
        // A receiver that never accepted leaves the others' lag, in either order.
        assert_eq!(
            combined(&[st(0, 0, 0), st(1, 0, 7)]).unwrap().acked_ts_ns,
            7
        );
    }
}
