//! Path look-ups failing with ENOENT per process, with sampled names (lookups.bpf.c).

use std::collections::HashMap;
use std::path::Path;

use jitterscope_model::signals;
use jitterscope_model::tracers::{
    path_pattern, LookupName, LookupPattern, LookupProc, Lookups, Tracers,
};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags};

use crate::delta::{Deltas, Layout};
use crate::env::has_tracepoint;
use crate::format::{check, field, Record};
use crate::{begin_read, create_other, Env, Tracer, TracerDef};

use crate::{drain_procs, load_and_attach, open_skel};

#[allow(clippy::all, clippy::pedantic, non_camel_case_types, dead_code, unused)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/lookups.skel.rs"));
}
use skel::*;

/// js_lookup_proc: comm (2 words), cgroup, calls[3], enoent[3] (stat, access, open).
const LAYOUT: Layout = Layout {
    words: 10,
    keep: &[0, 1, 2, 3],
    named_gen: Some(3),
};
const _: () = assert!(std::mem::size_of::<types::js_lookup_proc>() == LAYOUT.words * 8);
const NAME_SLOTS: u32 = 64;
/// Patterns and raw names kept per interval: enough to see who probes what, small enough that
/// a storm of unique names does not bloat the store.
const MAX_PATTERNS: usize = 8;
const MAX_NAMES: usize = 16;

pub(crate) static DEF: TracerDef = TracerDef {
    name: "lookups",
    what: "stat/access/open failing with ENOENT per process, sampled names",
    demand: Some(&signals::NEGATIVE_DENTRIES),
    load: |env, tracefs| Ok(Box::new(load(env, tracefs?)?)),
    records,
};

pub(crate) struct LookupsTracer {
    links: Vec<libbpf_rs::Link>,
    skel: LookupsSkel<'static>,
    procs: Deltas<u32>,
    procs_batch: crate::batch::Batch,
    syscalls: Vec<&'static str>,
    dropped: u64,
}

/// The traced syscalls and which argument is the path, as in lookups.bpf.c's ENTER list.
const SYSCALLS: &[(&str, usize)] = &[
    ("newstat", 0),
    ("newlstat", 0),
    ("newfstatat", 1),
    ("statx", 1),
    ("access", 0),
    ("faccessat", 1),
    ("faccessat2", 1),
    ("open", 0),
    ("openat", 1),
    ("openat2", 1),
];

/// The record fields the programs read: the path argument at entry, the result at exit.
pub(crate) fn records() -> Vec<Record> {
    let args = std::mem::offset_of!(types::sys_enter_args, args);
    let mut v = Vec::new();
    for &(sc, argi) in SYSCALLS {
        v.push(Record {
            event: format!("syscalls/sys_enter_{sc}"),
            fields: vec![("filename", args + 8 * argi, 8)],
        });
        v.push(Record {
            event: format!("syscalls/sys_exit_{sc}"),
            fields: vec![field!(types::sys_exit_args, ret, "ret")],
        });
    }
    v
}

pub(crate) fn load(env: &mut Env, tracefs: &Path) -> Result<LookupsTracer, String> {
    check(tracefs, &records())?;
    let mut open = open_skel!(LookupsSkelBuilder, env);
    // Which of these syscalls exist depends on the architecture (arm64 has no stat, access or
    // open): load only the pairs whose tracepoints exist.
    let mut syscalls = Vec::new();
    for mut prog in open.open_object_mut().progs_mut() {
        let sec = prog.section().to_string_lossy().into_owned();
        let Some(tp) = sec.strip_prefix("tracepoint/syscalls/") else {
            continue;
        };
        let present = has_tracepoint(tracefs, "syscalls", tp);
        prog.set_autoload(present);
        if present {
            if let Some(sc) = tp.strip_prefix("sys_enter_") {
                syscalls.push(match sc {
                    "newstat" => "stat",
                    "newlstat" => "lstat",
                    "newfstatat" => "newfstatat",
                    "statx" => "statx",
                    "access" => "access",
                    "faccessat" => "faccessat",
                    "faccessat2" => "faccessat2",
                    "open" => "open",
                    "openat" => "openat",
                    "openat2" => "openat2",
                    _ => "?",
                });
            }
        }
    }
    if syscalls.is_empty() {
        return Err(
            "none of the stat/access/open syscall tracepoints exists on this kernel".into(),
        );
    }
    let (skel, links) = load_and_attach(
        open,
        |s| create_other(&s.maps.lookup_procs),
        "syscall tracepoints",
        !env.defer_on_demand,
    )?;
    Ok(LookupsTracer {
        links,
        skel,
        procs: Deltas::new(LAYOUT),
        procs_batch: Default::default(),
        syscalls,
        dropped: 0,
    })
}

fn family(f: u32) -> &'static str {
    match f {
        0 => "stat",
        1 => "access",
        _ => "open",
    }
}

/// Groups sampled names by [`path_pattern`], most frequent first.
pub(crate) fn patterns(names: &[LookupName]) -> Vec<LookupPattern> {
    let mut by: HashMap<String, LookupPattern> = HashMap::new();
    for n in names {
        let p = by
            .entry(path_pattern(&n.path))
            .or_insert_with_key(|k| LookupPattern {
                pattern: k.clone(),
                example: n.path.clone(),
                ..Default::default()
            });
        p.samples += 1;
        if p.comms.len() < 4 && !p.comms.contains(&n.comm) {
            p.comms.push(n.comm.clone());
        }
    }
    let mut v: Vec<_> = by.into_values().collect();
    v.sort_by(|a, b| {
        b.samples
            .cmp(&a.samples)
            .then_with(|| a.pattern.cmp(&b.pattern))
    });
    v.truncate(MAX_PATTERNS);
    v
}

