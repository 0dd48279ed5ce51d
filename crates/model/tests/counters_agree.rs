//! The cumulative counters (`cpu.<mode>_seconds`, `psi.<resource>.some_usec`,
//! `cgroup.<cgroup>.cpu.usage_ns`, `proc.<pid>.<comm>.cpu_<mode>_seconds`) are the kernel's
//! own counters that the per-second percentages are derived from: over every pair of
//! consecutive samples of every recorded lab store, a counter's increase over the interval
//! gives the percentage the recorder stored for it. So `rate()` over the exported `_total`
//! counter reads what the recorder reads, at any scrape interval.

mod common;

use std::collections::HashMap;

use jitterscope_model::codec::Parts;
use jitterscope_model::derive::for_each_series;
use jitterscope_model::metrics::all;
use jitterscope_model::stored::SampleReader;
use jitterscope_model::Sample;

fn values(s: &Sample, prev: Option<&Sample>) -> HashMap<String, f64> {
    let mut m = HashMap::new();
    for_each_series(all(), s, prev, &[], |_, _, series, v| {
        if let Some(v) = v {
            m.insert(series.to_string(), v);
        }
    });
    m
}

/// `(counter, percentage, factor)`: percentage = Δcounter / Δt × factor.
fn pairs(cur: &HashMap<String, f64>, ncpu: f64) -> Vec<(String, String, f64)> {
    let mut out = Vec::new();
    // The host's percentages are shares of all CPUs' time.
    for (mode, pct) in [
        ("user", "usr"),
        ("system", "sys"),
        ("idle", "idle"),
        ("iowait", "iowait"),
    ] {
        out.push((
            format!("cpu.{mode}_seconds"),
            format!("cpu.{pct}_pct"),
            100.0 / ncpu,
        ));
    }
    for r in ["cpu", "memory", "io"] {
        out.push((
            format!("psi.{r}.some_usec"),
            format!("psi.{r}.some_pct"),
            1e-4,
        ));
    }
    for k in cur.keys() {
        if let Some(cg) = k
            .strip_prefix("cgroup.")
            .and_then(|k| k.strip_suffix(".cpu.usage_ns"))
        {
            out.push((k.clone(), format!("cgroup.{cg}.cpu.usage_pct"), 1e-7));
        }
        if let Some(p) = k.strip_suffix(".cpu_user_seconds") {
            out.push((k.clone(), format!("{p}.usr_pct"), 100.0));
        }
    }
    out
}

#[test]
fn counters_increase_by_what_the_percentages_say() {
    let stores = common::lab_stores();
    let mut checked: HashMap<&'static str, usize> = HashMap::new();
    for dir in &stores {
        let r = SampleReader::open(dir).unwrap();
        let mut prev: Option<(Sample, HashMap<String, f64>)> = None;
        for s in r.samples(i64::MIN, i64::MAX, Parts::ALL).unwrap() {
            let cur = values(&s, prev.as_ref().map(|p| &p.0));
            if let Some((ps, pv)) = &prev {
                // Rates are taken over the monotonic clock's interval. The wall-clock stamps
                // usually match it to microseconds, but not on a loaded host: mmap-lock's
                // recording (eight threads queueing on two CPUs) has one 450 µs apart.
                let dt = if s.mono_ns > ps.mono_ns && ps.mono_ns > 0 {
                    (s.mono_ns - ps.mono_ns) as f64 / 1e9
                } else {
                    (s.ts_ns - ps.ts_ns) as f64 / 1e9
                };
                // The host's CPU time in the interval, all modes: its percentages are shares
                // of the interval's ticks, which run a tick or two apart from the wall clock.
                let host_s: f64 = cur
                    .iter()
                    .filter(|(k, _)| k.starts_with("cpu.") && k.ends_with("_seconds"))
                    .map(|(k, v)| v - pv.get(k).copied().unwrap_or(*v))
                    .sum();
                let ncpu = host_s / dt;
                for (counter, pct, k) in pairs(&cur, ncpu) {
                    let (Some(c), Some(p), Some(want)) =
                        (cur.get(&counter), pv.get(&counter), cur.get(&pct))
                    else {
                        continue;
                    };
                    let got = (c - p) / dt * k;
                    // The others are over the monotonic clock's interval, as is dt.
                    let slack = 1e-4 * want.abs().max(1.0);
                    assert!(
                        (got - want).abs() <= slack,
                        "{} at {}: {counter} rose {} in {dt} s = {got}, but {pct} = {want}",
                        dir.display(),
                        s.ts_ns,
                        c - p
                    );
                    let kind = counter.split('.').next().unwrap_or("");
                    let kind = match kind {
                        "cpu" => "host cpu",
                        "psi" => "psi",
                        "cgroup" => "cgroup",
                        _ => "process",
                    };
                    *checked.entry(kind).or_default() += 1;
                }
            }
            prev = Some((s, cur));
        }
    }
    for kind in ["host cpu", "psi", "cgroup", "process"] {
        assert!(
            checked.get(kind).copied().unwrap_or(0) > 100,
            "{kind}: only {checked:?} pairs checked"
        );
    }
}
