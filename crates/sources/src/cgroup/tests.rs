//! Reader tests on recorded trees: this host (hybrid), a pure v2 node and a v1-only host.

use std::path::Path;

use super::*;
use crate::fileio::Root;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");
const HEX: &str = "9f2c4b7e1a3d5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";
const POD_UID: &str = "3b1f6c2e-8a4d-4f0e-9c5b-7d2a1e6f4c38";

fn read(tree: &str) -> (Vec<Cgroup>, CgroupReader) {
    let mut r = CgroupReader::new(Root::new(format!("{FIXTURES}/{tree}"))).unwrap();
    let cgs = r.read();
    (cgs, r)
}

fn find<'a>(cgs: &'a [Cgroup], path: &str) -> &'a Cgroup {
    cgs.iter()
        .find(|c| c.path == path)
        .unwrap_or_else(|| panic!("no cgroup {path}"))
}

#[test]
fn host_hybrid() {
    let (cgs, r) = read("host");
    let versions: Vec<_> = r.hierarchies().map(|h| h.version).collect();
    assert_eq!(
        versions,
        [
            CgroupVersion::V1,
            CgroupVersion::V1,
            CgroupVersion::V1,
            CgroupVersion::V2
        ],
        "cpu, cpuacct, memory and unified; cpuset, pids, name=systemd... not walked"
    );
    let w = r.last_walk();
    assert_eq!(w.read_errors, 0, "{:?}", w.first_error);
    assert_eq!(w.cgroups, cgs.len());
    assert!(
        cgs.windows(2).all(|p| p[0].path < p[1].path),
        "sorted, unique"
    );

    let fx = find(&cgs, "/jitterscope-fixture");
    assert!(fx.v1 && fx.v2);
    let cpu = fx.cpu.as_ref().unwrap();
    assert_eq!((cpu.quota_us, cpu.period_us), (Some(20_000), Some(100_000)));
    assert_eq!(cpu.burst_us, Some(0));
    assert!(cpu.nr_throttled.unwrap() > 0);
    assert_eq!(cpu.nr_periods, Some(31));
    assert_eq!(cpu.throttled_ns, Some(2_429_017_994));
    assert_eq!(cpu.throttle_source, Some(CgroupVersion::V1));
    assert_eq!(cpu.shares, Some(1024));
    // v1 cpuacct wins over the unified hierarchy's usage_usec, which is still recorded apart.
    assert_eq!(cpu.usage_ns, Some(653_584_592));
    assert_eq!(cpu.usage_source, Some(CgroupVersion::V1));
    assert_eq!(cpu.user_ticks, Some(64));
    assert_eq!(cpu.user_usec, Some(801_556));
    let mem = fx.memory.as_ref().unwrap();
    assert_eq!(mem.limit_bytes, Some(256 << 20));
    assert_eq!(mem.usage_bytes, Some(0));
    assert_eq!(mem.failcnt, Some(0));
    assert_eq!(mem.stat("hierarchical_memory_limit"), Some(256 << 20));
    assert_eq!(mem.oom_kill, Some(0));
    assert_eq!(mem.under_oom, Some(false));
    assert!(mem.events.is_empty(), "memory.events is v2 only");
    let psi = fx.pressure.cpu.as_ref().unwrap();
    assert_eq!(psi.some.as_ref().unwrap().total_usec, 3_074_829);
    assert!(fx.pressure.memory.is_some() && fx.pressure.io.is_some());
    assert_eq!(
        fx.io, None,
        "the unified hierarchy has no io controller, blkio is not walked"
    );
    assert_eq!(fx.identity, Identity::default());

    let root = find(&cgs, "/");
    assert!(root.v1 && root.v2);
    let rc = root.cpu.as_ref().unwrap();
    assert_eq!(rc.quota_us, None, "-1 = unlimited");
    assert_eq!(rc.usage_ns, Some(205_225_555_317));
    assert_eq!(root.memory.as_ref().unwrap().limit_bytes, None);
    assert!(root.pressure.cpu.is_some());

    let papi: Vec<_> = cgs
        .iter()
        .filter(|c| c.path.starts_with("/process_api"))
        .collect();
    assert!(papi.len() >= 2, "/process_api and its child memcg");
    assert!(papi
        .iter()
        .all(|c| c.v1 && !c.v2 && c.memory.is_some() && c.cpu.is_none()));
    let leaf = find(&cgs, "/process_api/4e9f979501e142896e0ca4ffd4160131");
    assert!(leaf.memory.as_ref().unwrap().usage_bytes.is_some());
}

