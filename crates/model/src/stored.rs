//! Samples in the store: the one way they are written ([`SampleWriter`]) and read back
//! ([`SampleReader`]).
//!
//! Every reader of samples (`dump`, diagnosis, episode detection, the lab's signatures, `serve`,
//! the terminal views, the flame graphs) goes through [`SampleReader`], so they share one policy
//! for damage: a record whose payload does not decode, a record or frame the store found
//! corrupt, or a segment the store cannot read at all (with the first such error) is skipped
//! and counted in [`Damage`], never fatal; the caller reports it once (`dump`, `events` and
//! `flame` on stderr, `diagnose` in its report, `serve` in its answers and headers).
//!
//! The process table of each record but the first of a store frame is written relative to the
//! one before it ([`codec::CODEC_COLUMNS_DELTA`]), so a read takes the detail lane from the
//! start of each frame it touches ([`Reader::range_in_context`]) and feeds every table to a
//! [`DetailChain`] in order; only the records in the range are decoded whole.

use std::path::Path;

use jitterscope_sources::process::Process;
use jitterscope_store::{Lane, Range, Reader, Record, StoreError, Writer};

use crate::codec::{self, CodecError, DetailChain, DetailEncoder, Parts};
use crate::sample::Sample;
use crate::signals::SignalRecord;

/// How far before a range's first sample a reader looks for the sample its rates need.
pub const PREV_LOOKBACK_NS: i64 = 5_000_000_000;

/// Records a read skipped, and what that lost.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Damage {
    /// Records whose payload did not decode (damaged, or written by an incompatible build).
    pub undecodable: u64,
    /// Records whose CRC did not match, and zstd frames that did not decompress (the store
    /// skips them; a crash leaves a torn frame at most).
    pub corrupt: u64,
    /// Of `corrupt`, the zstd frames.
    pub frames: u64,
    /// Segment or lane files the store could not read from some point on (a damaged header, a
    /// version this build does not read, an I/O error): their rest is skipped, other segments
    /// are read.
    pub unreadable: u64,
    /// Samples known lost in the range: those the index of a damaged frame or file counts and
    /// the read did not get, and records whose CRC failed (undecodable ones are apart). Damage
    /// outside any index is not countable: see `lost`.
    pub samples_lost: u64,
    /// When samples were lost, merged spans within the range read. A span whose end is unknown
    /// is one instant (lost after it).
    pub lost: Vec<LostSpan>,
    /// The damaged files met (at most [`MAX_FILES`]), with what was wrong and what the read
    /// did: a damaged index is ignored and its segment scanned, a damaged lane read around.
    pub files: Vec<DamagedFile>,
    /// Process tables that did not decode while their record did (damaged, or a table written
    /// relative to one before it in its frame that was lost): those samples have no processes.
    /// Left out of JSON when 0 (stores before delta tables never had any).
    #[serde(skip_serializing_if = "is_zero")]
    pub tables_lost: u64,
    /// The first of the unreadable files' errors, for the note.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    /// Series names in the signals lane that this build knows under no metric (a metric
    /// renamed without its old name as an alias, or one a newer build added): each is left
    /// out of the read, and counted here once. Left out of JSON when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub unknown_series: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The most damaged files a [`Damage`] names; a store with more has bigger problems than its
/// list, and `store check` lists them all.
pub const MAX_FILES: usize = 16;

/// How the store describes a file it gave up on (see `files`).
const UNREADABLE: &str = "unreadable";

/// A span of time in which samples were lost.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LostSpan {
    /// Start, ns since the epoch.
    pub from_ns: i64,
    /// End, ns since the epoch.
    pub to_ns: i64,
    /// Start, RFC 3339 UTC.
    pub from: String,
    /// End, RFC 3339 UTC.
    pub to: String,
}

impl LostSpan {
    fn new(from_ns: i64, to_ns: i64) -> Self {
        LostSpan {
            from_ns,
            to_ns,
            from: crate::time::rfc3339(from_ns),
            to: crate::time::rfc3339(to_ns),
        }
    }
}

/// A damaged file a read met.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DamagedFile {
    /// The file.
    pub file: String,
    /// What was wrong with it, and what the read did.
    pub what: String,
}

impl Damage {
    /// Whether anything was skipped or found damaged. Series under names this build does not
    /// know are not damage ([`Damage::note`] says them all the same).
    pub fn is_empty(&self) -> bool {
        !self.lost_any() && self.files.is_empty()
    }

    /// Whether any sample was lost (a damaged file read around without loss, such as an index
    /// that was ignored, is not a loss).
    pub fn lost_any(&self) -> bool {
        self.undecodable > 0
            || self.tables_lost > 0
            || self.corrupt > 0
            || self.unreadable > 0
            || self.samples_lost > 0
            || !self.lost.is_empty()
    }

    /// Adds another read's counts.
    pub fn add(&mut self, o: &Damage) {
        self.undecodable += o.undecodable;
        self.tables_lost += o.tables_lost;
        self.corrupt += o.corrupt;
        self.frames += o.frames;
        self.unreadable += o.unreadable;
        self.samples_lost += o.samples_lost;
        self.unknown_series += o.unknown_series;
        let spans: Vec<(i64, i64)> = self
            .lost
            .iter()
            .chain(&o.lost)
            .map(|s| (s.from_ns, s.to_ns))
            .collect();
        self.lost = merge(spans);
        for f in &o.files {
            self.add_file(f.clone());
        }
        if self.first_error.is_none() {
            self.first_error.clone_from(&o.first_error);
        }
    }

    fn add_file(&mut self, f: DamagedFile) {
        if self.files.len() < MAX_FILES && !self.files.contains(&f) {
            self.files.push(f);
        }
    }

