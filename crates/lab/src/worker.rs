//! The workloads, run as child processes of the lab (`jitterscope __lab-worker <kind> k=v...`)
//! so that each sits in its own sandbox cgroup with its own name (`lab-*`, what `flame --comm`
//! and the process series show). A worker runs until SIGTERM, then prints one JSON report on
//! stdout and exits.
//!
//! They are written here rather than taken from stress-ng because each must do exactly what the
//! seed case describes (fibtest's fast and slow threads, NSS's probe names, case 3's memcg x
//! tmpfs layout) and report what it did, and because the lab must work with nothing installed.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::hint::black_box;
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

use crate::stop;

/// The hidden first argument that turns the binary into a worker.
pub const ARG: &str = "__lab-worker";

/// `key=value` arguments of a worker.
pub struct Args(BTreeMap<String, String>);

impl Args {
    /// Parses `key=value` words.
    pub fn parse(words: &[String]) -> Result<Self> {
        let mut m = BTreeMap::new();
        for w in words {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| anyhow!("worker argument {w:?} is not key=value"))?;
            m.insert(k.to_string(), v.to_string());
        }
        Ok(Args(m))
    }

    fn str(&self, k: &str) -> Result<&str> {
        self.0
            .get(k)
            .map(String::as_str)
            .ok_or_else(|| anyhow!("worker argument {k}= missing"))
    }

    fn u64(&self, k: &str) -> Result<u64> {
        let v = self.str(k)?;
        v.parse()
            .map_err(|_| anyhow!("worker argument {k}={v} is not a number"))
    }

    fn opt(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }
}

/// Entry point of `jitterscope __lab-worker <kind> ...`; returns the exit code.
pub fn main(args: &[String]) -> i32 {
    stop::install();
    let Some((kind, rest)) = args.split_first() else {
        eprintln!("jitterscope: error: {ARG} needs a worker kind");
        return 2;
    };
    let r = Args::parse(rest).and_then(|a| match kind.as_str() {
        "fibtest" => fibtest(&a),
        "nss-probe" => nss_probe(&a),
        "memcg-mounts" => memcg_mounts(&a),
        "madvise-storm" => madvise_storm(&a),
        "latency-probe" => latency_probe(&a),
        "cache-burst" => cache_burst(&a),
        "working-set" => working_set(&a),
        "stream" => stream(&a),
        "reread" => reread(&a),
        "busy" => busy(&a),
        "udp-flood" => udp_flood(&a),
        "over-high" => over_high(&a),
        "swap-thrash" => swap_thrash(&a),
        "map-churn" => map_churn(&a),
        "dirty-writer" => dirty_writer(&a),
        "idle" => idle(),
        k => bail!("unknown worker kind {k:?}"),
    });
    match r {
        Ok(report) => {
            println!("{report}");
            0
        }
        Err(e) => {
            eprintln!("jitterscope: lab worker {kind}: error: {e:#}");
            1
        }
    }
}

/// Names the calling thread (the process, when called from the main thread): comm is what
/// the recorder and the profiler show.
pub fn set_comm(name: &str) {
    let mut b = [0u8; 16];
    let n = name.len().min(15);
    b[..n].copy_from_slice(&name.as_bytes()[..n]);
    // SAFETY: PR_SET_NAME reads a NUL-terminated buffer of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, b.as_ptr() as libc::c_ulong, 0, 0, 0) };
}

