//! Checking a store's files for damage, and the pieces of a repair: rebuilding an index from
//! its segment, and the lock a repair takes so no recorder writes meanwhile.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::decode::{Damage, FrameDecoder};
use crate::format::{
    check_header, file_header, index_path, lane_path, segment_of_lane_file, Header, Lane,
    HEADER_LEN, INDEX_MAGIC, SEGMENT_MAGIC,
};
use crate::reader::{list_segments, name_ts, read_index, segment_max_ts, Segment};
use crate::{Result, StoreError};

/// Which file of a segment a [`FileCheck`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The main segment file.
    Segment,
    /// The main segment's index.
    Index,
    /// A lane's file.
    Lane(Lane),
    /// A lane's index.
    LaneIndex(Lane),
    /// A lane file whose segment is gone.
    Orphan,
}

/// One damaged file found by [`check_store`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileCheck {
    /// The damaged file.
    pub path: PathBuf,
    /// Its segment's main file.
    pub segment: PathBuf,
    /// Which of the segment's files it is.
    pub kind: Kind,
    /// What is wrong.
    pub what: String,
    /// Times of the records it holds or held, as far as its index or name tells.
    pub time: Option<(i64, i64)>,
    /// Records known lost (from index entries and failed CRCs), 0 when nothing or not countable.
    pub lost_records: u64,
    /// Whether no record of it can be read (a bad header): the file can only be moved aside.
    pub unreadable: bool,
}

/// Checks every segment of the store at `dir`: headers and indexes, and with `full` every
/// frame and record CRC of every segment and lane (a full decompression). Crash traces (a
/// torn tail, a torn last index entry) are not damage and are not listed.
pub fn check_store(dir: &Path, full: bool) -> Result<Vec<FileCheck>> {
    let segments = list_segments(dir)?;
    let mut out = Vec::new();
    let mut decoder = FrameDecoder::new().map_err(|e| StoreError::io(dir, e))?;
    for (i, seg) in segments.iter().enumerate() {
        let next = segments.get(i + 1).and_then(|n| name_ts(n));
        let main_ok = check_file(seg, seg, Kind::Segment, next, full, &mut decoder, &mut out);
        let main_max = if main_ok {
            segment_max_ts(seg).ok().flatten()
        } else {
            None
        };
        for lane in Lane::ALL {
            let lp = lane_path(seg, lane);
            if !lp.exists() {
                if index_path(&lp).exists() {
                    out.push(FileCheck {
                        path: lp.clone(),
                        segment: seg.clone(),
                        kind: Kind::Lane(lane),
                        what: format!("{lane:?} lane is missing (its index is there)"),
                        time: None,
                        lost_records: 0,
                        unreadable: true,
                    });
                }
                continue;
            }
            if !check_file(
                &lp,
                seg,
                Kind::Lane(lane),
                next,
                full,
                &mut decoder,
                &mut out,
            ) {
                continue;
            }
            // Only the signals lane has a record for every record: a sample without
            // processes writes no detail, so a detail lane may end early.
            if lane != Lane::Signals {
                continue;
            }
            let lane_max = segment_max_ts(&lp).ok().flatten();
            if let Some(m) = main_max.filter(|m| lane_max.is_none_or(|l| l < *m)) {
                let from = lane_max.unwrap_or(name_ts(seg).unwrap_or(m));
                out.push(FileCheck {
                    path: lp.clone(),
                    segment: seg.clone(),
                    kind: Kind::Lane(lane),
                    what: format!(
                        "{lane:?} lane ends before its segment: readers take the main stream"
                    ),
                    time: Some((from, m)),
                    lost_records: 0,
                    unreadable: false,
                });
            }
        }
    }
    for e in std::fs::read_dir(dir)
        .map_err(|e| StoreError::io(dir, e))?
        .flatten()
    {
        let name = e.file_name();
        let Some(seg) = name.to_str().and_then(segment_of_lane_file) else {
            continue;
        };
        if !dir.join(&seg).exists() {
            out.push(FileCheck {
                path: e.path(),
                segment: dir.join(seg),
                kind: Kind::Orphan,
                what: "lane file without its segment".into(),
                time: None,
                lost_records: 0,
                unreadable: true,
            });
        }
    }
    Ok(out)
}

