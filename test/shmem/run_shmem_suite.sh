#!/usr/bin/env bash
#
# OpenSHMEM on Loom: test/shmem/test_shmem.c built with oshcc and run with oshrun (Open MPI
# 4.1.4's oshmem, whose only transport is spml ucx) over Loom's UCX-compatible libraries
# and, in the same run when run by hand, over UCX 1.13 (the reference): LOOM_TLS=shm,self and tcp against
# UCX_TLS=sm,self and tcp,self, 2 and 3 PEs; then OSU 7.4's OpenSHMEM benchmarks
# (osu_oshm_put and osu_oshm_get on the symmetric heap and on globals, osu_oshm_put_mr,
# osu_oshm_barrier; built by test/mpi/build_osu.sh BUILD_DIR oshmem) on both stacks, shm
# and tcp, 2 PEs: a run passes when it exits 0 having printed its last line (they have no
# validation option). One TAP line per run.
#
#   test/shmem/run_shmem_suite.sh [BUILD_DIR]      (default: $top_builddir, or <source>/build)
#
# Open MPI 4.1.4's spml ucx never deregisters its memory hooks, so MPI_Finalize crashes
# unless opal_common_ucx_opal_mem_hooks=0 (on real UCX as on Loom): every run sets it.
# Debian's openmpi-mca-params.conf disables pml ucx; oshrun's MPI layer uses it here too.
# On the reference, UCX 1.13 under spml ucx, shmem_longlong_atomic_fetch_xor leaves a wrong
# value (0 over sm, the last operand alone over tcp; Loom gets the exact value): those
# checks are a skip there, with that reason (TEST_SHMEM_KNOWN_BUGS=fetch_xor).
#
# SHMEM_SUITE_STACKS ("loom ucx" by hand) chooses the stacks; under `make check` (the test
# command) it is "loom": the reference's runs check the test program and UCX, not Loom, and
# cost half the suite's time, so they are run by hand when the program changes.
#
set -uo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$top/test/tools/tap.sh"
build=$(cd "${1:-${top_builddir:-$top/build}}" && pwd)
if sanitizer_build "$build"; then
    skip "OpenSHMEM on Loom" "AddressSanitizer build: its libraries cannot be loaded into uninstrumented programs; the regular build runs these tests"
    finish
    exit 0
fi
compat=${LOOM_UCX_COMPAT_DIR:-$build/bindings/ucx/.libs}
limit=${SHMEM_SUITE_TIMEOUT:-120}
stacks=${SHMEM_SUITE_STACKS:-$([ -n "${top_builddir:-}" ] && echo loom || echo "loom ucx")}
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

for tool in oshcc oshrun; do
    if ! command -v "$tool" >/dev/null; then
        tap_n=$((tap_n + 1)); tap_failed=$((tap_failed + 1))
        echo "not ok $tap_n - OpenSHMEM: $tool not found (Debian: openmpi-bin, libopenmpi-dev)"
        finish
        exit 1
    fi
done
if [ ! -e "$compat/libucp.so.0" ]; then
    skip "OpenSHMEM on Loom" "Loom's UCX compatibility libraries are not built ($compat/libucp.so.0 missing)"
    finish
    exit 1
fi

shmem_dir=$build/test/shmem
mkdir -p "$shmem_dir/logs"
prog=$shmem_dir/test_shmem
check_run "build test_shmem with oshcc" oshcc -O1 -Wall -o "$prog" "$top/test/shmem/test_shmem.c"

# run_pes STACK TLS NP: runs test_shmem; its output on stdout; status 0 when every check passed.
run_pes() {
    local stack=$1 tls=$2 np=$3
    local log=$shmem_dir/logs/$stack.${tls%%,*}.np$np.log
    oshrun_cmd "$stack" "$tls" "$np"
    timeout -k 10 "$limit" "${cmd[@]}" "$prog" > "$log" 2>&1 < /dev/null
    local rc=$?
    cat "$log"
    [ $rc -eq 0 ] && grep -Eq '^test_shmem: [0-9]+ checks passed$' "$log" && ! grep -q ': FAIL ' "$log"
}

