//! The scenarios: one per seed mechanism, plus two benign controls. Each documents what it
//! reproduces, the seed case it mirrors, the signals it should move and its bounds; its
//! `start` builds the sandbox and returns the checks `lab check` applies to the recording.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

use jitterscope_model::metrics::{cgroup, cpu, irq, mem, process, tracer};
use jitterscope_model::registry::Select;
use jitterscope_model::tracers::TracerId;

use crate::sandbox::{LabCgroup, Limits, Sandbox};
use crate::signature::{Check, Cmp, Stat};
use crate::worker::cpus;
use crate::{Env, Scenario, Started};

const MIB: u64 = 1 << 20;

/// Every scenario, in `lab list` order.
pub static SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "cfs-throttle",
        mirrors: "case 2 (Indeed: CFS throttling at low CPU usage; their fibtest reproducer)",
        reproduces: "fibtest: one fast thread computing Fibonacci numbers flat out, pinned to the \
            first CPU, and slow threads (100 iterations, then 10 ms of sleep, like async workers) \
            pinned to the last CPU, in a cgroup with a small CFS quota. The cgroup is throttled \
            in most enforcement periods while its usage stays at a fraction of one core, and \
            the slow threads wait for the next period. On kernels with the fix (de53fd7aedb1, \
            5.4+) the cgroup uses its whole quota (usage_of_quota_pct near 100); on the \
            affected ones (512ac999d275, 4.18 to 5.3) it is throttled well below its quota, \
            which is what case 2 found.",
        signals: "cgroup <lab>/cfs-throttle: cpu.throttled_pct > 5 (near 100 alone), nr_throttled_per_s, \
            throttled_ms_per_s; usage_pct at the quota (20% low, 10% high) — far below one core",
        bounds: "CPU: the quota (0.2 core low, 0.1 core high); no memory use to speak of",
        control: false,
        expected_rule: Some("cpu.cfs-throttling"),
        expected_links: &[],
        expected_roots: &[],
        record_args: &[],
        default_duration: Duration::from_secs(15),
        controllers: &["cpu"],
        start: cfs_throttle,
    },
    Scenario {
        name: "negative-dentry",
        mirrors: "case 1 (NSS sdb_measureAccess probing non-existent files: millions of negative \
            dentries, then reclaim and sys-CPU spikes)",
        reproduces: "a process probing unique non-existent names (`.<n>_dbaccess.tmp`, as NSS \
            does) with access(2), each failure leaving a negative dentry, in a memory-limited \
            cgroup; after each batch it allocates anonymous memory up to near the limit, so \
            reclaim has to shrink the dentry cache.",
        signals: "dentry.nr_negative +100k (low) / +1M (high), slab dentry growth, failed \
            look-ups by lab-nss-probe (lookups tracer), super_cache_scan shrinker calls, \
            reclaim stalls of the lab cgroup",
        bounds: "memory: cgroup limit 160 MiB (low) / 1 GiB (high), dentries included (they are \
            charged to it); CPU: one thread",
        control: false,
        expected_rule: Some("memory.dcache-bloat"),
        expected_links: &[],
        expected_roots: &[],
        record_args: &[],
        default_duration: Duration::from_secs(30),
        controllers: &["memory"],
        start: negative_dentry,
    },
    Scenario {
        name: "shrinker-scale",
        mirrors: "case 3 (Virtuozzo: shrink_slab walking every memcg x superblock pair)",
        reproduces: "N memcgs (200 low, 2000 high), each with its own tmpfs mount and a file \
            created from inside it (plus 16 failed look-ups, so the superblock has objects on \
            that memcg's LRU), then timed reclaim rounds over all of them: \
            `memory.reclaim` on the lab parent where the kernel offers it (cgroup v2, 5.19+); \
            elsewhere `drop_caches` = 2, case 3's script, which drops reclaimable slab \
            (dentries, inodes, and with them the cached pages of the inodes it frees) \
            host-wide, but not the page cache as a whole (3). The run says which it uses. \
            The worker reports each round's time; before 4.19 they take seconds.",
        signals: "shrinker.super_cache_scan calls (>= N in the first round), the lab memcgs in \
            the cgroup series, sys CPU during the rounds",
        bounds: "memory: tmpfs mounts of 1 MiB each holding one byte, under a 1 GiB limit on \
            the memcgs' parent; kernel memory of a few KiB per memcg and CPU outside it \
            (2000 memcgs on 64 CPUs: a few hundred MiB); the mounts live in a private mount \
            namespace of the worker and vanish with it",
        control: false,
        expected_rule: Some("memory.shrinker-cost"),
        expected_links: &[],
        expected_roots: &[],
        record_args: &[],
        default_duration: Duration::from_secs(30),
        controllers: &["memory"],
        start: shrinker_scale,
    },
    Scenario {
        name: "tlb-shootdown",
        mirrors: "case 4 (jemalloc purging with madvise(MADV_DONTNEED): TLB-shootdown IPI storms)",
        reproduces: "one process with a thread pinned to every CPU, each touching its own \
            region then madvise(MADV_DONTNEED)-ing it, as jemalloc's purging does; every call \
            flushes the TLBs of the other CPUs running the process. A victim process measures \
            how late its 1 ms sleeps wake up.",
        signals: "irq.tlb_per_s >= 10x the baseline, tlb.proc.<pid>.lab-madvise shootdown IPIs, \
            madvise.proc.<pid>.lab-madvise.dontneed_per_s, the victim's wake-up lateness",
        bounds: "memory: 4 KiB (low) / 1 MiB (high) per thread; CPU: all CPUs (low: half of \
            each, in 50 ms bursts every 100 ms)",
        control: false,
        expected_rule: Some("cpu.tlb-shootdown"),
        expected_links: &[],
        expected_roots: &[],
        record_args: &[],
        default_duration: Duration::from_secs(15),
        controllers: &["cpu"],
        start: tlb_shootdown,
    },
    Scenario {
        name: "reclaim-storm",
        mirrors: "cases 1 and 5 (allocation stalls in direct reclaim when free memory runs out)",
        reproduces: "a memory-limited cgroup whose page cache fills the limit (a process reading \
            a file of 80% of it), then the same process allocates anonymous memory in a burst: \
            every page has to be reclaimed first, by the allocating task itself.",
        signals: "reclaim.cgroup.<lab>.stalls_per_s, reclaim.proc.<pid>.lab-reclaim stalls and \
            stall time, the cgroup's memory at its limit",
        bounds: "memory: cgroup limit 192 MiB (low) / 1 GiB (high); disk: one file of 160 MiB / \
            900 MiB, removed afterwards",
        control: false,
        expected_rule: Some("memory.direct-reclaim"),
        expected_links: &[],
        expected_roots: &[],
        record_args: &[],
        default_duration: Duration::from_secs(20),
        controllers: &["memory"],
        start: reclaim_storm,
    },
    Scenario {
        name: "pagecache-thrash",
        mirrors: "case 5 (a fast reader flooding the page cache and evicting another process's \
            working set: refaults, major faults)",
        reproduces: "a process that maps a file and reads its pages in random order (a \
            database's working set, MADV_RANDOM: no read-ahead hides the faults), and a reader \
            streaming a file several times larger, both in one \
            memory-limited cgroup: the stream keeps pushing the working set out, which comes \
            back as major faults and refaults.",
        signals: "proc.<pid>.lab-workset.majflt_per_s, reclaim.refault_file_per_s, \
            reclaim.pgmajfault_per_s, disk reads of the lab's device",
        bounds: "memory: cgroup limit 160 MiB (low) / 512 MiB (high); disk: 128 + 384 MiB (low) / \
            448 MiB + 2 GiB (high), removed afterwards",
        control: false,
        expected_rule: Some("memory.pagecache-thrash"),
        expected_links: &[("memory.pagecache-thrash", "memory.direct-reclaim")],
        expected_roots: &[],
        record_args: &[],
        default_duration: Duration::from_secs(20),
        controllers: &["memory"],
        start: pagecache_thrash,
    },
    Scenario {
        name: "memcg-thrash",
        mirrors: "case 5 inside a container: page-cache thrash at a memory cgroup's limit, the \
            streaming reader started from outside the cgroup",
        reproduces: "one memory-limited cgroup holding a service that re-reads its hot file \
            through read() (lab-reread) and a stream of `cat`s of a file several times the \
            limit. Each `cat` is started by a `sh -c` wrapper that moves itself into the \
            limited cgroup; the wrappers are started by a loop in another cgroup, which reaps \
            them and so gets the readers' bytes in its own counters. The stream evicts the hot \
            file, which comes back from storage on every pass (refaults of the cgroup), and \
            allocations at the limit stall in memcg reclaim.",
        signals: "cgroup.<lab>/limited.memory.refault_file_per_s, \
            proc.<pid>.lab-reread.read_bytes_per_s, proc.<pid>.sh.reaped_read_bytes_per_s, \
            reclaim.cgroup.<lab>/limited.stalls_per_s",
        bounds: "memory: cgroup limit 160 MiB (low) / 256 MiB (high); disk: 96 + 384 MiB (low) / \
            160 MiB + 2 GiB (high), removed afterwards",
        control: false,
        expected_rule: Some("memory.pagecache-thrash"),
        expected_links: &[("memory.pagecache-thrash", "memory.direct-reclaim")],
        expected_roots: &[],
        record_args: &[],
        default_duration: Duration::from_secs(20),
        controllers: &["memory"],
        start: memcg_thrash,
    },
    Scenario {
        name: "two-incidents",
        mirrors: "two of the seeds at once on one host: case 2's throttling in one container \
            while case 5's page-cache thrash happens in another",
        reproduces: "cfs-throttle's fibtest in one lab cgroup with a small CFS quota, and \
            memcg-thrash's re-reader and stream of `cat`s in a memory-limited cgroup beside it \
            (their launcher in a third). Each incident must be a root of the report with its \
            own culprit and cgroup; neither may be chained under the other.",
        signals: "cgroup.<lab>/throttled.cpu.throttled_pct, \
            cgroup.<lab>/memcg/limited.memory.refault_file_per_s, reclaim stalls of the limited \
            cgroup, run-queue waits of the throttled one",
        bounds: "as cfs-throttle and memcg-thrash together: CPU 0.2 core (the quota, low); \
            memory limit 160 MiB, disk 96 + 384 MiB (low)",
        control: false,
        expected_rule: Some("cpu.cfs-throttling"),
        expected_links: &[],
        expected_roots: &["cpu.cfs-throttling", "memory.pagecache-thrash"],
        record_args: &[],
        default_duration: Duration::from_secs(20),
        controllers: &["cpu", "memory"],
        start: two_incidents,
    },
    Scenario {
        name: "native-leak",
        mirrors: "case 5 (a C extension leaking outside the Python heap; strings found with \
            `strings | sort | uniq -c` on the [heap] dump)",
        reproduces: "a Python process that, through ctypes, mallocs 4 KiB blocks of 64-byte \
            records `jitterscope.lab.context_info{req=N}` and never frees them, while its Python \
            objects stay flat.",
        signals: "proc.<pid>.lab-native-leak.rss_bytes growing steadily for the whole run (8 MiB/s \
            low, 32 MiB/s high, slower when the run is long enough to reach the cap before its \
            end); `jitterscope memleak` finds the marker among the growing strings",
        bounds: "memory: at most 96 MiB (low) / 1 GiB (high), reached at the end of the run; \
            cgroup limit 256 MiB above that",
        control: false,
        expected_rule: Some("memory.leak"),
        expected_links: &[],
        expected_roots: &[],
        record_args: &[],
        default_duration: Duration::from_secs(30),
        controllers: &["memory"],
        start: native_leak,
    },
    Scenario {
        name: "python-leak",
        mirrors: "case 5's contrast (growth inside the Python heap, which gc and guppy can see)",
        reproduces: "a Python process appending dicts holding strings to a module-level list \
            that is never trimmed.",
        signals: "proc.<pid>.lab-python-leak.rss_bytes growing steadily for the whole run (as \
            native-leak); `jitterscope memleak` attributes it to Python objects",
        bounds: "memory: at most 96 MiB (low) / 1 GiB (high) of objects, reached at the end of \
            the run; cgroup limit 256 MiB above that",
        control: false,
        expected_rule: Some("memory.leak"),
        expected_links: &[],
        expected_roots: &[],
        record_args: &[],
        default_duration: Duration::from_secs(30),
        controllers: &["memory"],
        start: python_leak,
    },
    Scenario {
        name: "oom-leak",
        mirrors: "case 5 (a leak that ends where most do: the OOM killer at a memory limit)",
        reproduces: "a Python process that mallocs natively and never frees (as the native-leak \
            scenario), in a memory cgroup whose limit it reaches at about 70% of the run: the \
            OOM killer kills it. The cgroup is in the memory hierarchy only (cgroup v1: its \
            cpu cgroup is the root), so a culprit named by its cpu cgroup would read `/`.",
        signals: "proc.<pid>.lab-oom-leak.rss_bytes growing steadily, then \
            proc.<pid>.lab-oom-leak.exited; cgroup.<lab>.memory.oom_kill_per_s; the kernel's OOM \
            report (oom.kill.<pid>.lab-oom-leak.rss_bytes); reclaim stalls at the limit",
        bounds: "memory: the cgroup limit, what the leak reaches at 70% of the run (12 MiB/s low, \
            32 MiB/s high) plus 10 MiB, at least 64 MiB; the OOM killer ends the workload \
            inside the lab cgroup",
        control: false,
        expected_rule: Some("memory.leak"),
        expected_links: &[("memory.leak", "memory.oom-kill")],
        expected_roots: &[],
        record_args: &[],
        default_duration: Duration::from_secs(30),
        controllers: &["memory"],
        start: oom_leak,
    },
    Scenario {
        name: "worker-leak",
        mirrors: "case 5 (gunicorn workers growing natively), as such incidents end: the server \
            killed",
        reproduces: "a pre-fork master (lab-prefork) with two workers (lab-leak-worker) that \
            leak natively; at about 70% of the run the master SIGKILLs them and stays, not \
            waiting, for two seconds (the workers are zombies: /proc reports their RSS as 0), \
            then is SIGKILLed itself.",
        signals: "proc.<pid>.lab-leak-worker.rss_bytes growing steadily, then ending (no 0 \
            recorded), proc.<pid>.lab-leak-worker.exited and exit_signal 9",
        bounds: "memory: 8 MiB/s per worker (low) / 24 MiB/s (high) for at most the run; cgroup \
            limit 512 MiB (low) / 2 GiB (high)",
        control: false,
        expected_rule: Some("memory.leak"),
        expected_links: &[],
        expected_roots: &[],
        record_args: &[],
        default_duration: Duration::from_secs(15),
        controllers: &["memory"],
        start: worker_leak,
    },
    Scenario {
        name: "nss-probe",
        mirrors: "case 1's precursor, as issue 18 met it: NSS softokn's sdb_measureAccess \
            probing non-existent names thousands of times a second while the dentry cache does \
            not grow",
        reproduces: "a loop running Debian's certutil (libnss3-tools) on an sql: database with \
            NSS_SDB_USE_CACHE set to neither yes nor no, which makes NSS 3.87 time the database \
            directory by access()ing `.<n>_dOeSnotExist_.db` names in a temporary directory \
            for a fixed time per run (~28k calls here); removing that directory prunes the negative dentries, so \
            nothing grows and the on-demand lookups tracer is never attached. The recorder runs \
            its census every 3 s (`--census-every 3s`, 60 s by default) to see it within the run.",
        signals: "lookups.proc.<pid>.certutil.enoent_per_s in the census intervals \
            (tracer.lookups.census 1), lookups.pattern.*_dOeSnotExist_.db, no growth of \
            dentry.nr_negative",
        bounds: "CPU: one certutil at a time, ~0.1 s of system time every 1.5 s; files: one \
            NSS database of ~100 KiB in the lab directory",
        control: false,
        expected_rule: Some("fs.failing-lookups"),
        expected_links: &[],
        expected_roots: &[],
        record_args: &["--census-every", "3s"],
        default_duration: Duration::from_secs(30),
        controllers: &["cpu"],
        start: nss_probe,
    },
    Scenario {
        name: "softirq-storm",
        mirrors: "beyond the seeds (issue 50): a CPU taken by soft interrupts, as by a NIC \
            queue whose interrupts all land on one core",
        reproduces: "a process sending small UDP datagrams over loopback with sendmmsg from a \
            thread pinned to the last CPU, to a reader thread that drains them. On loopback the \
            receive half of each packet (IP, UDP, the socket queue, the reader's wake-up) runs \
            as the NET_RX soft interrupt on the sending CPU: that CPU spends a fifth to a third \
            of its time in softirq while the host as a whole stays mostly idle.",
        signals: "cpu.<last>.softirq_pct >= 10 (baseline near 0), cpu.<last>.softirq.NET_RX_per_s \
            in the hundreds of thousands, lab-flood's system CPU",
        bounds: "CPU: one CPU 60% of the time (low: 60 ms bursts every 100 ms) or all of it \
            (high), and the reader's share of another; loopback only, nothing leaves the host; \
            socket buffers only",
        control: false,
        expected_rule: Some("cpu.softirq-storm"),
        expected_links: &[],
        expected_roots: &[],
        record_args: &[],
        default_duration: Duration::from_secs(15),
        controllers: &["cpu"],
        start: softirq_storm,
    },
    Scenario {
        name: "memory-high",
        mirrors: "beyond the seeds (issue 50): a container throttled at its memory.high (systemd \
            MemoryHigh=, Kubernetes MemoryQoS) well below the limit its owner knows of",
        reproduces: "a process in a cgroup v2 with memory.high set (and memory.max twice it, no \
            swap) that maps anonymous memory an eighth over memory.high, touches every page, \
            holds it and unmaps it, over and over. The pages over the line cannot be reclaimed \
            without swap, so after each batch of charges the task reclaims from its cgroup and \
            then sleeps the kernel's over-high penalty (5.4+): it crawls, and is never \
            OOM-killed. Needs the memory controller on cgroup v2.",
        signals: "cgroup <lab>/memory-high: memory.events.high_per_s, usage at memory.high, \
            pressure.memory.some_pct; memcg reclaim stalls of lab-overhigh",
        bounds: "memory: memory.high 64 MiB (low) / 256 MiB (high), memory.max twice that, \
            memory.swap.max 0; CPU: one thread, mostly asleep",
        control: false,
        expected_rule: Some("memory.high-throttling"),
        expected_links: &[],
        expected_roots: &[],
        record_args: &[],
        default_duration: Duration::from_secs(15),
        controllers: &["memory"],
        start: memory_high,
    },
    Scenario {
        name: "swap-in",
        mirrors: "beyond the seeds (issue 50): a service whose working set no longer fits its \
            memory limit, swapped out and faulted back in on every access",
        reproduces: "a process in a memory-limited cgroup that may use swap, whose anonymous \
            working set is half again its limit, sweeping it page by page over and over: the \
            page it reads next is always the one evicted longest ago, so every read is a \
            swap-in (a major fault and a disk read) and every page brought back pushes another \
            out. Needs active swap, which the lab never turns on itself (the kernel matrix's \
            guests add a swap file for it).",
        signals: "vmstat.pswpin_per_s and pswpout_per_s from near 0, lab-swapper's \
            majflt_per_s and swap_bytes, its cgroup at its memory limit, memory PSI",
        bounds: "memory: cgroup limit 64 MiB (low) / 256 MiB (high), swap up to twice the \
            working set of 96 MiB / 384 MiB; disk: swap I/O only",
        control: false,
        expected_rule: Some("memory.swap-in"),
        expected_links: &[],
        expected_roots: &[],
        record_args: &[],
        default_duration: Duration::from_secs(20),
        controllers: &["memory"],
        start: swap_in,
    },
    Scenario {
        name: "mmap-lock",
        mirrors: "beyond the seeds (issue 50): a multi-threaded service whose threads queue on \
            their process's mmap_lock, as behind an allocator or runtime that maps and unmaps \
            from every thread (case 4's cousin: the same frees, paid in lock waits rather than \
            shootdowns)",
        reproduces: "one process with four threads per CPU (at least eight) that each map \
            256 KiB of anonymous memory and unmap it, as fast as they can in bursts. mmap and \
            munmap take the process's mmap_lock for writing, so the threads sleep waiting for \
            each other; the mmaplock tracer sees each wait at lock:contention_begin/end \
            (5.19+). The pages are never touched, so munmap frees nothing and sends no TLB \
            shootdowns: the lock is the only mechanism at work (touching them adds case 4's \
            shootdown storm, which the diagnosis then links as the cause of the waits).",
        signals: "mmaplock.proc.<pid>.lab-mapper.waits_per_s and wait_pct from 0, its \
            write_waits_per_s, lab-mapper's system CPU",
        bounds: "CPU: up to all of it in bursts (low: 300 ms every 500 ms); memory: at most \
            threads x 256 KiB mapped at once",
        control: false,
        expected_rule: Some("memory.mmap-lock-contention"),
        expected_links: &[],
        expected_roots: &[],
        record_args: &[],
        default_duration: Duration::from_secs(15),
        controllers: &["cpu"],
        start: mmap_lock,
    },
    Scenario {
        name: "dirty-throttle",
        mirrors: "beyond the seeds (issue 50): a container's writer (a logger, a checkpoint, a \
            copy) stalled in write() by dirty-page throttling, long before the host's own dirty \
            limits would be reached",
        reproduces: "a process in a cgroup v2 with a memory limit of 128 MiB (512 MiB at high \
            intensity) \
            and an io.max of 8 MiB/s of writes on the lab directory's disk, which rewrites a \
            file of twice its memory limit with buffered 1 MiB writes and never syncs. On cgroup \
            v2 the writeback of a cgroup's dirty pages is charged to it, so its io.max slows its \
            own writeback, and its dirty limits are vm.dirty_ratio and dirty_background_ratio of \
            what it may use, a few tens of MiB: past them balance_dirty_pages puts the writer to \
            sleep until writeback catches up. Needs the memory and io controllers on cgroup v2 \
            (v1 neither charges writeback to the writer's cgroup nor throttles it).",
        signals: "dirty.proc.<pid>.lab-writer.paused_pct and pauses_per_s from 0, mem.dirty_bytes \
            and writeback_bytes, the disk's write rate",
        bounds: "memory: cgroup limit 128 MiB (low) / 512 MiB (high); disk: one file of twice \
            the limit in the lab directory, rewritten in place at 8 MiB/s (io.max). Its dirty \
            pages wait seconds for that writeback, and a journaling filesystem may hold its \
            commits for them (ext4 data=ordered waits for newly allocated data): other fsyncs on \
            the lab directory's filesystem can wait too. JITTERSCOPE_LAB_DIR on a filesystem of \
            its own avoids it",
        control: false,
        expected_rule: Some("io.dirty-throttling"),
        expected_links: &[],
        expected_roots: &[],
        record_args: &[],
        default_duration: Duration::from_secs(15),
        controllers: &["memory", "io"],
        start: dirty_throttle,
    },
    Scenario {
        name: "soak",
        mirrors: "a control: a host that is busy and healthy, where jitterscope runs most of \
            the time (issue 46: leak findings for compilers and services warming up)",
        reproduces: "the usual work of a busy host at once, each part in its own lab cgroup: a \
            compile loop (gcc -O2 on a generated C unit of 500 functions, again and again; \
            cc1 grows by about 100 MiB for several seconds and exits, and a build under way \
            when the run stops is let finish), a compressing backup \
            (tar czf of /usr/share into the lab directory, in a loop), cron-like churn (a \
            dozen short processes a second), a web server (Python's http.server on 127.0.0.1) \
            under a loopback load generator, a database doing random reads that fit in memory \
            (SQLite through python3), CPU saturation (one spinning thread per CPU), a service \
            warming up (its RSS rises by 32 MiB for a minute, or a third of a shorter run, then \
            stays flat), and short-lived tools that grow 20-30 MiB over 4-12 s and exit \
            normally.",
        signals: "cpu.usr_pct high; cc1, gzip, lab-httpd, lab-sqlite, lab-warmup and lab-tool \
            processes; no mechanism rule at 0.5 or above, no leak-trend episode",
        bounds: "CPU: every CPU; memory: a few hundred MiB (cc1, the tools, the warm-up, the \
            database); disk: a generated C file, the backup archive of /usr/share (a few \
            hundred MiB, rewritten each round), a database of about 30 MiB, 4 MiB of web \
            files, all in the lab directory; network: loopback only",
        control: true,
        expected_rule: None,
        expected_links: &[],
        expected_roots: &[],
        record_args: &[],
        default_duration: Duration::from_secs(90),
        controllers: &["cpu", "memory"],
        start: soak,
    },
    Scenario {
        name: "cpu-saturation",
        mirrors: "a control: a busy host is not a jitter mechanism",
        reproduces: "one CPU-bound thread per CPU in a lab cgroup without a quota: user CPU near \
            100%, nothing else.",
        signals: "cpu.usr_pct high; no throttling, reclaim stall, TLB storm or negative-dentry \
            growth",
        bounds: "CPU: every CPU for the duration; no memory",
        control: true,
        expected_rule: None,
        expected_links: &[],
        expected_roots: &[],
        record_args: &[],
        default_duration: Duration::from_secs(15),
        controllers: &["cpu"],
        start: cpu_saturation,
    },
    Scenario {
        name: "idle",
        mirrors: "a control: a quiet host",
        reproduces: "a sleeping process in a lab cgroup.",
        signals: "none: no mechanism signal may move",
        bounds: "one sleeping process: no CPU, no memory to speak of",
        control: true,
        expected_rule: None,
        expected_links: &[],
        expected_roots: &[],
        record_args: &[],
        default_duration: Duration::from_secs(15),
        controllers: &["cpu"],
        start: idle,
    },
];

