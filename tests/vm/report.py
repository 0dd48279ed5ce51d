#!/usr/bin/env python3
"""The kernel matrix's verdict: compares each guest's result.json with tests/vm/expect.json and
writes docs/KERNELS.md. Exits non-zero when a cell differs from what is expected (or a guest
wrote no result), printing the guest's own lines for it.

An expectation is a list of rules per capability, the first whose kernels and layouts match
wins; a capability with no matching rule is expected to work. A rule names the status and a
text the cell's detail must contain, so a degraded or absent cell asserts its precise reason.
"""
import argparse
import datetime
import json
import os
import re
import subprocess
import sys

# Rows in reading order: (key, what the row means). Keys not listed are appended at the end.
ROWS = [
    ("tracer.reclaim", "tracer `reclaim`: direct/memcg reclaim stalls, kswapd"),
    ("tracer.shrinker", "tracer `shrinker`: slab shrinker calls by function"),
    ("tracer.tlb", "tracer `tlb`: TLB flushes by reason; shootdown senders"),
    ("tracer.madvise", "tracer `madvise`: calls that flushed the TLB (evidence)"),
    ("tracer.runqlat", "tracer `runqlat`: run-queue latency, host"),
    ("tracer.runqlat.cgroup", "tracer `runqlat`: per cgroup (cgroup-id mapping)"),
    ("tracer.lookups", "tracer `lookups`: failed path look-ups (evidence)"),
    ("tracer.mmaplock", "tracer `mmaplock`: mmap_lock waits per process"),
    ("tracer.dirty", "tracer `dirty`: balance_dirty_pages sleeps per process"),
    ("collector.record", "`record` + `dump` (the store round trip)"),
    ("collector.system", "system counters (/proc/stat, meminfo, vmstat...)"),
    ("collector.psi", "system PSI (/proc/pressure)"),
    ("collector.slabinfo", "slab caches (/proc/slabinfo)"),
    ("collector.dentry", "dentry cache, negative dentries"),
    ("collector.processes", "processes (BPF task iterator, else /proc)"),
    ("cgroup.cpu.max", "cgroup CPU quota (cpu.max / cfs_quota_us)"),
    ("cgroup.cpu.burst", "cgroup CPU burst (cpu.max.burst / cfs_burst_us)"),
    ("cgroup.cpu.stat.throttled", "cgroup throttled periods (cpu.stat nr_throttled)"),
    ("cgroup.cpu.stat.throttled_time", "cgroup throttled time (cpu.stat throttled_usec / _time)"),
    ("cgroup.memory.usage", "cgroup memory usage"),
    ("cgroup.memory.high", "cgroup memory.high"),
    ("cgroup.memory.events", "cgroup memory events (memory.events / failcnt)"),
    ("cgroup.pressure", "cgroup PSI (cpu/memory/io.pressure)"),
    ("cgroup.io.stat", "cgroup I/O (io.stat)"),
    ("profiler", "stack profiler (perf cpu-clock) + `top-functions`"),
    ("profiler.python", "CPython frames in the stacks (BPF on the sampler's events)"),
    ("no-btf", "without kernel BTF: tracers say why, recording goes on"),
    ("lab.cfs-throttle", "rule `cpu.cfs-throttling` on `lab check cfs-throttle`"),
    ("lab.reclaim-storm", "rule on `lab check reclaim-storm`"),
    ("lab.tlb-shootdown", "rule on `lab check tlb-shootdown` (sender named)"),
    ("lab.negative-dentry", "rule on `lab check negative-dentry`"),
    ("lab.shrinker-scale", "rule on `lab check shrinker-scale`"),
    ("lab.pagecache-thrash", "rule on `lab check pagecache-thrash`"),
    ("lab.memcg-thrash", "rule on `lab check memcg-thrash`"),
    ("lab.native-leak", "`lab check native-leak` (+ memleak)"),
    ("lab.python-leak", "`lab check python-leak` (+ memleak)"),
    ("lab.oom-leak", "`lab check oom-leak`"),
    ("lab.worker-leak", "`lab check worker-leak`"),
    ("lab.nss-probe", "`lab check nss-probe` (real NSS certutil)"),
    ("lab.memory-high", "rule `memory.high-throttling` on `lab check memory-high` (cgroup v2)"),
    ("lab.swap-in", "rule `memory.swap-in` on `lab check swap-in` (a swap file in the guest)"),
    ("lab.softirq-storm", "rule `cpu.softirq-storm` on `lab check softirq-storm` (loopback NET_RX)"),
    ("lab.mmap-lock", "rule `memory.mmap-lock-contention` on `lab check mmap-lock` (5.19+)"),
    ("lab.dirty-throttle", "rule `io.dirty-throttling` on `lab check dirty-throttle` (cgroup v2)"),
]
# Scenarios guest.py does not run, and why (measured in 5.10 v2 guests, 30 s runs).
NOT_RUN = [
    ("python-leak", "the leak reaches its 96 MiB cap at 40% of the run under TCG and the leak rule found no steady growth in the window (the host's recording, tests/fixtures/diagnose/python-leak, passes)."),
    ("oom-leak", "its memory limit is set from the leak rate the host reaches (12 MiB/s); under TCG the leak grew 7 MiB/s and met the OOM killer only after the run."),
    ("nss-probe", "certutil under TCG made 465 failed look-ups a second, below the census's threshold."),
    ("two-incidents", "it is cfs-throttle and memcg-thrash at once, which the guests run one by one."),
]
# Where the scenarios above run instead.
NOT_RUN_ELSEWHERE = "lab_e2e runs these four on the host's kernel at their defaults, alone and beside the soak load."
# Rules with no reproducer a guest can run, and how they are tested instead.
NO_REPRODUCER = [
    ("cpu.steal", "steal cannot be made under emulation (a TCG guest has no steal time, and KVM does not boot Debian's kernels on this machine). The rule is tested on /proc/stat recorded on this machine (tests/fixtures/steal, scripts/capture-steal-fixtures.sh), as recorded and with idle ticks of one CPU moved to its steal column (crates/diagnose/tests/steal.rs). /proc/stat has had the steal column since 2.6.11; a guest's figure needs the hypervisor's paravirtual steal accounting (KVM steal time, Xen, VMware)."),
]
# Scenarios run on some guests only, and why.
SOME_KERNELS = [
    ("native-leak", "5.10 only: what the leak rule reads (RSS, smaps, how the process ended) does not change between these kernels. lab_e2e runs it on the host's kernel beside the soak load."),
    ("worker-leak", "5.10 only, for the same reason."),
    ("pagecache-thrash", "5.10 only: memcg-thrash covers the page cache under a limit on every kernel and layout; the major faults this one adds (a process's majflt, vmstat's pgmajfault) read the same on all three."),
    ("reclaim-storm", "v2 only: memcg-thrash's reclaim stalls at its cgroup's limit cover memory-cgroup reclaim on v1, on every kernel."),
    ("memory-high", "v2 only: memory.high is cgroup v2's; v1 has no such throttle."),
    ("swap-in", "v2 only, with a 512 MiB swap file the guest adds for it: swapping under a memory limit reads the same on both layouts (memory.swap.max or memsw)."),
    ("softirq-storm", "v2 only: loopback's receive half runs as NET_RX on the sending CPU, and /proc/stat and /proc/softirqs read the same, whatever the cgroup layout."),
    ("dirty-throttle", "v2 only: per-cgroup dirty limits are cgroup v2's writeback; on v1 only the host's limits apply, which a 2 GiB guest reaches only after hundreds of MiB."),
    ("mmap-lock", "6.1 and 6.12, v2 only: the mmaplock tracer sees waits at lock:contention_begin/end, which 5.10 lacks (5.19+; its tracer cell says so), and a process's own lock knows nothing of cgroups."),
]
LAYOUT_TEXT = {
    "v2": "cgroup2 only at /sys/fs/cgroup, cpuset cpu io memory pids enabled at the root (systemd's unified boot)",
    "v1": "cgroup v1, one mount per controller with `cpu,cpuacct` and `net_cls,net_prio` co-mounted, "
          "`name=systemd` and an empty cgroup2 at `unified` (systemd's hybrid boot, RHEL 8 / Ubuntu 20.04), "
          "booted with `psi=0` as RHEL 8 is. Controllers the kernel will not mount on v1 are enabled on `unified`: "
          "Debian 13's 6.12 is built without `CONFIG_MEMCG_V1` and `CONFIG_CPUSETS_V1`, so there memory and cpuset are on cgroup2 "
          "next to the v1 cpu hierarchy",
}


