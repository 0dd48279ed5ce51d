//! Episodes in ClickHouse, searchable across hosts: `record --clickhouse URL` pushes each
//! episode as it opens and as it closes, over ClickHouse's HTTP interface (`JSONEachRow`), and
//! the findings of each closed episode, diagnosed from the store over the episode and 10 s
//! either side, with the stacks sampled during it, by a worker process this thread starts (at
//! its nice 10): the recorder's locked memory would keep for good what the reading took.
//!
//! The store is the write-ahead log, as for remote write: the recorder writes each episode
//! mark into the store's signals lane, and the pusher thread reads the lane from its cursor
//! (`clickhouse.json` in the store) every few seconds, so marks written while ClickHouse was
//! down are sent when it answers again, in order, and a restarted recorder resumes where it
//! stopped. Rows are idempotent: the table is a `ReplacingMergeTree` keyed by host, kind,
//! series and start, whose version is the mark's last second (the close outranks the open),
//! so a row sent twice (a crash between the insert and the cursor's save) collapses into one,
//! and queries take the newest version with `argMax`.
//!
//! Findings and stacks are sent after the episode's close row, from a list of the closed
//! episodes still to be diagnosed that is kept durably beside the cursor
//! (`clickhouse-pending.json`, per receiver, 0600). An episode goes on the list in the round
//! that sends its close (before the cursor moves past it) and off it once its findings and
//! stacks are in. Stopping is quick (the service manager gives 10 s): the last round sends
//! the marks and closes in the engine the episodes the detector leaves open, both going on the
//! list, and diagnoses nothing. The next start diagnoses the list, and every episode of this
//! host that a `kill -9` (or an engine down at the stop) left open in the engine, which it
//! closes at the previous run's last sample. A diagnosis sent twice (a crash between the
//! insert and the list's save) replaces its rows: the tables are `ReplacingMergeTree` by
//! episode and rule (findings) or stack.
//!
//! Retention: `TTL` where the server has it (ClickHouse 19.6 and later); Debian's 18.16 does
//! not, so there the pusher drops the table's daily partitions older than the retention
//! itself, once an hour.

use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use jitterscope_model::signals::{Mark, MarkState};
use jitterscope_model::stored::SampleReader;

use crate::inventory::{Document, Scanner, HOSTS, INVENTORY};

/// The episodes table.
pub const EPISODES: &str = "jitterscope_episodes";
/// The findings table: the diagnosis of each closed episode.
pub const FINDINGS: &str = "jitterscope_findings";
/// The stack samples of each closed episode: one row per folded stack.
pub const STACKS: &str = "jitterscope_stacks";
/// Stacks kept per episode, the most sampled first; the rest are one `[other stacks]` row.
const STACKS_PER_EPISODE: usize = 500;
/// The longest stretch of an episode whose stacks are sent: its last ten minutes.
const STACK_WINDOW_NS: i64 = 600 * 1_000_000_000;
/// How far around a closed episode its diagnosis looks (the window's edges).
const MARGIN_NS: i64 = 10 * 1_000_000_000;
/// The cursor file's name in the store directory.
const CURSOR: &str = "clickhouse.json";
/// The file of closed episodes whose findings and stacks are still to be sent.
const PENDING: &str = "clickhouse-pending.json";
/// Closed episodes kept on that list per receiver: past this, the oldest go without their
/// findings (said). An engine that takes the close rows but never the findings is the only way
/// to get there.
const MAX_PENDING: usize = 1000;
/// Pauses between failed attempts: doubling from the first to the last.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(8));

/// Where to push and how.
#[derive(Debug, Clone)]
pub struct Config {
    /// ClickHouse's HTTP interface, `http://host:8123/` (a `?database=` query is kept).
    pub url: String,
    /// The `host` column.
    pub host: String,
    /// Days the engine keeps episodes.
    pub retain_days: u32,
    /// The store directory (the signals lane and the cursor file).
    pub dir: PathBuf,
    /// How often the lane is read.
    pub flush: Duration,
    /// `X-ClickHouse-User` and `X-ClickHouse-Key`.
    pub user: Option<(String, String)>,
    /// How often the host inventory is taken (pushed when it changed); `None`: not taken.
    pub inventory_every: Option<Duration>,
    /// Processes younger than this are left out of the inventory.
    pub inventory_min_age: Duration,
    /// The recorder's version, in the hosts table.
    pub version: String,
}

/// ClickHouse over HTTP: one statement per request.
#[derive(Clone)]
pub struct Engine {
    agent: ureq::Agent,
    url: String,
    user: Option<(String, String)>,
}