    /// Counts a file the store gave up on, keeping the first error.
    pub fn unreadable(&mut self, e: StoreError) {
        self.unreadable += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e.to_string());
        }
    }

    /// One line for people, when anything was skipped or found damaged, or left out of the
    /// read as unknown.
    pub fn note(&self) -> Option<String> {
        let unknown = (self.unknown_series > 0).then(|| {
            format!(
                "left out {} series of the signals lane under names this build does not know \
                 (written by a newer build, or a metric renamed without an alias)",
                self.unknown_series
            )
        });
        match (self.damage_note(), unknown) {
            (Some(d), Some(u)) => Some(format!("{d}; {u}")),
            (d, u) => d.or(u),
        }
    }

    fn damage_note(&self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let mut parts = Vec::new();
        if self.samples_lost > 0 || !self.lost.is_empty() {
            let count = if self.samples_lost > 0 {
                format!("{} samples", self.samples_lost)
            } else {
                "samples (not countable)".to_string()
            };
            let when = match self.lost.first() {
                Some(s) if s.from_ns == s.to_ns => format!(" after {}", s.from),
                Some(s) => format!(" in {} .. {}", s.from, s.to),
                None => String::new(),
            };
            let more = match self.lost.len() {
                0 | 1 => String::new(),
                n => format!(" and {} more spans", n - 1),
            };
            parts.push(format!("lost {count}{when}{more}"));
        }
        if self.undecodable > 0 {
            parts.push(format!("{} undecodable samples", self.undecodable));
        }
        if self.tables_lost > 0 {
            parts.push(format!(
                "{} samples without their processes (process table unreadable)",
                self.tables_lost
            ));
        }
        if self.corrupt > 0 {
            parts.push(format!("{} corrupt records or frames", self.corrupt));
        }
        if self.unreadable > 0 {
            parts.push(format!(
                "the rest of {} unreadable store files (error: {})",
                self.unreadable,
                self.first_error.as_deref().unwrap_or("unknown")
            ));
        }
        // The unreadable files are said above with their error.
        let read_around: Vec<&DamagedFile> = self
            .files
            .iter()
            .filter(|f| !f.what.starts_with(UNREADABLE))
            .collect();
        if let Some(f) = read_around.first() {
            let name = Path::new(&f.file)
                .file_name()
                .map_or(f.file.clone(), |n| n.to_string_lossy().into_owned());
            let more = match read_around.len() {
                1 => String::new(),
                n => format!(" (+{} more files)", n - 1),
            };
            parts.push(format!("damaged {name}: {}{more}", f.what));
        }
        Some(format!(
            "skipped damaged data: {}; `jitterscope store check` lists it",
            parts.join(", ")
        ))
    }
}

/// Spans sorted and merged where they overlap or touch.
fn merge(v: Vec<(i64, i64)>) -> Vec<LostSpan> {
    jitterscope_store::merge_touching(v)
        .into_iter()
        .map(|(a, b)| LostSpan::new(a, b))
        .collect()
}

/// A sample and the one before it, when there is one.
pub type Pair = (Sample, Option<Sample>);

/// Reads samples from a store directory.
#[derive(Debug, Clone)]
pub struct SampleReader {
    reader: Reader,
}

impl SampleReader {
    /// A reader of the store at `dir`.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, StoreError> {
        Ok(SampleReader {
            reader: Reader::open(dir)?,
        })
    }

    /// The store's own reader (record times, bounds, lanes).
    pub fn store(&self) -> &Reader {
        &self.reader
    }

    /// The samples recorded in `[from, to]`, decoded with `parts`. The detail lane (processes)
    /// is read only when `parts` has processes.
    pub fn samples(&self, from: i64, to: i64, parts: Parts) -> Result<Samples, StoreError> {
        self.samples_lanes(from, to, parts, parts.contains(Parts::PROCESSES))
    }

    /// Like [`samples`](SampleReader::samples), reading the detail lane when `detail` (for a
    /// caller that picks the parts per record with [`Samples::next_with`]).
    pub fn samples_lanes(
        &self,
        from: i64,
        to: i64,
        parts: Parts,
        detail: bool,
    ) -> Result<Samples, StoreError> {
        let range = if detail {
            self.reader.range_in_context(from, to)?
        } else {
            self.reader.range_main(from, to)?
        };
        Ok(Samples {
            range,
            from,
            to,
            detail,
            parts,
            damage: Damage::default(),
            lead: None,
            next_up: None,
            chain: DetailChain::default(),
            waiting: Vec::new(),
        })
    }

    /// Each sample of `[from, to]` with the one before it (from up to [`PREV_LOOKBACK_NS`]
    /// earlier for the first), for rates. Of the records before `from`, only the newest that
    /// decodes is decoded; those older than it are not read into the damage either.
    pub fn pairs(&self, from: i64, to: i64, parts: Parts) -> Result<Pairs, StoreError> {
        let mut samples = self.samples(from.saturating_sub(PREV_LOOKBACK_NS), to, parts)?;
        samples.lead = Some(Lead {
            from,
            held: Vec::new(),
        });
        Ok(Pairs {
            samples: Source::Here(Box::new(samples)),
            from,
            cur: None,
            prev: None,
        })
    }

    /// The newest sample that decodes and the one before it (up to five minutes back: rates
    /// refuse longer gaps anyway), with what was skipped. A damaged newest record costs the
    /// newest sample, not the answer.
    pub fn latest_pair(&self, parts: Parts) -> Result<(Option<Pair>, Damage), StoreError> {
        let mut damage = Damage::default();
        let Some(last) = self.reader.latest_ts()? else {
            return Ok((None, damage));
        };
        // A few seconds back at any usual interval; each window read decompresses its frames.
        let mut got: Vec<Sample> = Vec::new();
        for back in [
            10_000_000_000,
            crate::derive::MAX_RATE_GAP_S as i64 * 1_000_000_000,
        ] {
            let mut s = self.samples(last - back, last, parts)?;
            got = s.by_ref().collect();
            damage.add(&s.damage());
            if got.len() >= 2 {
                break;
            }
        }
        let pair = got.pop().map(|cur| (cur, got.pop()));
        Ok((pair, damage))
    }

    /// The record at exactly `ts` decoded with `parts` (the first such record).
    pub fn sample_at(
        &self,
        ts: i64,
        parts: Parts,
        damage: &mut Damage,
    ) -> Result<Option<Sample>, StoreError> {
        let mut s = self.samples(ts, ts, parts)?;
        let found = s.by_ref().find(|x| x.ts_ns == ts);
        damage.add(&s.damage());
        Ok(found)
    }

    /// The signals-lane records of `[from, to]`.
    pub fn signals(&self, from: i64, to: i64) -> Result<SignalRecords, StoreError> {
        Ok(SignalRecords {
            range: self.reader.range_lane(Lane::Signals, from, to)?,
            damage: Damage::default(),
        })
    }
}

