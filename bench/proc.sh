# Sourced by the side-by-side benches (fleet.sh, fleet_pusher.sh): a process's or thread's CPU
# and memory from /proc.

# ticks of utime+stime of a process, or of one thread (its stat file)
ticks() { awk '{print $14 + $15}' "$1" 2>/dev/null || echo 0; }
# pid name -> the stat file of the process's thread of that name
thread_of() {
  for t in /proc/"$1"/task/*; do
    [ "$(cat "$t/comm" 2>/dev/null)" = "$2" ] && { echo "$t/stat"; return; }
  done
}
# pid -> resident memory, KiB
rss_kib() { awk '/^VmRSS/ {print $2}' /proc/"$1"/status; }
# ticks0 ticks1 t0 t1 -> % of one core between the two readings
pct() { python3 -c "print(f'{($2-$1)/$(getconf CLK_TCK)/($4-$3)*100:.3f}')"; }
