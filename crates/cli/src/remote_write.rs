//! `record`'s remote-write options and the sender they start (`jitterscope_fleet::remote_write`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use jitterscope_fleet::remote_write::{Auth, Choice, Config, Level, Sender, Target};
use jitterscope_model::glob::Pattern;

use crate::timearg::parse_duration;

/// Options of `record` for Prometheus remote write.
#[derive(Args, Debug, Clone)]
pub struct RemoteWriteArgs {
    /// Send every sample to this Prometheus remote-write receiver as it is recorded
    /// (Prometheus with --web.enable-remote-write-receiver: http://HOST:9090/api/v1/write;
    /// VictoriaMetrics: http://HOST:8428/api/v1/write; Mimir, Thanos, Cortex). The store is
    /// the write-ahead log: an outage is backfilled from it when the receiver answers again.
    /// Repeat for several receivers: each has its own sender, queue and cursor, so one that is
    /// down or slow holds back no other, and its own credentials and CA file (those options
    /// are then given once for all, or once per receiver in this order).
    #[arg(long, value_name = "URL")]
    pub remote_write: Vec<String>,
    /// A label added to every series sent (to every receiver), NAME=VALUE; repeat for more.
    #[arg(long, value_name = "NAME=VALUE", value_parser = parse_label)]
    pub remote_write_label: Vec<(String, String)>,
    /// A header sent with every request to every receiver, 'NAME: VALUE' (a tenant:
    /// 'X-Scope-OrgID: team-a' for Mimir and Cortex); repeat for more. Not for credentials, which have their own options.
    #[arg(long, value_name = "NAME: VALUE", value_parser = parse_header)]
    pub remote_write_header: Vec<(String, String)>,
    /// Series to send, as `dump --select` globs (repeat for more) [default: every host series,
    /// every cgroup's CPU, throttling, memory, I/O and pressure, and the top processes].
    #[arg(long, value_name = "GLOB")]
    pub remote_write_select: Vec<String>,
    /// Processes sent: this many busiest by CPU plus this many largest by RSS, each from its
    /// second second in the top until a minute after it left (at most 4 x N at once).
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub remote_write_top: usize,
    /// How long points may wait to go out together while the sender keeps up (a request at
    /// most this often; the store catches up at once after an outage).
    #[arg(long, default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub remote_write_flush: Duration,
    /// A file whose content is the bearer token to send (`Authorization: Bearer`). With
    /// several receivers: once for all, or once per receiver ('' for none).
    #[arg(long, value_name = "FILE")]
    pub remote_write_bearer_token_file: Vec<String>,
    /// User name for HTTP basic authentication (with --remote-write-password-file). With
    /// several receivers: once for all, or once per receiver ('' for none).
    #[arg(long, value_name = "USER")]
    pub remote_write_user: Vec<String>,
    /// A file whose content is the basic-authentication password. With several receivers:
    /// once for all, or once per receiver ('' for none).
    #[arg(long, value_name = "FILE")]
    pub remote_write_password_file: Vec<String>,
    /// PEM file of the CA certificates that sign the receiver's TLS certificate [default: the
    /// Mozilla roots built in]. With several receivers: once for all, or once per receiver
    /// ('' for the built-in roots).
    #[arg(long, value_name = "FILE")]
    pub remote_write_ca_file: Vec<String>,
    /// Push each episode, as it opens and as it closes, to ClickHouse's HTTP interface
    /// (http://HOST:8123/; `?database=NAME` for another database than default), into the
    /// table jitterscope_episodes, which it creates. The store is the write-ahead log, as for
    /// remote write. `jitterscope fleet episodes` queries it across hosts.
    #[arg(long, value_name = "URL")]
    pub clickhouse: Option<String>,
    /// How long ClickHouse keeps episodes (whole days).
    #[arg(long, default_value = "30d", value_parser = parse_duration, value_name = "DURATION")]
    pub clickhouse_retain: Duration,
    /// ClickHouse user (with --clickhouse-password-file) [default: ClickHouse's default user].
    #[arg(long, value_name = "USER", requires = "clickhouse_password_file")]
    pub clickhouse_user: Option<String>,
    /// A file whose content is the ClickHouse user's password.
    #[arg(long, value_name = "FILE", requires = "clickhouse_user")]
    pub clickhouse_password_file: Option<PathBuf>,
    /// How often the host inventory is taken for ClickHouse (kernel, cgroup layout, and each
    /// process's libraries with versions, allocator and NSS settings, container); it is pushed
    /// at start and whenever it changed, into jitterscope_hosts and jitterscope_inventory
    /// (`jitterscope fleet inventory` queries them). A process is counted once it has lived
    /// 10 s or one interval, whichever is shorter. 0s: no inventory.
    #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub clickhouse_inventory_every: Duration,
}