/// The samples of a range, damage skipped and counted.
pub struct Samples {
    range: Range,
    /// The store range read: with the detail lane, records outside it are context.
    from: i64,
    to: i64,
    detail: bool,
    parts: Parts,
    damage: Damage,
    lead: Option<Lead>,
    /// A sample decoded while the lead was resolved, handed out after the lead's.
    next_up: Option<Sample>,
    /// The process tables read so far, for the next delta table.
    chain: DetailChain,
    /// Tables of context records not yet fed to the chain: since the last self-contained one,
    /// and fed only when a record of the range needs them (a frame's records after the range
    /// are never decoded).
    waiting: Vec<(i64, Vec<u8>)>,
}

/// The records before a pair read's first sample, of which only the newest that decodes is
/// wanted (as that sample's `prev`). They are held undecoded until a record at or after `from`
/// (or the range's end) shows which is newest: decoding a sample is most of a read's work, and
/// at one-second samples the lookback holds five of them.
struct Lead {
    from: i64,
    held: Vec<Record>,
}

impl Samples {
    /// The next record that decodes, with the parts `choose` picks from its time.
    pub fn next_with(&mut self, choose: impl Fn(i64) -> Parts) -> Option<Sample> {
        if let Some(s) = self.next_up.take() {
            return Some(s);
        }
        loop {
            if crate::cancel::cancelled() {
                return None;
            }
            let Some(got) = self.range.next() else {
                // Only records before `from`: the newest that decodes is all the caller needs.
                let held = self.lead.take()?.held;
                return self.newest_of(held, &choose);
            };
            match got {
                Ok(rec) => {
                    if self.detail && !(self.from..=self.to).contains(&rec.ts_ns) {
                        self.wait(rec);
                        continue;
                    }
                    if let Some(lead) = self.lead.as_mut().filter(|l| rec.ts_ns < l.from) {
                        lead.held.push(rec);
                        continue;
                    }
                    // The first record at or after `from`: the one before it goes first.
                    if let Some(lead) = self.lead.take() {
                        if let Some(before) = self.newest_of(lead.held, &choose) {
                            self.next_up = self.decode(&rec, choose(rec.ts_ns));
                            return Some(before);
                        }
                    }
                    if let Some(s) = self.decode(&rec, choose(rec.ts_ns)) {
                        return Some(s);
                    }
                }
                // The store gives up on that segment only; the next call reads the next one.
                Err(e) => self.damage.unreadable(e),
            }
        }
    }

    /// The newest of `held` (in read order) that decodes; those newer than it that do not
    /// decode are counted, older ones are outside the read and never looked at (but for their
    /// process tables, which the chain needs in order: a sample that stands in for a newest
    /// one that does not decode has no processes).
    fn newest_of(&mut self, held: Vec<Record>, choose: &impl Fn(i64) -> Parts) -> Option<Sample> {
        let n = held.len();
        let mut newest_table = None;
        for (i, rec) in held.iter().enumerate() {
            let want = i + 1 == n && choose(rec.ts_ns).contains(Parts::PROCESSES);
            let t = self.table(rec, want);
            if i + 1 == n {
                newest_table = t;
            }
        }
        held.iter().rev().enumerate().find_map(|(back, rec)| {
            let table = if back == 0 { newest_table.take() } else { None };
            self.decode_main(rec, choose(rec.ts_ns), table)
        })
    }

    /// Holds a context record's table until a record of the range needs it.
    fn wait(&mut self, rec: Record) {
        let Some(d) = rec.detail else { return };
        if DetailChain::self_contained(&d) {
            self.waiting.clear();
        }
        self.waiting.push((rec.ts_ns, d));
    }

    /// The process table of `rec` from the chain (when `want`; the chain moves on either way),
    /// the waiting context tables fed first.
    fn table(&mut self, rec: &Record, want: bool) -> Option<Vec<Process>> {
        let d = rec.detail.as_deref()?;
        for (ts, w) in std::mem::take(&mut self.waiting) {
            // A context record's own loss is outside the range: what it costs is counted on
            // the records of the range that needed it.
            let _ = self.chain.advance(ts, &w);
        }
        let got = match want {
            true => self.chain.decode(rec.ts_ns, d),
            false => self.chain.advance(rec.ts_ns, d).map(|()| None),
        };
        got.unwrap_or_else(|_| {
            self.damage.tables_lost += 1;
            None
        })
    }

    /// Decodes a record of the range, its process table from the chain.
    fn decode(&mut self, rec: &Record, parts: Parts) -> Option<Sample> {
        let table = self.table(rec, parts.contains(Parts::PROCESSES));
        self.decode_main(rec, parts, table)
    }

