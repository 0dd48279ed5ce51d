//! Appending records.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use zstd::stream::raw::{CParameter, Encoder, InBuffer, Operation, OutBuffer};

use crate::decode::WRITER_WINDOW_LOG;
use crate::format::{
    file_header, index_path, lane_path, record_header, segment_file_name, segment_files,
    segment_of_lane_file, IndexEntry, Lane, INDEX_MAGIC, MAX_FRAME_RAW_BYTES, MAX_PAYLOAD_BYTES,
    RECORD_HEADER_LEN, SEGMENT_MAGIC,
};
use crate::reader::{file_len, list_segments, segment_max_ts};
use crate::{Result, StoreConfig, StoreError};

/// The single writer of a store directory (enforced with `flock` on `dir/LOCK`).
///
/// Each [`append`](Writer::append) that returns `Ok` has reached the file with `write(2)`, so it is
/// readable at once and survives the process being killed; it reaches the disk at the next frame
/// end or within [`StoreConfig::fsync_interval`]. After an error the current segment is truncated
/// to its last complete record and left behind; the next append starts a new one.
pub struct Writer {
    config: StoreConfig,
    // Held for its flock; closing the file releases the lock.
    _lock: crate::lock::StoreLock,
    active: Option<Active>,
    bytes_written: u64,
    /// Set by the first out-of-space failure and cleared by the next success, so one episode of
    /// full disk deletes old segments once rather than on every retry.
    in_no_space_episode: bool,
    /// Largest compressed frame (all streams) this writer has completed, for the room a
    /// full disk needs.
    frame_bytes: u64,
    /// Upper bound of the bytes the append in progress writes (its payloads uncompressed).
    need_bytes: u64,
    out: Vec<u8>,
}

/// The segment being written: its main stream and the lanes records have brought so far.
struct Active {
    main: Stream,
    lanes: Vec<(Lane, Stream)>,
    records: u64,
    min_ts: i64,
    max_ts: i64,
    last_sync: Instant,
}

/// One compressed stream of a segment (main or lane), with its index.
struct Stream {
    seg_path: PathBuf,
    idx_path: PathBuf,
    seg: File,
    idx: File,
    encoder: Encoder<'static>,
    /// End of the last complete write: everything before it decodes.
    seg_len: u64,
    idx_len: u64,
    frame: Option<OpenFrame>,
    last_frame_len: u64,
    unsynced: bool,
}

struct OpenFrame {
    offset: u64,
    first_ts: i64,
    last_ts: i64,
    min_ts: i64,
    max_ts: i64,
    count: u32,
    raw_bytes: usize,
}

impl Writer {
    /// Opens (creating if needed) the store directory for writing, takes its lock and applies
    /// retention. No segment is created until the first append.
    pub fn open(config: StoreConfig) -> Result<Writer> {
        let dir = config.dir.clone();
        crate::perms::writable_store_dir(&dir, config.allow_other_owner).map_err(|why| {
            StoreError::Refused {
                dir: dir.clone(),
                why,
            }
        })?;
        crate::perms::create_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
        let lock = crate::lock::lock_store(&dir)?;
        let mut w = Writer {
            config,
            _lock: lock,
            active: None,
            bytes_written: 0,
            in_no_space_episode: false,
            frame_bytes: 0,
            need_bytes: 0,
            out: Vec::new(),
        };
        w.apply_retention()?;
        Ok(w)
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.config.dir
    }

    /// Bytes written to segment and index files by this writer since it was opened.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// Path of the segment being written, if any.
    pub fn current_segment(&self) -> Option<&Path> {
        self.active.as_ref().map(|a| a.main.seg_path.as_path())
    }

    /// Appends one record. `ts_ns` is nanoseconds since the Unix epoch; it need not increase.
    ///
    /// On [`StoreError::NoSpace`] the segment was truncated to its last complete record and
    /// abandoned (it stays readable) and, once per episode, old segments were deleted to make room.
    /// Retrying later starts a new segment.
    pub fn append(&mut self, ts_ns: i64, payload: &[u8]) -> Result<()> {
        self.append_lanes(ts_ns, payload, &[])
    }