/// The scenario called `name`, or an error listing the names.
pub fn find(name: &str) -> Result<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name).ok_or_else(|| {
        let names: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
        anyhow::anyhow!("unknown scenario {name:?} (one of: {})", names.join(", "))
    })
}

/// The lab's cgroups, as a label glob.
const LAB_CGROUPS: &str = "*jitterscope-lab/*";

/// Checks every mechanism scenario would fail: the controls must pass them all. The first two
/// make sure "nothing moved" is measured, not merely unrecorded: the control's cgroup is in the
/// recording and the reclaim tracer was running.
fn quiet_checks(cg: &LabCgroup) -> Vec<Check> {
    vec![
        Check::new(
            "the control's cgroup is recorded",
            Select::labels(&cgroup::CPU_USAGE_PCT, &[&cg.path]),
            Stat::Series,
            Cmp::AtLeast(1.0),
        ),
        Check::new(
            "the reclaim tracer ran",
            Select::labels(&tracer::ATTACHED, &[TracerId::RECLAIM.name()]),
            Stat::Max,
            Cmp::AtLeast(1.0),
        ),
        Check::new(
            "no TLB-shootdown storm",
            Select::all(&irq::TLB_PER_S),
            Stat::Ratio { floor: 100.0 },
            Cmp::Below(10.0),
        ),
        Check::new(
            "no lab cgroup throttled",
            Select::labels(&cgroup::CPU_THROTTLED_PCT, &[LAB_CGROUPS]),
            Stat::Max,
            Cmp::Below(5.0),
        ),
        Check::new(
            "no reclaim stall in lab cgroups",
            Select::labels(&tracer::RECLAIM_CGROUP_STALLS_PER_S, &[LAB_CGROUPS]),
            Stat::Sum,
            Cmp::Below(1.0),
        ),
        Check::new(
            "no negative-dentry pile-up",
            Select::all(&mem::DENTRY_NR_NEGATIVE),
            Stat::Rise,
            Cmp::Below(100_000.0),
        ),
    ]
}

