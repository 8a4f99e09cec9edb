#!/usr/bin/env bash
#
# Loom quick start.
#
#   ./quickstart.sh        install missing packages, build into build/, install into
#                          build/install, then run the main job
#   ./quickstart.sh test   the same set-up, then every test suite (the regular build, an
#                          AddressSanitizer+UBSan build, the threaded suites of a
#                          ThreadSanitizer build, the fuzz targets of a clang build, plus
#                          the verbs suite on RDMA devices or in ../shared/rdma-vm),
#                          ending with "N passed, N failed"
#
# Re-running is incremental. Environment knobs: JOBS (parallel make jobs, default nproc),
# LOOM_QS_SKIP_SANITIZERS=1 (test mode: regular build only, for quick local iterations),
# LOOM_QS_CONFIGURE_FLAGS (extra configure flags for the regular build).
# Test mode writes how long each part and each suite took to build/qs-timing.log.
#
set -euo pipefail

mode=${1:-run}
case "$mode" in
    run|test) ;;
    -h|--help|help)
        sed -n '3,14p' "$0" | sed 's/^# \{0,1\}//'
        exit 0 ;;
    *)
        echo "quickstart.sh: unknown mode '$mode' (use no argument, or 'test')" >&2
        exit 2 ;;
esac

top=$(cd "$(dirname "$0")" && pwd)
build="$top/build"
prefix="$build/install"
jobs=${JOBS:-$(nproc)}

say() { printf '\n==> %s\n' "$*"; }

# timed NAME COMMAND...: runs COMMAND and appends its wall time, and the CPU time of the
# processes it ran, to $timing_log (test mode only). The test command must stay within CI's
# limit on 2 cores: wall time shows where it goes, CPU time against 2 x wall how much of
# that was computing and how much waiting (which could overlap with other work).
timing_log=""
cpu_now=0
children_cpu() {  # sets cpu_now: CPU seconds (user + sys) of the shell's finished children
    # times runs in this shell (no command substitution, whose subshell has other children).
    times > "$timing_log.times"
    cpu_now=$(awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, a, /m/); t += a[1] * 60 + a[2] }; printf "%d", t }' "$timing_log.times")
}
timed() {
    local name=$1; shift
    local t0 c0 rc
    [ -z "$timing_log" ] || children_cpu
    t0=$(date +%s) c0=$cpu_now
    # Not "|| rc=$?": that would turn off set -e inside a timed shell function.
    "$@"
    rc=$?
    [ -z "$timing_log" ] && return $rc
    children_cpu
    printf '%6d s  (cpu %5d s)  %s\n' $(($(date +%s) - t0)) $((cpu_now - c0)) "$name" >> "$timing_log"
    return $rc
}

# ---------------------------------------------------------------------------------------
# 1. Packages. Everything the build, the tests and the comparisons need, from Debian.
# ---------------------------------------------------------------------------------------
packages=(
    build-essential autoconf automake libtool pkg-config ccache
    libspdlog-dev libfmt-dev libhwloc-dev libnuma-dev
    libibverbs-dev librdmacm-dev rdma-core ibverbs-utils
    bpftrace
    libgtest-dev libgmock-dev
    libopenmpi-dev openmpi-bin
    # MPI on Loom (bindings/ucx): the MPIs that run on it, UCX for the ABI test's headers
    # and as the baseline, and what the MPI tests and plots use.
    mpich libmpich-dev libucx-dev ucx-utils
    iproute2 util-linux python3-matplotlib
    # the network fault tests make a simulated host go silent (test/faults)
    nftables
    # the fuzz targets (test/fuzz): clang with libFuzzer and its sanitizer runtimes
    clang-16 libfuzzer-16-dev libclang-rt-16-dev
    # the Python bindings (bindings/python), their tests and benchmark (docs/python.md)
    python3-dev pybind11-dev python3-numpy python3-pytest python3-mpi4py
)

