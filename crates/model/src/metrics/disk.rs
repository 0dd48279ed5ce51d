//! Block devices (/proc/diskstats).

use jitterscope_sources::system::diskstats::DiskStat;

use super::{gauge, metrics, pairs, rate};
use crate::eval::Ctx;
use crate::registry::Emit;

/// Devices worth a series: not idle loop/ram devices (dozens of them on container hosts).
fn interesting(d: &DiskStat) -> bool {
    !((d.name.starts_with("loop") || d.name.starts_with("ram"))
        && d.reads_completed + d.writes_completed == 0)
}

fn disks<'a>(cx: &Ctx<'a>) -> Vec<(&'a DiskStat, Option<&'a DiskStat>)> {
    let Some(c) = cx.cur.diskstats.as_ref() else {
        return Vec::new();
    };
    let p = cx
        .prev
        .and_then(|p| p.diskstats.as_ref())
        .map(|p| p.disks.as_slice());
    pairs(&c.disks, p, |d| &d.name)
        .into_iter()
        .filter(|(d, _)| interesting(d))
        .collect()
}

fn disk_rate(cx: &Ctx, out: &mut Emit, f: fn(&DiskStat) -> u64, k: f64) {
    for (c, p) in disks(cx) {
        rate(cx, out, &[&c.name], Some(f(c)), p.map(f), k);
    }
}

/// Sectors in /proc/diskstats are always 512 bytes, whatever the device's block size.
const SECTOR: f64 = 512.0;

metrics! {
    reads: NONE;
    READS_PER_S = ("disk.<disk>.reads_per_s", PerSecond, Rate, "Reads completed per second (/proc/diskstats)", |cx, out| disk_rate(cx, out, |d| d.reads_completed, 1.0)),
    WRITES_PER_S = ("disk.<disk>.writes_per_s", PerSecond, Rate, "Writes completed per second (/proc/diskstats)", |cx, out| disk_rate(cx, out, |d| d.writes_completed, 1.0)),
    READ_BYTES_PER_S = ("disk.<disk>.read_bytes_per_s", BytesPerSecond, Rate, "Bytes read per second (/proc/diskstats sectors x 512)", |cx, out| disk_rate(cx, out, |d| d.read_sectors, SECTOR)),
    WRITE_BYTES_PER_S = ("disk.<disk>.write_bytes_per_s", BytesPerSecond, Rate, "Bytes written per second (/proc/diskstats sectors x 512)", |cx, out| disk_rate(cx, out, |d| d.write_sectors, SECTOR)),
    AWAIT_MS = ("disk.<disk>.await_ms", Milliseconds, Rate, "Average time per completed read or write, queueing included (iostat's await)", |cx, out| {
            for (c, p) in disks(cx) {
                let Some(p) = p else { continue };
                let ios = cx.delta(Some(c.reads_completed + c.writes_completed), Some(p.reads_completed + p.writes_completed));
                let ms = cx.delta(Some(c.read_ms + c.write_ms), Some(p.read_ms + p.write_ms));
                match (ios, ms) {
                    (Some(0), _) => {}
                    (Some(n), Some(t)) => out(&[&c.name], Some(t as f64 / n as f64)),
                    _ => out(&[&c.name], None),
                }
            }
        }),
    UTIL_PCT = ("disk.<disk>.util_pct", Percent, Rate, "Share of time the device had I/O in flight (io_ticks; saturation only for single-queue devices)", |cx, out| disk_rate(cx, out, |d| d.io_ticks_ms, 0.1)),
    QUEUE_DEPTH = ("disk.<disk>.queue_depth", Ratio, Rate, "Average requests in flight (time_in_queue per second)", |cx, out| disk_rate(cx, out, |d| d.time_in_queue_ms, 1e-3)),
    IN_FLIGHT = ("disk.<disk>.in_flight", Count, Gauge, "Requests in flight right now (/proc/diskstats)", |cx, out| {
            for (c, _) in disks(cx) {
                gauge(out, &[&c.name], Some(c.in_flight as f64));
            }
        }),
}
