//! Decoding of zstd frames and of the records inside them, tolerant of any input bytes.

use std::cell::{Cell, RefCell};

use zstd::stream::raw::{DParameter, Decoder, InBuffer, Operation, OutBuffer};

use crate::format::{parse_record, IndexEntry, Parsed, MAX_FRAME_RAW_BYTES};

/// zstd frame magic number as it appears in the file.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// What a decompressing pass reports after the writer flushed a whole block and nothing follows:
/// the decoder then asks for exactly one block header. Any other hint at end of input means a
/// frame header or block was cut short, i.e. a torn write.
const BLOCK_HEADER_LEN: usize = 3;

/// Largest window the writer uses is 2^WRITER_WINDOW_LOG; readers allow a little more but refuse
/// frames that would make them allocate huge windows because a header byte was damaged.
pub(crate) const WRITER_WINDOW_LOG: u32 = 22;
const READER_WINDOW_LOG_MAX: u32 = 24;

/// Damage seen while decoding, accumulated by readers.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Damage {
    pub corrupt_records: u64,
    pub corrupt_frames: u64,
    pub torn_tails: u64,
    /// Records known to be lost: an index entry says how many records its frame held, so a
    /// damaged indexed frame's loss is counted; a damaged unindexed frame's is not countable.
    pub lost_records: u64,
    /// Time spans of lost records `(min, max)`, as their index entries or the records around
    /// the damage give them.
    pub lost: Vec<(i64, i64)>,
    /// Files the read gave up on or read around, with what was wrong.
    pub files: Vec<crate::DamagedFile>,
}

impl Damage {
    pub fn lose(&mut self, records: u64, span: Option<(i64, i64)>) {
        self.lost_records += records;
        if let Some(s) = span {
            self.lost.push(s);
        }
    }