fn worker(kind: &str, args: &[(&str, String)]) -> Result<Command> {
    let mut c = Sandbox::worker_command(kind)?;
    for (k, v) in args {
        c.arg(format!("{k}={v}"));
    }
    Ok(c)
}

fn path_str(p: &Path) -> Result<String> {
    p.to_str()
        .map(str::to_string)
        .context("the lab directory path is not UTF-8")
}

/// Writes a file of `bytes` (non-zero data, synced), then drops its pages from the page cache,
/// so the workload that reads it later reads from the disk and is charged for the cache.
fn make_file(path: &Path, bytes: u64) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    // SAFETY: statfs fills the zeroed struct for a valid path.
    let fs_type = unsafe {
        let c = std::ffi::CString::new(path_str(dir)?)?;
        let mut st: libc::statfs = std::mem::zeroed();
        if libc::statfs(c.as_ptr(), &mut st) != 0 {
            bail!(
                "statfs {}: {}",
                dir.display(),
                std::io::Error::last_os_error()
            );
        }
        st.f_type as i64
    };
    // Pages of a memory filesystem cannot be evicted: the file would pin host RAM outside every
    // lab limit and the scenario would not reproduce anything.
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    if fs_type == TMPFS_MAGIC || fs_type == RAMFS_MAGIC {
        bail!(
            "{} is on a memory filesystem (tmpfs/ramfs); the scenario needs a disk-backed \
             directory (set JITTERSCOPE_LAB_DIR)",
            dir.display()
        );
    }
    // SAFETY: statvfs fills the zeroed struct for a valid path.
    let avail = unsafe {
        let c = std::ffi::CString::new(path_str(dir)?)?;
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut st) != 0 {
            bail!(
                "statvfs {}: {}",
                dir.display(),
                std::io::Error::last_os_error()
            );
        }
        st.f_bavail as u64 * st.f_frsize as u64
    };
    // Leave at least 1 GiB for everything else on the filesystem.
    if avail < bytes + 1024 * MIB {
        bail!(
            "{} has {} MiB free; the scenario needs {} MiB plus 1 GiB to spare (set \
             JITTERSCOPE_LAB_DIR to a roomier disk-backed directory)",
            dir.display(),
            avail / MIB,
            bytes / MIB
        );
    }
    let mut f =
        std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?;
    let block: Vec<u8> = (0..MIB as usize).map(|i| (i % 251) as u8 + 1).collect();
    let mut left = bytes;
    while left > 0 {
        if crate::stop::requested() {
            bail!("interrupted while writing {}", path.display());
        }
        let n = left.min(MIB) as usize;
        f.write_all(&block[..n])
            .with_context(|| format!("write {}", path.display()))?;
        left -= n as u64;
    }
    f.sync_data()?;
    // SAFETY: advisory call on an open fd.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    Ok(())
}

