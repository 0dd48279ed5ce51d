#!/usr/bin/env python3
"""The kernel matrix's checks, run inside the guest (under tini, as PID 1's child).

Sets up the cgroup layout the host asked for, then measures what jitterscope can do on this
kernel: each tracer (`tracers --check`), each collector and cgroup file (a short `record` while
a probe cgroup is throttled, over its memory.high and writing), the profiler, every lab scenario
(`lab check`, which records and diagnoses), and recording without BTF. Every capability gets a
cell: works, degraded (with jitterscope's own reason) or absent (with the kernel's reason, found
here, e.g. a file that does not exist). Results go to /mnt/out/result.json; the host compares
them with tests/vm/expect.json and writes docs/KERNELS.md.

Nothing here decides what *should* work: the host's expectations do. This only observes.
"""
import json
import os
import subprocess
import sys
import time
import traceback

IN = "/mnt/in"
OUT = "/mnt/out"
JS = "/usr/local/bin/jitterscope"
CG = "/sys/fs/cgroup"
PROBE = "jsvm-probe"
CONFIG = json.load(open(f"{IN}/config.json"))
LAYOUT = CONFIG["layout"]

# Low intensity, fitted to a 2 GiB, 2-vCPU guest under TCG (several times slower than the host):
# long enough for each signature, short enough for CI. The v1 layout runs the scenarios whose
# mechanism goes through the cgroup layout (CPU quota, memory limit, OOM, page cache under a
# limit) and the shootdown one; the rest are layout-blind and run once per kernel, on v2.
# python-leak, oom-leak and nss-probe are not run (empty layouts): their signatures are rates
# that the emulated CPUs do not reach (docs/KERNELS.md says what was measured).
SCENARIOS = {
    # name: (duration, layouts[, kernels]); a duration of None runs the scenario's default (what
    # a user gets, `lab list`), kernels limits it to those guests (all when absent).
    "cfs-throttle": (None, ("v2", "v1")),
    # On v2 only: memcg-thrash's stalls at its cgroup's limit, chained under the thrash (or
    # first, on 5.10), cover memory-cgroup reclaim on v1 on every kernel.
    "reclaim-storm": (None, ("v2",)),
    # Run in a boot of its own with multi-threaded TCG (run.sh's "-ipi" cell): under one host
    # thread every synchronous shootdown IPI waits for the other vCPU's time slice, and the
    # storm never reaches case 4's rates.
    "tlb-shootdown": (None, ()),
    # Under TCG the first 200,000 look-ups take 11 s or more, so the first burst (and its
    # reclaim) came at 13-17 s of a 20 s run and sometimes after it: CI failed on 6.1 and 6.12.
    # 40 s holds two cycles (the default, 30 s, is for a host that is not emulated).
    "negative-dentry": ("40s", ("v2",)),
    "shrinker-scale": (None, ("v2",)),
    # On 5.10's v2 only: memcg-thrash covers the page cache under a limit on both layouts and
    # every kernel; what this one adds, the major faults of a mapped working set (a process's
    # majflt, vmstat's pgmajfault), reads the same on all three.
    "pagecache-thrash": (None, ("v2",), ("5.10",)),
    "memcg-thrash": (None, ("v2", "v1")),
    # What the leak rule reads (RSS, smaps, the process's end) does not change between these
    # kernels; the oldest is checked here, the host's in lab_e2e (beside the soak load).
    "native-leak": (None, ("v2",), ("5.10",)),
    "python-leak": (None, ()),
    "oom-leak": (None, ()),
    "worker-leak": (None, ("v2",), ("5.10",)),
    "nss-probe": (None, ()),
    # Loopback's receive half runs on the sending CPU the same way on every kernel; layout-blind.
    # memory.high is cgroup v2's; on v1 (and 6.12's memory on cgroup2 beside v1 cpu) the v2
    # layout covers it.
    "memory-high": (None, ("v2",)),
    "softirq-storm": (None, ("v2",)),
    # Run with a swap file the guest adds for it (with_swap): the host's lab never turns swap on.
    "swap-in": (None, ("v2",)),
    # The mmaplock tracer needs lock:contention_begin (5.19+): 5.10's tracer cell says so.
    "mmap-lock": (None, ("v2",), ("6.1", "6.12")),
    # Per-cgroup dirty limits are cgroup v2's writeback: v2 only.
    "dirty-throttle": (None, ("v2",)),
}


