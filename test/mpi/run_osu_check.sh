#!/usr/bin/env bash
#
# OSU 7.4 with data validation (-c) on Loom: unmodified Open MPI (pml ucx) and MPICH
# (ch4:ucx) over Loom's UCX-compatible libraries, point-to-point and collective tests,
# LOOM_TLS=shm,self and tcp (over tcp a subset of the collectives, tcp_colls), small
# iteration counts. One TAP line per run; a run passes
# when the benchmark exits 0 and every size it printed says "Pass".
#
#   test/mpi/run_osu_check.sh [BUILD_DIR]      (default: <source>/build)
#
# The compatibility libraries come from BUILD_DIR/bindings/ucx/.libs (the build tree, so
# `make check` needs no install), or LOOM_UCX_COMPAT_DIR. OSU is built under
# BUILD_DIR/osu by test/mpi/build_osu.sh (incremental). LOOM_OSU_MPIS (default
# "openmpi mpich") and LOOM_OSU_TLS (default "shm,self tcp") narrow the matrix.
#
# What is left out, and why (each checked on ob1 and on UCX 1.13 in the same way):
# - osu_latency_mt exits without MPI_Finalize under Open MPI 4.1.4 on every stack (ob1,
#   UCX, Loom): an OSU 7.4 bug, so it cannot tell anything about the transport;
# - reductions run with -T mpi_int: OSU 7.4's validation of MPI_CHAR sums reports
#   "Fail" from 16 bytes on, on ob1 and UCX alike (the expected value overflows a char).
# - One-sided (Open MPI, osc ucx): OSU 7.4 validates only accumulate, fetch-and-op and
#   compare-and-swap (-c); put and get run without it (test/mpi/test_rma.c checks their
#   values), each with another window flavour and synchronisation. fop and cas run with
#   -T mpi_int: with MPI_CHAR, osc ucx 4.1.4 asks for a 1-byte atomic, which UCX refuses
#   too, and ignores the error. -w dynamic is left out: osc ucx 4.1.x looks up an access
#   that ends at its attached region's end as not attached (fixed in Open MPI 5.0.0) and
#   unpacks garbage as the key, which Loom refuses and UCX uses (docs/notes.md).
#
set -uo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$top/test/tools/tap.sh"
build=$(cd "${1:-${top_builddir:-$top/build}}" && pwd)
# The sanitizer build's libraries cannot load into MPI programs: the regular build runs this.
if [ -n "${top_builddir:-}" ] && sanitizer_build "$top_builddir"; then
    skip "OSU with validation on Loom" "AddressSanitizer build: its libraries cannot be loaded into uninstrumented MPI programs; the regular build runs these tests"
    finish
    exit 0
fi
compat=${LOOM_UCX_COMPAT_DIR:-$build/bindings/ucx/.libs}
mpis=${LOOM_OSU_MPIS:-openmpi mpich}
tls_list=${LOOM_OSU_TLS:-shm,self tcp}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

if [ ! -e "$compat/libucp.so.0" ]; then
    skip "OSU on Loom" "Loom's UCX compatibility libraries are not built ($compat/libucp.so.0 missing)"
    finish
    exit 1
fi

# pt2pt with 2 ranks; collectives with 3 (one more than a pair: real trees and rings).
pt2pt="osu_latency osu_bw osu_bibw osu_mbw_mr osu_multi_lat osu_latency_persistent osu_bw_persistent"
colls="osu_allreduce osu_reduce osu_reduce_scatter osu_allgather osu_allgatherv osu_alltoall osu_alltoallv
       osu_bcast osu_gather osu_gatherv osu_scatter osu_scatterv osu_barrier osu_iallreduce osu_ialltoall
       osu_ibcast"
