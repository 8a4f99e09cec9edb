#!/bin/bash
# Multi-rail bandwidth between two simulated hosts joined by two veth pairs, each end of
# each pair capped by tc (tbf) to the same rate: loom_perftest tag_bw over tcp with
# LOOM_MAX_RNDV_RAILS=2 against LOOM_MAX_RNDV_RAILS=1 (one rail), alternating, and which
# goes first, every repeat; prints the medians and their ratio (two rails / one). With
# --eager every message goes eager (LOOM_RNDV_THRESH=inf) and the rails compared are
# LOOM_MAX_EAGER_RAILS=2 against 1 (two rendezvous rails in both).
#
#   contrib/bench/two_rails.sh [--prefix build/install] [--rate 1gbit] [--repeats 5]
#                              [--sizes "1048576 4194304"] [--eager]
#
# Needs root (network namespaces, tc); test/mpi/netns/hosts.sh makes the hosts.
set -u
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$top/test/mpi/netns/hosts.sh"
prefix=$top/build/install rate=1gbit repeats=5 sizes="1048576 4194304" eager=0
while (($#)); do
    case $1 in
    --prefix) prefix=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --eager) eager=1; shift ;;
    *) echo "usage: $0 [--prefix DIR] [--rate RATE] [--repeats N] [--sizes \"S...\"] [--eager]" >&2; exit 2 ;;
    esac
done
perftest=$prefix/bin/loom_perftest
[[ -x $perftest ]] || { echo "two_rails: $perftest is not built" >&2; exit 1; }
why=$(xh_preflight) || { echo "two_rails: cannot make two hosts here: $why" >&2; exit 1; }
tmp=$(mktemp -d /tmp/loom-rails.XXXXXX)
trap 'xh_down; rm -rf "$tmp"' EXIT
mkdir "$tmp/state"
xh_up "$tmp/state" >/dev/null && xh_add_link || { echo "two_rails: cannot make the hosts" >&2; exit 1; }
for end in "A $XH_IF_A" "A $XH_IF_A2" "B $XH_IF_B" "B $XH_IF_B2"; do
    read -r host ifname <<<"$end"
    xh_in "$host" tc qdisc add dev "$ifname" root tbf rate "$rate" burst 512kb latency 50ms ||
        { echo "two_rails: tc tbf on $ifname failed" >&2; exit 1; }
done

# run RAILS SIZE: one server in B and one client in A; prints the client's MB/s (empty on failure).
run() {
    local port=$((20000 + RANDOM % 20000)) iters=$((400 * 1048576 / $2))
    local settings=(LOOM_TLS=tcp LOOM_MAX_RNDV_RAILS="$1")
    ((eager)) && settings=(LOOM_TLS=tcp LOOM_MAX_RNDV_RAILS=2 LOOM_MAX_EAGER_RAILS="$1" LOOM_RNDV_THRESH=inf)
    xh_in B env "${settings[@]}" timeout 120 "$perftest" -p $port >/dev/null 2>&1 &
    local server=$!
    sleep 0.3
    xh_in A env "${settings[@]}" timeout 120 "$perftest" "$XH_IP_B" -p $port \
        -t tag_bw -s "$2" -n $iters -w $((iters / 10)) -f 2>/dev/null | awk '/^Final:/ { print $6 }'
    wait $server 2>/dev/null
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

echo "# two veth rails, each end capped at $rate (tbf); tcp tag_bw, $repeats alternating repeats$( ((eager)) && echo ", every message eager: LOOM_MAX_EAGER_RAILS 1 against 2")"
echo "| size | one rail (MB/s) | two rails (MB/s) | two / one |"
echo "| ---: | ---: | ---: | ---: |"
for size in $sizes; do
    : >"$tmp/one" && : >"$tmp/two"
    for ((r = 0; r < repeats; r++)); do
        order="1 2"
        ((r % 2)) && order="2 1"
        for rails in $order; do
            v=$(run "$rails" "$size")
            [[ -n $v ]] || { echo "# rails=$rails size=$size: the run failed" >&2; continue; }
            ((rails == 1)) && echo "$v" >>"$tmp/one" || echo "$v" >>"$tmp/two"
        done
    done
    one=$(median <"$tmp/one") two=$(median <"$tmp/two")
    ratio=$(awk -v a="$two" -v b="$one" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }')
    echo "| $size | $one | $two | $ratio |"
done
