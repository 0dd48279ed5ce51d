//! Reading records back by time.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::decode::{Damage, FrameDecoder};
use crate::format::{
    check_header, index_path, is_segment_file_name, lane_path, segment_files, Header, IndexEntry,
    Lane, HEADER_LEN, INDEX_ENTRY_LEN, INDEX_MAGIC, SEGMENT_MAGIC,
};
use crate::{Record, Result, StoreError, FORMAT_VERSION};

/// Reads a store directory. Cheap to open; it holds no files open between calls, and every call
/// sees segments and records written since (including the frame a live writer is filling).
#[derive(Debug, Clone)]
pub struct Reader {
    dir: PathBuf,
}

/// Damage met by one [`Range`] so far. Damage is skipped, never returned as records.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RangeStats {
    /// Records known lost in the range: the records a damaged indexed frame's index entry
    /// counts and it did not yield, the records of an unreadable segment's index, and records
    /// whose CRC failed. Damage outside any index (a scanned tail) is not countable.
    pub lost_records: u64,
    /// Time spans `(from_ns, to_ns)` where records were lost, sorted and merged, clipped to the
    /// range. A span whose end is not known (damage with no good record after it) is one
    /// instant: lost after that time.
    pub lost: Vec<(i64, i64)>,
    /// Files the read gave up on (a bad header, an I/O error) or read around (an index that
    /// was ignored, a lane that could not be read), with what was wrong.
    pub damaged_files: Vec<crate::DamagedFile>,
    /// Records whose CRC did not match, or whose length field was impossible.
    pub corrupt_records: u64,
    /// zstd frames that failed to decompress (records before the damage are still returned).
    pub corrupt_frames: u64,
    /// Segments ending in a partly written record: the trace of a crash (or, for the segment a
    /// live writer is filling, of a write in flight).
    pub torn_tails: u64,
    /// Indexed frames skipped without decompressing because their time range did not overlap.
    pub frames_skipped: u64,
}

/// Whole-store summary from [`Reader::stats`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StoreStats {
    /// Number of segment files.
    pub segments: u64,
    /// Total size of segment and index files, in bytes.
    pub total_bytes: u64,
    /// Valid records.
    pub records: u64,
    /// Records whose CRC did not match, or whose length field was impossible.
    pub corrupt_records: u64,
    /// zstd frames that failed to decompress.
    pub corrupt_frames: u64,
    /// Segments ending in a partly written record.
    pub torn_tails: u64,
}

