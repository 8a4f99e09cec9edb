#!/usr/bin/env bash
#
# The long fuzzing campaign (not in CI): every libFuzzer target of test/fuzz for a given
# number of executions, starting from the checked-in corpus, and one line per target with
# the executions, the coverage reached (libFuzzer's "cov", edges of the instrumented code)
# and what it found. The figures go in docs/reliability.md ("Fuzzing").
#
#   contrib/fuzz/run.sh [-n RUNS] [-t SECONDS] [-o DIR] [TARGET...]
#
#   -n RUNS     executions per target (default 10000000)
#   -t SECONDS  stop a target after this long even if RUNS are not done (default: none)
#   -o DIR      where corpora, crashes and logs go (default build/fuzz-campaign)
#   TARGET      fuzz_address fuzz_config fuzz_listener fuzz_protocol fuzz_rc fuzz_rkey fuzz_shm fuzz_tcp (default: all)
#
# Needs the clang tree that ./quickstart.sh test builds (build/fuzz: --enable-fuzz, ASan,
# UBSan); its targets are built here if missing. A crash leaves the input in DIR/<target>/;
# fix it and add the input to test/fuzz/corpus/<target>/ with a name saying what it found.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
runs=10000000 seconds=0 out=$top/build/fuzz-campaign
while getopts "n:t:o:h" opt; do
    case $opt in
        n) runs=$OPTARG ;;
        t) seconds=$OPTARG ;;
        o) out=$OPTARG ;;
        *) sed -n '3,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
targets=${*:-fuzz_address fuzz_config fuzz_listener fuzz_protocol fuzz_rc fuzz_rkey fuzz_shm fuzz_tcp}
tree=$top/build/fuzz
[ -f "$tree/Makefile" ] || { echo "run.sh: no $tree: run ./quickstart.sh test first" >&2; exit 1; }
for t in $targets; do make -C "$tree" -s "test/fuzz/$t" >/dev/null; done
export LOOM_LOG_LEVEL=fatal LOOM_HANDLE_ERRORS=no ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1:max_allocation_size_mb=256
[ -x /usr/bin/llvm-symbolizer ] && export ASAN_SYMBOLIZER_PATH=/usr/bin/llvm-symbolizer
printf '| target | executions | seconds | exec/s | coverage (cov) | features (ft) | corpus | result |\n'
printf '| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n'
for t in $targets; do
    mkdir -p "$out/$t/corpus"
    log=$out/$t/fuzz.log
    start=$(date +%s)
    set +e
    "$tree/test/fuzz/$t" -runs="$runs" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=3072 \
        -malloc_limit_mb=2000000 -print_final_stats=1 -artifact_prefix="$out/$t/" \
        "$out/$t/corpus" "$top/test/fuzz/corpus/$t" > "$log" 2>&1
    rc=$?
    set -e
    took=$(($(date +%s) - start))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
    ft=$(grep -Eo 'ft: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
    corpus=$(find "$out/$t/corpus" -type f | wc -l)
    result="no crash, hang or leak"
    [ $rc -eq 0 ] || result="FAILED (exit $rc): $(grep -m1 -E 'SUMMARY|ERROR' "$log" | cut -c1-100); input in $out/$t/"
    printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$t" "${execs:-?}" "$took" "${rate:-?}" "${cov:-?}" \
        "${ft:-?}" "$corpus" "$result"
done
