#!/usr/bin/env bash
#
# The MPI correctness suite (test/mpi/test_*.c): builds every program with Open MPI's and
# MPICH's compilers, then runs each one under every MPI stack, transport and rank count
# and prints one TAP line per run (the format of test/tools/tap.sh), e.g.
#
#   ok 12 - ompi-ucx tls=shm np=3: test_ordering
#
#   test/mpi/run_mpi_suite.sh [OPTIONS] [BUILD_DIR]
#
# BUILD_DIR (default $top_builddir/test/mpi, as `make check` sets it) receives ompi/ and
# mpich/ (the programs), logs/ (one log per run) and nothing else.
#
# Stacks (--stacks / MPI_SUITE_STACKS, default: all of them by hand; under `make check`, the
# test command, ompi-ob1 ompi-loom mpich-loom: the UCX stacks check the programs and UCX, not
# Loom, and cost two fifths of the suite's time, so they are run by hand when a program
# changes; ob1 stays as the control that an MPI without UCX passes the same programs):
#   ompi-ob1    Open MPI, pml ob1: tls=shm is btl vader,self; tls=tcp is btl tcp,self
#   ompi-ucx    Open MPI, pml ucx over the system's UCX: UCX_TLS=sm,self or tcp,self
#   mpich-ucx   MPICH ch4:ucx over the system's UCX: UCX_TLS=sm,self or tcp,self
#   ompi-loom   as ompi-ucx, with Loom's libucp.so.0/libucs.so.0/libucm.so.0 first on
#   mpich-loom  LD_LIBRARY_PATH (for the ranks too) and LOOM_TLS=shm,self or tcp instead
#               of UCX_TLS; they need --loom DIR / LOOM_UCX_COMPAT_DIR, else they print a
#               "# SKIP" line saying why.
# Options (each also an environment variable):
#   --stacks "A B"    MPI_SUITE_STACKS    stacks to run
#   --tls "shm tcp"   MPI_SUITE_TLS       transports
#   --np "2 3"        MPI_SUITE_NP        rank counts
#   --programs "..."  MPI_SUITE_PROGRAMS  programs (test_ordering ...), default all
#   --loom DIR        LOOM_UCX_COMPAT_DIR the directory holding Loom's libucp.so.0 etc.
#   --timeout SEC     MPI_SUITE_TIMEOUT   per run (default 120); a run still going then
#                                         fails, and so does one whose MPI_Finalize has not
#                                         returned MPI_SUITE_FINALIZE_GRACE seconds after
#                                         its verdict line (default 30 for Open MPI; 8 for
#                                         MPICH, whose finalize hang is a known bug)
#   --show                                print the commands instead of running them
#   -v                                    show every run's output as "#   |" lines
# LOOM_TLS_SHM / LOOM_TLS_TCP override the LOOM_TLS values (shm,self and tcp).
#
# One program under one stack, by hand (output on the terminal, exit status of the job):
#
#   test/mpi/run_mpi_suite.sh --loom build/bindings/ucx/.libs --one mpich-loom tcp 3 test_ordering build/test/mpi
#
# (MPITEST_VERBOSE=1 in the environment makes every rank print its phases; --show prints
# the command so that it can be run under a debugger.)
#
# Known bugs of the reference stacks: the runner names them to the programs in
# MPITEST_KNOWN_BUGS; a program that meets one prints "test_x: SKIP key: ..." instead of
# failing, and the runner turns that into a TAP skip line naming the upstream bug
# (known_bug_reason below). An MPICH run whose checks all passed but whose MPI_Finalize
# hung is a skip too (MPICH 4.0.2's finalize deadlock, see mpich_finalize_reason).
set -uo pipefail

