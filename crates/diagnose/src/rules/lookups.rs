//! `fs.failing-lookups` — a program that looks up thousands of names per second that do not
//! exist: the precursor of case 1, seen before (or without) the dentry cache swelling.
//!
//! **Mechanism.** Every `stat`/`access`/`open` of a missing name walks the path and fails with
//! ENOENT; a new name also leaves a negative dentry. Whether the dentries pile up depends on
//! the names and the kernel: NSS's `sdb_measureAccess` probes `.<n>_dOeSnotExist_.db` names for
//! a fixed time per database open (~28k here) in a temporary directory it then removes, which
//! prunes them (issue
//! 18: 12,600 failing `access()` calls per second for 40 s, and `dentry.nr_negative` never
//! moved). The look-ups still cost system CPU, and with names that stay (another directory,
//! another library version) they become case 1's millions of dentries that reclaim must
//! shrink. Seen here, the producer and its names are on record before that happens.
//!
//! **Evidence.** The lookups tracer's failed look-ups per process
//! (`lookups.proc.*.enoent_per_s`), summed over the processes of one command name (a script
//! running `certutil` ten times a second is one producer), averaged over the intervals the
//! tracer ran: attached by its symptom (negative dentries growing) or, without it, by the
//! census (one interval in every `record --census-every`, 60 s by default). The sampled names
//! by pattern (`lookups.pattern.*`), the negative-dentry count, and whether the producer runs
//! NSS softokn (`libsoftokn3` in its stack samples or mappings, or its probe names).
//!
//! **Thresholds.** A finding when one command's processes fail >= 1,000 look-ups per second on
//! average over the traced intervals: a shell's `PATH` search or a Python import fails tens to
//! hundreds. Confidence on a log scale: 0.5 at 1,000/s, 0.95 at 10,000/s. A resource-tier
//! (advisory) finding: it names a cost and a risk, not a mechanism that stalled anything;
//! when the dentry cache does swell, `memory.dcache-bloat` is the mechanism and this finding
//! its cause.
//!
//! **Remediation.** NSS: `NSS_SDB_USE_CACHE=yes` in the producer's environment skips the probe
//! (measured with Debian bookworm's certutil 3.87 under strace: 1 failing `access()` per run
//! with yes, unset or no; 1,020 with any other value, ~28k without strace slowing it).
//! Otherwise: cache the
//! answer or stop probing the names of the patterns shown.
//!
//! **References.** Red Hat bz1044666 / NSS bug 1183153 (sdb_measureAccess).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use jitterscope_model::metrics::{mem, tracer};
use jitterscope_model::registry::Unit;
use jitterscope_model::tracers::TracerId;

use super::{confidence, fact, finding, proc_culprit, rule, series_fact, top_series, Take};
use crate::data::{Data, Series};
use crate::Finding;

rule! {
    "fs.failing-lookups", "a program failing thousands of path look-ups per second (names that do not exist)", resource,
    reads: tracer::LOOKUPS_PROC_ENOENT_PER_S, tracer::LOOKUPS_ENOENT_PER_S,
        tracer::LOOKUPS_CGROUP_ENOENT_PER_S,
        tracer::LOOKUPS_PATTERN_SAMPLES, tracer::CENSUS[TracerId::LOOKUPS.name()], mem::DENTRY_NR_NEGATIVE,
}

/// Failed look-ups per second (one command's processes, while traced) that make a finding.
const MIN_RATE: f64 = 1000.0;

/// Highest confidence for a producer whose failures are the same few names repeated.
const REPEATED_MAX: f64 = 0.45;

/// The name NSS softokn's sdb_measureAccess gives its probes (`.<n>_dOeSnotExist_.db`).
const NSS_PROBE: &str = "_dOeSnotExist_";

/// One command's failed look-ups over the window's traced intervals.
struct Producer<'d> {
    comm: String,
    /// Sum over its processes, by sample index.
    by_idx: BTreeMap<u32, f64>,
    pids: BTreeSet<u32>,
    /// Its process with the most failures, and that process's series.
    top: (u32, f64, &'d Series),
}

impl Producer<'_> {
    fn mean(&self, traced: usize) -> f64 {
        self.by_idx.values().sum::<f64>() / traced.max(1) as f64
    }
    fn peak(&self) -> f64 {
        self.by_idx.values().copied().fold(0.0, f64::max)
    }
}