fn cfs_throttle(e: &mut Env) -> Result<Started> {
    Ok(throttle_in(e, "")?.0)
}

/// fibtest in the lab cgroup `rel` (the scenario's own when empty) with a small quota; the
/// cgroup's path.
fn throttle_in(e: &mut Env, rel: &str) -> Result<(Started, String)> {
    let (quota, slow) = e.intensity.pick((20_000, 2), (10_000, 8));
    let period = 100_000;
    let cg = e.sb.cgroup(rel, Limits::cpu(quota, period))?;
    let cpus = cpus();
    let fast_cpu = cpus[0];
    let slow_cpu = *cpus.last().unwrap_or(&0);
    let pid = e.sb.spawn(
        &cg,
        "fibtest",
        worker(
            "fibtest",
            &[
                ("fast_cpu", fast_cpu.to_string()),
                ("slow_cpu", slow_cpu.to_string()),
                ("slow_threads", slow.to_string()),
            ],
        )?,
    )?;
    let p = &cg.path;
    Ok((
        Started {
            culprit_cgroup: None,
            culprit_comm: None,
            roots: Vec::new(),
            notes: vec![format!(
            "cgroup {p}: quota {} ms per {} ms; fibtest pid {pid}: fast thread on CPU {fast_cpu}, \
             {slow} slow threads on CPU {slow_cpu}",
            quota / 1000,
            period / 1000
        )],
            checks: vec![
                // Alone it is throttled in nearly every period, 500 ms a second; beside the
                // soak (at a quarter of its weight, `BESIDE_CPU_WEIGHT`) and a memcg thrash,
                // 96% of periods and 813 ms a second. `cpu.cfs-throttling` needs a mean of
                // 20%. At equal weight its thread waited for the CPU instead and it was
                // throttled in 4-40% of periods.
                Check::new(
                    "the lab cgroup is throttled in a share of periods",
                    Select::labels(&cgroup::CPU_THROTTLED_PCT, &[p]),
                    Stat::Mean,
                    Cmp::AtLeast(20.0),
                ),
                Check::new(
                    "while using a fraction of one core",
                    Select::labels(&cgroup::CPU_USAGE_PCT, &[p]),
                    Stat::Mean,
                    Cmp::Below(50.0),
                ),
                Check::new(
                    "throttled time accumulates",
                    Select::labels(&cgroup::CPU_THROTTLED_MS_PER_S, &[p]),
                    Stat::Mean,
                    Cmp::AtLeast(100.0),
                ),
            ],
        },
        p.clone(),
    ))
}

fn negative_dentry(e: &mut Env) -> Result<Started> {
    let (limit, names, anon, rise) = e.intensity.pick(
        (160 * MIB, 200_000u64, 140 * MIB, 100_000.0),
        (1024 * MIB, 2_000_000, 900 * MIB, 1_000_000.0),
    );
    let cg = e.sb.cgroup("", Limits::memory(limit))?;
    let dir = e.sb.dir().join("nssdb");
    std::fs::create_dir_all(&dir)?;
    let pid = e.sb.spawn(
        &cg,
        "nss-probe",
        worker(
            "nss-probe",
            &[
                ("dir", path_str(&dir)?),
                ("names", names.to_string()),
                ("anon_bytes", anon.to_string()),
                ("hold_ms", "1500".into()),
            ],
        )?,
    )?;
    let p = &cg.path;
    Ok(Started {
        culprit_cgroup: None,
        culprit_comm: None,
        roots: Vec::new(),
        notes: vec![format!(
            "cgroup {p}: memory limit {} MiB; lab-nss-probe pid {pid}: {names} new names per \
             batch in {}, then {} MiB of anonymous memory",
            limit / MIB,
            dir.display(),
            anon / MIB
        )],
        checks: vec![
            Check::new(
                "negative dentries pile up",
                Select::all(&mem::DENTRY_NR_NEGATIVE),
                Stat::Rise,
                Cmp::AtLeast(rise),
            ),
            Check::new(
                "the failed look-ups are traced to lab-nss-probe",
                Select::labels(&tracer::LOOKUPS_PROC_ENOENT_PER_S, &["*", "lab-nss-probe"]),
                Stat::Sum,
                Cmp::AtLeast(10_000.0),
            ),
            Check::new(
                "reclaim stalls in the lab cgroup",
                Select::labels(&tracer::RECLAIM_CGROUP_STALLS_PER_S, &[p]),
                Stat::Sum,
                // At least one stall: a per-second rate over a span slightly longer than 1 s
                // makes a single stall 0.99.
                Cmp::AtLeast(0.5),
            ),
            Check::new(
                "the superblock shrinker frees dentries",
                Select::labels(&tracer::SHRINKER_FREED_PER_S, &["super_cache_scan"]),
                Stat::Sum,
                Cmp::AtLeast(1000.0),
            ),
        ],
    })
}

fn shrinker_scale(e: &mut Env) -> Result<Started> {
    let (n, rounds) = e.intensity.pick((200u64, 3u64), (2000, 5));
    let home = e.sb.cgroup("home", Limits::default())?;
    let parent = e.sb.cgroup("m", Limits::memory(1024 * MIB))?;
    let mem_parent = parent
        .dir_of("memory")
        .context("no memory hierarchy")?
        .to_path_buf();
    let home_procs = home
        .dir_of("memory")
        .context("no memory hierarchy")?
        .join("cgroup.procs");
    let mode = if parent.is_v2("memory") && mem_parent.join("memory.reclaim").exists() {
        "memcg_reclaim"
    } else {
        "drop_caches"
    };
    let mnt = e.sb.dir().join("mnt");
    std::fs::create_dir_all(&mnt)?;
    // Rounds spread over the run after the set-up (which takes a while at 2000).
    let period_ms = (e.duration.as_millis() as u64 / (rounds + 2)).clamp(300, 5000);
    let pid = e.sb.spawn(
        &home,
        "memcg-mounts",
        worker(
            "memcg-mounts",
            &[
                ("memcg_parent", path_str(&mem_parent)?),
                ("home_procs", path_str(&home_procs)?),
                ("mnt_dir", path_str(&mnt)?),
                ("memcgs", n.to_string()),
                ("rounds", rounds.to_string()),
                ("period_ms", period_ms.to_string()),
                ("negatives", "16".into()),
                ("mode", mode.into()),
            ],
        )?,
    )?;
    let mut notes = vec![format!(
        "lab-shrinker pid {pid}: {n} memcgs under {}/*, one tmpfs each under {} (private \
         mount namespace); {rounds} reclaim rounds ({mode}) every {period_ms} ms",
        parent.path,
        mnt.display()
    )];
    if mode == "drop_caches" {
        notes.push(
            "no scoped reclaim on this host (needs cgroup v2 memory.reclaim): each round drops \
             reclaimable slab host-wide (drop_caches = 2)"
                .into(),
        );
    }
    Ok(Started {
        culprit_cgroup: None,
        culprit_comm: None,
        roots: Vec::new(),
        notes,
        checks: vec![
            Check::new(
                "the lab memcgs are recorded",
                Select::labels(
                    &cgroup::MEMORY_USAGE_BYTES,
                    &[&format!("{}/*", parent.path)],
                ),
                Stat::Series,
                Cmp::AtLeast(n as f64 * 0.9),
            ),
            Check::new(
                "reclaim calls the superblock shrinker for each memcg",
                Select::labels(&tracer::SHRINKER_CALLS_PER_S, &["super_cache_scan"]),
                Stat::Sum,
                Cmp::AtLeast(n as f64),
            ),
            // The shrinker tracer counts by function, not by memcg: the lab's rounds must stand
            // out from what the host's own memcgs cause.
            Check::new(
                "far above the host's own shrinker calls",
                Select::labels(&tracer::SHRINKER_CALLS_PER_S, &["super_cache_scan"]),
                Stat::Ratio { floor: 10.0 },
                Cmp::AtLeast(5.0),
            ),
        ],
    })
}