top_srcdir=${top_srcdir:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
. "$top_srcdir/test/tools/tap.sh"
src=$top_srcdir/test/mpi

all_programs="test_ordering test_wildcard test_probe test_truncate test_cancel test_datatype
              test_many_requests test_zero test_self test_persistent test_modes test_collectives test_threads
              test_rma"
all_stacks="ompi-ob1 ompi-ucx mpich-ucx ompi-loom mpich-loom"

# The sanitizer build's libraries cannot load into MPI programs: the regular build runs this.
if [ -n "${top_builddir:-}" ] && sanitizer_build "$top_builddir"; then
    skip "MPI correctness suite" "AddressSanitizer build: its libraries cannot be loaded into uninstrumented MPI programs; the regular build runs these tests"
    finish
    exit 0
fi
stacks=${MPI_SUITE_STACKS:-$([ -n "${top_builddir:-}" ] && echo "ompi-ob1 ompi-loom mpich-loom" || echo "$all_stacks")}
tls_list=${MPI_SUITE_TLS:-shm tcp}
np_list=${MPI_SUITE_NP:-2 3}
programs=${MPI_SUITE_PROGRAMS:-$all_programs}
# Under `make check` (top_builddir set) the Loom stacks use the build tree's libraries.
loom_dir=${LOOM_UCX_COMPAT_DIR:-${top_builddir:+$top_builddir/bindings/ucx/.libs}}
limit=${MPI_SUITE_TIMEOUT:-120}
grace_env=${MPI_SUITE_FINALIZE_GRACE:-}
loom_tls_shm=${LOOM_TLS_SHM:-shm,self}
loom_tls_tcp=${LOOM_TLS_TCP:-tcp}
show=0 verbose=0 one=()
build=""

usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; exit "${1:-0}"; }

while [ $# -gt 0 ]; do
    case $1 in
        --stacks) stacks=$2; shift 2 ;;
        --tls) tls_list=$2; shift 2 ;;
        --np) np_list=$2; shift 2 ;;
        --programs) programs=$2; shift 2 ;;
        --loom) loom_dir=$2; shift 2 ;;
        --timeout) limit=$2; shift 2 ;;
        --show) show=1; shift ;;
        -v) verbose=1; shift ;;
        --one) one=("$2" "$3" "$4" "$5"); shift 5 ;;
        -h|--help) usage 0 ;;
        -*) echo "run_mpi_suite.sh: unknown option '$1'" >&2; usage 2 ;;
        *) build=$1; shift ;;
    esac
done
if [ -z "$build" ]; then
    if [ -z "${top_builddir:-}" ]; then
        echo "run_mpi_suite.sh: give the build directory (or set top_builddir)" >&2
        exit 2
    fi
    build=$top_builddir/test/mpi
fi
mkdir -p "$build/logs" || exit 2
build=$(cd "$build" && pwd)
[ -n "$loom_dir" ] && [ -d "$loom_dir" ] && loom_dir=$(cd "$loom_dir" && pwd)

for s in $stacks; do
    case " $all_stacks " in *" $s "*) ;; *) echo "run_mpi_suite.sh: unknown stack '$s' (known: $all_stacks)" >&2; exit 2 ;; esac
done
for p in $programs; do
    [ -f "$src/$p.c" ] || { echo "run_mpi_suite.sh: no program '$p' ($src/$p.c)" >&2; exit 2; }
done

# Running as root needs Open MPI's consent; the environment variables reach mpirun only.
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

# ---- known bugs of the reference stacks -------------------------------------------------

# The keys each stack's programs are told about (MPITEST_KNOWN_BUGS).
known_bugs() {
    case $1 in
        ompi-ob1) if [ "${2:-}" = tcp ]; then echo ob1_truncate_overflow; else echo ob1_truncate_overflow,osc_rdma_vader_cas; fi ;;
        ompi-ucx|ompi-loom) echo ompi_ucx_waitall_pending ;; # Open MPI's pml ucx, whatever libucp is under it
        mpich-ucx|mpich-loom) echo mpich_unsigned_max ;;
    esac
}