/// Online CPUs this process may run on.
pub fn cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is valid; sched_getaffinity fills it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return vec![0];
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Pins the calling thread to one CPU.
fn pin(cpu: usize) -> Result<()> {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET stays in bounds for cpu < CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu % libc::CPU_SETSIZE as usize, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            bail!(
                "cannot pin to CPU {cpu}: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    Ok(())
}

fn fib(n: u32) -> u64 {
    let (mut a, mut b) = (0u64, 1u64);
    for _ in 0..n {
        let t = a.wrapping_add(b);
        a = b;
        b = t;
    }
    black_box(a)
}

/// Indeed's fibtest: one fast thread computing Fibonacci numbers flat out on one CPU, and
/// slow threads on another that each do 100 iterations then sleep 10 ms, like async workers
/// that do a little work per request. Under a small CFS quota the fast thread spends the
/// quota and every thread is throttled, while the cgroup's usage stays at the (low) quota.
fn fibtest(a: &Args) -> Result<Value> {
    set_comm("lab-fibtest");
    let fast_cpu = a.u64("fast_cpu")? as usize;
    let slow_cpu = a.u64("slow_cpu")? as usize;
    let slow_threads = a.u64("slow_threads")?;
    let fast = Arc::new(AtomicU64::new(0));
    let slow = Arc::new(AtomicU64::new(0));
    {
        let fast = fast.clone();
        std::thread::Builder::new()
            .name("lab-fib-fast".into())
            .spawn(move || {
                set_comm("lab-fib-fast");
                let _ = pin(fast_cpu);
                loop {
                    fib(10_000);
                    fast.fetch_add(1, Ordering::Relaxed);
                }
            })?;
    }
    for _ in 0..slow_threads {
        let slow = slow.clone();
        std::thread::Builder::new()
            .name("lab-fib-slow".into())
            .spawn(move || {
                set_comm("lab-fib-slow");
                let _ = pin(slow_cpu);
                loop {
                    fib(100);
                    slow.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(10));
                }
            })?;
    }
    let t0 = Instant::now();
    while stop::sleep(Duration::from_secs(3600)) {}
    let secs = t0.elapsed().as_secs_f64();
    let slow_n = slow.load(Ordering::Relaxed);
    Ok(json!({
        "fast_loops": fast.load(Ordering::Relaxed),
        "slow_requests": slow_n,
        // Without throttling each slow thread would do ~100 requests per second.
        "slow_requests_per_thread_per_s": if slow_threads > 0 { slow_n as f64 / slow_threads as f64 / secs } else { 0.0 },
    }))
}

fn cpath(s: &str) -> Result<CString> {
    CString::new(s).context("path with a NUL byte")
}

/// A private anonymous mapping of `len` bytes, not reserved against overcommit (the cgroup's
/// limit bounds it); the caller unmaps it.
fn anon_map(len: usize) -> Result<*mut libc::c_void> {
    // SAFETY: a fresh private anonymous mapping at an address the kernel picks.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        bail!("mmap of {len} bytes: {}", std::io::Error::last_os_error());
    }
    Ok(p)
}

/// Touches `bytes` of fresh anonymous memory one page at a time, holds it `hold`, frees it.
/// Returns how long the touching took (it includes any reclaim the charges caused).
fn anon_burst(bytes: u64, hold: Duration) -> Result<Duration> {
    let len = bytes as usize;
    let p = anon_map(len)?;
    let t0 = Instant::now();
    let base = p as *mut u8;
    let mut off = 0;
    while off < len {
        // SAFETY: off < len, inside the mapping.
        unsafe { base.add(off).write_volatile(1) };
        off += 4096;
        // Often enough to stop in time over memory.high, where every batch of charges sleeps.
        if off.is_multiple_of(1 << 20) && stop::requested() {
            break;
        }
    }
    let took = t0.elapsed();
    stop::sleep(hold);
    // SAFETY: unmapping exactly what was mapped.
    unsafe { libc::munmap(p, len) };
    Ok(took)
}

/// Case 1's trigger: NSS (`sdb_measureAccess`) probing many unique, non-existent names
/// (`.<n>_dbaccess.tmp`), each leaving a negative dentry; then an anonymous burst that pushes
/// the memory-limited cgroup over its limit, so reclaim has to shrink those dentries.
fn nss_probe(a: &Args) -> Result<Value> {
    set_comm("lab-nss-probe");
    let dir = a.str("dir")?;
    let names = a.u64("names")?;
    let anon = a.u64("anon_bytes")?;
    let hold = Duration::from_millis(a.u64("hold_ms")?);
    let mut n = 0u64;
    let mut enoent = 0u64;
    let mut cycles = 0u64;
    let mut slowest_burst = Duration::ZERO;
    'outer: while !stop::requested() {
        for _ in 0..names {
            let p = cpath(&format!("{dir}/.{n}_dbaccess.tmp"))?;
            // SAFETY: valid C string.
            if unsafe { libc::access(p.as_ptr(), libc::F_OK) } != 0 {
                enoent += 1;
            }
            n += 1;
            if n.is_multiple_of(4096) && stop::requested() {
                break 'outer;
            }
        }
        // Let a sample see the pile of negative dentries before pressure shrinks it.
        if !stop::sleep(hold) {
            break;
        }
        slowest_burst = slowest_burst.max(anon_burst(anon, hold / 2)?);
        cycles += 1;
    }
    Ok(json!({
        "lookups": n,
        "enoent": enoent,
        "cycles": cycles,
        "slowest_burst_ms": slowest_burst.as_secs_f64() * 1e3,
    }))
}

