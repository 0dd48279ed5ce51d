//! OpenMetrics text exposition of evaluated series: `dump --format openmetrics` (with
//! timestamps) and `serve`'s `/metrics` (the latest sample, without: Prometheus stamps a
//! scrape itself and drops samples older than its head block).

use std::collections::BTreeMap;
use std::io::{self, Write};

use crate::derive::SeriesValue;
use crate::registry::{Kind, MetricDef};
use jitterscope_sources::cgroup::{Cgroup, Runtime};

/// The family name of a metric: `jitterscope_` + the template without its placeholders,
/// dots turned into underscores (`cgroup.<cgroup>.cpu.throttled_pct` →
/// `jitterscope_cgroup_cpu_throttled_pct`).
pub fn family_name(d: &MetricDef) -> String {
    plain_name(d, false)
}

/// `jitterscope_` + the template without its placeholders, dots as underscores; with
/// `collapse`, underscores the removal left side by side as one (the base-unit names of
/// `export::base_name`; `/metrics` keeps its names as they were).
pub(crate) fn plain_name(d: &MetricDef, collapse: bool) -> String {
    let mut s = String::from("jitterscope_");
    let mut depth = 0;
    for c in d.name.chars() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            _ if depth > 0 => {}
            '.' => {
                if !s.ends_with('_') {
                    s.push('_');
                }
            }
            '_' if collapse && s.ends_with('_') => {}
            c => s.push(c),
        }
    }
    s
}

/// A label value escaped for the exposition.
pub fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A value as written: integers without a fraction, others to four decimals, trailing zeros
/// trimmed.
pub fn write_num(out: &mut impl std::fmt::Write, v: f64) {
    use std::fmt::Write as _;
    // A one-minute `dump` of a busy host writes ~15,000 values a sample; `write!` of an integer
    // and a String per fraction were a fifth of its instructions (callgrind). itoa writes the
    // same digits, and the fraction is formatted on the stack.
    //
    // Most values of a busy host are zero (70% of a one-minute dump), and `fract()` is a call
    // into libm where SSE4.1 is not assumed; the cast tests integrality in two instructions.
    // Both zeros write "0", as the integer path did. Below 1e15 the cast truncates exactly, and
    // a NaN casts to 0, which it does not equal.
    let i = v as i64;
    let _ = if v == 0.0 {
        out.write_str("0")
    } else if i as f64 == v && v.abs() < 1e15 {
        out.write_str(itoa::Buffer::new().format(i))
    } else if let Some(r) = ten_thousandths(v) {
        write_ten_thousandths(out, r)
    } else {
        let mut buf = StackStr::default();
        match write!(buf, "{v:.4}") {
            Ok(()) => out.write_str(trim_fraction(buf.as_str())),
            // Longer than the buffer (a huge or non-finite value): as before.
            Err(_) => {
                let s = format!("{v:.4}");
                out.write_str(trim_fraction(&s))
            }
        }
    };
}

/// `v` rounded to four decimals as a count of ten-thousandths, when that is certainly what
/// `{v:.4}` writes. `{:.4}` formats exactly, and its exact mode falls back to big-number
/// arithmetic (Dragon4) often enough to be a tenth of a one-minute dump of a busy host (perf).
/// The product `v × 10⁴` is off from the exact one by at most half an ulp, so rounding it gives
/// the same integer unless it lies within a few ulps of a half; those values, negative ones
/// that round to zero (`{:.4}` writes "-0.0000") and large ones go the exact way.
fn ten_thousandths(v: f64) -> Option<i64> {
    if v.is_nan() || v.abs() >= 1e11 {
        return None;
    }
    let scaled = v * 10_000.0;
    let off_half = (scaled.fract().abs() - 0.5).abs();
    if off_half <= 4.0 * f64::EPSILON * scaled.abs().max(1.0) {
        return None;
    }
    let r = scaled.round() as i64;
    (r != 0 || v >= 0.0).then_some(r)
}

/// Writes `r` ten-thousandths as `{:.4}` would, with the fraction's trailing zeros left out.
fn write_ten_thousandths(out: &mut impl std::fmt::Write, r: i64) -> std::fmt::Result {
    if r < 0 {
        out.write_str("-")?;
    }
    let a = r.unsigned_abs();
    out.write_str(itoa::Buffer::new().format(a / 10_000))?;
    let mut frac = a % 10_000;
    if frac == 0 {
        return Ok(());
    }
    let mut digits = [b'0'; 4];
    for d in digits.iter_mut().rev() {
        *d = b'0' + (frac % 10) as u8;
        frac /= 10;
    }
    let used = 4 - digits.iter().rev().take_while(|&&d| d == b'0').count();
    out.write_str(".")?;
    // Only ASCII digits were written.
    out.write_str(std::str::from_utf8(&digits[..used]).unwrap_or_default())
}