    /// Decodes a record's main payload and gives it `table` (payloads from before the detail
    /// lane hold their processes themselves); counted when it does not decode.
    fn decode_main(
        &mut self,
        rec: &Record,
        parts: Parts,
        table: Option<Vec<Process>>,
    ) -> Option<Sample> {
        match codec::decode_parts(&rec.payload, parts) {
            Ok(mut s) => {
                if parts.contains(Parts::PROCESSES) && s.processes.is_none() {
                    s.processes = table;
                }
                Some(s)
            }
            Err(_) => {
                self.damage.undecodable += 1;
                None
            }
        }
    }

    /// What was skipped so far, the store's own findings included.
    pub fn damage(&self) -> Damage {
        with_store(&self.damage, &self.range)
    }
}

/// What the store skipped in `range` (a caller that reads the store's records itself).
pub fn store_damage(range: &Range) -> Damage {
    with_store(&Damage::default(), range)
}

/// `d` plus what the store skipped in `range`: corrupt records and frames, the samples and
/// spans lost, the damaged files.
fn with_store(d: &Damage, range: &Range) -> Damage {
    let st = range.stats();
    let mut store = Damage {
        corrupt: st.corrupt_records + st.corrupt_frames,
        frames: st.corrupt_frames,
        samples_lost: st.lost_records,
        lost: merge(st.lost),
        ..Default::default()
    };
    for f in st.damaged_files {
        store.add_file(DamagedFile {
            file: f.path.display().to_string(),
            what: f.what,
        });
    }
    let mut d = d.clone();
    d.add(&store);
    d
}

impl Iterator for Samples {
    type Item = Sample;

    fn next(&mut self) -> Option<Sample> {
        let parts = self.parts;
        self.next_with(|_| parts)
    }
}

/// Each sample of a range with the one before it.
pub struct Pairs {
    samples: Source,
    from: i64,
    cur: Option<Sample>,
    prev: Option<Sample>,
}

/// Where a [`Pairs`] gets its samples.
enum Source {
    /// Decoded by the caller's thread, as it asks.
    Here(Box<Samples>),
    /// Decoded ahead by a thread of its own.
    Ahead(Ahead),
}

impl Pairs {
    /// The next sample and the one read before it (`None` for the store's first).
    #[allow(clippy::should_implement_trait)] // lends its samples: not an Iterator
    pub fn next(&mut self) -> Option<(&Sample, Option<&Sample>)> {
        loop {
            let s = match &mut self.samples {
                Source::Here(s) => s.next()?,
                Source::Ahead(a) => a.next()?,
            };
            let gone = std::mem::replace(&mut self.prev, self.cur.replace(s));
            if let (Source::Ahead(a), Some(g)) = (&self.samples, gone) {
                a.recycle(g);
            }
            if self.cur.as_ref().is_some_and(|c| c.ts_ns >= self.from) {
                return Some((self.cur.as_ref()?, self.prev.as_ref()));
            }
        }
    }

    /// Decodes the samples on a thread of its own, a few ahead of the caller, so that
    /// decompressing and decoding (a quarter of a one-minute `dump` of a busy host) overlap
    /// with what the caller does with each. For a caller that reads a whole range; the same
    /// pairs as without, in the same order. Stays on the caller's thread if none can start.
    pub fn read_ahead(mut self) -> Self {
        if let Source::Here(samples) = self.samples {
            self.samples = match Ahead::start(samples) {
                Ok(a) => Source::Ahead(a),
                Err(samples) => Source::Here(samples),
            };
        }
        self
    }

    /// What was skipped so far (read ahead: known only once [`next`](Pairs::next) has returned
    /// `None`, which is when every caller asks).
    pub fn damage(&self) -> Damage {
        match &self.samples {
            Source::Here(s) => s.damage(),
            Source::Ahead(a) => a.damage.clone(),
        }
    }
}

/// What the read-ahead thread sends: each sample, then what the read skipped.
// Every item but the last is a Sample: boxing it would allocate per sample to shrink the one
// End.
#[allow(clippy::large_enum_variant)]
enum Handed {
    Sample(Sample),
    End(Damage),
}

/// Samples decoded by a thread of their own into a short queue.
struct Ahead {
    rx: Option<std::sync::mpsc::Receiver<Handed>>,
    used: std::sync::mpsc::Sender<Sample>,
    thread: Option<std::thread::JoinHandle<()>>,
    damage: Damage,
}

impl Ahead {
    /// Samples held decoded ahead of the caller: enough to ride out an uneven sample (a big
    /// process table), few enough that memory stays a handful of samples.
    const QUEUE: usize = 4;