/// Checks one segment-format file (main or lane) and its index; false when it cannot be
/// opened at all.
fn check_file(
    path: &Path,
    seg: &Path,
    kind: Kind,
    next: Option<i64>,
    full: bool,
    decoder: &mut FrameDecoder,
    out: &mut Vec<FileCheck>,
) -> bool {
    let idx_kind = match kind {
        Kind::Lane(l) => Kind::LaneIndex(l),
        _ => Kind::Index,
    };
    let mut damage = Damage::default();
    let opened = Segment::open(path, &mut damage);
    let name_span = name_ts(seg).map(|s| (s, next.map_or(s, |n| (n - 1).max(s))));
    let s = match opened {
        Err(e) => {
            let entries = read_index(path).0;
            let time = match (entries.first(), entries.last()) {
                (Some(a), Some(b)) => Some((
                    entries.iter().map(|e| e.min_ts).min().unwrap_or(a.min_ts),
                    entries.iter().map(|e| e.max_ts).max().unwrap_or(b.max_ts),
                )),
                _ => name_span,
            };
            out.push(FileCheck {
                path: path.to_path_buf(),
                segment: seg.to_path_buf(),
                kind,
                what: e.to_string(),
                time,
                lost_records: entries.iter().map(|e| u64::from(e.count)).sum(),
                unreadable: true,
            });
            return false;
        }
        Ok(None) => {
            // Too short for its header: a crash's trace when its index counts nothing, else
            // every record it counts is lost, and nothing of the file can be read.
            if damage.lost_records > 0 {
                let what = damage.files.iter().find(|f| f.path == path).map_or_else(
                    || "too short for its header".to_string(),
                    |f| f.what.clone(),
                );
                out.push(FileCheck {
                    path: path.to_path_buf(),
                    segment: seg.to_path_buf(),
                    kind,
                    what,
                    time: damage.lost.first().copied(),
                    lost_records: damage.lost_records,
                    unreadable: true,
                });
            }
            return true;
        }
        Ok(Some(s)) => s,
    };
    let index_missing = s.file_len > HEADER_LEN as u64 && !index_path(path).exists();
    if full {
        for i in 0..s.frames.len() {
            s.decode_frame(i, decoder, &mut damage, &mut |_, _| {});
        }
        let torn = damage.torn_tails;
        s.scan_tail(decoder, &mut damage, &mut |_, _| {});
        // A torn end is a crash's trace in the segment being written. In an older one with
        // no index to say what its frames held, it may as well be a cut: said, uncounted.
        if index_missing && next.is_some() && damage.torn_tails > torn {
            damage.file(
                path,
                "ends inside a frame and its index is missing: records after the cut may be lost (not countable)",
            );
        }
    }
    let mut own = Vec::new();
    for f in &damage.files {
        if f.path == path {
            own.push(f.what.clone());
        } else {
            out.push(FileCheck {
                path: f.path.clone(),
                segment: seg.to_path_buf(),
                kind: idx_kind,
                what: f.what.clone(),
                time: None,
                lost_records: 0,
                unreadable: false,
            });
        }
    }
    let bad = damage.corrupt_frames + damage.corrupt_records;
    if bad > 0 {
        own.push(format!(
            "{} corrupt frames, {} corrupt records",
            damage.corrupt_frames, damage.corrupt_records
        ));
    }
    if !own.is_empty() {
        let time = damage
            .lost
            .iter()
            .fold(None, |acc: Option<(i64, i64)>, &(a, b)| {
                Some(acc.map_or((a, b), |(x, y)| (x.min(a), y.max(b))))
            });
        out.push(FileCheck {
            path: path.to_path_buf(),
            segment: seg.to_path_buf(),
            kind,
            what: own.join("; "),
            time,
            lost_records: damage.lost_records,
            unreadable: false,
        });
    }
    true
}

/// Rebuilds the index of the segment-format file `path` (main or lane) from its frames: every
/// complete frame whose records all check out, up to the first that is not (the rest stays
/// scanned). Written to a temporary file and renamed over the index. Returns the entries.
pub fn rebuild_index(path: &Path) -> Result<usize> {
    let bytes = crate::perms::read_regular(path).map_err(|e| StoreError::io(path, e))?;
    let header = check_header(&bytes, SEGMENT_MAGIC);
    if let Some(e) = header.error(path) {
        return Err(e);
    }
    if header == Header::Short {
        return Ok(0);
    }
    let mut decoder = FrameDecoder::new().map_err(|e| StoreError::io(path, e))?;
    let entries = decoder.index_frames(&bytes[HEADER_LEN..]);
    let idx = index_path(path);
    let tmp = idx.with_extension("idx.tmp");
    let write = || -> io::Result<()> {
        let mut f = crate::perms::open(
            OpenOptions::new().write(true).create(true).truncate(true),
            &tmp,
        )?;
        f.write_all(&file_header(INDEX_MAGIC))?;
        for mut e in entries.iter().copied() {
            e.offset += HEADER_LEN as u64;
            f.write_all(&e.encode())?;
        }
        f.sync_all()?;
        std::fs::rename(&tmp, &idx)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        StoreError::io(&idx, e)
    })?;
    Ok(entries.len())
}

