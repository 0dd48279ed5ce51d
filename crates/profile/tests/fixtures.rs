//! The sampler's aggregation and the window's folding on records and slices captured on a real
//! host (`scripts/capture-profile-fixtures.sh`: 3 s of 99 Hz system-wide sampling while a busy
//! loop, then a stat() storm ran), plus malformed input.
//!
//! Golden files (`*.folded` next to the fixtures) are rewritten with `UPDATE_GOLDEN=1`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use jitterscope_model::profile::Profile;
use jitterscope_profile::capture::{Aggregator, Resolver, Task, UserFrame};
use jitterscope_profile::sampler::{builder, handle_bytes};
use jitterscope_profile::window::{Filter, NoFiles, Window};
use perf_event::data::endian::Native;
use perf_event::data::parse::ParseConfig;
use proptest::prelude::*;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/profile")
}

/// Names without a live system: kernel and user addresses by value, tasks by id.
struct Offline;

impl Resolver for Offline {
    fn kernel(&mut self, addrs: &[u64]) -> Vec<Arc<str>> {
        addrs.iter().map(|a| format!("k{a:x}").into()).collect()
    }
    fn user(&mut self, _: u32, addrs: &[u64]) -> Vec<UserFrame> {
        addrs.iter().map(|&a| UserFrame::Unknown(a)).collect()
    }
    fn task(&mut self, pid: u32, tid: u32) -> Task {
        Task {
            comm: format!("p{pid}").into(),
            thread: format!("t{tid}").into(),
            cgroup: "".into(),
        }
    }
}

fn config() -> ParseConfig<Native> {
    ParseConfig::from(*builder(0, 99).attrs())
}

fn records() -> Vec<Vec<u8>> {
    let b = std::fs::read(fixtures().join("records.bin")).unwrap();
    let mut out = Vec::new();
    let mut i = 0;
    while i + 4 <= b.len() {
        let n = u32::from_le_bytes(b[i..i + 4].try_into().unwrap()) as usize;
        out.push(b[i + 4..i + 4 + n].to_vec());
        i += 4 + n;
    }
    assert_eq!(i, b.len(), "records.bin ends inside a record");
    out
}

fn golden(name: &str, lines: &[String]) {
    let path = fixtures().join(name);
    let text = lines.join("\n") + "\n";
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
    assert!(
        want == text,
        "{name} differs from the golden file; UPDATE_GOLDEN=1 rewrites it"
    );
}

fn sample_records(recs: &[Vec<u8>]) -> usize {
    // PERF_RECORD_SAMPLE = 9
    recs.iter()
        .filter(|r| r.len() >= 8 && u32::from_ne_bytes(r[0..4].try_into().unwrap()) == 9)
        .count()
}

#[test]
fn aggregates_recorded_perf_records() {
    let recs = records();
    let n = sample_records(&recs);
    assert!(n > 300, "fixture holds {n} samples");
    let cfg = config();
    let mut agg = Aggregator::new(99, 0, Offline);
    for r in &recs {
        handle_bytes(r, &cfg, &mut agg);
    }
    let p = agg.cut(u64::MAX);
    assert_eq!(p.dropped, 0, "records the parser refused");
    assert_eq!(p.samples as usize, n, "every sample record counted once");
    assert_eq!(
        p.stacks.iter().map(|s| s.count as u64).sum::<u64>(),
        p.samples
    );
    // Interning: no stack, frame or string twice.
    let distinct =
        |v: Vec<String>| v.len() == v.iter().collect::<std::collections::HashSet<_>>().len();
    assert!(distinct(p.strings.clone()));
    assert!(distinct(
        p.frames.iter().map(|f| format!("{f:?}")).collect()
    ));
    assert!(distinct(
        p.stacks
            .iter()
            .map(|s| format!("{} {} {:?}", s.pid, s.tid, s.frames))
            .collect()
    ));
    // The idle task (kernel only) and the workload (user and kernel) are both there.
    assert!(p.stacks.iter().any(|s| s.pid == 0 && !s.frames.is_empty()));
    let busy_user = p.stacks.iter().filter(|s| s.pid != 0).any(|s| {
        s.frames
            .iter()
            .any(|&f| p.frame(f).unwrap().kind != jitterscope_model::profile::FrameKind::Kernel)
    });
    assert!(busy_user, "no user frames in the fixture");
    let mut w = Window::new();
    w.add(&p, &Filter::default());
    let folded = w.resolve(&mut NoFiles).folded();
    golden("records.folded", &folded);
}