known_bug_reason() {
    case $1 in
        ob1_truncate_overflow)
            echo "Open MPI ob1 (4.1.4; same code in 4.1.8, 5.0.9 and main) writes a truncated rendezvous message" \
                 "past the end of the receive buffer: its RDMA rendezvous (vader's CMA get, tcp's put) moves the" \
                 "sender's hdr_msg_length bytes, not the buffer's size, and reports MPI_ERR_TRUNCATE only afterwards" \
                 "(pml_ob1_recvreq.c; heap corruption; no upstream issue found)" ;;
        ompi_ucx_waitall_pending)
            echo "Open MPI pml ucx (4.1.4; same code in 5.0.9 and main): when MPI_Waitall fails with a truncated" \
                 "receive, it may free a still-active request it reports MPI_ERR_PENDING (its handle becomes" \
                 "MPI_REQUEST_NULL): mca_pml_ucx_request_reset() leaves req_status.MPI_ERROR of a recycled request" \
                 "stale and ompi_errhandler_request_invoke() frees every request with an error set (no upstream" \
                 "issue found)" ;;
        osc_rdma_vader_cas)
            echo "Open MPI osc rdma over btl vader (4.1.4): MPI_Compare_and_swap crashes (SIGSEGV in" \
                 "mca_btl_vader_send, called by vader's emulated atomics, mca_btl_vader_emu_acswap, on the origin" \
                 "and then on the target in its progress); osc rdma is Open MPI's only one-sided component over vader" \
                 "besides pt2pt, which Debian disables (no upstream issue found)" ;;
        mpich_unsigned_max)
            echo "MPICH 4.0.2's yaksa reductions treat unsigned types as signed (MAX of unsigned char 154 and 115" \
                 "gives 115): pmodels/mpich#6083, fixed by pmodels/mpich#6085 in MPICH 4.1" ;;
        *) echo "unknown key $1" ;;
    esac
}

mpich_finalize_reason="MPICH 4.0.2 ch4/ucx MPI_Finalize deadlock: after ucp_disconnect_nb a rank waits in a PMI barrier"
mpich_finalize_reason+=" without progressing UCX, while a peer's disconnect waits for it (UCX 1.13's tcp flush sends a"
mpich_finalize_reason+=" 0-byte PUT and waits for its ACK); fixed in MPICH 4.2.0 (pmodels/mpich#6596, commits 08d8105b,"
mpich_finalize_reason+=" d6c7cd5b); seen with 3 ranks over tcp, about 1 run in 4"

mpich_ucx_rma_reason="the reference stack MPICH 4.0.2 ch4:ucx over UCX 1.13 fails test_rma's value checks (puts"
mpich_ucx_rma_reason+=" missing at the target after MPI_Win_fence, post/start/complete/wait and flush_all, in some runs"
mpich_ucx_rma_reason+=" most of them) while MPICH over Loom and Open MPI over UCX pass; one-sided MPICH is not a"
mpich_ucx_rma_reason+=" target of this suite's comparison (docs/mpi.md); not investigated further, no upstream issue found"

# ---- stacks ------------------------------------------------------------------------------

compiler_of() { case $1 in ompi-*) echo mpicc.openmpi ;; mpich-*) echo mpicc.mpich ;; esac; }
flavour_of() { case $1 in ompi-*) echo ompi ;; mpich-*) echo mpich ;; esac; }