fn tlb_shootdown(e: &mut Env) -> Result<Started> {
    let ncpu = cpus().len();
    // Low storms in bursts of 50 ms every 100 ms, all threads at once: half of every CPU. A
    // shootdown IPI only goes to CPUs running the process, so with the threads overlapping
    // every call interrupts the others. A pause after every call instead (the first design)
    // left the rate to how the threads' sleeps interleaved: 7-15x the floor on this host and
    // 9-13x in the kernel matrix's emulated guests, against the signature's 10x (1000/s).
    // Bursts of one page per call give ~31k IPIs/s here and 3.7-5.3k/s in the 6.1 and 6.12
    // guests, where each IPI waits for the other emulated CPU (a quarter of each CPU and 16
    // KiB per call gave 1.1-1.5k/s there).
    let (threads, region, period, burst) =
        e.intensity.pick((ncpu, 4, 100, 50), (2 * ncpu, 1024, 0, 0));
    let cg = e.sb.cgroup("storm", Limits::default())?;
    let victim_cg = e.sb.cgroup("victim", Limits::default())?;
    let pid = e.sb.spawn(
        &cg,
        "madvise-storm",
        worker(
            "madvise-storm",
            &[
                ("threads", threads.to_string()),
                ("region_kib", region.to_string()),
                ("period_ms", period.to_string()),
                ("burst_ms", burst.to_string()),
            ],
        )?,
    )?;
    let vpid = e.sb.spawn(
        &victim_cg,
        "victim",
        worker("latency-probe", &[("period_us", "1000".into())])?,
    )?;
    Ok(Started {
        culprit_cgroup: None,
        culprit_comm: None,
        roots: Vec::new(),
        notes: vec![format!(
            "lab-madvise pid {pid}: {threads} threads over {ncpu} CPUs, {region} KiB each, \
             madvise(MADV_DONTNEED) after every touch{}; lab-victim pid {vpid} sleeps 1 ms in a loop",
            if period > 0 {
                format!(", all threads in {burst} ms bursts every {period} ms")
            } else {
                String::new()
            }
        )],
        checks: vec![
            Check::new(
                "TLB-shootdown IPIs at least 10x the baseline",
                Select::all(&irq::TLB_PER_S),
                Stat::Ratio { floor: 100.0 },
                Cmp::AtLeast(10.0),
            ),
            Check::new(
                "the shootdowns are attributed to lab-madvise",
                Select::labels(&tracer::TLB_PROC_SHOOTDOWN_IPIS_SENT_PER_S, &["*", "lab-madvise"]),
                Stat::Sum,
                Cmp::AtLeast(1000.0),
            ),
            Check::new(
                "its madvise(MADV_DONTNEED) calls are traced",
                Select::labels(&tracer::MADVISE_PROC_DONTNEED_PER_S, &["*", "lab-madvise"]),
                Stat::Sum,
                Cmp::AtLeast(1000.0),
            ),
        ],
    })
}

fn reclaim_storm(e: &mut Env) -> Result<Started> {
    let (limit, file_bytes, anon) = e.intensity.pick(
        (192 * MIB, 160 * MIB, 128 * MIB),
        (1024 * MIB, 900 * MIB, 768 * MIB),
    );
    let file = e.sb.dir().join("cache.dat");
    make_file(&file, file_bytes)?;
    let cg = e.sb.cgroup("", Limits::memory(limit))?;
    let pid = e.sb.spawn(
        &cg,
        "cache-burst",
        worker(
            "cache-burst",
            &[("file", path_str(&file)?), ("anon_bytes", anon.to_string())],
        )?,
    )?;
    let p = &cg.path;
    Ok(Started {
        culprit_cgroup: Some(p.clone()),
        culprit_comm: None,
        roots: Vec::new(),
        notes: vec![format!(
            "cgroup {p}: memory limit {} MiB; lab-reclaim pid {pid} reads {} MiB of file, then \
             touches {} MiB of anonymous memory, in a loop",
            limit / MIB,
            file_bytes / MIB,
            anon / MIB
        )],
        checks: vec![
            Check::new(
                "direct reclaim stalls in the lab cgroup",
                Select::labels(&tracer::RECLAIM_CGROUP_STALLS_PER_S, &[p]),
                Stat::Sum,
                Cmp::AtLeast(5.0),
            ),
            Check::new(
                "lab-reclaim is the task that stalled",
                Select::labels(&tracer::RECLAIM_PROC_STALLS_PER_S, &["*", "lab-reclaim"]),
                Stat::Sum,
                Cmp::AtLeast(5.0),
            ),
            Check::new(
                "the cgroup sits at its limit",
                Select::labels(&cgroup::MEMORY_USAGE_OF_LIMIT_PCT, &[p]),
                Stat::Max,
                Cmp::AtLeast(90.0),
            ),
        ],
    })
}

fn pagecache_thrash(e: &mut Env) -> Result<Started> {
    let (limit, ws, big) = e.intensity.pick(
        (160 * MIB, 128 * MIB, 384 * MIB),
        (512 * MIB, 448 * MIB, 2048 * MIB),
    );
    let ws_file = e.sb.dir().join("working-set.dat");
    let big_file = e.sb.dir().join("stream.dat");
    make_file(&ws_file, ws)?;
    make_file(&big_file, big)?;
    let cg = e.sb.cgroup("", Limits::memory(limit))?;
    let wpid = e.sb.spawn(
        &cg,
        "working-set",
        worker(
            "working-set",
            &[("file", path_str(&ws_file)?), ("pause_ms", "300".into())],
        )?,
    )?;
    let spid = e.sb.spawn(
        &cg,
        "stream",
        worker("stream", &[("file", path_str(&big_file)?)])?,
    )?;
    let p = &cg.path;
    Ok(Started {
        culprit_cgroup: Some(p.clone()),
        culprit_comm: None,
        roots: Vec::new(),
        notes: vec![format!(
            "cgroup {p}: memory limit {} MiB; lab-workset pid {wpid} re-reads a {} MiB mapped \
             file; lab-stream pid {spid} streams a {} MiB file",
            limit / MIB,
            ws / MIB,
            big / MIB
        )],
        checks: vec![
            Check::new(
                "the working set comes back as major faults",
                Select::labels(&process::PROC_MAJFLT_PER_S, &["*", "lab-workset"]),
                Stat::Sum,
                Cmp::AtLeast(1000.0),
            ),
            Check::new(
                "evicted file pages refault",
                Select::all(&mem::RECLAIM_REFAULT_FILE_PER_S),
                Stat::Sum,
                Cmp::AtLeast(1000.0),
            ),
            Check::new(
                "lab-stream drives the reads",
                Select::labels(&process::PROC_READ_BYTES_PER_S, &["*", "lab-stream"]),
                Stat::Mean,
                Cmp::AtLeast(MIB as f64),
            ),
        ],
    })
}

fn memcg_thrash(e: &mut Env) -> Result<Started> {
    thrash_in(e, "")
}

/// The memcg thrash in lab cgroups `<under>limited` and `<under>launcher`.
fn thrash_in(e: &mut Env, under: &str) -> Result<Started> {
    // A hot set inside the limit, re-read once a second as a service serves it, and a stream
    // several times the limit: the stream reads more than the service, as a backup or a scan
    // does (the rule names the largest reader inside the cgroup; under emulation, where the
    // disk is slow, a service re-reading without pause read more than the stream).
    // The hot set is over half the limit: the active list (no larger than the inactive one
    // below 1 GiB) cannot hold all of it, so the stream evicts part of it on every pass. At
    // 64 of 160 MiB the outcome was a race: when the second pass came before the stream had
    // pushed the first out, the whole file went active and stayed resident (lab-reread read 0
    // bytes from storage beside the soak in CI); otherwise it was evicted on every pass.
    let (limit, hot, big) = e.intensity.pick(
        (160 * MIB, 96 * MIB, 384 * MIB),
        (256 * MIB, 160 * MIB, 2048 * MIB),
    );
    let hot_file = e.sb.dir().join("hot.dat");
    let big_file = e.sb.dir().join("stream.dat");
    make_file(&hot_file, hot)?;
    make_file(&big_file, big)?;
    let cg =
        e.sb.cgroup(&format!("{under}limited"), Limits::memory(limit))?;
    // A sibling leaf: v2 takes processes only in leaves, and the launcher must be elsewhere.
    let outside =
        e.sb.cgroup(&format!("{under}launcher"), Limits::default())?;
    let rpid = e.sb.spawn(
        &cg,
        "reread",
        worker(
            "reread",
            &[("file", path_str(&hot_file)?), ("pause_ms", "1000".into())],
        )?,
    )?;
    // The wrapper joins the limited cgroup in every hierarchy before it starts the reader,
    // as a container runtime's exec or a `systemd-run --scope` does.
    let procs: Vec<String> = cg
        .dirs()
        .map(|d| path_str(&d.join("cgroup.procs")))
        .collect::<Result<_>>()?;
    let wrapper = "for p in \"$@\"; do echo $$ > \"$p\" || exit 1; done; cat \"$F\" > /dev/null";
    let mut launcher = Command::new("sh");
    launcher
        .arg("-c")
        .arg(format!(
            "while :; do sh -c '{wrapper}' wrapper {} > /dev/null || exit 1; done",
            procs
                .iter()
                .map(|p| format!("'{p}'"))
                .collect::<Vec<_>>()
                .join(" ")
        ))
        .env("F", path_str(&big_file)?);
    let lpid = e.sb.spawn(&outside, "stream-launcher", launcher)?;
    let p = &cg.path;
    Ok(Started {
        culprit_cgroup: Some(p.clone()),
        culprit_comm: Some("cat"),
        roots: Vec::new(),
        notes: vec![format!(
            "cgroup {p}: memory limit {} MiB; lab-reread pid {rpid} re-reads a {} MiB file; \
             sh pid {lpid} in {} starts `sh -c` wrappers that join {p} and `cat` a {} MiB \
             file, one after the other",
            limit / MIB,
            hot / MIB,
            outside.path,
            big / MIB
        )],
        checks: vec![
            Check::new(
                "the limited cgroup's evicted file pages refault",
                Select::labels(&cgroup::MEMORY_REFAULT_FILE_PER_S, &[p]),
                Stat::Sum,
                Cmp::AtLeast(1000.0),
            ),
            Check::new(
                "lab-reread reads its hot file back from storage",
                Select::labels(&process::PROC_READ_BYTES_PER_S, &["*", "lab-reread"]),
                Stat::Sum,
                Cmp::AtLeast(16.0 * MIB as f64),
            ),
            Check::new(
                "the launcher outside gets the readers' bytes when it reaps them",
                Select::labels(&process::PROC_REAPED_READ_BYTES_PER_S, &["*", "sh"]),
                Stat::Sum,
                // Most of one file: the shells read nothing themselves, so this much comes
                // only from a reaped `cat`. A slow guest finishes one in the run, and a page
                // of it still cached made the whole file's size a coin toss.
                Cmp::AtLeast(0.9 * big as f64),
            ),
        ],
    })
}