impl Engine {
    /// A client for `url`; `Err` for a URL that cannot work (not http or https).
    pub fn new(
        url: &str,
        user: Option<(String, String)>,
        timeout: Duration,
    ) -> Result<Engine, String> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!(
                "{url}: ClickHouse is reached over HTTP: the URL must start with http:// or https://"
            ));
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .build()
            .into();
        Ok(Engine {
            agent,
            url: url.to_string(),
            user,
        })
    }

    /// Runs `sql` with `body` as its data (rows for an `INSERT … FORMAT`); the answer's text,
    /// or what went wrong in one line.
    pub fn run(&self, sql: &str, body: &[u8]) -> Result<String, String> {
        let sep = if self.url.contains('?') { '&' } else { '?' };
        // 64-bit integers as JSON numbers: they are nanosecond times.
        let url = format!(
            "{}{sep}output_format_json_quote_64bit_integers=0&query={}",
            self.url,
            encode(sql)
        );
        let mut req = self.agent.post(&url);
        if let Some((u, k)) = &self.user {
            req = req
                .header("X-ClickHouse-User", u)
                .header("X-ClickHouse-Key", k);
        }
        match req.send(body) {
            Ok(mut r) => {
                let status = r.status().as_u16();
                let text = r.body_mut().read_to_string().unwrap_or_default();
                if status == 200 {
                    Ok(text)
                } else {
                    let first = text.lines().next().unwrap_or("").trim();
                    Err(format!("ClickHouse answered {status}: {first}"))
                }
            }
            Err(e) => Err(format!("{}: {e}", self.url)),
        }
    }

    /// `SELECT … FORMAT JSONEachRow`: one JSON object per row.
    pub fn rows(&self, sql: &str) -> Result<Vec<serde_json::Value>, String> {
        let text = self.run(&format!("{sql} FORMAT JSONEachRow"), b"")?;
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).map_err(|e| format!("ClickHouse sent {l:?}: {e}")))
            .collect()
    }

    /// The server's version as (major, minor).
    pub fn version(&self) -> Result<(u32, u32), String> {
        let v = self.run("SELECT version()", b"")?;
        let mut it = v.trim().split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        Ok((it.next().unwrap_or(0), it.next().unwrap_or(0)))
    }

    /// Creates the tables if they are missing, with a TTL of `retain_days` where the server
    /// has TTLs. Returns whether it has them.
    pub fn create_schema(&self, retain_days: u32) -> Result<bool, String> {
        let ttl = self.version()? >= (19, 6);
        let ttl_clause = if ttl {
            format!(" TTL date + INTERVAL {retain_days} DAY")
        } else {
            String::new()
        };
        self.run(
            &format!(
                "CREATE TABLE IF NOT EXISTS {EPISODES} (\
                 host String, kind String, series String, \
                 start_ns Int64, end_ns Int64, open UInt8, \
                 peak Float64, baseline Float64, threshold Float64, version UInt64, \
                 date Date MATERIALIZED toDate(intDiv(start_ns, 1000000000))\
                 ) ENGINE = ReplacingMergeTree(version) PARTITION BY date \
                 ORDER BY (host, kind, series, start_ns){ttl_clause}"
            ),
            b"",
        )?;
        // One row per finding of a closed episode; a diagnosis sent again replaces its rows.
        self.run(
            &format!(
                "CREATE TABLE IF NOT EXISTS {FINDINGS} (\
                 host String, episode_kind String, episode_series String, \
                 episode_start_ns Int64, episode_end_ns Int64, rank UInt16, \
                 rule_id String, title String, confidence Float64, mechanism UInt8, \
                 root UInt8, culprit_pid UInt32, culprit_comm String, culprit_cgroup String, \
                 container String, library String, library_version String, \
                 remediation Array(String), caused_by Array(String), finding String, \
                 date Date MATERIALIZED toDate(intDiv(episode_start_ns, 1000000000))\
                 ) ENGINE = ReplacingMergeTree PARTITION BY date \
                 ORDER BY (host, episode_start_ns, episode_kind, episode_series, rule_id){ttl_clause}"
            ),
            b"",
        )?;
        // The stacks sampled during each closed episode, named on the host that sampled them.
        self.run(
            &format!(
                "CREATE TABLE IF NOT EXISTS {STACKS} (\
                 host String, episode_kind String, episode_series String, \
                 episode_start_ns Int64, episode_end_ns Int64, stack String, samples UInt64, \
                 hz UInt32, \
                 date Date MATERIALIZED toDate(intDiv(episode_start_ns, 1000000000))\
                 ) ENGINE = ReplacingMergeTree PARTITION BY date \
                 ORDER BY (host, episode_start_ns, episode_kind, episode_series, stack){ttl_clause}"
            ),
            b"",
        )?;
        // One row per inventory document, and one per group of alike processes in it.
        self.run(
            &format!(
                "CREATE TABLE IF NOT EXISTS {HOSTS} (\
                 host String, taken_ns Int64, kernel String, os String, cgroup_layout String, \
                 cpus UInt32, memory_bytes UInt64, processes UInt32, groups UInt32, \
                 jitterscope_version String, \
                 date Date MATERIALIZED toDate(intDiv(taken_ns, 1000000000))\
                 ) ENGINE = ReplacingMergeTree PARTITION BY date \
                 ORDER BY (host, taken_ns){ttl_clause}"
            ),
            b"",
        )?;
        self.run(
            &format!(
                "CREATE TABLE IF NOT EXISTS {INVENTORY} (\
                 host String, taken_ns Int64, group_key String, comm String, exe String, \
                 cgroup String, container String, processes UInt32, pids Array(UInt32), \
                 glibc Nullable(String), jemalloc Nullable(String), tcmalloc Nullable(String), \
                 mimalloc Nullable(String), softokn Nullable(String), python Nullable(String), \
                 jemalloc_dirty_decay_ms Nullable(Int64), \
                 env_keys Array(String), env_values Array(String), \
                 worker_server String, worker_recycle String, \
                 date Date MATERIALIZED toDate(intDiv(taken_ns, 1000000000))\
                 ) ENGINE = ReplacingMergeTree PARTITION BY date \
                 ORDER BY (host, taken_ns, group_key){ttl_clause}"
            ),
            b"",
        )?;
        Ok(ttl)
    }

    /// Drops the daily partitions of every table older than `retain_days` before
    /// `now_ns` (for servers without TTL); how many.
    pub fn drop_expired(&self, retain_days: u32, now_ns: i64) -> Result<usize, String> {
        let mut dropped = 0;
        for table in [EPISODES, FINDINGS, STACKS, HOSTS, INVENTORY] {
            dropped += self.drop_expired_of(table, retain_days, now_ns)?;
        }
        Ok(dropped)
    }

    fn drop_expired_of(&self, table: &str, retain_days: u32, now_ns: i64) -> Result<usize, String> {
        let rows = self.rows(&format!(
            "SELECT DISTINCT partition FROM system.parts WHERE database = currentDatabase() \
             AND table = '{table}' AND active"
        ))?;
        let cutoff = civil_day(now_ns - retain_days as i64 * 86_400 * 1_000_000_000);
        let mut dropped = 0;
        for r in rows {
            let Some(p) = r["partition"].as_str() else {
                continue;
            };
            // `PARTITION BY date` names partitions by the day: '2026-11-27' (older servers
            // write 20261127).
            let day: String = p.chars().filter(|c| c.is_ascii_digit()).collect();
            if day.len() == 8 && day < cutoff.replace('-', "") {
                self.run(
                    &format!(
                        "ALTER TABLE {table} DROP PARTITION '{}'",
                        p.replace('\'', "")
                    ),
                    b"",
                )?;
                dropped += 1;
            }
        }
        Ok(dropped)
    }
}

