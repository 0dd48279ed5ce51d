//! The screen over recorded lab stores (tests/fixtures/diagnose), drawn into ratatui's test
//! backend at 80x24: the visible lines for a known sample, and what keys do to them.

use std::path::PathBuf;

use jitterscope_views::analysis;
use jitterscope_views::app::App;
use jitterscope_views::source::StoreSource;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;

fn store(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/diagnose")
        .join(name)
}

fn parse(s: &str) -> Result<i64, String> {
    s.parse::<i64>()
        .map(|v| v * 1_000_000_000)
        .map_err(|_| format!("invalid time {s:?}"))
}

/// A replay of `name` at `at` (ns), with its episodes and the findings of the shown window
/// answered synchronously, as the terminal loop's worker would.
fn replay(name: &str, at: Option<i64>) -> App {
    let src = StoreSource::open(&store(name), false).expect("fixture store opens");
    let mut app = App::new(Box::new(src), "replay", parse);
    app.start(at).expect("start");
    settle(&mut app, name);
    app
}

fn settle(app: &mut App, name: &str) {
    // Episodes first; the findings window then depends on them, so ask until nothing is new.
    loop {
        let asks = app.asks();
        if asks.is_empty() {
            return;
        }
        answer(app, name, asks);
    }
}

fn answer(app: &mut App, name: &str, asks: Vec<analysis::Ask>) {
    for a in asks {
        let ans = match a {
            analysis::Ask::Events(f, t) => {
                analysis::Answer::Events(f, t, analysis::events(&store(name), f, t))
            }
            analysis::Ask::Findings(f, t) => {
                analysis::Answer::Findings(f, t, analysis::findings(&store(name), f, t))
            }
        };
        app.apply(ans);
    }
}

fn screen(app: &App, w: u16, h: u16) -> Vec<String> {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| jitterscope_views::render::draw(f, app, 0))
        .unwrap();
    let buf = t.backend().buffer().clone();
    (0..h)
        .map(|y| {
            (0..w)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect::<String>()
                .trim_end()
                .to_string()
        })
        .collect()
}

fn key(app: &mut App, c: char) {
    app.key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE))
        .unwrap();
}

/// The record times of a fixture store, in order.
fn times(name: &str) -> Vec<i64> {
    let r = jitterscope_store::Reader::open(store(name)).unwrap();
    r.range_main(i64::MIN, i64::MAX)
        .unwrap()
        .map(|r| r.unwrap().ts_ns)
        .collect()
}

fn find<'a>(lines: &'a [String], prefix: &str) -> &'a str {
    lines
        .iter()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting with {prefix:?} in\n{}", lines.join("\n")))
}

fn press(app: &mut App, code: KeyCode) {
    app.key(KeyEvent::new(code, KeyModifiers::NONE)).unwrap();
}

fn typed(app: &mut App, text: &str) {
    for c in text.chars() {
        key(app, c);
    }
}

/// The sample one second into the TLB storm.
fn tlb_at() -> (Vec<i64>, usize) {
    let ts = times("tlb-shootdown");
    let start = ts
        .iter()
        .position(|&t| t == 1_795_331_568_399_325_943)
        .expect("the storm's first sample is in the fixture");
    (ts, start + 1)
}

#[test]
fn a_known_sample_at_80x24() {
    let (ts, i) = tlb_at();
    let app = replay("tlb-shootdown", Some(ts[i]));
    let l = screen(&app, 80, 24);
    assert!(
        l[0].starts_with("jitterscope replay 2026-11-22 07:12:49.399Z vm PAUSED store "),
        "{}",
        l[0]
    );
    // The header lines, each as the registry derives it from the recorded counters.
    assert_eq!(
        find(&l, "CPU "),
        "CPU  usr 5.9% sys 28.1% irq 0.0% sirq 0.0% wait 0.0% steal 0.0% idle 65.9%"
    );
    assert!(find(&l, "LOAD").contains("| runq p99 64us max 2.4ms | csw 16.5k/s"));
    assert!(find(&l, "MEM ").starts_with("MEM  free 23.2G (min 66.0M low 82.5M) avail 23.1G"));
    assert!(find(&l, "SLAB").contains("dentries 2696 negative 15"));
    assert!(find(&l, "PAG ").starts_with("PAG  scan kswapd 0 direct 0 allocstall 0 stalls 0"));
    assert_eq!(
        find(&l, "IPI "),
        "IPI  TLB 4077/s CAL 4127/s sent 4077/s | PSI cpu 5.6% mem 0.0%/0.0% io 0.0%/0.0%"
    );
    assert!(find(&l, "DSK ").contains("vda"));
    // Processes by CPU: the madvise storm's worker on top, in its lab cgroup.
    let head = l.iter().position(|x| x.contains("PID COMM")).unwrap();
    assert!(l[head].contains("*CPU"), "{}", l[head]);
    let top = &l[head + 1];
    assert!(top.contains(" 8686 lab-madvise      73.0%  60.0%"), "{top}");
    assert!(top.ends_with("storm"), "{top}");
    // The episodes it falls in, and the finding of that episode's window.
    assert!(
        l.iter().any(|x| x.starts_with("NOW  07:12:48    5s ")),
        "{}",
        l.join("\n")
    );
    assert!(
        l.iter().any(|x| x == "FINDINGS 07:12:38-07:13:03 (1)"),
        "{}",
        l.join("\n")
    );
    assert!(l
        .iter()
        .any(|x| x.starts_with("0.60 MECH TLB-shootdown storm: 2159 IPIs/s")));
    assert!(l[23].starts_with("sort CPU | t/T step"), "{}", l[23]);
}