/// Whether a process runs NSS's softokn: from its recorded stack samples, else (if it still
/// runs) its mappings.
pub(crate) fn uses_softokn(d: &Data, pid: u32) -> Option<String> {
    let hit = |paths: &BTreeSet<String>| paths.iter().find(|p| p.contains("libsoftokn3")).cloned();
    if let Some(p) = d.modules.get(&pid).and_then(hit) {
        return Some(p);
    }
    let maps = d.live_file(pid, "maps")?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("libsoftokn3"))
        .map(str::to_string)
}

fn run(d: &Data) -> Vec<Finding> {
    let start = d.start as u32;
    // The intervals the tracer ran: its host series has a point in each.
    let traced: BTreeSet<u32> = d
        .each(&tracer::LOOKUPS_ENOENT_PER_S)
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .filter(|&i| i >= start)
        .collect();
    if traced.is_empty() {
        return Vec::new();
    }
    let mut by_comm: HashMap<String, Producer> = HashMap::new();
    let mut per_pid: HashMap<u32, f64> = HashMap::new();
    for s in d.each(&tracer::LOOKUPS_PROC_ENOENT_PER_S) {
        let Some((pid, comm)) = s.pid_comm() else {
            continue;
        };
        if s.label(0) == "other" {
            continue;
        }
        let mut total = 0.0;
        for &(i, v) in s.points.iter().filter(|p| p.0 >= start) {
            total += v;
            let p = by_comm.entry(comm.to_string()).or_insert_with(|| Producer {
                comm: comm.to_string(),
                by_idx: BTreeMap::new(),
                pids: BTreeSet::new(),
                top: (pid, 0.0, s),
            });
            *p.by_idx.entry(i).or_default() += v;
            p.pids.insert(pid);
        }
        if total > 0.0 {
            let t = per_pid.entry(pid).or_default();
            *t += total;
            if let Some(p) = by_comm.get_mut(comm) {
                if *t > p.top.1 {
                    p.top = (pid, *t, s);
                }
            }
        }
    }
    // A swelling dentry cache is `memory.dcache-bloat`'s finding, which names the producer.
    let neg = d.stats(&mem::DENTRY_NR_NEGATIVE, &[]);
    let base = if neg.base_n > 0 {
        neg.base_median
    } else {
        neg.first
    };
    let rise = if neg.n > 0 { neg.max - base } else { 0.0 };
    if rise >= super::DENTRY_RISE {
        return Vec::new();
    }
    let n = traced.len();
    // The failures of processes whose cgroup the process table knows, by cgroup: what is
    // left of a cgroup's failures can be a short-lived producer's.
    let mut known: HashMap<&str, f64> = HashMap::new();
    for (pid, total) in &per_pid {
        if let Some(cg) = d.procs.get(pid).and_then(|p| p.cgroup.as_deref()) {
            *known.entry(cg).or_default() += total;
        }
    }
    let patterns = top_series(d, &tracer::LOOKUPS_PATTERN_SAMPLES, |s| s.sum);
    let mut producers: Vec<(Producer, Names)> = by_comm
        .into_values()
        .filter(|p| p.mean(n) >= MIN_RATE)
        .map(|p| {
            let names = Names::of(d, &p.comm, &patterns);
            (p, names)
        })
        .collect();
    // Names that differ each time first: they are case 1's precursor. The same few names
    // missed over and over are negative-dentry hits that pile nothing up.
    producers.sort_by(|(a, an), (b, bn)| {
        an.repeated
            .cmp(&bn.repeated)
            .then(b.mean(n).total_cmp(&a.mean(n)))
            .then(a.comm.cmp(&b.comm))
    });
    let census = d
        .get(&tracer::CENSUS, &[TracerId::LOOKUPS.name()])
        .map_or(0, |s| {
            s.points
                .iter()
                .filter(|p| p.0 >= start && p.1 > 0.0)
                .count()
        });
    let cx = Coverage {
        traced: n,
        census,
        rise: (neg.n > 0).then_some((rise, neg.max)),
    };
    producers
        .iter()
        .take(3)
        .enumerate()
        .map(|(i, (p, names))| one(d, p, names, &cx, &known, i == 0))
        .collect()
}