/// `YYYY-MM-DD` (UTC) of a time in ns since the epoch.
pub fn civil_day(ts_ns: i64) -> String {
    let t = jitterscope_model::time::rfc3339(ts_ns);
    t.get(..10).unwrap_or(&t).to_string()
}

/// A string literal for ClickHouse SQL.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// Percent-encodes a query parameter.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A mark as a `JSONEachRow` row of the episodes table.
pub fn row(host: &str, m: &Mark) -> String {
    let open = m.state == MarkState::Start;
    let finite = |v: f64| if v.is_finite() { v } else { 0.0 };
    serde_json::json!({
        "host": host,
        "kind": m.kind,
        "series": m.series,
        "start_ns": m.from_ns,
        "end_ns": m.to_ns,
        "open": u8::from(open),
        "peak": finite(m.peak),
        "baseline": finite(m.baseline),
        "threshold": finite(m.threshold),
        // The close outranks the open at the same second.
        "version": (m.to_ns.max(0) as u64) * 2 + u64::from(!open),
    })
    .to_string()
}

/// A finding of the closed episode `m` as a `JSONEachRow` row of the findings table; `rank`
/// is its place in the report (0 first).
pub fn finding_row(host: &str, m: &Mark, rank: usize, f: &jitterscope_diagnose::Finding) -> String {
    let c = &f.culprit;
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    serde_json::json!({
        "host": host,
        "episode_kind": m.kind,
        "episode_series": m.series,
        "episode_start_ns": m.from_ns,
        "episode_end_ns": m.to_ns,
        "rank": rank,
        "rule_id": f.rule_id,
        "title": f.title,
        "confidence": if f.confidence.is_finite() { f.confidence } else { 0.0 },
        "mechanism": u8::from(f.mechanism),
        // A root cause: no other finding of the report set it off.
        "root": u8::from(f.caused_by.is_empty()),
        "culprit_pid": c.pid.unwrap_or(0),
        "culprit_comm": s(&c.comm),
        "culprit_cgroup": s(&c.cgroup),
        "container": s(&c.container),
        "library": s(&c.library),
        "library_version": s(&c.library_version),
        "remediation": f.remediation,
        "caused_by": f.caused_by.iter().map(|l| l.rule_id).collect::<Vec<_>>(),
        "finding": serde_json::to_string(f).unwrap_or_default(),
    })
    .to_string()
}

