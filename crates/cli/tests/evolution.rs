//! Store and payload evolution: data written by earlier builds must stay readable.
//!
//! `tests/fixtures/store-v1/` was written by the first build of the recorder
//! (`jitterscope record --dir tests/fixtures/store-v1 --root tests/fixtures/host --interval 1s
//! --duration 3s`, LOCK removed). Every later build must still read it, so NEVER regenerate or
//! rewrite it: a store that only the current build can read proves nothing. If a format change
//! makes this test fail, the change broke old stores on real hosts; fix the reader, and add a
//! new fixture next to this one rather than replacing it.

mod common;

use std::time::Duration;

use common::{check_store, parse_csv, parse_json_lines, run, s, text, trouble_lines};
use jitterscope_model::codec::{self, CODEC_MSGPACK_NAMED};

fn fixture_store() -> std::path::PathBuf {
    common::workspace_root().join("tests/fixtures/store-v1")
}

#[test]
fn first_build_store_still_reads() {
    let dir = fixture_store();
    assert!(dir.is_dir(), "missing fixture {}", dir.display());

    let o = run(
        &[
            "dump",
            "--dir",
            s(&dir),
            "--from",
            "0",
            "--to",
            "now",
            "--select",
            "mem.total_bytes,cgroup./jitterscope-fixture.cpu.quota_cores",
        ],
        Duration::from_secs(30),
    );
    let err = text(&o.stderr);
    assert!(o.status.success(), "dump failed: {err}");
    assert!(trouble_lines(&err).is_empty(), "dump complained: {err}");
    let rows = parse_csv(&text(&o.stdout));

    let mem: Vec<_> = rows
        .iter()
        .filter(|r| r.series == "mem.total_bytes")
        .collect();
    assert!(
        mem.len() >= 2,
        "want >= 2 samples of mem.total_bytes: {rows:?}"
    );
    for r in &mem {
        assert_eq!(r.unit, "bytes");
        assert!(r.value.is_some_and(|v| v > 0.0), "{r:?}");
    }
    // Distinct sample times, not one sample printed twice.
    let mut times: Vec<_> = mem.iter().map(|r| r.time.as_str()).collect();
    times.dedup();
    assert!(times.len() >= 2, "{times:?}");

    // The fixture tree has a cgroup with a 20% CPU quota (cfs_quota_us 20000 / period 100000).
    let quota: Vec<_> = rows
        .iter()
        .filter(|r| r.series == "cgroup./jitterscope-fixture.cpu.quota_cores")
        .collect();
    assert!(quota.len() >= 2, "want >= 2 quota values: {rows:?}");
    for r in quota {
        assert_eq!(r.unit, "cores");
        let v = r.value.expect("quota known");
        assert!((v - 0.2).abs() < 1e-9, "quota_cores {v} != 0.2");
    }

    // Every metric over every old sample, in the format with the most structure, must also
    // evaluate without a complaint: derivations run on old samples too, not just decoding.
    let o = run(
        &[
            "dump",
            "--dir",
            s(&dir),
            "--from",
            "0",
            "--to",
            "now",
            "--format",
            "json",
        ],
        Duration::from_secs(30),
    );
    let err = text(&o.stderr);
    assert!(o.status.success(), "full dump failed: {err}");
    assert!(
        trouble_lines(&err).is_empty(),
        "full dump complained: {err}"
    );
    let lines = parse_json_lines(&text(&o.stdout));
    assert!(lines.len() >= 2, "want >= 2 samples, got {}", lines.len());
}

#[test]
fn first_build_store_is_undamaged_and_every_payload_decodes() {
    let dir = fixture_store();
    let c = check_store(&dir);
    assert!(c.records >= 2, "records {}", c.records);
    assert_eq!(c.stats.corrupt_records, 0);
    assert_eq!(c.stats.corrupt_frames, 0);
    assert_eq!(c.stats.torn_tails, 0);

    let reader = jitterscope_store::Reader::open(&dir).unwrap();
    for rec in reader.range(i64::MIN, i64::MAX).unwrap() {
        let rec = rec.unwrap();
        let s =
            codec::decode_lanes(&rec.payload, rec.detail.as_deref(), codec::Parts::ALL).unwrap();
        assert_eq!(s.format, 1, "fixture written with sample format 1");
        assert!(s.meminfo.is_some(), "fixture samples carry meminfo");
        assert!(s.recorder.is_some(), "fixture samples carry recorder stats");
    }
}