/// Case 3's layout: `n` memcgs, each with its own tmpfs mount and a file created from inside
/// it (and a few failed look-ups, so each superblock has objects on that memcg's LRU), then
/// timed reclaim rounds that have to walk every memcg x superblock pair.
fn memcg_mounts(a: &Args) -> Result<Value> {
    set_comm("lab-shrinker");
    let parent = std::path::PathBuf::from(a.str("memcg_parent")?);
    let home = a.str("home_procs")?;
    let mnt = std::path::PathBuf::from(a.str("mnt_dir")?);
    let n = a.u64("memcgs")?;
    let rounds = a.u64("rounds")?;
    let period = Duration::from_millis(a.u64("period_ms")?);
    let negatives = a.u64("negatives")?;
    let mode = a.str("mode")?.to_string();

    // Private mount namespace: the mounts exist only for this process and disappear with it,
    // whatever kills it.
    // SAFETY: plain system calls with valid arguments.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            bail!("unshare(CLONE_NEWNS): {}", std::io::Error::last_os_error());
        }
        let root = cpath("/")?;
        if libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            bail!("making mounts private: {}", std::io::Error::last_os_error());
        }
    }
    let v2_ctl = parent.join("cgroup.subtree_control");
    if v2_ctl.exists() {
        std::fs::write(&v2_ctl, "+memory").context("enabling memory for the lab memcgs")?;
    }
    let t0 = Instant::now();
    let mut made = 0u64;
    let fstype = cpath("tmpfs")?;
    for i in 0..n {
        if stop::requested() {
            break;
        }
        let cg = parent.join(i.to_string());
        std::fs::create_dir(&cg).with_context(|| format!("mkdir {}", cg.display()))?;
        std::fs::write(cg.join("cgroup.procs"), "0")
            .with_context(|| format!("joining {}", cg.display()))?;
        let m = mnt.join(i.to_string());
        std::fs::create_dir_all(&m)?;
        let target = cpath(m.to_str().context("non-UTF-8 path")?)?;
        let src = cpath(&format!("lab-shrinker-{i}"))?;
        let opts = cpath("size=1m,mode=0700")?;
        // SAFETY: valid C strings.
        if unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                opts.as_ptr().cast(),
            )
        } != 0
        {
            bail!(
                "mount tmpfs on {}: {}",
                m.display(),
                std::io::Error::last_os_error()
            );
        }
        std::fs::write(m.join("file"), b"x")?;
        probe_negatives(&m, negatives);
        made += 1;
    }
    std::fs::write(home, "0").context("returning to the home cgroup")?;
    let setup = t0.elapsed();

    let mut rounds_ms = Vec::new();
    let mut next = Instant::now();
    for _ in 0..rounds {
        if !stop::sleep_until(next) {
            break;
        }
        next += period;
        let t = Instant::now();
        let r = match mode.as_str() {
            // Slab only (2), not the page cache (3): the walk over memcg x superblock is what
            // case 3 timed, and the host's page cache is not the lab's to drop.
            "drop_caches" => std::fs::write("/proc/sys/vm/drop_caches", "2"),
            // Scoped to the lab's memcgs; EAGAIN just means less than asked was reclaimed.
            _ => match std::fs::write(parent.join("memory.reclaim"), "1G") {
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => Ok(()),
                r => r,
            },
        };
        r.with_context(|| format!("reclaim round ({mode})"))?;
        rounds_ms.push(t.elapsed().as_secs_f64() * 1e3);
        // A round empties the memcgs' dentry lists, and a walk that finds nothing to scan costs
        // a few ms (rounds of 600, 5 and 7 ms were seen): refill them, from inside each memcg
        // so that each list is charged to its own, before the next round.
        if rounds_ms.len() < rounds as usize {
            for i in 0..made {
                std::fs::write(parent.join(i.to_string()).join("cgroup.procs"), "0")?;
                probe_negatives(&mnt.join(i.to_string()), negatives);
            }
            std::fs::write(home, "0").context("returning to the home cgroup")?;
        }
    }
    while stop::sleep(Duration::from_secs(3600)) {}
    Ok(json!({
        "memcgs": made,
        "mounts": made,
        "setup_ms": setup.as_secs_f64() * 1e3,
        "mode": mode,
        "rounds_ms": rounds_ms,
    }))
}

/// Failed look-ups of `n` names under `dir`: negative dentries charged to the caller's memcg.
fn probe_negatives(dir: &std::path::Path, n: u64) {
    for k in 0..n {
        let _ = std::fs::metadata(dir.join(format!(".{k}_probe")));
    }
}

