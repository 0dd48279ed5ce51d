#!/usr/bin/env python3
"""Writes the Grafana dashboards in this directory from the panel lists below: three over the
remote-write series (Prometheus data source) and, in clickhouse/, one over the episodes,
findings, stacks and inventory `record --clickhouse` pushes (ClickHouse data source).

    python3 deploy/grafana/generate.py

Every panel's query uses the names remote write sends (`record --remote-write`, base units,
one point per recorded second, a `host` label). `crates/cli/tests/remote_write_e2e.rs` runs
every query of every dashboard against a real Prometheus and VictoriaMetrics filled by a
recording: each must parse and return data.

A Prometheus that scrapes `serve`'s `/metrics` instead has the same names; give each target a
`host` label (relabel `instance`), and the dashboards work there too.
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
DS = {"type": "prometheus", "uid": "${datasource}"}
H = 'host=~"$host"'
HC = 'host=~"$host",cgroup=~"$cgroup"'
OWNER = "container_name, pod_name, pod_namespace, unit"


def panel(title, unit, targets, desc, kind="timeseries", w=12):
    return {"type": kind, "title": title, "description": desc, "unit": unit,
            "targets": targets, "w": w}


def t(expr, legend):
    return (expr, legend)


def named(expr):
    """`expr` with each cgroup's container, pod or unit name where it has one."""
    return f"({expr} * on(host, cgroup) group_left({OWNER}) jitterscope_cgroup_info) or {expr}"


HOST = {
    "uid": "jitterscope-host",
    "title": "jitterscope: host overview",
    "vars": ["host"],
    "panels": [
        panel("CPU: user, system, iowait", "percentunit", [
            t(f'jitterscope_cpu_usr_ratio{{{H},cpu=""}}', "{{host}} user"),
            t(f'jitterscope_cpu_sys_ratio{{{H},cpu=""}}', "{{host}} system"),
            t(f'jitterscope_cpu_iowait_ratio{{{H},cpu=""}}', "{{host}} iowait"),
        ], "Share of all CPUs, each recorded second (/proc/stat)."),
        panel("Run-queue latency p99 and max", "s", [
            t(f"jitterscope_runqlat_p99_seconds{{{H}}}", "{{host}} p99"),
            t(f"jitterscope_runqlat_max_seconds{{{H}}}", "{{host}} max"),
        ], "Wake-up to running, from the runqlat tracer's per-second histogram."),
        panel("Pressure stalls (PSI some)", "percentunit", [
            t(f"jitterscope_psi_some_ratio{{{H}}}", "{{host}} {{resource}}"),
        ], "Share of the second some task waited for CPU, memory or I/O (/proc/pressure)."),
        panel("Memory available", "bytes", [
            t(f"jitterscope_mem_available_bytes{{{H}}}", "{{host}}"),
        ], "MemAvailable (/proc/meminfo)."),
        panel("Direct reclaim and TLB shootdowns", "ops", [
            t(f"jitterscope_reclaim_allocstall_per_second{{{H}}}", "{{host}} allocstalls"),
            t(f"jitterscope_irq_tlb_per_second{{{H}}}", "{{host}} TLB IPIs"),
        ], "Allocation stalls (vmstat allocstall) and TLB-shootdown interrupts (/proc/interrupts TLB)."),
        panel("Top processes by CPU", "percentunit", [
            t(f"topk(10, jitterscope_proc_cpu_ratio{{{H}}})", "{{host}} {{comm}} ({{pid}})"),
        ], "Of one CPU; the recorder sends the 10 busiest and the 10 largest processes of each second."),
        panel("Hosts by worst run-queue p99 in the range", "s", [
            t(f"topk(20, max_over_time(jitterscope_runqlat_p99_seconds{{{H}}}[$__range]))", "{{host}}"),
        ], "The worst second of each host over the dashboard's range.", kind="table"),
        panel("The recorder's own CPU", "percentunit", [
            t(f"jitterscope_self_cpu_ratio{{{H}}}", "{{host}}"),
        ], "jitterscope's own CPU, of one CPU."),
    ],
}

