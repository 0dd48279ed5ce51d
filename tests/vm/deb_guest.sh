#!/bin/bash
# Inside the systemd guest of tests/vm/deb.sh: installs the .deb from the share with dpkg and
# checks what an administrator relies on: the recorder runs as its own user with exactly its
# capabilities and records; configured only through /etc/jitterscope/jitterscope.toml, it
# sends to the real VictoriaMetrics and ClickHouse deb.sh runs on the host (10.0.2.100, qemu's
# user-mode network) under the configured host name, and an outage of 30 s loses no second; a
# member of the jitterscope group reads the store and another user cannot; command lines are
# stored with their secrets masked; jitterscope-serve serves it without privileges; kill -9
# and a stall (the watchdog) lose nothing; warnings are journald warnings; remove stops and
# keeps the configuration and the recordings, which a reinstall finds; purge removes them and
# the user. One line per check in /mnt/out/checks ("PASS name" or
# "FAIL name: why"; "INFO" lines are printed by deb.sh), then "DONE" if the script reached
# its end, and the guest powers off.
. /mnt/in/checks.sh
DEB=$(ls /mnt/in/jitterscope_*.deb)
# The name the configuration gives this host, not its kernel's (`vm`).
HOST=deb-node-7
main_pid() { systemctl show -p MainPID --value "$1"; }
info() { echo "INFO $*" >>"$OUT/checks"; echo "== INFO $*"; }
# The exposure level systemd-analyze gives a unit (its last line: "→ Overall exposure level for
# jitterscope.service: 4.2 OK :-)"), by name or (--offline) from a unit file.
exposure() { systemd-analyze security --no-pager "$@" 2>&1 | sed -n 's/.*Overall exposure level for [^:]*: //p' | tail -1; }
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
check completion "jitterscope re<TAB> offers '$(completes re)', not record, replay and report" \
  bash -c '[ "$(echo $1 | tr " " "\n" | sort | paste -sd " ")" = "record replay report" ]' _ "$(completes re)"
check record-enabled "jitterscope.service is $(systemctl is-enabled jitterscope 2>&1), not enabled" \
  test "$(systemctl is-enabled jitterscope 2>&1)" = enabled
check serve-disabled "jitterscope-serve.service is $(systemctl is-enabled jitterscope-serve 2>&1), not disabled" \
  test "$(systemctl is-enabled jitterscope-serve 2>&1)" = disabled
check notify-type "jitterscope.service is Type=$(systemctl show -p Type --value jitterscope), not notify" \
  test "$(systemctl show -p Type --value jitterscope)" = notify
# Nothing exported by the installed configuration: the recorder's own filter leaves it no IP.
check sockets-narrow "the installed recorder did not narrow its sockets to AF_UNIX, AF_NETLINK: $(journalctl -u jitterscope -o cat | grep -m1 'sockets:')" \
  wait_for 'journalctl -u jitterscope -o cat | grep -q "sockets: AF_UNIX, AF_NETLINK only"' 60

# --- how exposed the units are (systemd-analyze security), with the recorder's unit before
# it allowed IP (fe85fef, which deb.sh put in the share) for comparison ---
new_rec=$(exposure jitterscope.service)
new_srv=$(exposure jitterscope-serve.service)
old_off="(not in the share)"
if [ -f /mnt/in/jitterscope-fe85fef.service ]; then
  cp /mnt/in/jitterscope-fe85fef.service /tmp/jitterscope.service
  old_off=$(exposure --offline=true /tmp/jitterscope.service)
fi
new_off=$(exposure --offline=true /lib/systemd/system/jitterscope.service)
info "exposure jitterscope.service: $new_rec (offline, this unit file: $new_off; fe85fef's unit file: $old_off)"
info "exposure jitterscope-serve.service: $new_srv"
check security-scored "systemd-analyze security gave no exposure level: recorder '$new_rec', serve '$new_srv', fe85fef's '$old_off', offline '$new_off'" \
  test -n "$new_rec" -a -n "$new_srv" -a -n "$old_off" -a -n "$new_off"

