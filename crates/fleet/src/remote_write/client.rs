//! One remote-write POST and what its answer means for the sender: sent, try again later, or
//! never (the receiver refuses these points, or the configuration cannot work).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;

/// How the sender authenticates.
#[derive(Debug, Clone, Default)]
pub enum Auth {
    /// None.
    #[default]
    None,
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// HTTP basic authentication.
    Basic {
        /// User name.
        user: String,
        /// Password.
        password: String,
    },
}

/// Where and how to send.
#[derive(Debug, Clone)]
pub struct Target {
    /// The receiver's URL (`http://host:9090/api/v1/write`).
    pub url: String,
    /// Credentials.
    pub auth: Auth,
    /// PEM file of the CA certificates to trust instead of the built-in web roots.
    pub ca_file: Option<PathBuf>,
    /// Whole-request timeout.
    pub timeout: Duration,
    /// Headers sent with every request, such as a multi-tenant receiver's tenant
    /// (`X-Scope-OrgID` for Mimir and Cortex).
    pub headers: Vec<(String, String)>,
}

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The receiver took the points.
    Sent,
    /// Not now: the receiver is down, slow, overloaded (429) or failing (5xx). Keep the points
    /// and try again after a pause.
    Retry(String),
    /// Never: the receiver refused these points (4xx but 429: malformed, too old, wrong
    /// credentials) or the target cannot work. Count them as failed and go on.
    Reject(String),
}

/// A client for one target. Made once; a target that cannot work (bad scheme, unreadable CA
/// file) makes a client whose every attempt is that [`Outcome::Reject`], so the sender counts
/// the points and the recorder goes on.
pub struct Client {
    inner: Result<Inner, String>,
}

struct Inner {
    agent: ureq::Agent,
    url: String,
    auth: Option<String>,
    headers: Vec<(String, String)>,
}

impl Client {
    /// A client for `t`.
    pub fn new(t: &Target) -> Self {
        Client {
            inner: Inner::new(t),
        }
    }

    /// Why the target cannot work, if it cannot.
    pub fn broken(&self) -> Option<&str> {
        self.inner.as_ref().err().map(|s| s.as_str())
    }

    /// POSTs `body` (a snappy-compressed `WriteRequest`).
    pub fn send(&self, body: &[u8]) -> Outcome {
        match &self.inner {
            Ok(i) => i.send(body),
            Err(why) => Outcome::Reject(why.clone()),
        }
    }
}