CGROUPS = {
    "uid": "jitterscope-cgroups",
    "title": "jitterscope: cgroup CPU throttling",
    "vars": ["host", "cgroup"],
    "cgroups_of": "jitterscope_cgroup_cpu_usage_ratio",
    "panels": [
        panel("Throttled share of CFS periods", "percentunit", [
            t(named(f"topk(10, jitterscope_cgroup_cpu_throttled_ratio{{{HC}}})"),
              "{{host}} {{container_name}}{{unit}} {{cgroup}}"),
        ], "delta nr_throttled / delta nr_periods (cpu.stat), named by container, pod or unit where one owns the cgroup."),
        panel("Throttled time", "s", [
            t(f"topk(10, jitterscope_cgroup_cpu_throttled_seconds_per_second{{{HC}}})", "{{host}} {{cgroup}}"),
        ], "Seconds of throttling per second, summed over the cgroup's CPUs (throttled_usec)."),
        panel("CPU used against the quota", "none", [
            t(f"topk(10, jitterscope_cgroup_cpu_usage_ratio{{{HC}}})", "{{host}} {{cgroup}} used"),
            t(f"jitterscope_cgroup_cpu_quota_cores{{{HC}}}", "{{host}} {{cgroup}} quota"),
        ], "Cores used each second, and the CFS quota in cores (cpu.max / cfs_quota_us)."),
        panel("Run-queue latency p99 per cgroup", "s", [
            t(f"topk(10, jitterscope_runqlat_cgroup_p99_seconds{{{HC}}})", "{{host}} {{cgroup}}"),
        ], "Wake-up to running of the cgroup's tasks (runqlat tracer)."),
        panel("Cgroups by time throttled in the range", "s", [
            t(f"topk(20, sum_over_time(jitterscope_cgroup_cpu_throttled_seconds_per_second{{{HC}}}[$__range]))",
              "{{host}} {{cgroup}}"),
        ], "Seconds throttled over the dashboard's range: one point per recorded second.", kind="table"),
    ],
}

RECLAIM = {
    "uid": "jitterscope-reclaim",
    "title": "jitterscope: memory reclaim",
    "vars": ["host", "cgroup"],
    "cgroups_of": "jitterscope_cgroup_memory_usage_bytes",
    "panels": [
        panel("Memory pressure (PSI)", "percentunit", [
            t(f'jitterscope_psi_some_ratio{{{H},resource="memory"}}', "{{host}} some"),
            t(f'jitterscope_psi_full_ratio{{{H},resource="memory"}}', "{{host}} full"),
        ], "Share of the second some (all) tasks waited for memory."),
        panel("Pages scanned: direct reclaim and kswapd", "ops", [
            t(f"jitterscope_reclaim_pgscan_direct_per_second{{{H}}}", "{{host}} direct"),
            t(f"jitterscope_reclaim_pgscan_kswapd_per_second{{{H}}}", "{{host}} kswapd"),
        ], "vmstat pgscan_direct and pgscan_kswapd."),
        # A cgroup's reclaim series has a point only in the seconds it stalled, and remote write
        # ends it with a staleness marker in the others: an instant selector at each step of
        # a range query finds it only when the step falls on such a second, so a storm of
        # scattered stalls can show nothing. The worst second of each interval cannot miss.
        panel("Reclaim stalls per cgroup", "ops", [
            t(named("topk(10, max_over_time("
                    f"jitterscope_reclaim_cgroup_stalls_per_second{{{HC}}}[$__rate_interval]))"),
              "{{host}} {{container_name}}{{unit}} {{cgroup}}"),
        ], "Memory-cgroup and global reclaim stalls charged to each cgroup (reclaim tracer): the "
           "worst second of each interval (a cgroup has a point only in the seconds it stalled)."),
        panel("Reclaim stall p99 per cgroup", "s", [
            t("topk(10, max_over_time("
              f"jitterscope_reclaim_cgroup_stall_p99_seconds{{{HC}}}[$__rate_interval]))",
              "{{host}} {{cgroup}}"),
        ], "From the reclaim tracer's per-second histogram: the worst second of each interval."),
        panel("Cgroup memory against its limit", "percentunit", [
            t(f"topk(10, jitterscope_cgroup_memory_usage_of_limit_ratio{{{HC}}})", "{{host}} {{cgroup}}"),
        ], "memory.current / memory.max (usage_in_bytes / limit_in_bytes on v1)."),
        panel("Refaults and slab scanning", "ops", [
            t(f"jitterscope_reclaim_refault_file_per_second{{{H}}}", "{{host}} file refaults"),
            t(f"jitterscope_reclaim_slabs_scanned_per_second{{{H}}}", "{{host}} slab objects scanned"),
        ], "Page-cache thrash (workingset_refault_file) and shrinker work (slabs_scanned)."),
    ],
}


