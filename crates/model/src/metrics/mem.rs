//! Memory: meminfo, vmstat (reclaim), dentry cache, slab caches, buddy free lists.

use jitterscope_sources::system::meminfo::MemUnit;

use super::{gauge, metrics, pairs, rate};
use crate::eval::Ctx;
use crate::registry::Emit;

fn meminfo(cx: &Ctx, out: &mut Emit, key: &str) {
    gauge(
        out,
        &[],
        cx.cur
            .meminfo
            .as_ref()
            .and_then(|m| m.bytes(key))
            .map(|v| v as f64),
    );
}

fn vm(s: &crate::Sample, key: &str) -> Option<u64> {
    s.vmstat.as_ref()?.get(key)
}

/// Sum of the vmstat keys starting with `prefix` (allocstall_dma32 + allocstall_normal + ...).
/// Kernels before 4.8 split reclaim counters per zone and later ones per node; summing by prefix
/// reads both.
fn vm_sum(s: &crate::Sample, prefix: &str) -> Option<u64> {
    let v = s.vmstat.as_ref()?;
    let mut found = false;
    let mut sum = 0u64;
    for (k, val) in &v.counters {
        if k.starts_with(prefix) {
            found = true;
            sum = sum.wrapping_add(*val);
        }
    }
    found.then_some(sum)
}

fn vm_rate(cx: &Ctx, out: &mut Emit, f: fn(&crate::Sample) -> Option<u64>) {
    rate(cx, out, &[], f(cx.cur), cx.prev.and_then(f), 1.0);
}

/// Zones that can hold pages (the empty Movable and Device zones are printed with watermarks too).
fn zones<'a>(
    cx: &Ctx<'a>,
) -> impl Iterator<Item = &'a jitterscope_sources::system::zoneinfo::Zone> {
    cx.cur
        .zoneinfo
        .iter()
        .flat_map(|z| &z.zones)
        .filter(|z| z.present_pages > 0)
}

fn zone(
    cx: &Ctx,
    out: &mut Emit,
    f: fn(&jitterscope_sources::system::zoneinfo::Zone) -> Option<u64>,
) {
    zone_f(cx, out, |z| f(z).map(|v| v as f64));
}

fn zone_f(
    cx: &Ctx,
    out: &mut Emit,
    f: impl Fn(&jitterscope_sources::system::zoneinfo::Zone) -> Option<f64>,
) {
    for z in zones(cx) {
        if let Some(v) = f(z) {
            out(&[&z.node.to_string(), &z.zone], Some(v));
        }
    }
}

/// vmstat keys that are levels, not counters: every `nr_*` and a few others.
fn vmstat_is_gauge(k: &str) -> bool {
    k.starts_with("nr_") || k == "workingset_nodes"
}