fn trim_fraction(s: &str) -> &str {
    s.trim_end_matches('0').trim_end_matches('.')
}

/// A short string formatted on the stack; a write that does not fit fails.
#[derive(Default)]
struct StackStr {
    buf: [u8; 32],
    len: usize,
}

impl StackStr {
    fn as_str(&self) -> &str {
        // Only whole `str`s are copied in, so the bytes are UTF-8.
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or_default()
    }
}

impl std::fmt::Write for StackStr {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let dst = self.buf.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Writes the points as families, then `# EOF`. Metrics whose templates give the same family
/// name (`cpu.usr_pct` and `cpu.<cpu>.usr_pct`) share one family, told apart by their labels:
/// a family may be declared only once. Unknown values are left out. `ts_ns` of `None` writes
/// no timestamp.
pub fn write(out: &mut impl Write, points: &[(Option<i64>, SeriesValue)]) -> io::Result<()> {
    write_with(out, points, "")
}

/// [`write`], with `extra` (whole families, such as [`cgroup_info`]'s) before the `# EOF`.
pub fn write_with(
    out: &mut impl Write,
    points: &[(Option<i64>, SeriesValue)],
    extra: &str,
) -> io::Result<()> {
    let mut fams: BTreeMap<String, Vec<&(Option<i64>, SeriesValue)>> = BTreeMap::new();
    for p in points {
        fams.entry(family_name(p.1.def)).or_default().push(p);
    }
    for (name, vals) in &fams {
        let d = vals[0].1.def;
        let (ty, sample_name) = match d.kind {
            Kind::Counter => ("counter", format!("{name}_total")),
            _ => ("gauge", name.clone()),
        };
        writeln!(out, "# TYPE {name} {ty}")?;
        // OpenMetrics requires the unit to be the name's suffix; only state it where it is.
        let unit = d.unit.as_str();
        if name.ends_with(&format!("_{unit}")) {
            writeln!(out, "# UNIT {name} {unit}")?;
        }
        writeln!(
            out,
            "# HELP {name} {}",
            d.help.replace('\\', "\\\\").replace('\n', " ")
        )?;
        for (ts, v) in vals.iter().map(|p| (p.0, &p.1)) {
            let Some(value) = v.value else { continue };
            let keys = v.def.placeholders();
            let labels: Vec<String> = keys
                .iter()
                .zip(&v.labels)
                .map(|(k, l)| format!("{k}=\"{}\"", escape_label(l)))
                .collect();
            let mut line = sample_name.clone();
            if !labels.is_empty() {
                line.push('{');
                line.push_str(&labels.join(","));
                line.push('}');
            }
            line.push(' ');
            write_num(&mut line, value);
            if let Some(ts) = ts {
                line.push_str(&format!(
                    " {}.{:03}",
                    ts.div_euclid(1_000_000_000),
                    ts.rem_euclid(1_000_000_000) / 1_000_000
                ));
            }
            writeln!(out, "{line}")?;
        }
    }
    out.write_all(extra.as_bytes())?;
    writeln!(out, "# EOF")
}

/// The labels of a cgroup's `jitterscope_cgroup_info` (see [`cgroup_info`]): `cgroup`,
/// `runtime`, then those of the owner's names it has; `None` for a cgroup no runtime or unit
/// owns.
pub fn owner_labels(c: &Cgroup) -> Option<Vec<(&'static str, &str)>> {
    let id = &c.identity;
    if id.runtime == Runtime::None {
        return None;
    }
    let mut out = vec![
        ("cgroup", c.path.as_str()),
        ("runtime", id.runtime.as_str()),
    ];
    for (k, v) in [
        ("container_id", &id.container_id),
        ("container_name", &id.name),
        ("pod_name", &id.pod),
        ("pod_namespace", &id.namespace),
        ("pod_uid", &id.pod_uid),
        ("unit", &id.systemd_unit),
    ] {
        if let Some(v) = v {
            out.push((k, v.as_str()));
        }
    }
    Some(out)
}

/// The help of `jitterscope_cgroup_info`, on `/metrics` and in remote write's metadata.
pub const CGROUP_INFO_HELP: &str =
    "The container, pod or systemd unit that owns a cgroup, as its runtime names it";

/// `jitterscope_cgroup_info`: who owns each cgroup that belongs to a runtime or a systemd unit,
/// as labels, so a query joins names onto the per-cgroup series (`... * on(instance, cgroup)
/// group_left(container_name) jitterscope_cgroup_info`) rather than every series carrying
/// them. The labels are `runtime`, `container_id`, `container_name`, `pod_name`,
/// `pod_namespace`, `pod_uid` and `unit`: not `container`, `pod` and `namespace`, which
/// Kubernetes service discovery puts on every target (the recorder's own pod) and which a
/// scrape would rename to `exported_*`. Each cgroup comes with the time it was last seen
/// (`None`: no timestamp, as a live scrape has none). Empty when no cgroup has an owner.
pub fn cgroup_info<'a>(cgroups: impl IntoIterator<Item = (&'a Cgroup, Option<i64>)>) -> String {
    let mut lines = String::new();
    for (c, ts) in cgroups {
        let Some(labels) = owner_labels(c) else {
            continue;
        };
        lines.push_str("jitterscope_cgroup_info{");
        let pairs: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
            .collect();
        lines.push_str(&pairs.join(","));
        lines.push_str("} 1");
        if let Some(ts) = ts {
            lines.push_str(&format!(
                " {}.{:03}",
                ts.div_euclid(1_000_000_000),
                ts.rem_euclid(1_000_000_000) / 1_000_000
            ));
        }
        lines.push('\n');
    }
    if lines.is_empty() {
        return lines;
    }
    format!("# TYPE jitterscope_cgroup info\n# HELP jitterscope_cgroup {CGROUP_INFO_HELP}\n{lines}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::find;

    /// What the writer wrote before its fast paths: the integer, else `{:.4}` trimmed.
    fn exact_way(v: f64) -> String {
        if v.fract() == 0.0 && v.abs() < 1e15 {
            return (v as i64).to_string();
        }
        trim_fraction(&format!("{v:.4}")).to_string()
    }

    fn written(v: f64) -> String {
        let mut s = String::new();
        write_num(&mut s, v);
        s
    }

    proptest::proptest! {
        #[test]
        fn the_fast_way_matches_the_exact_one(m in -1e6f64..1e6, e in -12i32..12) {
            let v = m * 10f64.powi(e);
            proptest::prop_assert_eq!(written(v), exact_way(v));
        }

        #[test]
        fn integers_match_either_side_of_the_integer_bound(i in -2_000_000_000_000_000i64..2_000_000_000_000_000) {
            let v = i as f64;
            proptest::prop_assert_eq!(written(v), exact_way(v));
            proptest::prop_assert_eq!(written(-v), exact_way(-v));
        }

        #[test]
        fn values_near_a_half_match_too(k in -1_000_000_000i64..1_000_000_000, d in -64i64..64) {
            // A few representable steps either side of each half.
            let half = (k as f64 + 0.5) / 10_000.0;
            let v = f64::from_bits((half.to_bits() as i64 + d) as u64);
            proptest::prop_assert_eq!(written(v), exact_way(v));
        }
    }

    fn sv(name: &str, labels: &[&str], v: Option<f64>) -> SeriesValue {
        let def = find(name).unwrap();
        SeriesValue {
            def,
            labels: labels.iter().map(|s| s.to_string()).collect(),
            series: def.series_name(labels),
            value: v,
        }
    }

    #[test]
    fn names_values_and_one_family_per_name() {
        let d = find("cgroup.<cgroup>.cpu.throttled_pct").unwrap();
        assert_eq!(family_name(d), "jitterscope_cgroup_cpu_throttled_pct");
        let mut s = String::new();
        write_num(&mut s, 2.0);
        s.push(' ');
        write_num(&mut s, 1.0 / 3.0);
        assert_eq!(s, "2 0.3333");
        // Every path of the writer, against what `format!` writes.
        for v in [
            0.0,
            -0.0,
            -7.0,
            1e14,
            1e15,
            -1e16,
            2.5,
            -0.00001,
            0.1,
            123.45678,
            1e300,
            -1e300,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MAX,
            f64::MIN_POSITIVE,
            // Around the integer path: its bound, and where the cast saturates.
            999_999_999_999_999.0,
            -999_999_999_999_999.0,
            9.3e18,
            -9.3e18,
            i64::MIN as f64,
            // Around the four-decimal fast path: halves, negatives rounding to zero, its bound.
            0.1246,
            -0.5,
            2.00001,
            0.03125,
            0.00005,
            1.99995,
            123456.78901,
            1e-9,
            -1e-9,
            99999999999.9999,
            1e11 + 0.5,
            0.1 + 0.2,
        ] {
            assert_eq!(written(v), exact_way(v), "{v:e}");
        }
        assert_eq!(escape_label("a\"b"), "a\\\"b");
        let pts = vec![
            (None, sv("cpu.usr_pct", &[], Some(2.5))),
            (None, sv("cpu.<cpu>.usr_pct", &["0"], Some(1.0))),
            (None, sv("cpu.<cpu>.usr_pct", &["1"], None)),
        ];
        let mut out = Vec::new();
        write(&mut out, &pts).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text.matches("# TYPE jitterscope_cpu_usr_pct gauge").count(),
            1
        );
        assert!(text.contains("\njitterscope_cpu_usr_pct 2.5\n"));
        assert!(text.contains("\njitterscope_cpu_usr_pct{cpu=\"0\"} 1\n"));
        assert!(!text.contains("cpu=\"1\""), "unknown values are left out");
        assert!(text.ends_with("# EOF\n"));
    }
}