impl Tracer for LookupsTracer {
    fn new_generation(&mut self) {
        crate::next_generation!(self.skel);
        // Names sampled since the last read (while a detach was under way) would otherwise be
        // read with the interval after next, which reuses their half.
        if let Some(bss) = self.skel.maps.bss_data.as_deref_mut() {
            bss.names_seen = [0; 2];
        }
    }

    fn how(&self) -> String {
        format!("syscall tracepoints ({})", self.syscalls.join(", "))
    }

    fn links(&mut self) -> &mut Vec<libbpf_rs::Link> {
        &mut self.links
    }

    fn object(&self) -> &libbpf_rs::Object {
        use libbpf_rs::skel::Skel;
        self.skel.object()
    }

    fn read(&mut self, env: &mut Env, out: &mut Tracers) {
        let mut t = Lookups::default();
        // Switch the kernel to the other half of the name sample first, then read this one.
        let (gen, dropped) = begin_read!(self.skel, self.dropped);
        t.dropped = dropped;
        let half = (gen & 1) as usize;
        let seen = self
            .skel
            .maps
            .bss_data
            .as_deref()
            .map_or(0, |bss| bss.names_seen[half]);
        t.failures_sampled_from = seen;
        let mut names = Vec::new();
        let base = half as u32 * NAME_SLOTS;
        for slot in base..base + seen.min(NAME_SLOTS as u64) as u32 {
            let Ok(Some(v)) = self
                .skel
                .maps
                .lookup_names
                .lookup(&slot.to_ne_bytes(), MapFlags::ANY)
            else {
                continue;
            };
            if let Some(n) = parse_name(&v) {
                names.push(n);
            }
        }
        if let Some(bss) = self.skel.maps.bss_data.as_deref_mut() {
            bss.names_seen[half] = 0;
        }
        t.patterns = patterns(&names);
        names.truncate(MAX_NAMES);
        t.names = names;
        for e in drain_procs(
            &self.skel.maps.lookup_procs,
            &mut self.procs_batch,
            &mut self.procs,
            env.live_pids(),
        ) {
            let d = &e.d;
            t.procs.push(LookupProc {
                pid: e.pid,
                comm: e.comm,
                cgroup: env.cpu_cgroups.path(e.cgroup_id),
                stat_calls: d[4],
                access_calls: d[5],
                open_calls: d[6],
                stat_enoent: d[7],
                access_enoent: d[8],
                open_enoent: d[9],
            });
        }
        out.lookups = Some(t);
    }
}

/// One js_lookup_name slot: tgid, family, comm[16], name[256].
pub(crate) fn parse_name(v: &[u8]) -> Option<LookupName> {
    let u32_at = |o: usize| Some(u32::from_ne_bytes(v.get(o..o + 4)?.try_into().ok()?));
    let text = |b: &[u8]| {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..end]).into_owned()
    };
    let pid = u32_at(0)?;
    let fam = u32_at(4)?;
    let comm = text(v.get(8..24)?);
    let path = text(v.get(24..)?);
    if path.is_empty() {
        return None;
    }
    Some(LookupName {
        pid,
        comm,
        family: family(fam).into(),
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(pid: u32, fam: u32, comm: &str, path: &str) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&pid.to_ne_bytes());
        v.extend_from_slice(&fam.to_ne_bytes());
        let mut c = [0u8; 16];
        c[..comm.len()].copy_from_slice(comm.as_bytes());
        v.extend_from_slice(&c);
        let mut n = [0u8; 256];
        n[..path.len()].copy_from_slice(path.as_bytes());
        v.extend_from_slice(&n);
        v
    }

    #[test]
    fn slot_layout_matches_the_kernel_struct() {
        assert_eq!(
            std::mem::size_of::<types::js_lookup_name>(),
            slot(0, 0, "", "").len()
        );
        let n = parse_name(&slot(
            42,
            1,
            "certutil",
            "/etc/pki/nssdb/.17_dOeSnotExist_.db",
        ))
        .unwrap();
        assert_eq!(
            (n.pid, n.comm.as_str(), n.family.as_str()),
            (42, "certutil", "access")
        );
        assert_eq!(n.path, "/etc/pki/nssdb/.17_dOeSnotExist_.db");
        assert!(
            parse_name(&slot(1, 0, "x", "")).is_none(),
            "an empty slot is skipped"
        );
        assert!(parse_name(&[1, 2, 3]).is_none());
    }

    #[test]
    fn names_group_into_patterns() {
        let mk = |c: &str, p: &str| LookupName {
            pid: 1,
            comm: c.into(),
            family: "access".into(),
            path: p.into(),
        };
        let names = vec![
            mk("certutil", "/db/.1_dOeSnotExist_.db"),
            mk("certutil", "/db/.22_dOeSnotExist_.db"),
            mk("curl", "/db/.333_dOeSnotExist_.db"),
            mk("python3", "/usr/lib/python3.11/foo.py"),
        ];
        let p = patterns(&names);
        assert_eq!(p[0].pattern, "/db/.*_dOeSnotExist_.db");
        assert_eq!(p[0].samples, 3);
        assert_eq!(p[0].comms, vec!["certutil", "curl"]);
        assert_eq!(p[1].samples, 1);
    }

    proptest::proptest! {
        #[test]
        fn parse_name_never_panics(v in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
            let _ = parse_name(&v);
        }
    }
}
