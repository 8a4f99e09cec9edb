#!/usr/bin/env bash
# The C examples build against the *installed* Loom (pkg-config loom) and run between
# two processes over shm and tcp. make check runs after make install in ./quickstart.sh;
# a build tree that was never installed says so in a skip line.
. "${top_srcdir:-$(dirname "$0")/../..}/test/tools/tap.sh"
prefix="${loom_prefix:-}"
if [ -z "$prefix" ] || [ ! -f "$prefix/lib/pkgconfig/loom.pc" ] || [ ! -f "$prefix/include/loom/ucp.h" ]; then
    echo "ok 1 - C examples # SKIP Loom is not installed in '${prefix}' (make install first)"
    exit 0
fi
# An install left in the prefix by another build (a sanitized one, another checkout) is not
# what this build made: its examples would test someone else's libraries.
if [ -n "${top_builddir:-}" ] && ! cmp -s "$prefix/lib/pkgconfig/loom.pc" "$top_builddir/loom.pc"; then
    echo "ok 1 - C examples # SKIP the Loom installed in '${prefix}' is not this build's (its loom.pc differs: make install first)"
    exit 0
fi
check_output "examples/tag_ping_pong builds from $prefix and runs over shm and tcp" \
    'PASS: examples/tag_ping_pong over tcp' "${top_srcdir}/examples/run_examples.sh" "$prefix"
finish
