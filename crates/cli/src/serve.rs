//! `jitterscope serve`: the web UI, JSON API and Prometheus endpoint (crates/web).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::timearg::parse_duration;

/// Arguments of `serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on. Anything but loopback needs --auth-token-file.
    #[arg(long, default_value = "127.0.0.1:9630")]
    listen: SocketAddr,
    /// Store directory [default: $JITTERSCOPE_DIR or /var/lib/jitterscope].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// File holding the token every request must carry (`Authorization: Bearer <token>`);
    /// at least 16 characters, surrounding whitespace ignored. Required to listen beyond
    /// loopback.
    #[arg(long)]
    auth_token_file: Option<PathBuf>,
    /// Processes exposed on /metrics: the busiest by CPU.
    #[arg(long, default_value_t = 20)]
    metrics_top_processes: usize,
    /// /metrics answers 503 when the newest sample is older than this (0: any age).
    #[arg(long, default_value = "60s", value_parser = parse_zero_or_duration)]
    metrics_max_age: Duration,
}

fn parse_zero_or_duration(s: &str) -> Result<Duration, String> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    parse_duration(s)
}

/// Runs `serve`.
pub fn run(a: ServeArgs) -> Result<()> {
    let token = match &a.auth_token_file {
        Some(p) => {
            let t = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read the token file {}", p.display()))?;
            let t = t.trim().to_string();
            if t.is_empty() {
                bail!("the token file {} is empty", p.display());
            }
            Some(t)
        }
        None => None,
    };
    let cfg = jitterscope_web::Config {
        listen: a.listen,
        dir: crate::store_dir(a.dir),
        token,
        top_processes: a.metrics_top_processes,
        metrics_max_age: a.metrics_max_age,
    };
    crate::signals::install();
    jitterscope_web::run(cfg, &crate::signals::STOP)
}
