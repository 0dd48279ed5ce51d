//! `jitterscope fleet`: questions across hosts, answered by the engines recorders push to.

use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use jitterscope_fleet::query::{Fleet, Span};

use crate::timearg::{parse_since, Window};

/// `jitterscope fleet`.
#[derive(Args, Debug)]
pub struct FleetArgs {
    #[command(subcommand)]
    cmd: FleetCmd,
}

#[derive(Subcommand, Debug)]
enum FleetCmd {
    /// Hosts ranked by their time in episode and their number of episodes, from the ClickHouse
    /// that `record --clickhouse` pushes to.
    Episodes(EpisodesArgs),
    /// Each host's diagnosed causes (the findings of its closed episodes) and their culprits,
    /// root causes first.
    Findings(FindingsArgs),
    /// Hosts and processes whose inventory (libraries and versions, allocator and NSS
    /// settings, worker recycling, container, kernel) meets every condition, from each
    /// host's newest inventory: `fleet inventory 'jemalloc~5.' jemalloc_dirty_decay_ms=0`,
    /// `fleet inventory softokn '!NSS_SDB_USE_CACHE'`.
    Inventory(InventoryArgs),
    /// The stacks sampled during the episodes of many hosts, merged into one flame graph
    /// (SVG, or folded stacks): `fleet flame --rule memory.tlb-shootdown --since 1h` is where
    /// the CPUs of every host with that finding were.
    Flame(FlameArgs),
}

#[derive(Args, Debug)]
struct FlameArgs {
    #[command(flatten)]
    ch: Engine,
    // The episodes that ended in --since/--from/--to (default: the last hour).
    #[command(flatten)]
    window: Window,
    /// Only episodes with a finding of this rule (`diagnose --list-rules`).
    #[arg(long, value_name = "RULE")]
    rule: Option<String>,
    /// Only episodes of this kind (`events --list-kinds`: `throttling`, `reclaim-stalls`...).
    #[arg(long, value_name = "KIND", value_parser = crate::events::marked_kind)]
    kind: Option<String>,
    /// Only this host.
    #[arg(long, value_name = "HOST")]
    host: Option<String>,
    /// Folded stacks (`comm;root;…;leaf count`, kernel frames `_[k]`) instead of SVG.
    #[arg(long)]
    folded: bool,
    /// Write to this file instead of standard output.
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<std::path::PathBuf>,
}