    fn start(samples: Box<Samples>) -> Result<Ahead, Box<Samples>> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Handed>(Self::QUEUE);
        // The thread takes the samples only once it runs, so a failed spawn gives them back.
        let (give, take) = std::sync::mpsc::channel::<Box<Samples>>();
        let (used, done) = std::sync::mpsc::channel::<Sample>();
        // A read cancelled on the caller's thread (serve's time limit) stops the decoding too.
        let tokens = crate::cancel::inherited();
        let spawned = std::thread::Builder::new()
            .name("read-ahead".into())
            .spawn(move || {
                crate::cancel::adopt(tokens);
                let Ok(mut samples) = take.recv() else { return };
                loop {
                    // Freed by the thread whose allocator arena holds them: freeing into
                    // another thread's arena made the caller's side slower.
                    while let Ok(x) = done.try_recv() {
                        drop(x);
                    }
                    let handed = match samples.next() {
                        Some(s) => Handed::Sample(s),
                        None => Handed::End(samples.damage()),
                    };
                    let end = matches!(handed, Handed::End(_));
                    if tx.send(handed).is_err() || end {
                        return;
                    }
                }
            });
        match spawned {
            Ok(thread) => {
                if let Err(e) = give.send(samples) {
                    // The thread is gone (it cannot be: it waits for this). Read here.
                    let _ = thread.join();
                    return Err(e.0);
                }
                Ok(Ahead {
                    rx: Some(rx),
                    used,
                    thread: Some(thread),
                    damage: Damage::default(),
                })
            }
            Err(_) => Err(samples),
        }
    }

    /// Hands a sample the caller is done with back to be freed by the thread.
    fn recycle(&self, s: Sample) {
        // Once the thread has ended, the sample is dropped here.
        let _ = self.used.send(s);
    }

    fn next(&mut self) -> Option<Sample> {
        match self.rx.as_ref()?.recv().ok()? {
            Handed::Sample(s) => Some(s),
            Handed::End(d) => {
                self.damage = d;
                self.rx = None;
                None
            }
        }
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        // The thread ends at its next send once nobody receives.
        self.rx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The signals-lane records of a range, damage skipped and counted.
pub struct SignalRecords {
    range: Range,
    damage: Damage,
}

impl SignalRecords {
    /// What was skipped so far, the store's own findings included.
    pub fn damage(&self) -> Damage {
        with_store(&self.damage, &self.range)
    }
}

impl Iterator for SignalRecords {
    type Item = (i64, SignalRecord);

    fn next(&mut self) -> Option<(i64, SignalRecord)> {
        loop {
            if crate::cancel::cancelled() {
                return None;
            }
            match self.range.next()? {
                Ok(rec) => match SignalRecord::decode(&rec.payload) {
                    Some(r) => return Some((rec.ts_ns, r)),
                    None => self.damage.undecodable += 1,
                },
                Err(e) => self.damage.unreadable(e),
            }
        }
    }
}

/// Encodes samples as the recorder writes them: the main payload, the process table in the
/// detail lane, and the signals record (values and episode marks) in the signals lane. Alone,
/// it writes each table self-contained; [`SampleWriter`] writes a frame's later tables as
/// deltas.
#[derive(Default)]
pub struct Encoder {
    main: Vec<u8>,
    detail: Vec<u8>,
    signals: Vec<u8>,
    tables: DetailEncoder,
}

/// One encoded sample: what to pass to the store's `append_lanes`.
pub struct Encoded<'a> {
    /// The main payload.
    pub main: &'a [u8],
    /// Payloads of the lanes.
    pub lanes: Vec<(Lane, &'a [u8])>,
}

impl Encoder {
    /// A fresh encoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Encodes `sample` with its signals record, its process table self-contained. The sample
    /// is left as it was (its processes are moved out for the encoding and put back).
    pub fn encode(
        &mut self,
        sample: &mut Sample,
        signals: &SignalRecord,
    ) -> Result<Encoded<'_>, CodecError> {
        self.encode_keyed(sample, signals, true)
    }

    /// As [`encode`](Encoder::encode); unless `key`, the process table relative to the last
    /// one committed to its `tables`.
    fn encode_keyed(
        &mut self,
        sample: &mut Sample,
        signals: &SignalRecord,
        key: bool,
    ) -> Result<Encoded<'_>, CodecError> {
        signals.encode(&mut self.signals);
        let processes = sample.processes.take();
        let r = codec::encode_into(sample, &mut self.main);
        sample.processes = processes;
        r?;
        self.detail.clear();
        if let Some(p) = &sample.processes {
            self.tables.encode(p, key, &mut self.detail)?;
        }
        let mut lanes = vec![(Lane::Signals, &self.signals[..])];
        if !self.detail.is_empty() {
            lanes.push((Lane::Detail, &self.detail[..]));
        }
        Ok(Encoded {
            main: &self.main,
            lanes,
        })
    }
}

/// Why a sample was not appended.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// The sample did not encode (nothing was written).
    #[error("cannot encode a sample: {0}")]
    Encode(#[from] CodecError),
    /// The store refused the record (see [`Writer::append_lanes`]).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl AppendError {
    /// Whether the store was out of space (the recorder pauses and retries).
    pub fn is_no_space(&self) -> bool {
        matches!(self, AppendError::Store(e) if e.is_no_space())
    }
}

/// Writes samples into a store as the recorder does: each record's lanes through an
/// [`Encoder`], and each process table but the first of a store frame relative to the table
/// before it, which the writer says is in the same frame ([`Writer::starts_frame`]). A read
/// then needs nothing from an earlier frame, and damage costs at most the rest of the frame it
/// is in, which a damaged zstd frame costs anyway.
pub struct SampleWriter {
    writer: Writer,
    enc: Encoder,
}

impl SampleWriter {
    /// Writes through `writer`.
    pub fn new(writer: Writer) -> Self {
        SampleWriter {
            writer,
            enc: Encoder::new(),
        }
    }

    /// The store's writer (bytes written, the segment).
    pub fn writer(&self) -> &Writer {
        &self.writer
    }

    /// Ends the open frames and closes the store (see [`Writer::close`]).
    pub fn close(self) -> Result<(), StoreError> {
        self.writer.close()
    }