/// The name patterns one command failed on, when the recording says (the tracer keeps up to
/// four command names per pattern); else every pattern, as recordings before that had it.
pub(crate) struct Names<'d> {
    pub(crate) patterns: Vec<(&'d Series, f64)>,
    /// The patterns are this command's own.
    own: bool,
    /// Its own names are a few fixed ones (no varying digits), each failed again and again:
    /// SQLite checking for its hot journal before every read is 16k a second of one name.
    pub(crate) repeated: bool,
}

impl<'d> Names<'d> {
    pub(crate) fn of(d: &Data, comm: &str, all: &[(&'d Series, f64)]) -> Self {
        if d.lookup_comms.is_empty() {
            return Names {
                patterns: all.iter().take(8).copied().collect(),
                own: false,
                repeated: false,
            };
        }
        let mine: Vec<(&Series, f64)> = all
            .iter()
            .filter(|(s, _)| {
                d.lookup_comms
                    .get(s.label(0))
                    .is_some_and(|c| c.contains(comm))
            })
            .take(8)
            .copied()
            .collect();
        let samples: f64 = mine.iter().map(|(_, n)| n).sum();
        let repeated = !mine.is_empty()
            && mine.iter().all(|(s, _)| !s.label(0).contains('*'))
            && samples >= 2.0 * mine.len() as f64;
        Names {
            patterns: mine,
            own: true,
            repeated,
        }
    }
}

/// How much of the window the tracer saw, and what the dentry cache did.
struct Coverage {
    traced: usize,
    /// Of which intervals the census attached it for.
    census: usize,
    /// Negative dentries: rise over the baseline and the window's largest level.
    rise: Option<(f64, f64)>,
}

fn one(
    d: &Data,
    p: &Producer,
    names: &Names,
    cx: &Coverage,
    known: &HashMap<&str, f64>,
    top: bool,
) -> Finding {
    let traced = cx.traced;
    let rate = p.mean(traced);
    let (pid, _, series) = p.top;
    let probed: Vec<&(&Series, f64)> = names.patterns.iter().collect();
    // NSS's probe names identify the producer that failed on them. Recordings without the
    // pattern's command names: only the top producer, and only when they are the top
    // pattern. Beside a busy SQLite (its journal look-ups fail 16-19k times a second on the
    // soak), certutil's probe names in the list made SQLite "NSS softokn's access probe".
    let nss_names = (names.own || top)
        && probed
            .iter()
            .take(if names.own { 8 } else { 1 })
            .any(|(s, _)| s.label(0).contains(NSS_PROBE));
    let lib = p
        .pids
        .iter()
        .find_map(|&pid| uses_softokn(d, pid))
        .or_else(|| {
            nss_names.then(|| "libsoftokn3 (NSS softokn; recognised by its probe names)".into())
        });
    let mut culprit = proc_culprit(d, pid, &p.comm, super::Res::Cpu);
    if culprit.cgroup.is_none() {
        // Short-lived producers (a script running certutil) are gone before the process
        // sampler sees them; the tracer noted the cgroup each ran in. The producer's cgroup
        // counted at least the producer's failures in every traced interval, so it is the
        // cgroup whose counts cover the producer's, interval by interval: the largest
        // leftover alone was wrong beside the soak, whose cron cgroup's own short-lived
        // commands (uname, sh) outnumbered certutil's failures over the window.
        // Among cgroups that cover it, the one with the least left over once the processes
        // known to run there are taken out: beside SQLite's 16k a second in its own cgroup,
        // certutil's 6k were put there.
        let total: f64 = p.by_idx.values().sum();
        let mut fits: Vec<(&Series, f64, f64)> = d
            .each(&tracer::LOOKUPS_CGROUP_ENOENT_PER_S)
            .filter(|s| s.label(0) != "(other)")
            .filter_map(|s| {
                let at: HashMap<u32, f64> = s
                    .points
                    .iter()
                    .filter(|p| p.0 >= d.start as u32)
                    .map(|p| (p.0, p.1))
                    .collect();
                let covered: f64 = p
                    .by_idx
                    .iter()
                    .map(|(i, x)| at.get(i).copied().unwrap_or(0.0).min(*x))
                    .sum();
                let cover = if total > 0.0 { covered / total } else { 0.0 };
                // Summed like the producers' totals: the rates of the traced intervals.
                let all: f64 = at.values().sum();
                let left = all - known.get(s.label(0)).copied().unwrap_or(0.0);
                (cover >= 0.9 && left >= 0.5 * total).then_some((s, cover, left))
            })
            .collect();
        fits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.total_cmp(&b.2)));
        if let Some((s, _, _)) = fits.first() {
            culprit = super::cgroup_culprit(d, s.label(0));
            culprit.pid = Some(pid);
            culprit.comm = Some(p.comm.clone());
        }
    }
    culprit.library.clone_from(&lib);
    let who = if p.pids.len() > 1 {
        format!("{} ({} processes)", p.comm, p.pids.len())
    } else {
        format!("{} ({pid})", p.comm)
    };
    let mut f = finding(
        &RULE,
        d,
        format!(
            "{who} fails {rate:.0} path look-ups per second ({}){}",
            if names.repeated {
                "the same names, again and again"
            } else {
                "names that do not exist"
            },
            if lib.is_some() {
                " — NSS softokn's access probe"
            } else {
                ""
            }
        ),
        // The same names missed again and again hit the negative dentries they left the
        // first time: a path walk each, nothing that piles up. Advice, not a claim.
        if names.repeated {
            confidence(rate.log10(), 3.0, 4.0).min(REPEATED_MAX)
        } else {
            confidence(rate.log10(), 3.0, 4.0)
        },
        culprit,
    );
    let coverage = if cx.census > 0 {
        format!(
            "{traced} of the window's {} intervals were traced, {} of them by the census (the lookups tracer attached for one interval now and then while negative dentries do not grow)",
            d.window_len(),
            cx.census
        )
    } else {
        format!(
            "{traced} of the window's {} intervals were traced",
            d.window_len()
        )
    };
    f.evidence.push(fact(
        format!(
            "{} mean",
            tracer::LOOKUPS_PROC_ENOENT_PER_S.series_name(&["*", &p.comm])
        ),
        rate,
        Unit::PerSecond,
        format!(
            "failed look-ups per second of {} summed over its processes, mean of the traced intervals (peak {:.0}/s); {coverage}",
            p.comm,
            p.peak()
        ),
    ));
    f.evidence.push(series_fact(
        series,
        p.top.1,
        Take::Sum,
        format!(
            "failed look-ups by {} ({pid}), the most of its processes, in the traced intervals",
            p.comm
        ),
    ));
    f.evidence.extend(pattern_fact(probed.iter().copied()));
    if let Some((rise, level)) = cx.rise {
        f.evidence.push(fact(
            "dentry.nr_negative rise",
            rise,
            Unit::Count,
            format!("negative dentries rose by {rise:.0} over the baseline (at most {level:.0}): the failed names are not piling up in the dentry cache"),
        ));
    }
    match &lib {
        Some(lib) => f.remediation.push(format!(
            "{} runs NSS softokn ({lib}), whose sdb_measureAccess times the database directory by probing names that do not exist on every database open: set NSS_SDB_USE_CACHE=yes in {}'s environment (any other value but no starts the probe)",
            p.comm, p.comm
        )),
        None if names.repeated => f.remediation.push(format!(
            "{} misses the same names (above) again and again: each is a cached negative dentry, so nothing piles up; if its system CPU matters, have it remember the answer (SQLite: a hot-journal check before each read; journal_mode=WAL or a longer transaction makes fewer)",
            p.comm
        )),
        None => f.remediation.push(format!(
            "find why {} looks up names that do not exist (the patterns above) and cache the answer: each miss is a path walk, and names that differ each time leave negative dentries that reclaim must shrink later (case 1)",
            p.comm
        )),
    }
    if cx.census > 0 {
        f.remediation.push(
            "to trace every interval while it lasts: record with --syscall-tracers always (the tracer then slows every system call on the host; see docs/BENCHMARKS.md)"
                .into(),
        );
    }
    f.references = vec!["https://bugzilla.mozilla.org/show_bug.cgi?id=1183153"];
    f
}