#[derive(Args, Debug)]
struct InventoryArgs {
    /// Conditions, all of which must hold: FIELD (present), !FIELD (absent), FIELD=VALUE,
    /// FIELD!=VALUE (absent matches), FIELD~PREFIX, FIELD<N (also <=, >, >=). Fields: comm,
    /// exe, cgroup, container, worker_server, worker_recycle, the libraries glibc, jemalloc,
    /// tcmalloc, mimalloc, softokn, python (value: the version), jemalloc_dirty_decay_ms,
    /// processes, the variables MALLOC_CONF, NSS_SDB_USE_CACHE, MALLOC_ARENA_MAX,
    /// GLIBC_TUNABLES, LD_PRELOAD..., and the host's host, kernel, os, cgroup_layout, cpus,
    /// memory_bytes. Without any: every host's summary.
    #[arg(value_name = "CONDITION")]
    conditions: Vec<String>,
    #[command(flatten)]
    ch: Engine,
    /// Hosts whose newest inventory was taken since then (a recorder sends it again every
    /// 6 h when nothing changed).
    #[arg(long, default_value = "1d", value_parser = parse_since, value_name = "DURATION")]
    since: Duration,
    /// Groups of processes shown.
    #[arg(long, default_value_t = 200, value_name = "N")]
    top: usize,
    /// One JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct FindingsArgs {
    #[command(flatten)]
    ch: Engine,
    // The episodes that ended in --since/--from/--to (default: the last day).
    #[command(flatten)]
    window: Window,
    /// Only this rule (`diagnose --list-rules`: `cpu.cfs-throttling`...).
    #[arg(long, value_name = "RULE")]
    rule: Option<String>,
    /// Rows shown.
    #[arg(long, default_value_t = 100, value_name = "N")]
    top: usize,
    /// One JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct EpisodesArgs {
    #[command(flatten)]
    ch: Engine,
    // The episodes going on at any time in --since/--from/--to (default: the last hour).
    #[command(flatten)]
    window: Window,
    /// Only episodes of this kind (`events --list-kinds`: `throttling`, `reclaim-stalls`...).
    #[arg(long, value_name = "KIND", value_parser = crate::events::marked_kind)]
    kind: Option<String>,
    /// Only episodes diagnosed with a finding of this rule (`diagnose --list-rules`).
    #[arg(long, value_name = "RULE")]
    rule: Option<String>,
    /// Only hosts whose newest inventory meets this condition (`fleet inventory`'s, such as
    /// `jemalloc~5.` or `kernel~6.1`); repeat it for more, all of which must hold.
    #[arg(long = "where", value_name = "CONDITION")]
    conditions: Vec<String>,
    /// Hosts shown, the worst first.
    #[arg(long, default_value_t = 50, value_name = "N")]
    top: usize,
    /// One JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs `jitterscope fleet`.
pub fn run(a: FleetArgs) -> Result<()> {
    match a.cmd {
        FleetCmd::Episodes(e) => episodes(e),
        FleetCmd::Findings(f) => findings(f),
        FleetCmd::Inventory(i) => inventory(i),
        FleetCmd::Flame(f) => flame(f),
    }
}

/// Where the fleet's ClickHouse is, and as whom to ask it.
#[derive(Args, Debug)]
struct Engine {
    /// ClickHouse's HTTP interface, as given to `record --clickhouse` (http://HOST:8123/).
    #[arg(long, value_name = "URL", env = "JITTERSCOPE_CLICKHOUSE")]
    clickhouse: String,
    /// ClickHouse user (with --clickhouse-password-file) [default: ClickHouse's default user].
    #[arg(long, value_name = "USER", requires = "clickhouse_password_file")]
    clickhouse_user: Option<String>,
    /// A file whose content is the ClickHouse user's password.
    #[arg(long, value_name = "FILE", requires = "clickhouse_user")]
    clickhouse_password_file: Option<std::path::PathBuf>,
}

/// The window of a question: `--from`/`--to`, or `--since` (default `default`) back from
/// `--to`.
fn window(w: &Window, default: Duration) -> Result<Span> {
    let (since_ns, now_ns) = w
        .resolve(default, chrono::Utc::now())
        .map_err(anyhow::Error::msg)?;
    if since_ns >= now_ns {
        bail!(
            "--from ({}) is not before --to ({})",
            jitterscope_model::time::rfc3339(since_ns),
            jitterscope_model::time::rfc3339(now_ns)
        );
    }
    Ok(Span { since_ns, now_ns })
}

/// The fleet's ClickHouse, and the window of a question.
fn fleet(e: &Engine, span: Span) -> Result<(Fleet, Span)> {
    crate::remote_write::check_clickhouse_url(&e.clickhouse)?;
    crate::remote_write::pair(
        &e.clickhouse_user,
        &e.clickhouse_password_file,
        "--clickhouse-user",
        "--clickhouse-password-file",
    )?;
    let user = match (&e.clickhouse_user, &e.clickhouse_password_file) {
        (Some(u), Some(f)) => Some((
            u.clone(),
            crate::remote_write::secret(f, "--clickhouse-password-file")?,
        )),
        _ => None,
    };
    Ok((
        Fleet::new(&e.clickhouse, user, Duration::from_secs(30))?,
        span,
    ))
}

fn findings(a: FindingsArgs) -> Result<()> {
    let (f, span) = fleet(&a.ch, window(&a.window, Duration::from_secs(86_400))?)?;
    let doc = f.findings(span, a.rule.as_deref(), a.top)?;
    if a.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&crate::jsonout::versioned_of(&doc)?)?
        );
        return Ok(());
    }
    let rows = doc["findings"].as_array().cloned().unwrap_or_default();
    let since = span.since_ns;
    if rows.is_empty() {
        outln!(
            "no findings since {}",
            jitterscope_model::time::rfc3339(since)
        );
        return Ok(());
    }
    let list = |v: &serde_json::Value| -> String {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    };
    outln!(
        "{:<20} {:<28} {:>8} {:>5}  CULPRITS",
        "HOST",
        "RULE",
        "EPISODES",
        "ROOT"
    );
    for r in &rows {
        let mut who = list(&r["culprits"]);
        for extra in [&r["containers"], &r["cgroups"], &r["libraries"]] {
            let e = list(extra);
            if !e.is_empty() {
                who = if who.is_empty() {
                    e
                } else {
                    format!("{who}; {e}")
                };
            }
        }
        outln!(
            "{:<20} {:<28} {:>8} {:>5}  {}",
            r["host"].as_str().unwrap_or(""),
            r["rule_id"].as_str().unwrap_or(""),
            r["episodes"].as_u64().unwrap_or(0),
            if r["root_cause"].as_u64() == Some(1) {
                "yes"
            } else {
                ""
            },
            who
        );
    }
    Ok(())
}

