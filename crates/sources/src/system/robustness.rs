//! Every parser, fed arbitrary bytes and damaged copies of the captured files, returns an error
//! or a value and never panics: the recorder parses whatever the kernel (or a broken FUSE
//! mount, or a truncated read) hands it, every second.

use proptest::prelude::*;

use super::fixtures;

type Parser = fn(&[u8]);

/// `(captured file, parser)`; dentry-state is exercised in both modes.
const PARSERS: &[(&str, Parser)] = &[
    ("host/proc/stat", |b| drop(super::stat::parse_stat(b))),
    ("host/proc/loadavg", |b| {
        drop(super::loadavg::parse_loadavg(b))
    }),
    ("host/proc/vmstat", |b| drop(super::vmstat::parse_vmstat(b))),
    ("host/proc/meminfo", |b| {
        drop(super::meminfo::parse_meminfo(b))
    }),
    ("host/proc/zoneinfo", |b| {
        drop(super::zoneinfo::parse_zoneinfo(b))
    }),
    ("edge/zoneinfo-3.10", |b| {
        drop(super::zoneinfo::parse_zoneinfo(b))
    }),
    ("host/proc/buddyinfo", |b| {
        drop(super::buddyinfo::parse_buddyinfo(b))
    }),
    ("host/proc/slabinfo", |b| {
        drop(super::slabinfo::parse_slabinfo(b))
    }),
    ("host/proc/sys/fs/dentry-state", |b| {
        drop(super::dentry::parse_dentry_state(b, true));
        drop(super::dentry::parse_dentry_state(b, false));
    }),
    ("host/proc/interrupts", |b| {
        drop(super::interrupts::parse_interrupts(b))
    }),
    ("edge/interrupts-arm64", |b| {
        drop(super::interrupts::parse_interrupts(b))
    }),
    ("host/proc/softirqs", |b| {
        drop(super::softirqs::parse_softirqs(b))
    }),
    ("host/proc/diskstats", |b| {
        drop(super::diskstats::parse_diskstats(b))
    }),
    ("host/proc/net/dev", |b| {
        drop(super::netdev::parse_net_dev(b))
    }),
    ("host/proc/pressure/memory", |b| {
        drop(super::pressure::parse_pressure(b))
    }),
    ("host/proc/sys/kernel/osrelease", |b| {
        drop(super::kernel::parse_osrelease(b))
    }),
];

/// Bytes that make up these files, so random input often gets past the first line.
fn procish() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        Just(&b" "[..]),
        Just(&b"\n"[..]),
        Just(&b":"[..]),
        Just(&b","[..]),
        Just(&b"("[..]),
        Just(&b")"[..]),
        Just(&b"/"[..]),
        Just(&b"|"[..]),
        Just(&b"cpu"[..]),
        Just(&b"CPU0"[..]),
        Just(&b"Node 0, zone Normal"[..]),
        Just(&b"pages free"[..]),
        Just(&b"protection:"[..]),
        Just(&b"pagesets"[..]),
        Just(&b"per-node stats"[..]),
        Just(&b"slabinfo - version: 2.1"[..]),
        Just(&b"kB"[..]),
        Just(&b"0"[..]),
        Just(&b"18446744073709551615"[..]),
        Just(&b"18446744073709551616"[..]),
        Just(&b"1.5"[..]),
        Just(&b"\xff"[..]),
    ];
    proptest::collection::vec(token, 0..80).prop_map(|v| v.concat())
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..400)) {
        for (_, parse) in PARSERS {
            parse(&b);
        }
    }

    #[test]
    fn proc_like_bytes_never_panic(b in procish()) {
        for (_, parse) in PARSERS {
            parse(&b);
        }
    }

    #[test]
    fn damaged_fixtures_never_panic(
        which in 0..PARSERS.len(),
        cut in any::<prop::sample::Index>(),
        flip_at in any::<prop::sample::Index>(),
        flip_to in any::<u8>(),
    ) {
        let (file, parse) = PARSERS[which];
        let orig = fixtures::read(file);
        let mut truncated = orig.clone();
        truncated.truncate(cut.index(orig.len() + 1));
        parse(&truncated);
        let mut flipped = orig;
        if !flipped.is_empty() {
            let i = flip_at.index(flipped.len());
            flipped[i] = flip_to;
        }
        parse(&flipped);
    }
}

#[test]
fn every_captured_file_parses() {
    // The damage test is only meaningful if the undamaged files parse; the per-module tests
    // check values, this checks that the table above points at real files.
    use super::*;
    let r = |f| fixtures::read(f);
    stat::parse_stat(&r("host/proc/stat")).unwrap();
    zoneinfo::parse_zoneinfo(&r("edge/zoneinfo-3.10")).unwrap();
    interrupts::parse_interrupts(&r("edge/interrupts-arm64")).unwrap();
    pressure::parse_pressure(&r("host/proc/pressure/memory")).unwrap();
    for (file, _) in PARSERS {
        assert!(!r(file).is_empty(), "{file}");
    }
}