/// The failed names by pattern, most sampled first, as one evidence line (none without any).
pub(crate) fn pattern_fact<'a, 'd: 'a>(
    patterns: impl IntoIterator<Item = &'a (&'d Series, f64)>,
) -> Option<crate::Evidence> {
    let top: Vec<&(&Series, f64)> = patterns.into_iter().take(5).collect();
    let list: Vec<String> = top
        .iter()
        .map(|(s, n)| format!("{} ({n:.0})", s.label(0)))
        .collect();
    Some(fact(
        "lookups.pattern",
        top.first()?.1,
        Unit::Count,
        format!("names that failed, by pattern: {}", list.join(", ")),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process's failed look-ups per second: pid, comm, (sample index, rate).
    type Rates<'a> = (u32, &'a str, &'a [(u32, f64)]);

    fn data(rates: &[Rates], traced: &[u32], len: usize) -> Data {
        let mut d = Data {
            ts: (0..len as i64).map(|i| i * 1_000_000_000).collect(),
            start: 2,
            ..Default::default()
        };
        for &i in traced {
            d.push(&tracer::LOOKUPS_ENOENT_PER_S, &[], i, 1.0);
            d.push(&tracer::CENSUS, &[TracerId::LOOKUPS.name()], i, 1.0);
        }
        for &(pid, comm, pts) in rates {
            for &(i, v) in pts {
                d.push(
                    &tracer::LOOKUPS_PROC_ENOENT_PER_S,
                    &[&pid.to_string(), comm],
                    i,
                    v,
                );
            }
        }
        d
    }

    #[test]
    fn short_lived_processes_of_one_command_are_one_producer() {
        // A script running certutil: a new process in each traced interval, ~1,000 each.
        let d = data(
            &[
                (101, "certutil", &[(3, 6_000.0)]),
                (102, "certutil", &[(3, 5_000.0)]),
                (103, "certutil", &[(7, 12_000.0)]),
                (9, "bash", &[(3, 40.0), (7, 30.0)]),
            ],
            &[3, 7],
            10,
        );
        let f = run(&d);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].title.starts_with("certutil (3 processes) fails 11500"),
            "{}",
            f[0].title
        );
        assert_eq!(f[0].culprit.pid, Some(103));
        assert!(
            f[0].evidence[0]
                .note
                .contains("2 of the window's 8 intervals were traced, 2 of them by the census"),
            "{}",
            f[0].evidence[0].note
        );
        assert!(f[0].confidence > 0.9);
    }

    #[test]
    fn a_path_search_is_not_a_producer_and_untraced_is_silent() {
        let d = data(&[(9, "bash", &[(3, 400.0)])], &[3], 10);
        assert!(run(&d).is_empty());
        let d = data(&[], &[], 10);
        assert!(run(&d).is_empty());
    }

    #[test]
    fn probe_names_of_one_program_do_not_name_another() {
        // A busy SQLite failing its journal look-ups beside certutil's NSS probes: the pattern
        // samples do not say who probed what, and SQLite, the top producer, is not NSS.
        let mut d = data(
            &[
                (20, "python3", &[(3, 19_000.0), (7, 18_000.0)]),
                (30, "certutil", &[(3, 5_000.0), (7, 5_200.0)]),
            ],
            &[3, 7],
            10,
        );
        for i in [3, 7] {
            d.push(
                &tracer::LOOKUPS_PATTERN_SAMPLES,
                &["/srv/db.sqlite-journal"],
                i,
                30.0,
            );
            d.push(
                &tracer::LOOKUPS_PATTERN_SAMPLES,
                &[".*_dOeSnotExist_.db"],
                i,
                10.0,
            );
        }
        let f = run(&d);
        assert_eq!(f[0].culprit.comm.as_deref(), Some("python3"), "{f:?}");
        assert!(!f[0].title.contains("NSS"), "{}", f[0].title);
        // Alone, the probe names are NSS's.
        let mut d = data(
            &[(30, "certutil", &[(3, 5_000.0), (7, 5_200.0)])],
            &[3, 7],
            10,
        );
        for i in [3, 7] {
            d.push(
                &tracer::LOOKUPS_PATTERN_SAMPLES,
                &[".*_dOeSnotExist_.db"],
                i,
                10.0,
            );
        }
        assert!(run(&d)[0].title.contains("NSS"), "{}", run(&d)[0].title);
    }

    /// The soak beside `lab check nss-probe`: SQLite in its own cgroup misses its journal
    /// 16k times a second, short-lived certutils in another probe NSS names 6k times a
    /// second, and the tracer says which command failed on which pattern.
    fn sqlite_beside_certutil() -> Data {
        let mut d = data(
            &[
                (20, "lab-sqlite", &[(3, 16_000.0), (7, 16_500.0)]),
                (30, "certutil", &[(3, 6_000.0), (7, 6_400.0)]),
            ],
            &[3, 7],
            10,
        );
        d.procs.entry(20).or_default().cgroup = Some("/soak/db".into());
        for i in [3, 7] {
            for (pat, n) in [
                ("/srv/db.sqlite-journal", 40.0),
                (".*_dOeSnotExist_.db", 20.0),
            ] {
                d.push(&tracer::LOOKUPS_PATTERN_SAMPLES, &[pat], i, n);
            }
            d.push(
                &tracer::LOOKUPS_CGROUP_ENOENT_PER_S,
                &["/soak/db"],
                i,
                16_200.0,
            );
            d.push(&tracer::LOOKUPS_CGROUP_ENOENT_PER_S, &["/nss"], i, 6_200.0);
        }
        let comms = |c: &str| BTreeSet::from([c.to_string()]);
        d.lookup_comms
            .insert("/srv/db.sqlite-journal".into(), comms("lab-sqlite"));
        d.lookup_comms
            .insert(".*_dOeSnotExist_.db".into(), comms("certutil"));
        d
    }

    #[test]
    fn varying_names_rank_above_the_same_names_repeated() {
        let f = run(&sqlite_beside_certutil());
        assert_eq!(f.len(), 2, "{f:?}");
        // certutil first, though it fails fewer: its names differ each time.
        assert_eq!(f[0].culprit.comm.as_deref(), Some("certutil"), "{f:?}");
        assert!(f[0].title.contains("NSS softokn"), "{}", f[0].title);
        assert!(f[0].confidence > 0.8);
        // SQLite misses one name again and again: advice, and not NSS.
        assert_eq!(f[1].culprit.comm.as_deref(), Some("lab-sqlite"));
        assert!(f[1].title.contains("the same names"), "{}", f[1].title);
        assert!(!f[1].title.contains("NSS"), "{}", f[1].title);
        assert!(f[1].confidence <= REPEATED_MAX, "{}", f[1].confidence);
        assert!(
            f[1].remediation[0].contains("WAL"),
            "{:?}",
            f[1].remediation
        );
    }

    /// Beside the soak in CI: the soak's cron cgroup runs short-lived commands (uname) whose
    /// failures over the window outnumber certutil's, at other times. The cgroup that holds
    /// certutil is the one whose counts cover certutil's in the intervals it failed in.
    #[test]
    fn a_short_lived_producer_is_placed_by_when_it_failed_not_by_the_biggest_cgroup() {
        let mut d = data(
            &[
                (30, "certutil", &[(3, 6_000.0), (7, 6_400.0)]),
                (
                    40,
                    "uname",
                    &[
                        (2, 9_000.0),
                        (4, 9_000.0),
                        (5, 9_000.0),
                        (6, 9_000.0),
                        (8, 9_000.0),
                    ],
                ),
            ],
            &[2, 3, 4, 5, 6, 7, 8],
            10,
        );
        for (i, n) in [(2, 9_000.0), (3, 500.0), (4, 9_000.0), (5, 9_000.0)] {
            d.push(&tracer::LOOKUPS_CGROUP_ENOENT_PER_S, &["/soak/cron"], i, n);
        }
        for (i, n) in [(6, 9_000.0), (7, 500.0), (8, 9_000.0)] {
            d.push(&tracer::LOOKUPS_CGROUP_ENOENT_PER_S, &["/soak/cron"], i, n);
        }
        for (i, n) in [(3, 6_000.0), (7, 6_400.0)] {
            d.push(&tracer::LOOKUPS_CGROUP_ENOENT_PER_S, &["/nss"], i, n);
        }
        let f = run(&d);
        let of = |comm: &str| {
            f.iter()
                .find(|f| f.culprit.comm.as_deref() == Some(comm))
                .unwrap_or_else(|| panic!("no finding for {comm}: {f:?}"))
                .culprit
                .cgroup
                .clone()
        };
        assert_eq!(of("certutil").as_deref(), Some("/nss"), "{f:?}");
        assert_eq!(of("uname").as_deref(), Some("/soak/cron"), "{f:?}");
    }

    #[test]
    fn a_short_lived_producer_gets_the_cgroup_its_failures_are_left_in() {
        // certutil has no process-table entry; /soak/db holds more failures than certutil's
        // total, but they are SQLite's, which the process table places there.
        let f = run(&sqlite_beside_certutil());
        assert_eq!(
            f[0].culprit.cgroup.as_deref(),
            Some("/nss"),
            "{:?}",
            f[0].culprit
        );
        assert_eq!(f[1].culprit.cgroup.as_deref(), Some("/soak/db"));
    }
}