install_packages() {
    local missing=()
    for p in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing missing Debian packages: ${missing[*]}"
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "quickstart.sh: need root or sudo to install ${missing[*]}" >&2; exit 1; }
        sudo=(sudo)
    fi
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# ---------------------------------------------------------------------------------------
# 2. Build: autogen when needed, configure once per build dir, make -j, install.
# ---------------------------------------------------------------------------------------
# Compilers go through ccache when it is there, so rebuilds after a clean are quick.
# The fuzz tree is built with clang (qs_compiler=clang), every other one with GCC.
compilers=()
qs_compiler=gcc
set_compilers() {
    local cxx=g++ cc=gcc
    [ "$qs_compiler" = clang ] && cxx=clang++-16 cc=clang-16
    if command -v ccache >/dev/null; then
        export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/loom-ccache}
        export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-2G}
        compilers=("CXX=ccache $cxx" "CC=ccache $cc")
    else
        compilers=("CXX=$cxx" "CC=$cc")
    fi
}

regenerate() {
    if [ ! -x "$top/configure" ] || [ "$top/configure.ac" -nt "$top/configure" ]; then
        say "generating configure (autogen.sh)"
        AUTOGEN_QUIET=1 "$top/autogen.sh"
    fi
}

# configure_dir DIR FLAGS...: configures DIR unless it is already configured with FLAGS.
configure_dir() {
    local dir=$1; shift
    local flags="$*"
    mkdir -p "$dir"
    if [ -f "$dir/Makefile" ] && [ "$(cat "$dir/.qs-flags" 2>/dev/null)" = "$flags" ]; then
        return 0
    fi
    say "configuring $dir"
    set_compilers
    # A tree configured before with other flags starts clean: libtool links a library for
    # its install directory, and a changed --prefix would not relink it (ccache keeps the
    # rebuild cheap).
    [ ! -f "$dir/Makefile" ] || make -C "$dir" clean >/dev/null 2>&1 || true
    # shellcheck disable=SC2068
    (cd "$dir" && "$top/configure" "${compilers[@]}" $@ > configure.out 2>&1) || {
        tail -40 "$dir/configure.out" >&2
        echo "quickstart.sh: configure failed in $dir (full output: $dir/configure.out)" >&2
        exit 1
    }
    sed -n '/configuration summary/,$p' "$dir/configure.out"
    echo "$flags" > "$dir/.qs-flags"
}

build_main() {
    regenerate
    # shellcheck disable=SC2086
    configure_dir "$build" --prefix="$prefix" ${LOOM_QS_CONFIGURE_FLAGS:-}
    say "building and installing into $prefix (make -j$jobs)"
    make -C "$build" -j"$jobs" install >"$build/make.out" 2>&1 || {
        grep -E 'error|Error' -A3 "$build/make.out" | head -60 >&2
        echo "quickstart.sh: build failed (full output: $build/make.out)" >&2
        exit 1
    }
    echo "installed: $prefix/bin/loom_info, $prefix/lib/libloom-ucs.so, $prefix/include/loom/"
}

# ---------------------------------------------------------------------------------------
# 3. The main job.
# ---------------------------------------------------------------------------------------
# perf TL DEV ARGS...: runs one loom_perftest measurement and prints its "Final:" line.
# self runs in one process (loopback); every other transport runs as a server and a client.
perf() {
    local tl=$1 dev=$2; shift 2
    local pt="$prefix/bin/loom_perftest"
    if [ "$tl" = self ]; then
        timeout 120 "$pt" -l -x "$tl" -d "$dev" -f "$@" 2>&1 | grep '^Final:'
        return
    fi
    local port=$((20000 + RANDOM % 12000))
    timeout 120 "$pt" -p "$port" >/dev/null 2>&1 &
    local server=$!
    timeout 120 "$pt" 127.0.0.1 -p "$port" -x "$tl" -d "$dev" -f "$@" 2>&1 | grep '^Final:'
    wait "$server" 2>/dev/null || true
}

