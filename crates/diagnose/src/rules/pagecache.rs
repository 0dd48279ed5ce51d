//! `memory.pagecache-thrash` — a working set evicted from the page cache and read back.
//!
//! **Mechanism.** When one reader streams more file data than memory (or its cgroup) holds,
//! the LRU evicts everything older, including other processes' hot file pages. Those come back
//! from disk: refaults (the kernel's shadow entries recognise pages evicted recently) and major
//! faults for mapped files, each a disk read in the victim's path. Case 5: a fast SSD reader
//! pushed a service's files out; disk reads rose before kswapd and the major faults.
//!
//! **Evidence.** `reclaim.refault_file_per_s`, `reclaim.pgmajfault_per_s`,
//! `reclaim.pgsteal_*`, the page cache and anonymous memory levels (cache churn with flat anon
//! is thrash, not a leak), the processes with most major faults (victims) and most read bytes
//! (driver), the disk with most reads, and the order in which those moved.
//!
//! **Thresholds.** A finding when file refaults sum to >= 10,000 pages in the window at >= 10x
//! the baseline (host-wide, or of one memory cgroup: `cgroup.<cg>.memory.refault_file_per_s`),
//! or major faults to >= 1,000 at >= 10x: a few refaults are normal LRU aging. Confidence by
//! the refault ratio, 0.5 at 10x, 0.95 at 1000x; at least 0.85 when a process took >= 1,000
//! major faults, or when the cgroup is at its limit and a second process of it reads its
//! evicted files back (the harm itself); at most 0.6 with such a reader and no limit; at most
//! 0.45, advice, when nobody but the reader is harmed (its own files re-read: a backup's loop
//! over a tree).
//!
//! **Remediation.** Confine the streaming reader (its own memory cgroup with a limit, so it
//! recycles its own cache; `POSIX_FADV_DONTNEED`/`O_DIRECT` in the reader); protect the
//! victim's cgroup with `memory.low`/`min`; `vm.watermark_scale_factor` when kswapd lags.
//!
//! **References.** Documentation/admin-guide/mm/workingset (mm/workingset.c comments);
//! Documentation/admin-guide/cgroup-v2.rst (memory.low).

use jitterscope_model::metrics::{cgroup, disk, mem, process};

use super::{
    confidence, fact, finding, mib, moved_first, proc_culprit, rule, series_fact, top_procs,
    top_procs_by, top_series, ProcSum, Take,
};
use crate::data::Data;
use crate::Finding;
use jitterscope_model::registry::Unit;

rule! {
    "memory.pagecache-thrash",
    "file working sets evicted and read back (refaults, major faults)",
    mechanism,
    reads: mem::RECLAIM_REFAULT_FILE_PER_S, mem::RECLAIM_PGMAJFAULT_PER_S,
        mem::RECLAIM_PGSTEAL_KSWAPD_PER_S, mem::RECLAIM_PGSTEAL_DIRECT_PER_S,
        mem::RECLAIM_PGSCAN_KSWAPD_PER_S, mem::CACHED_BYTES, mem::ANON_BYTES,
        disk::READ_BYTES_PER_S, process::PROC_READ_BYTES_PER_S, process::PROC_MAJFLT_PER_S,
        process::PROC_REAPED_READ_BYTES_PER_S, process::PROC_EXITED,
        cgroup::MEMORY_REFAULT_FILE_PER_S, mem::VMSTAT_FIELD_PER_S["pswpin"],
        cgroup::MEMORY_USAGE_OF_LIMIT_PCT, cgroup::MEMORY_HIGH_BYTES, cgroup::MEMORY_USAGE_BYTES,
}

/// Refaults (pages) in the window, and their multiple of the baseline, before a finding.
const MIN_REFAULTS: f64 = 10_000.0;
const MIN_RATIO: f64 = 10.0;

/// Bytes a second process of a thrashing cgroup read from storage in the window before it is
/// the victim reading its evicted files back.
const REREAD_BYTES: f64 = 16.0 * 1_048_576.0;

/// The confidence of a thrash that harms no one but its reader: below a claim (0.5).
const ADVICE: f64 = 0.45;

/// Usage of the hard limit (or of `memory.high`) at which a cgroup is at its limit: the
/// kernel reclaims inside it from there on.
const AT_LIMIT_PCT: f64 = 90.0;