def scheduled(name):
    """Whether this guest runs the scenario by default."""
    spec = SCENARIOS[name]
    kernels = spec[2] if len(spec) > 2 else None
    return LAYOUT in spec[1] and (kernels is None or CONFIG.get("kernel") in kernels)


cells = {}
facts = {}
log_lines = []


def say(msg):
    line = f"JSVM: {msg}"
    log_lines.append(line)
    print(line, flush=True)


def cell(key, status, detail="", **extra):
    """status: works | degraded | absent | failed."""
    cells[key] = {"status": status, "detail": detail, **extra}
    say(f"{key}: {status}{': ' + detail if detail else ''}")


def sh(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def mount(fstype, target, options=None, source=None):
    os.makedirs(target, exist_ok=True)
    cmd = ["mount", "-t", fstype]
    if options:
        cmd += ["-o", options]
    cmd += [source or fstype, target]
    subprocess.run(cmd, check=True)


# --- the system: what an init would have mounted ---
def base_mounts():
    mount("proc", "/proc")
    mount("sysfs", "/sys")
    mount("tmpfs", "/tmp")
    mount("tmpfs", "/run")
    mount("tracefs", "/sys/kernel/tracing")
    mount("debugfs", "/sys/kernel/debug")
    os.makedirs("/dev/shm", exist_ok=True)
    mount("tmpfs", "/dev/shm")
    sh("hostname", "jsvm", check=False)
    os.environ["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def v1_controllers():
    """Controllers the kernel has, from /proc/cgroups (name, enabled)."""
    out = {}
    for line in (read("/proc/cgroups") or "").splitlines()[1:]:
        f = line.split()
        if len(f) >= 4:
            out[f[0]] = f[3] == "1"
    return out


def setup_v2():
    """cgroup2 alone at /sys/fs/cgroup with the controllers enabled at the root, and this
    process in a service cgroup: what systemd does on a unified-hierarchy boot."""
    mount("cgroup2", CG, "nsdelegate")
    have = (read(f"{CG}/cgroup.controllers") or "").split()
    for c in ["cpuset", "cpu", "io", "memory", "pids"]:
        if c in have:
            write(f"{CG}/cgroup.subtree_control", f"+{c}")
    os.makedirs(f"{CG}/system.slice/jsvm.service", exist_ok=True)
    write(f"{CG}/system.slice/jsvm.service/cgroup.procs", str(os.getpid()))
    facts["cgroup"] = f"cgroup2 at {CG}; enabled at the root: {read(CG + '/cgroup.subtree_control').strip()}"


# v1 hierarchies as systemd mounts them on a legacy/hybrid boot (RHEL 8, Ubuntu 20.04):
# cpu with cpuacct and net_cls with net_prio co-mounted, each name a symlink to the pair.
V1_MOUNTS = ["cpu,cpuacct", "cpuset", "memory", "blkio", "pids", "freezer", "devices",
             "net_cls,net_prio", "perf_event", "hugetlb"]


def setup_v1():
    mount("tmpfs", CG, "mode=755")
    have = v1_controllers()
    mounted, refused = [], []
    for group in V1_MOUNTS:
        names = [n for n in group.split(",") if have.get(n)]
        if not names:
            continue
        opt = ",".join(names)
        os.makedirs(f"{CG}/{opt}", exist_ok=True)
        # /proc/cgroups lists controllers the kernel has, not whether v1 may mount them: 6.12
        # as Debian builds it has neither CONFIG_MEMCG_V1 nor CONFIG_CPUSETS_V1.
        if subprocess.run(["mount", "-t", "cgroup", "-o", opt, "cgroup", f"{CG}/{opt}"],
                          capture_output=True).returncode != 0:
            os.rmdir(f"{CG}/{opt}")
            refused.append(opt)
            continue
        mounted.append(opt)
        if len(names) > 1:
            for n in names:
                os.symlink(opt, f"{CG}/{n}")
    mount("cgroup", f"{CG}/systemd", "none,name=systemd", source="cgroup")
    # Hybrid: an empty cgroup2 next to them. A controller the kernel has but not on v1
    # (memory on kernels built without CONFIG_MEMCG_V1) can only be used there.
    mount("cgroup2", f"{CG}/unified", source="cgroup2")
    v2only = (read(f"{CG}/unified/cgroup.controllers") or "").split()
    for c in v2only:
        write(f"{CG}/unified/cgroup.subtree_control", f"+{c}")
    facts["cgroup"] = (f"v1: {' '.join(mounted)}; name=systemd; cgroup2 at {CG}/unified"
                       + (f" with {' '.join(v2only)} enabled" if v2only else "")
                       + (f"; v1 refused {' '.join(refused)}" if refused else ""))


# --- the probe: a cgroup with a CPU quota and a memory threshold, throttled and writing ---
def probe_dirs():
    """(cpu dir, memory dir, io dir) of the probe cgroup; None where the layout has none."""
    if LAYOUT == "v2":
        d = f"{CG}/{PROBE}"
        return d, d, d
    mem = f"{CG}/memory/{PROBE}" if os.path.isdir(f"{CG}/memory") else f"{CG}/unified/{PROBE}"
    return f"{CG}/cpu,cpuacct/{PROBE}", mem, None


def start_probe():
    cpu, mem, io = probe_dirs()
    for d in {cpu, mem, io} - {None}:
        os.makedirs(d, exist_ok=True)
    if os.path.exists(f"{cpu}/cpu.max"):
        write(f"{cpu}/cpu.max", "20000 100000")
        if os.path.exists(f"{cpu}/cpu.max.burst"):
            write(f"{cpu}/cpu.max.burst", "10000")
    else:
        write(f"{cpu}/cpu.cfs_period_us", "100000")
        write(f"{cpu}/cpu.cfs_quota_us", "20000")
        if os.path.exists(f"{cpu}/cpu.cfs_burst_us"):
            write(f"{cpu}/cpu.cfs_burst_us", "10000")
    if os.path.exists(f"{mem}/memory.high"):
        write(f"{mem}/memory.high", str(32 << 20))
        write(f"{mem}/memory.max", str(256 << 20))
    else:
        write(f"{mem}/memory.limit_in_bytes", str(64 << 20))
    # A child spins under the quota for 10 s while the parent writes 96 MiB through the page
    # cache (over the memory threshold: reclaim, memory.events high / failcnt; io.stat wbytes).
    code = (
        "import os,time\n"
        "end=time.time()+10\n"
        "if os.fork()==0:\n"
        "    while time.time()<end: pass\n"
        "    os._exit(0)\n"
        "b=b'x'*(1<<20)\n"
        "f=open('/var/tmp/jsvm-probe.dat','wb')\n"
        "for i in range(96):\n"
        "    f.write(b)\n"
        "    if i%16==15: f.flush(); os.fsync(f.fileno())\n"
        "f.close()\n"
        "os.wait()\n"
    )
    procs = [d for d in {cpu, mem, io} - {None}]

    def join():
        for d in procs:
            write(f"{d}/cgroup.procs", str(os.getpid()))

    return subprocess.Popen(["python3", "-c", code], preexec_fn=join), (cpu, mem, io)


def probe_path():
    return f"/{PROBE}"


def series_present(dump_lines, name):
    """Whether any sample has a non-null value for the series `name`."""
    for d in dump_lines:
        v = d["values"].get(name)
        if v is not None:
            return True, v
    return False, None


def check_collectors():
    store = "/var/tmp/jsvm-rec"
    subprocess.run(["rm", "-rf", store])
    # The on-demand tracers attached throughout: runqlat otherwise waits for threads waiting
    # for a CPU, which the probe's cgroup may never make, and its cell checks the per-cgroup
    # histogram on this kernel, not the demand.
    rec = subprocess.Popen([JS, "record", "--dir", store, "--duration", "16s",
                            "--on-demand-tracers", "always"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(2)
    probe, (cpu, mem, io) = start_probe()
    probe.wait()
    out, _ = rec.communicate(timeout=120)
    facts["record_log"] = out.strip().splitlines()
    say("record: " + " | ".join(facts["record_log"]))
    if rec.returncode != 0:
        cell("collector.record", "failed", f"record exited {rec.returncode}: {out.strip()[-400:]}")
        return
    p = probe_path()
    sel = ",".join([
        "cpu.usr_pct", "mem.free_bytes", "psi.cpu.some_pct", "psi.memory.some_pct",
        "slab.total_bytes", "dentry.nr_negative", "irq.tlb_per_s",
        f"cgroup.{p}.*", f"runqlat.cgroup.{p}.*", "runqlat.p99_usec", "profile.samples_per_s",
        "reclaim.allocstall_per_s", "self.source_errors",
    ])
    d = sh(JS, "dump", "--dir", store, "--from", "0", "--format", "json", "--select", sel, check=False)
    if d.returncode != 0:
        cell("collector.record", "failed", f"dump: {d.stderr.strip()}")
        return
    lines = [json.loads(x) for x in d.stdout.splitlines() if x.strip()]
    cell("collector.record", "works", f"{len(lines)} samples recorded and dumped")
    # Keep the probe's files as the kernel wrote them: fixtures for the cgroup parsers.
    save_probe_files(cpu, mem, io)

    def series(key, name, why_absent):
        ok, v = series_present(lines, name)
        if ok:
            cell(key, "works", f"{name} = {v:.4g}")
        else:
            reason = why_absent()
            if reason:
                cell(key, "absent", reason)
            else:
                cell(key, "failed", f"no value for {name} although the kernel has what it reads")

    def missing(path, why):
        return None if os.path.exists(path) else f"{path} does not exist ({why})"

    series("collector.system", "cpu.usr_pct", lambda: None)
    series("collector.psi", "psi.cpu.some_pct",
           lambda: missing("/proc/pressure/cpu", "PSI disabled: psi=0 or CONFIG_PSI_DEFAULT_DISABLED"))
    series("collector.slabinfo", "slab.total_bytes", lambda: missing("/proc/slabinfo", "no slabinfo"))
    series("collector.dentry", "dentry.nr_negative", lambda: None)
    procsrc = next((l for l in facts["record_log"] if "processes: read " in l), "")
    if "read through the BPF task iterator" in procsrc:
        cell("collector.processes", "works", "BPF task iterator")
    elif procsrc:
        cell("collector.processes", "degraded", procsrc.split("processes: ", 1)[1])
    else:
        cell("collector.processes", "failed", "record did not say how it reads processes")
    series("cgroup.cpu.max", f"cgroup.{p}.cpu.quota_cores", lambda: None)
    burst_file = f"{cpu}/cpu.max.burst" if LAYOUT == "v2" else f"{cpu}/cpu.cfs_burst_us"
    series("cgroup.cpu.burst", f"cgroup.{p}.cpu.burst_cores",
           lambda: missing(burst_file, "CFS burst is 5.14+"))
    series("cgroup.cpu.stat.throttled", f"cgroup.{p}.cpu.throttled_pct", lambda: None)
    series("cgroup.cpu.stat.throttled_time", f"cgroup.{p}.cpu.throttled_ms_per_s", lambda: None)
    if os.path.exists(f"{mem}/memory.events"):
        series("cgroup.memory.events", f"cgroup.{p}.memory.events.high_per_s", lambda: None)
    else:
        series("cgroup.memory.events", f"cgroup.{p}.memory.failcnt_per_s",
               lambda: missing(f"{mem}/memory.failcnt", "v1 memory"))
    series("cgroup.memory.usage", f"cgroup.{p}.memory.usage_bytes", lambda: None)
    series("cgroup.memory.high", f"cgroup.{p}.memory.high_bytes",
           lambda: missing(f"{mem}/memory.high", "memory.high is cgroup v2 only"))
    psi_dir = cpu if LAYOUT == "v2" else f"{CG}/unified/{PROBE}"
    series("cgroup.pressure", f"cgroup.{p}.pressure.cpu.some_pct",
           lambda: missing(f"{psi_dir}/cpu.pressure", "per-cgroup PSI is cgroup v2 only, and needs PSI on"))
    io_file = f"{io}/io.stat" if io else None
    series("cgroup.io.stat", f"cgroup.{p}.io.write_bytes_per_s",
           lambda: missing(io_file, "io.stat") if io_file else "the v1 blkio hierarchy is not read")
    series("tracer.runqlat.cgroup", f"runqlat.cgroup.{p}.p99_usec", lambda: None)
    # The sampler works if any second of the recording had samples: the first value alone was
    # once 0 or missing in a CI run of a cell whose rerun sampled 118/s from its first second.
    rates = [r for r in (d["values"].get("profile.samples_per_s") for d in lines) if r is not None]
    ok, v = bool(rates), max(rates, default=None)
    if ok and v > 0:
        tf = sh(JS, "top-functions", "--dir", store, "--from", "0", "--json", check=False)
        hot = None
        if tf.returncode == 0:
            try:
                j = json.loads(tf.stdout)
                # Symbolized functions on both sides: the kernel's (kallsyms) and user space's.
                if j.get("kernel") and j.get("user"):
                    hot = f"{j['kernel'][0]['function']} (kernel), {j['user'][0]['function']} (user)"
            except (ValueError, KeyError, IndexError, TypeError):
                pass
        if hot:
            cell("profiler", "works", f"{v:.0f} samples/s; hottest {hot}")
        else:
            cell("profiler", "failed", f"top-functions: {(tf.stderr.strip() or tf.stdout.strip())[-300:]}")
    else:
        line = next((l for l in facts["record_log"] if "profile" in l), "no profile line")
        line += f"; profile.samples_per_s over the recording: {rates or 'none'}"
        cell("profiler", "absent", line)
    if ok and v > 0:
        # The probe is Debian's python3 (3.11): its spinning child's samples carry the
        # interpreter's frames (py:<module>), read by the BPF program on the sampler's events.
        fl = sh(JS, "flame", "--dir", store, "--from", "0", "--comm", "python3", "--folded",
                check=False)
        total = with_py = 0
        for l in fl.stdout.splitlines():
            stack, _, n = l.rpartition(" ")
            if not n.isdigit():
                continue
            total += int(n)
            if ";py:" in stack:
                with_py += int(n)
        if with_py > 0:
            cell("profiler.python", "works",
                 f"{with_py} of {total} samples of python3 with interpreter frames")
        else:
            why = next((l for l in facts["record_log"] if "Python" in l or "CPython" in l), None)
            if why:
                cell("profiler.python", "absent", why)
            else:
                cell("profiler.python", "failed",
                     f"{total} samples of python3, none with interpreter frames; "
                     f"flame: {fl.stderr.strip()[-200:]}")
    subprocess.run(["rm", "-rf", store, "/var/tmp/jsvm-probe.dat"])
    for d in [cpu, mem, io]:
        if d and os.path.isdir(d):
            try:
                os.rmdir(d)
            except OSError:
                pass


PROBE_FILES = ["cpu.stat", "cpu.max", "cpu.max.burst", "cpu.pressure", "memory.pressure",
               "io.pressure", "memory.events", "memory.high", "memory.max", "memory.current",
               "memory.stat", "io.stat", "cgroup.controllers", "cpu.cfs_quota_us",
               "cpu.cfs_period_us", "cpu.cfs_burst_us", "cpuacct.usage", "cpuacct.stat",
               "memory.limit_in_bytes", "memory.usage_in_bytes", "memory.failcnt",
               "memory.oom_control"]


def save_probe_files(cpu, mem, io):
    dest = f"{OUT}/probe"
    os.makedirs(dest, exist_ok=True)
    for d in {cpu, mem, io} - {None}:
        for f in PROBE_FILES:
            t = read(f"{d}/{f}")
            if t is not None and not os.path.exists(f"{dest}/{f}"):
                write(f"{dest}/{f}", t)


def check_tracers():
    r = sh(JS, "tracers", "--check", "--json", check=False)
    seen = 0
    for line in r.stdout.splitlines():
        try:
            t = json.loads(line)
        except ValueError:
            continue
        seen += 1
        key = f"tracer.{t['tracer']}"
        if not t["loads"]:
            cell(key, "absent", t["detail"])
        elif "fallback" in t["detail"]:
            cell(key, "degraded", t["detail"])
        else:
            cell(key, "works", t["detail"])
    if seen == 0:
        cell("tracer.check", "failed", f"tracers --check printed nothing: {r.stderr.strip()}")


def check_no_btf():
    """Without the kernel's BTF (hidden under an empty tmpfs), the tracers must say so plainly
    and the recorder must go on recording."""
    mount("tmpfs", "/sys/kernel/btf")
    try:
        r = sh(JS, "tracers", "--check", "--json", check=False)
        details = sorted({json.loads(l)["detail"] for l in r.stdout.splitlines() if l.strip()})
        store = "/var/tmp/jsvm-nobtf"
        subprocess.run(["rm", "-rf", store])
        rec = sh(JS, "record", "--dir", store, "--duration", "4s", check=False)
        d = sh(JS, "dump", "--dir", store, "--from", "0", "--format", "json",
               "--select", "cpu.usr_pct", check=False)
        samples = len([l for l in d.stdout.splitlines() if l.strip()])
        subprocess.run(["rm", "-rf", store])
        if rec.returncode == 0 and samples >= 2:
            cell("no-btf", "degraded", "; ".join(details) + f"; record went on: {samples} samples")
        else:
            cell("no-btf", "failed",
                 f"record exited {rec.returncode} with {samples} samples: {rec.stderr.strip()[-300:]}")
    finally:
        subprocess.run(["umount", "/sys/kernel/btf"])


SWAPFILE = "/var/tmp/jsvm.swap"


def with_swap(f):
    """Runs f with a 512 MiB swap file active, then removes it: the guest is ours to configure,
    and swap-in needs swap (the lab never turns it on)."""
    sh("dd", "if=/dev/zero", f"of={SWAPFILE}", "bs=1M", "count=512")
    os.chmod(SWAPFILE, 0o600)
    sh("busybox", "mkswap", SWAPFILE)
    sh("busybox", "swapon", SWAPFILE)
    try:
        f()
    finally:
        sh("busybox", "swapoff", SWAPFILE, check=False)
        os.remove(SWAPFILE)


def check_lab(name, duration):
    key = f"lab.{name}"
    start = time.time()
    # The recording and the report are kept in the cell's output: fixtures for the diagnosis
    # golden tests (tests/vm/capture-fixtures.sh), and what to read when a cell fails.
    os.makedirs(f"{OUT}/lab", exist_ok=True)
    env = dict(os.environ)
    if CONFIG.get("lab_only"):
        # The -ipi cell runs multi-threaded TCG, which loses races with the kernel's live code
        # patching when a syscall tracepoint is attached (run.sh). On 5.10 a census attach of
        # the lookups tracer left both vCPUs in soft lockups until the cell timed out (one CI
        # run in several). The shootdown check needs the madvise tracer, which its symptom
        # attaches, not the census.
        env["JITTERSCOPE_CENSUS_EVERY"] = "0s"
    how = ["--duration", duration] if duration else []
    r = subprocess.run([JS, "lab", "check", name, *how, "--json", "--dir", f"{OUT}/lab/{name}"],
                       capture_output=True, text=True, timeout=600, env=env)
    write(f"{OUT}/lab/{name}.json", r.stdout)
    took = round(time.time() - start)
    try:
        j = json.loads(r.stdout)
    except ValueError:
        cell(key, "failed", f"exit {r.returncode}: {r.stderr.strip()[-500:]}", seconds=took)
        return
    diag = j.get("diagnosis") or {}
    findings = (diag.get("report") or {}).get("findings") or []
    first = findings[0] if findings else {}
    culprit = (first.get("culprit") or {})
    extra = {
        "seconds": took,
        "first_rule": diag.get("first_rule"),
        "expected_rule": diag.get("expected_rule"),
        "culprit_cgroup": culprit.get("cgroup"),
        "culprit_comm": culprit.get("comm"),
    }
    failed = [f"{c['what']}: {c['series']} = {c['value']}" for c in j.get("checks", []) if not c.get("pass")]
    failed += diag.get("problems") or []
    if j.get("memleak") is not None:
        ml = j["memleak"]
        extra["memleak_pass"] = ml.get("pass")
    detail = f"first rule {diag.get('first_rule')}"
    if culprit:
        detail += f", culprit {culprit.get('comm')} in {culprit.get('cgroup')}"
    if j.get("pass"):
        cell(key, "works", detail, **extra)
    else:
        cell(key, "failed", detail + "; " + "; ".join(str(x) for x in failed)
             + ("; " + r.stderr.strip()[-300:] if r.stderr.strip() else ""), **extra)


def main():
    t0 = time.time()
    base_mounts()
    os.makedirs("/usr/local/bin", exist_ok=True)
    subprocess.run(["cp", f"{IN}/jitterscope", JS], check=True)
    facts["kernel"] = os.uname().release
    facts["cmdline"] = (read("/proc/cmdline") or "").strip()
    (setup_v2 if LAYOUT == "v2" else setup_v1)()
    # The guest boots with init=guest.py: nothing brings loopback up, as a distribution's boot
    # does, and softirq-storm's flood on 127.0.0.1 met "Network is unreachable".
    subprocess.run(["busybox", "ip", "link", "set", "lo", "up"], check=True)
    facts["psi"] = os.path.exists("/proc/pressure/cpu")
    facts["btf"] = os.path.exists("/sys/kernel/btf/vmlinux")
    say(f"kernel {facts['kernel']}, {facts['cgroup']}, psi {facts['psi']}, btf {facts['btf']}")
    if CONFIG.get("debug"):
        # JSVM_DEBUG: a shell command run in place of the checks (to read a verifier log, say).
        r = subprocess.run(["sh", "-c", CONFIG["debug"]], capture_output=True, text=True)
        write(f"{OUT}/debug.log", r.stdout + r.stderr)
        say(f"debug command exited {r.returncode}; output in debug.log")
        return
    steps = [("tracers", check_tracers), ("collectors", check_collectors), ("no-btf", check_no_btf)]
    if CONFIG.get("lab_only"):
        steps = []
    chosen = CONFIG.get("scenarios") or [n for n in SCENARIOS if scheduled(n)]
    facts["scenarios"] = chosen
    for name in chosen:
        run = lambda n=name: check_lab(n, SCENARIOS.get(n, (None,))[0])
        steps.append((f"lab {name}", (lambda r=run: with_swap(r)) if name == "swap-in" else run))
    timings = {}
    for what, f in steps:
        s = time.time()
        try:
            f()
        except Exception:
            cell(f"step.{what}", "failed", traceback.format_exc().strip().splitlines()[-1])
            say(traceback.format_exc())
        timings[what] = round(time.time() - s, 1)
    facts["seconds"] = timings
    facts["guest_seconds"] = round(time.time() - t0, 1)
    with open(f"{OUT}/result.json.tmp", "w") as f:
        json.dump({"config": CONFIG, "facts": facts, "cells": cells}, f, indent=1)
    os.rename(f"{OUT}/result.json.tmp", f"{OUT}/result.json")
    say(f"done in {facts['guest_seconds']} s")


if __name__ == "__main__":
    try:
        main()
    except Exception:
        print("JSVM-FATAL: " + traceback.format_exc(), flush=True)
    finally:
        os.sync()
        try:
            write("/proc/sysrq-trigger", "o")
        except OSError:
            pass
        time.sleep(30)
