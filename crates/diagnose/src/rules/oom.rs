//! `memory.oom-kill` — the OOM killer ended a process.
//!
//! **Mechanism.** When reclaim cannot free enough memory for an allocation, either inside a
//! memory cgroup at its hard limit (`memory.max`, v1 `memory.limit_in_bytes`) or on the whole
//! host, the kernel picks the process with the highest badness (its memory plus
//! `oom_score_adj`) in that scope and kills it with SIGKILL. It is the end of the incident,
//! not its cause: something grew (a leak, a burst, a cache the limit did not leave room for).
//!
//! **Evidence.** The kernel's report in its log (`/dev/kmsg`, recorded as `oom_kills` and
//! `oom.kill.<pid>.<comm>.rss_bytes`): the victim, the cgroup whose limit was hit
//! (`oom_memcg`), the victim's cgroup and its resident memory when killed. The counters say
//! how many even without the log: `cgroup.<cgroup>.memory.oom_kill_per_s` (v1
//! `memory.oom_control`, v2 `memory.events`), the host's `reclaim.oom_kill_per_s` (vmstat),
//! and the cgroup's limit and usage. Without the log, the candidates are the processes of that
//! cgroup the recorder saw end by SIGKILL.
//!
//! **Thresholds.** Any kill: one is an incident. Confidence 0.95 with the kernel's report,
//! 0.85 with a counter and a process seen killed by SIGKILL, 0.7 on a counter alone.
//!
//! **Remediation.** Find what grew first (the leak or burst linked as its cause); raise the
//! limit only when the working set needs it; on v2 set `memory.high` below `memory.max` so the
//! cgroup is throttled and reclaimed before it is killed; `oom_score_adj` to choose who dies;
//! worker servers: recycle workers before they grow that far.
//!
//! **References.** Documentation/admin-guide/cgroup-v2.rst (memory.max, memory.high,
//! memory.events oom_kill); mm/oom_kill.c; proc(5) oom_score_adj.

use jitterscope_model::metrics::{cgroup, mem, process};

use super::{confidence, fact, finding, mib, rule, series_fact, Take};
use crate::data::Data;
use crate::{Culprit, Finding};
use jitterscope_model::registry::Unit;

rule! {
    "memory.oom-kill", "the OOM killer ended a process", mechanism,
    reads: mem::RECLAIM_OOM_KILL_PER_S, mem::OOM_KILL_RSS_BYTES, cgroup::MEMORY_OOM_KILL_PER_S,
        cgroup::MEMORY_LIMIT_BYTES, cgroup::MEMORY_USAGE_OF_LIMIT_PCT,
        cgroup::MEMORY_FAILCNT_PER_S, process::PROC_EXITED, process::PROC_EXIT_SIGNAL,
}

/// The cgroups with OOM kills in the window, deepest first: v1 and v2 count a kill in every
/// ancestor too, and the deepest is the one whose limit was hit.
fn killing_cgroups(d: &Data) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64)> = d
        .each(&cgroup::MEMORY_OOM_KILL_PER_S)
        .filter_map(|s| {
            let n = d.stats_of(s).sum;
            (n >= 0.5).then(|| (s.label(0).to_string(), n))
        })
        .collect();
    v.sort_by(|a, b| {
        let depth = |p: &str| p.matches('/').count();
        depth(&b.0).cmp(&depth(&a.0)).then(a.0.cmp(&b.0))
    });
    v
}

/// The processes the recorder saw end by SIGKILL in the window, in memory cgroup `cg` (any,
/// when None).
fn sigkilled<'d>(d: &'d Data, cg: Option<&str>) -> Vec<(u32, &'d str)> {
    let start = d.start as u32;
    d.each(&process::PROC_EXIT_SIGNAL)
        .filter(|s| s.points.iter().any(|&(i, v)| i >= start && v == 9.0))
        .filter_map(|s| s.pid_comm())
        .filter(|(pid, _)| {
            cg.is_none_or(|c| {
                d.procs
                    .get(pid)
                    .and_then(|p| p.memory_cgroup.as_deref())
                    .is_some_and(|m| m == c || m.starts_with(&format!("{c}/")))
            })
        })
        .collect()
}

