#!/bin/bash
# Inside the systemd guest of tests/vm/deb.sh: installs the .deb from the share with dpkg and
# checks what an administrator relies on: the recorder runs as its own user with exactly its
# capabilities and records; a member of the jitterscope group reads the store and another user
# cannot; jitterscope-serve serves it without privileges; kill -9 loses nothing; remove stops
# and keeps the configuration; purge removes it and keeps the recordings unless
# JITTERSCOPE_PURGE_DATA=yes. One line per check in /mnt/out/checks ("PASS name" or
# "FAIL name: why"), then "DONE" if the script reached its end, and the guest powers off.
. /mnt/in/checks.sh
DEB=$(ls /mnt/in/jitterscope_*.deb)
main_pid() { systemctl show -p MainPID --value "$1"; }
# The minimal rootfs has no procps (pgrep).
jitterscope_pids() {
  local p
  for p in /proc/[0-9]*; do
    [ "$(stat -c %U "$p" 2>/dev/null)" = jitterscope ] && echo "${p#/proc/}"
  done
}
samples_as() {
  runuser -u "$1" -- jitterscope dump --from '1h ago' --select cpu.usr_pct --format json 2>/dev/null | wc -l
}

uname -r
paranoid_before=$(cat /proc/sys/kernel/perf_event_paranoid)
echo "kernel.perf_event_paranoid: $paranoid_before"
echo "installing $DEB"
check dpkg-install "dpkg -i failed" dpkg -i "$DEB"

# --- what the postinst made ---
uid=$(id -u jitterscope 2>/dev/null || echo none)
check system-user "jitterscope is not a system user (uid $uid)" test "$uid" != none -a "$uid" -lt 1000 2>/dev/null
check no-login "jitterscope has a login shell" test "$(getent passwd jitterscope | cut -d: -f7)" = /usr/sbin/nologin
st=$(stat -c '%U:%G %a' /var/lib/jitterscope 2>&1)
check store-dir "/var/lib/jitterscope is $st, not jitterscope:jitterscope 750" test "$st" = "jitterscope:jitterscope 750"
paranoid=$(cat /proc/sys/kernel/perf_event_paranoid)
check paranoid "kernel.perf_event_paranoid went from $paranoid_before to $paranoid, not 2" test "$paranoid" = 2
check conffile "/etc/jitterscope/jitterscope.toml missing" test -f /etc/jitterscope/jitterscope.toml
check config-valid "jitterscope config check fails on the installed file" jitterscope config check
check man-page "man jitterscope-record does not show the page: $(MANPAGER=cat man jitterscope-record 2>&1 | head -3)" \
  bash -c 'MANPAGER=cat man jitterscope-record 2>/dev/null | grep -q "jitterscope-record"'
check man-page-config "man 5 jitterscope.toml does not show the page" \
  bash -c 'MANPAGER=cat man 5 jitterscope.toml 2>/dev/null | grep -q "profile_hz"'