# --- the engines on the host, reached as 10.0.2.100 through qemu (nothing else leaves) ---
dev=$(net_up)
require engines-reachable "VictoriaMetrics ($(http $ENGINES_VM/health)) or ClickHouse ($(ch 'SELECT 1')) does not answer from the guest" \
  wait_for '[ "$(http_get $ENGINES_VM/health)" = OK ] && [ "$(ch "SELECT 1")" = 1 ]' 20
check no-other-route "a connection to 1.1.1.1:80 left the guest" \
  bash -c '! timeout 5 bash -c "exec 3<>/dev/tcp/1.1.1.1/80" 2>/dev/null'

# --- configured as an operator does: the file, then a restart ---
conf=/etc/jitterscope/jitterscope.toml
require one-record-table "$conf has $(grep -c '^\[record\]' $conf) [record] tables" test "$(grep -c '^\[record\]' $conf)" = 1
sed -i "/^\[record\]/a host = \"$HOST\"\nremote-write = \"$ENGINES_VM/api/v1/write\"\nclickhouse = \"$ENGINES_CH/\"" "$conf"
sed -n '/^\[record\]/,+3p' "$conf"
check config-edited-valid "jitterscope config check refuses the edited file: $(jitterscope config check 2>&1)" jitterscope config check
check host-not-kernel "the kernel's host name is $HOST already" test "$(hostname)" != "$HOST"

# --- the recorder, restarted as an administrator would ---
since=$(date '+%Y-%m-%d %H:%M:%S')
systemctl restart jitterscope
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
check sockets-ip "the configured recorder's sockets are not AF_UNIX, AF_NETLINK, AF_INET, AF_INET6: $(journalctl -u jitterscope --since "$since" -o cat | grep -m1 'sockets:')" \
  grep -q 'sockets: AF_UNIX, AF_NETLINK, AF_INET, AF_INET6 only' <(journalctl -u jitterscope --since "$since" -o cat)

# --- a container named as podman names it: a throttled one, diagnosed by its name ---
# cgroupfs gives /libpod_parent/libpod-<id>, another of the layouts the recorder identifies
# (tests/vm/image.sh runs podman's default, systemd: machine.slice/libpod-<id>.scope).
# Its command line carries secrets, which must be recorded masked: as a busy process it is
# among the processes the recorder keeps.
podman_setup cgroupfs
busybox_image
check podman-run "podman run failed" \
  podman run -d -q --name checkout-api --network none --cpus 0.2 localhost/busybox:jsvm \
  /bin/busybox sh -c 'while :; do :; done' x --password=hunter2 --token hunter3 'http://u:hunter4@h/'
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
shown=$(top_json | grep -F '"cmdline": "/bin/busybox sh -c while')
echo "top shows: $shown"
check secret-masked "top (as alice) does not show checkout-api's command line masked: $shown" \
  bash -c 'grep -qF -- "x --password=*** --token *** http://u:***@h/" <<<"$1" && ! grep -q hunter <<<"$1"' _ "$shown"
podman rm -f -t 0 checkout-api >/dev/null

# --- the engines: everything under the configured name ---
vm_series() { http_get "$ENGINES_VM/api/v1/series?match[]=$(urlenc "$1")"; }
check vm-host "no jitterscope_cpu_usr_ratio{host=\"$HOST\"} in VictoriaMetrics within 60 s: $(vm_series jitterscope_cpu_usr_ratio)" \
  wait_for 'vm_series "jitterscope_cpu_usr_ratio{host=\"$HOST\"}" | grep -q "\"host\":\"$HOST\""' 60
others=$(vm_series "{__name__=~\"jitterscope_.*\",host!=\"$HOST\"}")
check vm-only-host "VictoriaMetrics has series of another host: $(head -c 300 <<<"$others")" \
  test "$others" = '{"status":"success","data":[]}'
check ch-inventory "no inventory of $HOST in ClickHouse within 60 s: hosts $(ch 'SELECT host, count() FROM jitterscope_hosts GROUP BY host' | tr '\n' ' ')" \
  wait_for '[ "$(ch "SELECT count() FROM jitterscope_inventory WHERE host = '"'$HOST'"'")" -gt 0 ] 2>/dev/null' 60