#[test]
fn v2_only_kubernetes_node() {
    let (cgs, r) = read("edge/cgroup-v2-only");
    let hs: Vec<_> = r.hierarchies().collect();
    assert_eq!(hs.len(), 1);
    assert_eq!(hs[0].controllers, ["cpu", "io", "memory", "pids"]);
    let w = r.last_walk();
    assert_eq!(w.read_errors, 0, "{:?}", w.first_error);
    assert_eq!((w.vanished, w.skipped_depth, w.skipped_limit), (0, 0, 0));
    assert_eq!(cgs.len(), 8);

    let path = format!(
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{HEX}.scope",
        POD_UID.replace('-', "_")
    );
    let c = find(&cgs, &path);
    assert!(c.v2 && !c.v1);
    let cpu = c.cpu.as_ref().unwrap();
    assert_eq!((cpu.quota_us, cpu.period_us), (Some(20_000), Some(100_000)));
    assert_eq!(cpu.burst_us, Some(0));
    assert_eq!((cpu.nr_periods, cpu.nr_throttled), (Some(5123), Some(4102)));
    assert_eq!(cpu.throttled_ns, Some(318_765_432_000));
    assert_eq!((cpu.nr_bursts, cpu.burst_ns), (Some(37), Some(412_345_000)));
    assert_eq!(cpu.throttle_source, Some(CgroupVersion::V2));
    assert_eq!(cpu.usage_ns, Some(29_876_543_000));
    assert_eq!(cpu.usage_source, Some(CgroupVersion::V2));
    assert_eq!(
        (cpu.user_usec, cpu.system_usec),
        (Some(24_876_543), Some(5_000_000))
    );
    assert_eq!(
        (cpu.weight, cpu.shares, cpu.user_ticks),
        (Some(20), None, None)
    );
    let mem = c.memory.as_ref().unwrap();
    assert_eq!(mem.usage_bytes, Some(268_000_000));
    assert_eq!(mem.limit_bytes, Some(256 << 20));
    assert_eq!(mem.high_bytes, Some(240 << 20));
    assert_eq!((mem.low_bytes, mem.min_bytes), (Some(0), Some(0)));
    assert_eq!(mem.swap_bytes, Some(0));
    assert_eq!(mem.event("oom_kill"), Some(2));
    assert_eq!(mem.events.len(), 6);
    assert_eq!(mem.stat[0].0, "anon");
    assert_eq!(mem.stat("pgscan_direct"), Some(1024));
    assert_eq!(
        (mem.failcnt, mem.oom_kill, mem.under_oom),
        (None, None, None)
    );
    assert_eq!(c.pids_current, Some(13));
    let psi = c.pressure.cpu.as_ref().unwrap();
    assert_eq!(psi.some.as_ref().unwrap().avg10, 41.77);
    assert!(c.pressure.memory.is_some() && c.pressure.io.is_some());
    assert_eq!(c.identity.runtime, Runtime::Containerd);
    assert_eq!(c.identity.container_id.as_deref(), Some(HEX));
    assert_eq!(c.identity.pod_uid.as_deref(), Some(POD_UID));
    assert_eq!(c.identity.qos, Some(QosClass::Burstable));
    let io = c.io.as_ref().unwrap();
    assert_eq!(
        (io.read_bytes, io.write_bytes, io.read_ios, io.write_ios),
        (1 << 20, 50 << 20, 64, 800)
    );
    assert_eq!(
        (io.discard_bytes, io.discard_ios, io.devices),
        (Some(0), Some(0), 1)
    );
    let pause = find(
        &cgs,
        &path.replace(
            HEX,
            "8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706f5d3a1e7b4c2f9",
        ),
    );
    assert_eq!(
        pause.io,
        Some(IoStats::default()),
        "an empty io.stat is no I/O yet, not unknown"
    );

    let root = find(&cgs, "/");
    let rc = root.cpu.as_ref().unwrap();
    assert_eq!((rc.quota_us, rc.period_us, rc.weight), (None, None, None));
    assert!(rc.usage_ns.is_some());
    let rm = root.memory.as_ref().unwrap();
    assert_eq!(
        (rm.usage_bytes, rm.limit_bytes),
        (None, None),
        "no memory.current at root"
    );
    assert!(rm.stat("anon").is_some());
    assert_eq!(root.pids_current, None);
    let rio = root.io.as_ref().unwrap();
    assert_eq!(
        (rio.devices, rio.discard_bytes, rio.discard_ios),
        (2, Some(4096), Some(1))
    );
    assert_eq!(rio.read_ios, 15_192);
    assert!(r.plans_v2_io_root());

    let unlimited = find(&cgs, "/kubepods.slice/kubepods-burstable.slice");
    assert_eq!(unlimited.cpu.as_ref().unwrap().quota_us, None);
    assert_eq!(unlimited.cpu.as_ref().unwrap().period_us, Some(100_000));
    assert_eq!(unlimited.memory.as_ref().unwrap().limit_bytes, None);
    assert_eq!(unlimited.identity.qos, Some(QosClass::Burstable));

    // system.slice enables only memory and pids below it.
    let nginx = find(&cgs, "/system.slice/nginx.service");
    let nc = nginx.cpu.as_ref().unwrap();
    assert_eq!((nc.period_us, nc.weight, nc.nr_periods), (None, None, None));
    assert_eq!(nc.usage_ns, Some(2_500_000_000));
    assert_eq!(nginx.memory.as_ref().unwrap().limit_bytes, Some(100 << 20));
    assert_eq!(nginx.memory.as_ref().unwrap().event("max"), Some(3));
    assert_eq!(nginx.io, None, "system.slice does not enable io below it");
    let sys = find(&cgs, "/system.slice").io.as_ref().unwrap();
    assert_eq!((sys.devices, sys.read_bytes), (2, 734_003_200 + 1_459_200));
    assert_eq!(nginx.identity.runtime, Runtime::Systemd);
    assert_eq!(
        nginx.identity.systemd_unit.as_deref(),
        Some("nginx.service")
    );
}

