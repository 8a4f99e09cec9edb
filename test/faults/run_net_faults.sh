#!/bin/bash
# Network faults between two simulated hosts (test/mpi/netns/hosts.sh: namespaces joined by
# a veth pair), over tcp, with fault_peer (its comment says what each mode checks):
#   - the link goes down for 2 s and up again while messages of every size flow to host B
#     and to a server on host A itself: every message comes back intact and in order, no
#     endpoint fails (the keep-alive bound, LOOM_KEEPALIVE_INTERVAL x COUNT = 10 s by
#     default, is longer than the outage), and the endpoint on host A never notices;
#   - host B vanishes silently (nft drops every packet on its veth end: no RST, no FIN)
#     while the endpoint is idle: keep-alive fails it with LOOM_ERR_PEER_TIMEOUT within
#     its bound (here 1 s x 3);
#   - the same with sends and receives of every size in flight: each completes with an
#     error, the error callback runs once, nothing hangs;
#   - netem on both ends of the link (loss 1 % and 5 %, delay with jitter, reordering,
#     duplication): every message of every size arrives once, in order, intact. This
#     machine's kernel has no sch_netem; the RDMA VM's Debian kernel does, and
#     test/rdma/run_rdma_tests.sh runs these cases there (--netem-only).
# Usage: run_net_faults.sh [--netem-only] [FAULT_PEER]  (default: ./test/faults/fault_peer
# of the build tree)
set -u
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$top/test/mpi/netns/hosts.sh"
. "$top/test/faults/xh_cases.sh"
netem_only=0
if [[ ${1:-} == --netem-only ]]; then
    netem_only=1
    shift
fi
prog=$(readlink -f "${1:-./test/faults/fault_peer}")
# The RDMA VM's minimal /dev lacks /dev/fd, which bash's process substitution needs.
[[ -e /dev/fd ]] || ln -s /proc/self/fd /dev/fd 2>/dev/null

xh_cases_begin nft
export LOOM_TLS=tcp

drop_b() {  # host B goes silent: nothing in or out of its veth end
    xh_in B nft -f - <<NFT
table inet loomfault {
    chain in { type filter hook input priority 0; policy accept; iifname "$XH_IF_B" drop; }
    chain out { type filter hook output priority 0; policy accept; oifname "$XH_IF_B" drop; }
}
NFT
}
undrop_b() { xh_in B nft delete table inet loomfault 2>/dev/null; }

# --- netem: loss, delay, reordering, duplication -------------------------------------------------
netem_cases=("loss 1%" "loss 5%" "delay 10ms 5ms" "delay 5ms reorder 25% 50%" "duplicate 5%")
if xh_in A tc qdisc add dev "$XH_IF_A" root netem delay 1ms 2>/dev/null; then
    xh_in A tc qdisc del dev "$XH_IF_A" root
    for impair in "${netem_cases[@]}"; do
        c=$((n + 1))
        ok=0
        # shellcheck disable=SC2086
        if xh_in A tc qdisc add dev "$XH_IF_A" root netem $impair && xh_in B tc qdisc add dev "$XH_IF_B" root netem $impair &&
            server B "case$c.serverB"; then
            touch "$tmp/go$c"  # no pause: the impairment is there from the start
            start A "case$c.client" -c "$XH_IP_B" -P "$port" -m flow -f "$tmp/go$c" -n 21 -t 120
            finish "$last_pid" && served "case$c.serverB" "$server_pid" && ok=1
            # netem acted: its counters (a loss that dropped nothing tested nothing).
            stats=$(xh_in A tc -s qdisc show dev "$XH_IF_A" | grep -o 'Sent .*dropped [0-9]*')
            echo "# netem $impair on A's end: $stats"
            [[ $impair != loss* ]] || [[ ${stats##*dropped } -gt 0 ]] || ok=0
        fi
        xh_in A tc qdisc del dev "$XH_IF_A" root 2>/dev/null
        xh_in B tc qdisc del dev "$XH_IF_B" root 2>/dev/null
        result "tcp under netem $impair (both directions): every message of every size arrives once, in order, intact" $ok
    done
elif ((netem_only)); then
    result "netem is available here (sch_netem)" 0
else
    echo "# netem cases (loss, delay, reordering, duplication): this kernel has no sch_netem;" \
         "test/rdma/run_rdma_tests.sh runs them in the RDMA VM"
fi
if ((netem_only)); then
    echo "1..$n"
    ((failed == 0))
    exit
fi

# --- 1. link down for 2 s, then up -------------------------------------------------------------
c=$((n + 1))
ok=0
if server B "case$c.serverB" && portb=$port && pidb=$server_pid && server A "case$c.serverA" && porta=$port &&
    pida=$server_pid; then
    start A "case$c.client" -c "$XH_IP_B" -P "$portb" -L "127.0.0.1:$porta" -m flow -f "$tmp/go$c" -n 28 -t 60
    client=$last_pid
    flap_during "$tmp/case$c.client.log" "$tmp/go$c" "$XH_IF_A"
    finish "$client" && served "case$c.serverB" "$pidb" && served "case$c.serverA" "$pida" && ok=1
fi
result "tcp: link down for 2 s and up: every message of every size intact and in order, no endpoint failed, the other host's endpoint undisturbed" $ok
sed -n 's/^client: /# /p' "$tmp/case$c.client.log"

export LOOM_KEEPALIVE_INTERVAL=1s LOOM_KEEPALIVE_COUNT=3
bound=3

# --- 2. silent host, idle endpoint ---------------------------------------------------------------
for mode in idle busy; do
    c=$((n + 1))
    ok=0
    if server B "case$c.serverB"; then
        start A "case$c.client" -c "$XH_IP_B" -P "$port" -m $mode -f "$tmp/go$c" -t $((bound * 10))
        client=$last_pid
        if wait_for "$tmp/case$c.client.log" '^READY' 30; then
            drop_b
            touch "$tmp/go$c"
        fi
        if finish "$client"; then
            secs=$(sed -n 's/^FAILED .* after \([0-9.]*\) s$/\1/p' "$tmp/case$c.client.log")
            echo "# $mode: $(grep '^FAILED' "$tmp/case$c.client.log")"
            # The bound, with room for the kernel's timer granularity (whole seconds).
            [[ -n $secs ]] && awk -v s="$secs" -v b="$bound" 'BEGIN { exit !(s <= b + 2) }' && ok=1
        fi
        undrop_b
    fi
    if [[ $mode == idle ]]; then
        result "tcp: a host that vanishes silently fails the idle endpoint with a peer timeout within LOOM_KEEPALIVE_INTERVAL x COUNT" $ok
    else
        result "tcp: a host that vanishes silently with traffic in flight: every request completes with an error, the error callback runs once" $ok
    fi
done

echo "1..$n"
((failed == 0))