/// A memory cgroup whose own file pages are evicted and read back.
struct CgThrash<'d> {
    /// Its path in the memory hierarchy.
    path: &'d str,
    /// Its refaults, summed over the window.
    sum: f64,
    /// Their mean over the baseline's median.
    ratio: f64,
    /// Its usage at its limit (or `memory.high`) in the window: the thrash is the limit's.
    at_limit: bool,
}

fn ratio(s: &crate::data::Stats) -> f64 {
    s.mean
        / if s.base_n > 0 {
            s.base_median.max(1.0)
        } else {
            1.0
        }
}

/// Whether process `pid` was seen in memory cgroup `cg` or below it.
fn in_memcg(d: &Data, pid: u32, cg: &str) -> bool {
    d.procs
        .get(&pid)
        .and_then(|p| p.memory_cgroup.as_deref())
        .is_some_and(|p| within(p, cg))
}

/// Whether cgroup path `p` is `cg` or below it.
pub(crate) fn within(p: &str, cg: &str) -> bool {
    cg == "/" || p == cg || p.strip_prefix(cg).is_some_and(|r| r.starts_with('/'))
}

/// The memory cgroup that thrashes: of the cgroups whose refaults passed the thresholds, the
/// deepest one holding at least half of the largest count. The counters are hierarchical (v2
/// `workingset_refault_file`, v1 `total_…`), so every ancestor repeats its descendants'
/// refaults; the deepest is where they happen, the one whose limit evicts them.
fn thrashing_cgroup(d: &Data) -> Option<CgThrash<'_>> {
    let mut found: Vec<CgThrash> = d
        .each(&cgroup::MEMORY_REFAULT_FILE_PER_S)
        .filter(|s| s.label(0) != "/")
        .filter_map(|s| {
            let st = d.stats_of(s);
            let r = ratio(&st);
            (st.sum >= MIN_REFAULTS && r >= MIN_RATIO).then(|| CgThrash {
                path: s.label(0),
                sum: st.sum,
                ratio: r,
                at_limit: at_limit(d, s.label(0)),
            })
        })
        .collect();
    let most = found.iter().map(|c| c.sum).fold(0.0, f64::max);
    found.retain(|c| c.sum >= 0.5 * most);
    found
        .into_iter()
        .max_by_key(|c| c.path.matches('/').count())
}

/// Whether cgroup `cg` used at least [`AT_LIMIT_PCT`] of its hard limit or of `memory.high`.
fn at_limit(d: &Data, cg: &str) -> bool {
    let of_limit = d.stats(&cgroup::MEMORY_USAGE_OF_LIMIT_PCT, &[cg]);
    let high = d.stats(&cgroup::MEMORY_HIGH_BYTES, &[cg]);
    let usage = d.stats(&cgroup::MEMORY_USAGE_BYTES, &[cg]);
    (of_limit.n > 0 && of_limit.max >= AT_LIMIT_PCT)
        || (high.n > 0 && usage.n > 0 && usage.max >= AT_LIMIT_PCT / 100.0 * high.mean)
}

/// Who drove the reads inside a thrashing cgroup: processes of one name summed (a loop
/// starting a short-lived reader per file makes many pids of one name), with the reads that
/// only reached a parent outside the cgroup when it reaped them credited to its descendants
/// that were seen inside. Work is never carried across the cgroup boundary: a parent
/// elsewhere that reaped the readers is named as their launcher, not as the culprit.
struct Driver {
    comm: String,
    /// The pid that read most, else the newest seen.
    pid: u32,
    /// How many pids of that name were seen inside.
    pids: usize,
    /// Bytes read, seen and credited.
    bytes: f64,
    /// The parent outside the cgroup whose counters carried the reads, when it reaped them
    /// (an index into the reapers).
    launcher: Option<usize>,
}

/// The group of readers named `comm`, made with `pid` as its first.
fn group<'g>(
    groups: &'g mut std::collections::BTreeMap<String, Driver>,
    comm: &str,
    pid: u32,
) -> &'g mut Driver {
    groups.entry(comm.to_string()).or_insert_with(|| Driver {
        comm: comm.to_string(),
        pid,
        pids: 0,
        bytes: 0.0,
        launcher: None,
    })
}

