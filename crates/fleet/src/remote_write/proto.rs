//! Prometheus remote write 1.0: the `WriteRequest` message of `prompb/remote.proto` and
//! `prompb/types.proto`, only the fields a sender of float samples fills. Written as prost
//! derives rather than generated from the .proto files, so the build needs no `protoc`; the
//! field numbers are the protocol's.

/// One request: the series and their samples, or the families' metadata (sent on their own,
/// as Prometheus does).
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    /// Field 1 of `prometheus.WriteRequest`.
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
    /// Field 3 (2 is reserved).
    #[prost(message, repeated, tag = "3")]
    pub metadata: Vec<MetricMetadata>,
}

/// `prometheus.MetricMetadata`: what a family is, for engines that keep it (Mimir, Cortex,
/// Grafana Cloud, Prometheus with metadata WAL records) and show it in their query UIs.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MetricMetadata {
    /// Field 1, `MetricMetadata.MetricType`.
    #[prost(enumeration = "MetricType", tag = "1")]
    pub r#type: i32,
    /// Field 2: the name its series carry in `__name__`.
    #[prost(string, tag = "2")]
    pub metric_family_name: String,
    /// Field 4.
    #[prost(string, tag = "4")]
    pub help: String,
    /// Field 5: `seconds`, `bytes`, `ratio`, or empty.
    #[prost(string, tag = "5")]
    pub unit: String,
}

/// `MetricMetadata.MetricType`, the types this sender uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum MetricType {
    /// 0.
    Unknown = 0,
    /// 1.
    Counter = 1,
    /// 2.
    Gauge = 2,
    /// 6.
    Info = 6,
}

/// A series: its labels (sorted by name, `__name__` among them) and its samples in time order.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    /// Field 1 of `prometheus.TimeSeries`.
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    /// Field 2 of `prometheus.TimeSeries`.
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Point>,
}

/// `prometheus.Label`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    /// Field 1.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Field 2.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `prometheus.Sample`: a value at a time in milliseconds since the epoch.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Point {
    /// Field 1.
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Field 2, ms since the Unix epoch.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// The request's body: the message, snappy-compressed (block format, as the protocol says).
pub fn encode(req: &WriteRequest) -> Vec<u8> {
    use prost::Message;
    let raw = req.encode_to_vec();
    // Compressing a buffer into a Vec cannot fail short of an input over 4 GiB, which a
    // request never is (batches are capped far below).
    snap::raw::Encoder::new()
        .compress_vec(&raw)
        .unwrap_or_default()
}

/// The message back from a body (tests, and anyone checking what was sent).
pub fn decode(body: &[u8]) -> anyhow::Result<WriteRequest> {
    use prost::Message;
    let raw = snap::raw::Decoder::new().decompress_vec(body)?;
    Ok(WriteRequest::decode(&raw[..])?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_survives_the_wire_format() {
        use prost::Message;
        let req = WriteRequest {
            timeseries: vec![TimeSeries {
                labels: vec![
                    Label {
                        name: "__name__".into(),
                        value: "jitterscope_cpu_sys_ratio".into(),
                    },
                    Label {
                        name: "host".into(),
                        value: "a".into(),
                    },
                ],
                samples: vec![Point {
                    value: 0.25,
                    timestamp: 1_700_000_000_000,
                }],
            }],
            metadata: Vec::new(),
        };
        let body = encode(&req);
        assert_eq!(decode(&body).unwrap(), req);
        // Metadata: the enum is field 1 as a varint, the name field 2, help 4, unit 5.
        let m = MetricMetadata {
            r#type: MetricType::Counter as i32,
            metric_family_name: "a".into(),
            help: "h".into(),
            unit: "seconds".into(),
        };
        assert_eq!(
            m.encode_to_vec(),
            b"\x08\x01\x12\x01a\x22\x01h\x2a\x07seconds"
        );
        let meta = WriteRequest {
            timeseries: Vec::new(),
            metadata: vec![m],
        };
        assert_eq!(meta.encode_to_vec()[0], 0x1a, "field 3, length-delimited");
        assert_eq!(decode(&encode(&meta)).unwrap(), meta);
        // The bytes on the wire for field 1 of a Label: tag 0x0a, length, text.
        let raw = req.timeseries[0].labels[1].encode_to_vec();
        assert_eq!(raw, b"\x0a\x04host\x12\x01a");
        let p = Point {
            value: 1.0,
            timestamp: 1,
        }
        .encode_to_vec();
        // double is field 1 wire type 1 (0x09), int64 field 2 wire type 0 (0x10).
        assert_eq!(p[0], 0x09);
        assert_eq!(&p[9..], b"\x10\x01");
    }

    #[test]
    fn garbage_bodies_are_errors_not_panics() {
        for b in [&b""[..], b"\xff\xff\xff", b"\x00", b"not snappy at all"] {
            let _ = decode(b);
        }
    }
}