/// The stacks sampled during the closed episode `m` (its seconds, at most its last
/// [`STACK_WINDOW_NS`]; idle left out), named on this host, as `JSONEachRow` rows of the
/// stacks table; empty when the profiler was off.
pub fn stack_rows(dir: &std::path::Path, host: &str, m: &Mark) -> Result<String, String> {
    use jitterscope_profile::window::{read_store, Filter};
    let from = m.from_ns.max(m.to_ns - STACK_WINDOW_NS);
    // A slice belongs to the second it ends in: the episode's first second included.
    let filter = Filter {
        skip_idle: true,
        ..Filter::default()
    };
    let (w, _, _) = read_store(dir, from - 1, m.to_ns, &filter).map_err(|e| e.to_string())?;
    if w.slices == 0 {
        return Ok(String::new());
    }
    let named = w.resolve(&mut jitterscope_profile::system::FileSymbolizer::new());
    let hz = named.hz;
    let mut lines: Vec<(String, u64)> = named
        .folded()
        .into_iter()
        .filter_map(|l| {
            let (stack, n) = l.rsplit_once(' ')?;
            Some((stack.to_string(), n.parse().ok()?))
        })
        .collect();
    lines.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let rest: u64 = lines.iter().skip(STACKS_PER_EPISODE).map(|l| l.1).sum();
    lines.truncate(STACKS_PER_EPISODE);
    if rest > 0 {
        lines.push(("[other stacks]".into(), rest));
    }
    let mut out = String::new();
    for (stack, samples) in lines {
        let row = serde_json::json!({
            "host": host,
            "episode_kind": m.kind,
            "episode_series": m.series,
            "episode_start_ns": m.from_ns,
            "episode_end_ns": m.to_ns,
            "stack": stack,
            "samples": samples,
            "hz": hz,
        });
        out.push_str(&row.to_string());
        out.push('\n');
    }
    Ok(out)
}

/// How one push went, for the log.
pub type Log = Box<dyn Fn(&str) + Send>;

/// The pusher thread.
pub struct Pusher {
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

impl Pusher {
    /// Starts pushing the store's episodes to `cfg.url`; `Err` when the URL cannot work.
    pub fn start(cfg: Config, log: Log) -> Result<Pusher, String> {
        let engine = Engine::new(&cfg.url, cfg.user.clone(), Duration::from_secs(10))?;
        let (stop, rx) = channel();
        let thread = std::thread::Builder::new()
            .name("clickhouse".into())
            .spawn(move || run(cfg, engine, rx, log))
            .map_err(|e| format!("cannot start the ClickHouse thread: {e}"))?;
        Ok(Pusher { stop, thread })
    }

    /// Stops after one last push of what the store holds.
    pub fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

/// The last failure said, so a streak of one kind is said once.
#[derive(Default)]
struct Said(Option<String>);

impl Said {
    fn fail(&mut self, log: &Log, what: &str) {
        // The kind of failure without its details (addresses, times).
        let kind: String = what.chars().take(40).collect();
        if self.0.as_deref() != Some(kind.as_str()) {
            log(&format!(
                "clickhouse: {what} (episodes are kept in the store and sent when it answers)"
            ));
            self.0 = Some(kind);
        }
    }

