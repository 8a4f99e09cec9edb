#!/usr/bin/env bash
# make check's entry for the Python bindings' pytest suite (test/python, docs/python.md).
#
# Run from the build directory (automake runs tests there); the suite itself is found
# beside this script, so source and build trees may differ. The package is the one the
# build assembles in <builddir>/bindings/python/loom/ (_loom.so and __init__.py), or
# LOOM_PYTHONPATH's. Debian's Python runs it (/usr/bin/python3: numpy and pytest are
# Debian's packages, docs/python.md). A package that does not import FAILS the test: the
# bindings are part of the build, a silent skip would hide a broken one.
set -u

testdir="$(cd "$(dirname "$0")" && pwd)"
python=/usr/bin/python3
export PYTHONPATH="${LOOM_PYTHONPATH:-$PWD/bindings/python}"
# No __pycache__ or .pytest_cache in the source tree (it may be read-only: distcheck).
export PYTHONDONTWRITEBYTECODE=1

# A sanitizer build's module (and the Loom libraries under it) needs the sanitizer
# runtimes loaded before anything else, and Debian's Python is not built with them:
# preload them (leak checks off: Python's own allocations at exit are not Loom's; the
# gtest suites check Loom's leaks).
module=$(ls "$PYTHONPATH"/loom/_loom*.so 2>/dev/null | head -1)
if [ -n "$module" ] && nm -D --undefined-only "$module" 2>/dev/null | grep -q ' __asan_'; then
    preload=$(gcc -print-file-name=libasan.so)
    if nm -D --undefined-only "$module" | grep -q ' __ubsan_'; then
        preload="$preload:$(gcc -print-file-name=libubsan.so)"
    fi
    export LD_PRELOAD="$preload${LD_PRELOAD:+:$LD_PRELOAD}"
    # The quarantine capped as run_soak.sh does: the memory tests add it to their bound.
    export ASAN_OPTIONS="detect_leaks=0:quarantine_size_mb=16${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
    echo "# sanitizer build: LD_PRELOAD=$LD_PRELOAD"
fi
if ! import_out="$("$python" -c 'import loom, numpy; print(loom.__file__)' 2>&1)"; then
    echo "######################################################################"
    echo "FAIL: cannot import loom from PYTHONPATH=$PYTHONPATH"
    echo "$import_out"
    echo "(build the bindings: make in the build tree; or set LOOM_PYTHONPATH)"
    echo "######################################################################"
    exit 1
fi
if ! "$python" -c 'import pytest' 2>/dev/null; then
    echo "FAIL: $python has no pytest (Debian: apt-get install python3-pytest)"
    exit 1
fi
echo "# loom: $import_out"
echo "# suite: $testdir"

"$python" -m pytest -q -p no:cacheprovider --rootdir="$testdir" "$testdir"
exit $?