check ch-episode "no throttling episode of $HOST in ClickHouse within 60 s: $(ch 'SELECT host, kind, open FROM jitterscope_episodes' | tr '\n' ' ')" \
  wait_for '[ "$(ch "SELECT count() FROM jitterscope_episodes WHERE host = '"'$HOST'"' AND kind = '"'throttling'"'")" -gt 0 ] 2>/dev/null' 60
check ch-only-host "ClickHouse has rows of another host: $(ch "SELECT DISTINCT host FROM jitterscope_hosts" | tr '\n' ' ')/$(ch "SELECT DISTINCT host FROM jitterscope_episodes" | tr '\n' ' ')" \
  test "$(ch "SELECT DISTINCT host FROM jitterscope_hosts"; ch "SELECT DISTINCT host FROM jitterscope_episodes")" = "$HOST
$HOST"
# No table holds the masked secrets (each dumped whole).
ch_all() { local t; for t in $(ch "SHOW TABLES"); do case $t in jitterscope_*) ch "SELECT * FROM $t FORMAT JSONEachRow" ;; esac; done; }
all=$(ch_all)
check ch-no-secret "ClickHouse holds hunter (of $(wc -l <<<"$all") rows): $(grep -i -m1 -o '.\{60\}hunter.\{20\}' <<<"$all")" \
  test -n "$all" -a "$(grep -ci hunter <<<"$all")" = 0

# --- the store's modes under the service, whatever the umask: 0750 directories, 0640 files,
# the exporters' cursors 0600 ---
store=/var/lib/jitterscope
check cursors "no remote-write.json and clickhouse.json in the store within 30 s: $(ls $store)" \
  wait_for '[ -f $store/remote-write.json ] && [ -f $store/clickhouse.json ]' 30