#[test]
fn throttled_cgroup_tops_the_cgroup_panel() {
    let ts = times("cfs-throttle");
    let t = *ts
        .iter()
        .find(|&&t| t >= 1_795_331_536_000_000_000)
        .unwrap();
    let app = replay("cfs-throttle", Some(t));
    let l = screen(&app, 80, 24);
    let head = l.iter().position(|x| x.starts_with("CGROUP ")).unwrap();
    let row = &l[head + 1];
    assert!(
        row.starts_with("~terscope-lab/cfs-throttle  19.9%  0.20  99.4%   100%"),
        "{row}"
    );
    assert!(l
        .iter()
        .any(|x| x.contains("MECH CFS throttling of /jitterscope-lab/cfs-throttle")));
}

#[test]
fn reclaim_storm_shows_on_the_pag_line() {
    // The first sample of the storm's stall episode, so the test follows a re-captured store.
    let storm = replay("reclaim-storm", None)
        .events
        .iter()
        .find(|e| e.kind == "reclaim-stalls")
        .map(|e| e.from_ns)
        .expect("the reclaim-storm store has a reclaim-stalls episode");
    let app = replay("reclaim-storm", Some(storm));
    let s = app.snapshot.as_ref().unwrap();
    assert!(s.pag.stalls_per_s.unwrap() > 0.0, "{:?}", s.pag);
    let l = screen(&app, 80, 24);
    let pag = find(&l, "PAG ");
    assert!(
        pag.contains(&format!(
            " stalls {} ",
            jitterscope_views::render::num(s.pag.stalls_per_s)
        )),
        "{pag}"
    );
    assert!(!pag.contains("stalls 0"), "{pag}");
}

#[test]
fn no_previous_sample_and_missing_samples_are_marked() {
    let ts = times("tlb-shootdown");
    let app = replay("tlb-shootdown", Some(ts[0]));
    let l = screen(&app, 200, 24);
    assert!(
        l[0].contains("NO PREVIOUS SAMPLE: rates unknown"),
        "{}",
        l[0]
    );
    assert!(find(&l, "CPU ").contains("usr - sys -"));

    // A copy of the store without one record: the sample after the hole says so.
    let dir = tempfile::tempdir().unwrap();
    let mut w =
        jitterscope_store::Writer::open(jitterscope_store::StoreConfig::new(dir.path())).unwrap();
    let r = jitterscope_store::Reader::open(store("tlb-shootdown")).unwrap();
    for (k, rec) in r.range(i64::MIN, i64::MAX).unwrap().enumerate() {
        let rec = rec.unwrap();
        if k != 4 {
            w.append(rec.ts_ns, &rec.payload).unwrap();
        }
    }
    drop(w);
    let src = StoreSource::open(dir.path(), false).unwrap();
    let mut app = App::new(Box::new(src), "replay", parse);
    app.start(Some(ts[5])).unwrap();
    let l = screen(&app, 200, 24);
    assert!(l[0].contains("GAP 1s missing before"), "{}", l[0]);
    key(&mut app, 'T');
    assert_eq!(app.shown(), Some(ts[3]), "T steps back over the hole");
    assert!(!screen(&app, 200, 24)[0].contains("GAP"));
}

