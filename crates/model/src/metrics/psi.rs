//! Pressure stall information, host-wide. Percentages come from the `total` counters, so a
//! one-second stall shows in the second it happened, not smeared over a 10 s average.

use jitterscope_sources::system::pressure::{Pressure, PressureLine};

use super::{metrics, rate};
use crate::eval::Ctx;
use crate::registry::Emit;
use crate::sample::SystemPressure;

fn resources(p: &SystemPressure) -> [(&'static str, Option<&Pressure>); 4] {
    [
        ("cpu", p.cpu.as_ref()),
        ("memory", p.memory.as_ref()),
        ("io", p.io.as_ref()),
        ("irq", p.irq.as_ref()),
    ]
}

/// Emits the stalled share of the interval for `line` (some or full) of every resource.
pub(crate) fn stall_pct(
    cx: &Ctx,
    out: &mut Emit,
    prefix: &[&str],
    cur: [(&'static str, Option<&Pressure>); 4],
    prev: Option<[(&'static str, Option<&Pressure>); 4]>,
    line: fn(&Pressure) -> Option<&PressureLine>,
) {
    for (i, (name, c)) in cur.iter().enumerate() {
        let c = c.and_then(line).map(|l| l.total_usec);
        let p = prev
            .and_then(|p| p[i].1)
            .and_then(line)
            .map(|l| l.total_usec);
        let mut labels: Vec<&str> = prefix.to_vec();
        labels.push(name);
        // µs stalled per second / 1e6 * 100 = percent of wall time.
        rate(cx, out, &labels, c, p, 1e-4);
    }
}

/// The kernel's cumulative stall time of `line` for every resource, µs since boot.
fn totals(cx: &Ctx, out: &mut Emit, line: fn(&Pressure) -> Option<&PressureLine>) {
    for (name, p) in resources(&cx.cur.pressure) {
        if let Some(l) = p.and_then(line) {
            out(&[name], Some(l.total_usec as f64));
        }
    }
}

metrics! {
    reads: NONE;
    SOME_USEC = ("psi.<resource>.some_usec", Microseconds, Counter, "Time in which some task stalled on cpu/memory/io/irq since boot (/proc/pressure total=)", |cx, out| totals(cx, out, |p| p.some.as_ref())),
    FULL_USEC = ("psi.<resource>.full_usec", Microseconds, Counter, "Time in which all non-idle tasks stalled at once since boot (/proc/pressure full total=)", |cx, out| totals(cx, out, |p| p.full.as_ref())),
    SOME_PCT = ("psi.<resource>.some_pct", Percent, Rate, "Share of the interval in which some task stalled on cpu/memory/io/irq, from the cumulative total (/proc/pressure)", |cx, out| {
            stall_pct(cx, out, &[], resources(&cx.cur.pressure), cx.prev.map(|p| resources(&p.pressure)), |p| p.some.as_ref());
        }),
    FULL_PCT = ("psi.<resource>.full_pct", Percent, Rate, "Share of the interval in which all non-idle tasks stalled at once (/proc/pressure)", |cx, out| {
            stall_pct(cx, out, &[], resources(&cx.cur.pressure), cx.prev.map(|p| resources(&p.pressure)), |p| p.full.as_ref());
        }),
    SOME_AVG10_PCT = ("psi.<resource>.some_avg10_pct", Percent, Gauge, "The kernel's 10-second average of some-stall (/proc/pressure)", |cx, out| {
            for (name, p) in resources(&cx.cur.pressure) {
                if let Some(l) = p.and_then(|p| p.some.as_ref()) {
                    out(&[name], Some(l.avg10));
                }
            }
        }),
}
