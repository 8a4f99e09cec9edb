#!/usr/bin/env bash
#
# MPI jobs across two simulated hosts (TAP output):
#
#   test/mpi/run_two_hosts.sh [STACK...]
#   test/mpi/run_two_hosts.sh --shell      (the two hosts and a shell in host A, to try things)
#
# Makes hosts A and B out of Linux namespaces (test/mpi/netns/hosts.sh: each its own
# network, /dev/shm, host name and IPC, joined by a veth pair), then runs mpirun in A over
# both hosts, 2 ranks each, the rsh launcher going through test/mpi/netns/agent.sh. The
# program (test/mpi/netns/xhost.c) checks every byte of a pairwise ping-pong (0 B to 4 MiB)
# and two all-to-alls, and reports where its ranks ran and which shared memory they share.
# Checks per stack:
#
#   every byte arrives      the program's verdict (data, sizes) is PASS
#   MPI_Finalize returns    mpirun exits 0 (within XH_FINALIZE_TIMEOUT of the verdict)
#   2 ranks on each host    by gethostname() in the ranks
#   the veth carried ...    the veth's byte counters grew by at least the payload the
#                           ranks sent between hosts
#   ranks of a host share   in each host, a shared-memory object (a /dev/shm file, memfd or
#   memory                  SysV segment) mapped by both ranks; for the Loom stacks one
#                           whose name contains XH_LOOM_SHM_NAME (default "loom-")
#   no shared memory        no object mapped on both hosts, no /dev/shm file of the other
#   across hosts            host mapped
#   nothing left in /dev/shm  the hosts' /dev/shm is empty after the job
#   libucp                  (UCX and Loom stacks) every rank mapped the expected libucp.so.0
#   Loom's logs             (Loom stacks) every rank wrote its LOOM_LOG_FILE; no line in them
#                           matches XH_LOOM_SHM_RE (a shared-memory attempt to another host);
#                           no ERROR line (the first ERROR/WARN lines are shown as comments)
#
# Stacks (default: all, in this order):
#   ompi-ob1    Open MPI 4.1, pml ob1, btl vader,tcp,self        (reference)
#   ompi-ucx    Open MPI 4.1, pml ucx over the system's UCX       (reference)
#   mpich-ucx   MPICH 4.0 ch4:ucx over the system's UCX, hydra    (reference; its Finalize
#               check is a TAP TODO: see test/mpi/netns/README.md)
#   ompi-loom   as ompi-ucx, Loom's libucp/libucs/libucm first on LD_LIBRARY_PATH
#   mpich-loom  as mpich-ucx, the same
# The Loom stacks need LOOM_UCX_COMPAT_DIR (the directory with Loom's libucp.so.0,
# e.g. build/install/lib/ucx-compat); without it they are skipped.
#
# Environment: XH_TIMEOUT (seconds per mpirun, default 120), XH_FINALIZE_TIMEOUT (seconds
# from the program's verdict to mpirun's exit, default 20), XH_MAX_BYTES (largest
# ping-pong message, default 4194304), XH_KEEP=1 (keep the temporary directory: job logs,
# Loom's log files, the agent's log), LOOM_LOG_LEVEL (Loom stacks, default info). Every
# UCX_*, LOOM_* and XHOST_* variable set here reaches every rank (XHOST_VERBOSE=1 lists
# each rank's shared-memory objects). XH_LOOM_SHM_RE, XH_LOOM_SHM_NAME: see above.
# XH_SHARE=ipc: the hosts share the IPC namespace (README.md: what UCX does then).
#
# Needs root, unshare/nsenter (util-linux), ip (iproute2), veth; skips with the reason
# otherwise. The namespaces, processes and files it makes go when it ends, also on failure
# and on Ctrl-C; on SIGKILL only its directory /tmp/loom-xh.* stays.
#
set -u -o pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
netns=$top/test/mpi/netns
. "$top/test/tools/tap.sh"
. "$netns/hosts.sh"