fn parse_label(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("{s}: give NAME=VALUE"))?;
    let ok = k
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !k.starts_with("__");
    if !ok {
        return Err(format!(
            "{k}: not a label name (letters, digits and _, not starting with a digit or __)"
        ));
    }
    Ok((k.to_string(), v.to_string()))
}

/// Headers the sender sets itself (the protocol's, and credentials, which come from files so
/// that they are not on a command line).
const OWN_HEADERS: &[&str] = &[
    "authorization",
    "content-encoding",
    "content-length",
    "content-type",
    "host",
    "transfer-encoding",
    "user-agent",
    "x-prometheus-remote-write-version",
];

fn parse_header(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: give 'NAME: VALUE'"))?;
    let (k, v) = (k.trim(), v.trim());
    // RFC 9110 token characters.
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if k.is_empty() || !k.chars().all(token) {
        return Err(format!("{k:?}: not a header name (letters, digits and -)"));
    }
    if OWN_HEADERS.contains(&k.to_ascii_lowercase().as_str()) {
        return Err(format!(
            "{k}: the sender sets it itself{}",
            if k.eq_ignore_ascii_case("authorization") {
                format!(" (credentials: {RW_CREDENTIALS})")
            } else {
                String::new()
            }
        ));
    }
    if v.is_empty()
        || !v
            .chars()
            .all(|c| c == ' ' || c == '\t' || c.is_ascii_graphic())
    {
        return Err(format!(
            "{k}: the value must be printable ASCII, and not empty"
        ));
    }
    Ok((k.to_string(), v.to_string()))
}

/// Where remote write's credentials go instead of its URL.
const RW_CREDENTIALS: &str =
    "--remote-write-user and --remote-write-password-file, or --remote-write-bearer-token-file";
/// Where ClickHouse's credentials go instead of its URL.
const CH_CREDENTIALS: &str = "--clickhouse-user and --clickhouse-password-file";

/// A ClickHouse URL that can work and carries no credentials (`serve`, `fleet`, and
/// `config check` for `record`).
pub fn check_clickhouse_url(url: &str) -> Result<()> {
    jitterscope_fleet::url::check(url, "--clickhouse", CH_CREDENTIALS).map_err(anyhow::Error::msg)
}

/// Whether an exporter's URL carries credentials, which the recorder never uses: said once,
/// without the secret, and the recorder records without that exporter.
fn carries_credentials(url: &str, flag: &str, instead: &str, who: &str, so: &str) -> bool {
    match jitterscope_fleet::url::check_credentials(url, flag, instead) {
        Ok(()) => false,
        Err(e) => {
            crate::logline::emit(
                crate::logline::Level::Warn,
                &format!("{who}: {e}; {so} (recording goes on)"),
            );
            true
        }
    }
}

/// A user and a password file go together.
pub fn pair<A, B>(user: &Option<A>, file: &Option<B>, u: &str, f: &str) -> Result<()> {
    match (user.is_some(), file.is_some()) {
        (true, false) => bail!("{u} needs {f}"),
        (false, true) => bail!("{f} needs {u}"),
        _ => Ok(()),
    }
}

/// A secret from a file: its content less surrounding white space (a trailing newline, or
/// `\r\n` from an editor, would make an invalid header).
pub fn secret(path: &Path, what: &str) -> Result<String> {
    let bytes = read_regular_file(path, 64 * 1024)
        .with_context(|| format!("{what} {}: cannot read", path.display()))?;
    let s = String::from_utf8(bytes)
        .map_err(|_| anyhow::anyhow!("{what} {} is not UTF-8 text", path.display()))?;
    let s = s.trim();
    if s.is_empty() {
        bail!("{what} {} is empty", path.display());
    }
    Ok(s.to_string())
}

/// Up to `max + 1` bytes of the regular file at `path` (symbolic links followed: a Kubernetes
/// secret's files are links). A FIFO, a device or a directory is refused at once: opened
/// without blocking and checked, so a FIFO given as a credentials file cannot hang the start.
pub fn read_regular_file(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut buf = Vec::new();
    f.take(max + 1).read_to_end(&mut buf)?;
    Ok(buf)
}