/// A hand-built MessagePack value. rmp-serde is a dependency of the model crate but not of this
/// one, and the payloads needed here are tiny maps, so they are encoded directly; that also pins
/// the wire format independently of the encoder the recorder uses.
enum Mp {
    Nil,
    UInt(u64),
    Int(i64),
    Str(&'static str),
    Array(Vec<Mp>),
    Map(Vec<(&'static str, Mp)>),
}

fn encode(v: &Mp, out: &mut Vec<u8>) {
    match v {
        Mp::Nil => out.push(0xc0),
        Mp::UInt(n) if *n < 0x80 => out.push(*n as u8),
        Mp::UInt(n) => {
            out.push(0xcf);
            out.extend_from_slice(&n.to_be_bytes());
        }
        Mp::Int(n) => {
            out.push(0xd3);
            out.extend_from_slice(&n.to_be_bytes());
        }
        Mp::Str(s) => {
            assert!(s.len() < 256);
            if s.len() < 32 {
                out.push(0xa0 | s.len() as u8);
            } else {
                out.push(0xd9);
                out.push(s.len() as u8);
            }
            out.extend_from_slice(s.as_bytes());
        }
        Mp::Array(items) => {
            assert!(items.len() < 16);
            out.push(0x90 | items.len() as u8);
            for i in items {
                encode(i, out);
            }
        }
        Mp::Map(fields) => {
            assert!(fields.len() < 16);
            out.push(0x80 | fields.len() as u8);
            for (k, v) in fields {
                encode(&Mp::Str(k), out);
                encode(v, out);
            }
        }
    }
}

/// A payload as a future recorder could write it: some of today's fields missing, fields this
/// build does not know (at the top level and inside known structs, scalar and nested) present.
#[test]
fn payload_with_unknown_and_missing_fields_decodes() {
    let sample = Mp::Map(vec![
        ("format", Mp::UInt(1)),
        ("ts_ns", Mp::Int(1_795_308_013_601_019_066)),
        ("interval_ns", Mp::UInt(1_000_000_000)),
        (
            "host",
            Mp::Map(vec![
                ("hostname", Mp::Str("futurehost")),
                ("user_hz", Mp::UInt(100)),
                ("future_host_field", Mp::Str("ignored")),
            ]),
        ),
        (
            "recorder",
            Mp::Map(vec![
                ("collect_ns", Mp::UInt(1_234_567)),
                ("future_counter", Mp::UInt(9)),
            ]),
        ),
        ("stat", Mp::Nil),
        (
            "future_field",
            Mp::Map(vec![
                (
                    "nested",
                    Mp::Array(vec![Mp::UInt(1), Mp::Str("two"), Mp::Nil]),
                ),
                ("deep", Mp::Map(vec![("x", Mp::Int(-5))])),
            ]),
        ),
        ("future_scalar", Mp::UInt(u64::MAX)),
    ]);
    let mut payload = vec![CODEC_MSGPACK_NAMED];
    encode(&sample, &mut payload);

    let s = codec::decode(&payload).expect("decodes despite unknown and missing fields");
    assert_eq!(s.format, 1);
    assert_eq!(s.ts_ns, 1_795_308_013_601_019_066);
    assert_eq!(s.interval_ns, 1_000_000_000);
    assert_eq!(s.host.hostname, "futurehost");
    assert_eq!(s.host.user_hz, 100);
    let r = s.recorder.as_ref().expect("recorder present");
    assert_eq!(r.collect_ns, 1_234_567);

    // Everything not in the payload is at its default.
    assert_eq!(s.mono_ns, 0);
    assert_eq!(s.host.kernel, "");
    assert_eq!(s.host.ncpu, 0);
    assert_eq!(r.lateness_ns, 0);
    assert_eq!(r.samples_dropped, 0);
    assert!(s.stat.is_none());
    assert!(s.meminfo.is_none());
    assert!(s.cgroups.is_none());
    assert!(s.processes.is_none());
    assert!(s.collector_ns.is_empty());
    assert!(s.errors.is_empty());
    let expected = jitterscope_model::Sample {
        format: 1,
        ts_ns: s.ts_ns,
        interval_ns: s.interval_ns,
        host: jitterscope_model::sample::HostInfo {
            hostname: "futurehost".into(),
            user_hz: 100,
            ..Default::default()
        },
        recorder: Some(jitterscope_model::sample::RecorderStats {
            collect_ns: 1_234_567,
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(s, expected);

    // The same sample written by the current encoder decodes to the same value: the hand-built
    // payload and the recorder's agree on the encoding (named map after the codec byte).
    let again = codec::encode(&expected).unwrap();
    assert_eq!(again[0], CODEC_MSGPACK_NAMED);
    assert_eq!(codec::decode(&again).unwrap(), expected);
}

#[test]
fn unknown_codec_is_an_error_not_a_panic() {
    // A payload from a recorder with a codec this build cannot read must be reported (dump
    // skips it and says so), never misread as MessagePack.
    assert!(codec::decode(&[]).is_err());
    assert!(codec::decode(&[CODEC_MSGPACK_NAMED + 1, 0x80]).is_err());
    assert!(codec::decode(&[CODEC_MSGPACK_NAMED, 0xc1]).is_err());
}
