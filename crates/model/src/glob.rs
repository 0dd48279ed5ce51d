//! `--select` patterns: `*` matches any run of characters (dots and slashes included, so
//! `cgroup.*.cpu.throttled_pct` reaches nested cgroups), `?` one character.
//!
//! Written here rather than taken from a glob crate because those treat `/` as a path separator
//! and compile to regexes; series names are not paths, and the matcher runs once per series per
//! sample in `dump`.

/// A compiled pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    raw: String,
    literal_prefix_len: usize,
}

impl Pattern {
    /// Compiles a pattern (every string is a valid pattern).
    pub fn new(p: &str) -> Self {
        let literal_prefix_len = p.find(['*', '?']).unwrap_or(p.len());
        Pattern {
            raw: p.to_string(),
            literal_prefix_len,
        }
    }

    /// The pattern text.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// The characters before the first wildcard.
    pub fn literal_prefix(&self) -> &str {
        &self.raw[..self.literal_prefix_len]
    }

    /// The characters after the last wildcard (the whole pattern when it has none).
    pub fn literal_suffix(&self) -> &str {
        match self.raw.rfind(['*', '?']) {
            Some(i) => &self.raw[i + 1..],
            None => &self.raw,
        }
    }

    /// For a pattern of the form `prefix*suffix` (one `*`, no `?`): its prefix and suffix.
    pub fn star_split(&self) -> Option<(&str, &str)> {
        let (a, b) = self.raw.split_once('*')?;
        (!b.contains(['*', '?']) && !a.contains('?')).then_some((a, b))
    }

    /// Whether `s` matches the whole pattern.
    pub fn matches(&self, s: &str) -> bool {
        wildmatch(self.raw.as_bytes(), s.as_bytes())
    }
}

/// Whether `s` matches glob `p`, without compiling it (for globs written in code, matched a
/// few times).
pub fn matches(p: &str, s: &str) -> bool {
    wildmatch(p.as_bytes(), s.as_bytes())
}

/// Iterative wildcard match with single-star backtracking: linear in practice, never exponential.
fn wildmatch(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        // A `*` in the pattern is a wildcard even where the name has a `*` (a comm may).
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_series_names() {
        let p = Pattern::new("cgroup.*.cpu.throttled_pct");
        assert!(p.matches("cgroup./docker/abc.cpu.throttled_pct"));
        assert!(p.matches("cgroup./kubepods.slice/a.slice/b.scope.cpu.throttled_pct"));
        assert!(!p.matches("cgroup./x.cpu.usage_pct"));
        assert!(Pattern::new("cpu.sys_pct").matches("cpu.sys_pct"));
        assert!(!Pattern::new("cpu.sys_pct").matches("cpu.sys_pctx"));
        assert!(Pattern::new("cpu.?.sys_pct").matches("cpu.1.sys_pct"));
        assert!(Pattern::new("*").matches(""));
        assert!(Pattern::new("a*b*c").matches("aXXbYYc"));
        assert!(Pattern::new("proc.*.cpu_pct").matches("proc.*..cpu_pct"));
        assert!(!Pattern::new("a*b*c").matches("aXXbYY"));
        assert_eq!(Pattern::new("proc.*.rss").literal_prefix(), "proc.");
        assert_eq!(Pattern::new("proc.*.rss").literal_suffix(), ".rss");
        assert_eq!(Pattern::new("cpu.sys").literal_suffix(), "cpu.sys");
        assert_eq!(Pattern::new("a*b").star_split(), Some(("a", "b")));
        assert_eq!(Pattern::new("a*b*").star_split(), None);
        assert_eq!(Pattern::new("a?*b").star_split(), None);
    }

    proptest::proptest! {
        #[test]
        fn literal_patterns_match_themselves(s in "[a-z./_0-9]{0,30}") {
            proptest::prop_assert!(Pattern::new(&s).matches(&s));
        }
    }
}
