//! Metric names in the documentation, the benchmark and the scripts are text the compiler never
//! sees: every one that names a metric, a series or a `--select` glob must still exist in the
//! registry, so a renamed metric cannot leave a README example that selects nothing. (Code
//! names metrics by handle; the compiler checks those.)

use std::path::{Path, PathBuf};

use jitterscope_model::glob::Pattern;
use jitterscope_model::metrics::{all, find};
use jitterscope_model::registry::{parse_series, Fit};

/// First components of metric names.
const PREFIXES: &[&str] = &[
    "cpu", "sched", "load", "mem", "meminfo", "reclaim", "vmstat", "dentry", "slab", "zone",
    "buddy", "irq", "softirq", "psi", "disk", "net", "cgroup", "proc", "procs", "madvise", "tlb",
    "lookups", "runqlat", "shrinker", "mmaplock", "dirty", "tracer", "profile", "self",
];

/// Tokens with a metric prefix that are not metrics, and why.
const NOT_METRICS: &[&str] = &[
    "cgroup.procs", // the cgroup file
    "cgroup.kill",  // the cgroup file
];

/// Endings of file names (`mem.rs`, `load.rs`), which are not metrics either.
const FILE_ENDINGS: &[&str] = &[".rs", ".sh", ".md", ".c", ".h", ".json", ".toml", ".py"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The files whose text names metrics: README, docs, benchmark and scripts.
fn files() -> Vec<PathBuf> {
    let mut v = vec![repo().join("README.md")];
    for dir in ["docs", "bench", "scripts"] {
        for e in std::fs::read_dir(repo().join(dir)).unwrap().flatten() {
            let p = e.path();
            if matches!(
                p.extension().and_then(|x| x.to_str()),
                Some("md" | "sh" | "py")
            ) {
                v.push(p);
            }
        }
    }
    v.sort();
    v
}

/// Candidate names: in backticks, or after `--select` (each of a comma-separated list).
fn candidates(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let token = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || "_.*<>/?-".contains(*c))
            .collect()
    };
    for (i, _) in text.match_indices('`') {
        out.push(token(&text[i + 1..]));
    }
    for (i, m) in text.match_indices("--select") {
        let rest = text[i + m.len()..].trim_start_matches([' ', '=', '\'', '"']);
        let list: String = rest
            .chars()
            .take_while(|c| !c.is_whitespace() && !"'\"".contains(*c))
            .collect();
        out.extend(list.split(',').map(token));
    }
    out.retain(|t| {
        t.split_once('.')
            .is_some_and(|(p, rest)| PREFIXES.contains(&p) && !rest.is_empty())
            && !FILE_ENDINGS.iter().any(|e| t.ends_with(e))
    });
    out.sort();
    out.dedup();
    out
}

/// Why `t` names no metric, if it does not.
fn check(t: &str, rule_ids: &[&str]) -> Option<String> {
    if rule_ids.contains(&t) || NOT_METRICS.contains(&t) {
        return None;
    }
    // Diagnosis evidence names a rate's window total `<rate without _per_s>_total`: it stands
    // for the rate's series, which must exist.
    if let Some(base) = t.strip_suffix("_total") {
        return check(&format!("{base}_per_s"), rule_ids)
            .map(|why| format!("a total of no rate: {why}"));
    }
    if t.contains('<') && !t.contains(['*', '?']) {
        return find(t).is_none().then(|| {
            "no metric has this template (placeholders must be named as in `dump --list`)".into()
        });
    }
    if t.contains(['*', '?', '<']) {
        // Placeholders read as wildcards.
        let mut glob = String::new();
        let mut depth = 0;
        for c in t.chars() {
            match c {
                '<' => {
                    depth += 1;
                    glob.push('*');
                }
                '>' => depth -= 1,
                c if depth == 0 => glob.push(c),
                _ => {}
            }
        }
        let p = Pattern::new(&glob);
        // A metric whose template ends in a placeholder (`vmstat.<field>`) admits any ending,
        // so it counts only when the glob takes all of it.
        let fits = |d: &&&jitterscope_model::MetricDef| match d.fit(&p) {
            Fit::Always => true,
            Fit::Check => !d.name.ends_with('>'),
            Fit::Never => false,
        };
        return (!all().iter().any(|d| fits(&d))).then(|| "the glob matches no metric".into());
    }
    parse_series(all(), t)
        .is_none()
        .then(|| "no metric has a series of this name".into())
}

#[test]
fn every_metric_the_docs_name_exists() {
    let rule_ids: Vec<&str> = jitterscope_diagnose::rules::RULES
        .iter()
        .map(|r| r.id)
        .collect();
    let mut bad = Vec::new();
    let mut seen = 0;
    for f in files() {
        let text = std::fs::read_to_string(&f).unwrap();
        for t in candidates(&text) {
            seen += 1;
            if let Some(why) = check(&t, &rule_ids) {
                bad.push(format!(
                    "{}: `{t}`: {why}",
                    f.strip_prefix(repo()).unwrap_or(&f).display()
                ));
            }
        }
    }
    assert!(seen >= 40, "only {seen} names found: is the scan broken?");
    assert!(
        bad.is_empty(),
        "names that match no metric:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_check_catches_what_it_should() {
    let ids = ["cpu.saturation"];
    assert_eq!(check("cpu.sys_pct", &ids), None);
    assert_eq!(check("cgroup.*.cpu.throttled_pct", &ids), None);
    assert_eq!(check("cgroup.<cgroup>.cpu.throttled_pct", &ids), None);
    assert_eq!(check("cpu.<cpu>.*_pct", &ids), None);
    assert_eq!(check("cpu.saturation", &ids), None);
    assert!(check("cpu.sys_percent", &ids).is_some());
    assert!(check("tracer.<name>.attached", &ids).is_some());
    assert!(check("cgroup.*.cpu.throttled_percent", &ids).is_some());
    assert_eq!(
        candidates(
            "see `irq.tlb_per_s`, `load.rs` and --select 'cpu.sys_pct,proc.*.rss_bytes' or cgroup.x"
        ),
        ["cpu.sys_pct", "irq.tlb_per_s", "proc.*.rss_bytes"]
    );
}