    pub fn file(&mut self, path: &std::path::Path, what: impl Into<String>) {
        let what = what.into();
        // A range may open a segment more than once (its detail lane per frame): said once.
        if !self.files.iter().any(|f| f.path == path && f.what == what) {
            self.files.push(crate::DamagedFile {
                path: path.to_path_buf(),
                what,
            });
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum FrameEnd {
    /// The frame ended properly.
    Complete,
    /// Input ran out inside the frame; `clean` if it ran out exactly after a flushed block.
    Eof { clean: bool },
    /// The bytes are not a valid zstd frame (or decompress to more than a frame may hold).
    Error,
}

/// How the decompressed bytes of a frame ended, after the last valid record.
#[derive(Debug, PartialEq, Eq)]
enum Leftover {
    None,
    /// Bytes that could be the start of a record not fully written.
    Partial,
    /// An impossible length field: the rest of the frame is unusable.
    Garbage,
}

pub(crate) struct FrameDecoder {
    dctx: Decoder<'static>,
    data: Vec<u8>,
}

impl FrameDecoder {
    pub fn new() -> std::io::Result<Self> {
        let mut dctx = Decoder::new()?;
        dctx.set_parameter(DParameter::WindowLogMax(READER_WINDOW_LOG_MAX))?;
        Ok(FrameDecoder {
            dctx,
            data: Vec::new(),
        })
    }

    /// Decompresses one frame from the start of `input` into `self.data`; returns the number of
    /// input bytes it used and how the frame ended.
    fn decode_frame(&mut self, input: &[u8]) -> (usize, FrameEnd) {
        self.data.clear();
        if self.dctx.reinit().is_err() {
            return (0, FrameEnd::Error);
        }
        let mut inbuf = InBuffer::around(input);
        loop {
            if self.data.capacity() - self.data.len() < 64 * 1024 {
                if self.data.len() >= MAX_FRAME_RAW_BYTES {
                    return (inbuf.pos(), FrameEnd::Error);
                }
                let grow = self.data.len().clamp(128 * 1024, 16 << 20);
                self.data.reserve(grow);
            }
            let (in_before, out_before) = (inbuf.pos(), self.data.len());
            let mut out = OutBuffer::around_pos(&mut self.data, out_before);
            let res = self.dctx.run(&mut inbuf, &mut out);
            let (out_pos, out_cap) = (out.pos(), out.capacity());
            match res {
                Err(_) => return (inbuf.pos(), FrameEnd::Error),
                Ok(0) => return (inbuf.pos(), FrameEnd::Complete),
                Ok(hint) => {
                    let input_done = inbuf.pos() == input.len();
                    if input_done && out_pos < out_cap {
                        return (
                            inbuf.pos(),
                            FrameEnd::Eof {
                                clean: hint == BLOCK_HEADER_LEN,
                            },
                        );
                    }
                    if inbuf.pos() == in_before && out_pos == out_before && out_pos < out_cap {
                        // No progress with room on both sides would loop forever; zstd never
                        // does this on valid input.
                        return (inbuf.pos(), FrameEnd::Error);
                    }
                }
            }
        }
    }

    /// Decodes one frame known from the index to span all of `bytes`, passing every valid
    /// record to `sink`.
    pub fn indexed_frame(
        &mut self,
        bytes: &[u8],
        entry: &IndexEntry,
        damage: &mut Damage,
        sink: &mut dyn FnMut(i64, &[u8]),
    ) {
        let (_, end) = self.decode_frame(bytes);
        let mut got = 0u64;
        let before = damage.lost_records;
        let leftover = parse_records(
            &self.data,
            damage,
            &mut |ts, p| {
                got += 1;
                sink(ts, p)
            },
            &mut || {},
        );
        // The entry's count is the whole loss; bad records were already counted in it.
        damage.lost_records = before;
        match end {
            FrameEnd::Complete => {
                if leftover != Leftover::None {
                    damage.corrupt_records += 1;
                }
            }
            // The index promised a complete frame in these bytes.
            FrameEnd::Eof { .. } | FrameEnd::Error => damage.corrupt_frames += 1,
        }
        let count = u64::from(entry.count);
        if got < count {
            damage.lose(count - got, Some((entry.min_ts, entry.max_ts)));
        }
    }

    /// The complete frames at the start of `bytes` whose records all check out, as index
    /// entries relative to `bytes` (offset 0 = its start); stops at the first frame that is
    /// not. What an index rebuilt from its segment holds.
    pub fn index_frames(&mut self, bytes: &[u8]) -> Vec<IndexEntry> {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < bytes.len() {
            let (consumed, end) = self.decode_frame(&bytes[pos..]);
            if end != FrameEnd::Complete || consumed == 0 {
                break;
            }
            let mut d = Damage::default();
            let mut ts: Vec<i64> = Vec::new();
            let leftover = parse_records(&self.data, &mut d, &mut |t, _| ts.push(t), &mut || {});
            if leftover != Leftover::None || d.corrupt_records > 0 || ts.is_empty() {
                break;
            }
            out.push(IndexEntry {
                offset: pos as u64,
                len: consumed as u64,
                first_ts: ts[0],
                last_ts: ts[ts.len() - 1],
                min_ts: ts.iter().copied().min().unwrap_or(ts[0]),
                max_ts: ts.iter().copied().max().unwrap_or(ts[0]),
                count: ts.len() as u32,
            });
            pos += consumed;
        }
        out
    }

    /// Decodes a run of frames with no index (the open frame, an unindexed tail after a crash, or
    /// a segment whose index was lost), passing every valid record to `sink`. After a damaged
    /// frame it resumes at the next zstd frame magic, so one bad frame does not hide the rest.
    /// `frame_end` is called after the records of each frame (complete, cut or damaged).
    pub fn scan_frames(
        &mut self,
        bytes: &[u8],
        before: Option<i64>,
        damage: &mut Damage,
        sink: &mut dyn FnMut(i64, &[u8]),
        frame_end: &mut dyn FnMut(),
    ) {
        // Unindexed damage has no count; its time span is taken from the good records around
        // it: the last one before (or `before`), the first one after.
        let last_good = Cell::new(before);
        let gap: Cell<Option<Option<i64>>> = Cell::new(None);
        let spans = RefCell::new(Vec::new());
        let mut good = |ts: i64, p: &[u8]| {
            if let Some(start) = gap.take() {
                spans.borrow_mut().push((start.unwrap_or(ts), ts));
            }
            last_good.set(Some(ts));
            sink(ts, p)
        };
        let mark = || {
            if gap.get().is_none() {
                gap.set(Some(last_good.get()));
            }
        };
        let mut pos = 0;
        while pos < bytes.len() {
            let (consumed, end) = self.decode_frame(&bytes[pos..]);
            let leftover = parse_records(&self.data, damage, &mut good, &mut || mark());
            frame_end();
            match end {
                FrameEnd::Complete => {
                    if leftover != Leftover::None {
                        damage.corrupt_records += 1;
                        mark();
                    }
                    pos += consumed.max(1);
                }
                FrameEnd::Eof { clean } => {
                    match leftover {
                        Leftover::Garbage => {
                            damage.corrupt_records += 1;
                            mark();
                        }
                        Leftover::Partial => damage.torn_tails += 1,
                        Leftover::None if !clean => damage.torn_tails += 1,
                        Leftover::None => {}
                    }
                    break;
                }
                FrameEnd::Error => {
                    damage.corrupt_frames += 1;
                    mark();
                    match find_magic(&bytes[pos + 1..]) {
                        Some(skip) => pos += 1 + skip,
                        None => break,
                    }
                }
            }
        }
        // Damage with no good record after it: lost after the last good one, end unknown.
        if let Some(Some(start)) = gap.take() {
            spans.borrow_mut().push((start, start));
        }
        damage.lost.extend(spans.into_inner());
    }
}

fn find_magic(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(ZSTD_MAGIC.len())
        .position(|w| w == ZSTD_MAGIC)
}

fn parse_records(
    data: &[u8],
    damage: &mut Damage,
    sink: &mut dyn FnMut(i64, &[u8]),
    bad: &mut dyn FnMut(),
) -> Leftover {
    let mut pos = 0;
    while pos < data.len() {
        match parse_record(data, pos) {
            Parsed::Record {
                ts_ns,
                payload,
                next,
            } => {
                sink(ts_ns, &data[payload]);
                pos = next;
            }
            Parsed::BadCrc { next } => {
                damage.corrupt_records += 1;
                // A record whose CRC failed is one record, whatever else it says.
                damage.lost_records += 1;
                bad();
                pos = next;
            }
            Parsed::BadLength => return Leftover::Garbage,
            Parsed::Incomplete => return Leftover::Partial,
        }
    }
    Leftover::None
}