fn cite_cgroup(f: &mut Finding, d: &Data, cg: &str) {
    if d.stats(&cgroup::MEMORY_OOM_KILL_PER_S, &[cg]).n > 0 {
        f.cite(
            d,
            &cgroup::MEMORY_OOM_KILL_PER_S,
            &[cg],
            Take::Sum,
            format!("OOM kills counted by cgroup {cg}"),
        );
    }
    if d.stats(&cgroup::MEMORY_LIMIT_BYTES, &[cg]).n > 0 {
        f.cite(
            d,
            &cgroup::MEMORY_LIMIT_BYTES,
            &[cg],
            Take::Last,
            format!("the memory limit of {cg}"),
        );
    }
    if d.stats(&cgroup::MEMORY_USAGE_OF_LIMIT_PCT, &[cg]).n > 0 {
        f.cite(
            d,
            &cgroup::MEMORY_USAGE_OF_LIMIT_PCT,
            &[cg],
            Take::Max,
            "its usage, % of the limit",
        );
    }
    if d.stats(&cgroup::MEMORY_FAILCNT_PER_S, &[cg]).sum > 0.0 {
        f.cite(
            d,
            &cgroup::MEMORY_FAILCNT_PER_S,
            &[cg],
            Take::Sum,
            "times it hit the limit (v1 memory.failcnt)",
        );
    }
}

fn remediation(f: &mut Finding, cg: Option<&str>) {
    f.remediation.push("find what grew before the kill: the finding linked as its cause (a leak, a burst), or the RSS of the cgroup's processes before it (jitterscope dump --select 'proc.*.rss_bytes')".into());
    if let Some(cg) = cg {
        f.remediation.push(format!("raise the memory limit of {cg} only if its working set needs the room; cgroup v2: memory.high a little below memory.max throttles and reclaims it before the kill"));
    } else {
        f.remediation.push("the host ran out of memory: bound the largest consumers with cgroup limits so one process is killed within its own cgroup, not a neighbour".into());
    }
    f.remediation.push("choose who dies: oom_score_adj (-1000 protects, 1000 volunteers); worker servers: recycle workers before they grow that far (gunicorn max_requests, uwsgi max-requests)".into());
    f.references = vec![
        "https://docs.kernel.org/admin-guide/cgroup-v2.html#memory-interface-files",
        "https://github.com/torvalds/linux/blob/master/mm/oom_kill.c",
    ];
}

