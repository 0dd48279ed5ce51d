//! The payload encoding of one sample in the store.
//!
//! A payload is one codec byte followed by the sample as a MessagePack map with field names
//! (rmp-serde "named" encoding). Names make the encoding evolvable in both directions: a reader
//! ignores fields it does not know (written by a newer recorder) and defaults fields it does not
//! find (files written before the field existed), which `tests/evolution.rs` checks against a
//! store recorded by an earlier build. The repeated names cost nothing after zstd compresses a
//! run of samples together in the store.

use crate::sample::Sample;

/// Codec byte of MessagePack-with-field-names payloads.
pub const CODEC_MSGPACK_NAMED: u8 = 1;

/// Errors decoding a payload.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The payload was empty.
    #[error("empty payload")]
    Empty,
    /// A codec this build does not know (written by a much newer recorder).
    #[error("unknown payload codec {0}; this build reads codec {CODEC_MSGPACK_NAMED}")]
    UnknownCodec(u8),
    /// The MessagePack did not decode into a sample.
    #[error("undecodable sample: {0}")]
    Decode(#[from] rmp_serde::decode::Error),
    /// Encoding failed (cannot happen for well-formed samples; kept rather than panicking).
    #[error("unencodable sample: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
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

/// Decodes a payload written by this or any earlier (or later, same codec) build.
pub fn decode(payload: &[u8]) -> Result<Sample, CodecError> {
    match payload.split_first() {
        None => Err(CodecError::Empty),
        Some((&CODEC_MSGPACK_NAMED, rest)) => Ok(rmp_serde::from_slice(rest)?),
        Some((&c, _)) => Err(CodecError::UnknownCodec(c)),
    }
}