    /// Appends one record with payloads for some of its lanes (see the crate docs): readers
    /// that do not ask for a lane never decompress it. Lanes are written before the main
    /// payload, so a reader that sees the record finds them.
    pub fn append_lanes(
        &mut self,
        ts_ns: i64,
        payload: &[u8],
        lanes: &[(Lane, &[u8])],
    ) -> Result<()> {
        let lens = lanes.iter().map(|(_, p)| p.len());
        self.need_bytes =
            (payload.len() + lanes.iter().map(|(_, p)| p.len()).sum::<usize>()) as u64;
        for len in std::iter::once(payload.len()).chain(lens) {
            if len > MAX_PAYLOAD_BYTES {
                return Err(StoreError::PayloadTooLarge {
                    len,
                    max: MAX_PAYLOAD_BYTES,
                });
            }
        }
        if self
            .active
            .as_ref()
            .is_some_and(|a| self.should_rotate(a, ts_ns))
        {
            let result = self.with_active(|a, out, written| a.end_frames(out, written));
            self.finish_failure(result)?;
            self.active = None;
            self.apply_retention()?;
        }
        if self.active.is_none() {
            let created = Active::create(&self.config, ts_ns, &mut self.bytes_written);
            match created {
                Ok(a) => self.active = Some(a),
                Err(e) => {
                    if e.is_no_space() {
                        self.free_space_once(None);
                    }
                    return Err(e);
                }
            }
        }
        let frame_records = self.config.frame_records.max(1);
        let fsync_interval = self.config.fsync_interval;
        let config = &self.config;
        let result = match self.active.as_mut() {
            None => Ok(()),
            Some(a) => (|| {
                a.write_record(
                    config,
                    ts_ns,
                    payload,
                    lanes,
                    frame_records,
                    &mut self.out,
                    &mut self.bytes_written,
                )?;
                if a.unsynced() && a.last_sync.elapsed() >= fsync_interval {
                    a.sync()?;
                }
                Ok(())
            })(),
        };
        self.finish_failure(result)?;
        self.in_no_space_episode = false;
        if let Some(a) = &self.active {
            self.frame_bytes = self.frame_bytes.max(a.last_frame_bytes());
        }
        Ok(())
    }

    /// Whether appending a record at `ts_ns` with payloads of these lengths would start new
    /// frames (a record that starts one is the first its reader decompresses): no segment is
    /// open, the segment rotates, the last frame was completed, or this record would overfill
    /// the open frame. A payload that refers to the records before it in its frame (the model's
    /// delta tables) is only appended when this is false; the answer holds until the next
    /// append.
    pub fn starts_frame(&self, ts_ns: i64, payload_len: usize, lanes: &[(Lane, usize)]) -> bool {
        match &self.active {
            None => true,
            Some(a) => {
                self.should_rotate(a, ts_ns)
                    || a.main.frame.is_none()
                    || a.overfills_frame(payload_len, lanes.iter().copied())
            }
        }
    }

    /// Forces appended data to disk now.
    pub fn sync(&mut self) -> Result<()> {
        let result = self.with_active(|a, _, _| a.sync());
        self.finish_failure(result)
    }

    /// Ends the open frame, indexes it and syncs, so the segment needs no scanning when read.
    pub fn close(mut self) -> Result<()> {
        self.close_active()
    }

    fn close_active(&mut self) -> Result<()> {
        let result = self.with_active(|a, out, written| {
            a.end_frames(out, written)?;
            a.sync()
        });
        self.finish_failure(result)?;
        self.active = None;
        Ok(())
    }

    fn should_rotate(&self, a: &Active, ts_ns: i64) -> bool {
        if a.records == 0 {
            return false;
        }
        let span = (a.max_ts.max(ts_ns) as i128) - (a.min_ts.min(ts_ns) as i128);
        span >= self.config.segment_span.as_nanos() as i128
            || a.main.seg_len + a.lanes.iter().map(|(_, l)| l.seg_len).sum::<u64>()
                >= self.config.segment_max_bytes
    }

