//! The payload encoding of one sample in the store.
//!
//! A payload is one codec byte followed by the sample as a MessagePack map with field names
//! (rmp-serde "named" encoding). Names make the encoding evolvable in both directions: a reader
//! ignores fields it does not know (written by a newer recorder) and defaults fields it does not
//! find (files written before the field existed), which `tests/evolution.rs` checks against a
//! store recorded by an earlier build. The repeated names cost little after zstd compresses a
//! run of samples together in the store.
//!
//! The process table goes to the record's detail lane ([`encode_lanes`]), as its own payload
//! with its own codec byte: [`CODEC_COLUMNS_US`] (one array per field, see the `columns`
//! module) for the first table of a store frame and [`CODEC_COLUMNS_DELTA`] (the same, each
//! process's fields as differences from the table before) for the others ([`DetailEncoder`],
//! read back in order by a [`DetailChain`]), or, in stores written before them,
//! [`CODEC_COLUMNS`] (self-contained, schedstat's times in ns) or [`CODEC_MSGPACK_NAMED_V2`]
//! (one map per process). There the names did cost: repeated for each of a busy host's 600
//! processes, they made a raw sample 430 KB that the writer had to serialize and compress and
//! every reader to walk.

use std::cell::Cell;

use jitterscope_sources::process::Process;
use serde::{Deserialize, Deserializer};

use crate::sample::Sample;

mod columns;

/// The large parts of a sample a reader may leave undecoded (bit set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Parts(u8);

impl Parts {
    /// No optional part: system-wide data only.
    pub const NONE: Parts = Parts(0);
    /// Every process.
    pub const PROCESSES: Parts = Parts(1);
    /// Every cgroup.
    pub const CGROUPS: Parts = Parts(2);
    /// Every slab cache.
    pub const SLABINFO: Parts = Parts(4);
    /// The stack sampler's slice.
    pub const PROFILE: Parts = Parts(8);
    /// Everything.
    pub const ALL: Parts = Parts(15);

    /// Both sets.
    pub fn union(self, o: Parts) -> Parts {
        Parts(self.0 | o.0)
    }

    /// These parts without those of `o`.
    pub fn without(self, o: Parts) -> Parts {
        Parts(self.0 & !o.0)
    }

    /// Whether every part of `o` is in `self`.
    pub fn contains(self, o: Parts) -> bool {
        self.0 & o.0 == o.0
    }
}

thread_local! {
    static WANTED: Cell<Parts> = const { Cell::new(Parts::ALL) };
}

/// Deserializes a large part only when the current decode wants it; otherwise walks over its
/// bytes without building anything (reading one series over a minute of a busy host's samples
/// should not allocate every process of every sample).
fn part<'de, D, T>(d: D, p: Parts) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    if WANTED.with(|w| w.get().contains(p)) {
        Option::<T>::deserialize(d)
    } else {
        serde::de::IgnoredAny::deserialize(d)?;
        Ok(None)
    }
}

pub(crate) fn de_processes<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    blob_part(d, Parts::PROCESSES)
}

pub(crate) fn de_cgroups<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    blob_part(d, Parts::CGROUPS)
}

/// Writes a large list as one MessagePack blob (bytes) inside the sample, so a reader that does
/// not want it skips it by its length. Walking a host's 500 processes field by field only to
/// skip them was most of the time of reading a day of host metrics (52 s for 24 h of
/// `cpu.sys_pct`): rmp-serde visits, and checks the UTF-8 of, every key and string.
pub(crate) fn ser_blob<S, T>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error>
where
    S: serde::Serializer,
    T: serde::Serialize,
{
    use serde::ser::Error;
    struct Blob<'a>(&'a [u8]);
    impl serde::Serialize for Blob<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(self.0)
        }
    }
    match v {
        None => s.serialize_none(),
        Some(v) => {
            let mut buf = Vec::new();
            let mut ser = rmp_serde::Serializer::new(&mut buf).with_struct_map();
            serde::Serialize::serialize(v, &mut ser).map_err(S::Error::custom)?;
            s.serialize_some(&Blob(&buf))
        }
    }
}

/// Reads a part written by [`ser_blob`] (codec 2) or, from stores written before, as a plain
/// nested value (codec 1); skips it by length when the decode does not want it.
fn blob_part<'de, D, T>(d: D, p: Parts) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
    use serde::de::Error;
    use std::marker::PhantomData;
    if !WANTED.with(|w| w.get().contains(p)) {
        serde::de::IgnoredAny::deserialize(d)?;
        return Ok(None);
    }
    struct Either<T>(PhantomData<T>);
    impl<'de, T: serde::de::DeserializeOwned> serde::de::Visitor<'de> for Either<T> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a MessagePack blob or a list")
        }
        fn visit_bytes<E: Error>(self, v: &[u8]) -> Result<T, E> {
            rmp_serde::from_slice(v).map_err(E::custom)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, a: A) -> Result<T, A::Error> {
            T::deserialize(SeqAccessDeserializer::new(a))
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, a: A) -> Result<T, A::Error> {
            T::deserialize(MapAccessDeserializer::new(a))
        }
    }
    struct Opt<T>(PhantomData<T>);
    impl<'de, T: serde::de::DeserializeOwned> serde::de::Visitor<'de> for Opt<T> {
        type Value = Option<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an optional blob or list")
        }
        fn visit_none<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_any(Either(PhantomData)).map(Some)
        }
    }
    d.deserialize_option(Opt(PhantomData))
}

