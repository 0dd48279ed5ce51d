#!/bin/bash
# Inside the systemd guest of tests/vm/image.sh: loads the OCI image into podman and plays the
# DaemonSet's pod template (/mnt/in/pod.yaml) as Kubernetes would run it: host PID namespace,
# the pod's own cgroup and UTS namespaces, the host's cgroup tree and tracefs mounted
# read-only, a hostPath store, only the seven capabilities, the manifest's memory limit, both
# exporters on (to the engines image.sh runs on the host, 10.0.2.100). Checks that the recorder
# in the container sees the host's processes and cgroups, names a CPU-limited container by its
# runtime name, places its own process in its own container's cgroup, records and exports
# under the node's name, closes and diagnoses the container's throttling episode into
# ClickHouse within its memory limit, and that the serve container answers the probes' path
# unprivileged.
. /mnt/in/checks.sh
IMAGE=$(ls /mnt/in/jitterscope-*.oci.tar)
# NODE, MEMORY_LIMIT, SERVE_UID, SERVE_GID, PROBE_PATH, METRICS_PORT: from the manifest.
. /mnt/in/manifest.env
# In the recorder's container: the image has no shell, only the binary.
js() { podman exec "$ctr" jitterscope "$@"; }
info() { echo "INFO $*" >>"$OUT/checks"; echo "== INFO $*"; }

uname -r
# The node is called what the manifest's spec.nodeName became (image.sh).
echo "$NODE" >/proc/sys/kernel/hostname
# slirp4netns, the pod's network, needs /dev/net/tun: the module comes in the share.
# (busybox insmod: the rootfs has no kmod.)
while read -r m; do busybox insmod "/mnt/in/modules/$m"; done </mnt/in/modules/order
dev=$(net_up)
require engines-reachable "VictoriaMetrics ($(http $ENGINES_VM/health)) or ClickHouse ($(ch 'SELECT 1')) does not answer from the guest" \
  wait_for '[ "$(http_get $ENGINES_VM/health)" = OK ] && [ "$(ch "SELECT 1")" = 1 ]' 20
# The systemd manager, podman's default and what kubelets mostly run.
podman_setup systemd
# Debian's kernels default to 3, where perf events need CAP_SYS_ADMIN; a node runs the
# DaemonSet with the kernel's own default, 2 (README: Run it in a container).
echo 2 >/proc/sys/kernel/perf_event_paranoid
busybox_image
require image-load "podman load failed" podman load -q -i "$IMAGE"
podman images
ref=$(podman images --format '{{.Repository}}:{{.Tag}}' | grep '/jitterscope:' | head -1)
require image-ref "the image is not localhost/jitterscope:<version> but '$ref'" \
  grep -qE '^localhost/jitterscope:[0-9]' <<<"$ref"
version=$(podman run --rm --network none "$ref" --version 2>&1)
echo "version: $version"
check image-runs "jitterscope --version in the image printed '$version'" grep -q '^jitterscope ' <<<"$version"
check image-no-shell "the image has a shell" bash -c "! podman run --rm --network none --entrypoint /bin/sh $ref -c true 2>/dev/null"

mkdir -p /var/lib/jitterscope
# The pod's network: slirp4netns, a user-mode stack for the pod's own network namespace that
# connects out through the node's sockets, so the pod reaches 10.0.2.100 as the node does and
# keeps namespaces of its own (network, UTS) as a Kubernetes pod does. Its own addresses are
# moved off 10.0.2.0/24, its default, where the pod itself would be 10.0.2.100. Not podman's
# bridge: netavark's NAT needs nft or iptables and a dozen modules this rootfs does not have,
# and without NAT qemu's network would not know the pod's addresses. Not pasta: podman 5
# refuses it to root ("only supported for rootless mode"). Not hostNetwork, which would share
# the node's network namespace (and, in Kubernetes, its host name).
require kube-play "podman kube play failed" \
  podman kube play --network slirp4netns:cidr=10.41.0.0/24 /mnt/in/pod.yaml
podman ps -a --format '{{.Names}} {{.Image}} {{.Status}}'
ctr=$(podman ps --format '{{.Names}}' | grep -- '-record$' | head -1)
require recorder-running "no running container ends in -record: $(podman ps -a --format '{{.Names}} {{.Status}}')" \
  test -n "$ctr"