    fn with_active(
        &mut self,
        f: impl FnOnce(&mut Active, &mut Vec<u8>, &mut u64) -> Result<()>,
    ) -> Result<()> {
        match self.active.as_mut() {
            Some(a) => f(a, &mut self.out, &mut self.bytes_written),
            None => Ok(()),
        }
    }

    /// After a failed write the compressor's state no longer matches the file, so the segment is
    /// cut back to its last complete record and abandoned.
    fn finish_failure(&mut self, result: Result<()>) -> Result<()> {
        let Err(e) = result else {
            return Ok(());
        };
        let abandoned = self.active.take().map(|a| a.abandon());
        if e.is_no_space() {
            self.free_space_once(abandoned.as_deref());
        }
        Err(e)
    }

    /// Deletes the oldest segments (never `keep`, which holds the newest data, nor the one
    /// being written) until the filesystem has room for what the failed write needed, with
    /// slack: the larger of that, two frames and [`MIN_FREE_BYTES`]. Once per out-of-space
    /// episode, each deletion said on stderr: a full disk costs the oldest minutes it must,
    /// not the whole history.
    fn free_space_once(&mut self, keep: Option<&Path>) {
        if self.in_no_space_episode {
            return;
        }
        self.in_no_space_episode = true;
        let dir = self.config.dir.clone();
        let Ok(segments) = list_segments(&dir) else {
            return;
        };
        let want = self
            .need_bytes
            .max(2 * self.frame_bytes)
            .max(MIN_FREE_BYTES);
        let active = self.active.as_ref().map(|a| a.main.seg_path.clone());
        for seg in segments
            .iter()
            .filter(|s| Some(s.as_path()) != keep && Some(*s) != active.as_ref())
        {
            match available_bytes(&dir) {
                Some(free) if free >= want => break,
                _ => {}
            }
            let from = crate::reader::name_ts(seg).unwrap_or(0);
            let to = segment_max_ts(seg).ok().flatten().unwrap_or(from);
            let freed = delete_segment(seg);
            eprintln!(
                "jitterscope store: disk full: deleted {} (records {} .. {}, {freed} bytes) to make room for {want} bytes",
                seg.display(),
                fmt_utc(from),
                fmt_utc(to),
            );
        }
    }

    /// Deletes whole segments, oldest first, that are older than `retain` or beyond `max_bytes`.
    /// Never the segment being written.
    fn apply_retention(&mut self) -> Result<()> {
        let dir = &self.config.dir;
        remove_orphan_lanes(dir);
        let active = self.active.as_ref().map(|a| a.main.seg_path.clone());
        let mut segments: Vec<PathBuf> = list_segments(dir)?
            .into_iter()
            .filter(|s| Some(s) != active.as_ref())
            .collect();
        let now_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        let cutoff = now_ns - self.config.retain.as_nanos() as i128;
        segments.retain(|seg| {
            // A segment whose age cannot be read (no readable record, newer format) is left to
            // the size limit.
            let too_old = matches!(segment_max_ts(seg), Ok(Some(ts)) if (ts as i128) < cutoff);
            if too_old {
                delete_segment(seg);
            }
            !too_old
        });
        let size = |s: &Path| segment_files(s).iter().map(|f| file_len(f)).sum::<u64>();
        let mut total: u64 = segments.iter().map(|s| size(s)).sum();
        if let Some(a) = &active {
            total += size(a);
        }
        for seg in &segments {
            if total <= self.config.max_bytes {
                break;
            }
            total = total.saturating_sub(delete_segment(seg));
        }
        Ok(())
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Best effort: an error here leaves an unindexed open frame, which readers scan anyway.
        let _ = self.close_active();
    }
}

/// Room a full disk's eviction makes at least: a few frames of a busy host, so the writer does
/// not come back for more at its next record.
pub const MIN_FREE_BYTES: u64 = 1 << 20;