/// Case 4's trigger: threads of one process on every CPU, each touching its own region then
/// `madvise(MADV_DONTNEED)`-ing it, as jemalloc's purging does. Each call must flush the TLB of
/// every other CPU running the process: shootdown IPIs.
fn madvise_storm(a: &Args) -> Result<Value> {
    set_comm("lab-madvise");
    let threads = a.u64("threads")?;
    let region = (a.u64("region_kib")? * 1024).max(4096) as usize;
    let period = Duration::from_millis(a.u64("period_ms")?);
    let burst = Duration::from_millis(a.u64("burst_ms")?);
    let calls = Arc::new(AtomicU64::new(0));
    let cpus = cpus();
    // Every thread times its bursts from the same instant, so all of them storm at once. A
    // flush only interrupts CPUs that are running the process: a thread asleep between calls
    // leaves its CPU in lazy-TLB mode, which the kernel skips. Pausing after every call made
    // the IPI rate depend on how the two threads' sleeps happened to interleave, which differed
    // between this host and the emulated guests by more than the signature's margin.
    let t0 = Instant::now();
    for t in 0..threads as usize {
        let calls = calls.clone();
        let cpu = cpus[t % cpus.len()];
        std::thread::Builder::new()
            .name("lab-madvise".into())
            .spawn(move || {
                let _ = pin(cpu);
                // SAFETY: private anonymous mapping owned by this thread for the process's life.
                let p = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        region,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    )
                };
                if p == libc::MAP_FAILED {
                    return;
                }
                let base = p as *mut u8;
                loop {
                    if let Some(wait) = burst_wait(t0.elapsed(), period, burst) {
                        std::thread::sleep(wait);
                        continue;
                    }
                    let mut off = 0;
                    while off < region {
                        // SAFETY: inside the mapping.
                        unsafe { base.add(off).write_volatile(1) };
                        off += 4096;
                    }
                    // SAFETY: the mapping is ours; DONTNEED only drops its pages.
                    unsafe { libc::madvise(p, region, libc::MADV_DONTNEED) };
                    calls.fetch_add(1, Ordering::Relaxed);
                }
            })?;
    }
    while stop::sleep(Duration::from_secs(3600)) {}
    let n = calls.load(Ordering::Relaxed);
    Ok(json!({
        "madvise_calls": n,
        "madvise_per_s": n as f64 / t0.elapsed().as_secs_f64(),
    }))
}

/// How long a storm thread sleeps before its next burst, `elapsed` after the common start:
/// `None` inside the first `burst` of every `period` (or always, when `period` is zero).
fn burst_wait(elapsed: Duration, period: Duration, burst: Duration) -> Option<Duration> {
    if period.is_zero() || burst >= period {
        return None;
    }
    let p = period.as_nanos();
    let into = elapsed.as_nanos() % p;
    (into >= burst.as_nanos()).then(|| Duration::from_nanos((p - into) as u64))
}

/// Anonymous memory a little over its cgroup's `memory.high`, again and again: map
/// `bytes`, touch every page, hold `hold_ms`, unmap. With no swap for the cgroup the pages over
/// the line cannot be reclaimed, so every batch of charges past it ends in the kernel's
/// penalty sleep: the touches crawl, which the report's per-cycle times show.
fn over_high(a: &Args) -> Result<Value> {
    set_comm("lab-overhigh");
    let bytes = a.u64("bytes")?;
    let hold = Duration::from_millis(a.u64("hold_ms")?);
    let mut touch_ms = Vec::new();
    while !stop::requested() {
        touch_ms.push(anon_burst(bytes, hold)?.as_secs_f64() * 1e3);
    }
    let max = touch_ms.iter().copied().fold(0.0, f64::max);
    Ok(json!({"cycles": touch_ms.len(), "touch_ms_max": max, "touch_ms": touch_ms}))
}

/// A working set of anonymous memory larger than the cgroup's memory limit, swept page by
/// page again and again: the first sweep writes every page (so each has contents to swap out),
/// the next ones read them. In LRU order the page read next is always the one evicted longest
/// ago, so once the cgroup is full every read is a swap-in, a major fault. Reports each
/// sweep's time and the process's major faults.
fn swap_thrash(a: &Args) -> Result<Value> {
    set_comm("lab-swapper");
    let len = a.u64("bytes")? as usize;
    let p = anon_map(len)?;
    let base = p as *mut u8;
    let mut sweeps_ms = Vec::new();
    let mut sum = 0u64;
    'run: while !stop::requested() {
        let t = Instant::now();
        let mut off = 0;
        while off < len {
            // SAFETY: off < len, inside the mapping.
            unsafe {
                if sweeps_ms.is_empty() {
                    base.add(off).write_volatile((off >> 12) as u8 | 1);
                } else {
                    sum = sum.wrapping_add(base.add(off).read_volatile() as u64);
                }
            }
            off += 4096;
            if off.is_multiple_of(4 << 20) && stop::requested() {
                break 'run;
            }
        }
        sweeps_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    // SAFETY: unmapping exactly what was mapped.
    unsafe { libc::munmap(p, len) };
    // SAFETY: getrusage fills a zeroed rusage.
    let majflt = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru.ru_majflt
    };
    Ok(json!({
        "sweeps": sweeps_ms.len(),
        "sweeps_ms": sweeps_ms,
        "majflt": majflt,
        "checksum": black_box(sum),
    }))
}