#[test]
fn t_and_shift_t_step_one_sample_as_atop_does() {
    let (ts, i) = tlb_at();
    let mut app = replay("tlb-shootdown", Some(ts[i]));
    key(&mut app, 'T');
    assert_eq!(app.shown(), Some(ts[i - 1]), "T: the previous sample");
    key(&mut app, 't');
    key(&mut app, 't');
    assert_eq!(app.shown(), Some(ts[i + 1]), "t: the next sample");
    assert!(!app.follow);
    // Off either end: a message, and the shown sample stays.
    let mut app = replay("tlb-shootdown", Some(ts[0]));
    key(&mut app, 'T');
    assert_eq!(app.shown(), Some(ts[0]));
    assert_eq!(app.message.as_deref(), Some("no earlier sample"));
    assert_eq!(screen(&app, 80, 24)[23], "no earlier sample");
    let last = *ts.last().unwrap();
    let mut app = replay("tlb-shootdown", None);
    assert_eq!(
        app.shown(),
        Some(last),
        "replay starts at the newest sample"
    );
    key(&mut app, 't');
    assert_eq!(app.message.as_deref(), Some("no later sample"));
}

#[test]
fn brackets_jump_between_episodes() {
    // The negative-dentry store has episodes that start seconds apart (the dentries' growth,
    // then the stalls of the reclaim it sets off). The OOM leak's no longer does: a leak trend
    // opens after 90 s of growth (issue 46), and its recording is 10 s.
    let ts = times("negative-dentry");
    let mut app = replay("negative-dentry", Some(ts[0]));
    let mut starts: Vec<i64> = app.events.iter().map(|e| e.from_ns).collect();
    starts.dedup();
    assert!(starts.len() >= 2, "{:?}", app.events);
    for &s in &starts {
        key(&mut app, ']');
        assert_eq!(app.shown(), Some(s));
    }
    key(&mut app, ']');
    assert_eq!(app.message.as_deref(), Some("no later episode"));
    key(&mut app, '[');
    assert_eq!(app.shown(), Some(starts[starts.len() - 2]));
}

#[test]
fn g_goes_to_a_time_and_rejects_bad_ones() {
    let (ts, i) = tlb_at();
    let mut app = replay("tlb-shootdown", None);
    key(&mut app, 'g');
    typed(&mut app, &format!("{}", ts[i] / 1_000_000_000 + 1));
    assert!(screen(&app, 80, 24)[23].starts_with("go to time: 17953315"));
    press(&mut app, KeyCode::Enter);
    assert_eq!(
        app.shown(),
        Some(ts[i]),
        "the last sample at or before the time"
    );
    key(&mut app, 'g');
    typed(&mut app, "yesterday-ish");
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.shown(), Some(ts[i]));
    assert_eq!(
        app.message.as_deref(),
        Some("invalid time \"yesterday-ish\"")
    );
    // Esc abandons the line.
    key(&mut app, 'g');
    typed(&mut app, "1");
    press(&mut app, KeyCode::Esc);
    assert!(app.input.is_none());
    assert_eq!(app.shown(), Some(ts[i]));
}

#[test]
fn sort_keys_reorder_the_processes() {
    let (ts, i) = tlb_at();
    let mut app = replay("tlb-shootdown", Some(ts[i]));
    for (key_char, label) in [
        ('M', "*RSS"),
        ('A', "*MADV"),
        ('S', "*SYS"),
        ('G', "*RGROW"),
    ] {
        key(&mut app, key_char);
        let l = screen(&app, 80, 24);
        assert!(l
            .iter()
            .any(|x| x.contains("PID COMM") && x.contains(label)));
        assert!(l[23].starts_with(&format!("sort {}", label.trim_start_matches('*'))));
    }
    key(&mut app, 'M');
    let rss: Vec<f64> = app
        .processes()
        .iter()
        .map(|p| p.rss_bytes.unwrap_or(-1.0))
        .collect();
    assert!(rss.windows(2).all(|w| w[0] >= w[1]), "descending RSS");
    key(&mut app, 'A');
    assert_eq!(app.processes()[0].comm, "lab-madvise");
}

#[test]
fn slash_filters_and_esc_clears() {
    let (ts, i) = tlb_at();
    let mut app = replay("tlb-shootdown", Some(ts[i]));
    let all = app.processes().len();
    key(&mut app, '/');
    typed(&mut app, "lab-");
    assert_eq!(screen(&app, 80, 24)[23], "filter: lab-_");
    press(&mut app, KeyCode::Enter);
    let rows: Vec<String> = app.processes().iter().map(|p| p.comm.clone()).collect();
    assert_eq!(rows, ["lab-madvise", "lab-victim"]);
    let l = screen(&app, 80, 24);
    assert!(l[23].contains("filter 'lab-'"), "{}", l[23]);
    assert!(!l.iter().any(|x| x.contains("kthreadd")));
    // Cgroups filter by path too.
    assert!(app.cgroups().iter().all(|c| c.path.contains("lab-")));
    press(&mut app, KeyCode::Esc);
    assert_eq!(app.processes().len(), all);
}

