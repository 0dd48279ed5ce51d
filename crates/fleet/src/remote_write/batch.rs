//! Samples turned into remote-write series: the default export set ([`Bounded`]) or the user's
//! globs, named in base units ([`base_name`]), with the recorder's labels (`host` and any the
//! user adds), grouped by series across the samples of one request.

use ahash::AHashMap as HashMap;

use jitterscope_model::export::{base_name, BaseName, Bounded};
use jitterscope_model::openmetrics::owner_labels;
use jitterscope_model::Sample;

use super::proto::{Label, Point, TimeSeries, WriteRequest};

/// Which series are sent: [`Bounded::new`] by default, [`Bounded::globs`] for the user's.
pub type Choice = Bounded;

/// A definition's exported name and label names, worked out once.
struct Named {
    base: BaseName,
    keys: Vec<&'static str>,
}

/// The series of one request being built.
pub struct Batch {
    extra: Vec<(String, String)>,
    build: Vec<(String, String)>,
    names: HashMap<&'static str, Named>,
    index: HashMap<String, usize>,
    series: Vec<TimeSeries>,
    points: usize,
    samples: usize,
    key: String,
}

impl Batch {
    /// An empty batch whose series all carry `extra` labels (`host` among them), with a
    /// `jitterscope_build_info` series labelled `build` (version, revision) at each sample.
    pub fn new(extra: &[(String, String)], build: &[(String, String)]) -> Self {
        let mut extra = extra.to_vec();
        extra.sort();
        Batch {
            extra,
            build: build.to_vec(),
            names: HashMap::default(),
            index: HashMap::default(),
            series: Vec::new(),
            points: 0,
            samples: 0,
            key: String::new(),
        }
    }

    /// Points added so far.
    pub fn points(&self) -> usize {
        self.points
    }

    /// Samples added so far.
    pub fn samples(&self) -> usize {
        self.samples
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.samples == 0
    }

    /// Adds `cur`'s chosen series (rates against `prev`) at `cur`'s time.
    pub fn add(&mut self, choice: &Bounded, cur: &Sample, prev: Option<&Sample>) {
        let ts = cur.ts_ns.div_euclid(1_000_000);
        self.samples += 1;
        // Split borrows: the closure fills the series while reading the name cache.
        let Batch {
            extra,
            build,
            names,
            index,
            series,
            points,
            key,
            ..
        } = self;
        choice.for_each(cur, prev, |def, labels, v| {
            let named = names.entry(def.name).or_insert_with(|| Named {
                base: base_name(def),
                keys: def.placeholders(),
            });
            let pairs = named.keys.iter().copied().zip(labels.iter().copied());
            push(
                extra,
                index,
                series,
                key,
                &named.base.name,
                pairs,
                Point {
                    value: v * named.base.scale,
                    timestamp: ts,
                },
            );
            *points += 1;
        });
        // Which recorder sent it, as Prometheus exporters say it: a constant 1 whose labels
        // are the build.
        if !build.is_empty() {
            push(
                extra,
                index,
                series,
                key,
                "jitterscope_build_info",
                build.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                Point {
                    value: 1.0,
                    timestamp: ts,
                },
            );
            *points += 1;
        }
        // Who owns each cgroup, as `jitterscope_cgroup_info` (the same labels `/metrics`
        // gives it), so a query can join names onto the per-cgroup series.
        for c in cur.cgroups.iter().flatten() {
            let Some(labels) = owner_labels(c) else {
                continue;
            };
            push(
                extra,
                index,
                series,
                key,
                "jitterscope_cgroup_info",
                labels.into_iter(),
                Point {
                    value: 1.0,
                    timestamp: ts,
                },
            );
            *points += 1;
        }
    }

    /// The request, leaving the batch empty (its name cache kept).
    pub fn take(&mut self) -> WriteRequest {
        self.index.clear();
        self.points = 0;
        self.samples = 0;
        WriteRequest {
            timeseries: std::mem::take(&mut self.series),
        }
    }
}

