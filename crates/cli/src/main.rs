//! `jitterscope`: the command-line front end. A thin layer over the model and the store.

#[macro_use]
mod pipe;

mod config;
mod confine;
mod diagnose;
mod dump;
mod events;
mod flame;
mod fleet;
mod jsonout;
mod lab;
mod logline;
mod manual;
mod memleak;
mod nodata;
mod prio;
mod record;
mod remote_write;
mod report;
mod serve;
mod service;
mod status;
mod stop_signals;
mod store;
mod timearg;
mod tracers;
mod view;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// `jitterscope --version`: the crate's version and the source revision it was built from.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("JITTERSCOPE_REVISION"),
    ")"
);

/// Where the store lives unless `--dir` or `JITTERSCOPE_DIR` says otherwise.
pub const DEFAULT_DIR: &str = "/var/lib/jitterscope";

/// The exit statuses, as `--help` and the man page give them (the README has the same table).
const EXIT_STATUS: &str = "Exit status: 0 done; 1 error (one line on stderr); 2 usage (a bad flag, or a bad value from a flag, a JITTERSCOPE_* variable or the configuration file); 3 no data in the window (dump, diagnose, events, flame, top-functions), or no stack samples in it; 141 the reader of stdout went away; 128+N stopped by signal N. `store check`: 0 clean, 1 damaged, 2 could not check.";

#[derive(Parser)]
#[command(
    name = "jitterscope",
    version = VERSION,
    about = "Flight recorder and root-cause engine for latency jitter on Linux hosts and containers",
    after_long_help = EXIT_STATUS
)]
struct Cli {
    /// Configuration file for record and serve [default: $JITTERSCOPE_CONFIG or
    /// /etc/jitterscope/jitterscope.toml, if it exists].
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Record system, cgroup and process samples into the store until stopped.
    Record(record::RecordArgs),
    /// Print recorded metrics for a time range (CSV, JSON lines or OpenMetrics), or list them.
    /// The range: --since, --from, --to [default: the last 10 minutes].
    Dump(dump::DumpArgs),
    /// List the BPF tracers; with --check, load each on this kernel and say which work and why not.
    Tracers(tracers::TracersArgs),
    /// The stack samples of a past window as a flame graph (SVG), folded stacks or pprof.
    /// The window: --since, --from, --to [default: the last minute].
    Flame(flame::FlameArgs),
    /// The hottest kernel and user functions of a past window.
    /// The window: --since, --from, --to [default: the last minute].
    TopFunctions(flame::TopArgs),
    /// List the jitter episodes of a recorded range (spikes over each signal's own baseline).
    /// The range: --since, --from, --to [default: the last hour].
    Events(events::EventsArgs),
    /// Name the kernel mechanism, culprit and fix behind a recorded window, with the evidence.
    /// The window: --since, --from, --to [default: the last 5 minutes], --at or --event.
    Diagnose(diagnose::DiagnoseArgs),
    /// An incident report of an episode or a window: one HTML file with the findings, cause
    /// chain, evidence charts and flame graphs, that opens offline. --event, or the window:
    /// --since, --from, --to [default: the last 5 minutes].
    Report(report::ReportArgs),
    /// Self-cleaning reproducers of the seed mechanisms: list, run, check (record + verify), cleanup.
    Lab(lab::LabArgs),
    /// Is a running process leaking, where (mappings, Python heap or native), and what piles up.
    Memleak(memleak::MemleakArgs),
    /// Live screen: CPU, load and run-queue latency, memory, reclaim, IPIs, PSI, disks,
    /// processes, cgroups, episodes and findings (follows a running recorder's store).
    Top(view::TopArgs),
    /// The same screen over the recorded past: step, jump between episodes, go to a time.
    Replay(view::ReplayArgs),
    /// Web UI (timelines, episodes, findings and flame graph of a dragged window), JSON API
    /// and Prometheus /metrics over the store; read-only, loopback unless given a token.
    Serve(serve::ServeArgs),
    /// Check the store for damage (every CRC of every segment and lane) and repair it.
    Store(store::StoreArgs),
    /// Across hosts: the episodes, findings and inventories recorders pushed to ClickHouse
    /// (record --clickhouse).
    Fleet(fleet::FleetArgs),
    /// Check the configuration file and print the effective configuration, or an example file.
    Config(config::ConfigArgs),
    /// Print a shell completion script: `jitterscope completions bash > /etc/bash_completion.d/jitterscope`.
    Completions(manual::CompletionsArgs),
    /// Write the man pages (one per command) into a directory.
    #[command(hide = true)]
    Manpages(manual::ManpagesArgs),
}

/// The store directory: `--dir`, else `$JITTERSCOPE_DIR`, else [`DEFAULT_DIR`].
pub fn store_dir(arg: Option<PathBuf>) -> PathBuf {
    arg.or_else(|| std::env::var_os("JITTERSCOPE_DIR").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR))
}

/// The store directory (as [`store_dir`]) for a command that reads it, with the range it reads:
/// fails in one line when the range is empty or there is no store.
pub fn existing_store(arg: Option<PathBuf>, from: i64, to: i64) -> anyhow::Result<PathBuf> {
    if from >= to {
        anyhow::bail!(
            "the range is empty: {} is not before {}",
            jitterscope_model::time::rfc3339(from),
            jitterscope_model::time::rfc3339(to)
        );
    }
    let dir = store_dir(arg);
    if !dir.is_dir() {
        anyhow::bail!(
            "no store at {} (record with `jitterscope record --dir {}`)",
            dir.display(),
            dir.display()
        );
    }
    Ok(dir)
}