impl Reader {
    /// A reader of the store in `dir`, which must exist.
    pub fn open(dir: impl AsRef<Path>) -> Result<Reader> {
        let dir = dir.as_ref();
        let meta = std::fs::metadata(dir).map_err(|e| StoreError::io(dir, e))?;
        if !meta.is_dir() {
            return Err(StoreError::io(
                dir,
                io::Error::new(
                    io::ErrorKind::NotADirectory,
                    "store path is not a directory",
                ),
            ));
        }
        Ok(Reader {
            dir: dir.to_path_buf(),
        })
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Segment files, oldest name first (the order records are read in).
    pub fn segments(&self) -> Result<Vec<PathBuf>> {
        list_segments(&self.dir)
    }

    /// Records with `from_ns <= ts <= to_ns`, with their detail, in file order: segments by
    /// name, then frames in the order written. Errors concerning one segment (unknown version,
    /// unreadable file) are yielded in its place and iteration goes on with the next segment.
    pub fn range(&self, from_ns: i64, to_ns: i64) -> Result<Range> {
        self.range_of(from_ns, to_ns, Source::Main { detail: true })
    }

    /// As [`range`](Reader::range), with each frame that holds a record of the range read
    /// whole: its records outside the range come too, in their place, with their detail and an
    /// empty payload. A detail that refers to the records before it in its frame (the model's
    /// delta tables) can be read from them; a caller tells them by their timestamp.
    pub fn range_in_context(&self, from_ns: i64, to_ns: i64) -> Result<Range> {
        let mut r = self.range_of(from_ns, to_ns, Source::Main { detail: true })?;
        r.context = true;
        Ok(r)
    }

    /// As [`range`](Reader::range), without the detail lane: records come with `detail: None`,
    /// and the detail is never read or decompressed.
    pub fn range_main(&self, from_ns: i64, to_ns: i64) -> Result<Range> {
        self.range_of(from_ns, to_ns, Source::Main { detail: false })
    }

    /// The records of one lane alone (their `payload` is the lane's), in the same order as
    /// [`range`](Reader::range). Segments without the lane are passed over: see
    /// [`lane_covers`](Reader::lane_covers).
    pub fn range_lane(&self, lane: Lane, from_ns: i64, to_ns: i64) -> Result<Range> {
        self.range_of(from_ns, to_ns, Source::Lane(lane))
    }

    /// Whether every segment that may hold records of `[from_ns, to_ns]` has a usable `lane`
    /// (meant for [`Lane::Signals`], which has a record for every record):
    /// one that exists, has a valid header and whose newest record is at least as new as its
    /// segment's newest (from the indexes and the unindexed tails: no full decompression).
    /// Segments written by builds before the lane existed have none; an empty, cut or damaged
    /// lane would hide the records it lacks, so a reader then takes the main stream. A
    /// segment's span is taken from its name to the next segment's, which a clock jumping back
    /// could make inexact.
    pub fn lane_covers(&self, lane: Lane, from_ns: i64, to_ns: i64) -> Result<bool> {
        let segs = self.segments()?;
        for (i, seg) in segs.iter().enumerate() {
            let start = name_ts(seg).unwrap_or(0);
            let end = segs
                .get(i + 1)
                .map_or(i64::MAX, |n| name_ts(n).unwrap_or(0));
            if start > to_ns || end <= from_ns {
                continue;
            }
            let lane_file = lane_path(seg, lane);
            if !lane_file.exists() {
                return Ok(false);
            }
            // A main segment this build cannot read has nothing a lane must cover.
            let main_max = segment_max_ts(seg).unwrap_or(None);
            let lane_max = match segment_max_ts(&lane_file) {
                Ok(m) => m,
                Err(_) => return Ok(false),
            };
            match (main_max, lane_max) {
                (Some(m), Some(l)) if l < m => return Ok(false),
                (Some(_), None) => return Ok(false),
                _ => {}
            }
        }
        Ok(true)
    }

    fn range_of(&self, from_ns: i64, to_ns: i64, source: Source) -> Result<Range> {
        Ok(Range {
            from: from_ns,
            to: to_ns,
            source,
            segments: self.segments()?.into(),
            current: None,
            pending: VecDeque::new(),
            context: false,
            decoder: None,
            damage: Damage::default(),
            frames_skipped: 0,
        })
    }

    /// The last record in file order (the newest appended), if any, with its detail.
    pub fn latest(&self) -> Result<Option<Record>> {
        self.latest_of(true)
    }

    /// The timestamp of the last record in file order, reading no lane.
    pub fn latest_ts(&self) -> Result<Option<i64>> {
        Ok(self.latest_of(false)?.map(|r| r.ts_ns))
    }

    fn latest_of(&self, with_detail: bool) -> Result<Option<Record>> {
        let mut decoder = FrameDecoder::new().map_err(|e| StoreError::io(&self.dir, e))?;
        let mut damage = Damage::default();
        for path in self.segments()?.iter().rev() {
            // A newest segment that cannot be read leaves the newest record in an older one:
            // the range reads that cover it count it.
            let Ok(Some(seg)) = Segment::open(path, &mut damage) else {
                continue;
            };
            let mut last = None;
            seg.scan_tail(&mut decoder, &mut damage, &mut |ts_ns, payload| {
                last = Some((ts_ns, payload.to_vec()));
            });
            for i in (0..seg.frames.len()).rev() {
                if last.is_some() {
                    break;
                }
                seg.decode_frame(i, &mut decoder, &mut damage, &mut |ts_ns, payload| {
                    last = Some((ts_ns, payload.to_vec()));
                });
            }
            if let Some((ts_ns, payload)) = last {
                let detail = if with_detail {
                    detail_of(path, ts_ns, &mut decoder, &mut damage)?
                } else {
                    None
                };
                return Ok(Some(Record {
                    ts_ns,
                    payload,
                    detail,
                }));
            }
        }
        Ok(None)
    }

    /// Timestamps of the first and the last record in file order, if any. Reads no lane: a
    /// time needs only the main stream, and the detail lane is most of a store's bytes.
    pub fn time_bounds(&self) -> Result<Option<(i64, i64)>> {
        let mut first = None;
        for item in self.range_main(i64::MIN, i64::MAX)? {
            match item {
                Ok(r) => {
                    first = Some(r.ts_ns);
                    break;
                }
                // A segment we cannot read (damaged, unreadable, of another version) holds no
                // first record for us; the next one may.
                Err(_) => continue,
            }
        }
        let last = self.latest_of(false)?;
        Ok(first.zip(last.map(|r| r.ts_ns)))
    }

    /// Reads every record to count records and damage. Costs a full decompression of the store.
    pub fn stats(&self) -> Result<StoreStats> {
        let segments = self.segments()?;
        let mut total_bytes = 0;
        for seg in &segments {
            total_bytes += segment_files(seg).iter().map(|f| file_len(f)).sum::<u64>();
        }
        let mut range = self.range(i64::MIN, i64::MAX)?;
        let mut records = 0;
        for item in &mut range {
            item?;
            records += 1;
        }
        let r = range.stats();
        Ok(StoreStats {
            segments: segments.len() as u64,
            total_bytes,
            records,
            corrupt_records: r.corrupt_records,
            corrupt_frames: r.corrupt_frames,
            torn_tails: r.torn_tails,
        })
    }
}

/// The first record time a segment's name carries.
pub(crate) fn name_ts(p: &Path) -> Option<i64> {
    p.file_name()?.to_str()?.get(4..24)?.parse().ok()
}

pub(crate) fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

pub(crate) fn list_segments(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| StoreError::io(dir, e))? {
        let entry = entry.map_err(|e| StoreError::io(dir, e))?;
        if entry.file_name().to_str().is_some_and(is_segment_file_name) {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// Newest record time in a segment (max over its index and its unindexed tail), for retention.
/// `None` if the segment holds no readable record.
pub(crate) fn segment_max_ts(path: &Path) -> Result<Option<i64>> {
    let mut damage = Damage::default();
    let Some(seg) = Segment::open(path, &mut damage)? else {
        return Ok(None);
    };
    let mut max = seg.frames.iter().map(|e| e.max_ts).max();
    let mut decoder = FrameDecoder::new().map_err(|e| StoreError::io(path, e))?;
    seg.scan_tail(&mut decoder, &mut damage, &mut |ts, _| {
        max = Some(max.map_or(ts, |m: i64| m.max(ts)));
    });
    Ok(max)
}

/// The detail of the record at `ts_ns` in `segment`, searched from the newest frame back.
fn detail_of(
    segment: &Path,
    ts_ns: i64,
    decoder: &mut FrameDecoder,
    damage: &mut Damage,
) -> Result<Option<Vec<u8>>> {
    let Some(lane) = Segment::open_detail(segment, damage) else {
        return Ok(None);
    };
    let mut found = None;
    lane.scan_tail(decoder, damage, &mut |ts, payload| {
        if ts == ts_ns {
            found = Some(payload.to_vec());
        }
    });
    for i in (0..lane.frames.len()).rev() {
        if found.is_some() {
            break;
        }
        let e = lane.frames[i];
        if e.min_ts <= ts_ns && ts_ns <= e.max_ts {
            lane.decode_frame(i, decoder, damage, &mut |ts, payload| {
                if ts == ts_ns {
                    found = Some(payload.to_vec());
                }
            });
        }
    }
    Ok(found)
}

/// What a [`Range`] reads.
#[derive(Debug, Clone, Copy)]
enum Source {
    Main { detail: bool },
    Lane(Lane),
}

/// Iterator over the records of [`Reader::range`].
pub struct Range {
    from: i64,
    to: i64,
    source: Source,
    segments: VecDeque<PathBuf>,
    current: Option<Cursor>,
    pending: VecDeque<Record>,
    /// Whether the records of a read frame outside the range come too ([`Reader::range_in_context`]).
    context: bool,
    decoder: Option<FrameDecoder>,
    damage: Damage,
    frames_skipped: u64,
}

struct Cursor {
    seg: Segment,
    next_frame: usize,
    tail_done: bool,
    detail: Option<DetailLane>,
}

/// The detail lane of the segment being read: frames are decoded when a main frame needs them,
/// and details wait, by timestamp, for their record.
struct DetailLane {
    seg: Segment,
    decoded: Vec<bool>,
    tail_done: bool,
    by_ts: HashMap<i64, Vec<u8>>,
}

impl DetailLane {
    /// Attaches their details to `records` (the records of one main frame or tail); with
    /// `context`, those outside `(from, to)` too.
    fn attach(
        &mut self,
        records: &mut [Record],
        (from, to): (i64, i64),
        context: bool,
        decoder: &mut FrameDecoder,
        damage: &mut Damage,
    ) {
        let Some(min) = records.iter().map(|r| r.ts_ns).min() else {
            return;
        };
        let max = records.iter().map(|r| r.ts_ns).max().unwrap_or(min);
        let (from, to) = if context { (min, max) } else { (from, to) };
        let by_ts = &mut self.by_ts;
        let mut keep = |ts: i64, payload: &[u8]| {
            if from <= ts && ts <= to {
                by_ts.insert(ts, payload.to_vec());
            }
        };
        for (i, e) in self.seg.frames.iter().enumerate() {
            if !self.decoded[i] && e.max_ts >= min && e.min_ts <= max {
                self.decoded[i] = true;
                self.seg.decode_frame(i, decoder, damage, &mut keep);
            }
        }
        for r in records.iter_mut() {
            r.detail = self.by_ts.remove(&r.ts_ns);
            if r.detail.is_none() && !self.tail_done {
                // Its frame may not be indexed yet (a live writer, or a crash between a detail
                // frame and its index entry): the unindexed tail holds it.
                self.tail_done = true;
                let by_ts = &mut self.by_ts;
                self.seg.scan_tail(decoder, damage, &mut |ts, payload| {
                    if from <= ts && ts <= to {
                        by_ts.insert(ts, payload.to_vec());
                    }
                });
                r.detail = self.by_ts.remove(&r.ts_ns);
            }
        }
    }
}

impl Range {
    /// Damage met and frames skipped so far.
    pub fn stats(&self) -> RangeStats {
        RangeStats {
            lost_records: self.damage.lost_records,
            lost: merge_spans(&self.damage.lost, self.from, self.to),
            damaged_files: self.damage.files.clone(),
            corrupt_records: self.damage.corrupt_records,
            corrupt_frames: self.damage.corrupt_frames,
            torn_tails: self.damage.torn_tails,
            frames_skipped: self.frames_skipped,
        }
    }

    /// What a segment (or lane) the read cannot open held in this range, as `(records, span)`:
    /// its index entries when its index is readable (and, past the last indexed frame, an
    /// uncountable tail up to the next segment), else the span from its name to the next
    /// segment's. Empty when none of it can lie in the range.
    fn lost_in_range(&self, main: &Path, file: &Path) -> Vec<(u64, (i64, i64))> {
        let (from, to) = (self.from, self.to);
        let start = name_ts(main).unwrap_or(i64::MIN);
        let end = self
            .segments
            .front()
            .and_then(|n| name_ts(n))
            .map_or(i64::MAX, |n| n.saturating_sub(1).max(start));
        let entries = read_index(file).0;
        let mut out: Vec<(u64, (i64, i64))> = entries
            .iter()
            .map(|en| (u64::from(en.count), (en.min_ts, en.max_ts)))
            .collect();
        let indexed_end = entries
            .last()
            .map_or(HEADER_LEN as u64, |e| e.offset + e.len);
        if file_len(file) > indexed_end {
            let after = entries
                .iter()
                .map(|e| e.max_ts)
                .max()
                .map_or(start, |m| m + 1);
            out.push((0, (after, end.max(after))));
        }
        out.retain(|(_, (a, b))| *b >= from && *a <= to);
        out
    }

    /// Counts what a segment (or lane) the read gives up on costs in this range.
    fn give_up(&mut self, file: &Path, e: &StoreError, lost: Vec<(u64, (i64, i64))>) {
        self.damage
            .file(file, format!("unreadable, its records are lost: {e}"));
        for (n, span) in lost {
            self.damage.lose(n, Some(span));
        }
    }

    fn step(&mut self) -> Result<bool> {
        let Some(cursor) = self.current.as_mut() else {
            let Some(path) = self.segments.pop_front() else {
                return Ok(false);
            };
            let main = path;
            let path = match self.source {
                Source::Lane(lane) => {
                    let p = lane_path(&main, lane);
                    if !p.exists() {
                        return Ok(true);
                    }
                    p
                }
                Source::Main { .. } => main.clone(),
            };
            let seg = match Segment::open(&path, &mut self.damage) {
                Ok(Some(seg)) => seg,
                Ok(None) => return Ok(true),
                Err(e) => {
                    // A segment none of whose records can lie in the range costs this read
                    // nothing.
                    let lost = self.lost_in_range(&main, &path);
                    if lost.is_empty() {
                        return Ok(true);
                    }
                    self.give_up(&path, &e, lost);
                    return Err(e);
                }
            };
            // Opened after the main lane: a live writer adds detail before its record, so every
            // record seen in the main lane has its detail within what is seen here.
            let detail = if matches!(self.source, Source::Main { detail: true }) {
                Segment::open_detail(&path, &mut self.damage).map(|seg| DetailLane {
                    decoded: vec![false; seg.frames.len()],
                    seg,
                    tail_done: false,
                    by_ts: HashMap::new(),
                })
            } else {
                None
            };
            self.current = Some(Cursor {
                seg,
                next_frame: 0,
                tail_done: false,
                detail,
            });
            return Ok(true);
        };
        if self.decoder.is_none() {
            let d = FrameDecoder::new().map_err(|e| StoreError::io(&cursor.seg.path, e))?;
            self.decoder = Some(d);
        }
        let decoder = self.decoder.as_mut().expect("set above");
        let (from, to, context) = (self.from, self.to, self.context);
        let before = self.pending.len();
        // With context, a frame's records outside the range wait in `frame` until the frame
        // ends, and stay only if the frame had a record in the range.
        let mut frame: Vec<Record> = Vec::new();
        let mut in_range = false;
        let pending = &mut self.pending;
        let mut end_frame = |frame: &mut Vec<Record>, in_range: &mut bool| {
            if std::mem::take(in_range) {
                pending.extend(frame.drain(..));
            } else {
                frame.clear();
            }
        };
        let mut keep = |ts_ns: i64, payload: &[u8]| {
            let inside = from <= ts_ns && ts_ns <= to;
            if inside || context {
                in_range |= inside;
                frame.push(Record {
                    ts_ns,
                    // A context record is read for its detail only.
                    payload: if inside { payload.to_vec() } else { Vec::new() },
                    detail: None,
                });
            }
        };
        if let Some(entry) = cursor.seg.frames.get(cursor.next_frame) {
            let i = cursor.next_frame;
            cursor.next_frame += 1;
            if entry.max_ts < from || entry.min_ts > to {
                self.frames_skipped += 1;
            } else {
                cursor
                    .seg
                    .decode_frame(i, decoder, &mut self.damage, &mut keep);
            }
            end_frame(&mut frame, &mut in_range);
        } else if !cursor.tail_done {
            cursor.tail_done = true;
            // The tail may hold several frames (the open one, or a whole segment whose index
            // was lost): each ends on its own.
            let frame = std::cell::RefCell::new((frame, in_range));
            let mut keep = |ts_ns: i64, payload: &[u8]| {
                let inside = from <= ts_ns && ts_ns <= to;
                if inside || context {
                    let (f, r) = &mut *frame.borrow_mut();
                    *r |= inside;
                    f.push(Record {
                        ts_ns,
                        payload: if inside { payload.to_vec() } else { Vec::new() },
                        detail: None,
                    });
                }
            };
            cursor
                .seg
                .scan_tail_frames(decoder, &mut self.damage, &mut keep, &mut || {
                    let (f, r) = &mut *frame.borrow_mut();
                    end_frame(f, r);
                });
            let (mut f, mut r) = frame.into_inner();
            end_frame(&mut f, &mut r);
        } else {
            self.current = None;
            return Ok(true);
        }
        if let Some(lane) = cursor.detail.as_mut() {
            let new = self.pending.make_contiguous();
            lane.attach(
                &mut new[before..],
                (from, to),
                context,
                decoder,
                &mut self.damage,
            );
        }
        Ok(true)
    }
}

impl Iterator for Range {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(r) = self.pending.pop_front() {
                return Some(Ok(r));
            }
            match self.step() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => {
                    // Give up on this segment only.
                    self.current = None;
                    return Some(Err(e));
                }
            }
        }
    }
}