impl RemoteWriteArgs {
    /// Checks what can be checked before recording starts. The URL itself is not: a URL
    /// that cannot work is said once when recording starts, and recording goes on.
    pub fn validate(&self) -> Result<()> {
        if self
            .remote_write_select
            .iter()
            .any(|g| g.is_empty() || g.contains(char::is_whitespace))
        {
            bail!("--remote-write-select takes series globs such as 'cgroup.*.cpu.throttled_pct'");
        }
        if self.remote_write_flush > Duration::from_secs(60) {
            bail!("--remote-write-flush is at most 60s");
        }
        if self.clickhouse_retain < Duration::from_secs(86_400) {
            bail!("--clickhouse-retain is at least 1d (ClickHouse keeps episodes by the day)");
        }
        let every = self.clickhouse_inventory_every;
        if !every.is_zero() && every < Duration::from_secs(1) {
            bail!("--clickhouse-inventory-every is at least 1s (or 0s: no inventory)");
        }
        self.targets()?;
        pair(
            &self.clickhouse_user,
            &self.clickhouse_password_file,
            "--clickhouse-user",
            "--clickhouse-password-file",
        )
    }

    /// URLs that cannot work or that carry credentials. `config check` refuses them; the
    /// recorder records without the exporter they name (a typo in a unit file must not leave
    /// the host without its recorder) and says why once.
    pub fn url_problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        for u in &self.remote_write {
            if let Err(e) = jitterscope_fleet::url::check(u, "--remote-write", RW_CREDENTIALS) {
                out.push(e);
            }
        }
        if let Some(u) = &self.clickhouse {
            if let Err(e) = check_clickhouse_url(u) {
                out.push(format!("{e:#}"));
            }
        }
        out
    }

    /// Whether anything is sent off the host (the recorder then needs IP sockets).
    pub fn exports(&self) -> bool {
        !self.remote_write.is_empty() || self.clickhouse.is_some()
    }

    /// Starts the episode pusher when `--clickhouse` is given; `host`: the `host` column.
    pub fn start_clickhouse(
        &self,
        dir: &Path,
        host: &str,
    ) -> Result<Option<jitterscope_fleet::clickhouse::Pusher>> {
        let Some(url) = &self.clickhouse else {
            return Ok(None);
        };
        if carries_credentials(
            url,
            "--clickhouse",
            CH_CREDENTIALS,
            "clickhouse",
            "episodes are not pushed",
        ) {
            return Ok(None);
        }
        let user = match (&self.clickhouse_user, &self.clickhouse_password_file) {
            (Some(u), Some(f)) => Some((u.clone(), secret(f, "--clickhouse-password-file")?)),
            _ => None,
        };
        let cfg = jitterscope_fleet::clickhouse::Config {
            url: url.clone(),
            host: host.to_string(),
            retain_days: (self.clickhouse_retain.as_secs() / 86_400).max(1) as u32,
            dir: dir.to_path_buf(),
            flush: Duration::from_secs(5),
            user,
            inventory_every: (!self.clickhouse_inventory_every.is_zero())
                .then_some(self.clickhouse_inventory_every),
            inventory_min_age: self
                .clickhouse_inventory_every
                .min(jitterscope_fleet::inventory::MIN_AGE),
            version: crate::VERSION.to_string(),
        };
        let log = Box::new(|msg: &str| crate::logline::emit(crate::logline::Level::Warn, msg));
        // A URL that cannot work is said once and recording goes on, as for remote write: a
        // typo in a unit file must not leave the host without its recorder.
        let p = match jitterscope_fleet::clickhouse::Pusher::start(cfg, log) {
            Ok(p) => p,
            Err(e) => {
                crate::logline::emit(
                    crate::logline::Level::Warn,
                    &format!("clickhouse: {e}; episodes are not pushed"),
                );
                return Ok(None);
            }
        };
        crate::logline::emit(
            crate::logline::Level::Info,
            &format!("clickhouse: pushing episodes to {url}"),
        );
        Ok(Some(p))
    }

    /// Each receiver with its own credentials and CA file, as the per-receiver options give
    /// them: none, one for all, or one per receiver in the order of `--remote-write` ('' for
    /// none). The files are not read here.
    fn targets(&self) -> Result<Vec<TargetArgs<'_>>> {
        let n = self.remote_write.len();
        let bearer = per_target(
            &self.remote_write_bearer_token_file,
            n,
            "--remote-write-bearer-token-file",
        )?;
        let user = per_target(&self.remote_write_user, n, "--remote-write-user")?;
        let password = per_target(
            &self.remote_write_password_file,
            n,
            "--remote-write-password-file",
        )?;
        let ca = per_target(&self.remote_write_ca_file, n, "--remote-write-ca-file")?;
        let mut out: Vec<TargetArgs> = Vec::with_capacity(n);
        for (i, url) in self.remote_write.iter().enumerate() {
            let which = if n > 1 {
                format!(" (receiver {} of {n}, {url})", i + 1)
            } else {
                String::new()
            };
            if bearer[i].is_some() && user[i].is_some() {
                bail!("--remote-write-bearer-token-file cannot be used with --remote-write-user{which}: give one kind of authentication");
            }
            match (user[i], password[i]) {
                (Some(_), None) => {
                    bail!("--remote-write-user needs --remote-write-password-file{which}")
                }
                (None, Some(_)) => {
                    bail!("--remote-write-password-file needs --remote-write-user{which}")
                }
                _ => {}
            }
            let id = jitterscope_fleet::url::identity(url);
            if let Some(j) = out
                .iter()
                .position(|t| jitterscope_fleet::url::identity(t.url) == id)
            {
                bail!(
                    "--remote-write {url} names receiver {} again: each receiver once (one cursor each)",
                    j + 1
                );
            }
            out.push(TargetArgs {
                url,
                bearer: bearer[i],
                user: user[i].zip(password[i]),
                ca: ca[i],
            });
        }
        Ok(out)
    }

    /// Starts a sender for each `--remote-write` receiver; `host`: the `host` label. The
    /// credentials files are read here: a missing one is an error at start, not a silent
    /// anonymous sender. A receiver whose URL carries credentials is said and left out; the
    /// others are sent to.
    pub fn start(&self, dir: &Path, host: &str, start_ns: i64) -> Result<Vec<Sender>> {
        let mut senders = Vec::new();
        for t in self.targets()? {
            let url = t.url;
            if carries_credentials(
                url,
                "--remote-write",
                RW_CREDENTIALS,
                "remote write",
                &format!(
                    "nothing is sent to {}",
                    jitterscope_fleet::url::identity(url)
                ),
            ) {
                continue;
            }
            let auth = match (t.bearer, t.user) {
                (Some(f), _) => {
                    Auth::Bearer(secret(Path::new(f), "--remote-write-bearer-token-file")?)
                }
                (None, Some((user, f))) => Auth::Basic {
                    user: user.to_string(),
                    password: secret(Path::new(f), "--remote-write-password-file")?,
                },
                (None, None) => Auth::None,
            };
            let mut labels = vec![("host".to_string(), host.to_string())];
            for (k, v) in &self.remote_write_label {
                labels.retain(|(q, _)| q != k);
                labels.push((k.clone(), v.clone()));
            }
            let choice = if self.remote_write_select.is_empty() {
                Choice::new(self.remote_write_top)
            } else {
                let globs: Vec<Pattern> = self
                    .remote_write_select
                    .iter()
                    .map(|g| Pattern::new(g))
                    .collect();
                Choice::globs(&globs, self.remote_write_top)
            };
            let cfg = Config {
                target: Target {
                    url: url.to_string(),
                    auth,
                    ca_file: t.ca.map(PathBuf::from),
                    timeout: Duration::from_secs(10),
                    headers: self.remote_write_header.clone(),
                },
                labels,
                build: vec![
                    ("version".into(), env!("CARGO_PKG_VERSION").into()),
                    ("revision".into(), env!("JITTERSCOPE_REVISION").into()),
                ],
                choice,
                flush: self.remote_write_flush,
                dir: dir.to_path_buf(),
                start_ns,
            };
            let log = Box::new(|level: Level, msg: &str| {
                let l = match level {
                    Level::Info => crate::logline::Level::Info,
                    Level::Warn => crate::logline::Level::Warn,
                };
                crate::logline::emit(l, msg);
            });
            let s = Sender::start(cfg, log).context("cannot start the remote-write thread")?;
            crate::logline::emit(
                crate::logline::Level::Info,
                &format!("remote write: sending to {url}"),
            );
            senders.push(s);
        }
        Ok(senders)
    }
}

