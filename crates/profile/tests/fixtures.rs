//! The sampler's aggregation and the window's folding on records and slices captured on a real
//! host (`scripts/capture-profile-fixtures.sh`: 3 s of 99 Hz system-wide sampling while a busy
//! loop, then a stat() storm ran), plus malformed input.
//!
//! Golden files (`*.folded` next to the fixtures) are rewritten with `UPDATE_GOLDEN=1`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use jitterscope_model::profile::Profile;
use jitterscope_profile::capture::{Aggregator, Mapping, Resolver, Task, UserFrame};
use jitterscope_profile::maps::{parse_maps, Table};
use jitterscope_profile::sampler::{apply, builder, event_of_bytes};
use jitterscope_profile::window::{Filter, NoFiles, Window};
use perf_event::data::endian::Native;
use perf_event::data::parse::ParseConfig;
use proptest::prelude::*;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/profile")
}

/// Names without a live system: kernel and user addresses by value, tasks by id; counts the
/// process events it is told about.
#[derive(Default)]
struct Offline {
    mmaps: Vec<Mapping>,
    forks: usize,
    gone: usize,
}

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
    fn mmap(&mut self, _: u32, m: Mapping) {
        self.mmaps.push(m);
    }
    fn fork(&mut self, _: u32, _: u32) {
        self.forks += 1;
    }
    fn gone(&mut self, _: u32, _: bool) {
        self.gone += 1;
    }
}

fn config() -> ParseConfig<Native> {
    ParseConfig::from(*builder(0, 99, 0).attrs())
}

fn records() -> Vec<Vec<u8>> {
    records_of("records.bin")
}

/// The records of `records-stack.bin`, captured with 1 KiB user stack copies.
fn stack_config() -> ParseConfig<Native> {
    ParseConfig::from(*builder(0, 99, 1024).attrs())
}

fn records_of(name: &str) -> Vec<Vec<u8>> {
    let b = std::fs::read(fixtures().join(name)).unwrap();
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
    let mut agg = Aggregator::new(99, 0, Offline::default());
    let events: Vec<_> = recs
        .iter()
        .filter_map(|r| event_of_bytes(r, &cfg))
        .collect();
    // Every record has its time (side-band ones from their sample id), all within the capture.
    let samples: Vec<u64> = events
        .iter()
        .filter(|(_, e)| matches!(e, jitterscope_profile::sampler::Event::Sample(..)))
        .map(|(t, _)| *t)
        .collect();
    let (lo, hi) = (
        *samples.iter().min().unwrap(),
        *samples.iter().max().unwrap(),
    );
    for (t, e) in &events {
        assert!(
            *t >= lo - 2_000_000_000 && *t <= hi + 2_000_000_000,
            "{e:?} at {t}"
        );
    }
    apply(events, &mut agg);
    // The side-band records of the workload's start: its executable mappings (with build ids
    // from the kernel), a fork, and exits.
    let r = agg.resolver();
    assert!(
        r.mmaps.len() >= 3 && r.forks >= 1 && r.gone >= 1,
        "{:?} {} {}",
        r.mmaps,
        r.forks,
        r.gone
    );
    assert!(
        r.mmaps.iter().any(|m| m.path.ends_with("/busy")),
        "{:?}",
        r.mmaps
    );
    assert!(
        r.mmaps.iter().all(|m| m.end > m.start
            && (m.path.as_ref() == "[vdso]" || m.build_id.as_ref().is_some_and(|b| b.len() == 40))),
        "{:?}",
        r.mmaps
    );
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

/// Executable file mappings of a maps text, by a second reading of the format.
fn exec_files(text: &str) -> Vec<(u64, String)> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let path = f.get(5..).map(|p| p.join(" ")).unwrap_or_default();
            let file = (path.starts_with('/') && !path.starts_with("//")) || path == "[vdso]";
            (f.get(1)?.as_bytes().get(2) == Some(&b'x') && file).then(|| {
                (
                    u64::from_str_radix(f[0].split('-').next().unwrap(), 16).unwrap(),
                    path,
                )
            })
        })
        .collect()
}

