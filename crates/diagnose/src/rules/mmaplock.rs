//! `memory.mmap-lock-contention` — a process's threads queueing on its address-space lock.
//!
//! **Mechanism.** Each process has one `mmap_lock` (an rwsem in its `mm_struct`; `mmap_sem`
//! before 5.8). `mmap`, `munmap`, `brk`, `mprotect` and `mremap` take it for writing, page
//! faults (before per-VMA locks, 6.4 for anonymous memory) and readers of
//! `/proc/<pid>/maps`/`smaps` for reading. A writer waits for every reader, and once a writer
//! waits, new readers queue behind it: threads that map and unmap from every core (an
//! allocator returning memory, a runtime growing stacks or heaps) serialise the whole process,
//! page faults included. The threads sleep in the kernel; the service sees latency with no CPU
//! or memory shortage anywhere.
//!
//! **Evidence.** The mmaplock tracer (`lock:contention_begin/end`, 5.19+, kept when the lock is
//! the waiter's own `mm->mmap_lock`): waits per process by kind
//! (`mmaplock.proc.<pid>.<comm>.waits_per_s`, `write_waits_per_s`), the time its threads spent
//! waiting (`wait_pct`, summed over threads) and the longest wait; the process's threads and
//! system CPU, its allocator, the kernel's hottest functions.
//!
//! **Thresholds.** A process whose threads waited >= 10% of the window in total (0.1
//! thread-seconds per second) and >= 1 s over it, at >= 5x its own baseline level when it
//! waited in the baseline too. Confidence by the share, 0.5 at 10%, 0.95 at 200% (two threads
//! asleep on the lock all the time).
//!
//! **Remediation.** By kind: writers waiting (map/unmap churn) are cured in the allocator or
//! runtime (keep freed memory mapped: a longer decay, a larger mmap threshold; reuse thread
//! stacks); readers waiting are page faults behind the writers (a 6.4+ kernel takes anonymous
//! faults under per-VMA locks; prefault with MAP_POPULATE or mlock) or behind a reader of
//! `/proc/<pid>/smaps` (read it less often).
//!
//! **References.** Documentation/mm/process_addrs.rst (mmap_lock, VMA locks); LWN "The
//! ongoing search for mmap_lock scalability" (2022); LWN "Per-VMA locks" (2023).

use jitterscope_model::metrics::{process, tracer};
use jitterscope_sources::system::kernel::KernelVersion;

use super::{
    confidence, finding, moved_first, proc_culprit, procs_time_share, rule, series_fact, Res, Take,
};
use crate::data::Data;
use crate::Finding;

rule! {
    "memory.mmap-lock-contention",
    "a process's threads queueing on its mmap_lock: map/unmap churn or page faults serialised",
    mechanism,
    reads: tracer::MMAPLOCK_PROC_WAITS_PER_S, tracer::MMAPLOCK_PROC_WRITE_WAITS_PER_S,
        tracer::MMAPLOCK_PROC_WAIT_PCT, tracer::MMAPLOCK_PROC_WAIT_MAX_USEC,
        process::PROC_THREADS, process::PROC_SYS_PCT,
}

/// Least share of the window the process's threads spent waiting, summed over threads, %.
pub const WAIT_PCT: f64 = 10.0;

/// Least time waited over the window, thread-seconds.
const WAIT_S: f64 = 1.0;

/// Least ratio of the window's level to the process's own baseline level.
const RATIO: f64 = 5.0;

/// Least share of the window each of its threads waited on average, %.
const PER_THREAD_PCT: f64 = 1.0;

