//! Decoding of zstd frames and of the records inside them, tolerant of any input bytes.

use zstd::stream::raw::{DParameter, Decoder, InBuffer, Operation, OutBuffer};

use crate::format::{parse_record, Parsed, MAX_FRAME_RAW_BYTES};

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
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Damage {
    pub corrupt_records: u64,
    pub corrupt_frames: u64,
    pub torn_tails: u64,
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
        damage: &mut Damage,
        sink: &mut dyn FnMut(i64, &[u8]),
    ) {
        let (_, end) = self.decode_frame(bytes);
        let leftover = parse_records(&self.data, damage, sink);
        match end {
            FrameEnd::Complete => {
                if leftover != Leftover::None {
                    damage.corrupt_records += 1;
                }
            }
            // The index promised a complete frame in these bytes.
            FrameEnd::Eof { .. } | FrameEnd::Error => damage.corrupt_frames += 1,
        }
    }

    /// Decodes a run of frames with no index (the open frame, an unindexed tail after a crash, or
    /// a segment whose index was lost), passing every valid record to `sink`. After a damaged
    /// frame it resumes at the next zstd frame magic, so one bad frame does not hide the rest.
    pub fn scan(&mut self, bytes: &[u8], damage: &mut Damage, sink: &mut dyn FnMut(i64, &[u8])) {
        let mut pos = 0;
        while pos < bytes.len() {
            let (consumed, end) = self.decode_frame(&bytes[pos..]);
            let leftover = parse_records(&self.data, damage, sink);
            match end {
                FrameEnd::Complete => {
                    if leftover != Leftover::None {
                        damage.corrupt_records += 1;
                    }
                    pos += consumed.max(1);
                }
                FrameEnd::Eof { clean } => {
                    match leftover {
                        Leftover::Garbage => damage.corrupt_records += 1,
                        Leftover::Partial => damage.torn_tails += 1,
                        Leftover::None if !clean => damage.torn_tails += 1,
                        Leftover::None => {}
                    }
                    return;
                }
                FrameEnd::Error => {
                    damage.corrupt_frames += 1;
                    match find_magic(&bytes[pos + 1..]) {
                        Some(skip) => pos += 1 + skip,
                        None => return,
                    }
                }
            }
        }
    }
}

fn find_magic(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(ZSTD_MAGIC.len())
        .position(|w| w == ZSTD_MAGIC)
}

fn parse_records(data: &[u8], damage: &mut Damage, sink: &mut dyn FnMut(i64, &[u8])) -> Leftover {
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
                pos = next;
            }
            Parsed::BadLength => return Leftover::Garbage,
            Parsed::Incomplete => return Leftover::Partial,
        }
    }
    Leftover::None
}
