//! The readable form of a [`Report`].

use std::fmt::Write;

use crate::Report;

fn num(v: f64) -> String {
    if v.abs() >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Renders a report as text: one block per finding, evidence and remediation as lists.
pub fn render(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "window {} .. {} ({} samples, baseline {} samples)",
        r.window.from, r.window.to, r.samples, r.baseline_samples
    );
    if let Some(note) = r.damaged.note() {
        let _ = writeln!(o, "note: {note}");
    }
    if let Some(h) = &r.holes {
        let longest = h
            .holes
            .iter()
            .max_by(|a, b| a.seconds.total_cmp(&b.seconds));
        let stretches = match (h.holes.len(), longest) {
            (1, Some(l)) => format!("from {} to {}", l.from, l.to),
            (n, Some(l)) => format!(
                "{n} stretches, the longest {} s from {}",
                num(l.seconds),
                l.from
            ),
            (_, None) => String::new(),
        };
        let _ = writeln!(
            o,
            "note: the window has holes: {} s of {} s without samples ({stretches}); confidences lowered by {:.0}%",
            num(h.seconds),
            num(h.of_seconds),
            h.fraction * 100.0
        );
    }
    for n in &r.notes {
        let _ = writeln!(o, "note: {n}");
    }
    if r.samples == 0 {
        let _ = writeln!(o, "no samples in this window: nothing to diagnose");
        return o;
    }
    if r.findings.is_empty() {
        let _ = writeln!(o, "nothing wrong found: no rule fired on this window");
        return o;
    }
    for (i, f) in r.findings.iter().enumerate() {
        // A consequence is shown under its root, marked, with the link's reason.
        let mark = if f.caused_by.is_empty() { "" } else { "↳ " };
        let _ = writeln!(
            o,
            "\n{mark}{}. [{}] {} (confidence {:.2})",
            i + 1,
            f.rule_id,
            f.title,
            f.confidence
        );
        for l in &f.caused_by {
            let _ = writeln!(
                o,
                "   caused by {}. [{}]: {}",
                l.finding, l.rule_id, l.reason
            );
        }
        for l in &f.causes {
            let _ = writeln!(o, "   causes {}. [{}]", l.finding, l.rule_id);
        }
        let c = &f.culprit;
        let mut who = Vec::new();
        if let (Some(p), Some(n)) = (c.pid, &c.comm) {
            who.push(format!("{n} ({p})"));
        }
        if let Some(g) = &c.cgroup {
            who.push(format!("cgroup {g}"));
        }
        if let Some(k) = &c.container {
            who.push(k.clone());
        }
        if let Some(l) = &c.library {
            who.push(format!(
                "library {l}{}",
                c.library_version
                    .as_deref()
                    .map(|v| format!(" {v}"))
                    .unwrap_or_default()
            ));
        }
        if !who.is_empty() {
            let _ = writeln!(o, "   culprit: {}", who.join(", "));
        }
        let _ = writeln!(o, "   evidence:");
        for e in &f.evidence {
            let base = e
                .baseline
                .map(|b| format!(" (baseline {})", num(b)))
                .unwrap_or_default();
            let stat = match e.over_s {
                Some(s) => format!("{} over {} s", e.stat, num(s)),
                None => e.stat.to_string(),
            };
            let _ = writeln!(
                o,
                "     - {}: {} {}{base} — {stat} [{}]",
                e.note,
                num(e.value),
                e.unit.symbol(),
                e.signal
            );
        }
        if !f.moved_first.is_empty() {
            let order: Vec<String> = f
                .moved_first
                .iter()
                .map(|m| format!("{} (+{:.0}s)", m.signal, m.lag_s))
                .collect();
            let _ = writeln!(o, "   moved first: {}", order.join(" → "));
        }
        for n in &f.notes {
            let _ = writeln!(o, "   note: {n}");
        }
        let _ = writeln!(o, "   what to change:");
        for r in &f.remediation {
            let _ = writeln!(o, "     - {r}");
        }
    }
    o
}