#[test]
fn v1_only_docker_host() {
    let (cgs, r) = read("edge/cgroup-v1-only");
    let hs: Vec<_> = r.hierarchies().collect();
    assert_eq!(
        hs.len(),
        2,
        "cpu,cpuacct and memory; pids and systemd not walked"
    );
    assert_eq!(hs[0].controllers, ["cpuacct", "cpu"]);
    assert!(hs.iter().all(|h| h.version == CgroupVersion::V1));
    let w = r.last_walk();
    assert_eq!(w.read_errors, 0, "{:?}", w.first_error);
    assert_eq!(cgs.len(), 5);

    let c = find(&cgs, &format!("/docker/{HEX}"));
    assert!(c.v1 && !c.v2);
    let cpu = c.cpu.as_ref().unwrap();
    assert_eq!((cpu.quota_us, cpu.period_us), (Some(50_000), Some(100_000)));
    assert_eq!(cpu.burst_us, None, "no cpu.cfs_burst_us before 5.14");
    assert_eq!(
        (cpu.nr_periods, cpu.nr_throttled),
        (Some(120_345), Some(31_012))
    );
    assert_eq!(cpu.throttled_ns, Some(4_123_456_789_012));
    assert_eq!((cpu.nr_bursts, cpu.burst_ns), (None, None));
    assert_eq!(cpu.shares, Some(512));
    assert_eq!(cpu.usage_ns, Some(3_456_789_012_345));
    assert_eq!(
        (cpu.user_ticks, cpu.system_ticks),
        (Some(290_000), Some(55_000))
    );
    assert_eq!(cpu.user_usec, None);
    let mem = c.memory.as_ref().unwrap();
    assert_eq!(mem.limit_bytes, Some(512 << 20));
    assert_eq!(mem.failcnt, Some(17));
    assert_eq!(mem.stat("total_rss"), Some(430_000_000));
    assert_eq!((mem.oom_kill, mem.under_oom), (None, Some(false)));
    assert_eq!(c.pressure, CgroupPressure::default());
    assert_eq!(c.pids_current, None);
    assert_eq!(c.io, None, "v1 blkio is not walked");
    assert_eq!(c.identity.runtime, Runtime::Docker);
    assert_eq!(c.identity.short_id(), Some(&HEX[..12]));

    assert_eq!(
        find(&cgs, "/docker").memory.as_ref().unwrap().limit_bytes,
        None
    );
    assert!(find(&cgs, "/").v1);

    let buf = std::fs::read(format!("{FIXTURES}/edge/cgroup-v1-only/proc/self/cgroup")).unwrap();
    let p = parse_proc_pid_cgroup(&buf).unwrap();
    assert_eq!(p.cpu_cgroup(), Some(c.path.as_str()));
    assert_eq!(p.memory_cgroup(), Some(c.path.as_str()));
}

fn write(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

/// A v2 tree built in a temp dir: one cgroup removed mid-walk (its directory is still listed
/// but has no files), one missing some files, one with an unreadable (garbled) file.
fn scratch_tree() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    write(
        r,
        "proc/self/mountinfo",
        "24 23 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n",
    );
    let cg = "sys/fs/cgroup";
    write(r, &format!("{cg}/cgroup.controllers"), "cpu memory\n");
    write(r, &format!("{cg}/cgroup.subtree_control"), "cpu memory\n");
    write(r, &format!("{cg}/cpu.stat"), "usage_usec 10\n");
    std::fs::create_dir_all(r.join(format!("{cg}/gone"))).unwrap();
    write(r, &format!("{cg}/partial/cpu.stat"), "usage_usec 7\n");
    write(r, &format!("{cg}/partial/memory.current"), "4096\n");
    write(r, &format!("{cg}/garbled/cpu.stat"), "usage_usec 5\n");
    write(r, &format!("{cg}/garbled/cpu.max"), "lots 100000\n");
    write(r, &format!("{cg}/garbled/memory.current"), "1\n");
    for d in 0..7 {
        let deep = "/d".repeat(d);
        write(r, &format!("{cg}/deep{deep}/cpu.stat"), "usage_usec 1\n");
    }
    t
}

