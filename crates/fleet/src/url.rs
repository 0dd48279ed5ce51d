//! The engines' URLs: what makes one usable, and the identity a cursor is kept under.
//!
//! Credentials never travel in a URL. A URL is logged when the exporter starts and in its
//! failures, shown by `config check`, kept as the key of the cursor files in the store, and,
//! given as a flag, visible in `ps` to every user of the host; a password in it would be in
//! all of those. So userinfo (`http://user:pw@host/`) and secret-looking query parameters
//! (ClickHouse's `?password=`) are refused, with the options that take them from a file.
//! That also makes the URL itself the receiver's identity: a changed password changes no
//! URL, so the cursor (and the backfill from it) survives it.

/// Query parameters whose value is a secret (matched without case, as a name or a suffix
/// after `_` or `-`: `access_token`, `api-key`).
const SECRET_PARAMS: &[&str] = &[
    "password",
    "passwd",
    "pass",
    "pwd",
    "token",
    "secret",
    "key",
    "apikey",
    "auth",
    "signature",
];

/// The parts of an `http(s)://` URL a check needs.
struct Parts<'a> {
    scheme: &'a str,
    /// `user[:password]` before an `@`.
    userinfo: Option<&'a str>,
    host: &'a str,
    /// Everything after the authority (path, query, fragment).
    rest: &'a str,
}

fn parts(url: &str) -> Option<Parts<'_>> {
    let (scheme, after) = url.split_once("://")?;
    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (authority, rest) = after.split_at(end);
    let (userinfo, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    Some(Parts {
        scheme,
        userinfo,
        host,
        rest,
    })
}

/// Whether a query parameter's name says its value is a secret.
fn secret_param(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    SECRET_PARAMS.iter().any(|s| {
        n == *s
            || n.strip_suffix(s)
                .is_some_and(|head| head.ends_with('_') || head.ends_with('-'))
    })
}

/// The query's parameters (`name=value`, in order).
fn params(rest: &str) -> impl Iterator<Item = (&str, &str)> {
    let query = rest
        .split_once('?')
        .map_or("", |(_, q)| q.split('#').next().unwrap_or(""));
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').unwrap_or((p, "")))
}

/// Checks that `url` can reach an engine over HTTP and carries no credentials. `what` names
/// the option in the message; `instead` says which options take the credentials.
pub fn check(url: &str, what: &str, instead: &str) -> Result<(), String> {
    let shown = redact(url);
    let Some(p) = parts(url) else {
        return Err(format!(
            "{what} {shown}: not a URL: give http://HOST:PORT/… or https://HOST:PORT/…"
        ));
    };
    if !matches!(p.scheme, "http" | "https") {
        return Err(format!(
            "{what} {shown}: the engine is reached over HTTP: the URL must start with http:// or https://"
        ));
    }
    if p.userinfo.is_some() {
        return Err(format!(
            "{what} {shown}: credentials in a URL end up in logs, `ps` and the store's cursor files: give them with {instead}"
        ));
    }
    if let Some((name, _)) = params(p.rest).find(|(n, _)| secret_param(n)) {
        return Err(format!(
            "{what} {shown}: the query parameter `{name}` holds a secret, which would end up in logs, `ps` and the store's cursor files: give it with {instead}"
        ));
    }
    // `host`, `host:port`, `[v6]` or `[v6]:port`.
    let name = match p.host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => p.host.split(':').next().unwrap_or(""),
    };
    if name.is_empty() {
        return Err(format!("{what} {shown}: the URL names no host"));
    }
    Ok(())
}

/// Only the credentials part of [`check`]: the URL carries no userinfo and no secret query
/// parameter. For the recorder, which says a URL that cannot work (a scheme it has no client
/// for) through the exporter's own failure counters, but never uses a URL with a password.
pub fn check_credentials(url: &str, what: &str, instead: &str) -> Result<(), String> {
    match check(url, what, instead) {
        Err(e) if e.contains(instead) => Err(e),
        _ => Ok(()),
    }
}

