//! On-disk format, version [`FORMAT_VERSION`]. All integers are little-endian.
//!
//! Segment file `seg-<first ts ns, 20 digits>.jss`:
//! - 16-byte header: magic `JSCOPESG`, u16 format version, u16 flags (0), u32 reserved (0);
//! - then zstd frames. Decompressed, a frame is a sequence of records:
//!   u32 payload length, u32 CRC32 of (i64 ts bytes + payload), i64 ts ns, payload.
//!   The writer flushes the compressor after every record, so the file always ends on a zstd block
//!   boundary except while a write is in flight or after it was torn.
//!
//! Index file `seg-<same>.idx`: 16-byte header (magic `JSCOPEIX`, u16 version, u16 flags,
//! u32 reserved), then one [`INDEX_ENTRY_LEN`]-byte entry per completed frame: u64 frame offset,
//! u64 frame length, i64 first ts, i64 last ts, i64 min ts, i64 max ts, u32 record count,
//! u32 CRC32 of the preceding 52 bytes. Entries describe consecutive frames starting at offset 16;
//! the first entry that is torn, fails its CRC or does not continue where the previous frame ended
//! ends the index, and readers decode the rest of the segment by scanning.
//!
//! The version is the store's own; payload encodings are versioned by their producer.

use std::path::{Path, PathBuf};

/// Version of the segment and index formats written by this build, and the only one it reads.
pub const FORMAT_VERSION: u16 = 1;
/// Magic bytes starting a segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"JSCOPESG";
/// Magic bytes starting an index file.
pub const INDEX_MAGIC: [u8; 8] = *b"JSCOPEIX";
/// Length of the segment and index file headers.
pub const HEADER_LEN: usize = 16;
/// Length of a record's header inside the decompressed stream.
pub const RECORD_HEADER_LEN: usize = 16;
/// Length of one index entry.
pub const INDEX_ENTRY_LEN: usize = 56;
/// Largest payload the store accepts. Readers treat a larger length field as corruption, which
/// bounds what a damaged file can make them allocate.
pub const MAX_PAYLOAD_BYTES: usize = 64 << 20;
/// Largest decompressed size of one frame; the writer ends frames before it, readers refuse more.
pub const MAX_FRAME_RAW_BYTES: usize = 256 << 20;

/// Header of a segment or index file.
pub(crate) fn file_header(magic: [u8; 8]) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&magic);
    h[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h
}

/// What a file header says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Header {
    Valid,
    /// Fewer than [`HEADER_LEN`] bytes: the file was cut right after creation.
    Short,
    BadMagic,
    UnknownVersion(u16),
}

impl Header {
    /// The error a segment with this header is for its readers: none when it is valid or
    /// short (a file cut right after creation holds nothing, and is no damage to report).
    pub(crate) fn error(&self, path: &std::path::Path) -> Option<crate::StoreError> {
        match *self {
            Header::Valid | Header::Short => None,
            Header::BadMagic => Some(crate::StoreError::BadMagic {
                path: path.to_path_buf(),
            }),
            Header::UnknownVersion(version) => Some(crate::StoreError::UnsupportedVersion {
                path: path.to_path_buf(),
                version,
                supported: FORMAT_VERSION,
            }),
        }
    }
}

pub(crate) fn check_header(bytes: &[u8], magic: [u8; 8]) -> Header {
    if bytes.len() < HEADER_LEN {
        return Header::Short;
    }
    if bytes[..8] != magic {
        return Header::BadMagic;
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if version != FORMAT_VERSION {
        return Header::UnknownVersion(version);
    }
    Header::Valid
}

/// One index entry: where a completed frame is and what times it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub offset: u64,
    pub len: u64,
    pub first_ts: i64,
    pub last_ts: i64,
    pub min_ts: i64,
    pub max_ts: i64,
    pub count: u32,
}

impl IndexEntry {
    pub fn encode(&self) -> [u8; INDEX_ENTRY_LEN] {
        let mut b = [0u8; INDEX_ENTRY_LEN];
        b[0..8].copy_from_slice(&self.offset.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..24].copy_from_slice(&self.first_ts.to_le_bytes());
        b[24..32].copy_from_slice(&self.last_ts.to_le_bytes());
        b[32..40].copy_from_slice(&self.min_ts.to_le_bytes());
        b[40..48].copy_from_slice(&self.max_ts.to_le_bytes());
        b[48..52].copy_from_slice(&self.count.to_le_bytes());
        let crc = crc32fast::hash(&b[..52]);
        b[52..56].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes an entry, or `None` if its CRC does not match or its fields are inconsistent.
    pub fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != INDEX_ENTRY_LEN || crc32fast::hash(&b[..52]) != le_u32(&b[52..56]) {
            return None;
        }
        let e = IndexEntry {
            offset: le_u64(&b[0..8]),
            len: le_u64(&b[8..16]),
            first_ts: le_i64(&b[16..24]),
            last_ts: le_i64(&b[24..32]),
            min_ts: le_i64(&b[32..40]),
            max_ts: le_i64(&b[40..48]),
            count: le_u32(&b[48..52]),
        };
        let consistent = e.count > 0
            && e.len > 0
            && e.min_ts <= e.max_ts
            && (e.min_ts..=e.max_ts).contains(&e.first_ts)
            && (e.min_ts..=e.max_ts).contains(&e.last_ts);
        consistent.then_some(e)
    }
}

