//! A window's named stacks as a gzip-compressed pprof profile (`profile.proto` of
//! github.com/google/pprof), for `go tool pprof`, Pyroscope and the other tools that read it.
//!
//! Frames are already named, so every function gets one location with no address, and every
//! mapping says `has_functions`: readers then take the names as they are instead of trying to
//! symbolize addresses we never recorded.

use std::collections::HashMap;
use std::io::Write;

use flate2::{write::GzEncoder, Compression};
use prost::Message;

use crate::window::{Func, Named, Space};

/// What perf and pprof call the kernel image, so kernel frames group the way they are used to.
const KERNEL: &str = "[kernel.kallsyms]";

/// Encodes `named` as a gzip-compressed pprof profile that started at `start_unix_ns` and
/// lasted `duration_ns`.
///
/// Each sample carries two values, its sample count and the CPU time that stands for
/// (count × the sampling period), and a `comm` label with its process name.
pub fn encode(named: &Named, start_unix_ns: i64, duration_ns: i64) -> std::io::Result<Vec<u8>> {
    let hz = if named.hz == 0 { 99 } else { named.hz };
    let period = 1_000_000_000 / i64::from(hz);
    let mut b = Builder::default();
    b.str("");
    let cpu = b.value_type("cpu", "nanoseconds");
    b.p.sample_type = vec![b.value_type("samples", "count"), cpu.clone()];
    b.p.period_type = Some(cpu);
    b.p.period = period;
    b.p.time_nanos = start_unix_ns;
    b.p.duration_nanos = duration_ns;
    let comm = b.str("comm");
    for s in &named.stacks {
        let location_id = s.frames.iter().rev().map(|f| b.location(f)).collect();
        let count = i64::try_from(s.count).unwrap_or(i64::MAX);
        let label = vec![Label {
            key: comm,
            str: b.str(&s.comm),
        }];
        b.p.sample.push(Sample {
            location_id,
            value: vec![count, count.saturating_mul(period)],
            label,
        });
    }
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&b.p.encode_to_vec())?;
    gz.finish()
}

/// The profile being built, with what is already interned in it.
#[derive(Default)]
struct Builder<'a> {
    p: Profile,
    strings: HashMap<&'a str, i64>,
    funcs: HashMap<&'a Func, u64>,
    mappings: HashMap<&'a str, u64>,
}

impl<'a> Builder<'a> {
    fn str(&mut self, s: &'a str) -> i64 {
        *self.strings.entry(s).or_insert_with(|| {
            self.p.string_table.push(s.to_string());
            self.p.string_table.len() as i64 - 1
        })
    }

    fn value_type(&mut self, ty: &'a str, unit: &'a str) -> ValueType {
        ValueType {
            r#type: self.str(ty),
            unit: self.str(unit),
        }
    }

    /// The location of `f`, added with its function (same id) and mapping the first time.
    fn location(&mut self, f: &'a Func) -> u64 {
        if let Some(&id) = self.funcs.get(f) {
            return id;
        }
        let id = self.p.function.len() as u64 + 1;
        let file = match f.space {
            Space::Kernel => KERNEL,
            Space::User => &f.module,
        };
        // JIT and unknown frames come from no file; pprof allows a location without a mapping.
        let mapping_id = if file.is_empty() {
            0
        } else {
            self.mapping(file)
        };
        let name = self.str(&f.name);
        let filename = self.str(file);
        self.p.function.push(Function {
            id,
            name,
            system_name: name,
            filename,
        });
        self.p.location.push(Location {
            id,
            mapping_id,
            line: vec![Line { function_id: id }],
        });
        self.funcs.insert(f, id);
        id
    }

    fn mapping(&mut self, file: &'a str) -> u64 {
        if let Some(&id) = self.mappings.get(file) {
            return id;
        }
        let id = self.p.mapping.len() as u64 + 1;
        let filename = self.str(file);
        self.p.mapping.push(Mapping {
            id,
            filename,
            has_functions: true,
        });
        self.mappings.insert(file, id);
        id
    }
}

// The subset of profile.proto written here; field numbers and types are the proto's.

