#!/usr/bin/env python3
"""Usage: bench/soak_alarms.py BINARY STORE REPORT.json  (REPORT: `lab check soak --dir STORE --json`)

False alarms of a soak recording: diagnose every 60 s window (stepping 30 s) and every 5 min
window (stepping 60 s) of the workload, count mechanism findings >= 0.5 (claims) and < 0.5
(advice), and the episodes `events` finds, per hour of workload."""
import json, subprocess, sys, collections
bin_, store, report = sys.argv[1], sys.argv[2], sys.argv[3]
r = json.load(open(report))
a0, a1 = r["windows"]["active"]
hours = (a1 - a0) / 3600e9
def diag(f, t):
    o = subprocess.run([bin_, "diagnose", "--dir", store, "--from", str(f // 10**9), "--to", str(t // 10**9), "--json"], capture_output=True, text=True, check=True)
    return json.loads(o.stdout)["findings"]
out = {"workload_s": round((a1 - a0) / 1e9), "windows": {}}
for win, step in ((60, 30), (300, 60)):
    claims, advice, n = collections.Counter(), collections.Counter(), 0
    t = a0
    while t + win * 10**9 <= a1 + 10**9:
        for f in diag(t, t + win * 10**9):
            if f["mechanism"]:
                key = f["rule_id"]
                (claims if f["confidence"] >= 0.5 else advice)[key] += 1
                if f["confidence"] >= 0.5:
                    print(f"claim in {win}s window at +{(t-a0)/1e9:.0f}s: {f['rule_id']} {f['confidence']} {f['title'][:160]}", file=sys.stderr)
        n += 1
        t += step * 10**9
    out["windows"][f"{win}s"] = {"windows": n, "claims": dict(claims), "advice": dict(advice)}
ev = json.loads(subprocess.run([bin_, "events", "--dir", store, "--from", str(a0 // 10**9), "--to", str(a1 // 10**9), "--json"], capture_output=True, text=True, check=True).stdout)
kinds = collections.Counter(e["kind"] for e in ev)
out["episodes"] = dict(kinds)
out["episodes_per_hour"] = {k: round(v / hours, 1) for k, v in kinds.items()}
out["episode_seconds"] = round(sum((e["to_ns"] - e["from_ns"]) / 1e9 for e in ev))
print(json.dumps(out, indent=1))