#[test]
fn help_tab_per_cpu_and_quit() {
    let (ts, i) = tlb_at();
    let mut app = replay("tlb-shootdown", Some(ts[i]));
    key(&mut app, '?');
    let l = screen(&app, 80, 24);
    assert!(l.iter().any(|x| x.contains(" KEYS")));
    assert!(l
        .iter()
        .any(|x| x.contains("[ / ]      previous / next episode")));
    key(&mut app, 't'); // closes the help, does not step
    assert!(!app.help);
    assert_eq!(app.shown(), Some(ts[i]));

    // Tab to the episodes panel: both episodes of the shown time are listed.
    press(&mut app, KeyCode::Tab);
    press(&mut app, KeyCode::Tab);
    let l = screen(&app, 80, 24);
    assert_eq!(l.iter().filter(|x| x.starts_with("NOW ")).count(), 2);
    assert!(l.iter().any(|x| x.starts_with("       fix: ")));

    key(&mut app, 'c');
    let l = screen(&app, 80, 24);
    assert!(find(&l, "cp0 ").contains("usr "));
    assert!(find(&l, "cp1 ").contains("idle "));
    key(&mut app, 'q');
    assert!(app.quit);
}

#[test]
fn small_and_large_terminals_do_not_break_the_screen() {
    let (ts, i) = tlb_at();
    let mut app = replay("tlb-shootdown", Some(ts[i]));
    for (w, h) in [(1, 1), (20, 5), (80, 10), (80, 24), (300, 100)] {
        let l = screen(&app, w, h);
        assert_eq!(l.len(), h as usize);
    }
    key(&mut app, '?');
    screen(&app, 10, 3);
}

#[test]
fn json_once_has_the_screen_in_panel_order() {
    let (ts, i) = tlb_at();
    let src = StoreSource::open(&store("tlb-shootdown"), false).unwrap();
    let mut app = App::new(Box::new(src), "replay", parse);
    app.start(Some(ts[i])).unwrap();
    app.sort = jitterscope_views::app::SortKey::Madvise;
    let v = jitterscope_views::term::json_once(&mut app, 3).unwrap();
    assert_eq!(v["snapshot"]["time"], "2026-11-22T07:12:49.399Z");
    assert_eq!(v["sort"], "madvise");
    let procs = v["snapshot"]["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 3);
    assert_eq!(procs[0]["comm"], "lab-madvise");
    assert!(procs[0]["madvise_per_s"].as_f64().unwrap() > 1000.0);
    assert!(v["snapshot"]["ipi"]["tlb_per_s"].as_f64().unwrap() > 1000.0);
    let kinds: Vec<&str> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["relation"] == "now")
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"tlb-storm"), "{kinds:?}");
    assert_eq!(v["findings"][0]["rule_id"], "cpu.tlb-shootdown");
}

mod props {
    use super::*;
    use proptest::prelude::*;

    fn any_key() -> impl Strategy<Value = KeyCode> {
        prop_oneof![
            prop::sample::select("tT[]g/?cqCSMGFALjkx1 \u{e9}".chars().collect::<Vec<_>>())
                .prop_map(KeyCode::Char),
            Just(KeyCode::Enter),
            Just(KeyCode::Esc),
            Just(KeyCode::Tab),
            Just(KeyCode::Backspace),
            Just(KeyCode::Up),
            Just(KeyCode::Down),
            Just(KeyCode::PageDown),
            Just(KeyCode::End),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Any key sequence on any terminal size: no panic, and the shown sample is always
        /// one the store holds.
        #[test]
        fn keys_never_break_the_screen(
            keys in prop::collection::vec(any_key(), 0..40),
            w in 1u16..140,
            h in 1u16..50,
        ) {
            let ts = times("tlb-shootdown");
            let mut app = replay("tlb-shootdown", Some(ts[3]));
            for k in keys {
                app.key(KeyEvent::new(k, KeyModifiers::NONE)).unwrap();
                let _ = screen(&app, w, h);
                prop_assert!(ts.contains(&app.shown().unwrap()));
            }
        }
    }
}