/// An opened segment: its valid index entries and where the unindexed rest begins.
pub(crate) struct Segment {
    path: PathBuf,
    file: File,
    pub(crate) frames: Vec<IndexEntry>,
    /// Index entries past the end of the file: frames the segment lost when it was cut (a
    /// crash writes a frame before its entry, so only damage leaves these). Their counts say
    /// what the tail scan should have found.
    beyond: Vec<IndexEntry>,
    pub(crate) tail_start: u64,
    pub(crate) file_len: u64,
}

impl Segment {
    /// Opens a segment; `None` if it is too short to hold its header (cut right after creation).
    /// An index that cannot be used is noted in `damage` and the segment is scanned instead.
    pub(crate) fn open(path: &Path, damage: &mut Damage) -> Result<Option<Segment>> {
        let mut file = crate::perms::open_regular(path).map_err(|e| StoreError::io(path, e))?;
        let mut header = Vec::with_capacity(HEADER_LEN);
        (&mut file)
            .take(HEADER_LEN as u64)
            .read_to_end(&mut header)
            .map_err(|e| StoreError::io(path, e))?;
        let h = check_header(&header, SEGMENT_MAGIC);
        if let Some(e) = h.error(path) {
            return Err(e);
        }
        if h == Header::Short {
            // Cut right after creation, nothing was in it: a crash's trace. With an index that
            // counts records, it is damage, and they are lost.
            let entries = read_index(path).0;
            if entries.is_empty() {
                if !header.is_empty() {
                    damage.torn_tails += 1;
                }
            } else {
                let n: u64 = entries.iter().map(|e| u64::from(e.count)).sum();
                let min = entries.iter().map(|e| e.min_ts).min().unwrap_or(0);
                let max = entries.iter().map(|e| e.max_ts).max().unwrap_or(0);
                damage.lose(n, Some((min, max)));
                damage.file(path, short_file_lost(header.len(), n));
            }
            return Ok(None);
        }
        // The index is read before the segment length is taken: the writer appends a frame
        // before its index entry, so every entry read here describes bytes that exist.
        let (index, mut problem) = read_index(path);
        // The writer creates the index with its file, so a file with records and no index
        // lost it.
        if problem.is_none() && index.is_empty() && !index_path(path).exists() {
            problem = Some("index is missing: the segment is scanned".into());
        }
        let file_len = file.metadata().map_err(|e| StoreError::io(path, e))?.len();
        let mut frames = Vec::new();
        let mut beyond = Vec::new();
        let mut expected = HEADER_LEN as u64;
        for (k, entry) in index.iter().enumerate() {
            let end = entry.offset.checked_add(entry.len);
            if entry.offset != expected || end.is_none() {
                problem.get_or_insert(format!(
                    "index entry {k} does not continue its frames: ignored from there, the rest of the segment is scanned"
                ));
                break;
            }
            if end.is_some_and(|end| end > file_len) {
                beyond = index[k..].to_vec();
                break;
            }
            expected = entry.offset + entry.len;
            frames.push(*entry);
        }
        if let Some(p) = problem {
            // An index left empty by a crash right after the segment was created is no damage.
            if file_len > HEADER_LEN as u64 {
                damage.file(&index_path(path), p);
            }
        }
        if !beyond.is_empty() {
            damage.file(
                path,
                format!(
                    "cut inside indexed frame {} (file ends at byte {file_len}): the records after the cut are lost",
                    frames.len()
                ),
            );
        }
        Ok(Some(Segment {
            path: path.to_path_buf(),
            file,
            frames,
            beyond,
            tail_start: expected,
            file_len,
        }))
    }