fn flame(a: FlameArgs) -> Result<()> {
    let (f, span) = fleet(&a.ch, window(&a.window, Duration::from_secs(3600))?)?;
    let since = span.since_ns;
    let now = span.now_ns;
    let merged = f.flame(
        span,
        a.rule.as_deref(),
        a.kind.as_deref(),
        a.host.as_deref(),
    )?;
    let what = [
        a.rule.as_deref().map(|r| format!("rule {r}")),
        a.kind.as_deref().map(|k| format!("kind {k}")),
        a.host.as_deref().map(|h| format!("host {h}")),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(", ");
    if merged.stacks.is_empty() {
        bail!(
            "no stacks of episodes{} since {} (recorders sample stacks unless --profile-hz 0; \
             only closed episodes send theirs)",
            if what.is_empty() {
                String::new()
            } else {
                format!(" ({what})")
            },
            jitterscope_model::time::rfc3339(since)
        );
    }
    let lines: Vec<String> = merged
        .stacks
        .iter()
        .map(|(stack, n)| format!("{stack} {n}"))
        .collect();
    let summary = format!(
        "{} samples from {} episodes on {} hosts{}",
        merged.samples,
        merged.episodes,
        merged.hosts,
        if what.is_empty() {
            String::new()
        } else {
            format!(" ({what})")
        }
    );
    let mut out: Box<dyn std::io::Write> = match &a.output {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p)
                .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", p.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let res = if a.folded {
        lines.iter().try_for_each(|l| writeln!(out, "{l}"))
    } else {
        let title = format!(
            "fleet {} – {}",
            jitterscope_model::time::rfc3339(since),
            jitterscope_model::time::rfc3339(now)
        );
        jitterscope_profile::window::svg_of_folded(&lines, &title, &summary, &mut out)
    };
    match res.and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
        r => r.map_err(|e| anyhow::anyhow!("cannot write the output: {e}"))?,
    }
    if let Some(p) = &a.output {
        errln!("jitterscope: wrote {} ({summary})", p.display());
    }
    Ok(())
}