fn driver_in(d: &Data, cg: &str, readers: &[ProcSum], reapers: &[ProcSum]) -> Option<Driver> {
    let in_cg = |pid: u32| in_memcg(d, pid, cg);
    let mut groups: std::collections::BTreeMap<String, Driver> = Default::default();
    // The pid named is the one that read most itself.
    let mut most: std::collections::BTreeMap<String, f64> = Default::default();
    for r in readers.iter().filter(|r| in_cg(r.pid)) {
        let g = group(&mut groups, &r.comm, r.pid);
        g.bytes += r.sum;
        g.pids += 1;
        let m = most.entry(r.comm.clone()).or_insert(0.0);
        if r.sum > *m {
            *m = r.sum;
            g.pid = r.pid;
        }
    }
    for (i, r) in reapers.iter().enumerate().filter(|(_, r)| !in_cg(r.pid)) {
        // Its descendants seen inside the cgroup: the reads are theirs, credited to the name
        // of the deepest of them, the one that did the reading (`sh -c` wrappers start it).
        let mut inside: Vec<(u32, usize, &str)> = d
            .procs
            .iter()
            .filter(|(&pid, _)| in_cg(pid))
            .filter_map(|(&pid, p)| {
                let mut depth = 1;
                let mut up = p.ppid;
                while up != r.pid {
                    up = d.procs.get(&up)?.ppid;
                    depth += 1;
                    if depth > 16 || up == 0 {
                        return None;
                    }
                }
                Some((pid, depth, p.comm.as_str()))
            })
            .collect();
        // The bytes it reaped are those of children inside only when some of them ended in
        // the window: a parent elsewhere also reaps children of its own.
        let start = d.start as u32;
        let ended = |pid: u32, comm: &str| {
            d.get(&process::PROC_EXITED, &[&pid.to_string(), comm])
                .is_some_and(|s| s.points.iter().any(|(i, _)| *i >= start))
        };
        if !inside.iter().any(|&(pid, _, comm)| ended(pid, comm)) {
            continue;
        }
        // Deepest first, then the newest pid.
        inside.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
        let Some(&(pid, _, comm)) = inside.first() else {
            continue;
        };
        let seen: f64 = readers
            .iter()
            .filter(|c| inside.iter().any(|x| x.0 == c.pid))
            .map(|c| c.sum)
            .sum();
        let unseen = r.value - seen;
        if unseen <= 0.0 {
            continue;
        }
        let g = group(&mut groups, comm, pid);
        g.bytes += unseen;
        g.pids = g.pids.max(inside.iter().filter(|x| x.2 == comm).count());
        g.launcher.get_or_insert(i);
    }
    groups
        .into_values()
        .max_by(|a, b| a.bytes.total_cmp(&b.bytes).then(b.comm.cmp(&a.comm)))
}