    /// Opens the detail lane of `segment`, if it has one. A lane that cannot be read is noted
    /// and read around: its records then come without detail.
    fn open_detail(segment: &Path, damage: &mut Damage) -> Option<Segment> {
        let path = lane_path(segment, Lane::Detail);
        if !path.exists() {
            return None;
        }
        match Segment::open(&path, damage) {
            Ok(seg) => seg,
            Err(e) => {
                damage.file(&path, format!("{e}: records come without their detail"));
                None
            }
        }
    }

    fn read_at(&self, offset: u64, len: u64) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; len as usize];
        self.file
            .read_exact_at(&mut buf, offset)
            .map_err(|e| StoreError::io(&self.path, e))?;
        Ok(buf)
    }

    /// Decodes indexed frame `i`. A frame that cannot be read costs itself: counted by its
    /// index entry, like one that does not decompress.
    pub(crate) fn decode_frame(
        &self,
        i: usize,
        decoder: &mut FrameDecoder,
        damage: &mut Damage,
        sink: &mut dyn FnMut(i64, &[u8]),
    ) {
        let e = self.frames[i];
        match self.read_at(e.offset, e.len) {
            Ok(bytes) => decoder.indexed_frame(&bytes, &e, damage, sink),
            Err(err) => {
                damage.corrupt_frames += 1;
                damage.lose(u64::from(e.count), Some((e.min_ts, e.max_ts)));
                damage.file(&self.path, format!("frame {i}: {err}"));
            }
        }
    }

    pub(crate) fn scan_tail(
        &self,
        decoder: &mut FrameDecoder,
        damage: &mut Damage,
        sink: &mut dyn FnMut(i64, &[u8]),
    ) {
        self.scan_tail_frames(decoder, damage, sink, &mut || {});
    }

    /// As [`scan_tail`](Segment::scan_tail), calling `frame_end` after each zstd frame's records.
    pub(crate) fn scan_tail_frames(
        &self,
        decoder: &mut FrameDecoder,
        damage: &mut Damage,
        sink: &mut dyn FnMut(i64, &[u8]),
        frame_end: &mut dyn FnMut(),
    ) {
        if self.tail_start >= self.file_len {
            self.lose_beyond(0, damage);
            return;
        }
        let bytes = match self.read_at(self.tail_start, self.file_len - self.tail_start) {
            Ok(b) => b,
            Err(err) => {
                damage.corrupt_frames += 1;
                damage.file(&self.path, format!("unindexed tail: {err}"));
                return;
            }
        };
        let before = self.frames.last().map(|e| e.max_ts);
        let mut got = 0u64;
        decoder.scan_frames(
            &bytes,
            before,
            damage,
            &mut |ts, p| {
                got += 1;
                sink(ts, p)
            },
            frame_end,
        );
        self.lose_beyond(got, damage);
    }

    /// Counts the records of index entries past the end of the file that the tail did not
    /// yield (`got` of them did).
    fn lose_beyond(&self, got: u64, damage: &mut Damage) {
        let Some(first) = self.beyond.first() else {
            return;
        };
        let want: u64 = self.beyond.iter().map(|e| u64::from(e.count)).sum();
        let min = self
            .beyond
            .iter()
            .map(|e| e.min_ts)
            .min()
            .unwrap_or(first.min_ts);
        let max = self
            .beyond
            .iter()
            .map(|e| e.max_ts)
            .max()
            .unwrap_or(first.max_ts);
        if got < want {
            damage.lose(want - got, Some((min, max)));
        }
    }
}