def matches(rule, kernel, layout):
    ks = rule.get("kernels", "*")
    ls = rule.get("layouts", "*")
    return (ks == "*" or kernel in ks) and (ls == "*" or layout in ls)


def expected(expect, key, kernel, layout):
    for rule in expect.get(key, []):
        if matches(rule, kernel, layout):
            return rule
    return {"status": "works"}


def guest_lines(outdir):
    """The guest's own complaints: fatal lines and error lines from its console."""
    path = os.path.join(outdir, "console.log")
    try:
        text = open(path, errors="replace").read()
    except OSError:
        return ["(no console log)"]
    lines = [l for l in text.splitlines() if re.search(r"JSVM-FATAL|error|panic|Traceback", l, re.I)]
    return lines[-15:] or text.splitlines()[-15:]


def short(status, detail):
    return {"works": "works", "degraded": "degraded", "absent": "absent", "failed": "**FAILED**"}.get(status, status)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--expect", required=True)
    ap.add_argument("--doc", required=True)
    ap.add_argument("cells", nargs="+")
    a = ap.parse_args()
    expect = json.load(open(a.expect))
    results = {}
    problems = []
    for c in a.cells:
        d = os.path.join(a.out, c)
        try:
            results[c] = json.load(open(os.path.join(d, "result.json")))
        except (OSError, ValueError) as e:
            why = open(os.path.join(d, "timeout")).read().strip() if os.path.exists(os.path.join(d, "timeout")) else str(e)
            problems.append((c, "(whole guest)", f"no result: {why}", guest_lines(d)))
    # A "-ipi" cell is another boot of the same kernel and layout (multi-threaded TCG, for the
    # shootdown storm): its cells join that column.
    for c in [c for c in results if c.endswith("-ipi")]:
        base = c[: -len("-ipi")]
        extra = results.pop(c)
        if base in results:
            results[base]["cells"].update(extra["cells"])
            results[base]["facts"].setdefault("scenarios", []).extend(extra["facts"].get("scenarios", []))
            results[base].setdefault("extra_boots", []).append((c, extra))
        else:
            results[c] = extra
    keys = [k for k, _ in ROWS]
    for r in results.values():
        for k in r["cells"]:
            if k not in keys:
                keys.append(k)
    titles = dict(ROWS)

    for c, r in results.items():
        kernel, layout = r["config"]["kernel"], r["config"]["layout"]
        chosen = r["facts"].get("scenarios", r["config"].get("scenarios"))
        for k in keys:
            got = r["cells"].get(k)
            if got is None:
                # A lab row the run did not ask for is not a failure; anything else missing is.
                if k.startswith("lab.") and chosen is not None and k[4:] not in chosen:
                    continue
                if k.startswith("step.") or k == "tracer.check":
                    continue
                # An -ipi boot on its own (JSVM_IPI=only) runs only its lab scenarios.
                if r["config"].get("lab_only") and not k.startswith("lab."):
                    continue
                problems.append((c, k, "no result for this capability", guest_lines(os.path.join(a.out, c))))
                continue
            want = expected(expect, k, kernel, layout)
            # A list of statuses: a result the emulator's speed decides (said in the rule's note).
            statuses = want["status"] if isinstance(want["status"], list) else [want["status"]]
            ok = got["status"] in statuses and (got["status"] == "works" or want.get("detail", "") in got["detail"])
            if not ok:
                problems.append((c, k, f"expected {want['status']}"
                                 + (f" with '{want['detail']}'" if want.get("detail") else "")
                                 + f", got {got['status']}: {got['detail']}",
                                 guest_lines(os.path.join(a.out, c))))

    write_doc(a, results, keys, titles, expect)
    if problems:
        print(f"vm: {len(problems)} cell(s) differ from tests/vm/expect.json:", file=sys.stderr)
        for c, k, what, lines in problems:
            print(f"vm: FAIL {c} {k}: {what}", file=sys.stderr)
            for l in lines[-6:]:
                print(f"vm:   guest| {l[:300]}", file=sys.stderr)
        sys.exit(1)
    print(f"vm: all {sum(len(r['cells']) for r in results.values())} cells of {len(results)} guests as expected; "
          f"{os.path.relpath(a.doc)} written", file=sys.stderr)


