//! Interrupts: TLB shootdowns and function-call IPIs per CPU, every IRQ line, softirqs (all
//! CPUs and per CPU).

use super::{metrics, pairs, rate};
use crate::eval::Ctx;
use crate::registry::Emit;

fn irq_total(cx: &Ctx, out: &mut Emit, name: &str) {
    let c = cx
        .cur
        .interrupts
        .as_ref()
        .and_then(|i| i.get(name))
        .map(|i| i.total);
    let p = cx
        .prev
        .and_then(|p| p.interrupts.as_ref())
        .and_then(|i| i.get(name))
        .map(|i| i.total);
    rate(cx, out, &[], c, p, 1.0);
}

fn irq_per_cpu(cx: &Ctx, out: &mut Emit, name: &str) {
    let Some(c) = cx.cur.interrupts.as_ref() else {
        return;
    };
    let p = cx.prev.and_then(|p| p.interrupts.as_ref());
    let Some(cl) = c.per_cpu(name) else { return };
    let pl = p.and_then(|p| p.per_cpu(name));
    for (cpu, v) in cl {
        let pv = pl
            .as_ref()
            .and_then(|pl| pl.iter().find(|(pc, _)| *pc == cpu))
            .map(|(_, v)| *v);
        rate(cx, out, &[&cpu.to_string()], Some(v), pv, 1.0);
    }
}

metrics! {
    reads: NONE;
    TLB_PER_S = ("irq.tlb_per_s", PerSecond, Rate, "TLB shootdown IPIs handled per second, all CPUs (/proc/interrupts TLB)", |cx, out| irq_total(cx, out, "TLB")),
    CAL_PER_S = ("irq.cal_per_s", PerSecond, Rate, "Function-call IPIs handled per second, all CPUs (/proc/interrupts CAL)", |cx, out| irq_total(cx, out, "CAL")),
    PER_CPU_TLB_PER_S = ("cpu.<cpu>.tlb_per_s", PerSecond, Rate, "TLB shootdown IPIs handled by one CPU per second (/proc/interrupts TLB)", |cx, out| irq_per_cpu(cx, out, "TLB")),
    PER_CPU_CAL_PER_S = ("cpu.<cpu>.cal_per_s", PerSecond, Rate, "Function-call IPIs handled by one CPU per second (/proc/interrupts CAL)", |cx, out| irq_per_cpu(cx, out, "CAL")),
    IRQ_PER_S = ("irq.<irq>_per_s", PerSecond, Rate, "Every /proc/interrupts line (numbered IRQs and NMI, LOC, RES, CAL, TLB...) per second, all CPUs", |cx, out| {
            let Some(c) = cx.cur.interrupts.as_ref() else { return };
            let p = cx.prev.and_then(|p| p.interrupts.as_ref()).map(|p| p.irqs.as_slice());
            for (ci, pi) in pairs(&c.irqs, p, |i| &i.name) {
                if let Some(pi) = pi {
                    rate(cx, out, &[&ci.name], Some(ci.total), Some(pi.total), 1.0);
                }
            }
        }),
    SOFTIRQ_PER_S = ("softirq.<softirq>_per_s", PerSecond, Rate, "Soft interrupts of each type per second, all CPUs (/proc/softirqs)", |cx, out| {
            let Some(c) = cx.cur.softirqs.as_ref() else { return };
            let p = cx.prev.and_then(|p| p.softirqs.as_ref()).map(|p| p.types.as_slice());
            for (ct, pt) in pairs(&c.types, p, |t| &t.name) {
                if let Some(pt) = pt {
                    rate(cx, out, &[&ct.name], Some(ct.total()), Some(pt.total()), 1.0);
                }
            }
        }),
    PER_CPU_SOFTIRQ_PER_S = ("cpu.<cpu>.softirq.<softirq>_per_s", PerSecond, Rate, "Soft interrupts of each type one CPU ran per second (/proc/softirqs column): a storm is one CPU's, and which vector it is says what to spread", |cx, out| {
            let Some(c) = cx.cur.softirqs.as_ref() else { return };
            let Some(p) = cx.prev.and_then(|p| p.softirqs.as_ref()) else { return };
            for (ct, pt) in pairs(&c.types, Some(&p.types), |t| &t.name) {
                let Some(pt) = pt else { continue };
                for (i, cpu) in c.cpus.iter().enumerate() {
                    // A CPU's column in the previous sample: the same position when the header
                    // is unchanged (hotplug does not change it: every possible CPU is listed).
                    let pi = if p.cpus.get(i) == Some(cpu) { Some(i) } else { p.cpus.iter().position(|x| x == cpu) };
                    let pv = pi.and_then(|pi| pt.per_cpu.get(pi)).copied();
                    rate(cx, out, &[&cpu.to_string(), &ct.name], ct.per_cpu.get(i).copied(), pv, 1.0);
                }
            }
        }),
}