# why_unavailable STACK: prints why STACK cannot run here (nothing when it can).
why_unavailable() {
    local stack=$1 cc
    cc=$(compiler_of "$stack")
    command -v "$cc" >/dev/null || { echo "$cc not found"; return; }
    case $stack in
        ompi-*) command -v mpirun.openmpi >/dev/null || { echo "mpirun.openmpi not found"; return; } ;;
        mpich-*) command -v mpiexec.mpich >/dev/null || { echo "mpiexec.mpich not found"; return; } ;;
    esac
    case $stack in
        ompi-ucx|ompi-loom)
            ompi_info --parsable 2>/dev/null | grep -q '^mca:pml:ucx:' || { echo "Open MPI has no pml ucx"; return; } ;;
        mpich-*)
            mpichversion 2>/dev/null | grep -q 'ch4:ucx' || { echo "MPICH is not built with ch4:ucx"; return; } ;;
    esac
    case $stack in
        *-loom)
            if [ -z "$loom_dir" ]; then
                echo "LOOM_UCX_COMPAT_DIR (or --loom DIR) is not set: no directory with Loom's libucp.so.0," \
                     "libucs.so.0 and libucm.so.0 to put first on LD_LIBRARY_PATH"
                return
            fi
            [ -d "$loom_dir" ] || { echo "LOOM_UCX_COMPAT_DIR=$loom_dir does not exist"; return; }
            local missing="" l
            for l in libucp.so.0 libucs.so.0 libucm.so.0; do [ -e "$loom_dir/$l" ] || missing+=" $l"; done
            [ -z "$missing" ] || echo "LOOM_UCX_COMPAT_DIR=$loom_dir lacks$missing"
            ;;
    esac
}

# command_for STACK TLS NP PROGRAM: the command line of one run, one word per line.
command_for() {
    local stack=$1 tls=$2 np=$3 prog=$4 bin
    bin=$build/$(flavour_of "$stack")/$prog
    local bugs
    bugs=$(known_bugs "$stack" "$tls")
    local ucx_tls loom_tls
    case $tls in
        shm) ucx_tls=sm,self; loom_tls=$loom_tls_shm ;;
        tcp) ucx_tls=tcp,self; loom_tls=$loom_tls_tcp ;;
        *) ucx_tls=$tls; loom_tls=$tls ;;
    esac
    local ld="$loom_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    local -a cmd
    case $stack in
        ompi-*)
            cmd=(mpirun.openmpi -np "$np" --oversubscribe --bind-to none -x MPITEST_KNOWN_BUGS="$bugs")
            [ -n "${MPITEST_VERBOSE:-}" ] && cmd+=(-x MPITEST_VERBOSE="$MPITEST_VERBOSE")
            ;;
    esac
    case $stack in
        ompi-ob1)
            local btl=vader,self
            [ "$tls" = tcp ] && btl=tcp,self
            cmd+=(--mca pml ob1 --mca btl "$btl")
            # One-sided: osc rdma needs an RDMA-capable btl (vader; not tcp), where osc pt2pt
            # (which Debian's openmpi-mca-params.conf disables) is the reference.
            if [ "$prog" = test_rma ]; then
                if [ "$tls" = tcp ]; then cmd+=(--mca osc pt2pt); else cmd+=(--mca osc rdma); fi
            fi
            ;;
        ompi-ucx|ompi-loom)
            # Debian's openmpi-mca-params.conf says pml ^ucx; "any" keeps Open MPI from
            # filtering transports and devices by UCX's names.
            cmd+=(--mca pml ucx --mca opal_common_ucx_tls any --mca opal_common_ucx_devices any)
            # One-sided through osc ucx (Debian's openmpi-mca-params.conf says osc ^ucx).
            [ "$prog" = test_rma ] && cmd+=(--mca osc ucx)
            if [ "$stack" = ompi-ucx ]; then
                cmd+=(-x UCX_TLS="$ucx_tls")
            else
                cmd=(env -u UCX_TLS "${cmd[@]}" -x LD_LIBRARY_PATH="$ld" -x LOOM_TLS="$loom_tls")
            fi
            ;;
        mpich-ucx|mpich-loom)
            # Debian's MPICH is ch4:ucx with no shared-memory module (configure turns the
            # default "auto" into "none" for ucx): every message, on-node too, goes
            # through UCX, so no MPIR_CVAR_NOLOCAL / MPIR_CVAR_CH4_SHM is needed.
            cmd=(mpiexec.mpich -n "$np" -genv MPITEST_KNOWN_BUGS "$bugs")
            if [ "$stack" = mpich-ucx ]; then
                cmd+=(-genv UCX_TLS "$ucx_tls")
            else
                cmd=(env -u UCX_TLS "${cmd[@]}" -genv LD_LIBRARY_PATH "$ld" -genv LOOM_TLS "$loom_tls")
            fi
            ;;
    esac
    cmd+=("$bin")
    printf '%s\n' "${cmd[@]}"
}