/// Appends a point to its series, creating the series (labels sorted by name, as the
/// protocol requires) the first time the batch sees it.
fn push<'a>(
    extra: &[(String, String)],
    index: &mut HashMap<String, usize>,
    series: &mut Vec<TimeSeries>,
    key: &mut String,
    name: &str,
    labels: impl Iterator<Item = (&'a str, &'a str)> + Clone,
    p: Point,
) {
    key.clear();
    key.push_str(name);
    for (k, v) in labels.clone() {
        key.push('\u{1}');
        key.push_str(k);
        key.push('\u{2}');
        key.push_str(v);
    }
    if let Some(&i) = index.get(key.as_str()) {
        series[i].samples.push(p);
        return;
    }
    let mut all: Vec<Label> = Vec::with_capacity(8);
    all.push(Label {
        name: "__name__".into(),
        value: name.into(),
    });
    for (k, v) in labels {
        all.push(Label {
            name: k.into(),
            value: v.into(),
        });
    }
    for (k, v) in extra {
        // A series' own label wins over a recorder-wide one of the same name.
        if !all.iter().any(|l| &l.name == k) {
            all.push(Label {
                name: k.clone(),
                value: v.clone(),
            });
        }
    }
    all.sort_by(|a, b| a.name.cmp(&b.name));
    index.insert(key.clone(), series.len());
    series.push(TimeSeries {
        labels: all,
        samples: vec![p],
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use jitterscope_sources::cgroup::{Cgroup, Identity, Runtime};
    use jitterscope_sources::system::loadavg::LoadAvg;

    fn sample(ts_s: i64, load: f64) -> Sample {
        Sample {
            ts_ns: ts_s * 1_000_000_000,
            mono_ns: ts_s as u64 * 1_000_000_000,
            loadavg: Some(LoadAvg {
                load1: load,
                ..Default::default()
            }),
            cgroups: Some(vec![Cgroup {
                path: "/system.slice/nginx.service".into(),
                identity: Identity {
                    runtime: Runtime::Systemd,
                    systemd_unit: Some("nginx.service".into()),
                    ..Default::default()
                },
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn points_of_one_series_share_it_and_labels_are_sorted() {
        let extra = vec![
            ("host".to_string(), "web-1".to_string()),
            ("dc".to_string(), "x".to_string()),
        ];
        let build = vec![("version".to_string(), "0.1.0".to_string())];
        let mut b = Batch::new(&extra, &build);
        let choice = Bounded::new(5);
        let s1 = sample(10, 1.5);
        let s2 = sample(11, 2.5);
        b.add(&choice, &s1, None);
        b.add(&choice, &s2, Some(&s1));
        assert_eq!(b.samples(), 2);
        let req = b.take();
        assert!(b.is_empty());
        let load: Vec<&TimeSeries> = req
            .timeseries
            .iter()
            .filter(|t| t.labels.iter().any(|l| l.value == "jitterscope_load_avg1"))
            .collect();
        assert_eq!(load.len(), 1);
        let names: Vec<&str> = load[0].labels.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["__name__", "dc", "host"]);
        assert_eq!(
            load[0].samples,
            [
                Point {
                    value: 1.5,
                    timestamp: 10_000
                },
                Point {
                    value: 2.5,
                    timestamp: 11_000
                }
            ]
        );
        let info = req
            .timeseries
            .iter()
            .find(|t| t.labels[0].value == "jitterscope_cgroup_info")
            .expect("the owner of the cgroup");
        let kv: Vec<(&str, &str)> = info
            .labels
            .iter()
            .map(|l| (l.name.as_str(), l.value.as_str()))
            .collect();
        assert_eq!(
            kv,
            [
                ("__name__", "jitterscope_cgroup_info"),
                ("cgroup", "/system.slice/nginx.service"),
                ("dc", "x"),
                ("host", "web-1"),
                ("runtime", "systemd"),
                ("unit", "nginx.service"),
            ]
        );
        assert_eq!(info.samples.len(), 2);
        let build = req
            .timeseries
            .iter()
            .find(|t| t.labels[0].value == "jitterscope_build_info")
            .expect("the build");
        assert_eq!(build.labels.len(), 4, "{:?}", build.labels);
        assert_eq!(build.labels[3].name, "version");
    }
}