#[test]
fn vanished_and_partial_cgroups_are_skipped_not_fatal() {
    let t = scratch_tree();
    let mut r = CgroupReader::new(Root::new(t.path())).unwrap();
    let cgs = r.read();
    assert!(cgs.iter().all(|c| c.path != "/gone"));
    let p = find(&cgs, "/partial");
    assert_eq!(p.cpu.as_ref().unwrap().usage_ns, Some(7000));
    assert_eq!(p.cpu.as_ref().unwrap().quota_us, None);
    let m = p.memory.as_ref().unwrap();
    assert_eq!((m.usage_bytes, m.limit_bytes), (Some(4096), None));
    assert_eq!(p.pressure, CgroupPressure::default());
    let g = find(&cgs, "/garbled");
    assert_eq!(g.cpu.as_ref().unwrap().usage_ns, Some(5000));
    assert_eq!(g.memory.as_ref().unwrap().usage_bytes, Some(1));
    let w = r.last_walk();
    assert_eq!(w.vanished, 1);
    assert_eq!(w.read_errors, 1);
    assert!(w
        .first_error
        .as_ref()
        .unwrap()
        .path()
        .ends_with("garbled/cpu.max"));
    assert!(find(&cgs, "/deep/d/d/d/d/d/d").cpu.is_some());
    // Absent next to a present memory.current: not tried again on later walks.
    assert!(!r.plans_v2_swap());
    assert_eq!(
        r.read().len(),
        cgs.len(),
        "a second walk sees the same tree"
    );
}

/// io.stat is read where the parent enables `io`; the root's, absent on kernels before 5.x,
/// is tried once; a garbled one is an error of that file only; one missing below the root
/// (removed mid-walk) does not stop the others being read.
#[test]
fn io_stat_where_enabled_root_probed_once() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    write(
        r,
        "proc/self/mountinfo",
        "24 23 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n",
    );
    let cg = "sys/fs/cgroup";
    write(r, &format!("{cg}/cgroup.controllers"), "cpu io memory\n");
    write(r, &format!("{cg}/cgroup.subtree_control"), "io memory\n");
    write(r, &format!("{cg}/cpu.stat"), "usage_usec 10\n");
    write(r, &format!("{cg}/a/cpu.stat"), "usage_usec 7\n");
    write(
        r,
        &format!("{cg}/a/io.stat"),
        "8:16 rbytes=1459200 wbytes=314773504 rios=192 wios=353 dbytes=0 dios=0\n\
         254:0 rbytes=90112 wbytes=0 rios=22 wios=0 dbytes=0 dios=0\n",
    );
    write(r, &format!("{cg}/a/cgroup.subtree_control"), "memory\n");
    write(r, &format!("{cg}/a/noio/cpu.stat"), "usage_usec 1\n");
    write(r, &format!("{cg}/a/noio/io.stat"), "8:0 rbytes=1\n");
    write(r, &format!("{cg}/b/cpu.stat"), "usage_usec 1\n");
    write(r, &format!("{cg}/garbled/cpu.stat"), "usage_usec 1\n");
    write(r, &format!("{cg}/garbled/io.stat"), "sda rbytes=1\n");
    let mut rd = CgroupReader::new(Root::new(r)).unwrap();
    let cgs = rd.read();
    assert_eq!(find(&cgs, "/").io, None);
    assert!(!rd.plans_v2_io_root(), "the root's absence is remembered");
    let a = find(&cgs, "/a").io.as_ref().unwrap();
    assert_eq!(
        (
            a.read_bytes,
            a.write_bytes,
            a.read_ios,
            a.write_ios,
            a.devices
        ),
        (1_549_312, 314_773_504, 214, 353, 2)
    );
    assert_eq!(
        find(&cgs, "/a/noio").io,
        None,
        "/a does not enable io: its file is not read"
    );
    assert_eq!(find(&cgs, "/b").io, None);
    assert_eq!(find(&cgs, "/garbled").io, None);
    assert_eq!(rd.last_walk().read_errors, 1);

    // The root's file appearing later is not looked for; /b's is read as soon as it exists.
    write(r, &format!("{cg}/io.stat"), "8:0 rbytes=5\n");
    write(r, &format!("{cg}/b/io.stat"), "");
    let cgs = rd.read();
    assert_eq!(find(&cgs, "/").io, None);
    assert_eq!(find(&cgs, "/b").io, Some(IoStats::default()));
    assert!(find(&cgs, "/a").io.is_some());
}