/// A UDP socket bound to 127.0.0.1 on an ephemeral port, non-blocking.
fn udp_socket() -> Result<std::net::UdpSocket> {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").context("binding a UDP socket on loopback")?;
    s.set_nonblocking(true)?;
    Ok(s)
}

/// Small datagrams to a receiver on loopback, from one thread pinned to the last CPU, in
/// bursts of `burst_ms` every `period_ms`. On loopback the receive half of every packet (IP,
/// UDP, the socket queue, waking the reader) runs as the NET_RX soft interrupt on the sending
/// CPU, raised by the send itself: the sender's CPU spends its time in softirq, as a CPU
/// taking a NIC queue's interrupts does. A reader thread drains the socket, as a server
/// would. `sendmmsg` batches keep the system-call half small next to the softirq half.
fn udp_flood(a: &Args) -> Result<Value> {
    set_comm("lab-flood");
    let period = Duration::from_millis(a.u64("period_ms")?);
    let burst = Duration::from_millis(a.u64("burst_ms")?);
    let rx = udp_socket()?;
    let to = rx.local_addr()?;
    let received = Arc::new(AtomicU64::new(0));
    {
        let received = received.clone();
        std::thread::Builder::new()
            .name("lab-flood-rx".into())
            .spawn(move || {
                let mut buf = [0u8; 2048];
                loop {
                    match rx.recv(&mut buf) {
                        Ok(_) => {
                            received.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_micros(200))
                        }
                        Err(_) => return,
                    }
                }
            })?;
    }
    let cpu = *cpus().last().unwrap_or(&0);
    pin(cpu)?;
    let tx = udp_socket()?;
    tx.connect(to)?;
    const BATCH: usize = 64;
    let payload = [0x5au8; 64];
    let mut iov: Vec<libc::iovec> = (0..BATCH)
        .map(|_| libc::iovec {
            iov_base: payload.as_ptr() as *mut libc::c_void,
            iov_len: payload.len(),
        })
        .collect();
    // SAFETY: zeroed mmsghdr is valid (no name: the socket is connected); each points at its
    // own iovec, which outlives the calls.
    let mut msgs: Vec<libc::mmsghdr> = iov
        .iter_mut()
        .map(|v| {
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = v as *mut libc::iovec;
            m.msg_hdr.msg_iovlen = 1;
            m
        })
        .collect();
    use std::os::fd::AsRawFd;
    let fd = tx.as_raw_fd();
    let t0 = Instant::now();
    let mut sent = 0u64;
    while !stop::requested() {
        if let Some(wait) = burst_wait(t0.elapsed(), period, burst) {
            std::thread::sleep(wait);
            continue;
        }
        // SAFETY: msgs holds BATCH valid headers for a connected socket.
        let n = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), BATCH as u32, 0) };
        if n > 0 {
            sent += n as u64;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    Ok(json!({
        "cpu": cpu,
        "sent": sent,
        "sent_per_s": sent as f64 / secs,
        "received": received.load(Ordering::Relaxed),
    }))
}