fn run(d: &Data) -> Vec<Finding> {
    // A process of hundreds of threads reaches the share with each thread waiting a fraction
    // of a percent, which no request notices: each thread must have waited PER_THREAD_PCT on
    // average (when the thread count is known).
    let waiters: Vec<_> =
        procs_time_share(d, &tracer::MMAPLOCK_PROC_WAIT_PCT, WAIT_PCT, WAIT_S, RATIO)
            .into_iter()
            .filter(|p| {
                let t = d
                    .stats(&process::PROC_THREADS, &[&p.pid.to_string(), &p.comm])
                    .max;
                t <= 0.0 || p.value / t >= PER_THREAD_PCT
            })
            .collect();
    let Some(top) = waiters.first() else {
        return Vec::new();
    };
    let (pid, comm) = (top.pid, top.comm.clone());
    let labels = [pid.to_string(), comm.clone()];
    let labels = [labels[0].as_str(), labels[1].as_str()];
    let waits = d.stats(&tracer::MMAPLOCK_PROC_WAITS_PER_S, &labels);
    let writes = d.stats(&tracer::MMAPLOCK_PROC_WRITE_WAITS_PER_S, &labels);
    let longest = d.stats(&tracer::MMAPLOCK_PROC_WAIT_MAX_USEC, &labels);
    let threads = d.stats(&process::PROC_THREADS, &labels);
    let write_share = if waits.sum > 0.0 {
        writes.sum / waits.sum
    } else {
        0.0
    };
    let mut culprit = proc_culprit(d, pid, &comm, Res::Cpu);
    let alloc = super::tlb::allocator(d, pid);
    if let Some((name, path)) = &alloc {
        culprit.library = Some(format!("{name} ({path})"));
    }
    let mut f = finding(
        &RULE,
        d,
        format!(
            "mmap_lock contention: {comm} ({pid})'s threads waited {:.0}% of the time for its address-space lock ({:.0} waits, {:.0}% to write{})",
            top.value,
            waits.sum,
            100.0 * write_share,
            if longest.n > 0 {
                format!(", longest {:.1} ms", longest.max / 1000.0)
            } else {
                String::new()
            }
        ),
        confidence(top.value, WAIT_PCT, 200.0),
        culprit,
    );
    f.evidence.push(series_fact(
        top.series,
        top.value,
        Take::Mean,
        format!(
            "time {comm}'s threads waited for its mmap_lock, % of the window summed over threads"
        ),
    ));
    f.cite(
        d,
        &tracer::MMAPLOCK_PROC_WAITS_PER_S,
        &labels,
        Take::Sum,
        "contended acquisitions (the threads slept)",
    );
    f.cite(
        d,
        &tracer::MMAPLOCK_PROC_WRITE_WAITS_PER_S,
        &labels,
        Take::Sum,
        "... of them for writing (mmap, munmap, brk, mprotect)",
    );
    f.cite(
        d,
        &tracer::MMAPLOCK_PROC_WAIT_MAX_USEC,
        &labels,
        Take::Max,
        "longest wait",
    );
    f.cite(d, &process::PROC_THREADS, &labels, Take::Max, "its threads");
    f.cite(
        d,
        &process::PROC_SYS_PCT,
        &labels,
        Take::Mean,
        "its system CPU",
    );
    f.cite_procs(&waiters[1..], 2, "also waiting for their mmap_lock:", "");
    if let Some(h) = super::kernel_hot_note(d, 5) {
        f.evidence.push(h);
    }
    let wait_series = d.get(&tracer::MMAPLOCK_PROC_WAIT_PCT, &labels);
    f.moved_first = moved_first(d, &[(wait_series, WAIT_PCT)]);
    f.onset = wait_series.and_then(|s| d.onset_over_baseline(s, WAIT_PCT));
    let who = format!("{comm} ({pid})");
    if write_share >= 0.5 {
        f.remediation.push(match alloc.as_ref().map(|a| a.0.as_str()) {
            Some("jemalloc") => format!("{who} maps and unmaps from many threads, and uses jemalloc: its decay-driven purges (madvise) and extent maps and unmaps take the lock; a longer dirty_decay_ms/muzzy_decay_ms purges less often, and opt.retain (on by default on 64-bit Linux) must stay on so that freed extents stay mapped"),
            Some("glibc malloc") => format!("{who} maps and unmaps from many threads and maps only glibc's allocator: if the calls come from malloc, raise MALLOC_MMAP_THRESHOLD_ (blocks above it get an mmap and a munmap each) and MALLOC_TRIM_THRESHOLD_ / MALLOC_TOP_PAD_ (arenas shrink less often); if the program maps memory itself, keep and reuse the mappings"),
            Some(other) => format!("{who} maps and unmaps from many threads, and uses {other}: lengthen its release interval so memory is returned in batches, not per free"),
            None => format!("{who} maps and unmaps from many threads: keep memory mapped and reuse it (an allocator's decay or mmap threshold, pooled buffers, reused thread stacks) so fewer calls take the lock for writing"),
        });
    }
    if write_share >= 0.5 && threads.max > 0.0 {
        f.remediation.push(format!(
            "fewer threads doing the mapping: the lock is one per process, so of its {:.0} threads those that map and unmap wait for each other however many CPUs there are",
            threads.max
        ));
    }
    if write_share < 0.9 {
        const PROC_READERS: &str = "readers of /proc/<pid>/maps, smaps or smaps_rollup hold the lock for reading while they walk every mapping: read them less often (monitoring agents, profilers)";
        let v = |a, b| KernelVersion::new(a, b, 0);
        f.remediation.push(match d.kernel_version() {
            Some(k) if k < v(6, 4) => format!(
                "readers waited too: on this {k} kernel every page fault takes mmap_lock for reading and queues behind a waiting writer (6.4+ takes anonymous-memory faults under per-VMA locks, 6.7+ most file-backed ones too); until then, prefault the hot memory (MAP_POPULATE, mlock). Also, {PROC_READERS}"
            ),
            Some(k) if k < v(6, 7) => format!(
                "readers waited too: on this {k} kernel anonymous-memory faults take per-VMA locks, but file-backed faults still take mmap_lock (6.7+ handles most of them under per-VMA locks); prefault hot mapped files (MAP_POPULATE). Also, {PROC_READERS}"
            ),
            Some(k) => format!(
                "readers waited too: on this {k} kernel most page faults take per-VMA locks and fall back to mmap_lock only on a mapping being changed, so the readers are likely elsewhere: {PROC_READERS}"
            ),
            None => format!(
                "readers waited too: page faults before per-VMA locks (6.4 for anonymous memory, 6.7 for most file-backed) take mmap_lock for reading, and {PROC_READERS}"
            ),
        });
    }
    f.references = vec![
        "https://docs.kernel.org/mm/process_addrs.html",
        "https://lwn.net/Articles/893906/",
        "https://lwn.net/Articles/937943/",
    ];
    vec![f]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ten baseline seconds, ten in which `app` (pid 5, 8 threads) waits `pct`% of the time
    /// on 300 waits a second, `write` of them to write; its baseline waits `base_pct`%.
    fn data(pct: f64, base_pct: f64, write: f64) -> Data {
        data_threads(pct, base_pct, write, 8.0)
    }

    fn data_threads(pct: f64, base_pct: f64, write: f64, threads: f64) -> Data {
        let mut d = Data::seconds(20, 10);
        for i in 0..20u32 {
            let on = i >= 10;
            let l = &["5", "app"];
            let v = if on { pct } else { base_pct };
            if v > 0.0 {
                d.push(&tracer::MMAPLOCK_PROC_WAIT_PCT, l, i, v);
                d.push(&tracer::MMAPLOCK_PROC_WAITS_PER_S, l, i, 300.0);
                d.push(
                    &tracer::MMAPLOCK_PROC_WRITE_WAITS_PER_S,
                    l,
                    i,
                    300.0 * write,
                );
                d.push(&tracer::MMAPLOCK_PROC_WAIT_MAX_USEC, l, i, 40_000.0);
            }
            d.push(&process::PROC_THREADS, l, i, threads);
        }
        d
    }

    #[test]
    fn threads_asleep_on_their_mmap_lock_name_the_process_and_the_kind() {
        let f = run(&data(290.0, 0.0, 1.0));
        assert_eq!(f.len(), 1, "{f:#?}");
        let f = &f[0];
        assert_eq!(
            f.title,
            "mmap_lock contention: app (5)'s threads waited 290% of the time for its address-space lock (3000 waits, 100% to write, longest 40.0 ms)"
        );
        assert_eq!(f.culprit.comm.as_deref(), Some("app"));
        assert_eq!(f.confidence, 0.95);
        assert!(f.remediation[0].contains("maps and unmaps from many threads"));
        assert!(f.remediation[1].contains("8 threads"));
        // All waits were writes: no advice about readers.
        assert_eq!(f.remediation.len(), 2);
    }

    #[test]
    fn readers_waiting_get_the_fault_advice() {
        let f = run(&data(50.0, 0.0, 0.2));
        assert_eq!(f.len(), 1);
        assert!(f[0]
            .remediation
            .iter()
            .any(|r| r.starts_with("readers waited too")));
        assert!(!f[0]
            .remediation
            .iter()
            .any(|r| r.contains("maps and unmaps")));
    }

    #[test]
    fn little_or_usual_waiting_is_not_contention() {
        // 5% of the time: under the threshold.
        assert!(run(&data(5.0, 0.0, 1.0)).is_empty());
        // Always waiting about as much: no episode.
        assert!(run(&data(290.0, 200.0, 1.0)).is_empty());
        // 290% over 400 threads is 0.7% of each thread's time: no request notices.
        assert!(run(&data_threads(290.0, 0.0, 1.0, 400.0)).is_empty());
        assert_eq!(run(&data_threads(290.0, 0.0, 1.0, 100.0)).len(), 1);
    }
}