pub(crate) fn de_slabinfo<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    part(d, Parts::SLABINFO)
}

/// The stack slice is stored as one blob (bytes) inside the sample rather than as a nested map:
/// a reader that does not want it skips it by its length instead of walking its thousands of
/// frames and stacks (that walk made reading a minute of metrics 5% slower). Since codec 3 the
/// blob is the slice's columnar layout ([`crate::profile::Profile::to_columns`]).
pub(crate) fn ser_profile<S>(p: &Option<crate::profile::Profile>, s: S) -> Result<S::Ok, S::Error>
where
    S: serde::Serializer,
{
    use serde::ser::Error;
    struct Blob<'a>(&'a [u8]);
    impl serde::Serialize for Blob<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(self.0)
        }
    }
    match p {
        None => s.serialize_none(),
        Some(p) => {
            let mut buf = Vec::new();
            p.to_columns(&mut buf).map_err(S::Error::custom)?;
            s.serialize_some(&Blob(&buf))
        }
    }
}

pub(crate) fn de_profile<'de, D>(d: D) -> Result<Option<crate::profile::Profile>, D::Error>
where
    D: Deserializer<'de>,
{
    use serde::de::Error;
    if !WANTED.with(|w| w.get().contains(Parts::PROFILE)) {
        serde::de::IgnoredAny::deserialize(d)?;
        return Ok(None);
    }
    struct Bytes;
    impl<'de> serde::de::Visitor<'de> for Bytes {
        type Value = Vec<u8>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a MessagePack blob")
        }
        fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Vec<u8>, A::Error> {
            let mut v = Vec::new();
            while let Some(b) = a.next_element()? {
                v.push(b);
            }
            Ok(v)
        }
    }
    struct Blob;
    impl<'de> serde::de::Visitor<'de> for Blob {
        type Value = Option<Vec<u8>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an optional MessagePack blob")
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_bytes(Bytes).map(Some)
        }
    }
    match d.deserialize_option(Blob)? {
        None => Ok(None),
        // Codec 3: the columnar layout; codec 2: the slice as a map.
        Some(b) => match b.split_first() {
            Some((&crate::profile::COLUMNAR, rest)) => crate::profile::Profile::from_columns(rest)
                .map(Some)
                .map_err(D::Error::custom),
            _ => rmp_serde::from_slice(&b)
                .map(Some)
                .map_err(D::Error::custom),
        },
    }
}

/// Codec byte of MessagePack-with-field-names payloads whose processes and cgroups are nested
/// lists (stores written before codec 2; still read).
pub const CODEC_MSGPACK_NAMED_V1: u8 = 1;

/// Codec byte of payloads whose processes and cgroups are blobs a reader can skip by length,
/// as codec 1 otherwise (main payloads before codec 3, detail lanes before [`CODEC_COLUMNS`];
/// still read).
pub const CODEC_MSGPACK_NAMED_V2: u8 = 2;

/// Codec byte of the main payloads this build writes: as codec 2, but the stack slice is in
/// the columnar layout ([`crate::profile::COLUMNAR`]). A build that reads only codecs 1 and 2
/// stops with "unknown payload codec 3" instead of misreading the slice. (Main payloads and
/// detail lanes number their codecs apart: a detail lane's 3 is [`CODEC_COLUMNS`].)
pub const CODEC_MSGPACK_NAMED: u8 = 3;

/// Codec byte of the detail lanes written before [`CODEC_COLUMNS_US`]: the process table by
/// column (see the `columns` module), schedstat's times in ns (still read). A build that reads
/// only codecs 1 and 2 keeps the sample's host data and reads it without processes.
pub const CODEC_COLUMNS: u8 = 3;

/// Codec byte of the detail lanes this build writes: as [`CODEC_COLUMNS`], with schedstat's run
/// and wait time kept to the µs (see the `columns` module). A build that reads only codecs up
/// to 3 reads the sample without processes.
pub const CODEC_COLUMNS_US: u8 = 4;

/// Codec byte of the detail lanes this build writes after the first of a store frame: a
/// [`CODEC_COLUMNS_US`] table whose rows that were in the frame's previous table (the same pid
/// and start time) hold their differences from that row, and whose names are written only where
/// they changed (see the `columns` module). It reads only after the records before it in its
/// frame ([`DetailChain`]); a build that reads only codecs up to 4 reads the frame's first
/// sample with its processes and the others without.
pub const CODEC_COLUMNS_DELTA: u8 = 5;