/// Threads of one process that map a small anonymous region, write one byte to each of its
/// first `touch_pages` pages and unmap it, in bursts of `burst_ms` every `period_ms`. mmap and munmap each take the process's
/// mmap_lock for writing, so with more threads than CPUs they queue on it and sleep: the shape
/// of an allocator or runtime that returns memory with munmap from every thread. Each cycle's
/// time is kept, so the report says what the contention cost the threads themselves.
fn map_churn(a: &Args) -> Result<Value> {
    set_comm("lab-mapper");
    let threads = a.u64("threads")?.max(1);
    let period = Duration::from_millis(a.u64("period_ms")?);
    let burst = Duration::from_millis(a.u64("burst_ms")?);
    let len = a.u64("bytes")? as usize;
    let touch = a.u64("touch_pages")? as usize;
    let t0 = Instant::now();
    let mut handles = Vec::new();
    for i in 0..threads {
        handles.push(
            std::thread::Builder::new()
                .name(format!("lab-mapper-{i}"))
                .spawn(move || -> Result<Vec<u32>> {
                    let mut cycles_us = Vec::new();
                    while !stop::requested() {
                        if let Some(wait) = burst_wait(t0.elapsed(), period, burst) {
                            std::thread::sleep(wait);
                            continue;
                        }
                        let c0 = Instant::now();
                        let p = anon_map(len)?.cast::<u8>();
                        for off in (0..len).step_by(4096).take(touch) {
                            // SAFETY: off < len, inside the mapping just made.
                            unsafe { p.add(off).write_volatile(1) };
                        }
                        // SAFETY: unmaps exactly the mapping made above, no longer used.
                        unsafe { libc::munmap(p.cast(), len) };
                        if cycles_us.len() < 1_000_000 {
                            cycles_us.push(c0.elapsed().as_micros().min(u32::MAX as u128) as u32);
                        }
                    }
                    Ok(cycles_us)
                })?,
        );
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(
            h.join()
                .map_err(|_| anyhow!("a mapper thread panicked"))??,
        );
    }
    all.sort_unstable();
    let secs = t0.elapsed().as_secs_f64();
    Ok(json!({
        "threads": threads,
        "cycles": all.len(),
        "cycles_per_s": all.len() as f64 / secs,
        "cycle_p50_us": pct(&all, 50.0),
        "cycle_p99_us": pct(&all, 99.0),
        "cycle_max_us": all.last().copied().unwrap_or(0),
    }))
}

/// Buffered writes of 1 MiB over a file of `bytes` at `path`, front to back and again, never
/// syncing: the page cache takes every write at memory speed until the writer's dirty pages pass
/// its writeback domain's limits, then balance_dirty_pages makes it sleep until writeback
/// catches up. Each write's time is kept, so the report says what the throttling cost.
fn dirty_writer(a: &Args) -> Result<Value> {
    use std::os::unix::fs::FileExt;
    set_comm("lab-writer");
    let bytes = a.u64("bytes")?;
    let path = a.str("path")?;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(path)
        .with_context(|| format!("creating {path}"))?;
    const CHUNK: u64 = 1 << 20;
    let buf = vec![0x6bu8; CHUNK as usize];
    let t0 = Instant::now();
    let mut times_us: Vec<u32> = Vec::new();
    let (mut off, mut written) = (0u64, 0u64);
    while !stop::requested() {
        let w0 = Instant::now();
        f.write_all_at(&buf, off)
            .with_context(|| format!("writing {path}"))?;
        times_us.push(w0.elapsed().as_micros().min(u32::MAX as u128) as u32);
        written += CHUNK;
        off = (off + CHUNK) % bytes.max(CHUNK);
    }
    let secs = t0.elapsed().as_secs_f64();
    times_us.sort_unstable();
    Ok(json!({
        "written_mib": written >> 20,
        "mib_per_s": (written >> 20) as f64 / secs,
        "write_p50_us": pct(&times_us, 50.0),
        "write_p99_us": pct(&times_us, 99.0),
        "write_max_us": times_us.last().copied().unwrap_or(0),
    }))
}

/// Percentile of sorted values (nearest rank).
fn pct(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[i.clamp(1, sorted.len()) - 1]
}

/// The victim: sleeps `period_us` in a loop and measures how late each wake-up is — the
/// latency a request-serving thread on the same CPUs would see.
fn latency_probe(a: &Args) -> Result<Value> {
    set_comm("lab-victim");
    let period = Duration::from_micros(a.u64("period_us")?);
    let mut late: Vec<u32> = Vec::new();
    while !stop::requested() {
        let t = Instant::now();
        std::thread::sleep(period);
        let over = t.elapsed().saturating_sub(period);
        if late.len() < 4_000_000 {
            late.push(over.as_micros().min(u32::MAX as u128) as u32);
        }
    }
    late.sort_unstable();
    Ok(json!({
        "wakeups": late.len(),
        "late_p50_us": pct(&late, 50.0),
        "late_p99_us": pct(&late, 99.0),
        "late_max_us": late.last().copied().unwrap_or(0),
    }))
}

fn read_all(path: &str, buf: &mut [u8]) -> Result<u64> {
    let mut f = std::fs::File::open(path).with_context(|| format!("open {path}"))?;
    let mut total = 0u64;
    loop {
        let n = f.read(buf)?;
        if n == 0 {
            return Ok(total);
        }
        total += n as u64;
        if stop::requested() {
            return Ok(total);
        }
    }
}

