//! Secrets taken out of command lines before anything keeps them.
//!
//! A process's command line is recorded with it (the store, `top`, `serve`, the diagnosis and
//! what reaches ClickHouse), and command lines carry secrets often enough: `--password=…`,
//! `--token …`, `PGPASSWORD=…` passed through `env`, `postgres://user:pw@db/`. Each argument
//! is looked at once, when the command line is read, and what looks like a secret is replaced
//! by [`MASK`], so no reader, exporter or file ever sees it:
//!
//! - `NAME=VALUE` (`--password=x`, `AWS_SECRET_ACCESS_KEY=x`, `-Dapp.db.password=x`): the
//!   value, when NAME looks secret;
//! - `--NAME VALUE`: the next argument, when `--NAME` (or `-NAME`) looks secret, has no `=`
//!   and the next argument is not itself an option;
//! - a URL's password (`scheme://user:pw@host`) and its secret-looking query values
//!   (`?token=x`), anywhere in an argument.
//!
//! A NAME looks secret when one of its words (split at anything but letters and digits, and
//! at camelCase) is `password`, `passwd`, `passphrase`, `secret`, `token`, `apikey`,
//! `credential(s)` (or ends with one of them: `PGPASSWORD`), or is exactly `pwd`, `pass`, `key`,
//! `auth`, `cookie` or `bearer`; unless its last word says the value is where the secret is,
//! not the secret (`--password-file`, `--key-path`, `--token-url`, `--key-id`), or it starts
//! with `no` (`--no-password`). Patterns a user adds ([`Redactor::new`]) are globs (`*`)
//! matched without case against the whole NAME without its leading dashes.
//!
//! Not covered: secrets glued to a one-letter option (`mysql -phunter2`) or given as a bare
//! positional argument (`sshpass hunter2`): no rule can tell them from any other value.
//! `record --no-cmdline` keeps no command line at all.

/// What a secret is replaced with.
pub const MASK: &str = "***";

/// Whole words that mark a secret.
const EXACT: &[&str] = &["pwd", "pass", "key", "auth", "cookie", "bearer"];
/// Words that mark a secret also at the end of a longer word (`pgpassword`, `mytoken`).
const SUFFIX: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "apikey",
    "credential",
    "credentials",
];
/// A last word that says the value points at the secret rather than being it.
const POINTERS: &[&str] = &[
    "file", "filename", "path", "dir", "url", "uri", "endpoint", "id", "env", "type", "length",
    "len", "size", "name",
];

/// How command lines are kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Redactor {
    /// Extra names, lower case, `*` globs.
    extra: Vec<String>,
    /// Keep no command line at all.
    off: bool,
}

impl Redactor {
    /// The built-in rules plus `patterns`: globs over an argument's name (`*dsn*`,
    /// `conn-string`), matched without case. Refuses an empty pattern or one of `*` alone
    /// (every argument would be masked).
    pub fn new(patterns: &[String]) -> Result<Redactor, String> {
        let mut extra = Vec::new();
        for p in patterns {
            let p = p.trim().trim_start_matches('-').to_ascii_lowercase();
            if p.is_empty() || p.chars().all(|c| c == '*') {
                return Err(format!(
                    "{p:?}: a redaction pattern names arguments (`*dsn*`, `conn-string`); this one would mask every value"
                ));
            }
            extra.push(p);
        }
        Ok(Redactor { extra, off: false })
    }

    /// Keeps no command line (only the process's name is recorded).
    pub fn off() -> Redactor {
        Redactor {
            extra: Vec::new(),
            off: true,
        }
    }

    /// Whether command lines are kept at all.
    pub fn keeps_cmdlines(&self) -> bool {
        !self.off
    }

    /// `/proc/<pid>/cmdline` (NUL-separated, at most `max` bytes of it) as one line of
    /// space-separated arguments, its secrets masked.
    pub fn cmdline(&self, buf: &[u8], max: usize) -> String {
        if self.off {
            return String::new();
        }
        let buf = &buf[..buf.len().min(max)];
        let mut out = String::with_capacity(buf.len());
        let mut mask_next = false;
        for raw in buf.split(|&b| b == 0) {
            if raw.is_empty() {
                continue;
            }
            let arg = crate::fileio::lossy(raw);
            if !out.is_empty() {
                out.push(' ');
            }
            if mask_next && !arg.starts_with('-') {
                out.push_str(MASK);
                mask_next = false;
                continue;
            }
            mask_next = false;
            match arg.split_once('=') {
                // `NAME=VALUE`, but not the `=` of a URL's query (`http://h/?a=b`).
                Some((name, _)) if !name.contains("://") && self.secret(name) => {
                    out.push_str(name);
                    out.push('=');
                    out.push_str(MASK);
                }
                _ => {
                    if arg.starts_with('-') && !arg.contains('=') && self.secret(&arg) {
                        mask_next = true;
                    }
                    out.push_str(&urls(&arg, |n| self.secret(n)));
                }
            }
        }
        out
    }