def variable(name, cgroups_of):
    if name == "host":
        q = "label_values(jitterscope_build_info, host)"
    else:
        # The cgroups of the hierarchy the dashboard is about: on a hybrid host the CPU and
        # memory hierarchies hold different cgroups, and a throttling dashboard listing the
        # memory ones offered cgroups none of its panels had (the throttled one missing).
        q = f'label_values({cgroups_of}{{host=~"$host"}}, cgroup)'
    return {"name": name, "label": name, "type": "query", "datasource": DS,
            "definition": q, "query": {"query": q, "refId": f"{name}-var"},
            "refresh": 2, "multi": True, "includeAll": True, "allValue": ".*",
            "current": {"text": "All", "value": "$__all"}, "sort": 1}


def dashboard(d):
    panels = []
    x = y = 0
    for i, p in enumerate(d["panels"]):
        w = 24 if p["type"] == "table" else p["w"]
        if x + w > 24:
            x, y = 0, y + 8
        targets = [{"refId": chr(65 + j), "datasource": DS, "expr": e, "legendFormat": legend,
                    "range": p["type"] != "table", "instant": p["type"] == "table"}
                   for j, (e, legend) in enumerate(p["targets"])]
        panels.append({"id": i + 1, "type": p["type"], "title": p["title"],
                       "description": p["description"], "datasource": DS,
                       "gridPos": {"h": 8, "w": w, "x": x, "y": y},
                       "fieldConfig": {"defaults": {"unit": p["unit"]}, "overrides": []},
                       "options": {}, "targets": targets})
        x += w
    templating = [{"name": "datasource", "label": "Prometheus", "type": "datasource",
                   "query": "prometheus", "current": {}}]
    templating += [variable(v, d.get("cgroups_of")) for v in d["vars"]]
    return {"uid": d["uid"], "title": d["title"], "tags": ["jitterscope"], "editable": True,
            "schemaVersion": 39, "version": 1, "refresh": "30s",
            "time": {"from": "now-1h", "to": "now"}, "timezone": "",
            "templating": {"list": templating}, "panels": panels, "annotations": {"list": []}}


# The episodes dashboard reads the tables `record --clickhouse` fills, through Grafana's
# ClickHouse data source (grafana-clickhouse-datasource). Its macros: $__fromTime and
# $__toTime are the range as DateTime; ${host:singlequote} the chosen hosts, quoted.
CH = {"type": "grafana-clickhouse-datasource", "uid": "${datasource}"}
HOSTS_IN = "host IN (${host:singlequote})"
IN_RANGE = "toDateTime(intDiv({col}, 1000000000)) BETWEEN $__fromTime AND $__toTime"
NEWEST = ("(host, taken_ns) IN (SELECT host, max(taken_ns) FROM jitterscope_hosts "
          f"WHERE {HOSTS_IN} GROUP BY host)")