/// `url` with its userinfo and secret query values replaced by `…`, for a message about a
/// URL that [`check`] refused (a URL it accepts is shown as it is).
pub fn redact(url: &str) -> String {
    let Some(p) = parts(url) else {
        return url.to_string();
    };
    let auth = match p.userinfo {
        Some(_) => format!("…@{}", p.host),
        None => p.host.to_string(),
    };
    let (path, query) = match p.rest.split_once('?') {
        Some((path, q)) => (path, Some(q)),
        None => (p.rest, None),
    };
    let query = query.map(|q| {
        q.split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if secret_param(k) => format!("{k}=…"),
                _ => kv.to_string(),
            })
            .collect::<Vec<_>>()
            .join("&")
    });
    match query {
        Some(q) => format!("{}://{auth}{path}?{q}", p.scheme),
        None => format!("{}://{auth}{path}", p.scheme),
    }
}

/// The receiver a URL names, free of credentials: the cursor files' key. For a URL that
/// [`check`] accepts it is the URL; for one written by an older version, which accepted
/// credentials, it is the URL without them, so that cursor is still found.
pub fn identity(url: &str) -> String {
    let Some(p) = parts(url) else {
        return url.to_string();
    };
    let (path, query) = match p.rest.split_once('?') {
        Some((path, q)) => (path, Some(q)),
        None => (p.rest, None),
    };
    let kept: Vec<&str> = query
        .map(|q| {
            q.split('&')
                .filter(|kv| !kv.is_empty() && !secret_param(kv.split('=').next().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    if kept.is_empty() {
        format!("{}://{}{path}", p.scheme, p.host)
    } else {
        format!("{}://{}{path}?{}", p.scheme, p.host, kept.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HINT: &str = "--x-user and --x-password-file";

    #[test]
    fn plain_urls_pass() {
        for ok in [
            "http://127.0.0.1:8428/api/v1/write",
            "https://mimir.example:443/api/v1/push",
            "http://[::1]:8123/?database=fleet",
            "http://ch:8123/",
            "http://monkey:8123/?database=keys",
        ] {
            assert_eq!(check(ok, "--x", HINT), Ok(()), "{ok}");
            assert_eq!(identity(ok), ok);
            assert_eq!(redact(ok), ok);
        }
    }

    #[test]
    fn what_cannot_work_is_refused() {
        for (bad, want) in [
            ("ftp://x", "must start with http:// or https://"),
            ("localhost:8123", "not a URL"),
            ("", "not a URL"),
            ("http:///api", "names no host"),
            ("http://:9/", "names no host"),
        ] {
            let e = check(bad, "--x", HINT).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn credentials_are_refused_and_never_repeated() {
        for bad in [
            "http://user:hunter2@vm:8428/api/v1/write",
            "http://hunter2@vm:8428/",
            "http://vm:8123/?user=u&password=hunter2",
            "https://vm/?database=d&access_token=hunter2",
            "https://vm/?API-KEY=hunter2",
        ] {
            let e = check(bad, "--x", HINT).unwrap_err();
            assert!(e.contains(HINT), "{e}");
            assert!(
                !e.contains("hunter2"),
                "the message repeats the secret: {e}"
            );
        }
    }

    #[test]
    fn identity_drops_what_an_older_version_accepted() {
        assert_eq!(
            identity("http://u:old@vm:8428/api/v1/write"),
            identity("http://u:new@vm:8428/api/v1/write")
        );
        assert_eq!(
            identity("http://u:old@vm:8428/api/v1/write"),
            "http://vm:8428/api/v1/write"
        );
        assert_eq!(
            identity("http://ch:8123/?database=f&password=p"),
            "http://ch:8123/?database=f"
        );
        assert!(!secret_param("keys_db") && !secret_param("monkey") && !secret_param("database"));
        assert!(secret_param("key") && secret_param("x_key") && secret_param("TOKEN"));
    }

    #[test]
    fn nothing_panics_on_odd_input() {
        for s in [
            "://",
            "http://@",
            "http://a@b@c/",
            "a://b?&&=&",
            "http://é:ü/?ö=ä",
            "\u{0}://\u{1}",
        ] {
            let _ = check(s, "--x", HINT);
            let _ = identity(s);
            let _ = redact(s);
        }
    }
}
