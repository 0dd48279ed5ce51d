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
//! module), or, in stores written before it, [`CODEC_COLUMNS`] (the same with schedstat's times
//! in ns) or [`CODEC_MSGPACK_NAMED_V2`] (one map per process). There the
//! names did cost: repeated for each of a busy host's 600 processes, they made a raw sample
//! 430 KB that the writer had to serialize and compress and every reader to walk.

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

/// Errors decoding a payload.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The payload was empty.
    #[error("empty payload")]
    Empty,
    /// A codec this build does not know (written by a much newer recorder).
    #[error("unknown payload codec {0}; this build reads codecs {CODEC_MSGPACK_NAMED_V1} to {CODEC_MSGPACK_NAMED} (main) and {CODEC_MSGPACK_NAMED_V2} to {CODEC_COLUMNS_US} (detail)")]
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

/// What the recorder puts in a record's detail lane with codecs 3 and 4: the process table by
/// column. A message of its own, so that more tables can join it.
#[derive(Clone, PartialEq, prost::Message)]
struct DetailColumns {
    #[prost(message, optional, tag = "1")]
    processes: Option<columns::Table>,
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

/// The process table of a detail-lane payload of any codec.
pub fn decode_detail(payload: &[u8]) -> Result<Option<Vec<Process>>, CodecError> {
    match payload.split_first() {
        None => Err(CodecError::Empty),
        Some((&c @ (CODEC_COLUMNS | CODEC_COLUMNS_US), rest)) => {
            let d = <DetailColumns as prost::Message>::decode(rest)?;
            let us = c == CODEC_COLUMNS_US;
            Ok(d.processes.map(|t| t.processes(us)).transpose()?)
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
            thread_local!(static REAL: Vec<u8> = real_detail());
            let mut d = REAL.with(|r| r.clone());
            if codec == CODEC_MSGPACK_NAMED_V2 {
                let procs = decode_detail(&d).unwrap().unwrap();
                encode_detail(&procs, codec, &mut d).unwrap();
            }
            for (at, b) in edits {
                let at = at % d.len();
                // The codec byte is kept, so the bytes behind it are what is tested.
                if at > 0 {
                    d[at] = b;
                }
            }
            if let Some(c) = cut {
                d.truncate(1 + c % d.len());
            }
            let _ = decode_detail(&d);
            let mut s = sample();
            let (mut main, mut detail) = (Vec::new(), Vec::new());
            encode_lanes(&mut s, &mut main, &mut detail).unwrap();
            let back = decode_lanes(&main, Some(&d), Parts::ALL).unwrap();
            proptest::prop_assert_eq!(back.ts_ns, s.ts_ns);
            proptest::prop_assert_eq!(back.cgroups, s.cgroups);
        }

        /// Arbitrary bytes behind each codec byte decode or fail, never panic.
        #[test]
        fn arbitrary_details_never_panic(
            codec in 0u8..5,
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512),
        ) {
            let mut d = vec![codec];
            d.extend(bytes);
            let _ = decode_detail(&d);
        }
    }
}