/// Errors decoding a payload.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The payload was empty.
    #[error("empty payload")]
    Empty,
    /// A codec this build does not know (written by a much newer recorder).
    #[error("unknown payload codec {0}; this build reads codecs {CODEC_MSGPACK_NAMED_V1} to {CODEC_MSGPACK_NAMED} (main) and {CODEC_MSGPACK_NAMED_V2} to {CODEC_COLUMNS_DELTA} (detail)")]
    UnknownCodec(u8),
    /// The MessagePack did not decode into a sample.
    #[error("undecodable sample: {0}")]
    Decode(#[from] rmp_serde::decode::Error),
    /// A process table's columns did not decode.
    #[error("undecodable process table: {0}")]
    Columns(#[from] prost::DecodeError),
    /// A process table's columns do not fit together.
    #[error("undecodable sample: {0}")]
    Table(#[from] columns::TableError),
    /// A delta table read without the table it is relative to: the record before it in its
    /// frame was not read (lost to damage) or was not the one it was written after.
    #[error("process table relative to a table that was not read (base {0})")]
    MissingBase(i64),
    /// Encoding failed (cannot happen for well-formed samples; kept rather than panicking).
    #[error("unencodable sample: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
    /// Encoding the columns failed (cannot happen: a Vec has room for any message).
    #[error("unencodable process table: {0}")]
    EncodeColumns(#[from] prost::EncodeError),
}

/// Encodes a sample into `out` (cleared first), reusing its allocation.
pub fn encode_into(sample: &Sample, out: &mut Vec<u8>) -> Result<(), CodecError> {
    out.clear();
    out.push(CODEC_MSGPACK_NAMED);
    let mut ser = rmp_serde::Serializer::new(&mut *out).with_struct_map();
    serde::Serialize::serialize(sample, &mut ser)?;
    Ok(())
}

/// Encodes a sample.
pub fn encode(sample: &Sample) -> Result<Vec<u8>, CodecError> {
    let mut v = Vec::new();
    encode_into(sample, &mut v)?;
    Ok(v)
}

/// What the recorder put in a record's detail lane with codec 2: the process table as one
/// blob of one map per process.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(bound(
    serialize = "P: serde::Serialize",
    deserialize = "P: serde::de::DeserializeOwned"
))]
struct Detail<P> {
    #[serde(
        default,
        serialize_with = "ser_blob",
        deserialize_with = "de_processes"
    )]
    processes: Option<P>,
}

/// What the recorder puts in a record's detail lane with codecs 3 to 5: the process table by
/// column. A message of its own, so that more tables can join it.
#[derive(Clone, PartialEq, prost::Message)]
struct DetailColumns {
    #[prost(message, optional, tag = "1")]
    processes: Option<columns::Table>,
    /// Codec 5: the timestamp of the record whose table this one's matched rows differ from
    /// (the detail before it in its frame).
    #[prost(int64, tag = "2")]
    base_ts: i64,
    /// Codec 5: that table's rows, which a reader checks it holds.
    #[prost(uint32, tag = "3")]
    base_rows: u32,
}

/// Encodes a process table as a detail-lane payload of `codec` ([`CODEC_COLUMNS_US`], or
/// [`CODEC_COLUMNS`] or [`CODEC_MSGPACK_NAMED_V2`] as builds before it wrote, for comparisons
/// and tests) into `out` (cleared first).
pub fn encode_detail(procs: &[Process], codec: u8, out: &mut Vec<u8>) -> Result<(), CodecError> {
    out.clear();
    out.push(codec);
    match codec {
        CODEC_COLUMNS | CODEC_COLUMNS_US => {
            let d = DetailColumns {
                processes: Some(columns::Table::of(procs, codec == CODEC_COLUMNS_US)),
                ..Default::default()
            };
            prost::Message::encode(&d, out)?;
        }
        CODEC_MSGPACK_NAMED_V2 => {
            let mut ser = rmp_serde::Serializer::new(&mut *out).with_struct_map();
            serde::Serialize::serialize(
                &Detail {
                    processes: Some(procs),
                },
                &mut ser,
            )?;
        }
        c => {
            out.clear();
            return Err(CodecError::UnknownCodec(c));
        }
    }
    Ok(())
}

/// Rounds what the store keeps at a coarser precision than collected (detail codec
/// [`CODEC_COLUMNS_US`]: schedstat's run and wait time, down to the µs), so that a sample used
/// in memory as well as stored (the recorder's online detection, remote write) holds exactly
/// what a read of the store gives back.
pub fn round_as_stored(sample: &mut Sample) {
    for p in sample.processes.iter_mut().flatten() {
        if let Some(s) = p.schedstat.as_mut() {
            round_schedstat(s);
        }
    }
}

/// schedstat's run and wait time as [`CODEC_COLUMNS_US`] keeps them: rounded down to the µs.
pub fn round_schedstat(s: &mut jitterscope_sources::process::PidSchedstat) {
    s.run_ns = s.run_ns / 1000 * 1000;
    s.wait_ns = s.wait_ns / 1000 * 1000;
}