    fn ok(&mut self, log: &Log, url: &str) {
        if self.0.take().is_some() {
            log(&format!("clickhouse: {url} accepts again"));
        }
    }
}

/// The inventory's state between rounds.
struct Inventory {
    scanner: Scanner,
    every: Duration,
    last_scan: Option<Instant>,
    /// The key of the last document the engine accepted, and when.
    sent: Option<(u64, Instant)>,
    /// The newest document not sent yet: one taken while the engine was down replaces the
    /// one before it.
    pending: Option<Document>,
}

/// A document unchanged for this long is sent again, so that retention never drops a live
/// host's inventory and `fleet inventory --since 1d` finds every host that records.
const INVENTORY_REFRESH: Duration = Duration::from_secs(6 * 3600);

/// What a round carries over to the next.
struct State {
    /// When this recorder started pushing: an episode of this host still open in the engine
    /// and started before then was left open by a recorder that stopped or crashed.
    started_ns: i64,
    /// Whether those have been closed.
    stale_closed: bool,
    /// The store's newest sample when this run started: the previous run's last.
    previous_last_ns: Option<i64>,
    cursor: Option<i64>,
    /// Closed episodes whose findings and stacks are still to be sent, oldest first (the
    /// file [`PENDING`] holds the same).
    pending: Vec<Closed>,
    /// Whether the episode worker could not run (said once; then episodes are read here).
    worker_failed: bool,
    ttl: Option<bool>,
    last_retention: Option<Instant>,
    inventory: Option<Inventory>,
}

/// The time of the store's newest sample.
fn latest(dir: &std::path::Path) -> Option<i64> {
    SampleReader::open(dir).ok()?.store().latest_ts().ok()?
}

fn wall_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

fn run(cfg: Config, engine: Engine, stop: Receiver<()>, log: Log) {
    // Diagnosing an episode reads minutes of the store, and the inventory walks every
    // process: at the recorder's own priority (nice -20) they would take CPU from the
    // workload it watches.
    // SAFETY: setpriority on this thread's own id; no memory is passed.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 10);
    }
    let mut said = Said::default();
    let mut state = State {
        started_ns: wall_ns(),
        stale_closed: false,
        previous_last_ns: latest(&cfg.dir),
        cursor: crate::cursor::load(&cfg.dir, CURSOR, &cfg.url),
        pending: load_pending(&cfg.dir, &cfg.url),
        worker_failed: false,
        ttl: None,
        last_retention: None,
        inventory: cfg.inventory_every.map(|every| Inventory {
            scanner: Scanner::new(jitterscope_sources::Root::new("/"))
                .with_min_age(cfg.inventory_min_age),
            every,
            last_scan: None,
            sent: None,
            pending: None,
        }),
    };
    // A stop asked for while episodes are being diagnosed ends the diagnosing: they stay on
    // the list for the next start.
    let stop_asked = std::cell::Cell::new(false);
    let asked = || {
        if !stop_asked.get()
            && matches!(
                stop.try_recv(),
                Ok(()) | Err(std::sync::mpsc::TryRecvError::Disconnected)
            )
        {
            stop_asked.set(true);
        }
        stop_asked.get()
    };
    // The first round comes at once: the inventory is taken when recording starts.
    let mut pause = Duration::ZERO;
    let mut backoff = BACKOFF.0;
    loop {
        let stopping = stop_asked.get()
            || match stop.recv_timeout(pause) {
                Ok(()) | Err(RecvTimeoutError::Disconnected) => true,
                Err(RecvTimeoutError::Timeout) => false,
            };
        stop_asked.set(stopping);
        match push(&cfg, &engine, &log, &mut state, stopping, &asked) {
            Ok(()) => {
                said.ok(&log, &cfg.url);
                pause = cfg.flush;
                backoff = BACKOFF.0;
            }
            Err(e) => {
                said.fail(&log, &e);
                pause = backoff;
                backoff = (backoff * 2).min(BACKOFF.1);
            }
        }
        if stopping {
            return;
        }
    }
}

/// One round: the schema once, the marks after the cursor, the episodes a previous run left
/// open (once), the inventory when due, retention hourly, then the findings and stacks of the
/// closed episodes. When `stopping`: the episodes still open are closed and nothing is
/// diagnosed; `asked` says whether a stop was asked for since.
fn push(
    cfg: &Config,
    engine: &Engine,
    log: &Log,
    st: &mut State,
    stopping: bool,
    asked: &dyn Fn() -> bool,
) -> Result<(), String> {
    // Taken whether or not the engine answers, so an outage sends the newest.
    if let Some(inv) = st.inventory.as_mut() {
        if inv.last_scan.is_none_or(|t| t.elapsed() >= inv.every) {
            inv.last_scan = Some(Instant::now());
            let doc = inv.scanner.scan(wall_ns());
            let due = inv
                .sent
                .is_none_or(|(key, at)| key != doc.key() || at.elapsed() >= INVENTORY_REFRESH);
            if due {
                inv.pending = Some(doc);
            }
        }
    }
    let has_ttl = match st.ttl {
        Some(t) => t,
        None => {
            let t = engine.create_schema(cfg.retain_days)?;
            st.ttl = Some(t);
            t
        }
    };
    push_episodes(cfg, engine, log, &mut st.cursor, &mut st.pending)?;
    // After the backlog, whose marks may open episodes the previous run never closed.
    if !st.stale_closed {
        let (before, last) = (st.started_ns, st.previous_last_ns);
        close_left_open(cfg, engine, log, st, before, last)?;
        st.stale_closed = true;
    }
    if stopping {
        // The detector stops with the recorder: what it left open ends here, or the fleet
        // would count it as going on until a restart.
        close_left_open(cfg, engine, log, st, i64::MAX, latest(&cfg.dir))?;
    }
    if let Some(inv) = st.inventory.as_mut() {
        if let Some(doc) = &inv.pending {
            engine.run(
                &format!("INSERT INTO {HOSTS} FORMAT JSONEachRow"),
                doc.host_row(&cfg.host, &cfg.version).as_bytes(),
            )?;
            engine.run(
                &format!("INSERT INTO {INVENTORY} FORMAT JSONEachRow"),
                doc.group_rows(&cfg.host).as_bytes(),
            )?;
            inv.sent = Some((doc.key(), Instant::now()));
            inv.pending = None;
        }
    }
    if !has_ttl
        && st
            .last_retention
            .is_none_or(|t| t.elapsed() > Duration::from_secs(3600))
    {
        engine.drop_expired(cfg.retain_days, wall_ns())?;
        st.last_retention = Some(Instant::now());
    }
    if !stopping {
        send_findings(cfg, engine, log, st, asked)?;
    }
    Ok(())
}

/// The marks that close the episodes of `host` still open in the engine that started before
/// `before_ns`, at `last_ns` (the last sample their recorder took; their own last second if
/// earlier or unknown): their recorder stopped (or crashed) while they went on, and a new
/// run's detector starts afresh. Nothing is written.
pub fn left_open(
    engine: &Engine,
    host: &str,
    before_ns: i64,
    last_ns: Option<i64>,
) -> Result<Vec<Mark>, String> {
    let open = engine.rows(&format!(
        "SELECT kind, series, start_ns, argMax(end_ns, version) AS last_end, \
         argMax(peak, version) AS last_peak, argMax(baseline, version) AS last_baseline, \
         argMax(threshold, version) AS last_threshold, argMax(open, version) AS is_open \
         FROM {EPISODES} WHERE host = {h} AND start_ns < {before_ns} \
         GROUP BY kind, series, start_ns HAVING is_open = 1",
        h = quote(host)
    ))?;
    Ok(open
        .iter()
        .map(|r| Mark {
            kind: r["kind"].as_str().unwrap_or("").to_string(),
            series: r["series"].as_str().unwrap_or("").to_string(),
            state: MarkState::End,
            from_ns: r["start_ns"].as_i64().unwrap_or(0),
            to_ns: r["last_end"]
                .as_i64()
                .unwrap_or(0)
                .max(last_ns.unwrap_or(i64::MIN)),
            peak: r["last_peak"].as_f64().unwrap_or(0.0),
            baseline: r["last_baseline"].as_f64().unwrap_or(0.0),
            threshold: r["last_threshold"].as_f64().unwrap_or(0.0),
        })
        .collect())
}

/// Closes in the engine the episodes [`left_open`] finds, each put on the list of those to
/// diagnose first: a crash between the two then leaves it on the list, or open in the engine,
/// where the next start finds it.
fn close_left_open(
    cfg: &Config,
    engine: &Engine,
    log: &Log,
    st: &mut State,
    before_ns: i64,
    last_ns: Option<i64>,
) -> Result<(), String> {
    let marks = left_open(engine, &cfg.host, before_ns, last_ns)?;
    if marks.is_empty() {
        return Ok(());
    }
    add_pending(cfg, log, &mut st.pending, marks.iter().map(Closed::of))?;
    let mut rows = String::new();
    for m in &marks {
        rows.push_str(&row(&cfg.host, m));
        rows.push('\n');
    }
    engine.run(
        &format!("INSERT INTO {EPISODES} FORMAT JSONEachRow"),
        rows.as_bytes(),
    )?;
    Ok(())
}

/// The marks after the cursor; the episodes they close go on the list of those to diagnose
/// before the cursor moves past them.
fn push_episodes(
    cfg: &Config,
    engine: &Engine,
    log: &Log,
    cursor: &mut Option<i64>,
    pending: &mut Vec<Closed>,
) -> Result<(), String> {
    let reader = SampleReader::open(&cfg.dir).map_err(|e| format!("the store: {e}"))?;
    let from = cursor.map_or(i64::MIN, |c| c.saturating_add(1));
    let mut rows = String::new();
    let mut closed = Vec::new();
    let mut upto = None;
    for (ts, rec) in reader
        .signals(from, i64::MAX)
        .map_err(|e| format!("the store: {e}"))?
    {
        for m in &rec.marks {
            rows.push_str(&row(&cfg.host, m));
            rows.push('\n');
            if m.state == MarkState::End {
                closed.push(Closed::of(m));
            }
        }
        upto = Some(ts);
    }
    if !rows.is_empty() {
        engine.run(
            &format!("INSERT INTO {EPISODES} FORMAT JSONEachRow"),
            rows.as_bytes(),
        )?;
    }
    if !closed.is_empty() {
        add_pending(cfg, log, pending, closed)?;
    }
    if let Some(t) = upto {
        *cursor = Some(t);
        if !rows.is_empty() {
            crate::cursor::save(&cfg.dir, CURSOR, &cfg.url, t)
                .map_err(|e| format!("cannot save the cursor in {}: {e}", cfg.dir.display()))?;
        }
    }
    Ok(())
}

/// Diagnoses each episode of the list, as `jitterscope diagnose --event` would, and sends its
/// findings and stacks, one episode at a time, taking each off the list once they are in;
/// until a stop is `asked` for. Each episode is read in a worker process ([`rows_apart`]).
fn send_findings(
    cfg: &Config,
    engine: &Engine,
    log: &Log,
    st: &mut State,
    asked: &dyn Fn() -> bool,
) -> Result<(), String> {
    while let Some(c) = st.pending.first() {
        if asked() {
            break;
        }
        let rows = match rows_apart(cfg, c) {
            Ok(rows) => rows,
            Err(e) => {
                if !st.worker_failed {
                    log(&format!(
                        "clickhouse: {e}; episodes are diagnosed in the recorder's own memory"
                    ));
                    st.worker_failed = true;
                }
                episode_rows(&cfg.dir, &cfg.host, c)
            }
        };
        for s in &rows.said {
            log(&format!("clickhouse: {s}"));
        }
        if !rows.findings.is_empty() {
            engine.run(
                &format!("INSERT INTO {FINDINGS} FORMAT JSONEachRow"),
                rows.findings.as_bytes(),
            )?;
        }
        if !rows.stacks.is_empty() {
            engine.run(
                &format!("INSERT INTO {STACKS} FORMAT JSONEachRow"),
                rows.stacks.as_bytes(),
            )?;
        }
        st.pending.remove(0);
        save_pending(&cfg.dir, &cfg.url, &st.pending).map_err(|e| {
            format!(
                "cannot save the episodes to diagnose in {}: {e}",
                cfg.dir.display()
            )
        })?;
    }
    Ok(())
}

/// The argument that makes the jitterscope binary the worker that reads one closed episode:
/// `jitterscope __clickhouse-episode <store> <host> <episode as JSON>` prints its
/// [`EpisodeRows`] as one JSON document.
pub const WORKER_ARG: &str = "__clickhouse-episode";

/// What the worker found for one closed episode.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct EpisodeRows {
    /// Rows of the findings table (`JSONEachRow`).
    pub findings: String,
    /// Rows of the stacks table.
    pub stacks: String,
    /// What went wrong, for the recorder's log (a diagnosis or a stack read that failed is
    /// not a reason to hold the other episodes back).
    pub said: Vec<String>,
}

