#!/bin/bash
# Multi-rail between two simulated hosts joined by two veth pairs (two independent rails),
# over tcp, with fault_peer echoing messages of every size (eager to 2 MiB rendezvous):
#   - striped: every echo intact and in order, and both links carried a fair share of the
#     bytes (their kernel byte counters; a 2 MiB message is split 50/50 by bandwidth);
#   - LOOM_MAX_RNDV_RAILS=1: the second link carries (almost) nothing: the setting holds,
#     and the striped case's counters really tell striping apart;
#   - every message eager (LOOM_RNDV_THRESH=inf) with LOOM_MAX_EAGER_RAILS=2: the middle
#     fragments take turns over both links, every echo intact and in order, and both links
#     carried a third of the bytes or more (with one eager rail the first carries them all);
#   - every message eager (LOOM_RNDV_THRESH=inf) with LOOM_MAX_EAGER_RAILS=2: the middle
#     fragments take turns over both links, every echo intact and in order, and both links
#     carried a third of the bytes or more (with one eager rail, the first carries them all);
#   - the second rail down for 2 s and up again mid-run: every message intact, no endpoint
#     failed (TCP retransmits once the link is back);
#   - the second rail down for good with rendezvous sends in flight: every request
#     completes (a rendezvous one with an error), the error callback runs once, nothing
#     hangs: a failed rail fails its endpoint (docs/protocols.md, "Multi-rail").
# Usage: run_two_rails.sh [FAULT_PEER]  (default: ./test/faults/fault_peer of the build tree)
set -u
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$top/test/mpi/netns/hosts.sh"
. "$top/test/faults/xh_cases.sh"
prog=$(readlink -f "${1:-./test/faults/fault_peer}")

xh_cases_begin
if ! xh_add_link; then
    echo "not ok 1 - join the hosts by a second veth pair"
    echo "1..1"
    exit 1
fi
echo "# second rail: $XH_IF_A2 ($XH_IP_A2) - $XH_IF_B2 ($XH_IP_B2)"
export LOOM_TLS=tcp

# link_bytes IF: rx + tx bytes of host A's end IF.
link_bytes() { local b; b=$(xh_veth_bytes A "$1") && echo $((${b% *} + ${b#* })); }

# echo_run RAILS [NAME=VALUE...]: the flow case with LOOM_MAX_RNDV_RAILS=RAILS and the
# settings given, on both sides; sets ok, share1, share2 (bytes each link carried during the run).
echo_run() {
    local rails=$1 before1 before2 kv
    shift
    for kv in "$@"; do export "${kv?}"; done
    c=$((n + 1))
    ok=0
    before1=$(link_bytes "$XH_IF_A") before2=$(link_bytes "$XH_IF_A2")
    if LOOM_MAX_RNDV_RAILS=$rails server B "case$c.serverB"; then
        touch "$tmp/go$c"
        LOOM_MAX_RNDV_RAILS=$rails start A "case$c.client" -c "$XH_IP_B" -P "$port" -m flow -f "$tmp/go$c" -n 70 -t 60
        finish "$last_pid" && served "case$c.serverB" "$server_pid" && ok=1
    fi
    share1=$(($(link_bytes "$XH_IF_A") - before1))
    share2=$(($(link_bytes "$XH_IF_A2") - before2))
    echo "# LOOM_MAX_RNDV_RAILS=$rails $*: $XH_IF_A carried $share1 bytes, $XH_IF_A2 $share2"
    for kv in "$@"; do unset "${kv%%=*}"; done
}

# --- 1. striped ---------------------------------------------------------------------------------
echo_run 2
total=$((share1 + share2))
# Each link at least a third of the bytes: the rendezvous parts are half each, the eager
# messages and control messages ride on the AM lane (one of the two).
((total > 0 && share1 * 3 >= total && share2 * 3 >= total)) || ok=0
result "tcp over two rails: every message of every size intact and in order, both links carried a third of the bytes or more" $ok

# --- 2. one rail --------------------------------------------------------------------------------
echo_run 1
total=$((share1 + share2))
# The second link: at most the wire-up's and keep-alive's few bytes, or it is the only rail
# (then the first carries those few).
small=$((share1 < share2 ? share1 : share2))
((total > 0 && small * 50 < total)) || ok=0
result "tcp with LOOM_MAX_RNDV_RAILS=1: every message intact, one link carried all but 2 % of the bytes" $ok

# --- 2b. eager messages over two rails ---------------------------------------------------------
echo_run 2 LOOM_MAX_EAGER_RAILS=2 LOOM_RNDV_THRESH=inf LOOM_PROTO_INFO=y
total=$((share1 + share2))
((total > 0 && share1 * 3 >= total && share2 * 3 >= total)) || ok=0
# The protocol table names both rails (LOOM_PROTO_INFO prints it when the endpoint is made).
rails_line=$(grep -m1 -o 'tag eager multi .*middle fragments in turn over 2 rails: [^)]*' "$tmp/case$c.client.log")
echo "# ${rails_line:-no protocol table names the eager rails}"
[[ $rails_line == *"/$XH_IF_A"*"/$XH_IF_A2"* || $rails_line == *"/$XH_IF_A2"*"/$XH_IF_A"* ]] || ok=0
result "tcp, every message eager, LOOM_MAX_EAGER_RAILS=2: every message intact and in order, both links carried a third of the bytes or more, the protocol table names both" $ok

# --- 3. the second rail down for 2 s, then up --------------------------------------------------
c=$((n + 1))
ok=0
if server B "case$c.serverB"; then
    start A "case$c.client" -c "$XH_IP_B" -P "$port" -m flow -f "$tmp/go$c" -n 28 -t 60
    client=$last_pid
    flap_during "$tmp/case$c.client.log" "$tmp/go$c" "$XH_IF_A2"
    finish "$client" && served "case$c.serverB" "$server_pid" && ok=1
fi
result "tcp over two rails, the second down for 2 s and up: every message intact and in order, no endpoint failed" $ok

# --- 4. the second rail down for good, rendezvous in flight ---------------------------------------
export LOOM_KEEPALIVE_INTERVAL=1s LOOM_KEEPALIVE_COUNT=3
c=$((n + 1))
ok=0
if server B "case$c.serverB"; then
    start A "case$c.client" -c "$XH_IP_B" -P "$port" -m lost -f "$tmp/go$c" -t 30
    client=$last_pid
    if wait_for "$tmp/case$c.client.log" '^READY' 30; then
        xh_in A ip link set "$XH_IF_A2" down
        touch "$tmp/go$c"
    fi
    finish "$client" && ok=1
    echo "# $(grep '^FAILED' "$tmp/case$c.client.log")"
fi
result "tcp over two rails, the second down for good with sends in flight: every request completes (the rendezvous ones with an error, an echo that came back intact), the error callback runs once" $ok

echo "1..$n"
((failed == 0))