/// A memory-limited cgroup that fills its limit with page cache (reading a file) and then
/// needs anonymous memory in a hurry: every page of the burst has to be reclaimed first, by
/// the allocating task itself (direct reclaim).
fn cache_burst(a: &Args) -> Result<Value> {
    set_comm("lab-reclaim");
    let file = a.str("file")?;
    let anon = a.u64("anon_bytes")?;
    let mut buf = vec![0u8; 1 << 20];
    let mut cycles = 0u64;
    let mut bursts = Vec::new();
    while !stop::requested() {
        read_all(file, &mut buf)?;
        if stop::requested() {
            break;
        }
        // Held a little longer than the recorder's interval, so that a sample falls inside
        // every burst: that is when the cgroup sits at its limit. Held 200 ms, a run could end
        // with no sample above 78 % of the limit (a full CI run, debug build, 5 samples).
        bursts.push(anon_burst(anon, Duration::from_millis(1100))?.as_secs_f64() * 1e3);
        cycles += 1;
    }
    let max = bursts.iter().copied().fold(0.0, f64::max);
    let mean = if bursts.is_empty() {
        0.0
    } else {
        bursts.iter().sum::<f64>() / bursts.len() as f64
    };
    Ok(json!({"cycles": cycles, "burst_ms_max": max, "burst_ms_mean": mean}))
}

/// The victim of page-cache thrashing: a process whose working set is a file it maps and reads
/// page by page, over and over. Evicted pages come back as major faults.
fn working_set(a: &Args) -> Result<Value> {
    set_comm("lab-workset");
    let file = a.str("file")?;
    let f = std::fs::File::open(file).with_context(|| format!("open {file}"))?;
    let len = f.metadata()?.len() as usize;
    use std::os::fd::AsRawFd;
    // SAFETY: a read-only shared mapping of a file we keep open; unmapped at exit.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        bail!("mmap {file}: {}", std::io::Error::last_os_error());
    }
    // Like a database's data file: random access, no read-ahead. Each evicted page then comes
    // back through its own major fault; with read-ahead, a sequential pass hides the I/O in
    // minor faults that wait for pages already being read.
    // SAFETY: advice on our own mapping.
    unsafe { libc::madvise(p, len, libc::MADV_RANDOM) };
    let pause = Duration::from_millis(a.u64("pause_ms")?);
    let base = p as *const u8;
    let pages = len.div_ceil(4096);
    // A stride coprime with the page count visits every page once per pass, out of order.
    let stride = (7919..).find(|s| gcd(*s, pages) == 1).unwrap_or(1);
    let mut passes = 0u64;
    let mut touched = 0u64;
    let mut slowest = Duration::ZERO;
    let mut sum = 0u64;
    let t0 = Instant::now();
    'run: while !stop::requested() {
        let t = Instant::now();
        for i in 0..pages {
            let off = (i * stride % pages) * 4096;
            // SAFETY: off < len, inside the mapping.
            sum = sum.wrapping_add(unsafe { base.add(off).read_volatile() } as u64);
            touched += 1;
            if i.is_multiple_of(1024) && stop::requested() {
                break 'run;
            }
        }
        slowest = slowest.max(t.elapsed());
        passes += 1;
        stop::sleep(pause);
    }
    black_box(sum);
    Ok(json!({
        "passes": passes,
        "slowest_pass_ms": slowest.as_secs_f64() * 1e3,
        // A resident working set is read at millions of pages per second.
        "pages_per_s": touched as f64 / t0.elapsed().as_secs_f64(),
    }))
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The streaming reader: reads a file larger than its cgroup's memory from start to end, again
/// and again — each pass pushes everything else out of the cgroup's page cache.
fn stream(a: &Args) -> Result<Value> {
    set_comm("lab-stream");
    let file = a.str("file")?;
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    let t0 = Instant::now();
    while !stop::requested() {
        total += read_all(file, &mut buf)?;
    }
    Ok(json!({
        "bytes_read": total,
        "read_mib_per_s": total as f64 / (1 << 20) as f64 / t0.elapsed().as_secs_f64(),
    }))
}