/// Throttling in one cgroup while another thrashes at its memory limit: two incidents, two
/// roots, each with its own culprit.
fn two_incidents(e: &mut Env) -> Result<Started> {
    let (cpu, throttled) = throttle_in(e, "throttled")?;
    let mem = thrash_in(e, "memcg/")?;
    let roots = vec![
        ("cpu.cfs-throttling", throttled),
        (
            "memory.pagecache-thrash",
            mem.culprit_cgroup.clone().unwrap_or_default(),
        ),
    ];
    Ok(Started {
        checks: cpu.checks.into_iter().chain(mem.checks).collect(),
        notes: cpu.notes.into_iter().chain(mem.notes).collect(),
        culprit_cgroup: None,
        culprit_comm: None,
        roots,
    })
}

fn leak(e: &mut Env, mode: &str, comm: &str) -> Result<Started> {
    let (rate, cap) = e
        .intensity
        .pick((8 * MIB, 96 * MIB), (32 * MIB, 1024 * MIB));
    // A leak grows until the process ends: one that reached its cap early and stayed flat for
    // the rest of the run would look like a warm-up, which `memory.leak` rightly leaves alone
    // (at 8 MiB/s the 96 MiB cap came after 12 s of a 30 s run). Slower, then, so the cap
    // comes at the end.
    let rate = rate.min((cap as f64 / e.duration.as_secs_f64().max(1.0)) as u64);
    let cg: LabCgroup = e.sb.cgroup("", Limits::memory(cap + 256 * MIB))?;
    let mut cmd = Command::new("python3");
    cmd.arg("-c")
        .arg(include_str!("py/leak.py"))
        .arg(mode)
        .arg(rate.to_string())
        .arg(cap.to_string());
    let pid =
        e.sb.spawn(&cg, comm, cmd)
            .context("the leak scenarios need python3")?;
    let expect = (rate as f64 * e.duration.as_secs_f64()).min(cap as f64);
    Ok(Started {
        notes: vec![format!(
            "cgroup {}: memory limit {} MiB; {comm} pid {pid} grows {:.1} MiB/s up to {} MiB",
            cg.path,
            (cap + 256 * MIB) / MIB,
            rate as f64 / MIB as f64,
            cap / MIB
        )],
        culprit_cgroup: Some(cg.path.clone()),
        culprit_comm: None,
        roots: Vec::new(),
        checks: vec![Check::new(
            format!("{comm}'s RSS grows"),
            Select::labels(&process::PROC_RSS_BYTES, &["*", comm]),
            Stat::Growth,
            // The first and last samples miss up to a second each at both ends.
            Cmp::AtLeast(expect * 0.4),
        )],
    })
}

fn native_leak(e: &mut Env) -> Result<Started> {
    leak(e, "native", "lab-native-leak")
}

fn python_leak(e: &mut Env) -> Result<Started> {
    leak(e, "python", "lab-python-leak")
}

/// Seconds into the run at which a scenario's process is to end: late enough for a trend of
/// several samples, early enough that the end is inside the window.
fn end_at(e: &Env) -> f64 {
    (e.duration.as_secs_f64() * 0.7).max(1.0)
}

fn oom_leak(e: &mut Env) -> Result<Started> {
    let rate = e.intensity.pick(12 * MIB, 32 * MIB);
    // The interpreter itself is about 10 MiB: the limit is reached at ~70% of the run.
    let limit = ((rate as f64 * end_at(e)) as u64 + 10 * MIB).max(64 * MIB);
    let cg: LabCgroup = e.sb.cgroup("", Limits::memory(limit))?;
    let mut cmd = Command::new("python3");
    cmd.arg("-c")
        .arg(include_str!("py/leak.py"))
        .arg("native")
        .arg(rate.to_string())
        // No cap: it grows until the OOM killer stops it.
        .arg((64 * 1024 * MIB).to_string())
        .arg("lab-oom-leak");
    let pid =
        e.sb.spawn_ending(&cg, "oom-leaker", cmd)
            .context("the leak scenarios need python3")?;
    let p = &cg.path;
    Ok(Started {
        culprit_cgroup: Some(p.clone()),
        culprit_comm: None,
        roots: Vec::new(),
        notes: vec![format!(
            "cgroup {p}: memory limit {} MiB; lab-oom-leak pid {pid} grows {} MiB/s until the OOM killer ends it",
            limit / MIB,
            rate / MIB
        )],
        checks: vec![
            Check::new(
                "lab-oom-leak's RSS grows",
                Select::labels(&process::PROC_RSS_BYTES, &["*", "lab-oom-leak"]),
                Stat::Growth,
                Cmp::AtLeast(16.0 * MIB as f64),
            ),
            Check::new(
                "the cgroup counts an OOM kill",
                Select::labels(&cgroup::MEMORY_OOM_KILL_PER_S, &[p]),
                Stat::Sum,
                Cmp::AtLeast(0.5),
            ),
            Check::new(
                "lab-oom-leak ended",
                Select::labels(&process::PROC_EXITED, &["*", "lab-oom-leak"]),
                Stat::Max,
                Cmp::AtLeast(1.0),
            ),
            Check::new(
                "the kernel's OOM report names it",
                Select::labels(&mem::OOM_KILL_RSS_BYTES, &["*", "lab-oom-leak"]),
                Stat::Max,
                Cmp::AtLeast(16.0 * MIB as f64),
            ),
        ],
    })
}

fn worker_leak(e: &mut Env) -> Result<Started> {
    let (rate, limit) = e
        .intensity
        .pick((8 * MIB, 512 * MIB), (24 * MIB, 2048 * MIB));
    let cg: LabCgroup = e.sb.cgroup("", Limits::memory(limit))?;
    let mut cmd = Command::new("python3");
    cmd.arg("-c")
        .arg(include_str!("py/prefork.py"))
        .arg("2")
        .arg(rate.to_string())
        .arg(format!("{:.1}", end_at(e)));
    let pid =
        e.sb.spawn_ending(&cg, "prefork", cmd)
            .context("the leak scenarios need python3")?;
    let p = &cg.path;
    Ok(Started {
        culprit_cgroup: Some(p.clone()),
        culprit_comm: None,
        roots: Vec::new(),
        notes: vec![format!(
            "cgroup {p}: memory limit {} MiB; lab-prefork pid {pid} forks two lab-leak-worker \
             that grow {} MiB/s each; after {:.1} s it kills them, leaves them zombies for 2 s, \
             and is killed",
            limit / MIB,
            rate / MIB,
            end_at(e)
        )],
        checks: vec![
            Check::new(
                "the workers' RSS grows",
                Select::labels(&process::PROC_RSS_BYTES, &["*", "lab-leak-worker"]),
                Stat::Growth,
                Cmp::AtLeast(16.0 * MIB as f64),
            ),
            Check::new(
                "no 0 is recorded for a zombie worker",
                Select::labels(&process::PROC_RSS_BYTES, &["*", "lab-leak-worker"]),
                Stat::Min,
                Cmp::AtLeast(MIB as f64),
            ),
            Check::new(
                "the workers were seen killed by SIGKILL",
                Select::labels(&process::PROC_EXIT_SIGNAL, &["*", "lab-leak-worker"]),
                Stat::Max,
                Cmp::AtLeast(9.0),
            ),
        ],
    })
}

fn nss_probe(e: &mut Env) -> Result<Started> {
    let cg = e.sb.cgroup("", Limits::default())?;
    let db = e.sb.dir().join("nssdb");
    std::fs::create_dir_all(&db)?;
    let sql = format!("sql:{}", path_str(&db)?);
    let made = Command::new("certutil")
        .args(["-N", "--empty-password", "-d", &sql])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .status()
        .context("nss-probe needs certutil (Debian: apt-get install libnss3-tools)")?;
    anyhow::ensure!(made.success(), "certutil -N {sql}: {made}");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        // A run every ~1.5 s: ~15k failed access() calls per second on average, as issue 18
        // met it, and too few at a time for the dentry cache's growth to attach the tracer.
        .arg("while :; do certutil -L -d \"$1\" >/dev/null 2>&1; sleep 1.5; done")
        .arg("sh")
        .arg(&sql)
        // Any value but yes or no: NSS measures the directory's access time by probing.
        .env("NSS_SDB_USE_CACHE", "probe");
    let pid = e.sb.spawn(&cg, "certutil-loop", cmd)?;
    let p = &cg.path;
    Ok(Started {
        culprit_cgroup: Some(p.clone()),
        culprit_comm: None,
        roots: Vec::new(),
        notes: vec![format!(
            "cgroup {p}: sh pid {pid} runs certutil -L -d {sql} every ~1.5 s with \
             NSS_SDB_USE_CACHE=probe"
        )],
        checks: vec![
            Check::new(
                "the census traced certutil's failed look-ups",
                Select::labels(&tracer::LOOKUPS_PROC_ENOENT_PER_S, &["*", "certutil"]),
                Stat::Sum,
                Cmp::AtLeast(1000.0),
            ),
            // For the census alone; beside a busy host, whose files come and go, negative
            // dentries can grow enough to attach the tracer for its symptom first (seen in
            // CI beside the soak: census 0, certutil traced all the same). lab_e2e asserts the
            // census alone.
            Check::new(
                "the lookups tracer ran (for the census, or for its symptom)",
                Select::labels(&tracer::CENSUS, &[TracerId::LOOKUPS.name()]),
                Stat::Series,
                Cmp::AtLeast(1.0),
            ),
            Check::new(
                "negative dentries do not pile up",
                Select::all(&mem::DENTRY_NR_NEGATIVE),
                Stat::Rise,
                Cmp::Below(100_000.0),
            ),
        ],
    })
}