#[test]
fn parses_recorded_maps() {
    for name in ["maps-bash.txt", "maps-cat.txt", "maps-node.txt"] {
        let path = fixtures().join(name);
        let Ok(text) = std::fs::read_to_string(&path) else {
            assert_ne!(name, "maps-cat.txt", "{} missing", path.display());
            continue;
        };
        let maps = parse_maps(text.as_bytes());
        let want = exec_files(&text);
        let got: Vec<(u64, String)> = maps.iter().map(|m| (m.start, m.path.to_string())).collect();
        assert_eq!(got, want, "{name}");
        assert!(
            maps.iter().any(|m| m.path.contains("libc.so")),
            "{name}: no libc"
        );
        let t = Table::new(maps.clone());
        for m in &maps {
            assert_eq!(t.find(m.start), Some(m), "{name}");
            assert_eq!(t.find(m.end - 1), Some(m), "{name}");
            assert_eq!(m.file_offset(m.start), m.pgoff);
        }
    }
}

#[test]
fn recorded_samples_carry_their_user_registers_and_stack() {
    use jitterscope_profile::sampler::Event;
    let cfg = stack_config();
    let recs = records_of("records-stack.bin");
    let (mut samples, mut with_stack, mut checked, mut without) = (0, 0, 0, 0);
    for r in &recs {
        let e = event_of_bytes(r, &cfg);
        assert!(
            !matches!(e, Some((_, Event::Bad))),
            "record of {} bytes did not parse",
            r.len()
        );
        let Some((_, Event::Sample(raw, stack))) = e else {
            continue;
        };
        samples += 1;
        let Some(st) = stack else {
            // Kernel threads and the idle task have no user state.
            assert!(raw.user.is_empty() || raw.pid == 0, "{raw:?}");
            without += 1;
            continue;
        };
        with_stack += 1;
        assert!(!st.bytes.is_empty() && st.bytes.len() <= 1024);
        assert!(
            st.sp < 0x8000_0000_0000 && st.ip < 0x8000_0000_0000,
            "{st:?}"
        );
        // The user registers are those the user part of the call chain starts from.
        if let Some(&first) = raw.user.first() {
            assert_eq!(st.ip, first, "pid {}", raw.pid);
            checked += 1;
        }
    }
    assert!(samples >= 50, "{samples} samples");
    assert!(with_stack >= 20 && checked >= 20, "{with_stack} {checked}");
    // Samples without user state (no registers, an empty stack) parse too: perf-event-data
    // 0.1.8 failed on them.
    assert!(without >= 1, "no sample without user state in the fixture");
    // The aggregation takes them as it takes the frame-pointer ones.
    let mut agg = Aggregator::new(99, 0, Offline::default());
    apply(
        recs.iter()
            .filter_map(|r| event_of_bytes(r, &cfg))
            .collect(),
        &mut agg,
    );
    let p = agg.cut(u64::MAX);
    assert_eq!(p.samples as usize, samples);
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
        let mut agg = Aggregator::new(99, 0, Offline::default());
        let mut events: Vec<_> = event_of_bytes(&junk, &cfg).into_iter().collect();
        let recs = records();
        let mut r = recs[pick % recs.len()].clone();
        for (i, b) in flip {
            if !r.is_empty() {
                let n = r.len();
                r[i % n] = b;
            }
        }
        r.truncate(cut.max(1));
        events.extend(event_of_bytes(&r, &cfg));
        // Records with stack copies, damaged the same way, parsed with their own layout.
        let scfg = stack_config();
        let srecs = records_of("records-stack.bin");
        let mut r = srecs[pick % srecs.len()].clone();
        if !r.is_empty() {
            let n = r.len();
            r[cut % n] ^= 0xff;
        }
        r.truncate(cut.max(1) * 4);
        events.extend(event_of_bytes(&r, &scfg));
        events.extend(event_of_bytes(&junk, &scfg));
        apply(events, &mut agg);
        let p = agg.cut(u64::MAX);
        let mut w = Window::new();
        w.add(&p, &Filter::default());
        w.resolve(&mut NoFiles).folded();
    }

    /// Arbitrary bytes and damaged lines of a recorded maps file parse without panic, and
    /// whatever parses is a usable table.
    #[test]
    fn malformed_maps_do_not_panic(
        junk in proptest::collection::vec(any::<u8>(), 0..512),
        flip in proptest::collection::vec((0usize..4096, any::<u8>()), 0..16),
        addr in any::<u64>(),
    ) {
        parse_maps(&junk);
        let mut text = std::fs::read(fixtures().join("maps-cat.txt")).unwrap();
        for (i, b) in flip {
            let n = text.len();
            text[i % n] = b;
        }
        let t = Table::new(parse_maps(&text));
        if let Some(m) = t.find(addr) {
            prop_assert!(m.start <= addr && addr < m.end);
        }
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