# Quotes a command for printing.
quoted() {
    local w out=""
    for w in "$@"; do
        if [[ $w =~ ^[A-Za-z0-9_./,=:+@%-]+$ ]]; then out+="$w "; else out+="$(printf '%q' "$w") "; fi
    done
    echo "${out% }"
}

# ---- TAP helpers of this script (tap.sh's counters and finish) ---------------------------

tap_ok() { tap_n=$((tap_n + 1)); echo "ok $tap_n - $1"; }
tap_skip() { tap_n=$((tap_n + 1)); echo "ok $tap_n - $1 # SKIP $2"; }
tap_not_ok() { tap_n=$((tap_n + 1)); tap_failed=$((tap_failed + 1)); echo "not ok $tap_n - $1"; }
# show_log LOG: the program's failure lines, then the end of the log, as TAP comments.
show_log() {
    local log=$1
    { grep -E ': FAIL ' "$log" | head -10; echo "... (last lines)"; tail -12 "$log"; } | sed 's/^/#   | /'
    echo "#   log: $log"
}

# ---- build --------------------------------------------------------------------------------

# build_programs FLAVOUR: compiles the programs that are missing or older than their source.
built_ok=()
build_programs() {
    local flavour=$1 cc flags out
    case $flavour in
        ompi) cc=mpicc.openmpi; flags=(-O2 -g -Wall -Wextra -std=c11) ;;
        # gcc 12 misreads MPICH's MPI_STATUSES_IGNORE ((MPI_Status *)1) as a zero-size array.
        mpich) cc=mpicc.mpich; flags=(-O2 -g -Wall -Wextra -std=c11 -Wno-stringop-overflow) ;;
    esac
    mkdir -p "$build/$flavour"
    local errors="" p n=0
    for p in $programs; do
        out=$build/$flavour/$p
        if [ ! -x "$out" ] || [ "$src/$p.c" -nt "$out" ] || [ "$src/mpitest.h" -nt "$out" ]; then
            if ! errors+=$("$cc" "${flags[@]}" -pthread -I"$src" -o "$out" "$src/$p.c" -lm 2>&1); then
                errors+=$'\n'"$p: the build failed"
                rm -f "$out"
                continue
            fi
        fi
        n=$((n + 1))
    done
    local want
    want=$(echo $programs | wc -w)
    if [ "$n" -eq "$want" ] && [ -z "$errors" ]; then
        tap_ok "build with $cc: $n programs in $build/$flavour"
        built_ok+=("$flavour")
    elif [ "$n" -eq "$want" ]; then
        tap_not_ok "build with $cc: warnings"
        printf '%s\n' "$errors" | head -20 | sed 's/^/#   | /'
        built_ok+=("$flavour")
    else
        tap_not_ok "build with $cc: $((want - n)) of $want programs failed"
        printf '%s\n' "$errors" | head -30 | sed 's/^/#   | /'
    fi
}

# ---- one run ------------------------------------------------------------------------------