/// Bytes an unprivileged write may still use on the filesystem of `dir` (statvfs).
fn available_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes into the zeroed struct we pass; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// `ns` since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (the store has no calendar crate; this is
/// the civil-from-days conversion for the log line of a deletion).
pub(crate) fn fmt_utc(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Removes lane files whose segment is gone (a deletion cut short by a crash), which nothing
/// would otherwise ever delete.
fn remove_orphan_lanes(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(seg) = name.to_str().and_then(segment_of_lane_file) else {
            continue;
        };
        if !dir.join(seg).exists() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Removes a segment, its lanes and their indexes; returns the bytes freed.
fn delete_segment(seg: &Path) -> u64 {
    let mut size = 0;
    for f in segment_files(seg) {
        size += file_len(&f);
        let _ = std::fs::remove_file(&f);
    }
    size
}

impl Active {
    fn create(config: &StoreConfig, first_ts: i64, written: &mut u64) -> Result<Active> {
        let (seg_path, seg) = create_new_segment_file(&config.dir, first_ts)?;
        Ok(Active {
            main: Stream::create(config, seg_path, seg, written)?,
            lanes: Vec::new(),
            records: 0,
            min_ts: first_ts,
            max_ts: first_ts,
            last_sync: Instant::now(),
        })
    }

    /// Bytes of the last frame each stream completed, together.
    fn last_frame_bytes(&self) -> u64 {
        self.main.last_frame_len
            + self
                .lanes
                .iter()
                .map(|(_, s)| s.last_frame_len)
                .sum::<u64>()
    }

    fn streams(&mut self) -> impl Iterator<Item = &mut Stream> {
        std::iter::once(&mut self.main).chain(self.lanes.iter_mut().map(|(_, s)| s))
    }

    fn unsynced(&self) -> bool {
        self.main.unsynced || self.lanes.iter().any(|(_, s)| s.unsynced)
    }

    /// Whether a record of these payload lengths would take a stream's open frame past
    /// [`MAX_FRAME_RAW_BYTES`], so that the frames end before it.
    fn overfills_frame(
        &self,
        payload_len: usize,
        mut lanes: impl Iterator<Item = (Lane, usize)>,
    ) -> bool {
        let too_big = |s: &Stream, len: usize| {
            s.frame
                .as_ref()
                .is_some_and(|f| f.raw_bytes + RECORD_HEADER_LEN + len > MAX_FRAME_RAW_BYTES)
        };
        too_big(&self.main, payload_len)
            || lanes.any(|(lane, len)| {
                self.lanes
                    .iter()
                    .any(|(l, s)| *l == lane && too_big(s, len))
            })
    }

    /// Writes the lanes' payloads, then the main one. Every stream ends its frame with the
    /// main one, so frame `i` of each usually holds the same records.
    #[allow(clippy::too_many_arguments)]
    fn write_record(
        &mut self,
        config: &StoreConfig,
        ts_ns: i64,
        payload: &[u8],
        lanes: &[(Lane, &[u8])],
        frame_records: u32,
        out: &mut Vec<u8>,
        written: &mut u64,
    ) -> Result<()> {
        let lens = lanes.iter().map(|(l, p)| (*l, p.len()));
        if self.overfills_frame(payload.len(), lens) {
            self.end_frames(out, written)?;
        }
        let ends_frame = self.main.frame.as_ref().map_or(0, |f| f.count) + 1 >= frame_records;
        for &(lane, p) in lanes {
            let i = match self.lanes.iter().position(|(l, _)| *l == lane) {
                Some(i) => i,
                None => {
                    let path = lane_path(&self.main.seg_path, lane);
                    let file = create_lane_file(&path)?;
                    let stream = Stream::create(config, path, file, written)?;
                    self.lanes.push((lane, stream));
                    self.lanes.len() - 1
                }
            };
            self.lanes[i]
                .1
                .write_record(ts_ns, p, ends_frame, out, written)?;
        }
        self.main
            .write_record(ts_ns, payload, ends_frame, out, written)?;
        if ends_frame {
            // A lane frame left open (this record had nothing for it) ends with the main one.
            for (_, s) in self.lanes.iter_mut() {
                s.end_frame(out, written)?;
            }
        }
        self.records += 1;
        self.min_ts = self.min_ts.min(ts_ns);
        self.max_ts = self.max_ts.max(ts_ns);
        if ends_frame {
            self.sync()?;
        }
        Ok(())
    }

    /// Ends the open frames, if any, without a new record.
    fn end_frames(&mut self, out: &mut Vec<u8>, written: &mut u64) -> Result<()> {
        for (_, s) in self.lanes.iter_mut() {
            s.end_frame(out, written)?;
        }
        self.main.end_frame(out, written)?;
        self.sync()
    }

    fn sync(&mut self) -> Result<()> {
        for s in self.streams() {
            s.sync()?;
        }
        self.last_sync = Instant::now();
        Ok(())
    }

    /// Cuts every file back to its last complete write; returns the segment path.
    fn abandon(self) -> PathBuf {
        for (_, s) in self.lanes {
            s.abandon();
        }
        self.main.abandon()
    }
}

impl Stream {
    fn create(
        config: &StoreConfig,
        seg_path: PathBuf,
        seg: File,
        written: &mut u64,
    ) -> Result<Stream> {
        let dir = &config.dir;
        let idx_path = index_path(&seg_path);
        let result = (|| {
            let seg_header = file_header(SEGMENT_MAGIC);
            seg.write_all_at(&seg_header, 0)
                .map_err(|e| StoreError::io(&seg_path, e))?;
            let idx = crate::perms::open(
                OpenOptions::new().write(true).create(true).truncate(true),
                &idx_path,
            )
            .map_err(|e| StoreError::io(&idx_path, e))?;
            let idx_header = file_header(INDEX_MAGIC);
            idx.write_all_at(&idx_header, 0)
                .map_err(|e| StoreError::io(&idx_path, e))?;
            // Make the new names durable, so a later fdatasync of the files is not in vain.
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| StoreError::io(dir, e))?;
            let mut encoder =
                Encoder::new(config.compression_level).map_err(|e| StoreError::io(&seg_path, e))?;
            encoder
                .set_parameter(CParameter::WindowLog(WRITER_WINDOW_LOG))
                .map_err(|e| StoreError::io(&seg_path, e))?;
            Ok((idx, encoder, (seg_header.len() + idx_header.len()) as u64))
        })();
        match result {
            Ok((idx, encoder, header_bytes)) => {
                *written += header_bytes;
                Ok(Stream {
                    seg_len: header_bytes / 2,
                    idx_len: header_bytes / 2,
                    seg_path,
                    idx_path,
                    seg,
                    idx,
                    encoder,
                    frame: None,
                    last_frame_len: 0,
                    unsynced: false,
                })
            }
            Err(e) => {
                let _ = std::fs::remove_file(&seg_path);
                let _ = std::fs::remove_file(&idx_path);
                Err(e)
            }
        }
    }

    fn write_record(
        &mut self,
        ts_ns: i64,
        payload: &[u8],
        ends_frame: bool,
        out: &mut Vec<u8>,
        written: &mut u64,
    ) -> Result<()> {
        let raw_len = RECORD_HEADER_LEN + payload.len();
        let frame = self.frame.get_or_insert(OpenFrame {
            offset: self.seg_len,
            first_ts: ts_ns,
            last_ts: ts_ns,
            min_ts: ts_ns,
            max_ts: ts_ns,
            count: 0,
            raw_bytes: 0,
        });
        out.clear();
        let path = &self.seg_path;
        let io = |e| StoreError::io(path, e);
        compress(&mut self.encoder, &record_header(ts_ns, payload), out).map_err(io)?;
        compress(&mut self.encoder, payload, out).map_err(io)?;
        if ends_frame {
            drain(out, |o| self.encoder.finish(o, true)).map_err(io)?;
        } else {
            drain(out, |o| self.encoder.flush(o)).map_err(io)?;
        }
        self.seg.write_all_at(out, self.seg_len).map_err(io)?;
        self.seg_len += out.len() as u64;
        *written += out.len() as u64;
        self.unsynced = true;

        frame.last_ts = ts_ns;
        frame.min_ts = frame.min_ts.min(ts_ns);
        frame.max_ts = frame.max_ts.max(ts_ns);
        frame.count += 1;
        frame.raw_bytes += raw_len;
        if ends_frame {
            self.index_frame(written)?;
        }
        Ok(())
    }

    /// Ends the open frame, if any, without a new record.
    fn end_frame(&mut self, out: &mut Vec<u8>, written: &mut u64) -> Result<()> {
        if self.frame.is_none() {
            return Ok(());
        }
        out.clear();
        let path = &self.seg_path;
        drain(out, |o| self.encoder.finish(o, true)).map_err(|e| StoreError::io(path, e))?;
        self.seg
            .write_all_at(out, self.seg_len)
            .map_err(|e| StoreError::io(path, e))?;
        self.seg_len += out.len() as u64;
        *written += out.len() as u64;
        self.index_frame(written)
    }

    /// Appends the index entry of the frame just ended (synced with the rest of the segment).
    fn index_frame(&mut self, written: &mut u64) -> Result<()> {
        let Some(f) = self.frame.take() else {
            return Ok(());
        };
        self.last_frame_len = self.seg_len - f.offset;
        let entry = IndexEntry {
            offset: f.offset,
            len: self.seg_len - f.offset,
            first_ts: f.first_ts,
            last_ts: f.last_ts,
            min_ts: f.min_ts,
            max_ts: f.max_ts,
            count: f.count,
        }
        .encode();
        self.idx
            .write_all_at(&entry, self.idx_len)
            .map_err(|e| StoreError::io(&self.idx_path, e))?;
        self.idx_len += entry.len() as u64;
        *written += entry.len() as u64;
        self.unsynced = true;
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        if !self.unsynced {
            return Ok(());
        }
        self.seg
            .sync_data()
            .map_err(|e| StoreError::io(&self.seg_path, e))?;
        self.idx
            .sync_data()
            .map_err(|e| StoreError::io(&self.idx_path, e))?;
        self.unsynced = false;
        Ok(())
    }

    /// Cuts both files back to their last complete write; returns the segment path.
    fn abandon(self) -> PathBuf {
        // If truncation fails too, readers see the leftover bytes as a torn tail and skip them.
        let _ = self.seg.set_len(self.seg_len);
        let _ = self.idx.set_len(self.idx_len);
        self.seg_path
    }
}

/// Creates a lane file. Its segment's name was taken exclusively, so an existing lane file is
/// a leftover of a segment deleted half-way (its records would not match): replaced.
fn create_lane_file(path: &Path) -> Result<File> {
    crate::perms::open(
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true),
        path,
    )
    .map_err(|e| StoreError::io(path, e))
}