/// The C unit the soak's compile loop builds: `n` functions of loops and branches; at 500,
/// cc1 at -O2 takes 3-4 s and 110 MiB on an idle 2-CPU host, as a large unit of a real
/// project does, and three times as long on a saturated one.
fn generated_c(n: usize) -> String {
    let mut c = String::with_capacity(n * 420);
    for i in 0..n {
        c.push_str(&format!(
            "static int tab{i}[64];\n\
             int f{i}(int x, const int *v, int n) {{\n\
             \x20   int s = x;\n\
             \x20   for (int j = 0; j < n; j++) {{\n\
             \x20       s += v[j] * (j ^ {i}) + tab{i}[j & 63];\n\
             \x20       if (s > {k}) s -= v[(j + {i}) % (n ? n : 1)];\n\
             \x20       tab{i}[(s + j) & 63] ^= s;\n\
             \x20   }}\n\
             \x20   switch (s & 7) {{ case 0: return s + {i}; case 1: return s * 3; \
             case 2: return s - {i}; case 3: return s >> 1; default: return s; }}\n\
             }}\n",
            k = i * 7 + 13
        ));
    }
    c.push_str("int main(void) { int v[8] = {1, 2, 3, 4, 5, 6, 7, 8}; int s = 0;\n");
    for i in (0..n).step_by(10) {
        c.push_str(&format!("    s += f{i}(s, v, 8);\n"));
    }
    c.push_str("    return s & 1;\n}\n");
    c
}

/// A loopback port free now, for the soak's web server (its load generator retries until the
/// server listens).
fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("no loopback port")?;
    Ok(l.local_addr()?.port())
}

fn soak(e: &mut Env) -> Result<Started> {
    let dir = e.sb.dir().to_path_buf();
    let d = path_str(&dir)?;
    let script = dir.join("soak.py");
    std::fs::write(&script, include_str!("py/soak.py"))?;
    let py = |args: &[&str]| {
        let mut c = Command::new("python3");
        c.arg(&script).args(args);
        c
    };
    // A shell loop whose children must not hold the worker's stdout: the lab reads it to the
    // end when the worker stops, and a tar still running would hold it open.
    let sh = |body: &str| {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(format!("exec >/dev/null 2>&1; cd '{d}' || exit 1; {body}"));
        c
    };
    let mut notes = Vec::new();

    // The compile loop: real gcc, a pause between builds as make's other steps would leave.
    // On SIGTERM the loop lets the build under way finish: a compiler the teardown killed
    // while it grows is a growth ended by a kill, which memory.leak rightly counts as a leak.
    // A healthy host's compiles end. (`wait` returns early when the trapped signal arrives;
    // the second waits for gcc itself.)
    std::fs::write(dir.join("unit.c"), generated_c(500))?;
    let cg = e.sb.cgroup("build", Limits::default())?;
    let pid = e.sb.spawn(
        &cg,
        "build",
        sh("stop=; trap 'stop=1' TERM; \
            while [ -z \"$stop\" ]; do \
              gcc -O2 -c unit.c -o unit.o & wait $! || wait $!; \
              [ -n \"$stop\" ] || sleep 1; \
            done"),
    )?;
    notes.push(format!("{}: a gcc -O2 loop (sh pid {pid})", cg.path));

    // The backup: a large tree compressed into the lab directory, round after round.
    let cg = e.sb.cgroup("backup", Limits::default())?;
    let pid = e.sb.spawn(
        &cg,
        "backup",
        sh("while :; do tar czf backup.tgz -C /usr share 2>/dev/null; sleep 2; done"),
    )?;
    notes.push(format!("{}: tar czf of /usr/share (sh pid {pid})", cg.path));

    // Cron-like churn: short processes, a dozen a second.
    let cg = e.sb.cgroup("cron", Limits::default())?;
    let pid = e.sb.spawn(
        &cg,
        "cron",
        sh(
            "while :; do for i in 1 2 3; do date; ls /usr/bin | wc -l; cat /proc/loadavg; \
            sh -c 'uname -a'; done; sleep 1; done",
        ),
    )?;
    notes.push(format!("{}: cron-like churn (sh pid {pid})", cg.path));

    // The web server and its loopback load generator, in separate cgroups (as a service and
    // its clients would be).
    let www = dir.join("www");
    std::fs::create_dir_all(&www)?;
    let mut names = Vec::new();
    for (i, size) in [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20]
        .iter()
        .cycle()
        .take(10)
        .enumerate()
    {
        let name = format!("f{i}.bin");
        std::fs::write(www.join(&name), vec![b'w'; *size])?;
        names.push(name);
    }
    let port = free_port()?.to_string();
    let cg = e.sb.cgroup("web", Limits::default())?;
    let pid =
        e.sb.spawn(&cg, "httpd", py(&["httpd", &path_str(&www)?, &port]))?;
    let cg2 = e.sb.cgroup("load", Limits::default())?;
    let lpid =
        e.sb.spawn(&cg2, "load", py(&["load", &port, &names.join(",")]))?;
    notes.push(format!(
        "{}: lab-httpd pid {pid} on 127.0.0.1:{port}; {}: lab-load pid {lpid}",
        cg.path, cg2.path
    ));

    // The database: random reads that fit in memory.
    let cg = e.sb.cgroup("db", Limits::default())?;
    let db = dir.join("soak.sqlite");
    let pid =
        e.sb.spawn(&cg, "db", py(&["db", &path_str(&db)?, "150000"]))?;
    notes.push(format!("{}: lab-sqlite pid {pid}", cg.path));

    // CPU saturation: a spinning thread per CPU.
    let cg = e.sb.cgroup("cpu", Limits::default())?;
    let pid = e.sb.spawn(&cg, "busy", worker("busy", &[])?)?;
    notes.push(format!("{}: lab-busy pid {pid}", cg.path));

    // A service warming up: a minute, or a third of a shorter run, so that a run shows it
    // level off as a real one does.
    let ramp = (e.duration.as_secs_f64() / 3.0).min(60.0);
    let cg = e.sb.cgroup("warmup", Limits::default())?;
    let pid = e.sb.spawn(
        &cg,
        "warmup",
        py(&["warmup", &(32 * MIB).to_string(), &format!("{ramp:.0}")]),
    )?;
    notes.push(format!(
        "{}: lab-warmup pid {pid} grows 32 MiB over {ramp:.0} s, then stays flat",
        cg.path
    ));

    // Short-lived tools that grow and exit.
    let cg = e.sb.cgroup("tools", Limits::default())?;
    let pid = e.sb.spawn(&cg, "tools", py(&["tools"]))?;
    notes.push(format!(
        "{}: lab-tools pid {pid} runs lab-tool after lab-tool (20-30 MiB over 4-12 s each)",
        cg.path
    ));

    let ran = |what: &str, comm: &str| {
        Check::new(
            format!("{what} ran"),
            Select::labels(&process::PROC_RSS_BYTES, &["*", comm]),
            Stat::Series,
            Cmp::AtLeast(1.0),
        )
    };
    Ok(Started {
        culprit_cgroup: None,
        culprit_comm: None,
        roots: Vec::new(),
        notes,
        checks: vec![
            Check::new(
                "user CPU busy",
                Select::all(&cpu::USR_PCT),
                Stat::Mean,
                Cmp::AtLeast(50.0),
            ),
            ran("gcc's cc1", "cc1"),
            ran("the backup's gzip", "gzip"),
            ran("the web server", "lab-httpd"),
            ran("the database", "lab-sqlite"),
            ran("a short-lived tool", "lab-tool"),
            Check::new(
                "the service warmed up",
                Select::labels(&process::PROC_RSS_BYTES, &["*", "lab-warmup"]),
                Stat::Growth,
                Cmp::AtLeast(16.0 * MIB as f64),
            ),
            // Busy, and healthy: the tracer that would see reclaim stalls ran, and nothing was
            // throttled (no quota anywhere).
            Check::new(
                "the reclaim tracer ran",
                Select::labels(&tracer::ATTACHED, &[TracerId::RECLAIM.name()]),
                Stat::Max,
                Cmp::AtLeast(1.0),
            ),
            Check::new(
                "no lab cgroup throttled",
                Select::labels(&cgroup::CPU_THROTTLED_PCT, &[LAB_CGROUPS]),
                Stat::Max,
                Cmp::Below(5.0),
            ),
        ],
    })
}

fn memory_high(e: &mut Env) -> Result<Started> {
    let high = e.intensity.pick(64 * MIB, 256 * MIB);
    let bytes = high + high / 8;
    let cg = e.sb.cgroup(
        "",
        Limits {
            memory_bytes: Some(2 * high),
            memory_high_bytes: Some(high),
            ..Default::default()
        },
    )?;
    let pid = e.sb.spawn(
        &cg,
        "overhigh",
        worker(
            "over-high",
            &[("bytes", bytes.to_string()), ("hold_ms", "300".into())],
        )?,
    )?;
    Ok(Started {
        culprit_cgroup: Some(cg.path.clone()),
        culprit_comm: Some("lab-overhigh"),
        roots: Vec::new(),
        notes: vec![format!(
            "cgroup {}: memory.high {} MiB, memory.max {} MiB, no swap; lab-overhigh pid {pid} \
             maps and touches {} MiB, holds it 300 ms, unmaps, again",
            cg.path,
            high / MIB,
            2 * high / MIB,
            bytes / MIB
        )],
        checks: vec![
            Check::new(
                "the cgroup goes over its memory.high again and again",
                Select::labels(&cgroup::MEMORY_EVENTS_PER_S, &[&cg.path, "high"]),
                Stat::Sum,
                Cmp::AtLeast(10.0),
            ),
            Check::new(
                "its usage reaches memory.high",
                Select::labels(&cgroup::MEMORY_USAGE_BYTES, &[&cg.path]),
                Stat::Max,
                Cmp::AtLeast((high - high / 20) as f64),
            ),
        ],
    })
}

