#!/usr/bin/env bash
# Run a command; then say how long it took and how busy the machine's cores were meanwhile
# (from /proc/stat: everything the machine ran, not only the command), e.g.
#   scripts/busy.sh "make test 1/3" pytest ...   ->   === make test 1/3: 568 s, cores 93% busy
# A phase whose cores idle is waiting (kernels, engines, timeouts): more of it side by side
# could help; a phase near 100 % busy is bound by the cores. Exits with the command's status;
# the line is also added to $MPILAB_BUSY_LOG where that is set.
#   scripts/busy.sh --ticks   prints the machine's busy and all clock ticks so far (for a
#                             caller that times a shell function itself: .ci/run's stages)
ticks() {  # busy and all clock ticks of every core so far (guest time is in user already)
  awk '$1 == "cpu" {t = 0; for (i = 2; i <= 9; i++) t += $i; print t - $5 - $6, t; exit}' /proc/stat 2>/dev/null
}
if [[ ${1:-} == --ticks ]]; then ticks || echo 0 0; exit 0; fi
label=${1:?usage: scripts/busy.sh LABEL COMMAND [ARG ...]}
shift
start=$(date +%s)
read -r busy0 all0 < <(ticks || echo 0 0)
"$@"
rc=$?
read -r busy1 all1 < <(ticks || echo 0 0)
busy=$(( ${all1:-0} > ${all0:-0} ? 100 * (busy1 - busy0) / (all1 - all0) : 0 ))
line="$label: $(( $(date +%s) - start )) s, cores ${busy}% busy, exit $rc"
echo "=== $line"
# $MPILAB_BUSY_LOG (set by .ci/run) collects the lines of every stage and phase
[[ -z ${MPILAB_BUSY_LOG:-} ]] || echo "$line" >> "$MPILAB_BUSY_LOG"
exit $rc