/// Header of a record inside the decompressed stream.
pub(crate) fn record_header(ts_ns: i64, payload: &[u8]) -> [u8; RECORD_HEADER_LEN] {
    let ts = ts_ns.to_le_bytes();
    let mut crc = crc32fast::Hasher::new();
    crc.update(&ts);
    crc.update(payload);
    let mut h = [0u8; RECORD_HEADER_LEN];
    // The writer rejects payloads over MAX_PAYLOAD_BYTES, so the length fits in u32.
    h[0..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    h[4..8].copy_from_slice(&crc.finalize().to_le_bytes());
    h[8..16].copy_from_slice(&ts);
    h
}

/// Outcome of parsing one record at some position of a decompressed frame.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Parsed {
    /// A record whose CRC checks out; `next` is where the following record starts.
    Record {
        ts_ns: i64,
        payload: std::ops::Range<usize>,
        next: usize,
    },
    /// Length is plausible but the CRC does not match: skip to `next`.
    BadCrc { next: usize },
    /// The length field is impossible; nothing after it in this frame can be trusted.
    BadLength,
    /// The data ends before the record does.
    Incomplete,
}

pub(crate) fn parse_record(data: &[u8], pos: usize) -> Parsed {
    let Some(rest) = data.get(pos..) else {
        return Parsed::Incomplete;
    };
    if rest.len() < RECORD_HEADER_LEN {
        return Parsed::Incomplete;
    }
    let len = le_u32(&rest[0..4]) as usize;
    if len > MAX_PAYLOAD_BYTES {
        return Parsed::BadLength;
    }
    if rest.len() - RECORD_HEADER_LEN < len {
        return Parsed::Incomplete;
    }
    let stored_crc = le_u32(&rest[4..8]);
    let body = &rest[8..RECORD_HEADER_LEN + len];
    let next = pos + RECORD_HEADER_LEN + len;
    if crc32fast::hash(body) != stored_crc {
        return Parsed::BadCrc { next };
    }
    Parsed::Record {
        ts_ns: le_i64(&rest[8..16]),
        payload: pos + RECORD_HEADER_LEN..next,
        next,
    }
}

/// Segment file name for a segment whose first record has `ts_ns`. Negative times (before 1970)
/// are named as 0 so names stay fixed-width and sort in time order.
pub(crate) fn segment_file_name(ts_ns: i64) -> String {
    format!("seg-{:020}.jss", ts_ns.max(0))
}

/// Index path beside a segment path.
pub(crate) fn index_path(segment: &Path) -> PathBuf {
    segment.with_extension("idx")
}

/// A segment's lanes besides its main one: second streams of records with the same
/// timestamps, in files of the segment format named `seg-<ts>.<letter>.jss` (index
/// `seg-<ts>.<letter>.idx`). Builds that predate lanes do not list them as segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Bulky per-record detail (the recorder: the process table), joined to main records by
    /// [`Reader::range`](crate::Reader::range).
    Detail,
    /// Small per-record summaries (the recorder: derived key series and event marks), read on
    /// their own by [`Reader::range_lane`](crate::Reader::range_lane).
    Signals,
}

impl Lane {
    /// Every lane, in deletion order.
    pub const ALL: [Lane; 2] = [Lane::Detail, Lane::Signals];

    fn letter(self) -> &'static str {
        match self {
            Lane::Detail => "d",
            Lane::Signals => "s",
        }
    }
}

/// Path of `lane`'s file beside a segment path.
pub(crate) fn lane_path(segment: &Path, lane: Lane) -> PathBuf {
    segment.with_extension(format!("{}.jss", lane.letter()))
}

/// Every file of a segment, in the order they are deleted: lanes first, so a deletion cut
/// short leaves a segment without some lane rather than a lane without its segment.
pub(crate) fn segment_files(segment: &Path) -> Vec<PathBuf> {
    let mut out = Vec::with_capacity(6);
    for lane in Lane::ALL {
        let p = lane_path(segment, lane);
        out.push(index_path(&p));
        out.push(p);
    }
    out.push(index_path(segment));
    out.push(segment.to_path_buf());
    out
}