# oshrun_cmd STACK TLS NP: sets cmd to the oshrun command line of that stack (no program).
oshrun_cmd() {
    local stack=$1 tls=$2 np=$3
    cmd=(oshrun -np "$np" --oversubscribe --bind-to none --mca spml ucx --mca pml ucx
               --mca opal_common_ucx_opal_mem_hooks 0 --mca opal_common_ucx_tls any --mca opal_common_ucx_devices any)
    if [ "$stack" = ucx ]; then
        case $tls in shm,self) cmd+=(-x UCX_TLS=sm,self) ;; *) cmd+=(-x UCX_TLS=tcp,self) ;; esac
        cmd=(env -u LOOM_TLS TEST_SHMEM_KNOWN_BUGS=fetch_xor "${cmd[@]}" -x TEST_SHMEM_KNOWN_BUGS)
    else
        cmd=(env -u UCX_TLS LD_LIBRARY_PATH="$compat${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" LOOM_TLS="$tls"
             "${cmd[@]}" -x LD_LIBRARY_PATH -x LOOM_TLS)
    fi
}

# run_osu STACK TLS LAST BENCH [ARG]: an OSU OpenSHMEM benchmark with 2 PEs; its output on
# stdout; status 0 when it exited 0 and its last line starts with LAST (a size), or with LAST
# "number", is one number.
run_osu() {
    local stack=$1 tls=$2 last=$3 bench=$4 arg=${5:-}
    local log=$shmem_dir/logs/osu.$stack.${tls%%,*}.$bench${arg:+.$arg}.log
    oshrun_cmd "$stack" "$tls" 2
    timeout -k 10 "$limit" "${cmd[@]}" "$osu_bin/$bench" $arg > "$log" 2>&1 < /dev/null
    local rc=$?
    grep -v 'Warning: UCX is unable to handle VM_UNMAP' "$log"
    local final
    final=$(grep -E '^ *[0-9]' "$log" | tail -1)
    [ $rc -eq 0 ] || return 1
    if [ "$last" = number ]; then
        [[ $final =~ ^\ *[0-9]+\.[0-9]+$ ]]
    else
        [ "$(echo "$final" | awk '{print $1}')" = "$last" ]
    fi
}

if [ -x "$prog" ]; then
    for stack in $stacks; do
        for tls in shm,self tcp; do
            for np in 2 3; do
                name="OpenSHMEM on $stack, ${stack^^}_TLS=$tls, $np PEs: test_shmem"
                check_run "$name" run_pes "$stack" "$tls" "$np"
                log=$shmem_dir/logs/$stack.${tls%%,*}.np$np.log
                if grep -q '^test_shmem: SKIP fetch_xor' "$log"; then
                    skip "$name: fetch-xor" "UCX 1.13 under Open MPI 4.1.4's spml ucx leaves a wrong value after shmem_longlong_atomic_fetch_xor from every PE (0 over sm, only the last operand over tcp) where Loom gets the exact one; not investigated, no upstream issue found"
                fi
            done
        done
    done
fi

# The OSU OpenSHMEM benchmarks; the last line each prints: its largest size, or (barrier)
# the latency alone, which is only checked to be a number.
if osu_out=$("$top/test/mpi/build_osu.sh" "$build" oshmem 2>&1); then
    osu_bin=$(echo "$osu_out" | awk '$1 == "oshmem" {print $2}')
    for stack in $stacks; do
        for tls in shm,self tcp; do
            for run in "1048576 osu_oshm_put heap" "1048576 osu_oshm_put global" "1048576 osu_oshm_get heap" \
                       "1048576 osu_oshm_get global" "4194304 osu_oshm_put_mr heap" "number osu_oshm_barrier"; do
                read -r last bench arg <<< "$run"
                name="OpenSHMEM on $stack, ${stack^^}_TLS=$tls, 2 PEs: $bench${arg:+ $arg}"
                check_run "$name" run_osu "$stack" "$tls" "$last" "$bench" "$arg"
            done
        done
    done
else
    tap_n=$((tap_n + 1)); tap_failed=$((tap_failed + 1))
    echo "not ok $tap_n - OSU OpenSHMEM benchmarks: build failed"
    echo "$osu_out" | tail -20 | sed 's/^/# /'
fi
finish