/// Encodes a sample for the store's two lanes: `main` gets everything but the process table,
/// `detail` the process table (cleared, and left empty when the sample has none). The sample's
/// processes are moved out for the encoding and put back.
pub fn encode_lanes(
    sample: &mut Sample,
    main: &mut Vec<u8>,
    detail: &mut Vec<u8>,
) -> Result<(), CodecError> {
    detail.clear();
    let processes = sample.processes.take();
    let r = encode_into(sample, main);
    sample.processes = processes;
    r?;
    if let Some(p) = &sample.processes {
        encode_detail(p, CODEC_COLUMNS_US, detail)?;
    }
    Ok(())
}

/// Decodes a record read from the store: its main payload and, when the read brought it, its
/// detail (the process table of payloads written by [`encode_lanes`]). Older payloads hold their
/// processes in `main` and have no detail. A detail this build cannot decode (a newer codec, or
/// damage) leaves the sample without processes rather than losing its host data too.
pub fn decode_lanes(
    main: &[u8],
    detail: Option<&[u8]>,
    wanted: Parts,
) -> Result<Sample, CodecError> {
    let mut s = decode_parts(main, wanted)?;
    if let (Some(d), true, None) = (detail, wanted.contains(Parts::PROCESSES), &s.processes) {
        s.processes = decode_detail(d).ok().flatten();
    }
    Ok(s)
}

/// The process table of a detail-lane payload that reads on its own (any codec but
/// [`CODEC_COLUMNS_DELTA`], which needs the [`DetailChain`] of its frame).
pub fn decode_detail(payload: &[u8]) -> Result<Option<Vec<Process>>, CodecError> {
    match payload.split_first() {
        None => Err(CodecError::Empty),
        Some((&c @ (CODEC_COLUMNS | CODEC_COLUMNS_US), rest)) => {
            let d = <DetailColumns as prost::Message>::decode(rest)?;
            let us = c == CODEC_COLUMNS_US;
            Ok(d.processes.map(|t| t.processes(us)).transpose()?)
        }
        Some((&CODEC_COLUMNS_DELTA, rest)) => {
            let d = <DetailColumns as prost::Message>::decode(rest)?;
            Err(CodecError::MissingBase(d.base_ts))
        }
        Some((&CODEC_MSGPACK_NAMED_V2, rest)) => {
            let before = WANTED.with(|w| w.replace(Parts::PROCESSES));
            let r: Result<Detail<Vec<Process>>, _> = rmp_serde::from_slice(rest);
            WANTED.with(|w| w.set(before));
            Ok(r?.processes)
        }
        Some((&c, _)) => Err(CodecError::UnknownCodec(c)),
    }
}

/// The writer's side of the detail lane's deltas: the table written last in the open store
/// frame, which the next table is written relative to.
///
/// The caller says when a record starts a frame (`key`): the first table of a frame is
/// self-contained ([`CODEC_COLUMNS_US`]), so that a read needs nothing from an earlier frame
/// and damage costs at most the rest of its frame, as a damaged zstd frame does anyway. A table
/// becomes the base only once its record is stored ([`commit`](DetailEncoder::commit)); after a
/// failed write the next table is self-contained ([`reset`](DetailEncoder::reset)).
#[derive(Default)]
pub struct DetailEncoder {
    base: Option<DeltaBase>,
}

struct DeltaBase {
    ts: i64,
    procs: Vec<Process>,
    index: rustc_hash::FxHashMap<(u32, u64), u32>,
}

impl DetailEncoder {
    /// Encodes `procs` into `out` (cleared first): relative to the base unless `key` or there
    /// is none.
    pub fn encode(
        &mut self,
        procs: &[Process],
        key: bool,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        let base = match (&self.base, key) {
            (Some(b), false) => b,
            _ => return encode_detail(procs, CODEC_COLUMNS_US, out),
        };
        out.clear();
        out.push(CODEC_COLUMNS_DELTA);
        let b = columns::Base {
            procs: &base.procs,
            index: &base.index,
        };
        let d = DetailColumns {
            processes: Some(columns::Table::of_with(procs, true, Some(&b))),
            base_ts: base.ts,
            base_rows: base.procs.len() as u32,
        };
        prost::Message::encode(&d, out)?;
        Ok(())
    }

    /// Whether the next [`encode`](DetailEncoder::encode) would write a delta (not `key`).
    pub fn has_base(&self) -> bool {
        self.base.is_some()
    }

    /// The table just encoded was stored as the record at `ts`: the next is relative to it.
    pub fn commit(&mut self, ts: i64, procs: &[Process]) {
        let mut b = self.base.take().unwrap_or_else(|| DeltaBase {
            ts,
            procs: Vec::new(),
            index: Default::default(),
        });
        b.ts = ts;
        b.procs.clear();
        b.procs.extend_from_slice(procs);
        b.index.clear();
        for (i, p) in procs.iter().enumerate() {
            // A duplicate identity (only a damaged source could give one) keeps its first row.
            b.index.entry(columns::identity(p)).or_insert(i as u32);
        }
        self.base = Some(b);
    }

    /// Nothing stored can be a base (a new frame, or a failed write): the next table is
    /// self-contained.
    pub fn reset(&mut self) {
        self.base = None;
    }
}