# run_job LOG CMD...: runs CMD under timeout with its output in LOG. Sets job_rc and
# job_finalize_hang (1 when the verdict line came and the job was still running
# $grace seconds later, so it was stopped).
run_job() {
    local log=$1; shift
    local verdict_file=$log.verdict verdict_any='^test_[a-z_]+: [0-9]+ checks (passed|FAILED)'
    job_finalize_hang=0
    rm -f "$verdict_file"
    MPITEST_VERDICT_FILE=$verdict_file timeout -k 10 "$limit" "$@" > "$log" 2>&1 < /dev/null &
    local pid=$! verdict_at=""
    while kill -0 "$pid" 2>/dev/null; do
        sleep 0.1
        if [ -z "$verdict_at" ]; then
            grep -Eqs "$verdict_any" "$log" "$verdict_file" && verdict_at=$SECONDS
        elif [ $((SECONDS - verdict_at)) -ge "$grace" ]; then
            job_finalize_hang=1
            kill -TERM "$pid" 2>/dev/null # timeout passes it on to the launcher, which stops the ranks
            local t
            for t in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            if kill -0 "$pid" 2>/dev/null; then
                local child
                for child in $(pgrep -P "$pid"); do kill -KILL "$child" 2>/dev/null; done
                kill -KILL "$pid" 2>/dev/null
            fi
            break
        fi
    done
    wait "$pid"
    job_rc=$?
    # Rank 0 writes its verdict to a file as well (mpitest.h): when the launcher lost it on
    # the way to the log (seen once under the RDMA VM's load), the file still has it.
    if ! grep -Eq "$verdict_any" "$log" && grep -Eqs "$verdict_any" "$verdict_file"; then
        echo "# rank 0's verdict lines did not reach this log; from $verdict_file:" >> "$log"
        cat "$verdict_file" >> "$log"
    fi
    rm -f "$verdict_file"
}

# run_one STACK TLS NP PROGRAM: one TAP line (plus one per known bug the program met).
run_one() {
    local stack=$1 tls=$2 np=$3 prog=$4
    local name="$stack tls=$tls np=$np: $prog"
    local log=$build/logs/$stack.$tls.np$np.$prog.log
    local -a cmd
    mapfile -t cmd < <(command_for "$stack" "$tls" "$np" "$prog")
    if [ "$show" = 1 ]; then
        echo "# $name: $(quoted "${cmd[@]}")"
        return
    fi
    if [ ! -x "$build/$(flavour_of "$stack")/$prog" ]; then
        tap_not_ok "$name (not built)"
        return
    fi
    if [ "$stack/$prog" = mpich-ucx/test_rma ]; then
        tap_skip "$name" "$mpich_ucx_rma_reason"
        return
    fi
    grace=${grace_env:-30}
    [[ $stack == mpich-* ]] && grace=${grace_env:-8}
    run_job "$log" "${cmd[@]}"
    local verdict_re="^$prog: [0-9]+ checks passed\$" passed=0 checks
    grep -Eq "$verdict_re" "$log" && ! grep -q ': FAIL ' "$log" && passed=1
    checks=$(grep -Eo "^$prog: [0-9]+ checks passed" "$log" | grep -Eo '[0-9]+' | head -1)
    if [ "$passed" = 1 ] && [ "$job_rc" = 0 ]; then
        tap_ok "$name"
    elif [ "$passed" = 1 ] && [ "$job_finalize_hang" = 1 ] && [[ $stack == mpich-* ]]; then
        tap_skip "$name" "all $checks checks passed, then MPI_Finalize hung (stopped after ${grace}s): $mpich_finalize_reason"
    else
        local why="exit status $job_rc"
        [ "$job_rc" = 124 ] && why="timed out after ${limit}s"
        [ "$job_finalize_hang" = 1 ] && why="MPI_Finalize did not return within ${grace}s of the verdict"
        [ "$passed" = 0 ] && grep -Eq "^$prog: [0-9]+ checks FAILED" "$log" && why="checks failed, $why"
        tap_not_ok "$name ($why)"
        show_log "$log"
        return
    fi
    [ "$verbose" = 1 ] && sed 's/^/#   | /' "$log"
    # The known bugs the program met, one skip line each.
    local key what
    while IFS= read -r line; do
        key=$(sed -E 's/^[a-z_]+: SKIP ([a-z0-9_]+): .*/\1/' <<< "$line")
        what=$(sed -E 's/^[a-z_]+: SKIP [a-z0-9_]+: //' <<< "$line")
        tap_skip "$name: $what" "$(known_bug_reason "$key")"
    done < <(grep -E "^$prog: SKIP [a-z0-9_]+: " "$log")
}