/// Puts a valid header back on a segment-format file whose header is damaged (bad magic, a
/// version byte gone wrong) when the rest of it decodes without damage: the header is 16
/// fixed bytes, the records carry their own CRCs. Written to a temporary file and renamed over
/// `path` after the caller moved the original aside (`keep_original`). Returns the records it
/// holds, or `None` (nothing changed) when it does not decode cleanly.
pub fn restore_header(
    path: &Path,
    keep_original: impl FnOnce(&Path) -> io::Result<()>,
) -> Result<Option<u64>> {
    let Ok(mut bytes) = crate::perms::read_regular(path) else {
        // Not a regular file, or not readable: nothing to restore.
        return Ok(None);
    };
    if bytes.len() <= HEADER_LEN {
        return Ok(None);
    }
    // Segments and lanes share the segment header; an index is rebuilt, never restored.
    if path.extension().is_none_or(|e| e != "jss") {
        return Ok(None);
    }
    bytes[..HEADER_LEN].copy_from_slice(&file_header(SEGMENT_MAGIC));
    let tmp = path.with_extension("tmp.jss");
    std::fs::write(&tmp, &bytes).map_err(|e| StoreError::io(&tmp, e))?;
    let mut damage = Damage::default();
    let mut decoder = FrameDecoder::new().map_err(|e| StoreError::io(path, e))?;
    let mut records = 0u64;
    let clean = match Segment::open(&tmp, &mut damage) {
        Ok(Some(seg)) => {
            for i in 0..seg.frames.len() {
                seg.decode_frame(i, &mut decoder, &mut damage, &mut |_, _| records += 1);
            }
            seg.scan_tail(&mut decoder, &mut damage, &mut |_, _| records += 1);
            records > 0
                && damage.corrupt_frames == 0
                && damage.corrupt_records == 0
                && damage.lost_records == 0
        }
        _ => false,
    };
    if !clean {
        let _ = std::fs::remove_file(&tmp);
        return Ok(None);
    }
    let done = File::open(&tmp)
        .and_then(|f| f.sync_all())
        .and_then(|()| keep_original(path))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = done {
        let _ = std::fs::remove_file(&tmp);
        return Err(StoreError::io(path, e));
    }
    Ok(Some(records))
}

/// Rewrites the segment-format file `path` with every record of it that still reads, frame by
/// frame as they were grouped, and a fresh index: what a cut, a zeroed block, a corrupt frame
/// or trailing garbage left readable becomes a clean file again. `keep_original` runs before
/// the rewrite replaces `path` (a repair moves the original and its index aside). Returns the
/// records kept, or `None` (nothing changed) when none reads.
///
/// For the main stream and the signals lane, whose records stand alone. A detail record may
/// refer to the ones before it in its frame, so a detail lane that lost records inside a frame
/// is not salvaged this way.
pub fn salvage(
    path: &Path,
    keep_original: impl FnOnce(&Path) -> io::Result<()>,
) -> Result<Option<u64>> {
    let mut damage = Damage::default();
    let Some(seg) = Segment::open(path, &mut damage)? else {
        return Ok(None);
    };
    let mut decoder = FrameDecoder::new().map_err(|e| StoreError::io(path, e))?;
    let mut frames: Vec<Vec<(i64, Vec<u8>)>> = Vec::new();
    for i in 0..seg.frames.len() {
        let mut f = Vec::new();
        seg.decode_frame(i, &mut decoder, &mut damage, &mut |ts, p| {
            f.push((ts, p.to_vec()))
        });
        frames.push(f);
    }
    let current = std::cell::RefCell::new(Vec::new());
    let ended = std::cell::RefCell::new(Vec::new());
    seg.scan_tail_frames(
        &mut decoder,
        &mut damage,
        &mut |ts, p| current.borrow_mut().push((ts, p.to_vec())),
        &mut || {
            ended
                .borrow_mut()
                .push(std::mem::take(&mut *current.borrow_mut()))
        },
    );
    frames.extend(ended.into_inner());
    frames.push(current.into_inner());
    frames.retain(|f| !f.is_empty());
    let kept: u64 = frames.iter().map(|f| f.len() as u64).sum();
    if kept == 0 {
        return Ok(None);
    }
    drop(seg);
    // Neither a segment nor a lane name: no reader or retention pass takes it for one.
    let tmp = path.with_extension("salvage.jss");
    let groups: Vec<&[(i64, Vec<u8>)]> = frames.iter().map(|f| f.as_slice()).collect();
    crate::writer::write_frames(&tmp, &groups)?;
    crate::writer::install(&tmp, path, || keep_original(path))?;
    Ok(Some(kept))
}