fn run(d: &Data) -> Vec<Finding> {
    let mut out = Vec::new();
    let cgroups = killing_cgroups(d);
    let host = d.stats(&mem::RECLAIM_OOM_KILL_PER_S, &[]);
    for (at, k) in &d.oom_kills {
        let pid = k.pid.to_string();
        let limit_cg = k.oom_memcg.as_deref().filter(|_| k.memcg());
        let mut f = finding(
            &RULE,
            d,
            format!(
                "the OOM killer killed {} ({}){}{}",
                k.comm,
                k.pid,
                limit_cg
                    .map(|c| format!(" at the memory limit of cgroup {c}"))
                    .unwrap_or_else(|| " when the host ran out of memory".into()),
                k.rss_bytes()
                    .map(|b| format!(", {} MiB resident", mib(b as f64)))
                    .unwrap_or_default()
            ),
            0.95,
            Culprit {
                pid: Some(k.pid),
                comm: Some(k.comm.clone()),
                container: k
                    .task_memcg
                    .as_deref()
                    .or(limit_cg)
                    .and_then(|cg| super::container_of(d, cg)),
                cgroup: k
                    .task_memcg
                    .clone()
                    .or_else(|| limit_cg.map(str::to_string)),
                ..Default::default()
            },
        );
        f.onset = Some(*at);
        match d.get(&mem::OOM_KILL_RSS_BYTES, &[&pid, &k.comm]) {
            Some(s) => f.evidence.push(series_fact(
                s,
                k.rss_bytes().unwrap_or(0) as f64,
                Take::Max,
                format!(
                    "the victim's resident memory when killed (anon {} MiB), from the kernel's report ({})",
                    mib(k.anon_rss_bytes.unwrap_or(0) as f64),
                    k.constraint.as_deref().unwrap_or("constraint not reported")
                ),
            )),
            None => f.evidence.push(fact(
                "oom_kills",
                k.rss_bytes().unwrap_or(0) as f64,
                Unit::Bytes,
                "the victim's resident memory when killed, from the kernel's report",
            )),
        }
        if let Some(c) = limit_cg {
            cite_cgroup(&mut f, d, c);
        }
        if host.n > 0 {
            f.cite(
                d,
                &mem::RECLAIM_OOM_KILL_PER_S,
                &[],
                Take::Sum,
                "OOM kills on the host (vmstat oom_kill)",
            );
        }
        remediation(&mut f, limit_cg);
        out.push(f);
    }
    if !out.is_empty() {
        return out;
    }
    // No report in the log (not readable, or a recording from before the recorder read it):
    // the counters still say a kill happened, and where.
    let (scope, n) = match (cgroups.first(), host.sum) {
        (Some((cg, n)), _) => (Some(cg.as_str()), *n),
        (None, n) if n >= 0.5 => (None, n),
        _ => return out,
    };
    let victims = sigkilled(d, scope);
    let culprit = match (victims.as_slice(), scope) {
        ([(pid, comm)], _) => super::proc_culprit(d, *pid, comm, super::Res::Memory),
        (_, Some(cg)) => super::cgroup_culprit(d, cg),
        _ => Culprit::default(),
    };
    let mut f = finding(
        &RULE,
        d,
        format!(
            "{n:.0} OOM kill{} {}{}",
            if n >= 1.5 { "s" } else { "" },
            scope
                .map(|c| format!("at the memory limit of cgroup {c}"))
                .unwrap_or_else(|| "on the host".into()),
            match victims.as_slice() {
                [] => String::new(),
                v => format!(
                    "; killed by SIGKILL: {}",
                    v.iter()
                        .map(|(p, c)| format!("{c} ({p})"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        ),
        if victims.is_empty() {
            0.7
        } else {
            confidence(n, 0.0, 1.0).max(0.85)
        },
        culprit,
    );
    if let Some(c) = scope {
        cite_cgroup(&mut f, d, c);
        f.onset = d
            .get(&cgroup::MEMORY_OOM_KILL_PER_S, &[c])
            .and_then(|s| d.onset(s, 0.01));
    }
    if host.n > 0 {
        f.cite(
            d,
            &mem::RECLAIM_OOM_KILL_PER_S,
            &[],
            Take::Sum,
            "OOM kills on the host (vmstat oom_kill)",
        );
    }
    f.notes.push("the kernel's OOM report was not recorded (the recorder could not read /dev/kmsg, or the recording predates it): the victims are those seen ending by SIGKILL".into());
    remediation(&mut f, scope);
    out.push(f);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use jitterscope_sources::system::kmsg::OomKill;

    #[test]
    fn names_the_victim_and_the_limit_from_the_kernel_report() {
        let mut d = Data::seconds(10, 5);
        for i in 5..10 {
            d.push(&cgroup::MEMORY_LIMIT_BYTES, &["/app"], i, 256.0 * 1048576.0);
            d.push(
                &cgroup::MEMORY_OOM_KILL_PER_S,
                &["/app"],
                i,
                (i == 8) as u32 as f64,
            );
            d.push(
                &cgroup::MEMORY_OOM_KILL_PER_S,
                &["/"],
                i,
                (i == 8) as u32 as f64,
            );
        }
        d.oom_kills.push((
            8_000_000_000,
            OomKill {
                pid: 42,
                comm: "gunicorn".into(),
                constraint: Some("CONSTRAINT_MEMCG".into()),
                oom_memcg: Some("/app".into()),
                task_memcg: Some("/app".into()),
                anon_rss_bytes: Some(250 << 20),
                ..Default::default()
            },
        ));
        let f = run(&d);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].title
                .contains("gunicorn (42) at the memory limit of cgroup /app"),
            "{}",
            f[0].title
        );
        assert_eq!(f[0].culprit.cgroup.as_deref(), Some("/app"));
        assert_eq!(f[0].confidence, 0.95);
        assert!(f[0]
            .evidence
            .iter()
            .any(|e| e.signal == "cgroup./app.memory.limit_bytes"));
    }

    #[test]
    fn counters_alone_find_the_deepest_cgroup_and_the_sigkilled() {
        let mut d = Data::seconds(10, 5);
        for i in 5..10 {
            let k = (i == 7) as u32 as f64;
            d.push(&cgroup::MEMORY_OOM_KILL_PER_S, &["/a"], i, k);
            d.push(&cgroup::MEMORY_OOM_KILL_PER_S, &["/a/b"], i, k);
        }
        d.push(&process::PROC_EXITED, &["9", "leaky"], 8, 1.0);
        d.push(&process::PROC_EXIT_SIGNAL, &["9", "leaky"], 8, 9.0);
        d.procs.insert(
            9,
            crate::data::Proc {
                comm: "leaky".into(),
                memory_cgroup: Some("/a/b".into()),
                ..Default::default()
            },
        );
        let f = run(&d);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].title
                .starts_with("1 OOM kill at the memory limit of cgroup /a/b"),
            "{}",
            f[0].title
        );
        assert!(f[0].title.contains("leaky (9)"));
        assert_eq!(f[0].culprit.pid, Some(9));
        assert_eq!(f[0].culprit.cgroup.as_deref(), Some("/a/b"));
        // Nothing killed: nothing said.
        assert!(run(&Data::seconds(10, 5)).is_empty());
    }
}