def write_doc(a, results, keys, titles, expect):
    cols = list(results)
    if not cols:
        return
    rev = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip()
    notes = []
    note_of = {}

    def cell_text(got, key, cfg):
        if got is None:
            return "–"
        s = short(got["status"], got["detail"])
        rule = expected(expect, key, cfg["kernel"], cfg["layout"])
        known = got["status"] == "failed" and (rule["status"] == "failed" or "failed" in rule["status"])
        if known:
            s = "fails (known)"
        if got["status"] == "works":
            return s
        text = got["detail"]
        # A failed lab check's detail ends with its stderr: its last error line says it.
        if "jitterscope: error:" in text:
            text = text[text.rindex("jitterscope: error:") + len("jitterscope: error:"):]
        text = " ".join(text.split())
        if known and rule.get("note"):
            text += f". Why: {rule['note']}"
        if text not in note_of:
            notes.append(text)
            note_of[text] = len(notes)
        return f"{s} [{note_of[text]}]"

    out = []
    out.append("# Kernels and cgroup layouts")
    out.append("")
    out.append("Generated by `make test-vm` (`tests/vm/run.sh`, `tests/vm/guest.py`, `tests/vm/report.py`); "
               "do not edit by hand. Each column is one boot of Debian's kernel under qemu (TCG, 2 vCPUs, "
               "2 GiB) with a Debian bookworm userspace, running jitterscope "
               f"`{rev}` as root. The matrix fails when a cell differs from `tests/vm/expect.json`, "
               "so every degraded or absent cell below is asserted with its reason.")
    out.append("")
    out.append(f"Last run: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}.")
    out.append("")
    out.append("- **works**: measured working in that guest.")
    out.append("- **degraded**: works with less (the reason is jitterscope's own, as `tracers --check` or `record` says it).")
    out.append("- **absent**: the kernel or layout lacks what it reads (the reason is what the guest found).")
    out.append("- **fails (known)**: a gap found by the matrix and not fixed yet; asserted with its reason in `tests/vm/expect.json`.")
    out.append("- **FAILED**: a bug; the matrix is red.")
    out.append("")
    out.append("Layouts:")
    for l, t in LAYOUT_TEXT.items():
        out.append(f"- `{l}`: {t}.")
    out.append("")
    head = "| capability | " + " | ".join(
        f"{results[c]['config']['kernel']} {results[c]['config']['layout']}" for c in cols) + " |"
    out.append(head)
    out.append("|---|" + "---|" * len(cols))
    for k in keys:
        if all(results[c]["cells"].get(k) is None for c in cols):
            continue
        out.append(f"| {titles.get(k, k)} | " + " | ".join(
            cell_text(results[c]["cells"].get(k), k, results[c]["config"]) for c in cols) + " |")
    out.append("")
    out.append("Kernels, as booted: " + "; ".join(
        f"{results[c]['config']['kernel']} = `{results[c]['facts'].get('kernel', '?')}`"
        for c in cols if results[c]["config"]["layout"] == "v2") + ".")
    out.append("")
    out.append("## Reasons")
    out.append("")
    for i, n in enumerate(notes, 1):
        out.append(f"{i}. {n}")
    out.append("")
    out.append("## Not run in the matrix")
    out.append("")
    for n, why in NOT_RUN:
        out.append(f"- `{n}`: {why}")
    out.append(f"- {NOT_RUN_ELSEWHERE}")
    for n, why in SOME_KERNELS:
        out.append(f"- `{n}` on {why}")
    for n, why in NO_REPRODUCER:
        out.append(f"- rule `{n}`: {why}")
    out.append("")
    out.append("## Lab scenarios: first rule and culprit")
    out.append("")
    out.append("| cell | scenario | first rule | culprit | seconds |")
    out.append("|---|---|---|---|---:|")
    for c in cols:
        for k, v in results[c]["cells"].items():
            if k.startswith("lab."):
                cul = f"{v.get('culprit_comm') or ''} in `{v.get('culprit_cgroup')}`" if v.get("culprit_cgroup") else (v.get("culprit_comm") or "–")
                out.append(f"| {c} | {k[4:]} | {v.get('first_rule') or '–'} | {cul} | {v.get('seconds', '')} |")
    out.append("")
    out.append("## Time per guest")
    out.append("")
    # A cell booted more than once (run.sh retries a panic during boot, and soft lockups of
    # multi-threaded TCG in the -ipi cell) says so: its result is from the last boot.
    out.append("| cell | boot to power-off (s) | of which checks (s) | boots |")
    out.append("|---|---:|---:|---:|")
    def read(c, name):
        p = os.path.join(a.out, c, name)
        return open(p).read().strip() if os.path.exists(p) else "?"

    for c in cols:
        out.append(f"| {c} | {read(c, 'wall_s')} | {results[c]['facts'].get('guest_seconds', '?')} | {read(c, 'attempts')} |")
        for extra, r in results[c].get("extra_boots", []):
            out.append(f"| {extra} | {read(extra, 'wall_s')} | {r['facts'].get('guest_seconds', '?')} | {read(extra, 'attempts')} |")
    out.append("")
    tmp = a.doc + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(out))
    os.replace(tmp, a.doc)


if __name__ == "__main__":
    main()