/// One receiver's URL and the options that are its own.
#[derive(Debug, PartialEq)]
struct TargetArgs<'a> {
    url: &'a str,
    bearer: Option<&'a str>,
    /// The user and the password file.
    user: Option<(&'a str, &'a str)>,
    ca: Option<&'a str>,
}

/// A per-receiver option's value for each of `n` receivers: given never, none for any;
/// once, the same for all; once per receiver, each its own, in order ('' for none), as
/// vmagent's per-URL options go.
fn per_target<'a>(vals: &'a [String], n: usize, flag: &str) -> Result<Vec<Option<&'a str>>> {
    let one = |v: &'a String| (!v.is_empty()).then_some(v.as_str());
    match vals.len() {
        0 => Ok(vec![None; n]),
        1 => Ok(vec![one(&vals[0]); n]),
        k if k == n => Ok(vals.iter().map(one).collect()),
        k => bail!(
            "{flag} is given {k} times for {n} --remote-write receiver{}: give it once (for all) or once per receiver, in their order ('' for none)",
            if n == 1 { "" } else { "s" }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_checked_as_they_are_given() {
        assert_eq!(
            parse_header("X-Scope-OrgID: team-a").unwrap(),
            ("X-Scope-OrgID".to_string(), "team-a".to_string())
        );
        assert_eq!(
            parse_header("  AccountID :  42 ").unwrap(),
            ("AccountID".to_string(), "42".to_string())
        );
        for (bad, why) in [
            ("X-Scope-OrgID=team-a", "give 'NAME: VALUE'"),
            (
                "Authorization: Bearer x",
                "--remote-write-bearer-token-file",
            ),
            ("content-type: text/plain", "sets it itself"),
            ("X Tenant: a", "not a header name"),
            (": a", "not a header name"),
            ("X-Tenant:", "not empty"),
            ("X-Tenant: caf\u{e9}", "printable ASCII"),
            ("X-Tenant: a\r\nX-Evil: b", "printable ASCII"),
        ] {
            let e = parse_header(bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
            assert!(!e.contains('\n'), "{bad:?}: {e}");
        }
    }

    fn args(argv: &[&str]) -> RemoteWriteArgs {
        #[derive(clap::Parser)]
        struct P {
            #[command(flatten)]
            rw: RemoteWriteArgs,
        }
        use clap::Parser;
        P::try_parse_from(std::iter::once("t").chain(argv.iter().copied()))
            .unwrap()
            .rw
    }

    #[test]
    fn per_receiver_options_go_once_for_all_or_once_each_in_order() {
        let a = args(&[
            "--remote-write=http://prom:9090/api/v1/write",
            "--remote-write=https://mimir:443/api/v1/push",
            "--remote-write-user=",
            "--remote-write-user=team-a",
            "--remote-write-password-file=",
            "--remote-write-password-file=/etc/mimir.pw",
            "--remote-write-ca-file=/etc/ca.pem",
        ]);
        let t = a.targets().unwrap();
        assert_eq!(
            t,
            [
                TargetArgs {
                    url: "http://prom:9090/api/v1/write",
                    bearer: None,
                    user: None,
                    ca: Some("/etc/ca.pem"),
                },
                TargetArgs {
                    url: "https://mimir:443/api/v1/push",
                    bearer: None,
                    user: Some(("team-a", "/etc/mimir.pw")),
                    ca: Some("/etc/ca.pem"),
                },
            ]
        );
        // One receiver, as before.
        let a = args(&[
            "--remote-write=http://vm/api/v1/write",
            "--remote-write-bearer-token-file=/t",
        ]);
        assert_eq!(a.targets().unwrap()[0].bearer, Some("/t"));
        for (argv, why) in [
            (
                &[
                    "--remote-write=http://a/w",
                    "--remote-write=http://b/w",
                    "--remote-write=http://c/w",
                    "--remote-write-ca-file=/1",
                    "--remote-write-ca-file=/2",
                ][..],
                "--remote-write-ca-file is given 2 times for 3 --remote-write receivers",
            ),
            (
                &[
                    "--remote-write=http://a/w",
                    "--remote-write=http://b/w",
                    "--remote-write-user=u",
                    "--remote-write-password-file=",
                    "--remote-write-password-file=/p",
                ][..],
                "--remote-write-user needs --remote-write-password-file (receiver 1 of 2, http://a/w)",
            ),
            (
                &[
                    "--remote-write=http://a/w",
                    "--remote-write-user=u",
                    "--remote-write-password-file=/p",
                    "--remote-write-bearer-token-file=/t",
                ][..],
                "give one kind of authentication",
            ),
            (
                &["--remote-write=http://a:80/w", "--remote-write=http://a:80/w"][..],
                "names receiver 1 again",
            ),
        ] {
            let e = format!("{:#}", args(argv).validate().unwrap_err());
            assert!(e.contains(why), "{argv:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