#[test]
fn folds_recorded_slices() {
    let text = std::fs::read_to_string(fixtures().join("slices.json")).unwrap();
    let slices: Vec<Profile> = serde_json::from_str(&text).unwrap();
    assert!(slices.len() >= 3);
    let mut w = Window::new();
    let mut total = 0;
    for p in &slices {
        total += p.samples;
        w.add(p, &Filter::default());
    }
    let named = w.resolve(&mut NoFiles);
    assert_eq!(named.samples, total);
    let folded = named.folded();
    let sum: u64 = folded
        .iter()
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(sum, total);
    // The stat() storm: the kernel's path walk under the workload's name.
    assert!(
        folded
            .iter()
            .any(|l| l.starts_with("busy;") && l.contains("_[k]") && l.contains("lookup")),
        "no path walk in:\n{}",
        folded.join("\n")
    );
    golden("slices.folded", &folded);

    // Per-process window: only the workload, and each slice's share adds up.
    let mut by_comm: BTreeMap<String, u64> = BTreeMap::new();
    for p in &slices {
        for s in &p.stacks {
            *by_comm.entry(p.str(s.comm).to_string()).or_default() += s.count as u64;
        }
    }
    let mut w = Window::new();
    for p in &slices {
        w.add(
            p,
            &Filter {
                comm: Some("busy".into()),
                ..Default::default()
            },
        );
    }
    assert_eq!(w.resolve(&mut NoFiles).samples, by_comm["busy"]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Arbitrary bytes, and recorded records with bytes flipped or cut, never panic the parser
    /// or the aggregation.
    #[test]
    fn malformed_records_do_not_panic(
        junk in proptest::collection::vec(any::<u8>(), 0..512),
        pick in 0usize..10_000,
        flip in proptest::collection::vec((0usize..2048, any::<u8>()), 0..8),
        cut in 0usize..2048,
    ) {
        let cfg = config();
        let mut agg = Aggregator::new(99, 0, Offline);
        handle_bytes(&junk, &cfg, &mut agg);
        let recs = records();
        let mut r = recs[pick % recs.len()].clone();
        for (i, b) in flip {
            if !r.is_empty() {
                let n = r.len();
                r[i % n] = b;
            }
        }
        r.truncate(cut.max(1));
        handle_bytes(&r, &cfg, &mut agg);
        let p = agg.cut(u64::MAX);
        let mut w = Window::new();
        w.add(&p, &Filter::default());
        w.resolve(&mut NoFiles).folded();
    }

    /// A slice with indexes out of range (a damaged or hand-edited store) folds without panic.
    #[test]
    fn damaged_slices_do_not_panic(
        frames in proptest::collection::vec(0u32..64, 0..16),
        comm in 0u32..64,
        module in 0u32..8,
        name in 0u32..64,
    ) {
        let text = std::fs::read_to_string(fixtures().join("slices.json")).unwrap();
        let mut slices: Vec<Profile> = serde_json::from_str(&text).unwrap();
        let p = &mut slices[0];
        if let Some(s) = p.stacks.first_mut() {
            s.frames = frames;
            s.comm = comm;
        }
        if let Some(f) = p.frames.first_mut() {
            f.module = module;
            f.name = name;
        }
        let mut w = Window::new();
        w.add(p, &Filter { kernel_only: true, ..Default::default() });
        w.add(p, &Filter::default());
        w.resolve(&mut NoFiles).hottest(5);
    }
}
