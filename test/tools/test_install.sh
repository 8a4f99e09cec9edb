#!/usr/bin/env bash
# make install and make uninstall: an install into a staging directory (DESTDIR) has the
# libraries, the headers, pkg-config's loom.pc and the tools, and make uninstall takes
# every file back out (a file left behind outlives its build: a stale install in the
# prefix is what the next build's checks would find).
. "${top_srcdir:-$(dirname "$0")/../..}/test/tools/tap.sh"
if [ -z "${top_builddir:-}" ]; then
    skip "install and uninstall" "needs top_builddir (run by make check)"
    finish
    exit 0
fi
if sanitizer_build "$top_builddir"; then
    skip "install and uninstall" "checked by the regular build: the install rules are the same in every build"
    finish
    exit 0
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
prefix=${loom_prefix:-/usr/local}
# A make started by a test is not a sub-make of make check's: its jobserver is not ours.
submake() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -C "$top_builddir" -s DESTDIR="$stage" "$@"; }

check_run "make install DESTDIR=<stage> succeeds" submake install
root=$stage$prefix
for f in lib/libloom-ucp.so lib/libloom-uct.so lib/libloom-ucs.so lib/pkgconfig/loom.pc \
    include/loom/ucp.h bin/loom_info bin/loom_perftest; do
    check "$f is installed" test -e "$root/$f"
done
if [ -f "$top_builddir/bindings/python/loom/_loom.so" ]; then  # the bindings were built
    check "the Python module is installed" test -f "$root/lib/python3/dist-packages/loom/_loom.so"
    check "the Python module's libtool archive is not" test ! -e "$root/lib/python3/dist-packages/loom/_loom.la"
fi
check_run "make uninstall DESTDIR=<stage> succeeds" submake uninstall
left=$(find "$stage" -type f -o -type l)
check_output "make uninstall leaves no file behind" '^none left$' \
    sh -c 'if [ -n "$1" ]; then printf "left behind: %s\n" $1; else echo "none left"; fi' sh "$left"
finish