    /// Appends `sample` with its signals record; returns the bytes handed to the store (before
    /// compression). After an error nothing of the sample was stored, and the next table is
    /// self-contained. The sample is left as it was.
    pub fn append(
        &mut self,
        sample: &mut Sample,
        signals: &SignalRecord,
    ) -> Result<usize, AppendError> {
        let ts = sample.ts_ns;
        if self.writer.starts_frame(ts, 0, &[]) {
            self.enc.tables.reset();
        }
        let mut key = !self.enc.tables.has_base();
        loop {
            let e = self.enc.encode_keyed(sample, signals, key)?;
            let lens: Vec<(Lane, usize)> = e.lanes.iter().map(|(l, p)| (*l, p.len())).collect();
            // Payloads too large for the open frame start the next one, where a delta cannot be.
            if !key && self.writer.starts_frame(ts, e.main.len(), &lens) {
                self.enc.tables.reset();
                key = true;
                continue;
            }
            let bytes = e.main.len() + lens.iter().map(|(_, n)| n).sum::<usize>();
            if let Err(err) = self.writer.append_lanes(ts, e.main, &e.lanes) {
                self.enc.tables.reset();
                return Err(err.into());
            }
            if let Some(p) = &sample.processes {
                self.enc.tables.commit(ts, p);
            }
            return Ok(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jitterscope_store::{StoreConfig, Writer};

    fn store(n: i64) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let mut c = StoreConfig::new(dir.path());
        c.retain = std::time::Duration::from_secs(100 * 365 * 86400);
        let mut w = Writer::open(c).unwrap();
        let mut enc = Encoder::new();
        for i in 1..=n {
            let mut s = Sample {
                ts_ns: i * 1_000_000_000,
                mono_ns: i as u64 * 1_000_000_000,
                ..Default::default()
            };
            let e = enc.encode(&mut s, &SignalRecord::default()).unwrap();
            w.append_lanes(s.ts_ns, e.main, &e.lanes).unwrap();
        }
        // An undecodable record between the good ones.
        w.append(n * 1_000_000_000 + 500_000_000, &[77, 1, 2])
            .unwrap();
        w.close().unwrap();
        dir
    }

    /// A read cancelled on the caller's thread ends the decoding thread's part too: the caller
    /// gets no more samples.
    #[test]
    fn pairs_read_ahead_in_a_cancelled_scope_end() {
        let dir = store(40);
        let r = SampleReader::open(dir.path()).unwrap();
        let token = crate::cancel::Token::new();
        let n = crate::cancel::scope(&token, || {
            let mut p = r.pairs(0, i64::MAX, Parts::ALL).unwrap().read_ahead();
            let mut n = 0;
            while p.next().is_some() {
                n += 1;
                if n == 2 {
                    token.cancel();
                }
            }
            n
        });
        // The queue may hold a few decoded before the cancel: no more than those.
        assert!(n < 2 + Ahead::QUEUE + 2, "{n} samples after the cancel");
    }

    /// A reader that stops early (`dump | head`) ends the thread decoding ahead of it, which
    /// may be waiting to hand over a sample: dropping the pairs returns.
    #[test]
    fn pairs_read_ahead_and_dropped_early_end_their_thread() {
        let dir = store(40);
        let r = SampleReader::open(dir.path()).unwrap();
        let mut p = r.pairs(0, i64::MAX, Parts::ALL).unwrap().read_ahead();
        assert_eq!(p.next().map(|(c, _)| c.ts_ns), Some(1_000_000_000));
        // Let the thread fill its queue and block on the next send.
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(p);
    }

    #[test]
    fn pairs_carry_the_sample_before_and_count_what_does_not_decode() {
        let dir = store(10);
        let r = SampleReader::open(dir.path()).unwrap();
        // The same whether the caller decodes or a thread decodes ahead of it.
        for ahead in [false, true] {
            let mut p = r.pairs(3_000_000_000, 20_000_000_000, Parts::ALL).unwrap();
            if ahead {
                p = p.read_ahead();
            }
            let mut seen = Vec::new();
            while let Some((cur, prev)) = p.next() {
                seen.push((
                    cur.ts_ns / 1_000_000_000,
                    prev.map(|p| p.ts_ns / 1_000_000_000),
                ));
            }
            assert_eq!(seen.first(), Some(&(3, Some(2))), "ahead: {ahead}");
            assert_eq!(seen.last(), Some(&(10, Some(9))), "ahead: {ahead}");
            assert_eq!(seen.len(), 8, "ahead: {ahead}");
            assert_eq!(
                p.damage(),
                Damage {
                    undecodable: 1,
                    ..Default::default()
                },
                "ahead: {ahead}"
            );
            assert!(p.damage().note().unwrap().contains("1 undecodable"));
            // Nothing more once the range has ended.
            assert!(p.next().is_none());
        }
        // The newest record does not decode: the newest that does stands in.
        let (latest, dmg) = r.latest_pair(Parts::NONE).unwrap();
        let (cur, prev) = latest.expect("a pair");
        assert_eq!(
            (cur.ts_ns, prev.map(|p| p.ts_ns)),
            (10_000_000_000, Some(9_000_000_000))
        );
        assert_eq!(dmg.undecodable, 1);
        let mut d = Damage::default();
        assert_eq!(
            r.sample_at(4_000_000_000, Parts::NONE, &mut d)
                .unwrap()
                .map(|s| s.ts_ns),
            Some(4_000_000_000)
        );
        assert!(d.is_empty());
        assert_eq!(r.signals(0, i64::MAX).unwrap().count(), 10);
    }

    /// Of the records before a pair read's first sample, only the newest that decodes is
    /// decoded: one that does not decode after it is counted and stood in for, older ones are
    /// outside the read and not counted.
    #[test]
    fn pairs_decode_only_the_newest_sample_before_their_first() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = StoreConfig::new(dir.path());
        c.retain = std::time::Duration::from_secs(100 * 365 * 86400);
        let mut w = Writer::open(c).unwrap();
        let mut enc = Encoder::new();
        let s = 1_000_000_000;
        for (t, good) in [
            (s, true),
            (3 * s / 2, false),
            (2 * s, true),
            (5 * s / 2, false),
            (3 * s, true),
            (4 * s, true),
        ] {
            if good {
                let mut x = Sample {
                    ts_ns: t,
                    mono_ns: t as u64,
                    ..Default::default()
                };
                let e = enc.encode(&mut x, &SignalRecord::default()).unwrap();
                w.append_lanes(t, e.main, &e.lanes).unwrap();
            } else {
                w.append(t, &[77, 1, 2]).unwrap();
            }
        }
        w.close().unwrap();
        let r = SampleReader::open(dir.path()).unwrap();
        for ahead in [false, true] {
            let seen = |from: i64| {
                let mut p = r.pairs(from, 10 * s, Parts::ALL).unwrap();
                if ahead {
                    p = p.read_ahead();
                }
                let mut seen = Vec::new();
                while let Some((cur, prev)) = p.next() {
                    seen.push((cur.ts_ns, prev.map(|p| p.ts_ns)));
                }
                (seen, p.damage().undecodable)
            };
            assert_eq!(
                seen(3 * s),
                (vec![(3 * s, Some(2 * s)), (4 * s, Some(3 * s))], 1),
                "ahead: {ahead}"
            );
            // Nothing decodes between 2.2 s and 3 s: the sample at 2 s is the one before.
            let (pairs, bad) = seen(2 * s + s / 5);
            assert_eq!(pairs[0], (3 * s, Some(2 * s)), "ahead: {ahead}");
            assert_eq!(bad, 1, "ahead: {ahead}");
            // Past the last record: no pair, and nothing counted.
            assert_eq!(seen(9 * s), (vec![], 0), "ahead: {ahead}");
            // All of the store, the first sample without one before it.
            assert_eq!(seen(0).0[0], (s, None), "ahead: {ahead}");
            assert_eq!(seen(0).1, 2, "ahead: {ahead}");
        }
    }

    /// A sample with a process table that changes from one second to the next: processes
    /// start and end, and each one's counters move.
    fn busy_sample(i: i64) -> Sample {
        let procs = (0..6)
            .map(|k| {
                let pid = (i / 3 + k) as u32;
                let mut p = Process::default();
                p.stat.pid = pid;
                p.stat.starttime_ticks = u64::from(pid);
                p.stat.comm = format!("p{pid}");
                p.stat.state = 'S';
                p.stat.utime_ticks = (i * (k + 1)) as u64;
                p.cmdline = std::sync::Arc::from(format!("/bin/p{} -x", pid % 2).as_str());
                p.schedstat = Some(jitterscope_sources::process::PidSchedstat {
                    run_ns: (i * 1_000 * (k + 1) * (k + 1)) as u64,
                    wait_ns: (i * 7_000) as u64,
                    timeslices: i as u64,
                });
                p
            })
            .collect();
        Sample {
            ts_ns: i * 1_000_000_000,
            mono_ns: i as u64 * 1_000_000_000,
            processes: Some(procs),
            ..Default::default()
        }
    }

    /// A store of `n` busy samples written as the recorder writes them, in frames of
    /// `frame_records`, with no process table at `bare` (a sample the process reader failed).
    fn busy_store(n: i64, frame_records: u32, bare: &[i64]) -> (tempfile::TempDir, Vec<Sample>) {
        let dir = tempfile::tempdir().unwrap();
        let mut c = StoreConfig::new(dir.path());
        c.retain = std::time::Duration::from_secs(100 * 365 * 86400);
        c.frame_records = frame_records;
        let mut w = SampleWriter::new(Writer::open(c).unwrap());
        let mut written = Vec::new();
        for i in 1..=n {
            let mut s = busy_sample(i);
            if bare.contains(&i) {
                s.processes = None;
            }
            crate::codec::round_as_stored(&mut s);
            w.append(&mut s, &SignalRecord::default()).unwrap();
            written.push(s);
        }
        w.close().unwrap();
        (dir, written)
    }

    /// Every record's detail, in file order, as stored.
    fn details(dir: &Path) -> Vec<(i64, Vec<u8>)> {
        Reader::open(dir)
            .unwrap()
            .range(i64::MIN, i64::MAX)
            .unwrap()
            .filter_map(|r| {
                let r = r.unwrap();
                Some((r.ts_ns, r.detail?))
            })
            .collect()
    }

    /// Within a frame each table is a delta of the one before; each frame starts with a
    /// self-contained one (also after a sample without processes).
    #[test]
    fn tables_are_deltas_within_a_frame_and_whole_at_its_start() {
        let (dir, _) = busy_store(12, 5, &[7]);
        let codecs: Vec<(i64, u8)> = details(dir.path())
            .iter()
            .map(|(t, d)| (t / 1_000_000_000, d[0]))
            .collect();
        let (key, delta) = (codec::CODEC_COLUMNS_US, codec::CODEC_COLUMNS_DELTA);
        assert_eq!(
            codecs,
            vec![
                (1, key),
                (2, delta),
                (3, delta),
                (4, delta),
                (5, delta),
                (6, key),
                // 7 has no table: 8's base is 6, in the same frame.
                (8, delta),
                (9, delta),
                (10, delta),
                (11, key),
                (12, delta),
            ]
        );
    }

    /// Any range, read in any way, gives back exactly what was written: its first sample's
    /// table from the frame's earlier records, those after the range never needed.
    #[test]
    fn every_read_of_a_delta_store_gives_what_was_written() {
        let (dir, written) = busy_store(23, 6, &[9, 14]);
        let r = SampleReader::open(dir.path()).unwrap();
        let at = |i: i64| i * 1_000_000_000;
        for from in 1..=23 {
            for to in [from, from + 1, from + 4, 23] {
                let got: Vec<Sample> = r.samples(at(from), at(to), Parts::ALL).unwrap().collect();
                let want = &written[(from - 1) as usize..to.min(23) as usize];
                assert_eq!(got, want, "{from}..{to}");
                let mut p = r.pairs(at(from), at(to), Parts::ALL).unwrap();
                let (cur, prev) = p.next().unwrap();
                assert_eq!(cur, &written[(from - 1) as usize]);
                assert_eq!(
                    prev,
                    written
                        .get((from - 2).max(-1) as usize)
                        .filter(|_| from > 1)
                );
            }
            let mut d = Damage::default();
            let s = r.sample_at(at(from), Parts::ALL, &mut d).unwrap().unwrap();
            assert_eq!(s, written[(from - 1) as usize]);
            assert!(d.is_empty());
        }
        let (pair, d) = r.latest_pair(Parts::ALL).unwrap();
        let (cur, prev) = pair.unwrap();
        assert_eq!((&cur, prev.as_ref()), (&written[22], Some(&written[21])));
        assert!(d.is_empty());
        // Without processes, the detail lane is not read at all.
        let host: Vec<Sample> = r.samples(at(3), at(5), Parts::NONE).unwrap().collect();
        assert!(host.iter().all(|s| s.processes.is_none()) && host.len() == 3);
        // Parts chosen per record: the chain still moves through the records not asked for.
        let mut s = r.samples_lanes(at(2), at(8), Parts::ALL, true).unwrap();
        let mut got = Vec::new();
        while let Some(x) = s.next_with(|ts| {
            if ts % at(2) == 0 {
                Parts::ALL
            } else {
                Parts::NONE
            }
        }) {
            got.push((x.ts_ns, x.processes.is_some()));
        }
        let want: Vec<(i64, bool)> = (2..=8).map(|i| (at(i), i % 2 == 0)).collect();
        assert_eq!(got, want);
        assert_eq!(s.damage(), Damage::default());
    }

    /// A damaged record costs its own sample and the process tables of the rest of its frame,
    /// counted; their host data, and every other frame, read as written.
    #[test]
    fn a_damaged_table_costs_the_rest_of_its_frame_and_is_counted() {
        let (dir, written) = busy_store(12, 6, &[]);
        // Rewrite the store with record 3's detail lane payload replaced by garbage.
        let dir2 = tempfile::tempdir().unwrap();
        let mut c = StoreConfig::new(dir2.path());
        c.retain = std::time::Duration::from_secs(100 * 365 * 86400);
        c.frame_records = 6;
        let mut w = Writer::open(c).unwrap();
        for r in Reader::open(dir.path())
            .unwrap()
            .range(i64::MIN, i64::MAX)
            .unwrap()
        {
            let r = r.unwrap();
            let mut d = r.detail.unwrap();
            if r.ts_ns == 3_000_000_000 {
                d.truncate(d.len() / 2);
            }
            w.append_lanes(r.ts_ns, &r.payload, &[(Lane::Detail, &d)])
                .unwrap();
        }
        w.close().unwrap();
        let r = SampleReader::open(dir2.path()).unwrap();
        let mut s = r.samples(i64::MIN, i64::MAX, Parts::ALL).unwrap();
        let got: Vec<Sample> = s.by_ref().collect();
        assert_eq!(got.len(), 12, "every sample reads");
        for (g, w) in got.iter().zip(&written) {
            let i = g.ts_ns / 1_000_000_000;
            if (3..=6).contains(&i) {
                assert_eq!(g.processes, None, "{i}");
                assert_eq!(g.ts_ns, w.ts_ns);
            } else {
                assert_eq!(g, w, "{i}");
            }
        }
        let d = s.damage();
        assert_eq!(d.tables_lost, 4);
        assert!(d
            .note()
            .unwrap()
            .contains("4 samples without their processes"));
    }

    #[test]
    fn a_read_in_a_cancelled_scope_ends_and_others_do_not() {
        let dir = store(5);
        let r = SampleReader::open(dir.path()).unwrap();
        let token = crate::cancel::Token::new();
        let mut seen = 0;
        crate::cancel::scope(&token, || {
            let mut samples = r.samples(i64::MIN, i64::MAX, Parts::ALL).unwrap();
            seen += samples.by_ref().take(2).count();
            token.cancel();
            seen += samples.count();
            assert_eq!(r.signals(i64::MIN, i64::MAX).unwrap().count(), 0);
        });
        assert_eq!(seen, 2, "the read stops at the cancel");
        assert_eq!(
            r.samples(i64::MIN, i64::MAX, Parts::ALL).unwrap().count(),
            5
        );
    }

    #[test]
    fn a_damaged_segment_is_counted_with_its_error_and_the_others_are_read() {
        let dir = store(10);
        // A second segment (retention must not delete the first: these times are in 1970),
        // then four bad bytes over the first one's header.
        let mut c = StoreConfig::new(dir.path());
        c.retain = std::time::Duration::from_secs(100 * 365 * 86400);
        let mut w = Writer::open(c).unwrap();
        let mut enc = Encoder::new();
        let mut s = Sample {
            ts_ns: 20_000_000_000,
            mono_ns: 20_000_000_000,
            ..Default::default()
        };
        let e = enc.encode(&mut s, &SignalRecord::default()).unwrap();
        w.append_lanes(s.ts_ns, e.main, &e.lanes).unwrap();
        w.close().unwrap();
        let mut segs: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                let n = p.file_name().unwrap().to_string_lossy().to_string();
                n.ends_with(".jss") && !n.ends_with(".d.jss") && !n.ends_with(".s.jss")
            })
            .collect();
        segs.sort();
        assert_eq!(segs.len(), 2);
        let mut b = std::fs::read(&segs[0]).unwrap();
        b[..4].copy_from_slice(b"XXXX");
        std::fs::write(&segs[0], b).unwrap();
        let r = SampleReader::open(dir.path()).unwrap();
        let mut samples = r.samples(0, i64::MAX, Parts::NONE).unwrap();
        let got: Vec<i64> = samples.by_ref().map(|s| s.ts_ns).collect();
        assert_eq!(got, [20_000_000_000], "the undamaged segment is read");
        let d = samples.damage();
        assert_eq!(d.unreadable, 1);
        let note = d.note().unwrap();
        assert!(
            note.contains("unreadable") && note.contains("error:"),
            "{note}"
        );
    }
}
