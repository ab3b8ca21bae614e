# Sourced by scripts/test.sh and scripts/test-sanitizers.sh: `phase NAME COMMAND...` runs the
# command and prints its wall and CPU seconds, prefixed with $PHASE_PREFIX.
# CPU seconds of the finished children so far (utime + stime in /proc/$$/stat, clock ticks):
# on a shared machine the wall time says little, the CPU time what a quiet one would need.
child_cpu_s() { local st; read -r -a st </proc/$$/stat; echo $(((st[15] + st[16]) / $(getconf CLK_TCK))); }
# Returns the command's exit status.
phase() {
  local name="$1" start=$SECONDS cpu rc=0
  cpu=$(child_cpu_s)
  shift
  "$@" || rc=$?
  echo "${PHASE_PREFIX:-phase}: $name $((SECONDS - start)) s wall, $(($(child_cpu_s) - cpu)) s CPU" >&2
  return "$rc"
}