#[test]
fn walk_bounds_are_counted() {
    let t = scratch_tree();
    let cfg = CgroupReaderConfig {
        max_depth: 3,
        max_cgroups: 100,
        ..CgroupReaderConfig::default()
    };
    let mut r = CgroupReader::with_config(Root::new(t.path()), cfg).unwrap();
    let cgs = r.read();
    assert!(cgs.iter().any(|c| c.path == "/deep/d/d"));
    assert!(cgs.iter().all(|c| c.path != "/deep/d/d/d"));
    assert_eq!(r.last_walk().skipped_depth, 1);

    let cfg = CgroupReaderConfig {
        max_depth: 32,
        max_cgroups: 3,
        ..CgroupReaderConfig::default()
    };
    let mut r = CgroupReader::with_config(Root::new(t.path()), cfg).unwrap();
    let cgs = r.read();
    assert_eq!(r.last_walk().dirs_read, 3);
    assert!(cgs.len() <= 3);
    assert!(r.last_walk().skipped_limit > 0);
}

#[test]
fn missing_mountinfo_is_an_error_at_construction() {
    let t = tempfile::tempdir().unwrap();
    let e = CgroupReader::new(Root::new(t.path())).unwrap_err();
    assert!(e.is_missing());
}

/// The walk on the live host's real cgroupfs (v1 and v2 on this kind of machine) reads every
/// file it tries without an error.
#[test]
fn live_host_walk_reads_without_errors() {
    let mut r = match CgroupReader::new(Root::default()) {
        Ok(r) if r.hierarchies().next().is_some() => r,
        _ => {
            return jitterscope_testkit::skip(
                "live_host_walk_reads_without_errors",
                "no cgroup hierarchy mounted",
            )
        }
    };
    let cgs = r.read();
    let again = r.read();
    let w = r.last_walk();
    assert!(cgs.iter().any(|c| c.path == "/"));
    assert_eq!(w.read_errors, 0, "{:?}", w.first_error);
    assert!(!again.is_empty());
}

/// The recorder in a Kubernetes-style pod, captured in tests/vm/image.sh's guest
/// (`JSVM_CAPTURE_FIXTURES=1`): its mountinfo and the `/proc/<pid>/cgroup` of itself and of
/// a container on the host, as read from inside its cgroup namespace and from the host's. The
/// host's tree is rebuilt as far as the search needs it: the recorder's cgroup listing its pid.
/// The paths read inside must come out as the host's.
#[test]
fn pod_cgroup_namespace_paths_come_out_as_the_hosts() {
    let fx = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/containers/pod"
    ));
    let read = |f: &str| std::fs::read(fx.join(f)).unwrap();
    let v2 = |f: &str| {
        parse_proc_pid_cgroup(&read(f))
            .unwrap()
            .v2
            .unwrap()
            .to_string()
    };
    let mut h = parse_mountinfo(&read("mountinfo"))
        .unwrap()
        .into_iter()
        .find(|h| h.version == CgroupVersion::V2)
        .unwrap();
    assert_eq!(h.mount_point, Path::new("/sys/fs/cgroup"));
    assert!(h.mount_root.starts_with("/.."), "{}", h.mount_root);
    let pid: u32 = String::from_utf8(read("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let own_host = v2("self_cgroup_host");
    let t = tempfile::tempdir().unwrap();
    let dir = t
        .path()
        .join("sys/fs/cgroup")
        .join(own_host.trim_start_matches('/'));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("cgroup.procs"), format!("{pid}\n")).unwrap();
    let workload = t
        .path()
        .join("sys/fs/cgroup")
        .join(v2("workload_cgroup_host").trim_start_matches('/'));
    std::fs::create_dir_all(&workload).unwrap();
    std::fs::write(workload.join("cgroup.procs"), "1\n").unwrap();

    place_ns_root(&Root::new(t.path()), &mut h, &read("self_cgroup"), pid);
    let ns_root = own_host
        .strip_suffix(&v2("self_cgroup"))
        .unwrap_or(&own_host);
    assert_eq!(h.ns_root.as_deref(), Some(ns_root));
    assert_eq!(h.mount_root, "/");
    let ns = CgroupNs::of(std::slice::from_ref(&h));
    let workload_inside = read("workload_cgroup");
    let inside = parse_proc_pid_cgroup(&workload_inside).unwrap();
    assert!(inside.v2.unwrap().starts_with("/.."), "{:?}", inside.v2);
    assert_eq!(ns.resolve(&inside).v2.unwrap(), v2("workload_cgroup_host"));
    let self_inside = read("self_cgroup");
    let own = parse_proc_pid_cgroup(&self_inside).unwrap();
    assert_eq!(ns.resolve(&own).v2.unwrap(), own_host);
}