impl Inner {
    fn new(t: &Target) -> Result<Inner, String> {
        let scheme = t.url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        match scheme.as_deref() {
            Some("http") | Some("https") => {}
            Some(s) => {
                return Err(format!(
                    "{}: scheme {s}:// is not supported: give an http:// or https:// URL",
                    t.url
                ))
            }
            None => {
                return Err(format!(
                    "{}: not a URL: give http://host:port/path (Prometheus: /api/v1/write)",
                    t.url
                ))
            }
        }
        if t.url.parse::<ureq::http::Uri>().is_err() {
            return Err(format!("{}: not a valid URL", t.url));
        }
        let mut tls = ureq::tls::TlsConfig::builder();
        if let Some(ca) = &t.ca_file {
            let pem = std::fs::read(ca)
                .map_err(|e| format!("CA file {}: cannot read: {e}", ca.display()))?;
            let certs: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(&pem)
                .filter_map(|item| match item {
                    Ok(ureq::tls::PemItem::Certificate(c)) => Some(c.to_owned()),
                    _ => None,
                })
                .collect();
            if certs.is_empty() {
                return Err(format!(
                    "CA file {}: no PEM certificate in it",
                    ca.display()
                ));
            }
            tls = tls.root_certs(ureq::tls::RootCerts::Specific(Arc::new(certs)));
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            // Statuses are answers to interpret, not errors.
            .http_status_as_error(false)
            .timeout_global(Some(t.timeout))
            .user_agent(concat!("jitterscope/", env!("CARGO_PKG_VERSION")))
            .tls_config(tls.build())
            .build()
            .into();
        let auth = match &t.auth {
            Auth::None => None,
            Auth::Bearer(tok) => Some(format!("Bearer {tok}")),
            Auth::Basic { user, password } => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
            )),
        };
        Ok(Inner {
            agent,
            url: t.url.clone(),
            auth,
            headers: t.headers.clone(),
        })
    }

    fn send(&self, body: &[u8]) -> Outcome {
        let mut req = self
            .agent
            .post(&self.url)
            .header("Content-Encoding", "snappy")
            .header("Content-Type", "application/x-protobuf")
            .header("X-Prometheus-Remote-Write-Version", "0.1.0");
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        if let Some(a) = &self.auth {
            req = req.header("Authorization", a);
        }
        let mut resp = match req.send(body) {
            Ok(r) => r,
            Err(e) => return Outcome::Retry(format!("{}: {e}", self.url)),
        };
        let status = resp.status().as_u16();
        if (200..300).contains(&status) {
            return Outcome::Sent;
        }
        // The receiver's reason, first line, bounded: Prometheus says which sample it refused.
        let text = resp
            .body_mut()
            .with_config()
            .limit(4096)
            .read_to_string()
            .unwrap_or_default();
        let reason = text.lines().next().unwrap_or("").trim();
        let what = if reason.is_empty() {
            format!("{}: HTTP {status}", self.url)
        } else {
            format!("{}: HTTP {status}: {reason}", self.url)
        };
        match status {
            429 | 500..=599 => Outcome::Retry(what),
            // A redirect or anything else unexpected is a configuration to fix, not a
            // condition that passes.
            _ => Outcome::Reject(what),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(url: &str) -> Target {
        Target {
            url: url.into(),
            auth: Auth::None,
            ca_file: None,
            timeout: Duration::from_secs(2),
            headers: Vec::new(),
        }
    }

    /// A tenant header reaches the receiver on every request, beside the protocol's own.
    #[test]
    fn extra_headers_go_with_each_request() {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/api/v1/write", l.local_addr().unwrap());
        let got = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            // The head, then the 1-byte body.
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut chunk).unwrap();
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            s.write_all(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
                .unwrap();
            String::from_utf8_lossy(&buf).to_ascii_lowercase()
        });
        let mut t = target(&url);
        t.headers = vec![("X-Scope-OrgID".into(), "team-a".into())];
        assert_eq!(Client::new(&t).send(b"x"), Outcome::Sent);
        let head = got.join().unwrap();
        assert!(head.contains("\r\nx-scope-orgid: team-a\r\n"), "{head}");
        assert!(head.contains("\r\ncontent-encoding: snappy\r\n"), "{head}");
    }

    #[test]
    fn a_target_that_cannot_work_says_why_in_one_line() {
        for (url, want) in [
            ("ftp://127.0.0.1/x", "scheme ftp:// is not supported"),
            ("127.0.0.1:9090/api/v1/write", "not a URL"),
            ("http://exa mple/", "not a valid URL"),
        ] {
            let c = Client::new(&target(url));
            let why = c.broken().unwrap_or_else(|| panic!("{url} accepted"));
            assert!(why.contains(want), "{url}: {why}");
            assert!(!why.contains('\n'));
            assert!(matches!(c.send(b"x"), Outcome::Reject(_)));
        }
        let mut t = target("https://127.0.0.1/");
        t.ca_file = Some("/nonexistent/ca.pem".into());
        assert!(Client::new(&t).broken().unwrap().contains("cannot read"));
        assert!(Client::new(&target("http://127.0.0.1:1/api/v1/write"))
            .broken()
            .is_none());
    }

    #[test]
    fn nothing_listening_is_worth_a_retry() {
        // Port 1 on loopback: nothing listens there, the connection is refused at once.
        let c = Client::new(&target("http://127.0.0.1:1/api/v1/write"));
        match c.send(b"x") {
            Outcome::Retry(why) => assert!(why.contains("127.0.0.1:1"), "{why}"),
            o => panic!("{o:?}"),
        }
    }
}