main_job() {
    say "main job: ping-pong latency and bandwidth between two processes over every transport here"
    local transports
    transports=$("$prefix/bin/loom_info" -d | sed -n 's/^#   transport \([^ ]*\) on device \([^ ]*\) .*/\1 \2/p')
    printf '%-8s %-10s %22s %26s\n' transport device "8 B latency (us, p50)" "bandwidth (MB/s)"
    while read -r tl dev; do
        [ -n "$tl" ] || continue
        local lat bw
        lat=$(perf "$tl" "$dev" -t am_lat -s 8 -n 100000 -w 1000 | awk '{print $3}')
        bw=$(perf "$tl" "$dev" -t am_bw -D bcopy -s 8192 -n 20000 -w 100 | awk '{print $7}')
        if [ "$tl" != self ]; then
            local put
            put=$(perf "$tl" "$dev" -t put_bw -D zcopy -s 65536 -n 5000 -w 50 | awk '{print $7}')
            [ -n "$put" ] && bw=$put
        fi
        printf '%-8s %-10s %22s %26s\n' "$tl" "$dev" "${lat:-failed}" "${bw:-failed}"
    done <<< "$transports"
    echo "(self: one process talking to itself; bandwidth is put zcopy of 64 KiB where the transport has it,"
    echo " else active messages of 8 KiB; details: $prefix/bin/loom_perftest -h, loom_info -d)"
    echo
    say "main job, protocol level: tagged messages through the C API between two processes"
    printf '%-8s %22s %22s %24s\n' LOOM_TLS "8 B tag_lat (us, p50)" "64 KiB tag_lat (us)" "1 MiB tag_bw (MB/s)"
    local tl
    for tl in shm tcp; do
        local lat8 lat64k bw1m
        # -x sets LOOM_TLS in both processes; the device argument is not used at this level.
        lat8=$(perf "$tl" all -t tag_lat -s 8 -n 100000 -w 1000 | awk '{print $3}')
        lat64k=$(perf "$tl" all -t tag_lat -s 65536 -n 5000 -w 100 | awk '{print $3}')
        bw1m=$(perf "$tl" all -t tag_bw -s 1048576 -n 1000 -w 20 -O 4 | awk '{print $7}')
        printf '%-8s %22s %22s %24s\n' "$tl" "${lat8:-failed}" "${lat64k:-failed}" "${bw1m:-failed}"
    done
    echo "(eager below the rendezvous threshold, rendezvous above it: LOOM_PROTO_INFO=y shows the choice;"
    echo " compare with UCX: python3 contrib/bench/compare_ucp.py, docs/performance.md)"
    echo
    mpi_job
    "$prefix/bin/loom_info" -v
}

# osu NAME TLS ARGS...: one OSU benchmark through Open MPI on Loom (loom_mpirun), 2 ranks.
osu() {
    local name=$1 tls=$2; shift 2
    LOOM_TLS=$tls OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        timeout 300 "$prefix/bin/loom_mpirun" -np 2 "$osu_bin/$name" "$@" 2>&1
}

# The MPI part of the main job: unmodified Open MPI running the OSU benchmarks on Loom.
mpi_job() {
    say "main job, MPI: Open MPI's pml ucx on Loom (loom_mpirun), OSU 7.4 osu_latency and osu_bw, 2 ranks"
    osu_bin=$("$top/test/mpi/build_osu.sh" "$build" openmpi | awk '{print $2}')
    printf '%-10s %20s %22s %20s %22s\n' LOOM_TLS "osu_latency 8 B (us)" "loom_perftest tag_lat" \
        "osu_bw 1 MiB (MB/s)" "loom_perftest tag_bw"
    local tl
    for tl in shm tcp; do
        local lat bw plat pbw
        lat=$(osu osu_latency "$tl" -m 8:8 | awk '$1 == 8 {print $2}')
        bw=$(osu osu_bw "$tl" -m 1048576:1048576 | awk '$1 == 1048576 {print $2}')
        plat=$(perf "$tl" all -t tag_lat -s 8 -n 100000 -w 1000 | awk '{print $4}')
        pbw=$(perf "$tl" all -t tag_bw -s 1048576 -n 1000 -w 20 -O 64 | awk '{print $7}')
        printf '%-10s %20s %22s %20s %22s\n' "$tl" "${lat:-failed}" "${plat:-failed}" "${bw:-failed}" "${pbw:-failed}"
    done
    echo "(latency: OSU's average and loom_perftest's average one-way time; osu_bw keeps 64 messages in flight,"
    echo " so does tag_bw here. Any MPI program runs on Loom the same way: $prefix/bin/loom_mpirun -np N prog;"
    echo " MPICH: loom_mpirun --mpich. Loom against UCX and ob1: python3 contrib/bench/compare_mpi.py, docs/mpi.md)"
    echo
}