/// Diagnoses the closed episode `c` from the store at `dir` (over it and [`MARGIN_NS`] either
/// side) and names its stacks, in this process.
pub fn episode_rows(dir: &std::path::Path, host: &str, c: &Closed) -> EpisodeRows {
    let m = c.mark();
    let mut out = EpisodeRows::default();
    match jitterscope_diagnose::diagnose(
        dir,
        m.from_ns - MARGIN_NS,
        m.to_ns + MARGIN_NS,
        jitterscope_diagnose::Options::default(),
    ) {
        Ok(report) => {
            for (i, f) in report.findings.iter().enumerate() {
                out.findings.push_str(&finding_row(host, &m, i, f));
                out.findings.push('\n');
            }
        }
        Err(e) => out.said.push(format!(
            "cannot diagnose the {} episode on {}: {e:#}",
            m.kind, m.series
        )),
    }
    match stack_rows(dir, host, &m) {
        Ok(rows) => out.stacks = rows,
        Err(e) => out.said.push(format!(
            "cannot read the stacks of the {} episode on {}: {e}",
            m.kind, m.series
        )),
    }
    out
}

/// [`episode_rows`] in a worker process: this binary again, with [`WORKER_ARG`]. The
/// recorder's memory is locked (mlockall), and glibc cannot give locked memory back
/// (`MADV_DONTNEED` fails on it), so every megabyte a diagnosis or the naming of a busy host's
/// stacks once took in the recorder stayed resident for good: its RSS rose by tens of MB at
/// episode closes, up to 260 MB over ten minutes of a busy host (issue 44). The worker's
/// memory is not locked and goes when it exits; it runs at this thread's nice 10.
fn rows_apart(cfg: &Config, c: &Closed) -> Result<EpisodeRows, String> {
    let episode = serde_json::to_string(c).map_err(|e| e.to_string())?;
    // The running binary, even when its file has been replaced since (an upgrade).
    let out = std::process::Command::new("/proc/self/exe")
        .arg(WORKER_ARG)
        .arg(&cfg.dir)
        .arg(&cfg.host)
        .arg(episode)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|e| format!("cannot start the episode worker: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "the episode worker failed ({}): {}",
            out.status,
            err.lines().next().unwrap_or("").trim()
        ));
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("the episode worker answered what it should not: {e}"))
}

