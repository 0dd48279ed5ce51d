//! The live sources: collecting from this host's /proc, and following a store a writer
//! appends to.

use std::time::Duration;

use jitterscope_model::sample::HostInfo;
use jitterscope_model::sources::collectors;
use jitterscope_model::sources::CollectConfig;
use jitterscope_sources::Root;
use jitterscope_views::app::App;
use jitterscope_views::source::{LiveSource, Source, StoreSource};

fn parse(_: &str) -> Result<i64, String> {
    Err("no times here".into())
}

#[test]
fn direct_collection_keeps_history_and_detects_online() {
    let root = Root::new("/");
    let set = collectors(&root, &CollectConfig::default());
    let mut src = LiveSource::new(
        set,
        HostInfo::read(&root),
        Duration::from_millis(100),
        "test".into(),
    );
    assert!(src.latest().unwrap().is_none());
    for _ in 0..3 {
        while !src.poll().unwrap() {
            std::thread::sleep(src.due_in());
        }
    }
    assert!(
        src.own_events().is_some(),
        "live collection runs the online detector"
    );
    let mut app = App::new(Box::new(src), "top", parse);
    app.start(None).unwrap();
    let s = app.snapshot.clone().unwrap();
    assert!(app.follow);
    assert!(
        s.interval_s > 0.05 && s.interval_s < 5.0,
        "{}",
        s.interval_s
    );
    assert!(s.cpu.idle_pct.is_some() && s.mem.free_bytes.is_some());
    assert!(
        s.processes.iter().any(|p| p.pid == std::process::id()),
        "this test process is listed"
    );
    app.key(ratatui::crossterm::event::KeyEvent::from(
        ratatui::crossterm::event::KeyCode::Char('T'),
    ))
    .unwrap();
    assert!(app.shown().unwrap() < s.ts_ns, "T steps back into memory");
    assert!(!app.follow);
}

#[test]
fn a_followed_store_moves_on_and_says_when_samples_stop() {
    let fixture = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/diagnose/idle");
    let dir = tempfile::tempdir().unwrap();
    let mut w =
        jitterscope_store::Writer::open(jitterscope_store::StoreConfig::new(dir.path())).unwrap();
    let recs: Vec<_> = jitterscope_store::Reader::open(&fixture)
        .unwrap()
        .range(i64::MIN, i64::MAX)
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    for r in &recs[..3] {
        w.append(r.ts_ns, &r.payload).unwrap();
    }

    let src = StoreSource::open(dir.path(), true).unwrap();
    let mut app = App::new(Box::new(src), "top", parse);
    app.start(None).unwrap();
    assert_eq!(app.shown(), Some(recs[2].ts_ns));
    app.tick().unwrap();
    w.append(recs[3].ts_ns, &recs[3].payload).unwrap();

    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while app.shown() != Some(recs[3].ts_ns) {
        assert!(
            std::time::Instant::now() < deadline,
            "the new record was not shown"
        );
        std::thread::sleep(app.due_in());
        app.tick().unwrap();
    }
    assert!(app.follow);
    // Long after its newest record, the screen says samples stopped.
    let late = recs[3].ts_ns + 30_000_000_000;
    assert!(app.stale_s(late).unwrap() >= 29.0);
    let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(160, 24)).unwrap();
    t.draw(|f| jitterscope_views::render::draw(f, &app, late))
        .unwrap();
    let title: String = (0..160)
        .map(|x| t.backend().buffer()[(x, 0)].symbol().to_string())
        .collect();
    assert!(title.contains("NO SAMPLE for 30s"), "{title}");
    assert_eq!(app.stale_s(recs[3].ts_ns + 1_000_000_000), None);
}