# ---------------------------------------------------------------------------------------
# 4. Tests: make check in each build, then one summary over every suite's log.
# ---------------------------------------------------------------------------------------
# run_checks DIR LABEL [install]: make check in DIR; with "install", make install first
# (into DIR's own prefix), so the suites that test the installed tree run in that build too.
run_checks() {
    local dir=$1 label=$2 install=${3:-}
    say "running the test suites ($label)"
    # Results of an earlier run must never be counted again.
    find "$dir/test" \( -name '*.trs' -o -name '*.log' \) -delete 2>/dev/null || true
    if [ "$install" = install ] && ! make -C "$dir" -j"$jobs" install >"$dir/install.out" 2>&1; then
        grep -E 'error|Error' -A3 "$dir/install.out" | head -40 >&2
        echo "quickstart.sh: make install failed in $dir (full output: $dir/install.out)" >&2
    fi
    # make check returns non-zero when a suite fails; the summary below counts it.
    make -C "$dir" -j"$jobs" check >"$dir/check.out" 2>&1 || true
    grep -E '^(PASS|FAIL|ERROR|XPASS|XFAIL|SKIP):' "$dir/check.out" | sed "s|^|  [$label] |" || true
    if ! find "$dir/test" -name '*.trs' | grep -q .; then
        grep -E 'error' -A3 "$dir/check.out" | head -40 >&2
        echo "quickstart.sh: building the tests failed in $dir (full output: $dir/check.out)" >&2
    fi
}

# The suites that use threads, for the ThreadSanitizer build (gtest filter): async events
# and timers, callback queues, event fds and sets, the rings, memory hooks and the
# registration cache under concurrent events, worker wake-up and signal from other
# threads, thread mode multi (and its stress test), client/server with a listener thread,
# keep-alive rounds, requests across thread modes. Left out: the two free-hook tests that
# run in a forked child (TSan turns its interceptors and hooks off in the child of a
# multi-threaded process, so no free reaches Loom there; both run in the other builds).
tsan_filter="AsyncContext.*:CallbackQueue.*:EventFd.*:EventSet.*:RingBuffer.*:SpscRing.*:MemHooks.*"
tsan_filter+=":Rcache*:*UcpWakeup*:*UcpThreads*:*UcpClientServer*:*UcpKeepalive*:*UcpRequest*"
tsan_filter+="-MemHooks.TrimOfTheMainHeapIsReported:RcacheEvents.FreedBufferMallocedAgainIsRegisteredAgain"
tsan_tests="test/gtest/gtest-ucs test/gtest/gtest-ucp"

# run_some_checks DIR LABEL "PROGRAMS" "TESTS": builds only PROGRAMS in DIR (not the
# tools, bindings and other tests that "make check" would build first) and runs TESTS
# with the harness (check-TESTS, told that PROGRAMS are all the check programs, so it
# builds nothing else). The environment of the call reaches the tests.
run_some_checks() {
    local dir=$1 label=$2 programs=$3 tests=$4
    say "running the test suites ($label)"
    find "$dir/test" \( -name '*.trs' -o -name '*.log' \) -delete 2>/dev/null || true
    # shellcheck disable=SC2086
    if make -C "$dir" -j"$jobs" $programs >"$dir/check.out" 2>&1; then
        make -C "$dir" -j"$jobs" check-TESTS TESTS="$tests" check_PROGRAMS="$programs" check_LTLIBRARIES= \
            >>"$dir/check.out" 2>&1 || true
    fi
    grep -E '^(PASS|FAIL|ERROR|XPASS|XFAIL|SKIP):' "$dir/check.out" | sed "s|^|  [$label] |" || true
    if ! find "$dir/test" -name '*.trs' | grep -q .; then
        grep -E 'error' -A3 "$dir/check.out" | head -40 >&2
        echo "quickstart.sh: building the tests failed in $dir (full output: $dir/check.out)" >&2
    fi
}

# run_tsan_checks DIR: the threaded tests ($tsan_filter) in the ThreadSanitizer tree DIR.
# Any report fails its suite (TSan exits non-zero); the suppressions file holds
# third-party code only, each with its reason.
run_tsan_checks() {
    GTEST_FILTER=$tsan_filter \
    TSAN_OPTIONS="suppressions=$top/test/tsan.supp second_deadlock_stack=1 history_size=4 ${TSAN_OPTIONS:-}" \
        run_some_checks "$1" tsan "$tsan_tests" "$tsan_tests"
}

