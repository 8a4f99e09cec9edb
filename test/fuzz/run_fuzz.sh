#!/usr/bin/env bash
#
# The fuzz targets in ./quickstart.sh test (a tree configured with --enable-fuzz, clang,
# ASan and UBSan): every target first replays every file of its checked-in regression
# corpus (test/fuzz/corpus/<target>: inputs that once crashed, or reached a fixed bug,
# and seeds), then fuzzes for a bounded time from that corpus with a fixed seed. One TAP
# line per step; a crash, a hang (-timeout) or a leak fails it and leaves the input that
# did it in $top_builddir/test/fuzz/artifacts/.
#
#   FUZZ_SECONDS   seconds of fuzzing per target (default 36), except fuzz_rc, a few
#                  parsers of fixed-size data whose coverage is complete within seconds:
#                  at most 10.
#                  Eight targets in under 4.5 minutes.
#   FUZZ_SEED      libFuzzer's -seed (default 1)
#
set -uo pipefail
top_srcdir=${top_srcdir:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
top_builddir=${top_builddir:-$PWD}
. "$top_srcdir/test/tools/tap.sh"

seconds=${FUZZ_SECONDS:-36}
seed=${FUZZ_SEED:-1}
targets="fuzz_address fuzz_config fuzz_listener fuzz_protocol fuzz_rc fuzz_rkey fuzz_shm fuzz_tcp"
work=$top_builddir/test/fuzz/work
artifacts=$top_builddir/test/fuzz/artifacts
mkdir -p "$artifacts"
export LOOM_LOG_LEVEL=${LOOM_LOG_LEVEL:-fatal} LOOM_HANDLE_ERRORS=no
# A leak is a failure. A forged length may ask for a huge allocation: Loom handles malloc
# returning NULL (the message is dropped with an error), so the sanitizer returns NULL for
# anything over 256 MiB instead of aborting (or slowly mapping gigabytes of shadow for it,
# which forged messages kept waiting then pile up), and libFuzzer's own limit on one
# allocation is set above that.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:max_allocation_size_mb=256}
[ -x /usr/bin/llvm-symbolizer ] && export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-/usr/bin/llvm-symbolizer}

for t in $targets; do
    bin=$top_builddir/test/fuzz/$t
    corpus=$top_srcdir/test/fuzz/corpus/$t
    if [ ! -x "$bin" ]; then
        check "$t: built" false
        continue
    fi
    files=()
    [ -d "$corpus" ] && mapfile -t files < <(find "$corpus" -type f | sort)
    if [ ${#files[@]} -gt 0 ]; then
        check_run "$t: replays its ${#files[@]} regression corpus files" \
            "$bin" -artifact_prefix="$artifacts/$t-" "${files[@]}"
    else
        skip "$t: replays its regression corpus" "test/fuzz/corpus/$t has no files"
    fi
    rm -rf "${work:?}/$t" && mkdir -p "$work/$t"
    log=$top_builddir/test/fuzz/$t.fuzz.log
    secs=$seconds
    [ "$t" = fuzz_rc ] && [ "$secs" -gt 10 ] && secs=10
    # timeout: a target that stops between inputs (a stuck leak scan, say) fails, never hangs.
    timeout -k 10 $((secs + 120)) "$bin" -seed="$seed" -max_total_time="$secs" -timeout=20 -rss_limit_mb=3072 -malloc_limit_mb=2000000 -print_final_stats=1 \
        -artifact_prefix="$artifacts/$t-" "$work/$t" ${files:+"$corpus"} > "$log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1)
    tap_n=$((tap_n + 1))
    if [ $rc -eq 0 ]; then
        echo "ok $tap_n - $t: ${secs} s of fuzzing (seed $seed): ${runs:-?} inputs, ${cov:-cov: ?}, no crash, hang or leak"
    else
        echo "not ok $tap_n - $t: fuzzing failed (exit $rc); the input is in $artifacts, the log in $log"
        grep -E 'ERROR|SUMMARY|==[0-9]+==|#[0-9]+ 0x|Test unit written|fuzz_' "$log" | head -30 | sed 's/^/#   | /'
        tap_failed=$((tap_failed + 1))
    fi
done
finish
