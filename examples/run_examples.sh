#!/bin/sh
# Builds the C examples against an installed Loom (pkg-config loom, from PREFIX given as
# $1 or the environment's PKG_CONFIG_PATH) with a C99 compiler, and runs the ping-pong
# and the client/server example between two processes over shm and over tcp. Exit status
# 0 when everything passed.
set -eu
prefix=${1:-}
src=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -n "$prefix" ]; then
    PKG_CONFIG_PATH="$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    export PKG_CONFIG_PATH
    export LD_LIBRARY_PATH="$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
cc -std=c99 -Wall -Wextra -Werror "$src/tag_ping_pong.c" $(pkg-config --cflags --libs loom) -o "$work/tag_ping_pong"
cc -std=c99 -Wall -Wextra -Werror "$src/client_server.c" $(pkg-config --cflags --libs loom) -o "$work/client_server"
for tls in shm tcp; do
    rm -f "$work/addr"
    LOOM_TLS=$tls "$work/tag_ping_pong" -s "$work/addr" &
    server=$!
    if LOOM_TLS=$tls timeout 60 "$work/tag_ping_pong" -c "$work/addr" && wait $server; then
        echo "PASS: examples/tag_ping_pong over $tls"
    else
        echo "FAIL: examples/tag_ping_pong over $tls"
        kill $server 2>/dev/null || true
        exit 1
    fi
done
for tls in shm tcp; do
    rm -f "$work/port"
    LOOM_TLS=$tls timeout 60 "$work/client_server" -l 0 -p "$work/port" > "$work/server.out" &
    server=$!
    for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
    if [ -s "$work/port" ] &&
        LOOM_TLS=$tls timeout 60 "$work/client_server" -c 127.0.0.1 -P "$(cat "$work/port")" "ping over $tls" \
            > "$work/client.out" && wait $server &&
        grep -q "answered \"PING OVER $(echo "$tls" | tr a-z A-Z)\"" "$work/client.out"; then
        echo "PASS: examples/client_server over $tls"
    else
        echo "FAIL: examples/client_server over $tls"
        cat "$work/server.out" "$work/client.out" 2>/dev/null || true
        kill $server 2>/dev/null || true
        exit 1
    fi
done