usage() { sed -n '3,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

# The sanitizer build's libraries cannot load into MPI programs: the regular build runs this.
if [ -n "${top_builddir:-}" ] && sanitizer_build "$top_builddir"; then
    skip "MPI across two simulated hosts" "AddressSanitizer build: its libraries cannot be loaded into uninstrumented MPI programs; the regular build runs these tests"
    finish
    exit 0
fi
all_stacks=(ompi-ob1 ompi-ucx mpich-ucx ompi-loom mpich-loom)
shell_mode=0
stacks=()
for a in "$@"; do
    case $a in
        -h | --help) usage; exit 0 ;;
        --shell) shell_mode=1 ;;
        ompi-ob1 | ompi-ucx | mpich-ucx | ompi-loom | mpich-loom) stacks+=("$a") ;;
        *) echo "run_two_hosts.sh: unknown stack or option '$a' (stacks: ${all_stacks[*]})" >&2; exit 2 ;;
    esac
done
((${#stacks[@]})) || stacks=("${all_stacks[@]}")
# Under `make check` (top_builddir set): the build tree's libraries, and the stacks that
# say something about Loom (the reference ones are for comparing by hand: ob1 is kept, it
# is quick; UCX's mpich stack waits out its known Finalize hang).
if [[ -n ${top_builddir:-} ]]; then
    : "${LOOM_UCX_COMPAT_DIR:=$top_builddir/bindings/ucx/.libs}"
    [[ $# -gt 0 ]] || stacks=(ompi-ob1 ompi-loom mpich-loom)
fi

timeout_s=${XH_TIMEOUT:-120}
finalize_s=${XH_FINALIZE_TIMEOUT:-20}
max_bytes=${XH_MAX_BYTES:-4194304}
loom_shm_name=${XH_LOOM_SHM_NAME:-loom-}
loom_shm_re=${XH_LOOM_SHM_RE:-'shm.*(cannot|fail|unreachable|another host|is gone|not the expected)|cannot connect shm'}

# skip NAME REASON: a TAP line for a check that cannot run here.
skip() {
    tap_n=$((tap_n + 1))
    echo "ok $tap_n - $1 # SKIP $2"
}

# check_todo NAME REASON COMMAND...: a check that is known to fail (TAP TODO): reported,
# not counted as a failure.
check_todo() {
    local name=$1 reason=$2
    shift 2
    tap_n=$((tap_n + 1))
    if "$@" >/dev/null 2>&1; then
        echo "ok $tap_n - $name # TODO $reason"
    else
        echo "not ok $tap_n - $name # TODO $reason"
    fi
}

# Known defects of the reference stacks (see test/mpi/netns/README.md).
mpich_ucx_finalize_todo="MPICH 4.0.2 ch4:ucx over UCX 1.13 tcp often hangs in MPI_Finalize, also on one host with UCX_TLS=tcp,self"

if ! why=$(xh_preflight); then
    echo "1..0 # SKIP two simulated hosts: $why"
    exit 0
fi

tmp=$(mktemp -d /tmp/loom-xh.XXXXXX)
job=
cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    [[ -n $job ]] && kill -KILL "$job" 2>/dev/null
    xh_down
    if [[ ${XH_KEEP:-0} == 1 ]]; then
        echo "# kept $tmp" >&2
    else
        rm -rf "$tmp"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'echo "# interrupted: cleaning up" >&2; exit 130' INT TERM HUP

mkdir -p "$tmp/state" "$tmp/bin" "$tmp/ompi-tmp"
if ! xh_up "$tmp/state"; then
    echo "not ok 1 - make the two simulated hosts (see the messages above)"
    echo "1..1"
    exit 1
fi
printf '%s slots=2\n%s slots=2\n' "$XH_HOST_A" "$XH_HOST_B" >"$tmp/hostfile.ompi"
printf '%s:2\n%s:2\n' "$XH_HOST_A" "$XH_HOST_B" >"$tmp/hostfile.hydra"
echo "# hosts $XH_HOST_A ($XH_IP_A) and $XH_HOST_B ($XH_IP_B) on $XH_CIDR; state in $tmp"

if ((shell_mode)); then
    cat <<EOF
# In host $XH_HOST_A now (exit to remove both hosts). Try:
#   mpirun.openmpi --allow-run-as-root -np 4 --hostfile $tmp/hostfile.ompi \\
#     --mca plm_rsh_agent $XH_AGENT --mca oob_tcp_if_include $XH_CIDR \\
#     --mca btl_tcp_if_include $XH_CIDR hostname
#   mpiexec.mpich -launcher ssh -launcher-exec $XH_AGENT -f $tmp/hostfile.hydra -n 4 hostname
#   $XH_AGENT $XH_HOST_B ip addr       (a command on host B)
EOF
    export XH_HOSTFILE_OMPI=$tmp/hostfile.ompi XH_HOSTFILE_HYDRA=$tmp/hostfile.hydra
    xh_in A bash -i
    exit 0
fi

# --- programs ---------------------------------------------------------------------------

have_ompi=0 have_mpich=0
# build MPI: compiles xhost.c with mpicc.MPI; on failure shows the compiler's messages.
build() {
    command -v "mpicc.$1" >/dev/null || return 1
    if ! "mpicc.$1" -O2 -o "$tmp/bin/xhost.$1" "$netns/xhost.c" >"$tmp/build.$1.log" 2>&1; then
        echo "# mpicc.$1 failed on xhost.c:"
        head -10 "$tmp/build.$1.log" | sed 's/^/#   /'
        return 1
    fi
}
command -v mpirun.openmpi >/dev/null && build openmpi && have_ompi=1
command -v mpiexec.hydra >/dev/null && build mpich && have_mpich=1

# --- one job ----------------------------------------------------------------------------

# Variables of this environment that every rank gets (Open MPI: -x; hydra forwards all).
env_vars() { compgen -e | grep -E "^($1)" || true; }

# run_job STACK LOG: runs the stack's job on host A under timeout; records the veth counters.
run_job() {
    local stack=$1 log=$2 cmd=() v rc
    local loom_env=()
    case $stack in
        *-loom)
            mkdir -p "$tmp/loom-logs/$stack"
            loom_env=(LD_LIBRARY_PATH="$LOOM_UCX_COMPAT_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
                      LOOM_LOG_LEVEL="${LOOM_LOG_LEVEL:-info}"
                      LOOM_LOG_FILE="$tmp/loom-logs/$stack/loom.%h.%p.log"
                      XHOST_SHM_MATCH="$loom_shm_name")
            ;;
    esac
    # shellcheck disable=SC2054 # the commas are MCA lists
    case $stack in
        ompi-*)
            cmd=(mpirun.openmpi --allow-run-as-root -np 4 --hostfile "$tmp/hostfile.ompi"
                 --mca plm_rsh_agent "$XH_AGENT"
                 --mca oob_tcp_if_include "$XH_CIDR"
                 --mca orte_tmpdir_base "$tmp/ompi-tmp"
                 --bind-to none)
            case $stack in
                ompi-ob1) cmd+=(--mca pml ob1 --mca btl vader,tcp,self --mca btl_tcp_if_include "$XH_CIDR") ;;
                *) cmd+=(--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any --mca btl self) ;;
            esac
            local names=()
            [[ $stack == ompi-loom ]] && names=(LD_LIBRARY_PATH LOOM_LOG_LEVEL LOOM_LOG_FILE XHOST_SHM_MATCH)
            for v in $(env_vars 'UCX_|LOOM_|XHOST_'); do
                [[ " ${names[*]} " == *" $v "* ]] || names+=("$v")
            done
            for v in "${names[@]}"; do cmd+=(-x "$v"); done
            cmd+=("$tmp/bin/xhost.openmpi" "$max_bytes")
            ;;
        mpich-*)
            cmd=(mpiexec.hydra -launcher ssh -launcher-exec "$XH_AGENT" -f "$tmp/hostfile.hydra" -n 4
                 "$tmp/bin/xhost.mpich" "$max_bytes")
            ;;
    esac
    echo "+ ${cmd[*]}" >"$log"
    read -r _ tx_a0 < <(xh_veth_bytes A)
    read -r _ tx_b0 < <(xh_veth_bytes B)
    # In the background, so that Ctrl-C reaches the trap at once; timeout inside host A.
    (
        xh__close_fds  # this shell waits as long as the job: it must not keep the hosts alive
        ((${#loom_env[@]})) && export "${loom_env[@]}"
        xh_in A timeout -k 10 "$timeout_s" "${cmd[@]}"
    ) >>"$log" 2>&1 &
    job=$!
    # Once the program has printed its verdict, MPI_Finalize and mpirun's exit get
    # $finalize_s seconds: a job that hangs there is ended without waiting for the timeout.
    local verdict_at=
    finalize_hung=0
    while kill -0 "$job" 2>/dev/null; do
        if [[ -z $verdict_at ]] && grep -qE '^xhost: (PASS|FAIL)' "$log"; then
            verdict_at=$SECONDS
        fi
        if [[ -n $verdict_at ]] && ((SECONDS - verdict_at > finalize_s)); then
            finalize_hung=1
            echo "# the job did not end within ${finalize_s} s of the program's verdict: killed" >>"$log"
            xh_kill_all
        fi
        sleep 0.2
    done
    wait "$job"
    rc=$?
    job=
    xh_kill_all  # anything the job left (an orted, a proxy)
    # What the job left in the hosts' /dev/shm (then removed, for the next stack).
    shm_left=
    for h in A B; do
        shm_left+=$(xh_in "$h" sh -c 'ls -A /dev/shm; rm -rf /dev/shm/* /dev/shm/.[!.]* 2>/dev/null' | sed "s/^/$h:/")
    done
    echo "# left in /dev/shm: ${shm_left:-nothing}" >>"$log"
    read -r _ tx_a1 < <(xh_veth_bytes A)
    read -r _ tx_b1 < <(xh_veth_bytes B)
    veth_bytes=$((tx_a1 - tx_a0 + tx_b1 - tx_b0))
    echo "# exit $rc; veth: A sent $((tx_a1 - tx_a0)) B, B sent $((tx_b1 - tx_b0)) B" >>"$log"
    return "$rc"
}

# --- checks on a job's log --------------------------------------------------------------

verdict_ok() { grep -qx 'xhost: PASS' "$1"; }
exit_ok() { [[ $2 == 0 ]]; }
ranks_on() { grep -cE "^xhost: rank [0-9]+ of 4 host $2 " "$1"; }
placement_ok() { [[ $(ranks_on "$1" "$XH_HOST_A") == 2 && $(ranks_on "$1" "$XH_HOST_B") == 2 ]]; }
veth_ok() {
    local payload
    payload=$(sed -n 's/^xhost: cross_host_payload_bytes \([0-9]*\)$/\1/p' "$1")
    [[ -n $payload && $payload -gt 0 && $veth_bytes -ge $payload ]]
}
shm_ok() {
    grep -qE "^xhost: host $XH_HOST_A ranks 2 shm_shared [1-9]" "$1" &&
        grep -qE "^xhost: host $XH_HOST_B ranks 2 shm_shared [1-9]" "$1"
}
isolation_ok() { grep -qx 'xhost: shm_cross_host 0' "$1" && grep -qx 'xhost: shm_foreign 0' "$1"; }
# ucp_ok LOG LIB: every rank mapped LIB (a libucp.so.0, symbolic links resolved).
ucp_ok() { [[ $(grep -cxF -- "$(readlink -f "$2")" < <(sed -n 's/^xhost: rank [0-9]* ucp //p' "$1")) == 4 ]]; }
loom_logs_ok() {
    local dir=$1 a b
    a=$(compgen -G "$dir/loom.$XH_HOST_A.*.log" | wc -l)
    b=$(compgen -G "$dir/loom.$XH_HOST_B.*.log" | wc -l)
    [[ $a -ge 2 && $b -ge 2 ]]
}
loom_no_xhost_shm() { ! cat "$1"/loom.*.log 2>/dev/null | grep -Eiq -- "$loom_shm_re"; }
loom_no_errors() { ! cat "$1"/loom.*.log 2>/dev/null | grep -Eq -- ' (ERROR|FATAL) '; }
# The first ERROR and WARN lines of Loom's logs, as TAP comments.
loom_problems() {
    cat "$1"/loom.*.log 2>/dev/null | grep -E -- ' (FATAL|ERROR|WARN) ' | head -8 | cut -c1-220 | sed 's/^/#   loom: /'
}

# Explains a failed job in TAP comments.
explain() {
    echo "#   $1 (last lines of the job's output):"
    grep -v '^xhost: rank [0-9]* shm ' "$1" | tail -25 | sed 's/^/#   | /'
    if [[ -s $tmp/state/agent.log ]]; then
        echo "#   agent calls:"
        tail -5 "$tmp/state/agent.log" | cut -c1-200 | sed 's/^/#   | /'
    fi
}

system_ucp() { ldconfig -p | sed -n 's/.*libucp\.so\.0 .*=> \(.*\)$/\1/p' | head -1; }

# --- the stacks -------------------------------------------------------------------------

for stack in "${stacks[@]}"; do
    why=
    case $stack in
        ompi-*) ((have_ompi)) || why="Open MPI not found or xhost.c does not build (mpicc.openmpi, mpirun.openmpi)" ;;
        mpich-*) ((have_mpich)) || why="MPICH not found or xhost.c does not build (mpicc.mpich, mpiexec.hydra)" ;;
    esac
    if [[ -z $why && $stack == *-loom ]]; then
        if [[ -z ${LOOM_UCX_COMPAT_DIR:-} ]]; then
            why="LOOM_UCX_COMPAT_DIR not set (the directory with Loom's libucp.so.0)"
        elif [[ ! -e $LOOM_UCX_COMPAT_DIR/libucp.so.0 ]]; then
            why="no libucp.so.0 in LOOM_UCX_COMPAT_DIR=$LOOM_UCX_COMPAT_DIR"
        else
            LOOM_UCX_COMPAT_DIR=$(cd "$LOOM_UCX_COMPAT_DIR" && pwd)
        fi
    fi
    if [[ -n $why ]]; then
        skip "$stack" "$why"
        continue
    fi

    log=$tmp/$stack.log
    start=$SECONDS
    run_job "$stack" "$log"
    rc=$?
    echo "# $stack: exit $rc$( ((finalize_hung)) && echo " (hung after the verdict)") in $((SECONDS - start)) s, veth carried $veth_bytes B, ranks sent $(sed -n 's/^xhost: cross_host_payload_bytes //p' "$log") B between hosts"
    check "$stack: every byte arrives" verdict_ok "$log"
    if [[ $stack == mpich-ucx ]]; then
        check_todo "$stack: MPI_Finalize returns, mpirun exits 0" "$mpich_ucx_finalize_todo" exit_ok "$log" "$rc"
    else
        check "$stack: MPI_Finalize returns, mpirun exits 0" exit_ok "$log" "$rc"
    fi
    if ! verdict_ok "$log" || { ! exit_ok "$log" "$rc" && [[ $stack != mpich-ucx ]]; }; then
        explain "$log"
    fi
    check "$stack: 2 ranks on each host" placement_ok "$log"
    check "$stack: the veth carried the traffic between hosts" veth_ok "$log"
    if [[ $stack == *-loom ]]; then
        check "$stack: ranks of a host share Loom's shared memory (names with '$loom_shm_name')" shm_ok "$log"
    else
        check "$stack: ranks of a host share memory" shm_ok "$log"
    fi
    check "$stack: no shared memory across hosts" isolation_ok "$log"
    check "$stack: nothing left in the hosts' /dev/shm" test -z "$shm_left"
    case $stack in
        ompi-ucx | mpich-ucx) check "$stack: every rank loaded the system's libucp" ucp_ok "$log" "$(system_ucp)" ;;
        *-loom)
            check "$stack: every rank loaded Loom's libucp" ucp_ok "$log" "$LOOM_UCX_COMPAT_DIR/libucp.so.0"
            check "$stack: every rank wrote its Loom log" loom_logs_ok "$tmp/loom-logs/$stack"
            check "$stack: no shared-memory attempt to the other host in Loom's logs" \
                loom_no_xhost_shm "$tmp/loom-logs/$stack"
            check "$stack: no ERROR in Loom's logs" loom_no_errors "$tmp/loom-logs/$stack"
            loom_problems "$tmp/loom-logs/$stack"
            ;;
    esac
done

# --- clean-up, checked ------------------------------------------------------------------

xh_down
check "clean-up: no process left in the hosts' namespaces" test -z "$(xh_leftovers)"
finish
