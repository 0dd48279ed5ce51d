# Sourced by the benches: a process's or thread's CPU and memory from /proc, and how many
# processes the host has.

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
# the number of processes now. Counted by the shell's own glob: `ls /proc/[0-9]* | wc -l` fails
# (and pipefail with it) when a listed process exits before ls looks at it, which a fork/exec
# churn makes likely.
nprocs() { local p=(/proc/[0-9]*); echo "${#p[@]}"; }
