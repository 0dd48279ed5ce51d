//! `jitterscope serve`: the web UI, JSON API and Prometheus endpoint (crates/web).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::timearg::parse_duration;

/// Arguments of `serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on. Anything but loopback needs --auth-token-file or
    /// --public-metrics.
    #[arg(long, default_value = "127.0.0.1:9630")]
    listen: SocketAddr,
    /// Serve /metrics and /healthz to any client without a token, as node_exporter does, so
    /// that Prometheus scrapes them and a kubelet probes them on the pod's address; the web UI
    /// and the JSON API stay loopback-only (or need the token). With it, --listen may be any
    /// address without --auth-token-file.
    #[arg(long)]
    public_metrics: bool,
    /// Store directory [default: $JITTERSCOPE_DIR or /var/lib/jitterscope].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// File holding the token every request must carry (`Authorization: Bearer <token>`);
    /// at least 16 characters, surrounding whitespace ignored. Required to listen beyond
    /// loopback.
    #[arg(long)]
    auth_token_file: Option<PathBuf>,
    /// The ClickHouse that recorders push to (`record --clickhouse`): /fleet then shows the
    /// hosts' episodes, causes, inventory and a merged flame graph.
    #[arg(long, value_name = "URL")]
    clickhouse: Option<String>,
    /// ClickHouse user (with --clickhouse-password-file) [default: ClickHouse's default user].
    #[arg(long, value_name = "USER", requires = "clickhouse_password_file")]
    clickhouse_user: Option<String>,
    /// A file whose content is the ClickHouse user's password.
    #[arg(long, value_name = "FILE", requires = "clickhouse_user")]
    clickhouse_password_file: Option<PathBuf>,
    /// Where the fleet page finds a host's own web UI: a URL with {host} in it, which the
    /// fleet page replaces with the name the host's recorder sent (`https://{host}:9630`).
    /// Each host's longest episode then links to its page at that episode; a report built
    /// from ClickHouse is offered beside it (and alone without this), for a host out of
    /// reach.
    #[arg(long, value_name = "URL")]
    fleet_host_url: Option<String>,
    /// Processes exposed on /metrics: this many busiest by CPU plus this many largest by RSS,
    /// held a minute after they leave the top (the set `record --remote-write` sends).
    #[arg(long, default_value_t = 20)]
    metrics_top_processes: usize,
    /// /metrics and /healthz answer 503 when the newest sample is older than this (0: any
    /// age): a recorder that stopped must not look like a flat line.
    #[arg(long, default_value = "60s", value_parser = parse_zero_or_duration)]
    metrics_max_age: Duration,
}

fn parse_zero_or_duration(s: &str) -> Result<Duration, String> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    parse_duration(s)
}

/// Longest token file read. A token is one line; without a bound, `/dev/zero` or a log file
/// given by mistake is read until memory runs out and the server never starts.
const TOKEN_FILE_MAX: u64 = 4096;

fn read_token_file(p: &Path) -> Result<String> {
    let cannot = || format!("cannot read the token file {}", p.display());
    let buf = crate::remote_write::read_regular_file(p, TOKEN_FILE_MAX).with_context(cannot)?;
    if buf.len() as u64 > TOKEN_FILE_MAX {
        bail!(
            "the token file {} is longer than {TOKEN_FILE_MAX} bytes: it must hold only the token",
            p.display()
        );
    }
    String::from_utf8(buf)
        .map_err(|_| anyhow::anyhow!("the token file {} is not UTF-8 text", p.display()))
}

/// The checks on values that clap's parsers cannot make alone (the configuration file's
/// values go through them too, in `config check`).
pub fn validate(a: &ServeArgs) -> Result<()> {
    jitterscope_web::check_listen(a.listen, a.auth_token_file.is_some(), a.public_metrics)?;
    if let Some(u) = &a.clickhouse {
        crate::remote_write::check_clickhouse_url(u)?;
    }
    if let Some(u) = &a.fleet_host_url {
        check_host_url(u)?;
    }
    crate::remote_write::pair(
        &a.clickhouse_user,
        &a.clickhouse_password_file,
        "--clickhouse-user",
        "--clickhouse-password-file",
    )
}

/// A `--fleet-host-url` the page can use: http(s), with `{host}` in it, and no credentials
/// (the page shows it to whoever reads the fleet).
fn check_host_url(u: &str) -> Result<()> {
    let rest = u
        .strip_prefix("http://")
        .or_else(|| u.strip_prefix("https://"))
        .ok_or_else(|| {
            anyhow::anyhow!("--fleet-host-url {u:?} must start with http:// or https://")
        })?;
    if !u.contains("{host}") {
        bail!("--fleet-host-url {u:?} has no {{host}} for the host's name (https://{{host}}:9630)");
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        bail!("--fleet-host-url {u:?} holds credentials: the fleet page shows this URL to its readers");
    }
    if u.chars().any(|c| c.is_whitespace() || c.is_control()) {
        bail!("--fleet-host-url {u:?} holds a space or a control character");
    }
    Ok(())
}

/// Runs `serve`; `ignored`: the options given that do nothing, said first.
pub fn run(a: ServeArgs, ignored: &[String]) -> Result<()> {
    validate(&a)?;
    for n in ignored {
        crate::logline::emit(crate::logline::Level::Warn, n);
    }
    let token = match &a.auth_token_file {
        Some(p) => {
            let t = read_token_file(p)?;
            let t = t.trim().to_string();
            if t.is_empty() {
                bail!("the token file {} is empty", p.display());
            }
            Some(t)
        }
        None => None,
    };
    let clickhouse_user = match (&a.clickhouse_user, &a.clickhouse_password_file) {
        (Some(u), Some(f)) => Some((
            u.clone(),
            crate::remote_write::secret(f, "--clickhouse-password-file")?,
        )),
        _ => None,
    };
    let cfg = jitterscope_web::Config {
        listen: a.listen,
        dir: crate::store_dir(a.dir),
        token,
        top_processes: a.metrics_top_processes,
        metrics_max_age: a.metrics_max_age,
        build: vec![
            ("version".into(), env!("CARGO_PKG_VERSION").into()),
            ("revision".into(), env!("JITTERSCOPE_REVISION").into()),
        ],
        clickhouse: a.clickhouse,
        clickhouse_user,
        public_metrics: a.public_metrics,
        fleet_host_url: a.fleet_host_url,
    };
    crate::stop_signals::install();
    jitterscope_web::run(cfg, &crate::stop_signals::STOP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_url_needs_a_scheme_and_the_host_and_no_credentials() {
        assert!(check_host_url("https://{host}:9630").is_ok());
        assert!(check_host_url("http://{host}.example.net/jitterscope/").is_ok());
        for (bad, why) in [
            ("{host}:9630", "http://"),
            ("https://example.net:9630", "{host}"),
            ("https://u:p@{host}:9630", "credentials"),
            ("https://{host}:9630/a b", "space"),
        ] {
            let e = check_host_url(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
