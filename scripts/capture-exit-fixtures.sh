#!/usr/bin/env bash
# Captures the kernel's own records of a process's end on this machine, for the parsers' tests:
#   tests/fixtures/edge/zombie-sigkill.stat   /proc/<pid>/stat of a zombie killed by SIGKILL
#   tests/fixtures/edge/kmsg-oom.txt          the /dev/kmsg records of one memory-cgroup OOM kill
#   tests/fixtures/edge/zombie-v1.cgroup      /proc/<pid>/cgroup of a zombie whose parent is in
#   tests/fixtures/edge/parent-v1.cgroup      a v1 memory cgroup, and the parent's (v1 only)
# Needs root (a memory cgroup, /dev/kmsg). Everything it creates is removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
out=tests/fixtures/edge
mkdir -p "$out"
python3 - "$out" <<'PY'
import os, signal, sys, time
out = sys.argv[1]

# A zombie: the child is killed and not waited for, so its stat shows state Z and exit_code 9.
pid = os.fork()
if pid == 0:
    time.sleep(60)
    os._exit(0)
os.kill(pid, signal.SIGKILL)
for _ in range(100):
    stat = open(f"/proc/{pid}/stat", "rb").read()
    if stat.split(b") ", 1)[1][:1] == b"Z":
        break
    time.sleep(0.01)
open(f"{out}/zombie-sigkill.stat", "wb").write(stat)
os.waitpid(pid, 0)

# A zombie in a v1 memory cgroup: the kernel shows an exiting task's v1 paths as "/", while its
# parent, still running in the same cgroup, shows the real one.
if os.path.exists("/sys/fs/cgroup/memory/cgroup.procs"):
    zcg = "/sys/fs/cgroup/memory/jitterscope-fixture-zombie"
    os.makedirs(zcg, exist_ok=True)
    try:
        r, w = os.pipe()
        parent = os.fork()
        if parent == 0:
            open(f"{zcg}/cgroup.procs", "w").write(str(os.getpid()))
            child = os.fork()
            if child == 0:
                os._exit(0)
            while open(f"/proc/{child}/stat", "rb").read().split(b") ", 1)[1][:1] != b"Z":
                time.sleep(0.01)
            os.write(w, open(f"/proc/{child}/cgroup", "rb").read() + b"\0"
                     + open(f"/proc/{os.getpid()}/cgroup", "rb").read())
            os.waitpid(child, 0)
            os.open("/dev/null", os.O_RDONLY)
            open(f"/sys/fs/cgroup/memory/cgroup.procs", "w").write(str(os.getpid()))
            os._exit(0)
        os.close(w)
        got = b""
        while chunk := os.read(r, 65536):
            got += chunk
        os.waitpid(parent, 0)
        zombie, parent_cg = got.split(b"\0")
        open(f"{out}/zombie-v1.cgroup", "wb").write(zombie)
        open(f"{out}/parent-v1.cgroup", "wb").write(parent_cg)
    finally:
        os.rmdir(zcg)

# An OOM kill in a v1 memory cgroup (or v2 where that is all there is), read from /dev/kmsg
# from the end, so only the records of this kill are kept.
cg = None
for base in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
    if os.path.exists(f"{base}/memory.limit_in_bytes") or os.path.exists(f"{base}/cgroup.controllers"):
        cg = f"{base}/jitterscope-fixture-oom"
        break
os.makedirs(cg, exist_ok=True)
try:
    limit = 32 << 20
    if os.path.exists(f"{cg}/memory.limit_in_bytes"):
        open(f"{cg}/memory.limit_in_bytes", "w").write(str(limit))
    else:
        open(f"{cg}/memory.max", "w").write(str(limit))
    kmsg = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    os.lseek(kmsg, 0, os.SEEK_END)
    pid = os.fork()
    if pid == 0:
        open(f"{cg}/cgroup.procs", "w").write(str(os.getpid()))
        hog = []
        while True:
            hog.append(bytearray(1 << 20))
    os.waitpid(pid, 0)
    time.sleep(0.2)
    recs = []
    while True:
        try:
            recs.append(os.read(kmsg, 8192))
        except BlockingIOError:
            break
        except BrokenPipeError:
            continue
    # Every record read (the whole OOM report, whatever else the kernel logged meanwhile), in
    # /dev/kmsg's own format: the parser must pick the kill out of all of it.
    keep = recs
    open(f"{out}/kmsg-oom.txt", "wb").write(b"".join(r if r.endswith(b"\n") else r + b"\n" for r in keep))
finally:
    os.rmdir(cg)
PY
ls -l "$out/zombie-sigkill.stat" "$out/kmsg-oom.txt" "$out"/*-v1.cgroup