/// What a segment-format file of `len` bytes, too short for its header, lost of the `n`
/// records its index counts.
pub(crate) fn short_file_lost(len: usize, n: u64) -> String {
    let what = if len == 0 {
        "empty".to_string()
    } else {
        format!("cut inside its header ({len} bytes)")
    };
    format!("{what}, but its index counts {n} records: they are lost")
}

/// Valid index entries of a segment, in file order up to the first torn or corrupt one, and
/// what was wrong with the index when it is damaged (`None`: intact, missing, or ending in a
/// torn entry, a crash's trace). A damaged index, or one of a version this build does not
/// read, is ignored: the segment is scanned, which costs time, not data.
pub(crate) fn read_index(segment: &Path) -> (Vec<IndexEntry>, Option<String>) {
    let path = index_path(segment);
    let bytes = match crate::perms::read_regular(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (Vec::new(), None),
        Err(e) => {
            return (
                Vec::new(),
                Some(format!(
                    "index cannot be read ({e}): ignored, the segment is scanned"
                )),
            )
        }
    };
    match check_header(&bytes, INDEX_MAGIC) {
        Header::Valid => {}
        Header::Short if bytes.is_empty() => {
            return (Vec::new(), Some("index is empty: ignored, the segment is scanned".into()))
        }
        Header::Short => {
            return (
                Vec::new(),
                Some("index is cut inside its header: ignored, the segment is scanned".into()),
            )
        }
        Header::BadMagic => {
            return (
                Vec::new(),
                Some("index has a bad header: ignored, the segment is scanned".into()),
            )
        }
        Header::UnknownVersion(version) => {
            return (
                Vec::new(),
                Some(format!(
                    "index of format version {version} (this build reads {FORMAT_VERSION}): ignored, the segment is scanned"
                )),
            )
        }
    }
    let body = &bytes[HEADER_LEN..];
    let entries: Vec<IndexEntry> = body
        .chunks_exact(INDEX_ENTRY_LEN)
        .map_while(IndexEntry::decode)
        .collect();
    let whole = body.len() / INDEX_ENTRY_LEN;
    // A crash can tear the last entry (a short write); a whole entry that fails its CRC, or
    // any entry after one, is damage.
    let problem = (entries.len() < whole).then(|| {
        format!(
            "index entry {} fails its check: ignored from there, the rest of the segment is scanned",
            entries.len()
        )
    });
    (entries, problem)
}

/// Spans sorted, clipped to `[from, to]` (those outside dropped) and merged where they touch.
fn merge_spans(spans: &[(i64, i64)], from: i64, to: i64) -> Vec<(i64, i64)> {
    let v: Vec<(i64, i64)> = spans
        .iter()
        .filter(|(a, b)| *b >= from && *a <= to)
        .map(|&(a, b)| (a.max(from), b.min(to)))
        // An end nothing bounds (the last segment's): lost after its start, one instant.
        .map(|(a, b)| (a, if b == i64::MAX { a } else { b }))
        .collect();
    merge_touching(v)
}

/// Time spans (inclusive nanosecond bounds) sorted and merged where they overlap or touch.
pub fn merge_touching(mut v: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    v.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(v.len());
    for (a, b) in v {
        match out.last_mut() {
            Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}
