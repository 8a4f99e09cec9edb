#!/bin/sh
# Builds the C examples against an installed Loom (pkg-config loom, from PREFIX given as
# $1 or the environment's PKG_CONFIG_PATH) with a C99 compiler, and runs the ping-pong
# between two processes over shm and over tcp. Exit status 0 when everything passed.
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
