#!/usr/bin/env bash
# Tests of loom_perftest as a user runs it: every test kind in loopback mode, a client
# and a server in two processes, and clear errors for bad options.
. "${top_srcdir:-$(dirname "$0")/../..}/test/tools/tap.sh"
pt="${top_builddir:-.}/tools/perftest/loom_perftest"
final='^Final: +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+$'
quick="-n 2000 -w 10 -f"

for t in "am_lat -D short" "am_lat -D bcopy -s 1000" "am_lat -D zcopy -s 4096" "am_bw -D short" \
         "am_bw -D bcopy -s 4096" "put_lat" "put_bw -D bcopy -s 4096" "put_bw -D zcopy -s 65536" \
         "get -D bcopy -s 1024" "get_bw -D zcopy -s 1048576"; do
    check_output "self loopback: $t" "$final" timeout 60 "$pt" -l -x self -d memory -t $t $quick
done
check_output "CSV output has a header and a row" '^[0-9]+,[0-9.]+,' "$pt" -l -x self -d memory -t am_lat $quick -v
check_output "help lists the tests"              'am_lat, am_bw, put_lat'   "$pt" -h
check_output "unknown test is named"             "unknown test 'nope'"      "$pt" -t nope
check_output "UCP tests are explained"           'protocol layer'           "$pt" -t tag_lat
check_output "bad size is named"                 "invalid size '12q'"       "$pt" -s 12q
check_output "size lists are refused clearly"    'give one size'            "$pt" -s 8,16
check_output "loopback takes no host"            'takes no server host'     "$pt" -l localhost -x self -d memory -t am_lat
check_output "client needs a transport"          'needs -x TRANSPORT'       "$pt" -l -t am_lat
check_output "unknown transport lists the available ones" 'available:.*self/memory' "$pt" -l -x nope -d x -t am_lat
check_output "size above the transport limit"    'exceeds the am_short limit' "$pt" -l -x self -d memory -t am_lat -s 1000000
check_output "get has no short flavour"          'get has no short flavour' "$pt" -l -x self -d memory -t get
check_output "unknown option is named"           "unknown option '-Z'"      "$pt" -Z

# Two processes: self cannot reach another process, and both sides must say so and exit.
port=$((20000 + RANDOM % 20000))
"$pt" -p $port > /dev/null 2>&1 &
server=$!
check_output "self refuses a peer process"       'another process|cannot create an endpoint' \
             timeout 30 "$pt" 127.0.0.1 -p $port -x self -d memory -t am_lat $quick
wait $server 2>/dev/null
check_output "no server: the client gives up with a clear error" 'cannot connect to 127.0.0.1' \
             timeout 30 "$pt" 127.0.0.1 -p 1 -x self -d memory -t am_lat $quick
finish