#[derive(Clone, PartialEq, prost::Message)]
struct Profile {
    #[prost(message, repeated, tag = "1")]
    sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    time_nanos: i64,
    #[prost(int64, tag = "10")]
    duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    period: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ValueType {
    #[prost(int64, tag = "1")]
    r#type: i64,
    #[prost(int64, tag = "2")]
    unit: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Sample {
    /// Leaf first.
    #[prost(uint64, repeated, tag = "1")]
    location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    label: Vec<Label>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Label {
    #[prost(int64, tag = "1")]
    key: i64,
    #[prost(int64, tag = "2")]
    str: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Mapping {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(int64, tag = "5")]
    filename: i64,
    #[prost(bool, tag = "7")]
    has_functions: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Location {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(uint64, tag = "2")]
    mapping_id: u64,
    #[prost(message, repeated, tag = "4")]
    line: Vec<Line>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Line {
    #[prost(uint64, tag = "1")]
    function_id: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Function {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(int64, tag = "2")]
    name: i64,
    #[prost(int64, tag = "3")]
    system_name: i64,
    #[prost(int64, tag = "4")]
    filename: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::NamedStack;
    use std::io::Read;
    use std::process::Command;

    fn func(name: &str, space: Space, module: &str) -> Func {
        Func {
            name: name.into(),
            space,
            module: module.into(),
        }
    }

    fn named() -> Named {
        let main = func("main", Space::User, "/usr/bin/app");
        let spin = func("spin", Space::User, "/usr/bin/app");
        let read = func("read", Space::User, "/lib/libc.so.6");
        let sys = func("do_syscall_64", Space::Kernel, "");
        let vfs = func("vfs_read", Space::Kernel, "");
        let idle = func("do_idle", Space::Kernel, "");
        let stack = |comm: &str, frames: Vec<Func>, count| NamedStack {
            comm: comm.into(),
            frames,
            count,
        };
        Named {
            stacks: vec![
                stack("app", vec![main.clone(), read, sys, vfs], 4),
                stack("app", vec![main, spin], 3),
                stack("swapper", vec![idle], 5),
            ],
            samples: 12,
            total: 12,
            hz: 99,
            ..Default::default()
        }
    }

    fn decode(gz: &[u8]) -> Profile {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(gz)
            .read_to_end(&mut raw)
            .unwrap();
        Profile::decode(raw.as_slice()).unwrap()
    }

    #[test]
    fn pprof_profile_links_and_order() {
        let p = decode(&encode(&named(), 1_700_000_000_000_000_000, 5_000_000_000).unwrap());
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(p.string_table[0], "");
        let mut unique = p.string_table.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), p.string_table.len(), "strings are interned");

        let types: Vec<_> = p
            .sample_type
            .iter()
            .map(|t| (s(t.r#type), s(t.unit)))
            .collect();
        assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
        let pt = p.period_type.as_ref().unwrap();
        assert_eq!((s(pt.r#type), s(pt.unit)), ("cpu", "nanoseconds"));
        assert_eq!(p.period, 1_000_000_000 / 99);
        assert_eq!(
            (p.time_nanos, p.duration_nanos),
            (1_700_000_000_000_000_000, 5_000_000_000)
        );

        assert_eq!(
            (p.function.len(), p.location.len(), p.mapping.len()),
            (6, 6, 3)
        );
        assert!(p.mapping.iter().all(|m| m.has_functions));
        for (i, (f, l)) in p.function.iter().zip(&p.location).enumerate() {
            assert_eq!((f.id, l.id), (i as u64 + 1, i as u64 + 1));
        }
        // location id → (function name, function file, mapping file)
        let at = |id: u64| {
            let l = p.location.iter().find(|l| l.id == id).unwrap();
            let f = p
                .function
                .iter()
                .find(|f| f.id == l.line[0].function_id)
                .unwrap();
            let m = p.mapping.iter().find(|m| m.id == l.mapping_id).unwrap();
            (s(f.name), s(f.filename), s(m.filename))
        };
        let stack =
            |i: usize| -> Vec<_> { p.sample[i].location_id.iter().map(|&l| at(l)).collect() };

        assert_eq!(p.sample.len(), 3);
        assert_eq!(
            stack(0),
            [
                ("vfs_read", KERNEL, KERNEL),
                ("do_syscall_64", KERNEL, KERNEL),
                ("read", "/lib/libc.so.6", "/lib/libc.so.6"),
                ("main", "/usr/bin/app", "/usr/bin/app"),
            ]
        );
        assert_eq!(
            stack(1),
            [
                ("spin", "/usr/bin/app", "/usr/bin/app"),
                ("main", "/usr/bin/app", "/usr/bin/app"),
            ]
        );
        assert_eq!(
            p.sample[0].location_id[3], p.sample[1].location_id[1],
            "main is one location"
        );
        assert_eq!(stack(2), [("do_idle", KERNEL, KERNEL)]);

        let period = 1_000_000_000 / 99;
        let values: Vec<_> = p.sample.iter().map(|x| x.value.clone()).collect();
        assert_eq!(values, [[4, 4 * period], [3, 3 * period], [5, 5 * period]]);
        let labels: Vec<_> = p
            .sample
            .iter()
            .map(|x| {
                assert_eq!(x.label.len(), 1);
                (s(x.label[0].key), s(x.label[0].str))
            })
            .collect();
        assert_eq!(
            labels,
            [("comm", "app"), ("comm", "app"), ("comm", "swapper")]
        );
    }

    #[test]
    fn pprof_unnamed_frames_and_zero_hz() {
        let mut n = named();
        n.hz = 0;
        n.stacks[1].frames[1] = func("0x1234", Space::User, "");
        let p = decode(&encode(&n, 0, 0).unwrap());
        assert_eq!(p.period, 1_000_000_000 / 99);
        let leaf = p.sample[1].location_id[0];
        let l = p.location.iter().find(|l| l.id == leaf).unwrap();
        assert_eq!(l.mapping_id, 0, "a frame from no file has no mapping");
    }

    #[test]
    fn pprof_readable_by_go_tool_pprof() {
        let Some(go) = jitterscope_testkit::go() else {
            return jitterscope_testkit::skip(
                "pprof_readable_by_go_tool_pprof",
                "go is not installed (on PATH or in /usr/local/go/bin)",
            );
        };
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(&encode(&named(), 1_700_000_000_000_000_000, 5_000_000_000).unwrap())
            .unwrap();
        let out = Command::new(go)
            .args(["tool", "pprof", "-raw", "-symbolize=none"])
            .arg(file.path())
            // Offline: no symbol lookups, no toolchain download.
            .env("PPROF_BINARY_PATH", "/nonexistent")
            .env("GOTOOLCHAIN", "local")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        for want in ["vfs_read", "do_idle", "comm:[app]", KERNEL] {
            assert!(stdout.contains(want), "{want} missing:\n{stdout}\n{stderr}");
        }
    }
}