    /// Whether an argument's NAME looks secret.
    fn secret(&self, name: &str) -> bool {
        let bare = name.trim_start_matches('-');
        if bare.is_empty() {
            return false;
        }
        let lower = bare.to_ascii_lowercase();
        if self.extra.iter().any(|p| glob(p, &lower)) {
            return true;
        }
        let words = words(bare);
        let Some(last) = words.last() else {
            return false;
        };
        if POINTERS.contains(&last.as_str()) || words[0] == "no" {
            return false;
        }
        words
            .iter()
            .any(|w| EXACT.contains(&w.as_str()) || SUFFIX.iter().any(|s| w.ends_with(s)))
    }
}

/// Lower-case words of a name: split at anything but letters and digits, and where a lower
/// case letter or digit is followed by an upper case one (`dbPassword`).
fn words(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if !c.is_ascii_alphanumeric() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && prev_lower && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        cur.push(c.to_ascii_lowercase());
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// `*` glob of `p` over `s`, both lower case.
fn glob(p: &str, s: &str) -> bool {
    let parts: Vec<&str> = p.split('*').collect();
    if parts.len() == 1 {
        return p == s;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !s.starts_with(first) || s.len() < first.len() + last.len() || !s.ends_with(last) {
        return false;
    }
    let mut rest = &s[first.len()..s.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(at) => rest = &rest[at + mid.len()..],
            None => return false,
        }
    }
    true
}

/// `arg` with the password of every URL in it, and its secret query values, masked.
fn urls(arg: &str, secret: impl Fn(&str) -> bool) -> String {
    if !arg.contains("://") {
        return arg.to_string();
    }
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        // The authority ends at the path, the query, the fragment or white space.
        let end = tail
            .find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace())
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rsplit_once('@') {
            Some((userinfo, host)) => {
                match userinfo.split_once(':') {
                    Some((user, _)) => {
                        out.push_str(user);
                        out.push(':');
                        out.push_str(MASK);
                    }
                    // `token@host`: a user name alone is often the token itself.
                    None => out.push_str(MASK),
                }
                out.push('@');
                out.push_str(host);
            }
            None => out.push_str(authority),
        }
        let after = &tail[end..];
        // The path and query end where a list of URLs goes on (`a://…,b://…`) or at white
        // space.
        let stop = after
            .find(|c: char| c == ',' || c == ';' || c.is_whitespace())
            .unwrap_or(after.len());
        out.push_str(&query(&after[..stop], &secret));
        rest = &after[stop..];
    }
    out.push_str(rest);
    out
}