/// The reader's side of the detail lane's deltas: the table read last, which the next delta
/// table is relative to. Fed every detail payload of a stream in the order written (those of
/// records before a read's range too, from the start of their frame).
#[derive(Default)]
pub struct DetailChain {
    last: Option<(i64, Vec<Process>)>,
}

impl DetailChain {
    /// The process table of the payload of the record at `ts`. A delta table needs the table
    /// of the record before it (else [`CodecError::MissingBase`]); any error leaves the chain
    /// without a table, so the deltas after it fail too until the next self-contained one.
    pub fn decode(&mut self, ts: i64, payload: &[u8]) -> Result<Option<Vec<Process>>, CodecError> {
        self.advance(ts, payload)?;
        Ok(self.last.as_ref().map(|(_, p)| p.clone()))
    }

    /// As [`decode`](DetailChain::decode), for a table only needed as the base of later ones.
    pub fn advance(&mut self, ts: i64, payload: &[u8]) -> Result<(), CodecError> {
        let last = self.last.take();
        let procs = match payload.split_first() {
            Some((&CODEC_COLUMNS_DELTA, rest)) => {
                let d = <DetailColumns as prost::Message>::decode(rest)?;
                let base = last
                    .filter(|(t, p)| *t == d.base_ts && p.len() == d.base_rows as usize)
                    .ok_or(CodecError::MissingBase(d.base_ts))?;
                match d.processes {
                    Some(t) => Some(t.processes_with(true, Some(&base.1))?),
                    None => None,
                }
            }
            _ => decode_detail(payload)?,
        };
        self.last = procs.map(|p| (ts, p));
        Ok(())
    }

    /// Whether `payload` reads on its own: the chain needs nothing before it.
    pub fn self_contained(payload: &[u8]) -> bool {
        payload.first() != Some(&CODEC_COLUMNS_DELTA)
    }
}

/// Decodes a payload written by this or any earlier (or later, same codec) build.
pub fn decode(payload: &[u8]) -> Result<Sample, CodecError> {
    decode_parts(payload, Parts::ALL)
}

