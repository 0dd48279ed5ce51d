//! The recorder's own cost and health, recorded like any other source.

use super::{gauge, metrics, rate};
use crate::eval::Ctx;
use crate::registry::Emit;
use crate::sample::RecorderStats;

fn field(cx: &Ctx, out: &mut Emit, f: fn(&RecorderStats) -> f64) {
    gauge(out, &[], cx.cur.recorder.as_ref().map(f));
}

fn counter_rate(cx: &Ctx, out: &mut Emit, f: fn(&RecorderStats) -> u64, k: f64) {
    let c = cx.cur.recorder.as_ref().map(f);
    let p = cx.prev.and_then(|p| p.recorder.as_ref()).map(f);
    rate(cx, out, &[], c, p, k);
}

fn remote_write(cx: &Ctx, out: &mut Emit, f: fn(&crate::sample::RemoteWriteStats) -> f64) {
    gauge(
        out,
        &[],
        cx.cur
            .recorder
            .as_ref()
            .and_then(|r| r.remote_write.as_ref())
            .map(f),
    );
}

fn scan_stat(
    cx: &Ctx,
    out: &mut Emit,
    f: fn(&jitterscope_sources::process::ProcessScanStats) -> u64,
) {
    gauge(out, &[], cx.cur.process_scan.as_ref().map(|s| f(s) as f64));
}

metrics! {
    reads: NONE;
    SELF_COLLECT_MS = ("self.collect_ms", Milliseconds, Gauge, "Time the recorder took to collect this sample", |cx, out| field(cx, out, |r| r.collect_ns as f64 / 1e6)),
    SELF_LATENESS_MS = ("self.lateness_ms", Milliseconds, Gauge, "How late this sample started against its schedule: the recorder's own jitter", |cx, out| field(cx, out, |r| r.lateness_ns as f64 / 1e6)),
    SELF_CPU_PCT = ("self.cpu_pct", Percent, Rate, "Recorder CPU (user + system, all threads) as % of one CPU", |cx, out| counter_rate(cx, out, |r| r.cpu_user_ns + r.cpu_system_ns, 1e-7)),
    SELF_RSS_BYTES = ("self.rss_bytes", Bytes, Gauge, "Recorder resident memory", |cx, out| field(cx, out, |r| r.rss_bytes as f64)),
    SELF_STORE_WRITE_BYTES_PER_S = ("self.store_write_bytes_per_s", BytesPerSecond, Rate, "Bytes the recorder wrote to its store per second", |cx, out| counter_rate(cx, out, |r| r.store_bytes_written, 1.0)),
    SELF_SAMPLES_DROPPED = ("self.samples_dropped", Count, Counter, "Samples dropped since start (store too slow or full)", |cx, out| field(cx, out, |r| r.samples_dropped as f64)),
    SELF_WRITE_QUEUE = ("self.write_queue", Count, Gauge, "Samples waiting for the store writer", |cx, out| field(cx, out, |r| r.write_queue as f64)),
    SELF_SOURCE_ERRORS = ("self.source_errors", Count, Counter, "Source read/parse errors since start", |cx, out| field(cx, out, |r| r.source_errors as f64)),
    SELF_TICKS_MISSED = ("self.ticks_missed", Count, Counter, "Sampling intervals skipped since start because the recorder could not run in time", |cx, out| field(cx, out, |r| r.ticks_missed as f64)),
    SELF_REMOTE_WRITE_SENT_PER_S = ("self.remote_write.sent_per_s", PerSecond, Rate, "Points per second the remote-write receivers accepted (record --remote-write; summed over receivers)", |cx, out| {
        let c = cx.cur.recorder.as_ref().and_then(|r| r.remote_write.as_ref()).map(|w| w.points_sent);
        let p = cx.prev.and_then(|p| p.recorder.as_ref()).and_then(|r| r.remote_write.as_ref()).map(|w| w.points_sent);
        rate(cx, out, &[], c, p, 1.0);
    }),
    SELF_REMOTE_WRITE_BYTES_PER_S = ("self.remote_write.sent_bytes_per_s", BytesPerSecond, Rate, "Bytes per second of requests the remote-write receivers accepted, snappy-compressed as sent", |cx, out| {
        let c = cx.cur.recorder.as_ref().and_then(|r| r.remote_write.as_ref()).map(|w| w.bytes_sent);
        let p = cx.prev.and_then(|p| p.recorder.as_ref()).and_then(|r| r.remote_write.as_ref()).map(|w| w.bytes_sent);
        rate(cx, out, &[], c, p, 1.0);
    }),
    SELF_REMOTE_WRITE_FAILED = ("self.remote_write.points_failed", Count, Counter, "Points given up on since start, summed over receivers: refused by a remote-write receiver (4xx but 429) or not sendable (bad URL)", |cx, out| remote_write(cx, out, |w| w.points_failed as f64)),
    SELF_REMOTE_WRITE_REQUESTS_FAILED = ("self.remote_write.requests_failed", Count, Counter, "Remote-write requests that failed since start, retried or not, summed over receivers", |cx, out| remote_write(cx, out, |w| w.requests_failed as f64)),
    SELF_REMOTE_WRITE_LAG = ("self.remote_write.lag_seconds", Seconds, Gauge, "How far the slowest remote-write receiver is behind this sample: its time minus the newest sample that receiver accepted", |cx, out| {
        let lag = cx.cur.recorder.as_ref().and_then(|r| r.remote_write.as_ref()).and_then(|w| {
            (w.acked_ts_ns > 0).then(|| ((cx.cur.ts_ns - w.acked_ts_ns) as f64 / 1e9).max(0.0))
        });
        gauge(out, &[], lag);
    }),
    SELF_COLLECTOR_MS = ("self.collector.<collector>_ms",
            Milliseconds,
            Gauge,
            "Time each collector took in this sample",
            |cx, out| {
                for (name, ns) in &cx.cur.collector_ns {
                    out(&[name], Some(*ns as f64 / 1e6));
                }
            }),
    SELF_PROCESSES_CARRIED_FORWARD = ("self.processes_carried_forward", Count, Gauge, "Processes whose main thread had not run since the previous sample: status (and io when single-threaded) carried forward, not re-read", |cx, out| scan_stat(cx, out, |s| s.carried_forward)),
    SELF_PROCESSES_STAT_CARRIED_FORWARD = ("self.processes_stat_carried_forward", Count, Gauge, "Single-threaded processes that had not run and kept their RSS: stat carried forward, not re-read", |cx, out| scan_stat(cx, out, |s| s.stat_carried_forward)),
    SELF_PROC_LISTING_SKIPPED = ("self.proc_listing_skipped", Count, Gauge, "1 when /proc was not listed in this sample because no fork happened since the last listing", |cx, out| scan_stat(cx, out, |s| s.listing_skipped as u64)),
    SELF_PROCESSES_VANISHED = ("self.processes_vanished",
            Count,
            Gauge,
            "Processes that exited between listing /proc and reading them in this sample",
            |cx, out| {
                gauge(
                    out,
                    &[],
                    cx.cur.process_scan.as_ref().map(|s| s.vanished as f64),
                );
            }),
}
