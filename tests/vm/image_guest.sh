#!/bin/bash
# Inside the systemd guest of tests/vm/image.sh: loads the OCI image into podman and plays the
# DaemonSet's pod template (/mnt/in/pod.yaml) as Kubernetes would run it: host PID namespace,
# the pod's own cgroup namespace, the host's cgroup tree and tracefs mounted read-only, a
# hostPath store, only the seven capabilities. Checks that the recorder in the container sees
# the host's processes and cgroups, names a CPU-limited container by its runtime name, and
# places its own process in its own container's cgroup.
. /mnt/in/checks.sh
IMAGE=$(ls /mnt/in/jitterscope-*.oci.tar)
# In the recorder's container: the image has no shell, only the binary.
js() { podman exec "$ctr" jitterscope "$@"; }

uname -r
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

# The workload the recorder must find: CPU-limited, so throttled, on the host's side.
check workload-run "podman run failed" \
  podman run -d -q --name checkout-api --network none --cpus 0.2 localhost/busybox:jsvm \
  /bin/busybox sh -c 'while :; do :; done'
wpid=$(podman inspect -f '{{.State.Pid}}' checkout-api)
echo "checkout-api: pid $wpid, $(cat /proc/$wpid/cgroup)"

mkdir -p /var/lib/jitterscope
require kube-play "podman kube play failed" podman kube play --network none /mnt/in/pod.yaml
podman ps -a --format '{{.Names}} {{.Image}} {{.Status}}'
ctr=$(podman ps --format '{{.Names}}' | grep -- '-record$' | head -1)
require recorder-running "no running container ends in -record: $(podman ps -a --format '{{.Names}} {{.Status}}')" \
  test -n "$ctr"
pid=$(podman inspect -f '{{.State.Pid}}' "$ctr")
echo "recorder: $ctr, host pid $pid"
grep -E '^(Uid|Cap|NoNewPrivs|NSpid)' "/proc/$pid/status"
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
check hostpid "the recorder is not in the host's PID namespace" \
  test "$(readlink /proc/$pid/ns/pid)" = "$(readlink /proc/1/ns/pid)"
check own-cgroupns "the recorder shares the host's cgroup namespace, unlike a Kubernetes pod" \
  test "$(readlink /proc/$pid/ns/cgroup)" != "$(readlink /proc/1/ns/cgroup)"
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

# The host's processes, by their host PIDs: the guest's init and the workload.
procs() { js dump --from '1h ago' --select "proc.$1.*" --format csv 2>/dev/null | head -2; }
check sees-host-init "no series of the host's pid 1 (systemd)" wait_for 'procs 1 | grep -q systemd' 10
check sees-workload "no series of checkout-api's pid $wpid" wait_for "procs $wpid | grep -q busybox" 10
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
rss=$(field "$pid" VmRSS)
echo "recorder RSS: $rss kB"

check kube-down "podman kube down failed" podman kube down /mnt/in/pod.yaml
check stopped-cleanly "the store does not check clean after the pod stopped" \
  podman run --rm --network none -v /var/lib/jitterscope:/var/lib/jitterscope "$ref" store check --dir /var/lib/jitterscope
podman rm -f -t 0 checkout-api >/dev/null
echo DONE >>"$OUT/checks"