fn main() -> ExitCode {
    // Arguments are OS strings: a path need not be UTF-8 (`std::env::args` would panic on
    // one), and clap refuses in one line a non-UTF-8 value where it wants text.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // The lab's workers are this binary too, started outside clap (see jitterscope_lab::worker),
    // and so are the ClickHouse pusher's episode workers; their arguments are ours.
    let worker_args = || -> Vec<String> {
        argv.iter()
            .skip(2)
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    };
    match argv.get(1).and_then(|a| a.to_str()) {
        Some(jitterscope_lab::worker::ARG) => {
            return ExitCode::from(jitterscope_lab::worker::main(&worker_args()) as u8);
        }
        Some(jitterscope_fleet::clickhouse::WORKER_ARG) => {
            return ExitCode::from(jitterscope_fleet::clickhouse::worker_main(&worker_args()) as u8);
        }
        _ => {}
    }
    let file = config::locate(&argv);
    // Every command stops on a file that is missing or does not check: the readers take the
    // store's directory from it, and one that ignored it would read another store.
    let (cmd, values) = match config::apply(Cli::command(), file.as_deref()) {
        Ok(x) => x,
        Err(e) => {
            logline::emit(logline::Level::Error, &format!("{e:#}"));
            return ExitCode::from(1);
        }
    };
    let matches = match cmd.clone().try_get_matches_from(&argv) {
        Ok(m) => m,
        Err(e) => match config::env_error(&cmd, &argv, &e) {
            Some(msg) => {
                logline::emit(logline::Level::Error, &msg);
                // clap's code for a usage error: the value is wrong, not the run.
                return ExitCode::from(2);
            }
            None => e.exit(),
        },
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    // Options given to record or serve that do nothing, said when they start.
    let ignored = match matches.subcommand() {
        Some((name, m)) if config::SECTIONS.contains(&name) => {
            config::ignored_notes(&cmd, name, m, file.as_deref(), &values)
        }
        _ => Vec::new(),
    };
    // Commands that only read and print end on a closed pipe as `cat` does (pipe.rs says why
    // the others do not).
    let cleans_up = matches!(
        cli.cmd,
        Cmd::Record(_) | Cmd::Serve(_) | Cmd::Lab(_) | Cmd::Store(_) | Cmd::Fleet(_)
    );
    if !cleans_up {
        pipe::die_on_closed_pipe();
    }
    let r = match cli.cmd {
        Cmd::Config(a) => config::run(a, cmd, file.as_deref(), &values),
        Cmd::Record(a) => record::run(a, &ignored),
        Cmd::Dump(a) => dump::run(a),
        Cmd::Tracers(a) => tracers::run(a),
        Cmd::Flame(a) => flame::run_flame(a),
        Cmd::TopFunctions(a) => flame::run_top(a),
        Cmd::Events(a) => events::run(a),
        Cmd::Diagnose(a) => diagnose::run(a),
        Cmd::Report(a) => report::run(a),
        Cmd::Lab(a) => lab::run(a),
        Cmd::Memleak(a) => memleak::run(a),
        Cmd::Top(a) => view::run_top(a),
        Cmd::Replay(a) => view::run_replay(a),
        Cmd::Serve(a) => serve::run(a, &ignored),
        Cmd::Fleet(a) => fleet::run(a),
        Cmd::Completions(a) => manual::completions(a),
        Cmd::Manpages(a) => manual::manpages(a),
        // Its exit status is its answer (clean, damaged, could not check).
        Cmd::Store(a) => {
            let status = store::run(a);
            return if pipe::closed() {
                ExitCode::from(pipe::STATUS)
            } else {
                status
            };
        }
    };
    match r {
        // Its reader went away (`| head`): quietly, with the status SIGPIPE would give.
        Ok(()) if pipe::closed() => ExitCode::from(pipe::STATUS),
        Err(e) if pipe::closed() || pipe::is_closed_pipe(&e) => {
            if !pipe::is_closed_pipe(&e) {
                logline::emit(logline::Level::Error, &format!("{e:#}"));
            }
            ExitCode::from(pipe::STATUS)
        }
        Ok(()) => match pipe::failed() {
            Some(why) => {
                logline::emit(
                    logline::Level::Error,
                    &format!("cannot write the output: {why}"),
                );
                ExitCode::from(1)
            }
            None => ExitCode::SUCCESS,
        },
        Err(e) if e.downcast_ref::<nodata::NoData>().is_some() => {
            logline::emit(logline::Level::Error, &e.to_string());
            ExitCode::from(nodata::STATUS)
        }
        Err(e) => {
            // One line, no backtrace: the chain of causes joined.
            let mut msg = e.to_string();
            for cause in e.chain().skip(1) {
                // Errors that already print their source would otherwise say it twice.
                let c = cause.to_string();
                if !msg.ends_with(&c) {
                    msg.push_str(": ");
                    msg.push_str(&c);
                }
            }
            logline::emit(logline::Level::Error, &msg);
            ExitCode::from(1)
        }
    }
}