/// The worker's body (`jitterscope __clickhouse-episode …`); its exit code.
pub fn worker_main(args: &[String]) -> i32 {
    let [dir, host, episode] = args else {
        eprintln!("usage: jitterscope {WORKER_ARG} <store> <host> <episode as JSON>");
        return 2;
    };
    // Started by the recorder, it inherited its OOM shield: a worker is what should go first.
    let _ = std::fs::write("/proc/self/oom_score_adj", "0");
    let c: Closed = match serde_json::from_str(episode) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{WORKER_ARG}: {episode:?}: {e}");
            return 2;
        }
    };
    let rows = episode_rows(std::path::Path::new(dir), host, &c);
    match serde_json::to_writer(std::io::stdout().lock(), &rows) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{WORKER_ARG}: {e}");
            1
        }
    }
}

/// A closed episode whose findings and stacks are still to be sent: what their rows and
/// their diagnosis need of it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Closed {
    /// Episode kind.
    pub kind: String,
    /// The series.
    pub series: String,
    /// Its first up sample.
    pub from_ns: i64,
    /// Where it ended (or was closed).
    pub to_ns: i64,
}

impl Closed {
    fn of(m: &Mark) -> Closed {
        Closed {
            kind: m.kind.clone(),
            series: m.series.clone(),
            from_ns: m.from_ns,
            to_ns: m.to_ns,
        }
    }

