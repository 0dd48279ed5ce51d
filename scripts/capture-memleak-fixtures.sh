#!/usr/bin/env bash
# Captures the files `jitterscope memleak` reads, from real processes on this machine, into
# tests/fixtures/memleak/ (run as root from the repository root):
#   native.smaps   /proc/<pid>/smaps of python3 leaking ctypes mallocs of marker records
#   native.mem     256 KiB of that process's most resident writable anonymous/heap region,
#                  with its start address in native.mem.addr (the census fixture)
#   python.smaps   /proc/<pid>/smaps of python3 leaking small dicts
# The processes are killed on exit, Ctrl-C included.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "capture-memleak-fixtures: needs root (reads /proc/<pid>/mem)" >&2; exit 1; }
out=tests/fixtures/memleak
mkdir -p "$out"
pids=()
cleanup() { ((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM

python3 -c '
import ctypes, time
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
for i in range(20000):
    rec = b"jitterscope.memleak.context_info{req=%d}" % i
    p = libc.malloc(96)
    ctypes.memmove(p, rec, len(rec) + 1)
time.sleep(60)
' &
native=$!
pids+=("$native")
python3 -c '
import time
keep = [{"req": i, "peer": 2 * i} for i in range(50000)]
time.sleep(60)
' &
py=$!
pids+=("$py")
sleep 2
cat "/proc/$native/smaps" >"$out/native.smaps"
cat "/proc/$py/smaps" >"$out/python.smaps"
# 256 KiB of the writable private heap/anonymous region holding the most marker records.
python3 - "$native" "$out" <<'PY'
import re, sys
pid, out = sys.argv[1], sys.argv[2]
marker = b"jitterscope.memleak.context_info"
regions = []
for line in open(f"/proc/{pid}/maps"):
    m = re.match(r"([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)", line)
    if m and m[3].startswith("rw") and m[3].endswith("p") and m[4].strip() in ("", "[heap]"):
        regions.append((int(m[1], 16), int(m[2], 16)))
best = None
with open(f"/proc/{pid}/mem", "rb") as f:
    for start, end in regions:
        try:
            f.seek(start)
            data = f.read(min(end - start, 64 << 20))
        except OSError:
            continue
        n = data.count(marker)
        if best is None or n > best[0]:
            best = (n, start, data)
n, start, data = best
# Early records sit between the interpreter's own allocations; the middle of the run is dense.
hits = [m.start() for m in re.finditer(re.escape(marker), data)]
at = hits[len(hits) // 2] & ~4095
chunk = data[at:at + (256 << 10)]
open(f"{out}/native.mem", "wb").write(chunk)
open(f"{out}/native.mem.addr", "w").write("%x\n" % (start + at))
print(f"captured {len(chunk)} bytes at {start + at:#x}: {chunk.count(marker)} markers ({n} in the region)")
PY
echo "$(uname -r)" >"$out/KERNEL"
python3 --version >"$out/PYTHON"
echo "captured into $out"