/// A service's hot file read through `read()` again and again, with a pause between passes:
/// while it fits in its cgroup it is served from the page cache; once something evicts it,
/// every pass reads it back from storage (refaults, no major faults: nothing is mapped).
fn reread(a: &Args) -> Result<Value> {
    set_comm("lab-reread");
    let file = a.str("file")?;
    let pause = Duration::from_millis(a.u64("pause_ms")?);
    let mut buf = vec![0u8; 1 << 20];
    let (mut total, mut passes) = (0u64, 0u64);
    let mut slowest = Duration::ZERO;
    let t0 = Instant::now();
    while !stop::requested() {
        let t = Instant::now();
        total += read_all(file, &mut buf)?;
        passes += 1;
        slowest = slowest.max(t.elapsed());
        if !stop::sleep(pause) {
            break;
        }
    }
    Ok(json!({
        "bytes_read": total,
        "passes": passes,
        "slowest_pass_ms": slowest.as_secs_f64() * 1e3,
        "read_mib_per_s": total as f64 / (1 << 20) as f64 / t0.elapsed().as_secs_f64(),
    }))
}

/// CPU-bound threads, one per CPU by default: saturation with no kernel mechanism behind it.
fn busy(a: &Args) -> Result<Value> {
    set_comm("lab-busy");
    let threads = match a.opt("threads") {
        Some(_) => a.u64("threads")? as usize,
        None => cpus().len(),
    };
    let loops = Arc::new(AtomicU64::new(0));
    for _ in 0..threads {
        let loops = loops.clone();
        std::thread::Builder::new()
            .name("lab-busy".into())
            .spawn(move || loop {
                fib(100_000);
                loops.fetch_add(1, Ordering::Relaxed);
            })?;
    }
    while stop::sleep(Duration::from_secs(3600)) {}
    Ok(json!({"threads": threads, "loops": loops.load(Ordering::Relaxed)}))
}

/// Does nothing, in a lab cgroup: the quiet control.
fn idle() -> Result<Value> {
    set_comm("lab-idle");
    let t0 = Instant::now();
    while stop::sleep(Duration::from_secs(3600)) {}
    Ok(json!({"slept_s": t0.elapsed().as_secs_f64()}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_parse_and_complain() {
        let a = Args::parse(&["a=1".into(), "dir=/x=y".into()]).unwrap();
        assert_eq!(a.u64("a").unwrap(), 1);
        assert_eq!(a.str("dir").unwrap(), "/x=y");
        assert!(a
            .u64("dir")
            .unwrap_err()
            .to_string()
            .contains("not a number"));
        assert!(a.str("b").unwrap_err().to_string().contains("missing"));
        assert!(Args::parse(&["novalue".into()]).is_err());
    }

    proptest::proptest! {
        #[test]
        fn args_never_panic(words in proptest::collection::vec("\\PC*", 0..8)) {
            if let Ok(a) = Args::parse(&words) {
                for w in &words {
                    let (k, v) = w.split_once('=').unwrap();
                    // The last word with a key wins.
                    let last = words.iter().rev().find_map(|x| x.split_once('=').filter(|(kk, _)| kk == &k)).unwrap().1;
                    proptest::prop_assert_eq!(a.str(k).unwrap(), last);
                    let _ = a.u64(k);
                    let _ = v;
                }
            }
        }
    }

    #[test]
    fn storm_bursts_share_one_clock() {
        let ms = Duration::from_millis;
        assert_eq!(burst_wait(ms(0), ms(100), ms(25)), None);
        assert_eq!(burst_wait(ms(24), ms(100), ms(25)), None);
        assert_eq!(burst_wait(ms(25), ms(100), ms(25)), Some(ms(75)));
        assert_eq!(burst_wait(ms(299), ms(100), ms(25)), Some(ms(1)));
        assert_eq!(burst_wait(ms(310), ms(100), ms(25)), None);
        // No period, or a burst as long as it: storm without pause.
        assert_eq!(burst_wait(ms(50), ms(0), ms(25)), None);
        assert_eq!(burst_wait(ms(50), ms(100), ms(100)), None);
    }

    #[test]
    fn percentiles() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(pct(&v, 50.0), 50);
        assert_eq!(pct(&v, 99.0), 99);
        assert_eq!(pct(&v, 100.0), 100);
        assert_eq!(pct(&[], 99.0), 0);
        assert_eq!(pct(&[7], 1.0), 7);
    }

    #[test]
    fn stride_visits_every_page() {
        for pages in [1usize, 2, 7919, 32768, 32769] {
            let stride = (7919..).find(|s| gcd(*s, pages) == 1).unwrap();
            let mut seen = vec![false; pages];
            for i in 0..pages {
                seen[i * stride % pages] = true;
            }
            assert!(seen.iter().all(|&x| x), "{pages}");
        }
    }

    #[test]
    fn fib_wraps_without_panic() {
        assert_eq!(fib(10), 55);
        fib(100_000);
    }
}