LIBRARIES = ["glibc", "jemalloc", "tcmalloc", "mimalloc", "softokn", "python"]


def sql_panel(title, sql, desc, kind="table", w=24):
    return {"type": kind, "title": title, "description": desc, "sql": " ".join(sql.split()),
            "w": w}


EPISODES = {
    "uid": "jitterscope-episodes",
    "title": "jitterscope: episodes, causes and inventory across hosts",
    "panels": [
        sql_panel("Episodes started per minute, by kind", f"""
            SELECT toStartOfMinute(toDateTime(intDiv(start_ns, 1000000000))) AS t, kind,
                   count() AS started
            FROM (SELECT host, kind, series, start_ns FROM jitterscope_episodes
                  WHERE {HOSTS_IN} GROUP BY host, kind, series, start_ns)
            WHERE {IN_RANGE.format(col="start_ns")}
            GROUP BY t, kind ORDER BY t""",
            "Each episode once (its open and close rows are one), by the minute it started.",
            kind="timeseries"),
        sql_panel("Hosts by time in episode", f"""
            SELECT host, count() AS episodes,
                   sum(greatest(1, (last_end - start_ns) / 1e9)) AS seconds_in_episode,
                   sum(is_open) AS still_open, groupUniqArray(kind) AS kinds
            FROM (SELECT host, kind, series, start_ns, argMax(end_ns, version) AS last_end,
                         argMax(open, version) AS is_open
                  FROM jitterscope_episodes WHERE {HOSTS_IN}
                  GROUP BY host, kind, series, start_ns)
            WHERE {IN_RANGE.format(col="last_end")} OR is_open = 1
            GROUP BY host ORDER BY seconds_in_episode DESC LIMIT 50""",
            "As `jitterscope fleet episodes`: the hosts that spent the most time in episodes."),
        sql_panel("Root causes and culprits", f"""
            SELECT host, rule_id, count() AS explained, max(root) AS root_cause,
                   max(confidence) AS best_confidence,
                   groupUniqArrayIf(culprit_comm, culprit_comm != '') AS culprits,
                   groupUniqArrayIf(container, container != '') AS containers
            FROM jitterscope_findings FINAL
            WHERE {HOSTS_IN} AND {IN_RANGE.format(col="episode_end_ns")}
            GROUP BY host, rule_id
            ORDER BY root_cause DESC, explained DESC LIMIT 100""",
            "As `jitterscope fleet findings`: each host's diagnosed causes, root causes first."),
        sql_panel("Latest findings and what to change", f"""
            SELECT toDateTime(intDiv(episode_end_ns, 1000000000)) AS ended, host, rule_id,
                   title, culprit_comm, remediation[1] AS first_remedy
            FROM jitterscope_findings FINAL
            WHERE {HOSTS_IN} AND {IN_RANGE.format(col="episode_end_ns")} AND root = 1
            ORDER BY ended DESC LIMIT 50""",
            "The root causes of the closed episodes, newest first, with their first remediation."),
        sql_panel("Where the CPUs were during episodes", f"""
            SELECT splitByChar(';', stack)[1] AS process,
                   arrayElement(splitByChar(';', stack), -1) AS leaf_frame,
                   sum(samples) AS stack_samples
            FROM jitterscope_stacks FINAL
            WHERE {HOSTS_IN} AND {IN_RANGE.format(col="episode_end_ns")}
            GROUP BY process, leaf_frame ORDER BY stack_samples DESC LIMIT 30""",
            "The stacks sampled during episodes, by process and leaf function; `jitterscope fleet "
            "flame` draws them as one flame graph."),
        sql_panel("Hosts", f"""
            SELECT host, kernel, os, cgroup_layout, cpus, memory_bytes, processes,
                   jitterscope_version
            FROM jitterscope_hosts FINAL WHERE {NEWEST} ORDER BY host""",
            "Each host's newest inventory."),
        sql_panel("Library versions across hosts", " UNION ALL ".join(f"""
            SELECT '{lib}' AS library, assumeNotNull({lib}) AS library_version,
                   uniqExact(host) AS hosts, sum(processes) AS process_count
            FROM jitterscope_inventory FINAL WHERE {NEWEST} AND isNotNull({lib})
            GROUP BY library_version""" for lib in LIBRARIES),
            "The libraries the seeds' mechanisms live in, and how many hosts and processes map "
            "each version."),
        sql_panel("jemalloc 5.x purging at once (seed 5)", f"""
            SELECT host, comm, exe, container, processes, jemalloc, jemalloc_dirty_decay_ms,
                   env_values[indexOf(env_keys, 'MALLOC_CONF')] AS malloc_conf
            FROM jitterscope_inventory FINAL
            WHERE {NEWEST} AND startsWith(jemalloc, '5.') AND jemalloc_dirty_decay_ms = 0
            ORDER BY host""",
            "Processes whose jemalloc returns freed pages at once (madvise on every purge: "
            "TLB-shootdown storms); the fix is a decay such as dirty_decay_ms:10000 or -1."),
        sql_panel("NSS softokn without NSS_SDB_USE_CACHE (case 1)", f"""
            SELECT host, comm, exe, container, processes, softokn
            FROM jitterscope_inventory FINAL
            WHERE {NEWEST} AND isNotNull(softokn) AND NOT has(env_keys, 'NSS_SDB_USE_CACHE')
            ORDER BY host""",
            "Processes that load NSS softokn and will probe non-existent files on every database "
            "open (negative dentries); the fix is NSS_SDB_USE_CACHE=yes."),
    ],
}


