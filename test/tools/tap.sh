# Tiny TAP-style helpers for the shell tests: each check prints "ok N - name" or
# "not ok N - name"; finish prints the plan and exits non-zero on any failure.
tap_n=0
tap_failed=0

# check NAME COMMAND...: passes when COMMAND exits 0.
check() {
    local name=$1; shift
    tap_n=$((tap_n + 1))
    if "$@" >/dev/null 2>&1; then
        echo "ok $tap_n - $name"
    else
        echo "not ok $tap_n - $name"
        tap_failed=$((tap_failed + 1))
    fi
}

# check_output NAME REGEX COMMAND...: passes when COMMAND's stdout+stderr matches REGEX (grep -E).
check_output() {
    local name=$1 regex=$2; shift 2
    local out t0=$SECONDS
    out=$("$@" 2>&1)
    tap_n=$((tap_n + 1))
    if printf '%s\n' "$out" | grep -Eq -- "$regex"; then
        echo "ok $tap_n - $name"
        [ $((SECONDS - t0)) -lt 5 ] || echo "#   took $((SECONDS - t0)) s"
    else
        echo "not ok $tap_n - $name"
        echo "#   expected /$regex/ in:"
        printf '%s\n' "$out" | head -20 | sed 's/^/#   | /'
        tap_failed=$((tap_failed + 1))
    fi
}

# check_run NAME COMMAND...: passes when COMMAND exits 0; on failure shows the end of its output.
check_run() {
    local name=$1; shift
    local out rc t0=$SECONDS
    out=$("$@" 2>&1)
    rc=$?
    tap_n=$((tap_n + 1))
    if [ $rc -eq 0 ]; then
        echo "ok $tap_n - $name"
        # Where a suite's time goes: the slow checks say how long they took.
        [ $((SECONDS - t0)) -lt 5 ] || echo "#   took $((SECONDS - t0)) s"
    else
        echo "not ok $tap_n - $name"
        echo "#   exit status $rc; the end of its output:"
        printf '%s\n' "$out" | tail -15 | sed 's/^/#   | /'
        tap_failed=$((tap_failed + 1))
    fi
}

# skip NAME REASON: a check that cannot run here, listed with its reason ("# SKIP").
skip() {
    tap_n=$((tap_n + 1))
    echo "ok $tap_n - $1 # SKIP $2"
}

finish() {
    echo "1..$tap_n"
    [ "$tap_failed" -eq 0 ]
}

# sanitizer_build DIR: true when the build tree DIR was configured with AddressSanitizer.
# Its libraries cannot be loaded into programs built without it (an MPI program, say).
sanitizer_build() {
    grep -q -- '^[^#]*-fsanitize=address' "$1/Makefile" 2>/dev/null  # not a comment copied from a sources.am
}