/// Free swap space, from /proc/meminfo (0 without swap).
fn swap_free() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("SwapFree:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn swap_in(e: &mut Env) -> Result<Started> {
    let limit = e.intensity.pick(64 * MIB, 256 * MIB);
    let bytes = limit + limit / 2;
    let free = swap_free();
    if free < bytes {
        bail!(
            "swap-in needs swap: {} MiB of swap free, {} MiB needed; the lab does not turn swap on (swapon a file or device first)",
            free / MIB,
            bytes / MIB
        );
    }
    let cg = e.sb.cgroup(
        "",
        Limits {
            memory_bytes: Some(limit),
            swap_bytes: Some(2 * bytes),
            ..Default::default()
        },
    )?;
    let pid = e.sb.spawn(
        &cg,
        "swapper",
        worker("swap-thrash", &[("bytes", bytes.to_string())])?,
    )?;
    Ok(Started {
        culprit_cgroup: Some(cg.path.clone()),
        culprit_comm: Some("lab-swapper"),
        roots: Vec::new(),
        notes: vec![format!(
            "cgroup {}: memory limit {} MiB, swap up to {} MiB; lab-swapper pid {pid} sweeps {} MiB of anonymous memory",
            cg.path,
            limit / MIB,
            2 * bytes / MIB,
            bytes / MIB
        )],
        checks: vec![
            Check::new(
                "pages are read back from swap",
                Select::labels(&mem::VMSTAT_FIELD_PER_S, &["pswpin"]),
                Stat::Sum,
                Cmp::AtLeast(1000.0),
            ),
            Check::new(
                "lab-swapper takes the major faults",
                Select::labels(&process::PROC_MAJFLT_PER_S, &["*", "lab-swapper"]),
                Stat::Sum,
                Cmp::AtLeast(1000.0),
            ),
        ],
    })
}

fn softirq_storm(e: &mut Env) -> Result<Started> {
    let (period, burst) = e.intensity.pick((100, 60), (100, 100));
    let cg = e.sb.cgroup("", Limits::default())?;
    let cpu = cpus().last().copied().unwrap_or(0);
    let pid = e.sb.spawn(
        &cg,
        "flood",
        worker(
            "udp-flood",
            &[
                ("period_ms", period.to_string()),
                ("burst_ms", burst.to_string()),
            ],
        )?,
    )?;
    Ok(Started {
        culprit_cgroup: Some(cg.path.clone()),
        culprit_comm: Some("lab-flood"),
        roots: Vec::new(),
        notes: vec![format!(
            "cgroup {} (no quota): lab-flood pid {pid} sends 64-byte datagrams to itself over \
             loopback from CPU {cpu}, in {burst} ms bursts every {period} ms",
            cg.path
        )],
        checks: vec![
            Check::new(
                "NET_RX soft interrupts at least 10x the baseline",
                Select::labels(&irq::SOFTIRQ_PER_S, &["NET_RX"]),
                Stat::Ratio { floor: 1000.0 },
                Cmp::AtLeast(10.0),
            ),
            Check::new(
                "the sending CPU spends at least 10% of its time in softirq",
                Select::labels(&cpu::PER_CPU_SOFTIRQ_PCT, &[&cpu.to_string()]),
                Stat::Mean,
                Cmp::AtLeast(10.0),
            ),
        ],
    })
}

/// Whether the kernel has the lock contention tracepoints the mmaplock tracer attaches to
/// (5.19+); None when no tracefs is mounted to tell.
fn has_lock_contention_tracepoint() -> Option<bool> {
    ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .map(Path::new)
        .find(|t| t.join("events").is_dir())
        .map(|t| t.join("events/lock/contention_begin").is_dir())
}

fn mmap_lock(e: &mut Env) -> Result<Started> {
    if has_lock_contention_tracepoint() == Some(false) {
        bail!(
            "mmap-lock needs the lock:contention_begin tracepoint (5.19+), which the mmaplock tracer sees the waits at; this kernel has none"
        );
    }
    let (period, burst) = e.intensity.pick((500, 300), (100, 100));
    let threads = (cpus().len() * 4).max(8);
    let cg = e.sb.cgroup("", Limits::default())?;
    let pid = e.sb.spawn(
        &cg,
        "mapper",
        worker(
            "map-churn",
            &[
                ("threads", threads.to_string()),
                ("bytes", (256 << 10).to_string()),
                ("touch_pages", "0".to_string()),
                ("period_ms", period.to_string()),
                ("burst_ms", burst.to_string()),
            ],
        )?,
    )?;
    Ok(Started {
        culprit_cgroup: Some(cg.path.clone()),
        culprit_comm: Some("lab-mapper"),
        roots: Vec::new(),
        notes: vec![format!(
            "cgroup {} (no quota): lab-mapper pid {pid}, {threads} threads mapping and \
             unmapping 256 KiB each, in {burst} ms bursts every {period} ms",
            cg.path
        )],
        checks: vec![Check::new(
            "lab-mapper's threads wait for its mmap_lock",
            Select::labels(&tracer::MMAPLOCK_PROC_WAITS_PER_S, &["*", "lab-mapper"]),
            Stat::Sum,
            Cmp::AtLeast(1000.0),
        )],
    })
}

/// The whole disk (major, minor) holding `path`: io.max takes a disk, not a partition.
fn disk_of(path: &Path) -> Result<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path)
        .with_context(|| format!("stat {}", path.display()))?
        .dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let sys = Path::new("/sys/dev/block").join(format!("{major}:{minor}"));
    if !sys.exists() {
        bail!(
            "{} is not on a block device ({major}:{minor}): the lab directory must be on a disk \
             (JITTERSCOPE_LAB_DIR)",
            path.display()
        );
    }
    // A partition's sysfs directory sits inside its disk's.
    let sys = if sys.join("partition").exists() {
        sys.canonicalize()?.join("..")
    } else {
        sys
    };
    let text = std::fs::read_to_string(sys.join("dev"))
        .with_context(|| format!("reading {}/dev", sys.display()))?;
    let (a, b) = text
        .trim()
        .split_once(':')
        .ok_or_else(|| anyhow!("{}/dev: {text:?} is not major:minor", sys.display()))?;
    Ok((a.parse()?, b.parse()?))
}

fn dirty_throttle(e: &mut Env) -> Result<Started> {
    let limit = e.intensity.pick(128 * MIB, 512 * MIB);
    let wbps = 8 * MIB;
    let (major, minor) = disk_of(e.sb.dir())?;
    let cg = e.sb.cgroup(
        "",
        Limits {
            memory_bytes: Some(limit),
            io_wbps: Some((major, minor, wbps)),
            ..Default::default()
        },
    )?;
    if !cg.is_v2("memory") {
        bail!(
            "dirty-throttle needs the memory controller on cgroup v2 (per-cgroup dirty limits); this host has it on v1"
        );
    }
    let path = e.sb.dir().join("dirty.dat");
    let pid = e.sb.spawn(
        &cg,
        "writer",
        worker(
            "dirty-writer",
            &[
                ("bytes", (2 * limit).to_string()),
                ("path", path.display().to_string()),
            ],
        )?,
    )?;
    Ok(Started {
        culprit_cgroup: Some(cg.path.clone()),
        culprit_comm: Some("lab-writer"),
        roots: Vec::new(),
        notes: vec![format!(
            "cgroup {}: memory limit {} MiB, io.max {major}:{minor} wbps={} MiB/s; lab-writer \
             pid {pid} rewrites {} ({} MiB) with buffered 1 MiB writes, never syncing",
            cg.path,
            limit / MIB,
            wbps / MIB,
            path.display(),
            2 * limit / MIB
        )],
        checks: vec![Check::new(
            "lab-writer sleeps in balance_dirty_pages",
            Select::labels(&tracer::DIRTY_PROC_PAUSES_PER_S, &["*", "lab-writer"]),
            Stat::Sum,
            Cmp::AtLeast(20.0),
        )],
    })
}

fn cpu_saturation(e: &mut Env) -> Result<Started> {
    let cg = e.sb.cgroup("", Limits::default())?;
    let pid = e.sb.spawn(&cg, "busy", worker("busy", &[])?)?;
    let mut checks = vec![Check::new(
        "user CPU saturated",
        Select::all(&cpu::USR_PCT),
        Stat::Mean,
        Cmp::AtLeast(60.0),
    )];
    checks.extend(quiet_checks(&cg));
    Ok(Started {
        culprit_cgroup: None,
        culprit_comm: None,
        roots: Vec::new(),
        notes: vec![format!(
            "cgroup {} (no quota): lab-busy pid {pid}, one thread per CPU",
            cg.path
        )],
        checks,
    })
}

fn idle(e: &mut Env) -> Result<Started> {
    let cg = e.sb.cgroup("", Limits::default())?;
    let pid = e.sb.spawn(&cg, "idle", worker("idle", &[])?)?;
    Ok(Started {
        culprit_cgroup: None,
        culprit_comm: None,
        roots: Vec::new(),
        notes: vec![format!("cgroup {}: lab-idle pid {pid} sleeps", cg.path)],
        checks: quiet_checks(&cg),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_documented() {
        jitterscope_testkit::assert_unique(SCENARIOS.iter().map(|s| s.name), "scenario names");
        for s in SCENARIOS {
            assert!(!s.reproduces.is_empty() && !s.signals.is_empty() && !s.bounds.is_empty());
            assert_eq!(s.control, s.expected_rule.is_none(), "{}", s.name);
            assert!(!s.controllers.is_empty(), "{}", s.name);
        }
        let Err(e) = find("nope") else {
            panic!("found a scenario called nope")
        };
        assert!(e.to_string().contains("cfs-throttle"));
    }

    #[test]
    fn quiet_checks_need_data_then_nothing() {
        let cg = LabCgroup::for_test("/jitterscope-lab/idle");
        let cs = quiet_checks(&cg);
        // Two presence checks, then only "Below" checks (nothing may move).
        assert!(cs[..2].iter().all(|c| matches!(c.cmp, Cmp::AtLeast(_))));
        assert!(cs[2..].iter().all(|c| matches!(c.cmp, Cmp::Below(_))));
        assert_eq!(
            cs[0].series.to_string(),
            "cgroup./jitterscope-lab/idle.cpu.usage_pct"
        );
    }
}