/// A cgroup's files as a v1 (cpu and memory hierarchies) or v2 tree has them, with a CFS quota
/// and a memory limit, and a usage counter.
fn write_cgroup(r: &Path, v1: bool, rel: &str, quota_us: u64, limit: u64, usage_ns: u64) {
    if v1 {
        let (cpu, mem) = (
            format!("sys/fs/cgroup/cpu{rel}"),
            format!("sys/fs/cgroup/memory{rel}"),
        );
        write(
            r,
            &format!("{cpu}/cpu.stat"),
            "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n",
        );
        write(
            r,
            &format!("{cpu}/cpu.cfs_quota_us"),
            &format!("{quota_us}\n"),
        );
        write(r, &format!("{cpu}/cpu.cfs_period_us"), "100000\n");
        write(r, &format!("{cpu}/cpu.shares"), "1024\n");
        write(r, &format!("{cpu}/cpuacct.usage"), &format!("{usage_ns}\n"));
        write(r, &format!("{mem}/memory.usage_in_bytes"), "4096\n");
        write(
            r,
            &format!("{mem}/memory.limit_in_bytes"),
            &format!("{limit}\n"),
        );
    } else {
        let d = format!("sys/fs/cgroup{rel}");
        let usec = usage_ns / 1000;
        write(r, &format!("{d}/cpu.stat"), &format!("usage_usec {usec}\n"));
        write(r, &format!("{d}/cpu.max"), &format!("{quota_us} 100000\n"));
        write(r, &format!("{d}/cpu.weight"), "100\n");
        write(r, &format!("{d}/memory.current"), "4096\n");
        write(r, &format!("{d}/memory.max"), &format!("{limit}\n"));
        write(r, &format!("{d}/memory.high"), "max\n");
    }
}

fn settings_tree(v1: bool) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    let mountinfo = if v1 {
        "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu,cpuacct\n\
         35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    } else {
        "24 23 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n"
    };
    write(r, "proc/self/mountinfo", mountinfo);
    if v1 {
        write(r, "sys/fs/cgroup/cpu/cpuacct.usage", "10\n");
        write(r, "sys/fs/cgroup/memory/memory.usage_in_bytes", "4096\n");
    } else {
        write(r, "sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
        write(r, "sys/fs/cgroup/cgroup.subtree_control", "cpu memory\n");
        write(r, "sys/fs/cgroup/cpu.stat", "usage_usec 10\n");
    }
    for i in 0..8 {
        write_cgroup(r, v1, &format!("/other{i}"), 50_000, 1 << 30, 0);
    }
    write_cgroup(r, v1, "/svc", 20_000, 1 << 20, 0);
    t
}