metrics! {
    reads: NONE;
    TOTAL_BYTES = ("mem.total_bytes", Bytes, Gauge, "Usable RAM (/proc/meminfo MemTotal)", |cx, out| meminfo(cx, out, "MemTotal")),
    FREE_BYTES = ("mem.free_bytes", Bytes, Gauge, "Free RAM (/proc/meminfo MemFree)", |cx, out| meminfo(cx, out, "MemFree")),
    AVAILABLE_BYTES = ("mem.available_bytes", Bytes, Gauge, "RAM available without swapping, estimated by the kernel (MemAvailable)", |cx, out| meminfo(cx, out, "MemAvailable")),
    CACHED_BYTES = ("mem.cached_bytes", Bytes, Gauge, "Page cache (/proc/meminfo Cached)", |cx, out| meminfo(cx, out, "Cached")),
    BUFFERS_BYTES = ("mem.buffers_bytes", Bytes, Gauge, "Block device buffers (/proc/meminfo Buffers)", |cx, out| meminfo(cx, out, "Buffers")),
    ANON_BYTES = ("mem.anon_bytes", Bytes, Gauge, "Anonymous memory mapped by processes (/proc/meminfo AnonPages)", |cx, out| meminfo(cx, out, "AnonPages")),
    SHMEM_BYTES = ("mem.shmem_bytes", Bytes, Gauge, "tmpfs and shared memory (/proc/meminfo Shmem)", |cx, out| meminfo(cx, out, "Shmem")),
    SLAB_BYTES = ("mem.slab_bytes", Bytes, Gauge, "Kernel slab caches: dentries, inodes... (/proc/meminfo Slab)", |cx, out| meminfo(cx, out, "Slab")),
    SLAB_RECLAIMABLE_BYTES = ("mem.slab_reclaimable_bytes", Bytes, Gauge, "Reclaimable slab, freed only by shrinkers under pressure (SReclaimable)", |cx, out| meminfo(cx, out, "SReclaimable")),
    SLAB_UNRECLAIMABLE_BYTES = ("mem.slab_unreclaimable_bytes", Bytes, Gauge, "Unreclaimable slab (SUnreclaim)", |cx, out| meminfo(cx, out, "SUnreclaim")),
    DIRTY_BYTES = ("mem.dirty_bytes", Bytes, Gauge, "Dirty page cache waiting for writeback (/proc/meminfo Dirty)", |cx, out| meminfo(cx, out, "Dirty")),
    WRITEBACK_BYTES = ("mem.writeback_bytes", Bytes, Gauge, "Page cache under writeback (/proc/meminfo Writeback)", |cx, out| meminfo(cx, out, "Writeback")),
    SWAP_USED_BYTES = ("mem.swap_used_bytes", Bytes, Gauge, "Swap in use (SwapTotal - SwapFree)", |cx, out| {
            let m = cx.cur.meminfo.as_ref();
            let used = m.and_then(|m| Some(m.bytes("SwapTotal")?.saturating_sub(m.bytes("SwapFree")?)));
            gauge(out, &[], used.map(|v| v as f64));
        }),
    MEMINFO_FIELD_BYTES = ("meminfo.<field>_bytes", Bytes, Gauge, "Every /proc/meminfo field reported in kB, in bytes", |cx, out| {
            for e in cx.cur.meminfo.iter().flat_map(|m| &m.entries) {
                if e.unit == MemUnit::Bytes {
                    out(&[&e.key], Some(e.value as f64));
                }
            }
        }),
    MEMINFO_FIELD = ("meminfo.<field>", Count, Gauge, "Every /proc/meminfo field reported as a count (HugePages_*)", |cx, out| {
            for e in cx.cur.meminfo.iter().flat_map(|m| &m.entries) {
                if e.unit != MemUnit::Bytes {
                    out(&[&e.key], Some(e.value as f64));
                }
            }
        }),
    RECLAIM_PGSCAN_KSWAPD_PER_S = ("reclaim.pgscan_kswapd_per_s", PerSecond, Rate, "Pages scanned by kswapd (background reclaim) per second (vmstat pgscan_kswapd*)", |cx, out| vm_rate(cx, out, |s| vm_sum(s, "pgscan_kswapd"))),
    RECLAIM_PGSCAN_DIRECT_PER_S = ("reclaim.pgscan_direct_per_s", PerSecond, Rate, "Pages scanned by allocating tasks in direct reclaim per second: they stall while doing it (vmstat pgscan_direct*)", |cx, out| vm_rate(cx, out, |s| vm_sum(s, "pgscan_direct"))),
    RECLAIM_PGSTEAL_KSWAPD_PER_S = ("reclaim.pgsteal_kswapd_per_s", PerSecond, Rate, "Pages reclaimed by kswapd per second (vmstat pgsteal_kswapd*)", |cx, out| vm_rate(cx, out, |s| vm_sum(s, "pgsteal_kswapd"))),
    RECLAIM_PGSTEAL_DIRECT_PER_S = ("reclaim.pgsteal_direct_per_s", PerSecond, Rate, "Pages reclaimed in direct reclaim per second (vmstat pgsteal_direct*)", |cx, out| vm_rate(cx, out, |s| vm_sum(s, "pgsteal_direct"))),
    RECLAIM_ALLOCSTALL_PER_S = ("reclaim.allocstall_per_s", PerSecond, Rate, "Allocations that entered direct reclaim per second (vmstat allocstall*)", |cx, out| vm_rate(cx, out, |s| vm_sum(s, "allocstall"))),
    RECLAIM_COMPACT_STALL_PER_S = ("reclaim.compact_stall_per_s", PerSecond, Rate, "Allocations that stalled in direct compaction per second (vmstat compact_stall)", |cx, out| vm_rate(cx, out, |s| vm(s, "compact_stall"))),
    RECLAIM_PGMAJFAULT_PER_S = ("reclaim.pgmajfault_per_s", PerSecond, Rate, "Major page faults (needing I/O) per second (vmstat pgmajfault)", |cx, out| vm_rate(cx, out, |s| vm(s, "pgmajfault"))),
    RECLAIM_REFAULT_FILE_PER_S = ("reclaim.refault_file_per_s", PerSecond, Rate, "Evicted file pages faulted back in per second: page-cache thrashing (vmstat workingset_refault_file, or workingset_refault before 5.9)", |cx, out| {
            vm_rate(cx, out, |s| vm(s, "workingset_refault_file").or_else(|| vm(s, "workingset_refault")))
        }),
    RECLAIM_REFAULT_ANON_PER_S = ("reclaim.refault_anon_per_s", PerSecond, Rate, "Evicted anonymous pages faulted back in per second (vmstat workingset_refault_anon)", |cx, out| vm_rate(cx, out, |s| vm(s, "workingset_refault_anon"))),
    RECLAIM_SLABS_SCANNED_PER_S = ("reclaim.slabs_scanned_per_s", PerSecond, Rate, "Slab objects scanned by shrinkers per second (vmstat slabs_scanned)", |cx, out| vm_rate(cx, out, |s| vm(s, "slabs_scanned"))),
    RECLAIM_KSWAPD_WAKEUPS_PER_S = ("reclaim.kswapd_wakeups_per_s", PerSecond, Rate, "kswapd wake-ups because a zone fell below its low watermark (vmstat pageoutrun)", |cx, out| vm_rate(cx, out, |s| vm(s, "pageoutrun"))),
    OOM_KILL_RSS_BYTES = ("oom.kill.<pid>.<comm>.rss_bytes", Bytes, Gauge, "Resident memory (anon + file + shmem) of a process the OOM killer killed this interval, from the kernel's report in /dev/kmsg", |cx, out| {
        for k in cx.cur.oom_kills.iter().flatten() {
            let pid = k.pid.to_string();
            gauge(out, &[&pid, &k.comm], k.rss_bytes().map(|b| b as f64));
        }
    }),
    RECLAIM_OOM_KILL_PER_S = ("reclaim.oom_kill_per_s", PerSecond, Rate, "OOM kills per second (vmstat oom_kill)", |cx, out| vm_rate(cx, out, |s| vm(s, "oom_kill"))),
    VMSTAT_FIELD = ("vmstat.<field>", Count, Gauge, "Every /proc/vmstat value as the kernel reports it (nr_* are levels, the rest cumulative counters)", |cx, out| {
            for (k, v) in cx.cur.vmstat.iter().flat_map(|v| &v.counters) {
                out(&[k], Some(*v as f64));
            }
        }),
    VMSTAT_FIELD_PER_S = ("vmstat.<field>_per_s", PerSecond, Rate, "Per-second rate of every cumulative /proc/vmstat counter", |cx, out| {
            let (Some(c), Some(p)) = (&cx.cur.vmstat, cx.prev.and_then(|p| p.vmstat.as_ref())) else { return };
            for (i, (k, v)) in c.counters.iter().enumerate() {
                if vmstat_is_gauge(k) {
                    continue;
                }
                // Same kernel, same order: try the same position before searching.
                let pv = match p.counters.get(i) {
                    Some((pk, pv)) if pk == k => Some(*pv),
                    _ => p.get(k),
                };
                rate(cx, out, &[k], Some(*v), pv, 1.0);
            }
        }),
    DENTRY_NR_DENTRY = ("dentry.nr_dentry", Count, Gauge, "Dentries allocated (/proc/sys/fs/dentry-state)", |cx, out| gauge(out, &[], cx.cur.dentry.as_ref().map(|d| d.nr_dentry as f64))),
    DENTRY_NR_UNUSED = ("dentry.nr_unused", Count, Gauge, "Unused dentries on the LRU, reclaimable (/proc/sys/fs/dentry-state)", |cx, out| gauge(out, &[], cx.cur.dentry.as_ref().map(|d| d.nr_unused as f64))),
    DENTRY_NR_NEGATIVE = ("dentry.nr_negative", Count, Gauge, "Negative dentries (cached failed look-ups) on the LRU; kernel 5.0+ (/proc/sys/fs/dentry-state)", |cx, out| gauge(out, &[], cx.cur.dentry.as_ref().and_then(|d| d.nr_negative).map(|v| v as f64))),
    DENTRY_NEGATIVE_GROWTH_PER_S = ("dentry.negative_growth_per_s", PerSecond, Rate, "Change of nr_negative per second (negative when shrinking)", |cx, out| {
            let c = cx.cur.dentry.as_ref().and_then(|d| d.nr_negative);
            let p = cx.prev.and_then(|p| p.dentry.as_ref()).and_then(|d| d.nr_negative);
            if let (Some(c), Some(p)) = (c, p) {
                if cx.dt_s > 0.0 {
                    out(&[], Some((c as f64 - p as f64) / cx.dt_s));
                }
            }
        }),
    SLAB_TOTAL_BYTES = ("slab.total_bytes", Bytes, Gauge in SLABINFO, "Memory held by all slab caches, from slab page counts (/proc/slabinfo)", |cx, out| {
            let page = cx.cur.host.page_size_bytes.max(1);
            let total = cx.cur.slabinfo.as_ref().map(|s| s.caches.iter().map(|c| c.num_slabs * c.pagesperslab * page).sum::<u64>());
            gauge(out, &[], total.map(|v| v as f64));
        }),
    SLAB_CACHE_TOTAL_BYTES = ("slab.<cache>.total_bytes", Bytes, Gauge in SLABINFO, "Memory held by one slab cache: slabs x pages per slab x page size (/proc/slabinfo)", |cx, out| {
            let page = cx.cur.host.page_size_bytes.max(1);
            for c in cx.cur.slabinfo.iter().flat_map(|s| &s.caches) {
                out(&[&c.name], Some((c.num_slabs * c.pagesperslab * page) as f64));
            }
        }),
    SLAB_CACHE_ACTIVE_OBJS = ("slab.<cache>.active_objs", Count, Gauge in SLABINFO, "Objects in use in one slab cache (/proc/slabinfo)", |cx, out| {
            for c in cx.cur.slabinfo.iter().flat_map(|s| &s.caches) {
                out(&[&c.name], Some(c.active_objs as f64));
            }
        }),
    SLAB_CACHE_OBJS_GROWTH_PER_S = ("slab.<cache>.objs_growth_per_s", PerSecond, Rate in SLABINFO, "Change of a slab cache's object count per second", |cx, out| {
            let (Some(c), Some(p)) = (&cx.cur.slabinfo, cx.prev.and_then(|p| p.slabinfo.as_ref())) else { return };
            if cx.dt_s <= 0.0 {
                return;
            }
            for (cc, pc) in pairs(&c.caches, Some(&p.caches), |x| &x.name) {
                if let Some(pc) = pc {
                    out(&[&cc.name], Some((cc.num_objs as f64 - pc.num_objs as f64) / cx.dt_s));
                }
            }
        }),
    ZONE_FREE_PAGES = ("zone.<node>.<zone>.free_pages", Pages, Gauge, "Free pages in a zone (/proc/zoneinfo pages free)", |cx, out| zone(cx, out, |z| Some(z.free_pages))),
    ZONE_MIN_PAGES = ("zone.<node>.<zone>.min_pages", Pages, Gauge, "Min watermark: below it allocations enter direct reclaim (/proc/zoneinfo)", |cx, out| zone(cx, out, |z| Some(z.min_pages))),
    ZONE_LOW_PAGES = ("zone.<node>.<zone>.low_pages", Pages, Gauge, "Low watermark: below it kswapd wakes up (/proc/zoneinfo)", |cx, out| zone(cx, out, |z| Some(z.low_pages))),
    ZONE_HIGH_PAGES = ("zone.<node>.<zone>.high_pages", Pages, Gauge, "High watermark: kswapd reclaims until free is above it (/proc/zoneinfo)", |cx, out| zone(cx, out, |z| Some(z.high_pages))),
    ZONE_FREE_OVER_MIN = ("zone.<node>.<zone>.free_over_min", Ratio, Gauge, "Free pages / min watermark: at or below 1 allocations stall in direct reclaim", |cx, out| {
            zone_f(cx, out, |z| (z.min_pages > 0).then(|| z.free_pages as f64 / z.min_pages as f64))
        }),
    BUDDY_FREE_BLOCKS = ("buddy.<node>.<zone>.<order>.free_blocks", Count, Gauge, "Free blocks of 2^order pages per node and zone: fragmentation (/proc/buddyinfo)", |cx, out| {
            for z in cx.cur.buddyinfo.iter().flat_map(|b| &b.zones) {
                let node = z.node.to_string();
                for (order, n) in z.free_blocks.iter().enumerate() {
                    out(&[&node, &z.zone, &order.to_string()], Some(*n as f64));
                }
            }
        }),
}