/// Creates `seg-<ts>.jss` exclusively. Another run may already own that name (same first
/// timestamp, or a clock that went back), and its file must never be appended to, so the name is
/// moved forward until it is free.
fn create_new_segment_file(dir: &Path, first_ts: i64) -> Result<(PathBuf, File)> {
    let mut name_ts = first_ts.max(0);
    loop {
        let path = dir.join(segment_file_name(name_ts));
        match crate::perms::open(
            OpenOptions::new().read(true).write(true).create_new(true),
            &path,
        ) {
            Ok(f) => return Ok((path, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && name_ts < i64::MAX => {
                name_ts += 1;
            }
            Err(e) => return Err(StoreError::io(&path, e)),
        }
    }
}

/// Writes `lane`'s file (and its index) for the existing `segment` from `records`, in frames of
/// [`DEFAULT_FRAME_RECORDS`](crate::DEFAULT_FRAME_RECORDS) like the recorder's. Written under
/// temporary names and renamed into place, the data first: a reader in between sees the new
/// lane with no index and scans it. For a repair, with the store's lock held.
pub fn write_lane(segment: &Path, lane: Lane, records: &[(i64, Vec<u8>)]) -> Result<()> {
    let path = lane_path(segment, lane);
    let tmp = path.with_extension("tmp.jss");
    let frames: Vec<&[(i64, Vec<u8>)]> = records
        .chunks(crate::DEFAULT_FRAME_RECORDS as usize)
        .collect();
    write_frames(&tmp, &frames)?;
    install(&tmp, &path, || Ok(()))
}

/// Writes a segment-format file and its index at `tmp` (a name no reader or retention pass
/// takes for a segment), one zstd frame per group of `frames`, synced. Removes what it wrote
/// on an error.
pub(crate) fn write_frames(tmp: &Path, frames: &[&[(i64, Vec<u8>)]]) -> Result<()> {
    let dir = tmp.parent().unwrap_or(Path::new("."));
    let config = StoreConfig::new(dir);
    let file = create_lane_file(tmp)?;
    let mut written = 0;
    let mut stream = Stream::create(&config, tmp.to_path_buf(), file, &mut written)?;
    let mut out = Vec::new();
    let result = (|| {
        for frame in frames {
            for (i, (ts, p)) in frame.iter().enumerate() {
                if p.len() > MAX_PAYLOAD_BYTES {
                    return Err(StoreError::PayloadTooLarge {
                        len: p.len(),
                        max: MAX_PAYLOAD_BYTES,
                    });
                }
                stream.write_record(*ts, p, i + 1 == frame.len(), &mut out, &mut written)?;
            }
        }
        stream.end_frame(&mut out, &mut written)?;
        stream.sync()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(tmp);
        let _ = std::fs::remove_file(index_path(tmp));
    }
    result
}

/// Puts the file written at `tmp` by [`write_frames`] in `path`'s place, with its index: the
/// data first, so a reader in between sees the new file with no index and scans it.
/// `before` runs first (a repair moves the original aside); on its error nothing is replaced.
pub(crate) fn install(
    tmp: &Path,
    path: &Path,
    before: impl FnOnce() -> std::io::Result<()>,
) -> Result<()> {
    let result = before()
        .map_err(|e| StoreError::io(path, e))
        .and_then(|()| std::fs::rename(tmp, path).map_err(|e| StoreError::io(path, e)))
        .and_then(|()| {
            let idx = index_path(path);
            std::fs::rename(index_path(tmp), &idx).map_err(|e| StoreError::io(&idx, e))
        });
    if result.is_err() {
        let _ = std::fs::remove_file(tmp);
        let _ = std::fs::remove_file(index_path(tmp));
    }
    result
}

/// Room kept free in the output buffer before each call into zstd.
const OUT_CHUNK: usize = 128 * 1024;

fn compress(encoder: &mut Encoder<'static>, data: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
    let mut input = InBuffer::around(data);
    while input.pos() < data.len() {
        out.reserve(OUT_CHUNK);
        let pos = out.len();
        let mut buf = OutBuffer::around_pos(out, pos);
        encoder.run(&mut input, &mut buf)?;
    }
    Ok(())
}

/// Calls a zstd flush or end operation until it reports nothing left to write.
fn drain(
    out: &mut Vec<u8>,
    mut op: impl FnMut(&mut OutBuffer<'_, Vec<u8>>) -> io::Result<usize>,
) -> io::Result<()> {
    loop {
        out.reserve(OUT_CHUNK);
        let pos = out.len();
        let mut buf = OutBuffer::around_pos(out, pos);
        if op(&mut buf)? == 0 {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_times_are_civil_dates() {
        assert_eq!(super::fmt_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            super::fmt_utc(1_795_331_531_178_383_168),
            "2026-11-22T07:12:11Z"
        );
        assert_eq!(
            super::fmt_utc(951_782_400 * 1_000_000_000),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(super::fmt_utc(-1), "1969-12-31T23:59:59Z");
    }
}
