//! Samples turned into remote-write series: the default export set ([`Bounded`]) or the user's
//! globs, named in base units ([`base_name`]), with the recorder's labels (`host` and any the
//! user adds), grouped by series across the samples of one request.

use std::collections::BTreeMap;

use ahash::AHashMap as HashMap;

use jitterscope_model::export::{base_name, help_in_base_units, unit_of, BaseName, Bounded};
use jitterscope_model::openmetrics::owner_labels;
use jitterscope_model::Sample;

use super::proto::{Label, MetricMetadata, MetricType, Point, TimeSeries, WriteRequest};

/// Which series are sent: [`Bounded::new`] by default, [`Bounded::globs`] for the user's.
pub type Choice = Bounded;

/// A definition's exported name and label names, worked out once.
struct Named {
    base: BaseName,
    keys: Vec<&'static str>,
}

/// Prometheus' staleness marker: the NaN whose bits say "this series ended here". Without it
/// a series that stops (a process that exits or leaves the top N, a removed cgroup) keeps
/// its last value in instant queries for 5 minutes, and alerts on it keep firing.
pub const STALE_NAN: u64 = 0x7ff0_0000_0000_0002;

/// A series sent in a recent sample: its labels, and the last sample it had a point in.
struct Live {
    labels: Vec<Label>,
    generation: u64,
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
    /// The series of the previous sample, across requests, to end those the next one lacks.
    live: HashMap<String, Live>,
    /// Samples added since the batch was made.
    generation: u64,
    /// Every family sent since the batch was made, for the metadata requests.
    families: BTreeMap<String, MetricMetadata>,
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
            live: HashMap::default(),
            generation: 0,
            families: BTreeMap::new(),
        }
    }

    /// The metadata of every family sent so far (types, help, units), as one request.
    pub fn metadata(&self) -> WriteRequest {
        WriteRequest {
            timeseries: Vec::new(),
            metadata: self.families.values().cloned().collect(),
        }
    }

    /// Families sent so far.
    pub fn families(&self) -> usize {
        self.families.len()
    }

    /// Series being sent now (those the last sample had).
    pub fn live(&self) -> usize {
        self.live.len()
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
        self.generation += 1;
        let generation = self.generation;
        // Split borrows: the closure fills the series while reading the name cache.
        let Batch {
            extra,
            build,
            names,
            index,
            series,
            points,
            key,
            live,
            families,
            ..
        } = self;
        let mut at = At {
            extra,
            index,
            series,
            key,
            live,
            generation,
        };
        choice.for_each(cur, prev, |def, labels, v| {
            let named = names.entry(def.name).or_insert_with(|| {
                let base = base_name(def);
                let ty = match def.kind {
                    jitterscope_model::Kind::Counter => MetricType::Counter,
                    _ => MetricType::Gauge,
                };
                meta(
                    families,
                    &base.name,
                    ty,
                    help_in_base_units(def.help, &base),
                );
                Named {
                    base,
                    keys: def.placeholders(),
                }
            });
            let pairs = named.keys.iter().copied().zip(labels.iter().copied());
            at.push(
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
            if !families.contains_key("jitterscope_build_info") {
                meta(
                    families,
                    "jitterscope_build_info",
                    MetricType::Info,
                    "The jitterscope that sent these series: version and source revision".into(),
                );
            }
            at.push(
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
            if !families.contains_key("jitterscope_cgroup_info") {
                meta(
                    families,
                    "jitterscope_cgroup_info",
                    MetricType::Info,
                    jitterscope_model::openmetrics::CGROUP_INFO_HELP.into(),
                );
            }
            at.push(
                "jitterscope_cgroup_info",
                labels.into_iter(),
                Point {
                    value: 1.0,
                    timestamp: ts,
                },
            );
            *points += 1;
        }
        *points += at.end_the_missing(ts);
    }

    /// The request, leaving the batch empty (its name cache kept).
    pub fn take(&mut self) -> WriteRequest {
        self.index.clear();
        self.points = 0;
        self.samples = 0;
        WriteRequest {
            timeseries: std::mem::take(&mut self.series),
            metadata: Vec::new(),
        }
    }
}

/// Notes a family's metadata.
fn meta(families: &mut BTreeMap<String, MetricMetadata>, name: &str, ty: MetricType, help: String) {
    families.insert(
        name.to_string(),
        MetricMetadata {
            r#type: ty as i32,
            metric_family_name: name.to_string(),
            help,
            unit: unit_of(name).unwrap_or_default().to_string(),
        },
    );
}

/// Where one sample's points go: the batch's series, and the series known to be live.
struct At<'b> {
    extra: &'b [(String, String)],
    index: &'b mut HashMap<String, usize>,
    series: &'b mut Vec<TimeSeries>,
    key: &'b mut String,
    live: &'b mut HashMap<String, Live>,
    generation: u64,
}

impl At<'_> {
    /// Appends a point to its series, creating the series (labels sorted by name, as the
    /// protocol requires) the first time the batch sees it, and marks it live.
    fn push<'a>(
        &mut self,
        name: &str,
        labels: impl Iterator<Item = (&'a str, &'a str)> + Clone,
        p: Point,
    ) {
        let key = &mut *self.key;
        key.clear();
        key.push_str(name);
        for (k, v) in labels.clone() {
            key.push('\u{1}');
            key.push_str(k);
            key.push('\u{2}');
            key.push_str(v);
        }
        let i = match self.index.get(key.as_str()) {
            Some(&i) => {
                self.series[i].samples.push(p);
                i
            }
            None => {
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
                for (k, v) in self.extra {
                    // A series' own label wins over a recorder-wide one of the same name.
                    if !all.iter().any(|l| &l.name == k) {
                        all.push(Label {
                            name: k.clone(),
                            value: v.clone(),
                        });
                    }
                }
                all.sort_by(|a, b| a.name.cmp(&b.name));
                self.index.insert(key.clone(), self.series.len());
                self.series.push(TimeSeries {
                    labels: all,
                    samples: vec![p],
                });
                self.series.len() - 1
            }
        };
        match self.live.get_mut(key.as_str()) {
            Some(l) => l.generation = self.generation,
            None => {
                self.live.insert(
                    key.clone(),
                    Live {
                        labels: self.series[i].labels.clone(),
                        generation: self.generation,
                    },
                );
            }
        }
    }

    /// Ends, with a staleness marker at `ts`, every live series this sample did not have;
    /// returns how many.
    fn end_the_missing(&mut self, ts: i64) -> usize {
        let generation = self.generation;
        let gone: Vec<String> = self
            .live
            .iter()
            .filter(|(_, l)| l.generation != generation)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &gone {
            let Some(l) = self.live.remove(k) else {
                continue;
            };
            let p = Point {
                value: f64::from_bits(STALE_NAN),
                timestamp: ts,
            };
            match self.index.get(k.as_str()) {
                Some(&i) => self.series[i].samples.push(p),
                None => {
                    self.index.insert(k.clone(), self.series.len());
                    self.series.push(TimeSeries {
                        labels: l.labels,
                        samples: vec![p],
                    });
                }
            }
        }
        gone.len()
    }
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

    /// A series the next sample lacks ends there with Prometheus' staleness marker, once,
    /// across requests; a series that goes on gets none.
    #[test]
    fn a_series_that_stops_is_ended_with_a_staleness_marker() {
        let extra = vec![("host".to_string(), "web-1".to_string())];
        let mut b = Batch::new(&extra, &[]);
        let choice = Bounded::new(5);
        let s1 = sample(10, 1.5);
        let mut s2 = sample(11, 2.5);
        s2.cgroups = Some(Vec::new());
        let s3 = {
            let mut s = sample(12, 3.5);
            s.cgroups = Some(Vec::new());
            s
        };
        b.add(&choice, &s1, None);
        let live = b.live();
        b.add(&choice, &s2, Some(&s1));
        let first = b.take();
        b.add(&choice, &s3, Some(&s2));
        let second = b.take();
        let of = |req: &WriteRequest, name: &str| -> Vec<(u64, i64)> {
            req.timeseries
                .iter()
                .filter(|t| t.labels[0].value == name)
                .flat_map(|t| t.samples.iter().map(|p| (p.value.to_bits(), p.timestamp)))
                .collect()
        };
        assert_eq!(
            of(&first, "jitterscope_cgroup_info"),
            [(1f64.to_bits(), 10_000), (STALE_NAN, 11_000)]
        );
        assert!(of(&second, "jitterscope_cgroup_info").is_empty());
        let load = of(&first, "jitterscope_load_avg1");
        assert_eq!(
            load,
            [(1.5f64.to_bits(), 10_000), (2.5f64.to_bits(), 11_000)]
        );
        assert_eq!(
            of(&second, "jitterscope_load_avg1"),
            [(3.5f64.to_bits(), 12_000)]
        );
        assert_eq!(b.live(), live - 1);
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