/// For a lane file name (`seg-<ts>.<letter>.jss` or `.idx`), the name of its segment.
pub(crate) fn segment_of_lane_file(name: &str) -> Option<String> {
    let stem = name
        .strip_suffix(".jss")
        .or_else(|| name.strip_suffix(".idx"))?;
    let (seg, letter) = stem.rsplit_once('.')?;
    if !Lane::ALL.iter().any(|l| l.letter() == letter) {
        return None;
    }
    let seg = format!("{seg}.jss");
    is_segment_file_name(&seg).then_some(seg)
}

/// True if `name` is a segment file name written by [`segment_file_name`].
pub(crate) fn is_segment_file_name(name: &str) -> bool {
    name.len() == 4 + 20 + 4
        && name.starts_with("seg-")
        && name.ends_with(".jss")
        && name[4..24].bytes().all(|b| b.is_ascii_digit())
}

fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b.try_into().expect("4 bytes"))
}

fn le_u64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b.try_into().expect("8 bytes"))
}

fn le_i64(b: &[u8]) -> i64 {
    i64::from_le_bytes(b.try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_entry_round_trips_and_rejects_a_flipped_bit() {
        let e = IndexEntry {
            offset: 16,
            len: 1234,
            first_ts: 5,
            last_ts: 9,
            min_ts: 3,
            max_ts: 9,
            count: 60,
        };
        let mut b = e.encode();
        assert_eq!(IndexEntry::decode(&b), Some(e));
        b[20] ^= 0x10;
        assert_eq!(IndexEntry::decode(&b), None);
    }

    #[test]
    fn record_parses_and_detects_crc_mismatch() {
        let mut data = record_header(-7, b"hello").to_vec();
        data.extend_from_slice(b"hello");
        match parse_record(&data, 0) {
            Parsed::Record {
                ts_ns,
                payload,
                next,
            } => {
                assert_eq!(ts_ns, -7);
                assert_eq!(&data[payload], b"hello");
                assert_eq!(next, data.len());
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(parse_record(&data[..data.len() - 1], 0), Parsed::Incomplete);
        data[17] ^= 1;
        assert_eq!(parse_record(&data, 0), Parsed::BadCrc { next: data.len() });
    }

    #[test]
    fn segment_names_are_fixed_width_and_recognised() {
        assert_eq!(segment_file_name(42), "seg-00000000000000000042.jss");
        assert_eq!(segment_file_name(-1), "seg-00000000000000000000.jss");
        assert!(is_segment_file_name(&segment_file_name(i64::MAX)));
        assert!(!is_segment_file_name("seg-0000000000000000004x.jss"));
        assert!(!is_segment_file_name("LOCK"));
        let seg = Path::new("/s").join(segment_file_name(42));
        let d = lane_path(&seg, Lane::Detail);
        assert_eq!(d, Path::new("/s/seg-00000000000000000042.d.jss"));
        assert!(!is_segment_file_name(
            d.file_name().unwrap().to_str().unwrap()
        ));
        assert_eq!(
            index_path(&d),
            Path::new("/s/seg-00000000000000000042.d.idx")
        );
        assert_eq!(
            lane_path(&seg, Lane::Signals),
            Path::new("/s/seg-00000000000000000042.s.jss")
        );
        assert_eq!(
            segment_of_lane_file("seg-00000000000000000042.d.idx").as_deref(),
            Some("seg-00000000000000000042.jss")
        );
        assert_eq!(
            segment_of_lane_file("seg-00000000000000000042.s.jss").as_deref(),
            Some("seg-00000000000000000042.jss")
        );
        assert_eq!(segment_of_lane_file("seg-00000000000000000042.x.jss"), None);
        assert_eq!(segment_of_lane_file("seg-42.d.jss"), None);
        assert_eq!(segment_of_lane_file(&segment_file_name(42)), None);
        assert_eq!(segment_files(&seg).len(), 6);
    }

    #[test]
    fn header_versions() {
        let mut h = file_header(SEGMENT_MAGIC);
        assert_eq!(check_header(&h, SEGMENT_MAGIC), Header::Valid);
        assert_eq!(check_header(&h, INDEX_MAGIC), Header::BadMagic);
        assert_eq!(check_header(&h[..5], SEGMENT_MAGIC), Header::Short);
        h[8] = 2;
        assert_eq!(check_header(&h, SEGMENT_MAGIC), Header::UnknownVersion(2));
    }
}