# ---- one program by hand ------------------------------------------------------------------

if [ ${#one[@]} -gt 0 ]; then
    stack=${one[0]} tls=${one[1]} np=${one[2]} prog=${one[3]}
    programs=$prog
    why=$(why_unavailable "$stack")
    [ -z "$why" ] || { echo "run_mpi_suite.sh: $stack cannot run: $why" >&2; exit 2; }
    [ -f "$src/$prog.c" ] || { echo "run_mpi_suite.sh: no program '$prog'" >&2; exit 2; }
    build_programs "$(flavour_of "$stack")" >&2
    mapfile -t cmd < <(command_for "$stack" "$tls" "$np" "$prog")
    echo "# $(quoted "${cmd[@]}")" >&2
    [ "$show" = 1 ] && exit 0
    if [ "$limit" = 0 ]; then exec "${cmd[@]}"; fi
    exec timeout -k 10 "$limit" "${cmd[@]}"
fi

# ---- the matrix ---------------------------------------------------------------------------

suite_start=$SECONDS
timing=()
declare -A wanted_flavour=()
for stack in $stacks; do
    [ -z "$(why_unavailable "$stack")" ] && wanted_flavour[$(flavour_of "$stack")]=1
done
if [ "$show" = 0 ]; then
    for flavour in ompi mpich; do
        [ -n "${wanted_flavour[$flavour]:-}" ] && build_programs "$flavour"
    done
fi

for stack in $stacks; do
    why=$(why_unavailable "$stack")
    if [ -n "$why" ]; then
        for tls in $tls_list; do tap_skip "$stack tls=$tls: all programs, np=$np_list" "$why"; done
        if [[ $stack == *-loom ]]; then
            echo "# *** $stack NOT RUN: $why ***"
        fi
        continue
    fi
    flavour=$(flavour_of "$stack")
    if [ "$show" = 0 ] && [[ " ${built_ok[*]} " != *" $flavour "* ]]; then
        for tls in $tls_list; do tap_not_ok "$stack tls=$tls: all programs (the build with $(compiler_of "$stack") failed)"; done
        continue
    fi
    if [[ $stack == *-loom ]] && [ "$show" = 0 ]; then
        # The ranks must load Loom's libucp, not the system's.
        case $stack in
            ompi-loom) lib=$(ompi_info --parsable --path pkglibdir 2>/dev/null | sed 's/^path:pkglibdir://')/mca_pml_ucx.so ;;
            mpich-loom) lib=$build/mpich/$(echo $programs | awk '{print $1}') ;;
        esac
        resolved=$(LD_LIBRARY_PATH="$loom_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$lib" 2>/dev/null |
                   awk '$1 == "libucp.so.0" {print $3}')
        if [ -n "$resolved" ] && [ "$(dirname "$(readlink -f "$resolved")")" = "$(readlink -f "$loom_dir")" ]; then
            tap_ok "$stack: $(basename "$lib") loads libucp.so.0 from $loom_dir"
        else
            tap_not_ok "$stack: $(basename "$lib") loads libucp.so.0 from '${resolved:-nowhere}', not from $loom_dir"
        fi
    fi
    for tls in $tls_list; do
        start=$SECONDS
        for np in $np_list; do
            for prog in $programs; do run_one "$stack" "$tls" "$np" "$prog"; done
        done
        timing+=("$stack tls=$tls: $((SECONDS - start)) s")
    done
done

if [ "$show" = 0 ]; then
    echo "# wall time per stack and transport (np=$np_list):"
    for t in "${timing[@]}"; do echo "#   $t"; done
    echo "#   total: $((SECONDS - suite_start)) s"
fi
finish