# What bash offers for `jitterscope re<TAB>`, from the installed completion script.
completes() {
  bash -c 'source /usr/share/bash-completion/completions/jitterscope
    COMP_WORDS=(jitterscope "$1"); COMP_CWORD=1; COMP_LINE="jitterscope $1"; COMP_POINT=${#COMP_LINE}
    _jitterscope jitterscope "$1" jitterscope; echo "${COMPREPLY[*]}"' _ "$1"
}
echo "jitterscope re<TAB>: $(completes re)"
check completion "jitterscope re<TAB> offers '$(completes re)', not record and replay" \
  bash -c '[ "$(echo $1 | tr " " "\n" | sort | paste -sd " ")" = "record replay" ]' _ "$(completes re)"
check record-enabled "jitterscope.service is $(systemctl is-enabled jitterscope 2>&1), not enabled" \
  test "$(systemctl is-enabled jitterscope 2>&1)" = enabled
check serve-disabled "jitterscope-serve.service is $(systemctl is-enabled jitterscope-serve 2>&1), not disabled" \
  test "$(systemctl is-enabled jitterscope-serve 2>&1)" = disabled

# --- the recorder, started as an administrator would ---
systemctl stop jitterscope
systemctl start jitterscope
check record-active "jitterscope.service is $(systemctl is-active jitterscope)" \
  wait_for '[ "$(systemctl is-active jitterscope)" = active ]' 20
pid=$(main_pid jitterscope)
echo "record: pid $pid"
grep -E '^(Uid|Gid|Groups|Cap|NoNewPrivs)' "/proc/$pid/status"
check record-uid "record runs as uid $(field "$pid" Uid), not jitterscope's $uid" test "$(field "$pid" Uid)" = "$uid"
# CAP_DAC_READ_SEARCH 2, CAP_SYS_PTRACE 19, CAP_SYS_NICE 23, CAP_SYS_RESOURCE 24,
# CAP_SYSLOG 34, CAP_PERFMON 38, CAP_BPF 39
want=$(printf '%016x' $(( (1 << 2) | (1 << 19) | (1 << 23) | (1 << 24) | (1 << 34) | (1 << 38) | (1 << 39) )))
check record-caps "CapEff $(field "$pid" CapEff), want $want" test "$(field "$pid" CapEff)" = "$want"
check record-bounding "CapBnd $(field "$pid" CapBnd), want $want" test "$(field "$pid" CapBnd)" = "$want"
check record-nnp "NoNewPrivs is $(field "$pid" NoNewPrivs)" test "$(field "$pid" NoNewPrivs)" = 1
# Its sandbox must leave it what names frames: /proc/kallsyms (kernel frames, shrinkers, TLB
# senders) and the host's /tmp (JIT runtimes' perf-<pid>.map).
check sees-kallsyms "/proc/kallsyms is empty or hidden in the recorder's namespace" \
  bash -c "head -c 64 /proc/$pid/root/proc/kallsyms | grep -q ." 
touch /tmp/perf-jsvm-marker.map
check sees-tmp "the recorder has a /tmp of its own" test -e "/proc/$pid/root/tmp/perf-jsvm-marker.map"

useradd --create-home alice
usermod -a -G jitterscope alice
useradd --create-home bob
check records "no 5 samples readable by alice (jitterscope group) within 120 s: $(samples_as alice)" \
  wait_for '[ "$(samples_as alice)" -ge 5 ]' 120
echo "alice reads $(samples_as alice) samples"
out=$(runuser -u bob -- jitterscope dump --from '1h ago' --select cpu.usr_pct 2>&1); rc=$?
echo "bob: rc $rc: $out"
check others-denied "bob (not in the group) was not refused for permission: rc $rc: $out" \
  bash -c '[ "$1" != 0 ] && grep -q "Permission denied" <<<"$2"' _ "$rc" "$out"
journal=$(journalctl -b -u jitterscope --no-pager -o cat)
echo "$journal"
check tracers-loaded "not all tracers run: $(grep -m1 'tracers running:' <<<"$journal")" \
  grep -q 'tracers running: reclaim, shrinker, tlb, madvise, runqlat, lookups' <<<"$journal"
check profiler-on "the journal has no 'sampling stacks' line" grep -q 'sampling stacks' <<<"$journal"
check no-missing-caps "the recorder says it lacks a capability: $(grep -m1 'without CAP_' <<<"$journal")" \
  bash -c "! grep -q 'without CAP_' <<<\"\$1\"" _ "$journal"

# --- a container named as podman names it: a throttled one, diagnosed by its name ---
# cgroupfs gives /libpod_parent/libpod-<id>, another of the layouts the recorder identifies
# (tests/vm/image.sh runs podman's default, systemd: machine.slice/libpod-<id>.scope).
podman_setup cgroupfs
busybox_image
check podman-run "podman run failed" \
  podman run -d -q --name checkout-api --network none --cpus 0.2 localhost/busybox:jsvm \
  /bin/busybox sh -c 'while :; do :; done'
cpid=$(podman inspect -f '{{.State.Pid}}' checkout-api)
cat "/proc/$cpid/cgroup"
# The files the name comes from, kept as fixtures (JSVM_CAPTURE_FIXTURES=1 in deb.sh copies them).
fx=$OUT/fixtures/podman
mkdir -p "$fx/var/lib/containers/storage/vfs-containers"
cp /var/lib/containers/storage/vfs-containers/containers.json "$fx/var/lib/containers/storage/vfs-containers/"
cp "/proc/$cpid/cgroup" "$fx/proc_pid_cgroup"
podman inspect -f '{{.Id}} {{.Name}}' checkout-api >"$fx/podman_inspect"
diagnosis() { runuser -u alice -- jitterscope diagnose --since 30s 2>&1; }
check container-named "diagnose does not name the throttled container checkout-api (its report is in guest.log)" \
  wait_for 'diagnosis | grep -q "podman checkout-api ("' 60
diagnosis
# The live screen's cgroup panel names it too (its --json-once is the screen's content).
top_json() { runuser -u alice -- jitterscope top --json-once 2>&1; }
check top-named "top's cgroup panel does not name checkout-api: $(top_json | grep -oE '"owner": ?"[^"]*"' | head -3)" \
  wait_for 'top_json | grep -qE "\"owner\": ?\"podman checkout-api \("' 20
podman rm -f -t 0 checkout-api >/dev/null

# --- kill -9: systemd restarts it, and every sample recorded before the kill stays readable ---
until_kill() {
  runuser -u alice -- jitterscope dump --from '1h ago' --to "$1" --select cpu.usr_pct --format json 2>/dev/null | wc -l
}
killed_at=$(date +%s)
before=$(until_kill "$killed_at")
kill -9 "$pid"
check restarted "no new recorder 30 s after kill -9 of $pid" \
  wait_for '[ "$(systemctl is-active jitterscope)" = active ] && [ "$(main_pid jitterscope)" != "$pid" ] && [ "$(main_pid jitterscope)" != 0 ]' 30
check nothing-lost "$before samples up to the kill, $(until_kill "$killed_at") after it" \
  test "$(until_kill "$killed_at")" -ge "$before" -a "$before" -gt 0
check records-again "no sample after the restart within 60 s" \
  wait_for '[ "$(samples_as alice)" -gt "$(until_kill "$killed_at")" ]' 60
check store-check "jitterscope store check fails after kill -9" runuser -u alice -- jitterscope store check

# --- the web UI and /metrics, unprivileged ---
systemctl start jitterscope-serve
check serve-active "jitterscope-serve.service is $(systemctl is-active jitterscope-serve)" \
  wait_for '[ "$(systemctl is-active jitterscope-serve)" = active ]' 20
metrics() {
  python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:9630/metrics", timeout=10).read().decode())' 2>/dev/null
}
check serve-metrics "/metrics on 127.0.0.1:9630 has no jitterscope_ series" \
  wait_for 'metrics | grep -q "^jitterscope_"' 60
spid=$(main_pid jitterscope-serve)
grep -E '^(Uid|Cap)' "/proc/$spid/status"
suid=$(field "$spid" Uid)
check serve-user "serve runs as uid '$suid' (none, root or the recorder's user)" \
  test -n "$suid" -a "$suid" != 0 -a "$suid" != "$uid"
check serve-nocaps "serve has CapEff $(field "$spid" CapEff)" test "$(field "$spid" CapEff)" = 0000000000000000
journalctl -b -u jitterscope-serve --no-pager -o cat

# --- upgrade (the same package again): both enabled services restarted on the new binary ---
systemctl enable jitterscope-serve
rpid=$(main_pid jitterscope)
check dpkg-upgrade "dpkg -i over the installed package failed" dpkg -i "$DEB"
check upgrade-restarts "after the upgrade: record $(systemctl is-active jitterscope) pid $(main_pid jitterscope) (was $rpid), serve $(systemctl is-active jitterscope-serve) pid $(main_pid jitterscope-serve) (was $spid)" \
  wait_for '[ "$(systemctl is-active jitterscope)" = active ] && [ "$(systemctl is-active jitterscope-serve)" = active ] && [ "$(main_pid jitterscope)" != "$rpid" ] && [ "$(main_pid jitterscope-serve)" != "$spid" ]' 30

# --- Debian's own kernel.perf_event_paranoid: the recorder says what it loses and how to fix it
echo 3 >/proc/sys/kernel/perf_event_paranoid
since=$(date '+%Y-%m-%d %H:%M:%S')
systemctl restart jitterscope
check paranoid-warning "no warning about kernel.perf_event_paranoid 3 in the journal" \
  wait_for 'journalctl -u jitterscope --since "$since" -o cat | grep -q "kernel.perf_event_paranoid is 3: above 2"' 60
journalctl -u jitterscope --since "$since" -o cat | grep paranoid
/lib/systemd/systemd-sysctl
check sysctl-file "systemd-sysctl left kernel.perf_event_paranoid at $(cat /proc/sys/kernel/perf_event_paranoid)" \
  test "$(cat /proc/sys/kernel/perf_event_paranoid)" = 2
systemctl restart jitterscope

# --- remove: stopped, binary gone, configuration kept ---
check dpkg-remove "dpkg -r failed" dpkg -r jitterscope
check removed-stopped "a process still runs as jitterscope: $(jitterscope_pids)" test -z "$(jitterscope_pids)"
check removed-binary "/usr/bin/jitterscope is still there" test ! -e /usr/bin/jitterscope
check removed-keeps-config "remove deleted the conffile" test -f /etc/jitterscope/jitterscope.toml

# --- purge: configuration and units gone, recordings and their owner kept ---
check dpkg-purge "dpkg -P failed" dpkg -P jitterscope
check purged-config "/etc/jitterscope is still there" test ! -e /etc/jitterscope
check purged-units "jitterscope units are still known: $(systemctl list-unit-files 'jitterscope*' --no-legend)" \
  test -z "$(systemctl list-unit-files 'jitterscope*' --no-legend)"
check purge-keeps-data "the recordings are gone after a plain purge" \
  test -n "$(ls /var/lib/jitterscope 2>/dev/null | grep -v LOCK)"
check purge-keeps-user "the jitterscope user is gone after a plain purge" getent passwd jitterscope

# --- reinstall over the kept store, then purge it all ---
check reinstall "dpkg -i over the kept store failed" dpkg -i "$DEB"
check reinstall-records "the reinstalled recorder is $(systemctl is-active jitterscope)" \
  wait_for '[ "$(systemctl is-active jitterscope)" = active ]' 20
check purge-data "JITTERSCOPE_PURGE_DATA=yes dpkg -P failed" env JITTERSCOPE_PURGE_DATA=yes dpkg -P jitterscope
check purged-data "/var/lib/jitterscope is still there" test ! -e /var/lib/jitterscope
check purged-user "the jitterscope user is still there" bash -c '! getent passwd jitterscope'
check purged-group "the jitterscope group is still there" bash -c '! getent group jitterscope'

echo DONE >>"$OUT/checks"