stat -c '%a %U:%G %n' $store $store/*
odd=$(find $store \( -type d ! -perm 0750 \) -o \( -type f ! -name remote-write.json ! -name clickhouse.json ! -perm 0640 \) -o \( -type f \( -name remote-write.json -o -name clickhouse.json \) ! -perm 0600 \) -printf '%m %p, ')
check store-modes "modes other than 0750 (directories), 0640 (files), 0600 (cursors): $odd" test -z "$odd"

# --- an outage of 30 s: the link down, so neither engine answers; the store is the
# write-ahead log, and every second it holds over the outage reaches VictoriaMetrics after it.
# The serve, kill -9 and watchdog checks run meanwhile (the recorder is restarted twice in the
# outage, so the resumption from the cursor file is part of what is checked). ---
down_at=$(date +%s)
busybox ip link set "$dev" down
echo "link $dev down at $down_at"

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
# (Piped: /metrics is larger than one argument may be.)
check serve-host "/metrics has no jitterscope_host_info{host=\"$HOST\"}: $(metrics | grep host_info)" \
  wait_for 'metrics | grep -q "^jitterscope_host_info{host=\"$HOST\""' 10
check serve-healthz "/healthz answers $(http http://127.0.0.1:9630/healthz | head -c 100), not 200" \
  test "$(http http://127.0.0.1:9630/healthz | cut -d' ' -f1)" = 200
journalctl -b -u jitterscope-serve --no-pager -o cat

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

# --- a stalled recorder: the sampling loop stops feeding the watchdog, systemd kills it
# (SIGABRT, fatal to a stopped process too) and Restart=always starts another. WatchdogSec=10s
# for the test only: the unit's two minutes are its tolerance of a saturated host; the
# mechanism is the same. ---
mkdir -p /etc/systemd/system/jitterscope.service.d
printf '[Service]\nWatchdogSec=10s\n' >/etc/systemd/system/jitterscope.service.d/watchdog.conf
systemctl daemon-reload
systemctl restart jitterscope
check watchdog-armed "WatchdogUSec is $(systemctl show -p WatchdogUSec --value jitterscope), not 10s" \
  wait_for '[ "$(systemctl is-active jitterscope)" = active ] && [ "$(systemctl show -p WatchdogUSec --value jitterscope)" = 10s ]' 30
stalled=$(main_pid jitterscope)
since=$(date '+%Y-%m-%d %H:%M:%S')
kill -STOP "$stalled"
check watchdog-restarts "no new recorder 60 s after SIGSTOP of $stalled: $(systemctl is-active jitterscope), pid $(main_pid jitterscope)" \
  wait_for '[ "$(systemctl is-active jitterscope)" = active ] && [ "$(main_pid jitterscope)" != "$stalled" ] && [ "$(main_pid jitterscope)" != 0 ]' 60
journalctl -u jitterscope --since "$since" -o cat | grep -iE 'watchdog|killing|abort' | head -5
check watchdog-said "the journal does not say the watchdog fired" \
  grep -q 'Watchdog timeout' <(journalctl -u jitterscope --since "$since" -o cat)
# The drop-in gone, the unit's own two minutes again (a restart applies it).
rm -r /etc/systemd/system/jitterscope.service.d
systemctl daemon-reload
systemctl restart jitterscope
check watchdog-restored "WatchdogUSec is $(systemctl show -p WatchdogUSec --value jitterscope), not 2min" \
  test "$(systemctl show -p WatchdogUSec --value jitterscope)" = 2min

while [ $(( $(date +%s) - down_at )) -lt 30 ]; do sleep 1; done
busybox ip link set "$dev" up
busybox ip route add default via 10.0.2.2 dev "$dev" 2>/dev/null
up_at=$(date +%s)
echo "link $dev up at $up_at"
check outage-seen "the recorder did not warn that remote write failed during the outage" \
  bash -c 'journalctl -u jitterscope -p warning --since "@$1" -o cat | grep -q "remote write: .*will retry"' _ "$down_at"
# Every second the store holds from 10 s before the outage to 10 s after it, as VictoriaMetrics
# holds it (its raw points, by their millisecond time stamps).
backfilled() {
  python3 - "$((down_at - 10))" "$((up_at + 10))" "$HOST" "$down_at" "$up_at" <<'EOF'
import json, subprocess, sys, urllib.parse, urllib.request
frm, to, host, down, up = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
out = subprocess.run(["runuser", "-u", "alice", "--", "jitterscope", "dump", "--from", str(frm),
                      "--to", str(to), "--select", "cpu.usr_pct", "--format", "json"],
                     capture_output=True, text=True, check=True).stdout
stored = set()
for line in out.splitlines():
    d = json.loads(line)
    if "cpu.usr_pct" in d["values"]:
        stored.add(d["ts_ns"] // 1_000_000)
vm = "http://10.0.2.100:8428"
urllib.request.urlopen(vm + "/internal/force_flush", timeout=10).read()
q = urllib.parse.urlencode({"match[]": 'jitterscope_cpu_usr_ratio{host="%s"}' % host,
                            "start": frm - 5, "end": to + 5})
got = set()
for line in urllib.request.urlopen(vm + "/api/v1/export?" + q, timeout=10).read().decode().splitlines():
    got.update(json.loads(line)["timestamps"])
during = [t for t in stored if down * 1000 <= t < up * 1000]
missing = sorted(stored - got)
print(f"{len(stored)} seconds stored from {frm} to {to} ({len(during)} during the outage), "
      f"{len(stored & got)} of them in VictoriaMetrics; missing: {missing[:5]}")
# The outage has two restarts (kill -9, the watchdog's stall): still seconds recorded in it.
sys.exit(0 if len(during) >= 10 and not missing else 1)
EOF
}
check outage-backfilled "not every second recorded over the outage is in VictoriaMetrics within 90 s: $(backfilled)" \
  wait_for '[ $(date +%s) -gt $((up_at + 10)) ] && backfilled >/dev/null 2>&1' 90
backfilled

# --- upgrade (the same package again): both enabled services restarted on the new binary,
# on the same store, which goes on growing ---
systemctl enable jitterscope-serve
rpid=$(main_pid jitterscope)
upgraded_at=$(date +%s)
before=$(until_kill "$upgraded_at")
check dpkg-upgrade "dpkg -i over the installed package failed" dpkg -i "$DEB"
check upgrade-restarts "after the upgrade: record $(systemctl is-active jitterscope) pid $(main_pid jitterscope) (was $rpid), serve $(systemctl is-active jitterscope-serve) pid $(main_pid jitterscope-serve) (was $spid)" \
  wait_for '[ "$(systemctl is-active jitterscope)" = active ] && [ "$(systemctl is-active jitterscope-serve)" = active ] && [ "$(main_pid jitterscope)" != "$rpid" ] && [ "$(main_pid jitterscope-serve)" != "$spid" ]' 30
check upgrade-keeps-store "$before samples before the upgrade, $(until_kill "$upgraded_at") after it" \
  test "$(until_kill "$upgraded_at")" -ge "$before" -a "$before" -gt 0
check upgrade-records "no sample after the upgrade within 60 s" \
  wait_for '[ "$(samples_as alice)" -gt "$(until_kill "$upgraded_at")" ]' 60

# --- Debian's own kernel.perf_event_paranoid: the recorder says what it loses and how to fix it
echo 3 >/proc/sys/kernel/perf_event_paranoid
since=$(date '+%Y-%m-%d %H:%M:%S')
systemctl restart jitterscope
check paranoid-warning "no warning about kernel.perf_event_paranoid 3 in the journal" \
  wait_for 'journalctl -u jitterscope --since "$since" -o cat | grep -q "kernel.perf_event_paranoid is 3: above 2"' 60
journalctl -u jitterscope --since "$since" -o cat | grep paranoid
# Its text lines carry journald's priorities (<4> warning, <6> info) on the service's stderr:
# `journalctl -p warning` shows the warning and not the info lines.
check journal-warning "the paranoid warning is not a journald warning: $(journalctl -u jitterscope --since "$since" -p warning -o cat | head -3)" \
  grep -q 'kernel.perf_event_paranoid is 3: above 2' <(journalctl -u jitterscope --since "$since" -p warning -o cat)
check journal-info "'recording every' is missing from the journal, or a warning: $(journalctl -u jitterscope --since "$since" -o with-unit | grep -m1 'recording every')" \
  bash -c 'journalctl -u jitterscope --since "$1" -o cat | grep -q "recording every" && ! journalctl -u jitterscope --since "$1" -p warning -o cat | grep -q "recording every"' _ "$since"
/lib/systemd/systemd-sysctl
check sysctl-file "systemd-sysctl left kernel.perf_event_paranoid at $(cat /proc/sys/kernel/perf_event_paranoid)" \
  test "$(cat /proc/sys/kernel/perf_event_paranoid)" = 2
systemctl restart jitterscope

# --- remove: stopped, binary gone, configuration and recordings kept ---
removed_at=$(date +%s)
before=$(until_kill "$removed_at")
check dpkg-remove "dpkg -r failed" dpkg -r jitterscope
check removed-stopped "a process still runs as jitterscope: $(jitterscope_pids)" test -z "$(jitterscope_pids)"
check removed-binary "/usr/bin/jitterscope is still there" test ! -e /usr/bin/jitterscope
check removed-keeps-config "remove deleted the conffile" test -f /etc/jitterscope/jitterscope.toml
check removed-keeps-data "remove deleted the recordings" \
  test -n "$(ls /var/lib/jitterscope 2>/dev/null | grep -v LOCK)"

# --- reinstall after remove: the configuration as edited, the store read and grown ---
check reinstall "dpkg -i after remove failed" dpkg -i "$DEB"
check reinstall-config "the reinstalled configuration lost its host" grep -q "^host = \"$HOST\"" "$conf"
check reinstall-keeps-store "$before samples before the remove, $(until_kill "$removed_at") after the reinstall" \
  test "$(until_kill "$removed_at")" -ge "$before" -a "$before" -gt 0
check reinstall-records "no sample after the reinstall within 60 s" \
  wait_for '[ "$(samples_as alice)" -gt "$(until_kill "$removed_at")" ]' 60

# --- purge: configuration, recordings, user and group gone ---
check dpkg-purge "dpkg -P failed" dpkg -P jitterscope
check purged-config "/etc/jitterscope is still there" test ! -e /etc/jitterscope
check purged-units "jitterscope units are still known: $(systemctl list-unit-files 'jitterscope*' --no-legend)" \
  test -z "$(systemctl list-unit-files 'jitterscope*' --no-legend)"
check purged-data "/var/lib/jitterscope is still there" test ! -e /var/lib/jitterscope
check purged-user "the jitterscope user is still there" bash -c '! getent passwd jitterscope'
check purged-group "the jitterscope group is still there" bash -c '! getent group jitterscope'

echo DONE >>"$OUT/checks"