# run_fuzz_checks DIR: the fuzz targets in the clang tree DIR (--enable-fuzz, ASan, UBSan):
# test/fuzz/run_fuzz.sh makes each replay its regression corpus, then fuzz for
# FUZZ_SECONDS (default 36, fuzz_rc 10; all eight within 4.5 minutes).
fuzz_targets="test/fuzz/fuzz_address test/fuzz/fuzz_config test/fuzz/fuzz_listener test/fuzz/fuzz_protocol test/fuzz/fuzz_rc test/fuzz/fuzz_rkey test/fuzz/fuzz_shm test/fuzz/fuzz_tcp"
run_fuzz_checks() {
    run_some_checks "$1" fuzz "$fuzz_targets" test/fuzz/run_fuzz.sh
}

summarize() {
    python3 "$top/test/summarize.py" "$@"
}

# suite_times DIR LABEL: each suite's wall time from its log's creation (the harness opens
# it when the suite starts) to its verdict file (written when it ends), into $timing_log.
suite_times() {
    local dir=$1 label=$2 trs log
    find "$dir/test" -name '*.trs' | sort | while read -r trs; do
        log=${trs%.trs}.log
        [ -f "$log" ] || continue
        printf '%6d s                 [%s] %s\n' $(($(stat -c %Y "$trs") - $(stat -c %W "$log"))) "$label" "${trs#"$dir"/}"
    done >> "$timing_log"
}

if [ "$mode" = test ]; then
    mkdir -p "$build"
    timing_log=$build/qs-timing.log
    : > "$timing_log"
fi
start=$(date +%s)
install_packages
timed "regular build and install" build_main

if [ "$mode" = run ]; then
    main_job
    exit 0
fi

command -v python3 >/dev/null || packages+=(python3)
install_packages

timed "regular: make check (test binaries and suites)" run_checks "$build" "regular"
suite_times "$build" regular
logdirs=("regular=$build")
if [ "${LOOM_QS_SKIP_SANITIZERS:-0}" != 1 ]; then
    asan="$build/sanitize"
    # Each build installs into its own directory, never into configure's /usr/local: an
    # install there would outlive the run and be found by the next one's checks.
    timed "asan+ubsan: configure" configure_dir "$asan" --prefix="$asan/install" --enable-asan --enable-ubsan --enable-assertions --with-max-log-level=trace_data
    timed "asan+ubsan: make install and check (build, test binaries and suites)" run_checks "$asan" "asan+ubsan" install
    suite_times "$asan" asan+ubsan
    logdirs+=("asan+ubsan=$asan")
    tsan="$build/tsan"
    timed "tsan: configure" configure_dir "$tsan" --prefix="$tsan/install" --enable-tsan --enable-assertions
    timed "tsan: make check of the threaded suites (build and run)" run_tsan_checks "$tsan"
    suite_times "$tsan" tsan
    fuzz="$build/fuzz"
    qs_compiler=clang
    timed "fuzz: configure (clang)" configure_dir "$fuzz" --prefix="$fuzz/install" --enable-fuzz --enable-asan --enable-ubsan --enable-assertions
    qs_compiler=gcc
    timed "fuzz: build the targets and fuzz each" run_fuzz_checks "$fuzz"
    suite_times "$fuzz" fuzz
else
    echo "NOTE: LOOM_QS_SKIP_SANITIZERS=1: the AddressSanitizer+UBSan, ThreadSanitizer and fuzz builds were not run" >&2
fi
# The verbs suite needs RDMA devices: this machine's, or the rdma-vm beside the checkout.
# Both builds' suites run in one VM boot (a boot under TCG costs most of a minute). The
# ThreadSanitizer build's threaded suites have no verbs part.
rdma_builds=("${logdirs[@]#*=}")
[ -z "${tsan:-}" ] || logdirs+=("tsan=$tsan" "fuzz=$fuzz")
LOOM_QS_TIMING_LOG=$timing_log timed "verbs suites (rdma) of ${#rdma_builds[@]} build(s), one VM boot" \
    "$top/test/rdma/run_rdma_tests.sh" "${rdma_builds[@]}" || true
children_cpu
printf '%6d s  (cpu %5d s)  total\n' $(($(date +%s) - start)) "$cpu_now" >> "$timing_log"
rm -f "$timing_log.times"
say "where the time went ($timing_log)"
cat "$timing_log"
summarize "${logdirs[@]}"