pid=$(podman inspect -f '{{.State.Pid}}' "$ctr")
echo "recorder: $ctr, host pid $pid"
grep -E '^(Uid|Cap|NoNewPrivs|NSpid)' "/proc/$pid/status"
check hostpid "the recorder is not in the host's PID namespace" \
  test "$(readlink /proc/$pid/ns/pid)" = "$(readlink /proc/1/ns/pid)"
check own-cgroupns "the recorder shares the host's cgroup namespace, unlike a Kubernetes pod" \
  test "$(readlink /proc/$pid/ns/cgroup)" != "$(readlink /proc/1/ns/cgroup)"
pod_name=$(nsenter -t "$pid" -u cat /proc/sys/kernel/hostname)
echo "the pod's host name: $pod_name; the node's: $(hostname)"
check pod-uts "the recorder's host name is the node's ($pod_name), not the pod's own" \
  test "$pod_name" != "$NODE" -a -n "$pod_name" -a "$(hostname)" = "$NODE"
# CAP_DAC_READ_SEARCH 2, CAP_SYS_PTRACE 19, CAP_SYS_NICE 23, CAP_SYS_RESOURCE 24,
# CAP_SYSLOG 34, CAP_PERFMON 38, CAP_BPF 39
want=$(printf '%016x' $(( (1 << 2) | (1 << 19) | (1 << 23) | (1 << 24) | (1 << 34) | (1 << 38) | (1 << 39) )))
check recorder-caps "CapEff $(field "$pid" CapEff), want $want" test "$(field "$pid" CapEff)" = "$want"
check recorder-bounding "CapBnd $(field "$pid" CapBnd), want $want" test "$(field "$pid" CapBnd)" = "$want"

samples() { js dump --from '1h ago' --select cpu.usr_pct --format json 2>/dev/null | wc -l; }
require records "no 5 samples in the hostPath store within 120 s: $(samples)" \
  wait_for '[ "$(samples)" -ge 5 ]' 120
check store-on-host "the store is not in the host's /var/lib/jitterscope" \
  test -n "$(ls /var/lib/jitterscope | grep -v LOCK)"
logs=$(podman logs "$ctr" 2>&1)
echo "$logs"
check tracers-loaded "not all tracers run: $(grep -m1 'tracers running:' <<<"$logs")" \
  grep -q 'tracers running: reclaim, shrinker, tlb, madvise, runqlat, lookups' <<<"$logs"
check profiler-on "the log has no 'sampling stacks' line" grep -q 'sampling stacks' <<<"$logs"
check no-missing-caps "the recorder says it lacks a capability: $(grep -m1 'without CAP_' <<<"$logs")" \
  bash -c "! grep -q 'without CAP_' <<<\"\$1\"" _ "$logs"
check sockets-ip "the exporting recorder's sockets are not AF_UNIX, AF_NETLINK, AF_INET, AF_INET6: $(grep -m1 'sockets' <<<"$logs")" \
  grep -q 'sockets: AF_UNIX, AF_NETLINK, AF_INET, AF_INET6 only' <<<"$logs"

# The workload the recorder must find, started once it records: CPU-limited, so throttled on
# the host's side, for ~30 s; removed, its throttling episode closes and is diagnosed.
check workload-run "podman run failed" \
  podman run -d -q --name checkout-api --network none --cpus 0.2 localhost/busybox:jsvm \
  /bin/busybox sh -c 'while :; do :; done'
