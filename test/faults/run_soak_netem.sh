#!/bin/bash
# The soak of issue 17 between two simulated hosts under netem (docs/reliability.md "Soak"):
# contrib/bench/soak.py with three soak_peer processes, 0 and 2 on host A (shm and tcp:
# shm between them), 1 on host B (tcp), hosts joined by a veth pair (test/mpi/netns) with
# netem on both ends: delay with jitter, reordering, loss, duplication. Random mixed traffic
# (tag, active messages, stream, RMA) and a random peer killed and restarted every few
# seconds, as on one host. Passes when nothing was lost or corrupted, no error was
# unexpected, nothing hung, memory stayed bounded, and netem did act on the link.
# This machine's kernel has no sch_netem: test/rdma/run_rdma_tests.sh runs it in the RDMA
# VM, whose kernel has. TAP output.
# Usage: run_soak_netem.sh [SOAK_PEER]  (default: ./test/faults/soak_peer of the build tree)
#   SOAK_SECONDS (60), SOAK_NETEM ("delay 2ms 1ms reorder 10% loss 1% duplicate 1%"),
#   SOAK_ARGS (more soak.py options, e.g. --seed N --keep)
set -u
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$top/test/mpi/netns/hosts.sh"
. "$top/test/faults/xh_cases.sh"
prog=$(readlink -f "${1:-./test/faults/soak_peer}")
impair=${SOAK_NETEM:-delay 2ms 1ms reorder 10% loss 1% duplicate 1%}
[[ -e /dev/fd ]] || ln -s /proc/self/fd /dev/fd 2>/dev/null

xh_cases_begin must
# shellcheck disable=SC2086 # the impairment is words for tc
if ! xh_in A tc qdisc add dev "$XH_IF_A" root netem $impair || ! xh_in B tc qdisc add dev "$XH_IF_B" root netem $impair; then
    echo "not ok 1 - netem on the link ($impair): this kernel has no sch_netem?"
    echo "1..1"
    exit 1
fi
echo "# hosts $XH_HOST_A ($XH_IP_A: processes 0 and 2) and $XH_HOST_B ($XH_IP_B: process 1); netem $impair on both ends"
read -ra ns <<<"$(xh__nsenter_flags)"
in_a="nsenter -t ${XH_PIDS[0]} ${ns[*]} --wd=$PWD --"
in_b="nsenter -t ${XH_PIDS[1]} ${ns[*]} --wd=$PWD --"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=16"
out=$(xh__close_fds
      # shellcheck disable=SC2086 # SOAK_ARGS is options
      timeout -k 10 $(( ${SOAK_SECONDS:-60} * 3 + 120 )) python3 "$top/contrib/bench/soak.py" --peer "$prog" \
          --seconds "${SOAK_SECONDS:-60}" --tls shm,tcp --tls tcp --tls shm,tcp \
          --prefix "$in_a" --prefix "$in_b" --prefix "$in_a" \
          --addr "$XH_IP_A" --addr "$XH_IP_B" --addr "$XH_IP_A" ${SOAK_ARGS:-} 2>&1)
soak=$?
printf "%s\n" "$out" | sed 's/^/# /'
n=1
if ((soak == 0)); then echo "ok $n - the soak between two hosts under netem: nothing lost, corrupted or stuck, memory bounded"
else echo "not ok $n - the soak between two hosts under netem (soak.py exit $soak)"; fi
# netem acted on the link, and the traffic between the hosts crossed it.
n=$((n + 1))
stats=$(xh_in A tc -s qdisc show dev "$XH_IF_A" | grep -o 'Sent [0-9]* bytes.*dropped [0-9]*')
echo "# netem on A's end: $stats"
sent=$(sed -n 's/^Sent \([0-9]*\) bytes.*/\1/p' <<<"$stats")
dropped=$(sed -n 's/.*dropped \([0-9]*\)$/\1/p' <<<"$stats")
if (( ${sent:-0} > 1000000 && ${dropped:-0} > 0 )); then
    echo "ok $n - the traffic between the hosts crossed netem, which dropped packets"
else
    echo "not ok $n - netem saw ${sent:-no} bytes and dropped ${dropped:-no} packets: nothing was tested"
fi
echo "1..$n"
((soak == 0 && ${sent:-0} > 1000000 && ${dropped:-0} > 0))