/// Decodes a payload leaving out the large parts not in `wanted` (they come back `None`).
pub fn decode_parts(payload: &[u8], wanted: Parts) -> Result<Sample, CodecError> {
    match payload.split_first() {
        None => Err(CodecError::Empty),
        Some((&(CODEC_MSGPACK_NAMED_V1 | CODEC_MSGPACK_NAMED_V2 | CODEC_MSGPACK_NAMED), rest)) => {
            let before = WANTED.with(|w| w.replace(wanted));
            let r = rmp_serde::from_slice(rest);
            WANTED.with(|w| w.set(before));
            Ok(r?)
        }
        Some((&c, _)) => Err(CodecError::UnknownCodec(c)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jitterscope_sources::cgroup::Cgroup;
    use jitterscope_sources::process::Process;

    fn sample() -> Sample {
        let mut p = Process::default();
        p.stat.pid = 42;
        p.stat.comm = "worker".into();
        p.cmdline = "worker --x".into();
        let c = Cgroup {
            path: "/a/b".into(),
            io: Some(jitterscope_sources::cgroup::IoStats {
                read_bytes: 4096,
                write_ios: 3,
                discard_bytes: Some(0),
                devices: 2,
                ..Default::default()
            }),
            ..Default::default()
        };
        Sample {
            ts_ns: 7,
            processes: Some(vec![p]),
            cgroups: Some(vec![c]),
            ..Default::default()
        }
    }

    #[test]
    fn blobs_round_trip_and_skip() {
        let s = sample();
        let b = encode(&s).unwrap();
        assert_eq!(b[0], CODEC_MSGPACK_NAMED);
        assert_eq!(decode(&b).unwrap(), s);
        let none = decode_parts(&b, Parts::NONE).unwrap();
        assert!(none.processes.is_none() && none.cgroups.is_none());
        assert_eq!(none.ts_ns, 7);
        let only = decode_parts(&b, Parts::CGROUPS).unwrap();
        assert!(only.processes.is_none());
        assert_eq!(only.cgroups, s.cgroups);
    }

    #[test]
    fn a_sample_rounded_as_stored_reads_back_exactly() {
        let mut s = sample();
        let mut p = s.processes.as_ref().unwrap()[0].clone();
        p.schedstat = Some(jitterscope_sources::process::PidSchedstat {
            run_ns: 1_234_567_891,
            wait_ns: 999,
            timeslices: 3,
        });
        s.processes = Some(vec![p]);
        let (mut main, mut detail) = (Vec::new(), Vec::new());
        encode_lanes(&mut s, &mut main, &mut detail).unwrap();
        assert_ne!(decode_lanes(&main, Some(&detail), Parts::ALL).unwrap(), s);
        round_as_stored(&mut s);
        let st = s.processes.as_ref().unwrap()[0].schedstat.clone().unwrap();
        assert_eq!(
            (st.run_ns, st.wait_ns, st.timeslices),
            (1_234_567_000, 0, 3)
        );
        encode_lanes(&mut s, &mut main, &mut detail).unwrap();
        assert_eq!(decode_lanes(&main, Some(&detail), Parts::ALL).unwrap(), s);
    }

    #[test]
    fn lanes_split_the_process_table_and_join_it_back() {
        let mut s = sample();
        let (mut main, mut detail) = (Vec::new(), Vec::new());
        encode_lanes(&mut s, &mut main, &mut detail).unwrap();
        assert_eq!(s, sample(), "the sample is left as it was");
        assert_eq!(detail[0], CODEC_COLUMNS_US);
        // Details written by builds before codec 4 join their record the same way.
        for old in [CODEC_MSGPACK_NAMED_V2, CODEC_COLUMNS] {
            let mut d = Vec::new();
            encode_detail(s.processes.as_deref().unwrap(), old, &mut d).unwrap();
            assert_eq!(d[0], old);
            assert_eq!(decode_lanes(&main, Some(&d), Parts::ALL).unwrap(), s);
        }
        assert!(decode(&main).unwrap().processes.is_none());
        assert_eq!(decode_lanes(&main, Some(&detail), Parts::ALL).unwrap(), s);
        let host = decode_lanes(&main, Some(&detail), Parts::CGROUPS).unwrap();
        assert!(host.processes.is_none());
        assert_eq!(host.cgroups, s.cgroups);
        // Without its detail (a main-lane read, or lost), no processes; never an error.
        assert!(decode_lanes(&main, None, Parts::ALL)
            .unwrap()
            .processes
            .is_none());
        // A detail of a codec this build does not know costs the processes only.
        let newer = decode_lanes(&main, Some(&[9, 0x80]), Parts::ALL).unwrap();
        assert!(newer.processes.is_none() && newer.cgroups.is_some());
        // A sample without processes writes no detail.
        let mut bare = Sample::default();
        encode_lanes(&mut bare, &mut main, &mut detail).unwrap();
        assert!(detail.is_empty());
        // A single-payload record (before lanes) still has its processes.
        let one = encode(&sample()).unwrap();
        assert_eq!(decode_lanes(&one, None, Parts::ALL).unwrap(), sample());
    }

    #[test]
    fn codec_2_stack_slices_as_maps_still_decode() {
        // A slice stored by a build before the columnar layout: a named map inside the blob,
        // under codec byte 2.
        #[derive(serde::Serialize)]
        struct V2<'a> {
            ts_ns: i64,
            #[serde(serialize_with = "named_blob")]
            profile: &'a crate::profile::Profile,
        }
        fn named_blob<S: serde::Serializer>(
            p: &&crate::profile::Profile,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            let mut buf = Vec::new();
            serde::Serialize::serialize(
                *p,
                &mut rmp_serde::Serializer::new(&mut buf).with_struct_map(),
            )
            .unwrap();
            let blob = serde_bytes_like(&buf);
            s.serialize_some(&blob)
        }
        fn serde_bytes_like(b: &[u8]) -> impl serde::Serialize + '_ {
            struct B<'a>(&'a [u8]);
            impl serde::Serialize for B<'_> {
                fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                    s.serialize_bytes(self.0)
                }
            }
            B(b)
        }
        let mut pb = crate::profile::Builder::new(99, 1, 2);
        let name = pb.string("schedule");
        let f = pb.frame(crate::profile::Frame {
            kind: crate::profile::FrameKind::Kernel,
            name,
            ..Default::default()
        });
        pb.add_stack(5, 6, "a", "b", "/c", vec![f], 3);
        let p = pb.finish();
        let mut b = vec![CODEC_MSGPACK_NAMED_V2];
        serde::Serialize::serialize(
            &V2 {
                ts_ns: 9,
                profile: &p,
            },
            &mut rmp_serde::Serializer::new(&mut b).with_struct_map(),
        )
        .unwrap();
        let d = decode(&b).unwrap();
        assert_eq!(d.ts_ns, 9);
        assert_eq!(d.profile.as_ref(), Some(&p));
        // Written now, the same slice comes back the same through the columnar layout.
        let s = Sample {
            profile: Some(p.clone()),
            ..Default::default()
        };
        let now = encode(&s).unwrap();
        assert_eq!(now[0], CODEC_MSGPACK_NAMED);
        assert_eq!(decode(&now).unwrap().profile, Some(p));
    }

    #[test]
    fn codec_1_nested_lists_still_decode() {
        // The layout before blobs: the same map, lists nested in place, codec byte 1.
        #[derive(serde::Serialize)]
        struct V1<'a> {
            ts_ns: i64,
            processes: &'a Option<Vec<Process>>,
            cgroups: &'a Option<Vec<Cgroup>>,
        }
        let s = sample();
        let mut b = vec![CODEC_MSGPACK_NAMED_V1];
        let v1 = V1 {
            ts_ns: s.ts_ns,
            processes: &s.processes,
            cgroups: &s.cgroups,
        };
        serde::Serialize::serialize(
            &v1,
            &mut rmp_serde::Serializer::new(&mut b).with_struct_map(),
        )
        .unwrap();
        let d = decode(&b).unwrap();
        assert_eq!(d.processes, s.processes);
        assert_eq!(d.cgroups, s.cgroups);
        assert!(decode_parts(&b, Parts::NONE).unwrap().processes.is_none());
        assert!(decode(&[CODEC_MSGPACK_NAMED + 1, 0x80]).is_err());
    }

    #[test]
    fn cgroups_before_and_after_io_stat() {
        // A cgroup record written before `io` existed decodes with `io: None`...
        #[derive(serde::Serialize, serde::Deserialize, Default)]
        #[serde(default)]
        struct Before {
            path: String,
            v2: bool,
            pids_current: Option<u64>,
        }
        let mut b = Vec::new();
        let old = Before {
            path: "/old".into(),
            v2: true,
            pids_current: Some(3),
        };
        serde::Serialize::serialize(
            &old,
            &mut rmp_serde::Serializer::new(&mut b).with_struct_map(),
        )
        .unwrap();
        let c: Cgroup = rmp_serde::from_slice(&b).unwrap();
        assert_eq!(
            (c.path.as_str(), c.pids_current, c.io),
            ("/old", Some(3), None)
        );
        // ...and a build that does not know `io` reads a record that has it.
        let s = sample();
        let mut b = Vec::new();
        serde::Serialize::serialize(
            &s.cgroups.as_ref().unwrap()[0],
            &mut rmp_serde::Serializer::new(&mut b).with_struct_map(),
        )
        .unwrap();
        let before: Before = rmp_serde::from_slice(&b).unwrap();
        assert_eq!(before.path, "/a/b");
    }

    fn proc(pid: u32, run_ns: u64, comm: &str) -> Process {
        let mut p = Process::default();
        p.stat.pid = pid;
        p.stat.starttime_ticks = u64::from(pid) * 10;
        p.stat.comm = comm.into();
        p.stat.state = 'S';
        p.cmdline = format!("/bin/{comm}").into();
        p.schedstat = Some(jitterscope_sources::process::PidSchedstat {
            run_ns,
            wait_ns: run_ns / 3,
            timeslices: run_ns / 1_000_000,
        });
        p
    }

    /// Tables written by a [`DetailEncoder`] read back in order through a [`DetailChain`]:
    /// each delta against the table before it, a self-contained one wherever a frame starts.
    #[test]
    fn a_chain_reads_what_the_encoder_wrote() {
        let tables = [
            vec![proc(1, 1_000, "a"), proc(2, 5_000, "b")],
            vec![
                proc(1, 2_000, "a"),
                proc(3, 9_000, "c"),
                proc(2, 5_000, "b"),
            ],
            vec![proc(3, 19_000, "c2"), proc(2, 6_000, "b")],
            vec![],
            vec![proc(4, 1, "d")],
        ];
        let mut enc = DetailEncoder::default();
        let mut chain = DetailChain::default();
        let mut out = Vec::new();
        for (i, t) in tables.iter().enumerate() {
            let ts = 100 + i as i64;
            enc.encode(t, i == 0, &mut out).unwrap();
            assert_eq!(
                out[0],
                if i == 0 {
                    CODEC_COLUMNS_US
                } else {
                    CODEC_COLUMNS_DELTA
                }
            );
            assert_eq!(DetailChain::self_contained(&out), i == 0);
            enc.commit(ts, t);
            let mut want = t.clone();
            want.iter_mut()
                .for_each(|p| round_schedstat(p.schedstat.as_mut().unwrap()));
            assert_eq!(chain.decode(ts, &out).unwrap(), Some(want), "table {i}");
        }
        // A delta read alone, or after another table than its base, is refused.
        assert!(matches!(
            decode_detail(&out),
            Err(CodecError::MissingBase(103))
        ));
        let mut other = DetailChain::default();
        let mut first = Vec::new();
        encode_detail(&tables[1], CODEC_COLUMNS_US, &mut first).unwrap();
        other.advance(103, &first).unwrap();
        assert!(matches!(
            other.decode(104, &out),
            Err(CodecError::MissingBase(103))
        ));
        // The refusal leaves the chain empty: the next delta fails too.
        enc.commit(104, &tables[4]);
        enc.encode(&tables[4], false, &mut out).unwrap();
        assert!(other.decode(105, &out).is_err());
        // After a reset, the next table is self-contained again.
        enc.reset();
        enc.encode(&tables[4], false, &mut out).unwrap();
        assert_eq!(out[0], CODEC_COLUMNS_US);
    }

    /// A real process table (this host's, read as the recorder reads it) encoded as the
    /// recorder writes it.
    fn real_detail() -> Vec<u8> {
        let mut r = jitterscope_sources::process::ProcessReader::new(
            &jitterscope_sources::Root::default(),
            100_000,
        );
        let mut procs = Vec::new();
        r.scan(&mut procs, None).unwrap();
        procs.truncate(40);
        let mut b = Vec::new();
        encode_detail(&procs, CODEC_COLUMNS, &mut b).unwrap();
        b
    }

    thread_local!(static REAL: Vec<u8> = real_detail());

    /// Overwrites bytes of a payload at `edits` (offsets wrapped to its length) and cuts it;
    /// the codec byte is kept, so that the bytes behind it are what is tested.
    fn damage(d: &mut Vec<u8>, edits: &[(usize, u8)], cut: Option<usize>) {
        for &(at, b) in edits {
            let at = at % d.len();
            if at > 0 {
                d[at] = b;
            }
        }
        if let Some(c) = cut {
            d.truncate(1 + c % d.len());
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Damaged details (bytes flipped, cut, or spliced in) decode or fail, never panic,
        /// and never cost the record its host data.
        #[test]
        fn damaged_details_never_panic(
            edits in proptest::collection::vec((0usize..1 << 16, proptest::num::u8::ANY), 1..8),
            cut in proptest::option::of(0usize..1 << 16),
            codec in proptest::sample::select(vec![CODEC_COLUMNS, CODEC_MSGPACK_NAMED_V2]),
        ) {
            let mut d = REAL.with(|r| r.clone());
            if codec == CODEC_MSGPACK_NAMED_V2 {
                let procs = decode_detail(&d).unwrap().unwrap();
                encode_detail(&procs, codec, &mut d).unwrap();
            }
            damage(&mut d, &edits, cut);
            let _ = decode_detail(&d);
            let mut s = sample();
            let (mut main, mut detail) = (Vec::new(), Vec::new());
            encode_lanes(&mut s, &mut main, &mut detail).unwrap();
            let back = decode_lanes(&main, Some(&d), Parts::ALL).unwrap();
            proptest::prop_assert_eq!(back.ts_ns, s.ts_ns);
            proptest::prop_assert_eq!(back.cgroups, s.cgroups);
        }

        /// Arbitrary bytes behind each codec byte decode or fail, never panic, alone or as
        /// the next table of a chain.
        #[test]
        fn arbitrary_details_never_panic(
            codec in 0u8..7,
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512),
            base_ts in proptest::option::of(0i64..3),
        ) {
            let mut d = vec![codec];
            d.extend(bytes);
            let _ = decode_detail(&d);
            let mut chain = DetailChain::default();
            if let Some(ts) = base_ts {
                REAL.with(|r| chain.advance(ts, r)).unwrap();
            }
            let _ = chain.decode(7, &d);
        }

        /// Damaged delta tables (against this host's real table) decode or fail, never panic.
        #[test]
        fn damaged_delta_tables_never_panic(
            edits in proptest::collection::vec((0usize..1 << 16, proptest::num::u8::ANY), 1..8),
            cut in proptest::option::of(0usize..1 << 16),
        ) {
            let base = REAL.with(|r| decode_detail(r)).unwrap().unwrap();
            let mut next = base.clone();
            next.rotate_left(3);
            next.truncate(next.len().saturating_sub(2));
            for p in next.iter_mut().step_by(4) {
                p.stat.utime_ticks += 7;
                p.stat.comm.push('x');
            }
            let mut enc = DetailEncoder::default();
            enc.commit(1, &base);
            let mut d = Vec::new();
            enc.encode(&next, false, &mut d).unwrap();
            let mut chain = DetailChain::default();
            REAL.with(|r| chain.advance(1, r)).unwrap();
            let mut good = DetailChain::default();
            REAL.with(|r| good.advance(1, r)).unwrap();
            proptest::prop_assert!(good.decode(2, &d).is_ok());
            damage(&mut d, &edits, cut);
            let _ = chain.decode(2, &d);
        }

        /// Any sequence of tables — processes coming, going, changing in any field — reads
        /// back exactly through the chain, each table a delta of the one before.
        #[test]
        fn delta_chains_read_back_exactly(
            steps in proptest::collection::vec(
                proptest::collection::vec((0u32..12, 0u64..4, proptest::num::u64::ANY, 0u8..3), 0..10),
                1..6,
            ),
        ) {
            let mut enc = DetailEncoder::default();
            let mut chain = DetailChain::default();
            let mut out = Vec::new();
            for (i, rows) in steps.iter().enumerate() {
                let procs: Vec<Process> = rows
                    .iter()
                    .map(|&(pid, start, v, name)| {
                        let mut p = proc(pid, v, ["a", "b", "c"][name as usize]);
                        p.stat.starttime_ticks = start;
                        p.stat.rss_pages = v.rotate_left(7);
                        p.stat.utime_ticks = v >> 3;
                        if name == 1 {
                            p.io = Some(jitterscope_sources::process::PidIo { rchar: v, ..Default::default() });
                            p.schedstat = None;
                        }
                        p
                    })
                    .collect();
                enc.encode(&procs, i == 0, &mut out).unwrap();
                enc.commit(i as i64, &procs);
                let mut want = procs.clone();
                for p in &mut want {
                    if let Some(s) = p.schedstat.as_mut() {
                        round_schedstat(s);
                    }
                }
                proptest::prop_assert_eq!(chain.decode(i as i64, &out).unwrap(), Some(want));
            }
        }
    }
}
