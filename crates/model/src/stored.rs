//! Samples in the store: the one way they are written ([`Encoder`]) and read back
//! ([`SampleReader`]).
//!
//! Every reader of samples (`dump`, diagnosis, episode detection, the lab's signatures, `serve`,
//! the terminal views, the flame graphs) goes through [`SampleReader`], so they share one policy
//! for damage: a record whose payload does not decode, a record or frame the store found
//! corrupt, or a segment the store cannot read at all (with the first such error) is skipped
//! and counted in [`Damage`], never fatal; the caller reports it once (`dump`, `events` and
//! `flame` on stderr, `diagnose` in its report, `serve` in its answers and headers).

use std::path::Path;

use jitterscope_store::{Lane, Range, Reader, Record, StoreError};

use crate::codec::{self, CodecError, Parts};
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
    /// The first of the unreadable files' errors, for the note.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
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
    /// Whether anything was skipped or found damaged.
    pub fn is_empty(&self) -> bool {
        !self.lost_any() && self.files.is_empty()
    }

    /// Whether any sample was lost (a damaged file read around without loss, such as an index
    /// that was ignored, is not a loss).
    pub fn lost_any(&self) -> bool {
        self.undecodable > 0
            || self.corrupt > 0
            || self.unreadable > 0
            || self.samples_lost > 0
            || !self.lost.is_empty()
    }

    /// Adds another read's counts.
    pub fn add(&mut self, o: &Damage) {
        self.undecodable += o.undecodable;
        self.corrupt += o.corrupt;
        self.frames += o.frames;
        self.unreadable += o.unreadable;
        self.samples_lost += o.samples_lost;
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

    /// One line for people, when anything was skipped or found damaged.
    pub fn note(&self) -> Option<String> {
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
            self.reader.range(from, to)?
        } else {
            self.reader.range_main(from, to)?
        };
        Ok(Samples {
            range,
            parts,
            damage: Damage::default(),
            lead: None,
            next_up: None,
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
        let Some(last) = self.reader.latest()? else {
            return Ok((None, damage));
        };
        let newest = decode(&last, parts, &mut damage);
        // A few seconds back at any usual interval; each window read decompresses its frames.
        let mut before: Vec<Sample> = Vec::new();
        let want = if newest.is_some() { 1 } else { 2 };
        for back in [
            10_000_000_000,
            crate::derive::MAX_RATE_GAP_S as i64 * 1_000_000_000,
        ] {
            let mut s = self.samples(last.ts_ns - back, last.ts_ns - 1, parts)?;
            before = s.by_ref().collect();
            damage.add(&s.damage());
            if before.len() >= want {
                break;
            }
        }
        let pair = match newest {
            Some(cur) => Some((cur, before.pop())),
            None => before.pop().map(|cur| (cur, before.pop())),
        };
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

/// Decodes a record, counting it in `damage` when it does not decode.
pub fn decode(rec: &Record, parts: Parts, damage: &mut Damage) -> Option<Sample> {
    match codec::decode_lanes(&rec.payload, rec.detail.as_deref(), parts) {
        Ok(s) => Some(s),
        Err(_) => {
            damage.undecodable += 1;
            None
        }
    }
}

/// The samples of a range, damage skipped and counted.
pub struct Samples {
    range: Range,
    parts: Parts,
    damage: Damage,
    lead: Option<Lead>,
    /// A sample decoded while the lead was resolved, handed out after the lead's.
    next_up: Option<Sample>,
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
                    if let Some(lead) = self.lead.as_mut().filter(|l| rec.ts_ns < l.from) {
                        lead.held.push(rec);
                        continue;
                    }
                    // The first record at or after `from`: the one before it goes first.
                    if let Some(lead) = self.lead.take() {
                        if let Some(before) = self.newest_of(lead.held, &choose) {
                            self.next_up = decode(&rec, choose(rec.ts_ns), &mut self.damage);
                            return Some(before);
                        }
                    }
                    if let Some(s) = decode(&rec, choose(rec.ts_ns), &mut self.damage) {
                        return Some(s);
                    }
                }
                // The store gives up on that segment only; the next call reads the next one.
                Err(e) => self.damage.unreadable(e),
            }
        }
    }

    /// The newest of `held` (in read order) that decodes; those newer than it that do not
    /// decode are counted, older ones are outside the read and never looked at.
    fn newest_of(&mut self, held: Vec<Record>, choose: &impl Fn(i64) -> Parts) -> Option<Sample> {
        held.iter()
            .rev()
            .find_map(|rec| decode(rec, choose(rec.ts_ns), &mut self.damage))
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
/// detail lane, and the signals record (values and episode marks) in the signals lane.
#[derive(Default)]
pub struct Encoder {
    main: Vec<u8>,
    detail: Vec<u8>,
    signals: Vec<u8>,
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

    /// Encodes `sample` with its signals record. The sample is left as it was (its processes
    /// are moved out for the encoding and put back).
    pub fn encode(
        &mut self,
        sample: &mut Sample,
        signals: &SignalRecord,
    ) -> Result<Encoded<'_>, CodecError> {
        signals.encode(&mut self.signals);
        codec::encode_lanes(sample, &mut self.main, &mut self.detail)?;
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