/// Settings are read every `settings_period` and carried in between, while counters are read
/// every walk; a cgroup seen for the first time, or created again at its path, has its
/// settings read at once (and every walk for a period, for the runtime that writes its limits
/// after creating it); a host's cgroups do not all come due at the same walk.
#[test]
fn settings_are_read_at_their_own_period_and_new_cgroups_at_once() {
    const S: u64 = 1_000_000_000;
    for v1 in [true, false] {
        let t = settings_tree(v1);
        let r = t.path();
        let cfg = CgroupReaderConfig {
            settings_period: std::time::Duration::from_secs(10),
            ..CgroupReaderConfig::default()
        };
        let mut reader = CgroupReader::with_config(Root::new(r), cfg).unwrap();
        let dirs = |reader: &CgroupReader| reader.last_walk().dirs_read;
        let quota = |cgs: &[Cgroup], p: &str| find(cgs, p).cpu.as_ref().unwrap().quota_us;
        let limit = |cgs: &[Cgroup], p: &str| find(cgs, p).memory.as_ref().unwrap().limit_bytes;
        let usage = |cgs: &[Cgroup], p: &str| find(cgs, p).cpu.as_ref().unwrap().usage_ns;

        let mut steady_reads = Vec::new();
        let mut changed_seen_at = None;
        for sec in 0..40u64 {
            // Wake-ups a little early or late must not shift the cadence.
            let now = 100 * S + sec * S - if sec % 2 == 0 { 3_000_000 } else { 0 };
            if sec == 25 {
                write_cgroup(r, v1, "/svc", 30_000, 2 << 20, sec * 1000);
            } else {
                write_cgroup(
                    r,
                    v1,
                    "/svc",
                    if changed_seen_at.is_some() || sec > 25 {
                        30_000
                    } else {
                        20_000
                    },
                    if sec > 25 { 2 << 20 } else { 1 << 20 },
                    sec * 1000,
                );
            }
            let cgs = reader.read_at(now, S / 2);
            assert_eq!(usage(&cgs, "/svc"), Some(sec * 1000), "counters every walk");
            let read = reader.last_walk().settings_read;
            if sec < 10 {
                assert_eq!(read, dirs(&reader), "young cgroups are read every walk");
                assert_eq!(quota(&cgs, "/svc"), Some(20_000));
            }
            if (20..40).contains(&sec) {
                steady_reads.push(read);
            }
            if sec >= 25 && changed_seen_at.is_none() {
                if quota(&cgs, "/svc") == Some(30_000) {
                    assert_eq!(
                        limit(&cgs, "/svc"),
                        Some(2 << 20),
                        "one cgroup's settings together"
                    );
                    changed_seen_at = Some(sec);
                } else {
                    assert_eq!(
                        limit(&cgs, "/svc"),
                        Some(1 << 20),
                        "carried until read again"
                    );
                }
            }
        }
        let n = dirs(&reader);
        let seen = changed_seen_at.expect("the new quota appears");
        assert!(
            (25..=35).contains(&seen),
            "within a period of the change: {seen}"
        );
        assert_eq!(
            steady_reads.iter().sum::<usize>(),
            2 * n,
            "each cgroup twice in 20 s: {steady_reads:?}"
        );
        assert!(
            steady_reads.iter().all(|&k| k < n),
            "spread over the period: {steady_reads:?}"
        );

        // Not due now: a changed quota stays the one held...
        write_cgroup(r, v1, "/svc", 35_000, 2 << 20, 40_000);
        let cgs = reader.read_at(139 * S + 700_000_000, S / 2);
        assert_eq!(quota(&cgs, "/svc"), Some(30_000), "not due");
        // ...until the memory usage is over the limit held (2 MiB), which only a raised limit
        // explains: then the settings are read again at once.
        write_cgroup(r, v1, "/svc", 35_000, 8 << 20, 41_000);
        let usage_file = match v1 {
            true => "sys/fs/cgroup/memory/svc/memory.usage_in_bytes",
            false => "sys/fs/cgroup/svc/memory.current",
        };
        write(r, usage_file, &format!("{}\n", 3 << 20));
        let cgs = reader.read_at(139 * S + 800_000_000, S / 2);
        assert_eq!(
            limit(&cgs, "/svc"),
            Some(8 << 20),
            "usage over the limit held"
        );
        // The directory's settings are read together; v1's cpu hierarchy is another directory.
        let q = if v1 { 30_000 } else { 35_000 };
        assert_eq!(quota(&cgs, "/svc"), Some(q));

        // A new cgroup, and one created again at its path with other limits: read at once.
        let svc_dirs: Vec<_> = if v1 {
            vec!["sys/fs/cgroup/cpu/svc", "sys/fs/cgroup/memory/svc"]
        } else {
            vec!["sys/fs/cgroup/svc"]
        };
        for d in &svc_dirs {
            // Renamed away before the new one exists, so the two cannot share an inode.
            std::fs::rename(r.join(d), r.join(format!("{d}.old"))).unwrap();
        }
        write_cgroup(r, v1, "/svc", 70_000, 7 << 20, 1);
        for d in &svc_dirs {
            std::fs::remove_dir_all(r.join(format!("{d}.old"))).unwrap();
        }
        write_cgroup(r, v1, "/fresh", 40_000, 4 << 20, 1);
        let now = 140 * S;
        let cgs = reader.read_at(now, S / 2);
        assert_eq!(
            quota(&cgs, "/svc"),
            Some(70_000),
            "created again: read at once"
        );
        assert_eq!(limit(&cgs, "/svc"), Some(7 << 20));
        assert_eq!(quota(&cgs, "/fresh"), Some(40_000), "new: read at once");
        // The runtime writes the limits after creating the directory.
        write_cgroup(r, v1, "/fresh", 45_000, 5 << 20, 2);
        let cgs = reader.read_at(now + S, S / 2);
        assert_eq!(
            quota(&cgs, "/fresh"),
            Some(45_000),
            "young: read every walk"
        );
        assert_eq!(limit(&cgs, "/fresh"), Some(5 << 20));
        assert!(reader.last_walk().read_errors == 0);
    }
}

/// Removes the directories it holds, deepest first, whatever the test did.
struct RmDirs(Vec<std::path::PathBuf>);