/// A path and query with the values of secret-looking parameters masked.
fn query(s: &str, secret: &impl Fn(&str) -> bool) -> String {
    let Some((path, q)) = s.split_once('?') else {
        return s.to_string();
    };
    let (q, frag) = match q.split_once('#') {
        Some((q, f)) => (q, Some(f)),
        None => (q, None),
    };
    let q: Vec<String> = q
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if secret(k) => format!("{k}={MASK}"),
            _ => kv.to_string(),
        })
        .collect();
    let mut out = format!("{path}?{}", q.join("&"));
    if let Some(f) = frag {
        out.push('#');
        out.push_str(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn line(r: &Redactor, args: &[&str]) -> String {
        r.cmdline(args.join("\0").as_bytes(), 4096)
    }

    #[test]
    fn the_forms_of_a_secret() {
        let r = Redactor::default();
        for (args, want) in [
            (&["app", "--password=hunter2"][..], "app --password=***"),
            (
                &["app", "--password", "hunter2", "-v"],
                "app --password *** -v",
            ),
            (
                &["app", "--db-password", "hunter2"],
                "app --db-password ***",
            ),
            (&["app", "--dbPassword", "hunter2"], "app --dbPassword ***"),
            (
                &["env", "PGPASSWORD=hunter2", "psql"],
                "env PGPASSWORD=*** psql",
            ),
            (
                &["env", "AWS_SECRET_ACCESS_KEY=hunter2"],
                "env AWS_SECRET_ACCESS_KEY=***",
            ),
            (
                &["java", "-Dapp.db.password=hunter2", "-jar", "x"],
                "java -Dapp.db.password=*** -jar x",
            ),
            (
                &["curl", "--token", "abc", "https://h/x"],
                "curl --token *** https://h/x",
            ),
            (&["app", "--api-key", "abc"], "app --api-key ***"),
            (&["app", "--auth", "u:p"], "app --auth ***"),
            (
                &["psql", "postgres://app:hunter2@db:5432/x"],
                "psql postgres://app:***@db:5432/x",
            ),
            (
                &["redis-cli", "-u", "redis://:hunter2@r:6379"],
                "redis-cli -u redis://:***@r:6379",
            ),
            (
                &["git", "clone", "https://ghp_hunter2@github.com/a/b"],
                "git clone https://***@github.com/a/b",
            ),
            (
                &["curl", "https://h/api?user=u&access_token=hunter2#f"],
                "curl https://h/api?user=u&access_token=***#f",
            ),
            (
                &["x", "--url=http://u:hunter2@h/?token=t2"],
                "x --url=http://u:***@h/?token=***",
            ),
        ] {
            let got = line(&r, args);
            assert_eq!(got, want, "{args:?}");
            assert!(!got.contains("hunter2"));
        }
    }

    #[test]
    fn what_is_not_a_secret_stays() {
        let r = Redactor::default();
        for args in [
            &["app", "--password-file", "/etc/app/pw"][..],
            &["app", "--key-path=/etc/ssl/k.pem"],
            &["app", "--token-url", "https://auth/x"],
            &["app", "--no-password", "db1"],
            &["monkey", "--keyboard", "us", "--passes", "3"],
            &["python3", "-m", "http.server", "8000"],
            &["sh", "-c", "while :; do :; done"],
            &["gunicorn", "--max-requests", "1000", "app:wsgi"],
            &["curl", "https://h/x?page=2"],
            &["app", "--password", "--verbose"],
        ] {
            assert_eq!(line(&r, args), args.join(" "), "{args:?}");
        }
    }

    #[test]
    fn patterns_add_names_and_off_keeps_nothing() {
        let r = Redactor::new(&["*dsn*".into(), "--conn-string".into()]).unwrap();
        assert_eq!(line(&r, &["app", "--db-dsn", "x"]), "app --db-dsn ***");
        assert_eq!(
            line(&r, &["app", "--CONN-STRING=x"]),
            "app --CONN-STRING=***"
        );
        assert_eq!(line(&r, &["app", "--name", "x"]), "app --name x");
        assert!(Redactor::new(&["*".into()]).is_err());
        assert!(Redactor::new(&["".into()]).is_err());
        assert_eq!(line(&Redactor::off(), &["app", "--x"]), "");
        assert!(glob("a*b*c", "axxbyyc") && !glob("a*b*c", "axxc") && glob("*k", "k"));
    }

    #[test]
    fn the_bound_and_odd_bytes() {
        let r = Redactor::default();
        assert_eq!(r.cmdline(b"abcdef", 3), "abc");
        assert_eq!(r.cmdline(b"", 3), "");
        assert_eq!(r.cmdline(b"a\0\0b\0", 99), "a b");
        assert_eq!(r.cmdline(b"x\0--token\xff\0s", 99), "x --token\u{fffd} ***");
    }

    proptest! {
        #[test]
        fn never_panics(buf in proptest::collection::vec(any::<u8>(), 0..300), max in 0usize..400) {
            let _ = Redactor::default().cmdline(&buf, max);
        }

        #[test]
        fn a_marked_secret_never_survives(
            name in "(password|token|secret|apikey|PGPASSWORD|db_password|authToken)",
            value in "[a-zA-Z0-9]{8,20}",
        ) {
            let r = Redactor::default();
            let eq = format!("--{name}={value}");
            let sp = format!("--{name}");
            prop_assert!(!line(&r, &["x", &eq]).contains(&value));
            prop_assert!(!line(&r, &["x", &sp, &value]).contains(&value));
            let url = format!("https://u:{value}@h/?{name}={value}");
            prop_assert!(!line(&r, &["x", &url]).contains(&value));
        }
    }
}