fn run(d: &Data) -> Vec<Finding> {
    let rf = d.stats(&mem::RECLAIM_REFAULT_FILE_PER_S, &[]);
    let mj = d.stats(&mem::RECLAIM_PGMAJFAULT_PER_S, &[]);
    let (rr, mr) = (ratio(&rf), ratio(&mj));
    let refaulting = rf.sum >= MIN_REFAULTS && rr >= MIN_RATIO;
    // Swap-ins are major faults too, of anonymous pages: memory.swap-in's, not the page
    // cache's. pswpin counts swap readahead's pages as well, so this undercounts the file
    // faults of a storm of both; their refaults still count above.
    let swapins = d.stats(&mem::VMSTAT_FIELD_PER_S, &["pswpin"]);
    let faulting = (mj.sum - swapins.sum) >= 1000.0 && mr >= MIN_RATIO;
    let cg = thrashing_cgroup(d);
    if !refaulting && !faulting && cg.is_none() {
        return Vec::new();
    }
    let victims = top_procs(d, &process::PROC_MAJFLT_PER_S);
    // Ranked without each process's largest sample: a parent reaping a child inherits the
    // child's lifetime I/O counters (kernel/exit.c adds them to the parent's), which shows as a
    // one-sample spike of the parent.
    let readers = top_procs_by(d, &process::PROC_READ_BYTES_PER_S, |s| s.sum - s.max);
    // Without a process faulting its pages back, refaults are a reader re-reading its own
    // files: thrash of its own cache, weaker evidence of harm to others. Inside a cgroup at its
    // limit, the cgroup's own refaults are the harm: its working set read back from storage.
    let harmed = faulting && victims.first().is_some_and(|v| v.value >= 1000.0);
    let disks = top_series(d, &disk::READ_BYTES_PER_S, |s| s.mean);
    let reapers = top_procs(d, &process::PROC_REAPED_READ_BYTES_PER_S);
    let secs = d.window_seconds().max(1.0);
    // For reads credited inside a cgroup, without each parent's largest sample: a
    // long-running child reaped once (the lab's own workers at their end) is one spike of its
    // lifetime I/O, already seen as its own reads; a stream of short-lived readers raises the
    // parent's counters sample after sample.
    let steady_reapers = top_procs_by(d, &process::PROC_REAPED_READ_BYTES_PER_S, |s| s.sum - s.max);
    let in_cg = cg
        .as_ref()
        .and_then(|c| driver_in(d, c.path, &readers, &steady_reapers).map(|dr| (c, dr)));
    // Inside the cgroup, a process of another name that read from storage too: it reads back
    // what the driver's stream evicted (a hot file re-read through read() takes no major
    // fault). One process re-reading its own file between allocations harms no one else.
    let reread = in_cg.as_ref().and_then(|(c, dr)| {
        readers.iter().find(|r| {
            // Not a share of the stream's bytes: a service re-reading 64 MiB a second beside a
            // stream of 1.1 GiB/s read 4% of it in CI, and is the victim all the same.
            r.comm != dr.comm && r.sum >= REREAD_BYTES && in_memcg(d, r.pid, c.path)
        })
    });
    let limit_harm = cg.as_ref().is_some_and(|c| c.at_limit) && reread.is_some();
    let (driver, culprit, reaper) = match in_cg {
        Some((c, dr)) => {
            let many = if dr.pids > 1 {
                format!("{} processes named {}, last {}", dr.pids, dr.comm, dr.pid)
            } else {
                format!("{} ({})", dr.comm, dr.pid)
            };
            let launcher = dr.launcher.map(|i| &steady_reapers[i]);
            let via = launcher
                .map(|r| format!(", started by {} ({}) outside it", r.comm, r.pid))
                .unwrap_or_default();
            let mut culprit = proc_culprit(d, dr.pid, &dr.comm, super::Res::Memory);
            culprit.cgroup = Some(c.path.to_string());
            culprit.container = super::container_of(d, c.path);
            (
                Some(format!(
                    ", driven by {many} reading {} MiB/s in it{via}",
                    mib(dr.bytes / secs)
                )),
                culprit,
                launcher,
            )
        }
        None => host_driver(d, &readers, &reapers, secs, cg.as_ref().map(|c| c.path)),
    };
    let title = match &cg {
        Some(c) => format!(
            "page-cache thrashing in memory cgroup {}{}: {:.0} file refaults there ({:.0} host-wide), {:.0} major faults{}{}",
            c.path,
            if c.at_limit { " at its limit" } else { "" },
            c.sum,
            rf.sum,
            mj.sum,
            driver.unwrap_or_default(),
            victims
                .first()
                .filter(|_| harmed)
                .map(|p| format!("; {} ({}) faults its pages back", p.comm, p.pid))
                .or_else(|| reread.map(|p| format!(
                    "; {} ({}) reads its evicted files back",
                    p.comm, p.pid
                )))
                .unwrap_or_default()
        ),
        None => format!(
            "page-cache thrashing: {:.0} file refaults, {:.0} major faults{}{}",
            rf.sum,
            mj.sum,
            driver.unwrap_or_default(),
            victims
                .first()
                .map(|p| format!("; {} ({}) faults its pages back", p.comm, p.pid))
                .unwrap_or_default()
        ),
    };
    let scale = rr.max(mr).max(cg.as_ref().map_or(0.0, |c| c.ratio));
    let conf = if harmed || limit_harm {
        // A process faulting thousands of pages back, or a cgroup at its limit reading its own
        // working set back, is the harm itself, whatever the baseline's refault rate was.
        confidence(scale, 10.0, 1000.0).max(0.85)
    } else if reread.is_some() {
        // Another process reads back what was evicted, with no limit forcing it: a claim,
        // weaker than a victim faulting.
        confidence(scale, 10.0, 1000.0).min(0.6)
    } else {
        // Files re-read by their own reader (a backup's loop over a tree, a build reading its
        // sources again), nobody else harmed: advice, never a claim. The soak's `tar czf`
        // loop claimed 0.6 on a busy, healthy host.
        confidence(scale, 10.0, 1000.0).min(ADVICE)
    };
    let mut f = finding(&RULE, d, title, conf, culprit);
    let cg_series = cg
        .as_ref()
        .and_then(|c| d.get(&cgroup::MEMORY_REFAULT_FILE_PER_S, &[c.path]));
    f.onset = [
        (cg_series, 100.0),
        (d.get(&mem::RECLAIM_REFAULT_FILE_PER_S, &[]), 100.0),
        (d.get(&mem::RECLAIM_PGMAJFAULT_PER_S, &[]), 10.0),
    ]
    .into_iter()
    .filter_map(|(s, floor)| d.onset_over_baseline(s?, floor))
    .min();
    if let Some(c) = &cg {
        f.cite(
            d,
            &cgroup::MEMORY_REFAULT_FILE_PER_S,
            &[c.path],
            Take::Sum,
            format!(
                "file pages evicted from {} and read back (its refaults)",
                c.path
            ),
        );
        f.cite(
            d,
            &cgroup::MEMORY_USAGE_OF_LIMIT_PCT,
            &[c.path],
            Take::Max,
            format!("usage of {}'s memory limit", c.path),
        );
    }
    f.cite(
        d,
        &mem::RECLAIM_REFAULT_FILE_PER_S,
        &[],
        Take::Sum,
        "file pages evicted then read back (refaults)",
    );
    if !harmed && !limit_harm {
        f.notes.push(
            "no process faulted mapped pages back: the refaults are files being re-read after eviction".into(),
        );
    }
    f.cite(
        d,
        &mem::RECLAIM_PGMAJFAULT_PER_S,
        &[],
        Take::Sum,
        "major faults (page read from disk)",
    );
    f.cite_procs(&victims, 2, "major faults of", ": the victim");
    let cited: Vec<&ProcSum> = match &cg {
        Some(c) => readers
            .iter()
            .filter(|r| in_memcg(d, r.pid, c.path))
            .take(2)
            .collect(),
        None => readers.iter().take(2).collect(),
    };
    for p in cited {
        f.evidence.push(series_fact(
            p.series,
            p.sum,
            Take::Sum,
            format!("read from storage by {} ({}) in the window", p.comm, p.pid),
        ));
    }
    if let Some(r) = reaper {
        let outside = cg.as_ref().map(|c| {
            format!(
                "; {} is outside {}, so the reads are credited to its children inside it",
                r.comm, c.path
            )
        });
        f.evidence.push(series_fact(
            r.series,
            r.sum,
            Take::Sum,
            format!(
                "read from storage by the children {} ({}) reaped in the window (the kernel adds a reaped child's lifetime I/O to its parent's counters){}",
                r.comm,
                r.pid,
                outside.filter(|_| f.culprit.pid != Some(r.pid)).unwrap_or_default()
            ),
        ));
    }
    if let Some((s, v)) = disks.first() {
        f.evidence.push(series_fact(
            s,
            *v,
            Take::Mean,
            format!("reads of {} (mean)", s.label(0)),
        ));
    }
    let cache = d.stats(&mem::CACHED_BYTES, &[]);
    let anon = d.stats(&mem::ANON_BYTES, &[]);
    if cache.n > 1 && anon.n > 1 {
        f.evidence.push(fact(
            format!("{} / {}", mem::CACHED_BYTES.name, mem::ANON_BYTES.name),
            cache.last - cache.first,
            Unit::Bytes,
            format!(
                "page cache {:+} MiB, anonymous memory {:+} MiB over the window: churn without a leak",
                mib(cache.last - cache.first),
                mib(anon.last - anon.first)
            ),
        ));
    }
    f.moved_first = moved_first(
        d,
        &[
            (disks.first().map(|(s, _)| *s), 1_048_576.0),
            (cg_series, 100.0),
            (d.get(&mem::RECLAIM_REFAULT_FILE_PER_S, &[]), 100.0),
            (d.get(&mem::RECLAIM_PGMAJFAULT_PER_S, &[]), 10.0),
            (d.get(&mem::RECLAIM_PGSCAN_KSWAPD_PER_S, &[]), 100.0),
        ],
    );
    let comm = f.culprit.comm.clone();
    match (&cg, comm) {
        (Some(c), comm) => {
            let who = comm.as_deref().unwrap_or("the streaming reader");
            if c.at_limit {
                f.remediation.push(format!(
                    "raise {}'s memory limit above its working set plus what the stream keeps in flight, or split it: {who} in a cgroup of its own, whose limit recycles only its own cache",
                    c.path
                ));
            } else {
                f.remediation.push(format!(
                    "move {who} to a memory cgroup of its own with a limit, so it recycles its own cache instead of the rest of {}'s",
                    c.path
                ));
            }
            f.remediation.push(format!(
                "have {who} bypass the page cache: O_DIRECT, posix_fadvise(POSIX_FADV_DONTNEED) behind its reads, or run it under `nocache`"
            ));
            f.remediation.push(format!(
                "protect the working set that stays: memory.low on its own child cgroup inside {} (v2)",
                c.path
            ));
        }
        (None, comm) => {
            if let Some(comm) = comm.filter(|_| !readers.is_empty() || !reapers.is_empty()) {
                f.remediation.push(format!(
                    "give {comm} its own memory cgroup with a limit, so it recycles its own page cache instead of everyone's (or have it read with POSIX_FADV_DONTNEED / O_DIRECT)"
                ));
            }
            if let Some(comm) = victims.first().map(|p| &p.comm) {
                f.remediation.push(format!("protect {comm}'s working set: memory.low / memory.min on its cgroup (v2), or mlock the hot file"));
            }
        }
    }
    f.remediation
        .push("if kswapd lags the stream, wake it earlier: vm.watermark_scale_factor=200".into());
    f.references = vec![
        "https://docs.kernel.org/admin-guide/cgroup-v2.html#memory",
        "https://github.com/torvalds/linux/blob/master/mm/workingset.c",
    ];
    vec![f]
}

