#!/usr/bin/env bash
# Captures what the profiler's line decoding is tested on (tests/fixtures/python/lines.jsonl):
# for each CPython on this machine (Debian's python3.11, pyenv's 3.8-3.13), every code object
# of tests/fixtures/python/sample.py as that interpreter compiles it, with its line table
# (co_lnotab to 3.9, co_linetable from 3.10) and the line the interpreter itself gives each
# instruction offset (co_lines(), or dis.findlinestarts() before 3.10).
#
#   bash scripts/capture-python-fixtures.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=tests/fixtures/python/lines.jsonl
pys=()
[ -x /usr/bin/python3.11 ] && pys+=(/usr/bin/python3.11)
for v in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.{8,9,10,12,13}.*; do
  b=$(ls "$v"/bin/python3.* 2>/dev/null | grep -E '/python3\.[0-9]+$' | head -1) || true
  [ -n "$b" ] && pys+=("$b")
done
: >"$out.tmp"
for py in "${pys[@]}"; do
  "$py" - tests/fixtures/python/sample.py >>"$out.tmp" <<'PY'
import dis, json, sys
src = open(sys.argv[1]).read()
top = compile(src, "sample.py", "exec")
def codes(co):
    yield co
    for c in co.co_consts:
        if hasattr(c, "co_code"):
            yield from codes(c)
v = "%d.%d" % sys.version_info[:2]
for co in codes(top):
    n = len(co.co_code)
    if sys.version_info >= (3, 10):
        table = co.co_linetable
        lines = [[a, line] for s, e, line in co.co_lines() if line is not None for a in range(s, e, 2)]
    else:
        table = co.co_lnotab
        starts = list(dis.findlinestarts(co))
        lines, cur, k = [], co.co_firstlineno, 0
        for a in range(0, n, 2):
            while k < len(starts) and starts[k][0] <= a:
                cur = starts[k][1]
                k += 1
            lines.append([a, cur])
    print(json.dumps({"version": v, "name": co.co_name, "first": co.co_firstlineno,
                      "table": table.hex(), "lines": lines}))
PY
done
mv "$out.tmp" "$out"
echo "wrote $out ($(wc -l <"$out") code objects from ${#pys[@]} interpreters)"
