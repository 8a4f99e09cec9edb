#!/usr/bin/env bash
# Tests of loom_perftest as a user runs it: every test kind in loopback mode, a client
# and a server in two processes (the protocol-layer tag_*, ucp_am_*, stream_* tests and
# the RMA tests ucp_* over LOOM_TLS=shm and LOOM_TLS=tcp), and clear errors for bad options.
. "${top_srcdir:-$(dirname "$0")/../..}/test/tools/tap.sh"
pt="${top_builddir:-.}/tools/perftest/loom_perftest"
final='^Final: +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+$'
quick="-n 2000 -w 10 -f"

for t in "am_lat -D short" "am_lat -D bcopy -s 1000" "am_lat -D zcopy -s 4096" "am_bw -D short" \
         "am_bw -D bcopy -s 4096" "put_lat" "put_bw -D bcopy -s 4096" "put_bw -D zcopy -s 65536" \
         "get -D bcopy -s 1024" "get_bw -D zcopy -s 1048576"; do
    check_output "self loopback: $t" "$final" timeout 60 "$pt" -l -x self -d memory -t $t $quick
done
for tls in self shm tcp; do
    for t in "tag_lat" "tag_sync_lat" "tag_bw" "tag_lat -s 65536" "tag_bw -s 1048576 -O 4" \
             "ucp_put_lat" "ucp_put_bw" "ucp_put_bw -s 1048576 -O 4" "ucp_get" "ucp_get -s 65536 -O 8" \
             "ucp_add" "ucp_add -s 4"; do
        LOOM_TLS=$tls check_output "LOOM_TLS=$tls loopback: $t" "$final" timeout 60 "$pt" -l -t $t -n 200 -w 10 -f
    done
    for t in "ucp_am_lat" "ucp_am_bw" "ucp_am_lat -s 1048576" "ucp_am_bw -s 1048576 -O 4" \
             "stream_lat" "stream_bw" "stream_lat -s 65536" "stream_bw -s 1048576 -O 4"; do
        LOOM_TLS=$tls check_output "LOOM_TLS=$tls loopback: $t" "$final" timeout 60 "$pt" -l -t $t -n 200 -w 10 -f
    done
done
check_output "CSV output has a header and a row" '^[0-9]+,[0-9.]+,' "$pt" -l -x self -d memory -t am_lat $quick -v
check_output "help lists the tests"              'am_lat, am_bw, put_lat'   "$pt" -h
check_output "help lists the ucp tests"          'tag_lat, tag_sync_lat, tag_bw' "$pt" -h
check_output "help lists the am and stream tests" 'ucp_am_lat, ucp_am_bw, stream_lat, stream_bw' "$pt" -h
check_output "unknown test is named"             "unknown test 'nope'"      "$pt" -t nope
check_output "help lists the ucp RMA tests"      'ucp_put_lat, ucp_put_bw, ucp_get, ucp_add' "$pt" -h
check_output "missing UCP tests are explained"   'only tag_lat, tag_sync_lat, tag_bw' "$pt" -t tag_sync_bw
check_output "an atomic is 4 or 8 bytes"         'invalid size 3 .an atomic is 4 or 8 bytes' "$pt" -l -t ucp_add -s 3
check_output "a bad LOOM_TLS is named"           'loom_init failed'         env LOOM_TLS=nope "$pt" -l -t tag_lat
check_output "bad size is named"                 "invalid size '12q'"       "$pt" -s 12q
check_output "size lists are refused clearly"    'give one size'            "$pt" -s 8,16
check_output "loopback takes no host"            'takes no server host'     "$pt" -l localhost -x self -d memory -t am_lat
check_output "client needs a transport"          'needs -x TRANSPORT'       "$pt" -l -t am_lat
check_output "unknown transport lists the available ones" 'available:.*self/memory' "$pt" -l -x nope -d x -t am_lat
check_output "size above the transport limit"    'exceeds the am_short limit' "$pt" -l -x self -d memory -t am_lat -s 1000000
check_output "get has no short flavour"          'get has no short flavour' "$pt" -l -x self -d memory -t get
check_output "unknown option is named"           "unknown option '-Z'"      "$pt" -Z
check_output "a bad wait mode is named"          "invalid wait mode"        "$pt" -E nap
check_output "-E sleep needs two processes"      'uct-level tests between two processes' \
             "$pt" -l -x self -d memory -t am_lat -E sleep

# Two processes: self cannot reach another process, and both sides must say so and exit.
# (Ports are drawn below 32768, Linux's ephemeral range, where transports' own sockets live.)
port=$((20000 + RANDOM % 12000))
"$pt" -p $port > /dev/null 2>&1 &
server=$!
check_output "self refuses a peer process"       'another process|cannot create an endpoint' \
             timeout 30 "$pt" 127.0.0.1 -p $port -x self -d memory -t am_lat $quick
