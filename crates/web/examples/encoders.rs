//! `/metrics`' own writer against `prometheus-client` (the Prometheus project's Rust client),
//! on a real exposition: time per scrape, bytes, and whether both say the same.
//!
//! ```text
//! curl -s -H 'Accept: application/openmetrics-text' http://127.0.0.1:9630/metrics > m.om
//! cargo run --release -p jitterscope-web --example encoders -- m.om
//! ```
//!
//! The input is parsed into families first; only the writing is timed. `prometheus-client`
//! writes through a `Collector` (its way to expose values it does not own), into both of its
//! text formats.

#![allow(clippy::type_complexity)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use jitterscope_web::prom::{write_plain, PlainFamily};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// `name{k="v",...} value` → (name, labels, value).
fn sample(line: &str) -> Option<(String, Vec<(String, String)>, f64)> {
    match line.split_once('{') {
        Some((name, rest)) => {
            let (labels, v) = labels(rest)?;
            Some((name.to_string(), labels, v))
        }
        None => {
            let (n, v) = line.split_once(' ')?;
            Some((n.to_string(), Vec::new(), v.trim().parse().ok()?))
        }
    }
}

/// `k="v",...} value` → the labels and the value.
fn labels(s: &str) -> Option<(Vec<(String, String)>, f64)> {
    let mut labels = Vec::new();
    let mut rest = s;
    loop {
        let eq = rest.find("=\"")?;
        let key = rest[..eq].to_string();
        let mut value = String::new();
        let mut it = rest[eq + 2..].char_indices();
        let end = loop {
            let (i, c) = it.next()?;
            match c {
                '\\' => match it.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                '"' => break eq + 2 + i,
                c => value.push(c),
            }
        };
        labels.push((key, value));
        rest = &rest[end + 1..];
        if let Some(tail) = rest.strip_prefix('}') {
            return Some((labels, tail.trim().parse().ok()?));
        }
        rest = rest.strip_prefix(',')?;
    }
}

fn families(om: &str) -> Vec<PlainFamily> {
    let mut out: Vec<PlainFamily> = Vec::new();
    for l in om.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').unwrap();
            let ty = match ty {
                "counter" => "counter",
                "gauge" => "gauge",
                "info" => "info",
                "histogram" => "histogram",
                t => panic!("type {t}"),
            };
            out.push(PlainFamily {
                name: name.to_string(),
                ty,
                help: String::new(),
                samples: Vec::new(),
            });
        } else if let Some(rest) = l.strip_prefix("# HELP ") {
            let (_, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.last_mut().unwrap().help = help.replace("\\\"", "\"");
        } else if l.starts_with('#') {
            continue;
        } else {
            let s = sample(l).unwrap_or_else(|| panic!("cannot read {l:?}"));
            out.last_mut().unwrap().samples.push(s);
        }
    }
    out
}

#[derive(Debug)]
struct Exposition(Arc<Vec<PlainFamily>>);

impl Collector for Exposition {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in self.0.iter() {
            let ty = match f.ty {
                "counter" => MetricType::Counter,
                "gauge" => MetricType::Gauge,
                "info" => MetricType::Info,
                _ => MetricType::Histogram,
            };
            let mut m = enc.encode_descriptor(&f.name, &f.help, None, ty)?;
            match f.ty {
                "counter" => {
                    for (_, labels, v) in &f.samples {
                        m.encode_family(labels)?
                            .encode_counter::<NoLabelSet, _, f64>(v, None)?;
                    }
                }
                "gauge" => {
                    for (_, labels, v) in &f.samples {
                        m.encode_family(labels)?.encode_gauge(v)?;
                    }
                }
                "info" => {
                    for (_, labels, _) in &f.samples {
                        m.encode_info(labels)?;
                    }
                }
                _ => {
                    // Our histograms: cumulative `_bucket`s by `le`, then `_count` and `_sum`,
                    // per label set without `le`.
                    let mut by: BTreeMap<Vec<(String, String)>, (Vec<(f64, u64)>, u64, f64)> =
                        BTreeMap::new();
                    for (name, labels, v) in &f.samples {
                        let mut key = labels.clone();
                        let le = key.iter().position(|l| l.0 == "le").map(|i| key.remove(i));
                        let e = by.entry(key).or_default();
                        if let Some((_, le)) = le {
                            let b = if le == "+Inf" {
                                f64::INFINITY
                            } else {
                                le.parse().unwrap()
                            };
                            let prev: u64 = e.0.iter().map(|x| x.1).sum();
                            e.0.push((b, *v as u64 - prev));
                        } else if name.ends_with("_count") {
                            e.1 = *v as u64;
                        } else {
                            e.2 = *v;
                        }
                    }
                    for (labels, (buckets, count, sum)) in &by {
                        m.encode_family(labels)?
                            .encode_histogram::<NoLabelSet>(*sum, *count, buckets, None)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Every sample as `name{sorted labels}` → value, whatever the format's family naming.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (name, mut labels, v) = sample(l).unwrap_or_else(|| panic!("{l:?}"));
            labels.sort();
            (format!("{name}{labels:?}"), v)
        })
        .collect()
}

fn time(runs: usize, mut f: impl FnMut() -> usize) -> (f64, usize) {
    let mut bytes = f();
    let t = Instant::now();
    for _ in 0..runs {
        bytes = std::hint::black_box(f());
    }
    (t.elapsed().as_secs_f64() * 1e6 / runs as f64, bytes)
}

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("give an OpenMetrics exposition file");
    let om = std::fs::read_to_string(&path).expect("readable file");
    let fams = Arc::new(families(&om));
    let n: usize = fams.iter().map(|f| f.samples.len()).sum();
    let mut reg = Registry::default();
    reg.register_collector(Box::new(Exposition(fams.clone())));
    let runs = 300;
    let ours_om = write_plain(&fams, true);
    let ours_txt = write_plain(&fams, false);
    let mut pc_om = String::new();
    prometheus_client::encoding::text::encode(&mut pc_om, &reg).unwrap();
    let mut pc_txt = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut pc_txt, &reg).unwrap();
    for (what, a, b) in [
        ("OpenMetrics", &ours_om, &pc_om),
        ("text 0.0.4", &ours_txt, &pc_txt),
    ] {
        let (x, y) = (samples(a), samples(b));
        let differ: Vec<_> = x
            .iter()
            .filter(|(k, v)| {
                y.get(*k)
                    .is_none_or(|w| (*w - **v).abs() > 1e-9 * v.abs().max(1.0))
            })
            .map(|(k, _)| k.clone())
            .collect();
        println!(
            "{what}: {} samples here, {} in prometheus-client's; {} of ours missing or different there{}",
            x.len(),
            y.len(),
            differ.len(),
            differ.first().map(|d| format!(" (first: {d})")).unwrap_or_default()
        );
    }
    let fams2 = fams.clone();
    let (o1, b1) = time(runs, || write_plain(&fams2, true).len());
    let (o2, b2) = time(runs, || write_plain(&fams2, false).len());
    let (p1, c1) = time(runs, || {
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, &reg).unwrap();
        s.len()
    });
    let (p2, c2) = time(runs, || {
        let mut s = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut s, &reg).unwrap();
        s.len()
    });
    println!("{} families, {n} samples, {runs} runs each", fams.len());
    println!("| writer | OpenMetrics µs | bytes | text 0.0.4 µs | bytes |");
    println!("|---|---:|---:|---:|---:|");
    println!("| /metrics' own | {o1:.0} | {b1} | {o2:.0} | {b2} |");
    println!("| prometheus-client 0.26 | {p1:.0} | {c1} | {p2:.0} | {c2} |");
}