impl Drop for RmDirs {
    fn drop(&mut self) {
        for d in self.0.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// On the host's own cgroupfs: a nested cgroup is found below a parent that a link count says
/// has children (leaves are not listed, so a wrong count would hide it), and a cgroup removed
/// and created again at its path with another quota is read at once, not a settings period
/// later (kernfs gives the new directory a new inode number).
#[test]
fn live_nested_and_recreated_cgroups_are_read() {
    const NAME: &str = "live_nested_and_recreated_cgroups_are_read";
    if !jitterscope_testkit::is_root() {
        return jitterscope_testkit::skip(NAME, "creating cgroups needs root");
    }
    let probe = CgroupReader::new(Root::default());
    // A hierarchy where cpu.cfs_quota_us (v1) or cpu.max (v2, cpu enabled for the root's
    // children) exists below the root.
    let found = probe.ok().and_then(|r| {
        r.hierarchies().find_map(|h| {
            let dir = std::path::PathBuf::from(&h.mount_point);
            let quota_file = match h.version {
                CgroupVersion::V1 if h.controllers.iter().any(|c| c == "cpu") => "cpu.cfs_quota_us",
                CgroupVersion::V2
                    if std::fs::read_to_string(dir.join("cgroup.subtree_control"))
                        .is_ok_and(|s| s.split_whitespace().any(|c| c == "cpu")) =>
                {
                    "cpu.max"
                }
                _ => return None,
            };
            Some((dir, quota_file, h.version))
        })
    });
    let Some((mount, quota_file, version)) = found else {
        return jitterscope_testkit::skip(NAME, "no cgroup hierarchy with the cpu controller");
    };
    let top = format!("jitterscope-test-{}", std::process::id());
    let (a, b) = (mount.join(&top).join("a"), mount.join(&top).join("a/b"));
    let mut dirs = RmDirs(Vec::new());
    for d in [mount.join(&top), a.clone(), b.clone()] {
        if let Err(e) = std::fs::create_dir(&d) {
            // cgroupfs mounted read-only (a container) or delegated elsewhere.
            return jitterscope_testkit::skip(NAME, &format!("cannot create {}: {e}", d.display()));
        }
        if version == CgroupVersion::V2 && d != b {
            // cpu.max exists below a cgroup only where it enables cpu for its children.
            std::fs::write(d.join("cgroup.subtree_control"), "+cpu").unwrap();
        }
        dirs.0.push(d);
    }
    let set_quota = |us: u64| {
        let v = match version {
            CgroupVersion::V1 => us.to_string(),
            CgroupVersion::V2 => format!("{us} 100000"),
        };
        std::fs::write(b.join(quota_file), v).unwrap();
    };
    set_quota(20_000);
    let cfg = CgroupReaderConfig {
        settings_period: std::time::Duration::from_secs(10),
        ..CgroupReaderConfig::default()
    };
    let mut r = CgroupReader::with_config(Root::default(), cfg).unwrap();
    let path = format!("/{top}/a/b");
    let quota = |cgs: &[Cgroup]| {
        cgs.iter()
            .find(|c| c.path == path)
            .map(|c| c.cpu.as_ref().and_then(|c| c.quota_us))
    };
    const S: u64 = 1_000_000_000;
    let cgs = r.read_at(100 * S, S / 2);
    assert_eq!(
        quota(&cgs),
        Some(Some(20_000)),
        "the nested cgroup is found"
    );
    // Past its first period, so only a new directory explains a read at once.
    let cgs = r.read_at(120 * S, S / 2);
    assert_eq!(quota(&cgs), Some(Some(20_000)));
    std::fs::remove_dir(&b).unwrap();
    std::fs::create_dir(&b).unwrap();
    set_quota(30_000);
    let cgs = r.read_at(121 * S, S / 2);
    assert_eq!(
        quota(&cgs),
        Some(Some(30_000)),
        "created again: read at once"
    );
    assert_eq!(
        r.last_walk().read_errors,
        0,
        "{:?}",
        r.last_walk().first_error
    );
}

#[test]
fn known_keys_are_sorted_and_shared() {
    // binary_search needs them sorted; a duplicate would mean a bad merge of the table.
    assert!(KNOWN_KEYS.windows(2).all(|w| w[0] < w[1]));
    assert!(matches!(
        stat_key("workingset_refault_file"),
        std::borrow::Cow::Borrowed(_)
    ));
    // A key this build does not know (a newer kernel's) is kept as it is.
    assert_eq!(stat_key("pgfoo_new"), "pgfoo_new");
}

#[test]
fn every_recorded_memory_stat_key_is_known() {
    // The fixtures are this machine's and the VM guests' files: a key missing from the table
    // still works, but costs an allocation in every record read back.
    let mut missing = std::collections::BTreeSet::new();
    let mut seen = 0;
    for tree in ["host", "edge/cgroup-v1-only", "edge/cgroup-v2-only"] {
        let (cgs, _) = read(tree);
        for c in &cgs {
            for (k, _) in c.memory.iter().flat_map(|m| m.stat.iter().chain(&m.events)) {
                seen += 1;
                if matches!(k, std::borrow::Cow::Owned(_)) {
                    missing.insert(k.to_string());
                }
            }
        }
    }
    assert!(seen > 100, "{seen} keys read");
    assert!(missing.is_empty(), "add to KNOWN_KEYS: {missing:?}");
}

#[test]
fn keyed_files_read_back_as_written() {
    let m = MemoryStats {
        stat: vec![("anon".into(), 1), ("pgfoo_new".into(), 2)],
        events: vec![("oom_kill".into(), 3)],
        ..Default::default()
    };
    let b = rmp_serde::to_vec_named(&m).unwrap();
    let back: MemoryStats = rmp_serde::from_slice(&b).unwrap();
    assert_eq!(back, m);
    assert!(matches!(back.stat[0].0, std::borrow::Cow::Borrowed(_)));
    let j: MemoryStats = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
    assert_eq!(j, m);
}