mpich_subset="osu_latency osu_bw osu_bibw osu_allreduce osu_alltoall osu_bcast osu_gather"
# Over tcp, collectives that differ in their traffic (all to all, rooted, vectors, non-blocking):
# the rest move the same point-to-point messages and run over shm (half the suite's time).
tcp_colls="osu_allreduce osu_alltoallv osu_allgather osu_bcast osu_gatherv osu_scatter osu_iallreduce osu_ialltoall"
# One-sided with 2 ranks (Open MPI's osc ucx), "name:options" (options use , for spaces).
onesided="osu_put_latency:-w,create,-s,lock osu_get_latency:-w,allocate,-s,fence osu_put_bw:-s,pscw
          osu_get_bw:-w,create,-s,lock_all osu_put_bibw:-w,create osu_acc_latency:-c osu_get_acc_latency:-s,flush
          osu_fop_latency:-c,-T,mpi_int osu_cas_latency:-c,-T,mpi_int"

# run_osu MPI TLS NP BENCH: runs one benchmark; prints its output; status 0 when it passed.
run_osu() {
    local mpi=$1 tls=$2 np=$3 bench=$4 bin=$5
    local args=(-c -i 5 -x 2 -m 1:1048576) osc=()
    if [[ $bench == *:* ]]; then  # one-sided: its own options, through osc ucx
        local opts=${bench#*:}
        bench=${bench%%:*}
        read -r -a args <<< "-i 5 -x 2 -m 1:1048576 ${opts//,/ }"
        osc=(--mca osc ucx)
    fi
    case $bench in
        osu_barrier|osu_ibarrier) args=(-i 20 -x 2) ;;
        osu_allreduce|osu_reduce|osu_reduce_scatter|osu_iallreduce) args+=(-T mpi_int) ;;
        osu_multi_lat) args=(-c -i 5 -x 2 -m 1:65536) ;;
    esac
    local launcher=(env LD_LIBRARY_PATH="$compat${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" LOOM_TLS="$tls")
    if [ "$mpi" = openmpi ]; then
        launcher+=(mpirun.openmpi --oversubscribe -x LD_LIBRARY_PATH -x LOOM_TLS --mca pml ucx
                   --mca opal_common_ucx_tls any --mca opal_common_ucx_devices any "${osc[@]}" -np "$np")
    else
        launcher+=(mpiexec.mpich -n "$np")
    fi
    local out rc
    out=$(timeout 180 "${launcher[@]}" "$bin/$bench" "${args[@]}" 2>&1)
    rc=$?
    printf '%s\n' "$out"
    [ $rc -eq 0 ] || return 1
    ! printf '%s\n' "$out" | grep -q 'Fail'
}

for mpi in $mpis; do
    bin=$("$top/test/mpi/build_osu.sh" "$build" "$mpi" | awk '{print $2}')
    if [ -z "$bin" ] || [ ! -x "$bin/osu_latency" ]; then
        tap_n=$((tap_n + 1)); tap_failed=$((tap_failed + 1))
        echo "not ok $tap_n - OSU for $mpi: build failed (see $build/osu/$mpi/*.log)"
        continue
    fi
    benches_pt2pt=$pt2pt benches_colls=$colls
    if [ "$mpi" = mpich ]; then
        benches_pt2pt=$(echo $mpich_subset | tr ' ' '\n' | grep -Fx -f <(echo $pt2pt | tr ' ' '\n') | tr '\n' ' ')
        benches_colls=$(echo $mpich_subset | tr ' ' '\n' | grep -Fx -f <(echo $colls | tr ' ' '\n') | tr '\n' ' ')
    fi
    for tls in $tls_list; do
        for b in $benches_pt2pt; do
            check_run "$mpi on Loom, LOOM_TLS=$tls, np 2: $b" run_osu "$mpi" "$tls" 2 "$b" "$bin"
        done
        colls_here=$benches_colls
        [ "$tls" != tcp ] || colls_here=$(echo $benches_colls | tr ' ' '\n' | grep -Fx -f <(echo $tcp_colls | tr ' ' '\n') | tr '\n' ' ')
        for b in $colls_here; do
            check_run "$mpi on Loom, LOOM_TLS=$tls, np 3: $b" run_osu "$mpi" "$tls" 3 "$b" "$bin"
        done
        if [ "$mpi" = openmpi ]; then
            for b in $onesided; do
                opts=${b#*:}
                check_run "$mpi on Loom (osc ucx), LOOM_TLS=$tls, np 2: ${b%%:*} ${opts//,/ }" run_osu "$mpi" "$tls" 2 "$b" "$bin"
            done
        fi
    done
done
finish