wait $server 2>/dev/null

# pair NAME TLS CLIENT-ARGS...: a server and a client process, both with LOOM_TLS=TLS;
# passes when the client prints a Final: line and both exit with status 0.
pair() {
    local name=$1 tls=$2; shift 2
    local port=$((20000 + RANDOM % 12000)) out server cli_rc srv_rc
    LOOM_TLS=$tls timeout 60 "$pt" -p $port > /dev/null 2>"$server_err" &
    server=$!
    out=$(LOOM_TLS=$tls timeout 60 "$pt" 127.0.0.1 -p $port "$@" 2>&1)
    cli_rc=$?
    wait $server
    srv_rc=$?
    tap_n=$((tap_n + 1))
    if [ $cli_rc -eq 0 ] && [ $srv_rc -eq 0 ] && printf '%s\n' "$out" | grep -Eq -- "$final"; then
        echo "ok $tap_n - $name"
    else
        echo "not ok $tap_n - $name (client exit $cli_rc, server exit $srv_rc)"
        printf '%s\n' "$out" | tail -5 | sed 's/^/#   client| /'
        tail -5 "$server_err" | sed 's/^/#   server| /'
        tap_failed=$((tap_failed + 1))
    fi
}
server_err=$(mktemp)
for tls in shm tcp; do
    for t in "tag_lat" "tag_sync_lat" "tag_bw" "tag_lat -s 65536" "tag_bw -s 1048576 -O 4" "tag_bw -O 64" \
             "ucp_put_lat" "ucp_put_lat -s 65536" "ucp_put_bw" "ucp_put_bw -s 1048576" "ucp_get" \
             "ucp_get -s 1048576 -O 4" "ucp_add" "ucp_add -s 4 -O 16"; do
        pair "LOOM_TLS=$tls server and client: $t" $tls -t $t -n 300 -w 10 -f
    done
    for t in "ucp_am_lat" "ucp_am_bw" "ucp_am_lat -s 65536" "ucp_am_bw -s 1048576 -O 4" \
             "stream_lat" "stream_bw" "stream_lat -s 65536" "stream_bw -s 1048576 -O 4"; do
        pair "LOOM_TLS=$tls server and client: $t" $tls -t $t -n 300 -w 10 -f
    done
done
pair "the client's -x sets LOOM_TLS in both processes" nope -x shm -t tag_lat -n 300 -w 10 -f
# uct-level bandwidth over tcp: the warm-up is drained before the measurement (am_bw's target
# returns credit at the last warm-up message, with fewer than half a window of them), and
# -E sleep makes the initiator wait on the iface's event fd instead of spinning.
for t in "am_bw -D bcopy -s 4096" "put_bw -D zcopy -s 65536" "get_bw -D zcopy -s 65536"; do
    pair "tcp, two processes: $t after 5 warm-up operations" tcp -x tcp -d lo -t $t -n 200 -w 5 -f
    pair "tcp, two processes: $t, the initiator sleeping on events" tcp -x tcp -d lo -t $t -n 200 -w 5 -E sleep -f
done
rm -f "$server_err"
# A server killed in the middle: the client stops at once with an error (well before its
# 60 s no-progress timeout), since shm and tcp fail the endpoint.
for tls in shm tcp; do
  for t in tag_lat ucp_am_lat stream_lat ucp_put_lat ucp_get; do
    port=$((20000 + RANDOM % 12000))
    pidfile=$(mktemp)
    # Started from a subshell, so that this shell does not report the kill.
    (LOOM_TLS=$tls "$pt" -p $port > /dev/null 2>&1 & echo $! > "$pidfile")
    (sleep 1; kill -9 "$(cat "$pidfile")") &
    check_output "LOOM_TLS=$tls: the server dies mid-$t, the client says so" 'the peer is gone|connection reset' \
                 env LOOM_TLS=$tls timeout 30 "$pt" 127.0.0.1 -p $port -t $t -n 1000000000 -f
    wait
    rm -f "$pidfile"
  done
done
port=$((20000 + RANDOM % 12000))
LOOM_TLS=self "$pt" -p $port > /dev/null 2>&1 &
server=$!
check_output "LOOM_TLS=self cannot reach another process: a clear error" 'loom_ep_create failed: destination unreachable' \
             env LOOM_TLS=self timeout 30 "$pt" 127.0.0.1 -p $port -t tag_lat -n 100
wait $server
check "... and the server exits with an error too" test $? -ne 0
check_output "no server: the client gives up with a clear error" 'cannot connect to 127.0.0.1' \
             timeout 30 "$pt" 127.0.0.1 -p 1 -x self -d memory -t am_lat $quick
finish