started=$(date +%s)
wpid=$(podman inspect -f '{{.State.Pid}}' checkout-api)
echo "checkout-api: pid $wpid, $(cat /proc/$wpid/cgroup)"
# What the recorder sees of cgroups from inside its cgroup namespace (a reader in it, which
# nsenter -C makes cat, gets paths relative to the namespace root), kept as the fixture of the
# namespace tests (JSVM_CAPTURE_FIXTURES=1 in image.sh copies it).
fx=$OUT/fixtures/pod
mkdir -p "$fx"
nsenter -t "$pid" -C cat "/proc/$pid/mountinfo" >"$fx/mountinfo"
nsenter -t "$pid" -C cat "/proc/$pid/cgroup" >"$fx/self_cgroup"
nsenter -t "$pid" -C cat "/proc/$wpid/cgroup" >"$fx/workload_cgroup"
cp "/proc/$pid/cgroup" "$fx/self_cgroup_host"
cp "/proc/$wpid/cgroup" "$fx/workload_cgroup_host"
echo "$pid" >"$fx/pid"
for f in "$fx"/*; do echo "== $(basename "$f")"; cat "$f"; done

# The host's processes, by their host PIDs: the guest's init and the workload. The header and
# the newest row (the workload started after the first).
procs() { js dump --from '1h ago' --select "proc.$1.*" --format csv 2>/dev/null | sed -n '1p;$p'; }
check sees-host-init "no series of the host's pid 1 (systemd)" wait_for 'procs 1 | grep -q systemd' 10
check sees-workload "no series of checkout-api's pid $wpid" wait_for "procs $wpid | grep -q busybox" 20
check sees-itself "no series of its own process, host pid $pid" wait_for "procs $pid | grep -q jitterscope" 10
# The culprit line joins the process (by its /proc/<pid>/cgroup, namespace-relative as the
# recorder reads it) to the cgroup (by the host's tree) and the cgroup to podman's name:
# "culprit: busybox (<pid>), cgroup <host path>, podman checkout-api (<id>)".
wcg=$(sed -n 's/^0:://p' "/proc/$wpid/cgroup")
diagnosis() { js diagnose --since 30s 2>&1; }
check container-named "diagnose does not name the throttled container checkout-api" \
  wait_for 'diagnosis | grep -q "podman checkout-api ("' 60
check process-in-container "diagnose does not place busybox ($wpid) in $wcg" \
  bash -c 'grep -qF "busybox ($1), cgroup $2, podman checkout-api (" <<<"$3"' _ "$wpid" "$wcg" "$(diagnosis)"
diagnosis
top_json() { js top --json-once 2>&1; }
check top-named "top's cgroup panel does not name checkout-api: $(top_json | grep -oE '"owner": ?"[^"]*"' | head -3)" \
  wait_for 'top_json | grep -qE "\"owner\": ?\"podman checkout-api \("' 20
shown_host=$(top_json | grep -m1 -oE '"hostname": ?"[^"]*"')
check samples-host "the samples' host is not $NODE: $shown_host" grep -qE "\"$NODE\"" <<<"$shown_host"
while [ $(( $(date +%s) - started )) -lt 30 ]; do sleep 1; done
podman rm -f -t 0 checkout-api >/dev/null

# --- the serve container, as the probes would ask it, from the node ---
sctr=$(podman ps --format '{{.Names}}' | grep -- '-serve$' | head -1)
spid=$(podman inspect -f '{{.State.Pid}}' "$sctr")
grep -E '^(Uid|Gid|Groups|Cap)' "/proc/$spid/status"
check serve-user "serve runs as $(field "$spid" Uid):$(field "$spid" Gid), not $SERVE_UID:$SERVE_GID" \
  test "$(field "$spid" Uid)" = "$SERVE_UID" -a "$(field "$spid" Gid)" = "$SERVE_GID"
check serve-nocaps "serve has CapEff $(field "$spid" CapEff), CapBnd $(field "$spid" CapBnd)" \
  test "$(field "$spid" CapEff)" = 0000000000000000 -a "$(field "$spid" CapBnd)" = 0000000000000000
port=http://127.0.0.1:$METRICS_PORT
check healthz "$PROBE_PATH on port $METRICS_PORT answers $(http $port$PROBE_PATH | head -c 100), not 200" \
  wait_for '[ "$(http $port$PROBE_PATH | cut -d" " -f1)" = 200 ]' 30
# (Piped: /metrics is larger than one argument may be.)
check serve-host "/metrics has no jitterscope_host_info{host=\"$NODE\"}: $(http_get $port/metrics | grep host_info)" \
  wait_for 'http_get $port/metrics | grep -q "^jitterscope_host_info{host=\"$NODE\""' 10
# The node's connection arrives in the pod from slirp4netns' side, not the pod's loopback, as
# a Prometheus' or any other client's would in a cluster: the UI and API are refused to it.
check api-refused "/api/v1/range from the node answers $(http $port/api/v1/range | head -c 100), not 403" \
  test "$(http $port/api/v1/range | cut -d' ' -f1)" = 403

# --- the engines: everything under the node's name ---
vm_series() { http_get "$ENGINES_VM/api/v1/series?match[]=$(urlenc "$1")"; }
check vm-host "no jitterscope_cpu_usr_ratio{host=\"$NODE\"} in VictoriaMetrics within 30 s: $(vm_series jitterscope_cpu_usr_ratio | head -c 300)" \
  wait_for 'vm_series "jitterscope_cpu_usr_ratio{host=\"$NODE\"}" | grep -q "\"host\":\"$NODE\""' 30
others=$(vm_series "{__name__=~\"jitterscope_.*\",host!=\"$NODE\"}")
check vm-only-host "VictoriaMetrics has series of another host: $(head -c 300 <<<"$others")" \
  test "$others" = '{"status":"success","data":[]}'
findings() { ch "SELECT count() FROM jitterscope_findings WHERE host = '$NODE' AND episode_kind = 'throttling'"; }
check ch-findings "no findings of a throttling episode of $NODE in ClickHouse within 120 s: episodes $(ch 'SELECT host, kind, open FROM jitterscope_episodes' | tr '\n' ' ')" \
  wait_for '[ "$(findings)" -gt 0 ] 2>/dev/null' 120
ch "SELECT host, episode_kind, rule_id, title FROM jitterscope_findings"
hosts=$(ch "SELECT DISTINCT host FROM jitterscope_hosts"; ch "SELECT DISTINCT host FROM jitterscope_episodes"; ch "SELECT DISTINCT host FROM jitterscope_findings")
check ch-only-host "ClickHouse's hosts are $(echo $hosts), not only $NODE" test "$(sort -u <<<"$hosts")" = "$NODE"

# --- within the manifest's memory limit: no OOM kill, no restart ---
cg=/sys/fs/cgroup$(sed -n 's/^0:://p' "/proc/$pid/cgroup")
# The limit is on the container's scope; crun runs the process in a child of it.
while [ "$cg" != /sys/fs/cgroup ] && [ "$(cat "$cg/memory.max" 2>/dev/null)" = max ]; do cg=${cg%/*}; done
echo "the recorder's limited cgroup: $cg"
grep -E 'oom|max' "$cg/memory.events"
check memory-limit "the recorder's memory.max is $(cat "$cg/memory.max"), not the manifest's $MEMORY_LIMIT_TEXT ($MEMORY_LIMIT)" \
  test "$(cat "$cg/memory.max")" = "$MEMORY_LIMIT"
check no-oom-kill "the recorder's cgroup had OOM kills: $(grep oom_kill "$cg/memory.events")" \
  grep -qx 'oom_kill 0' "$cg/memory.events"
check no-restart "the recorder restarted $(podman inspect -f '{{.RestartCount}}' "$ctr") times (OOMKilled $(podman inspect -f '{{.State.OOMKilled}}' "$ctr"))" \
  test "$(podman inspect -f '{{.RestartCount}} {{.State.OOMKilled}} {{.State.Pid}}' "$ctr")" = "0 false $pid"
stat_mib() { echo $(( $(awk -v k="$1" '$1 == k { print $2 }' "$cg/memory.stat") >> 20 )); }
info "the recorder's memory (its cgroup, page cache included): peak $(( $(cat "$cg/memory.peak") >> 20 )) MiB, now $(( $(cat "$cg/memory.current") >> 20 )) MiB (anon $(stat_mib anon), file $(stat_mib file)), process RssAnon $(( $(field "$pid" RssAnon) >> 10 )) MiB, limit $MEMORY_LIMIT_TEXT, after $(awk -v up="$(cut -d' ' -f1 /proc/uptime)" '{ print int(up - $22 / 100) }' "/proc/$pid/stat") s of recording"

check kube-down "podman kube down failed" podman kube down /mnt/in/pod.yaml
check stopped-cleanly "the store does not check clean after the pod stopped" \
  podman run --rm --network none -v /var/lib/jitterscope:/var/lib/jitterscope "$ref" store check --dir /var/lib/jitterscope
echo DONE >>"$OUT/checks"
