#!/usr/bin/env bash
#
# A rank killed with kill -9 in the middle of a transfer, under Open MPI and MPICH on Loom
# (shm and tcp, 3 ranks): the job must end in bounded time with a failure status, never
# hang, and a survivor whose receive succeeds must hold the whole message (a zero-copy
# transfer may finish before the sender dies), never a corrupt one.
#
#   test/mpi/run_kill_test.sh [BUILD_DIR]
#
set -uo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$top/test/tools/tap.sh"
build=$(cd "${1:-${top_builddir:-$top/build}}" && pwd)
# The sanitizer build's libraries cannot load into MPI programs: the regular build runs this.
if [ -n "${top_builddir:-}" ] && sanitizer_build "$top_builddir"; then
    skip "kill -9 under MPI on Loom" "AddressSanitizer build: its libraries cannot be loaded into uninstrumented MPI programs; the regular build runs these tests"
    finish
    exit 0
fi
compat=${LOOM_UCX_COMPAT_DIR:-$build/bindings/ucx/.libs}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
outdir=$build/test/mpi/kill
mkdir -p "$outdir"

if [ ! -e "$compat/libucp.so.0" ]; then
    skip "kill -9 under MPI on Loom" "Loom's UCX compatibility libraries are not built ($compat)"
    finish
    exit 1
fi

# killed MPI TLS: 0 when the job ended (within the timeout) with a non-zero status and
# rank 0 saw no corrupt message. Under MPICH a corrupt message is Loom's failure only if
# Loom did not fail the receive: MPICH 4.0's ch4:ucx receive callback turns every status but
# cancelled and truncated into MPI_SUCCESS, so MPI_Recv "succeeds" with the failed buffer;
# Loom's one line for a failed receive (Worker::complete) is then what must be there.
killed() {
    local mpi=$1 tls=$2 prog=$outdir/kill_peer.$1 log=$outdir/kill_peer.$1.${2//,/_}.log
    local launcher=(env LD_LIBRARY_PATH="$compat${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" LOOM_TLS="$tls")
    if [ "$mpi" = openmpi ]; then
        launcher+=(mpirun.openmpi --oversubscribe -x LD_LIBRARY_PATH -x LOOM_TLS --mca pml ucx
                   --mca opal_common_ucx_tls any --mca opal_common_ucx_devices any -np 3)
    else
        launcher+=(mpiexec.mpich -n 3)
    fi
    timeout 120 "${launcher[@]}" "$prog" > "$log" 2>&1
    local rc=$?
    echo "exit status $rc (124: timed out, the job hung)"
    cat "$log"
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q 'kills itself' "$log" || return 1
    grep -q CORRUPT "$log" || return 0
    [ "$mpi" = mpich ] && grep -q "ucp: a receive of $((64 << 20)) B failed: .*its buffer does not hold the message" "$log"
}

for mpi in openmpi mpich; do
    if ! "mpicc.$mpi" -O2 -o "$outdir/kill_peer.$mpi" "$top/test/mpi/kill_peer.c" 2>"$outdir/build.$mpi.log"; then
        tap_n=$((tap_n + 1)); tap_failed=$((tap_failed + 1))
        echo "not ok $tap_n - kill -9 under $mpi: building kill_peer.c failed ($outdir/build.$mpi.log)"
        continue
    fi
    for tls in shm,self tcp; do
        check_run "$mpi on Loom, LOOM_TLS=$tls: a rank killed with SIGKILL mid-transfer ends the job, no hang" \
            killed "$mpi" "$tls"
    done
done
finish
