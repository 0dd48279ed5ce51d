//! Metrics of the stack sampler's slice: its health (samples, losses) and the share of busy
//! CPU time spent in the kernel as the stacks saw it. The slice states the span it covers, so
//! rates need no previous sample.

use super::{gauge, metrics};
use crate::eval::Ctx;
use crate::profile::{FrameKind, Profile};

/// The slice with its per-second factor, when it covers a known span.
fn slice<'a>(cx: &Ctx<'a>) -> Option<(&'a Profile, f64)> {
    let p = cx.cur.profile.as_ref()?;
    let span = p.end_mono_ns.checked_sub(p.start_mono_ns)?;
    (span > 0).then_some((p, 1e9 / span as f64))
}

/// Busy samples (not the idle task) and those whose leaf is in the kernel.
fn busy_kernel(p: &Profile) -> (u64, u64) {
    let (mut busy, mut kernel) = (0u64, 0u64);
    for s in p.stacks.iter().filter(|s| s.pid != 0) {
        busy += s.count as u64;
        let leaf = s.frames.first().and_then(|&f| p.frame(f));
        if leaf.is_some_and(|f| f.kind == FrameKind::Kernel) {
            kernel += s.count as u64;
        }
    }
    (busy, kernel)
}

metrics! {
    reads: PROFILE;
    SAMPLES_PER_S = ("profile.samples_per_s", PerSecond, Rate, "Stack samples taken per second (all CPUs, idle included): about the sampling frequency times the CPUs", |cx, out| gauge(out, &[], slice(cx).map(|(p, k)| p.samples as f64 * k))),
    LOST_PER_S = ("profile.lost_per_s", PerSecond, Rate, "Stack samples the kernel could not write because a ring buffer was full, per second", |cx, out| gauge(out, &[], slice(cx).map(|(p, k)| p.lost as f64 * k))),
    DROPPED_PER_S = ("profile.dropped_per_s", PerSecond, Rate, "Stack samples not kept (unparsable, or past the distinct-stack bound of a slice), per second", |cx, out| gauge(out, &[], slice(cx).map(|(p, k)| p.dropped as f64 * k))),
    STACKS = ("profile.stacks", Count, Gauge, "Distinct stacks (per thread) in the slice", |cx, out| gauge(out, &[], cx.cur.profile.as_ref().map(|p| p.stacks.len() as f64))),
    KERNEL_PCT = ("profile.kernel_pct",
            Percent,
            Gauge,
            "Share of busy stack samples (idle task excluded) that were executing kernel code",
            |cx, out| {
                let v = cx.cur.profile.as_ref().and_then(|p| {
                    let (busy, kernel) = busy_kernel(p);
                    (busy > 0).then(|| kernel as f64 * 100.0 / busy as f64)
                });
                gauge(out, &[], v)
            }),
}