fn inventory(a: InventoryArgs) -> Result<()> {
    let (f, span) = fleet(&a.ch, Span::last(a.since))?;
    let since = span.since_ns;
    let doc = f.inventory(span, &a.conditions, a.top)?;
    if a.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&crate::jsonout::versioned_of(&doc)?)?
        );
        return Ok(());
    }
    let list = |k: &str| doc[k].as_array().cloned().unwrap_or_default();
    let (matched, groups) = (list("hosts"), list("groups"));
    let about_processes = doc["about_processes"] == true;
    let processes = doc["processes"].as_u64().unwrap_or(0);
    if !about_processes {
        outln!(
            "{:<24} {:<16} {:<8} {:>5} {:>10} {:>9}  OS",
            "HOST",
            "KERNEL",
            "CGROUPS",
            "CPUS",
            "MEMORY",
            "PROCESSES"
        );
        for h in &matched {
            outln!(
                "{:<24} {:<16} {:<8} {:>5} {:>7.1} GiB {:>9}  {}",
                h["host"].as_str().unwrap_or(""),
                h["kernel"].as_str().unwrap_or(""),
                h["cgroup_layout"].as_str().unwrap_or(""),
                h["cpus"].as_u64().unwrap_or(0),
                h["memory_bytes"].as_f64().unwrap_or(0.0) / (1u64 << 30) as f64,
                h["processes"].as_u64().unwrap_or(0),
                h["os"].as_str().unwrap_or(""),
            );
        }
        outln!(
            "{} hosts with an inventory since {}",
            matched.len(),
            jitterscope_model::time::rfc3339(since)
        );
        return Ok(());
    }
    outln!(
        "{:<20} {:>5} {:<16} {:<28} {:<34} SETTINGS",
        "HOST",
        "PROCS",
        "COMM",
        "CONTAINER/CGROUP",
        "LIBRARIES"
    );
    for g in &groups {
        let s = |k: &str| g[k].as_str().unwrap_or("").to_string();
        let libs: Vec<String> = [
            "jemalloc", "tcmalloc", "mimalloc", "softokn", "python", "glibc",
        ]
        .iter()
        .filter_map(|l| {
            g[*l]
                .as_str()
                .map(|v| format!("{l} {v}").trim().to_string())
        })
        .collect();
        let mut settings: Vec<String> = g["env_keys"]
            .as_array()
            .into_iter()
            .flatten()
            .zip(g["env_values"].as_array().into_iter().flatten())
            .map(|(k, v)| format!("{}={}", k.as_str().unwrap_or(""), v.as_str().unwrap_or("")))
            .collect();
        if let Some(d) = g["jemalloc_dirty_decay_ms"].as_i64() {
            settings.push(format!("(dirty_decay_ms {d})"));
        }
        if !s("worker_server").is_empty() {
            let r = s("worker_recycle");
            settings.push(format!(
                "{} {}",
                s("worker_server"),
                if r.is_empty() {
                    "without recycling".to_string()
                } else {
                    r
                }
            ));
        }
        let place = if s("container").is_empty() {
            s("cgroup")
        } else {
            s("container")
        };
        // The end of a long cgroup path names it; its start is the same for many.
        let n = place.chars().count();
        let place = if n > 28 {
            format!("…{}", place.chars().skip(n - 27).collect::<String>())
        } else {
            place
        };
        outln!(
            "{:<20} {:>5} {:<16} {:<28} {:<34} {}",
            s("host"),
            g["processes"].as_u64().unwrap_or(0),
            s("comm"),
            place,
            libs.join(", "),
            settings.join(" ")
        );
    }
    outln!(
        "{processes} processes in {} groups on {} hosts match (of {} hosts with an inventory since {})",
        groups.len(),
        matched.len(),
        doc["hosts_with_inventory"].as_u64().unwrap_or(0),
        jitterscope_model::time::rfc3339(since)
    );
    Ok(())
}

fn episodes(a: EpisodesArgs) -> Result<()> {
    let (f, span) = fleet(&a.ch, window(&a.window, Duration::from_secs(3600))?)?;
    let doc = f.episodes(
        span,
        a.kind.as_deref(),
        a.rule.as_deref(),
        &a.conditions,
        a.top,
    )?;
    if a.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&crate::jsonout::versioned_of(&doc)?)?
        );
        return Ok(());
    }
    let rows = doc["hosts"].as_array().cloned().unwrap_or_default();
    let since = span.since_ns;
    if rows.is_empty() {
        outln!(
            "no episodes since {}{}",
            jitterscope_model::time::rfc3339(since),
            a.kind
                .as_deref()
                .map(|k| format!(" of kind {k}"))
                .unwrap_or_default()
        );
        return Ok(());
    }
    outln!(
        "{:<24} {:>8} {:>12} {:>5}  {:<34} KINDS",
        "HOST",
        "EPISODES",
        "IN EPISODE",
        "OPEN",
        "LONGEST"
    );
    for r in &rows {
        let kinds: Vec<&str> = r["kinds"]
            .as_array()
            .map(|k| k.iter().filter_map(|v| v.as_str()).collect())
            .unwrap_or_default();
        outln!(
            "{:<24} {:>8} {:>10.0} s {:>5}  {:<34} {}",
            r["host"].as_str().unwrap_or(""),
            r["episodes"].as_u64().unwrap_or(0),
            r["seconds"].as_f64().unwrap_or(0.0),
            r["open"].as_u64().unwrap_or(0),
            r["worst"]["id"].as_str().unwrap_or("-"),
            kinds.join(", ")
        );
    }
    Ok(())
}