    /// Its close mark (the rows of findings and stacks read only the episode's identity and
    /// its bounds).
    fn mark(&self) -> Mark {
        Mark {
            kind: self.kind.clone(),
            series: self.series.clone(),
            state: MarkState::End,
            from_ns: self.from_ns,
            to_ns: self.to_ns,
            peak: 0.0,
            baseline: 0.0,
            threshold: 0.0,
        }
    }
}

/// The list file: per receiver URL, as the cursor file is, so a run against another engine
/// leaves the others' lists alone.
#[derive(Default, serde::Serialize, serde::Deserialize)]
struct PendingFile {
    receivers: std::collections::BTreeMap<String, Vec<Closed>>,
}

fn load_pending_file(dir: &std::path::Path) -> PendingFile {
    std::fs::read(dir.join(PENDING))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// The closed episodes of the receiver `url` names still to be diagnosed, oldest first; none
/// when the file is missing or unreadable. Keyed as the cursor is, by the URL's identity.
pub fn load_pending(dir: &std::path::Path, url: &str) -> Vec<Closed> {
    load_pending_file(dir)
        .receivers
        .remove(&crate::url::identity(url))
        .unwrap_or_default()
}

/// Sets the list of `url` to `list`, durably (0600, as the cursor).
fn save_pending(dir: &std::path::Path, url: &str, list: &[Closed]) -> std::io::Result<()> {
    let id = crate::url::identity(url);
    let mut all = load_pending_file(dir);
    if list.is_empty() {
        if all.receivers.remove(&id).is_none() {
            return Ok(());
        }
    } else {
        all.receivers.insert(id, list.to_vec());
    }
    crate::cursor::write_private(dir, PENDING, &serde_json::to_vec(&all)?)
}

/// Puts `closed` on the list (an episode already there keeps its place and takes the later
/// end) and saves it.
fn add_pending(
    cfg: &Config,
    log: &Log,
    pending: &mut Vec<Closed>,
    closed: impl IntoIterator<Item = Closed>,
) -> Result<(), String> {
    for c in closed {
        match pending.iter_mut().find(|p| {
            (p.from_ns, p.kind.as_str(), p.series.as_str())
                == (c.from_ns, c.kind.as_str(), c.series.as_str())
        }) {
            Some(p) => p.to_ns = p.to_ns.max(c.to_ns),
            None => pending.push(c),
        }
    }
    if pending.len() > MAX_PENDING {
        let dropped = pending.len() - MAX_PENDING;
        pending.drain(..dropped);
        log(&format!(
            "clickhouse: {dropped} closed episodes go without their findings and stacks: more than {MAX_PENDING} waited for them"
        ));
    }
    save_pending(&cfg.dir, &cfg.url, pending).map_err(|e| {
        format!(
            "cannot save the episodes to diagnose in {}: {e}",
            cfg.dir.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_civil() {
        assert_eq!(civil_day(0), "1970-01-01");
        assert_eq!(civil_day(1_764_201_600 * 1_000_000_000), "2025-11-27");
        assert_eq!(civil_day(951_782_400 * 1_000_000_000), "2000-02-29");
        assert_eq!(civil_day(-86_400 * 1_000_000_000), "1969-12-31");
    }

    #[test]
    fn a_close_outranks_its_open() {
        let mut m = Mark {
            kind: "cpu.throttle".into(),
            series: "cgroup./a.cpu.throttled_pct".into(),
            state: MarkState::Start,
            from_ns: 10,
            to_ns: 10,
            peak: f64::NAN,
            baseline: 0.0,
            threshold: 5.0,
        };
        let open: serde_json::Value = serde_json::from_str(&row("h", &m)).unwrap();
        m.state = MarkState::End;
        let close: serde_json::Value = serde_json::from_str(&row("h", &m)).unwrap();
        assert!(close["version"].as_u64() > open["version"].as_u64());
        assert_eq!(open["open"], 1);
        assert_eq!(open["peak"], 0.0, "NaN is not JSON");
    }

    #[test]
    fn urls_that_cannot_work_are_refused() {
        for bad in ["ftp://x/", "localhost:8123", ""] {
            assert!(
                Engine::new(bad, None, Duration::from_secs(1)).is_err(),
                "{bad}"
            );
        }
        assert!(Engine::new("http://127.0.0.1:8123/", None, Duration::from_secs(1)).is_ok());
    }
}