/// The driver when no single memory cgroup thrashes (host-wide): the largest reader, or the
/// parent of unseen children that read more. Short-lived readers (a shell's `cat`s) may never
/// be seen running: their reads arrive in the parent's counters when it reaps them, recorded
/// apart from its own. Children the recorder saw are already cited under their own names:
/// only what they do not account for is news. With `cg` (refaults in a cgroup without a
/// reader seen in it), only a parent inside it is named.
fn host_driver<'d>(
    d: &Data,
    readers: &[ProcSum<'d>],
    reapers: &'d [ProcSum<'d>],
    secs: f64,
    cg: Option<&str>,
) -> (Option<String>, crate::Culprit, Option<&'d ProcSum<'d>>) {
    let unseen = |r: &ProcSum| {
        let seen: f64 = readers
            .iter()
            .filter(|c| d.procs.get(&c.pid).is_some_and(|p| p.ppid == r.pid))
            .map(|c| c.sum)
            .sum();
        r.sum - seen
    };
    let inside = |pid: u32| cg.is_none_or(|cg| in_memcg(d, pid, cg));
    let reader = readers.iter().find(|r| inside(r.pid));
    let reaper = reapers.iter().filter(|r| inside(r.pid)).find(|r| {
        let rest = unseen(r);
        rest > 0.0 && rest >= 0.5 * reader.map_or(0.0, |p| p.sum)
    });
    match (reader, reaper) {
        (_, Some(r)) if reader.is_none_or(|p| unseen(r) > p.sum) => (
            Some(format!(
                ", driven by children of {} ({}) reading {} MiB/s",
                r.comm,
                r.pid,
                mib(unseen(r) / secs)
            )),
            proc_culprit(d, r.pid, &r.comm, super::Res::Memory),
            Some(r),
        ),
        (Some(p), r) => (
            Some(format!(
                ", driven by {} ({}) reading {} MiB/s",
                p.comm,
                p.pid,
                mib(p.sum / secs)
            )),
            proc_culprit(d, p.pid, &p.comm, super::Res::Memory),
            r,
        ),
        _ => (
            None,
            cg.map(|c| super::cgroup_culprit(d, c)).unwrap_or_default(),
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shell whose short `cat` children stream a file: the children are never seen, their
    /// reads reach the shell's counters when it reaps them.
    #[test]
    fn reads_of_reaped_children_are_said_as_such() {
        let mut d = Data::seconds(12, 4);
        d.procs.insert(
            50,
            crate::data::Proc {
                comm: "bash".into(),
                memory_cgroup: Some("/batch".into()),
                ..Default::default()
            },
        );
        for i in 0..12u32 {
            let on = i >= 4;
            d.push(
                &mem::RECLAIM_REFAULT_FILE_PER_S,
                &[],
                i,
                if on { 50_000.0 } else { 10.0 },
            );
            d.push(
                &mem::RECLAIM_PGMAJFAULT_PER_S,
                &[],
                i,
                if on { 2_000.0 } else { 1.0 },
            );
            d.push(
                &process::PROC_MAJFLT_PER_S,
                &["60", "postgres"],
                i,
                if on { 1_500.0 } else { 0.0 },
            );
            if on {
                d.push(
                    &process::PROC_REAPED_READ_BYTES_PER_S,
                    &["50", "bash"],
                    i,
                    1e9,
                );
            }
        }
        let f = &run(&d)[0];
        assert!(
            f.title.contains("driven by children of bash (50)"),
            "{}",
            f.title
        );
        assert_eq!(f.culprit.cgroup.as_deref(), Some("/batch"));
        let e = f
            .evidence
            .iter()
            .find(|e| e.signal == "proc.50.bash.reaped_read_bytes_total")
            .expect("the reaped reads");
        assert!(e.note.contains("reaped"), "{}", e.note);
        assert_eq!(e.unit, Unit::Bytes);
        // Nothing credits the shell with reading it itself.
        assert!(!f
            .evidence
            .iter()
            .any(|e| e.signal == "proc.50.bash.read_bytes_total"));
    }

    fn proc(comm: &str, ppid: u32, cg: &str) -> crate::data::Proc {
        crate::data::Proc {
            comm: comm.into(),
            ppid,
            memory_cgroup: Some(cg.into()),
            ..Default::default()
        }
    }

    /// Seed 5 inside a container: a cgroup at its limit holds a hot re-reader and a stream of
    /// short-lived readers, started through `sh -c` by a parent in another cgroup, whose
    /// counters get the readers' bytes when it reaps them.
    fn memcg_thrash(seen_reader: bool) -> Data {
        let mut d = Data::seconds(12, 4);
        d.procs.insert(10, proc("python3", 1, "/ops"));
        d.procs.insert(20, proc("sh", 10, "/lab"));
        if seen_reader {
            d.procs.insert(21, proc("cat", 20, "/lab"));
        }
        d.procs.insert(30, proc("reread", 1, "/lab"));
        // The short-lived readers end in the window.
        d.push(&process::PROC_EXITED, &["21", "cat"], 8, 1.0);
        for i in 0..12u32 {
            let on = i >= 4;
            let rf = if on { 30_000.0 } else { 5.0 };
            // Hierarchical counters: the root repeats every cgroup's refaults.
            d.push(&cgroup::MEMORY_REFAULT_FILE_PER_S, &["/"], i, rf + 50.0);
            d.push(&cgroup::MEMORY_REFAULT_FILE_PER_S, &["/lab"], i, rf);
            d.push(&cgroup::MEMORY_REFAULT_FILE_PER_S, &["/ops"], i, 1.0);
            d.push(&cgroup::MEMORY_USAGE_OF_LIMIT_PCT, &["/lab"], i, 99.0);
            d.push(&mem::RECLAIM_REFAULT_FILE_PER_S, &[], i, rf + 50.0);
            d.push(&mem::RECLAIM_PGMAJFAULT_PER_S, &[], i, 20.0);
            d.push(
                &process::PROC_READ_BYTES_PER_S,
                &["30", "reread"],
                i,
                if on { 60e6 } else { 0.0 },
            );
            if on {
                d.push(
                    &process::PROC_REAPED_READ_BYTES_PER_S,
                    &["10", "python3"],
                    i,
                    1e9,
                );
            }
        }
        d
    }

    #[test]
    fn a_cgroup_thrashing_at_its_limit_is_named_with_the_reader_inside_it() {
        let d = memcg_thrash(true);
        let f = &run(&d)[0];
        assert!(
            f.title
                .starts_with("page-cache thrashing in memory cgroup /lab at its limit"),
            "{}",
            f.title
        );
        // The reader that did the work, in the cgroup where the thrash happened; not the
        // parent elsewhere whose counters carried its bytes.
        assert_eq!(f.culprit.comm.as_deref(), Some("cat"), "{}", f.title);
        assert_eq!(f.culprit.pid, Some(21));
        assert_eq!(f.culprit.cgroup.as_deref(), Some("/lab"));
        assert!(
            f.title.contains("started by python3 (10) outside it"),
            "{}",
            f.title
        );
        assert!(f.confidence >= 0.85, "{}", f.confidence);
        assert!(f
            .evidence
            .iter()
            .any(|e| e.signal == "cgroup./lab.memory.refault_file_total"));
        assert!(
            f.remediation.iter().any(|r| r.contains("O_DIRECT")
                && r.contains("POSIX_FADV_DONTNEED")
                && r.contains("nocache")),
            "{:?}",
            f.remediation
        );
        assert!(f.remediation[0].contains("raise /lab's memory limit"));
    }

    #[test]
    fn a_reader_re_reading_its_own_files_is_advice() {
        // A backup loop over a tree in a cgroup of its own: its files come back as refaults,
        // and nobody else reads or faults.
        let mut d = Data::seconds(12, 4);
        d.procs.insert(40, proc("tar", 1, "/backup"));
        for i in 0..12u32 {
            let on = i >= 4;
            d.push(
                &cgroup::MEMORY_REFAULT_FILE_PER_S,
                &["/backup"],
                i,
                if on { 3000.0 } else { 0.0 },
            );
            d.push(
                &mem::RECLAIM_REFAULT_FILE_PER_S,
                &[],
                i,
                if on { 3000.0 } else { 5.0 },
            );
            d.push(&process::PROC_READ_BYTES_PER_S, &["40", "tar"], i, 2e6);
        }
        let f = &run(&d)[0];
        assert_eq!(f.culprit.comm.as_deref(), Some("tar"));
        assert!(f.confidence < 0.5, "{} {}", f.confidence, f.title);
    }

    #[test]
    fn work_is_not_carried_across_the_cgroup_boundary() {
        // No reader seen inside: the bytes reached a parent outside, which is not the culprit.
        let mut d = memcg_thrash(false);
        d.procs.remove(&20);
        let f = &run(&d)[0];
        assert_ne!(f.culprit.comm.as_deref(), Some("python3"), "{}", f.title);
        assert_eq!(f.culprit.cgroup.as_deref(), Some("/lab"));
        // The re-reader is the only reader seen inside: it is named, in its cgroup.
        assert_eq!(f.culprit.comm.as_deref(), Some("reread"));
    }

    #[test]
    fn refaults_at_the_cgroup_rank_the_thrash_over_its_stalls() {
        use jitterscope_model::metrics::tracer;
        let mut d = memcg_thrash(true);
        for i in 0..12u32 {
            let on = i >= 4;
            d.push(
                &tracer::RECLAIM_STALLS_PER_S,
                &[],
                i,
                if on { 3000.0 } else { 0.0 },
            );
            d.push(
                &tracer::RECLAIM_STALL_PCT,
                &[],
                i,
                if on { 20.0 } else { 0.0 },
            );
            d.push(
                &tracer::RECLAIM_CGROUP_STALLS_PER_S,
                &["/lab"],
                i,
                if on { 3000.0 } else { 0.0 },
            );
            for (pid, comm) in [("30", "reread"), ("21", "cat")] {
                d.push(
                    &tracer::RECLAIM_PROC_STALLS_PER_S,
                    &[pid, comm],
                    i,
                    if on { 1500.0 } else { 0.0 },
                );
                d.push(
                    &tracer::RECLAIM_PROC_MEMCG_STALLS_PER_S,
                    &[pid, comm],
                    i,
                    if on { 1500.0 } else { 0.0 },
                );
            }
        }
        let mut all = (super::super::reclaim::RULE.run)(&d);
        all.extend(run(&d));
        all.sort_by(|a, b| b.confidence.total_cmp(&a.confidence));
        let out = crate::chain::link(&d, all);
        assert_eq!(
            out[0].rule_id, "memory.pagecache-thrash",
            "{}",
            out[0].title
        );
        assert_eq!(out[1].rule_id, "memory.direct-reclaim");
        assert_eq!(out[1].caused_by.len(), 1, "{:?}", out[1].caused_by);
        assert_eq!(out[0].causes[0].finding, 2);
    }
}