def sql_dashboard(d):
    panels = []
    x = y = 0
    for i, p in enumerate(d["panels"]):
        w = p["w"]
        if x + w > 24:
            x, y = 0, y + 8
        # format 0: time series; 1: table.
        target = {"refId": "A", "datasource": CH, "queryType": "sql", "editorType": "sql",
                  "format": 0 if p["type"] == "timeseries" else 1, "rawSql": p["sql"]}
        panels.append({"id": i + 1, "type": p["type"], "title": p["title"],
                       "description": p["description"], "datasource": CH,
                       "gridPos": {"h": 8, "w": w, "x": x, "y": y},
                       "fieldConfig": {"defaults": {}, "overrides": []},
                       "options": {}, "targets": [target]})
        x += w
    q = "SELECT DISTINCT host FROM jitterscope_hosts ORDER BY host"
    templating = [
        {"name": "datasource", "label": "ClickHouse", "type": "datasource",
         "query": "grafana-clickhouse-datasource", "current": {}},
        {"name": "host", "label": "host", "type": "query", "datasource": CH,
         "definition": q, "query": q, "refresh": 2, "multi": True, "includeAll": True,
         "current": {"text": "All", "value": "$__all"}, "sort": 1},
    ]
    return {"uid": d["uid"], "title": d["title"], "tags": ["jitterscope"], "editable": True,
            "schemaVersion": 39, "version": 1, "refresh": "1m",
            "time": {"from": "now-24h", "to": "now"}, "timezone": "",
            "templating": {"list": templating}, "panels": panels, "annotations": {"list": []}}


if __name__ == "__main__":
    for name, d in [("host-overview", HOST), ("cgroup-throttling", CGROUPS), ("reclaim", RECLAIM)]:
        with open(os.path.join(HERE, f"{name}.json"), "w") as f:
            json.dump(dashboard(d), f, indent=2)
            f.write("\n")
    # Apart from the Prometheus ones: another data source, and another test runs it.
    os.makedirs(os.path.join(HERE, "clickhouse"), exist_ok=True)
    with open(os.path.join(HERE, "clickhouse", "episodes.json"), "w") as f:
        json.dump(sql_dashboard(EPISODES), f, indent=2)
        f.write("\n")
