# The cases of the network tests between two simulated hosts (run_net_faults.sh,
# run_two_rails.sh, run_soak_netem.sh), sourced after test/mpi/netns/hosts.sh: fault_peer servers and clients
# in a host, waits on their output, TAP lines. The caller sets prog (fault_peer), then calls
# xh_cases_begin, which makes the hosts, tmp (the logs' directory), pids, n and failed.

# start HOST NAME ARGS...: runs fault_peer in HOST in the background, output in $tmp/NAME.log.
start() {
    local host=$1 name=$2
    shift 2
    (
        xh__close_fds
        xh_in "$host" timeout -k 5 120 "$prog" "$@"
    ) >"$tmp/$name.log" 2>&1 </dev/null &
    pids+=($!)
    last_pid=$!
}

# wait_for FILE REGEX SECONDS: until FILE has a line matching REGEX (0), or the time passes (1).
wait_for() {
    local end=$((SECONDS + $3))
    until grep -qE "$2" "$1" 2>/dev/null; do
        ((SECONDS > end)) && return 1
        sleep 0.05
    done
}

# flap_during CLIENT_LOG GOFILE IF: once the client is READY, host A's end IF goes down for
# 2 s and up again; then GOFILE (the client sends its last messages).
flap_during() {
    if wait_for "$1" '^READY' 30; then
        xh_in A ip link set "$3" down
        sleep 2  # the fault itself: the link stays down this long
        xh_in A ip link set "$3" up
        touch "$2"
    fi
}

# server HOST NAME: starts a server; sets port and server_pid.
server() {
    rm -f "$tmp/$2.port"
    start "$1" "$2" -l 0 -p "$tmp/$2.port"
    if ! wait_for "$tmp/$2.port" '^[0-9]+$' 30; then
        echo "# $2 did not start:" && sed 's/^/#   /' "$tmp/$2.log"
        port=0
        return 1
    fi
    port=$(cat "$tmp/$2.port")
    server_pid=$last_pid
}

# result NAME OK: prints the TAP line, with the logs of the case on failure.
result() {
    n=$((n + 1))
    if [[ $2 == 1 ]]; then
        echo "ok $n - $1"
    else
        echo "not ok $n - $1"
        failed=$((failed + 1))
        for f in "$tmp"/case$n.*.log; do
            [[ -e $f ]] || continue
            echo "#   ${f##*/}:"
            tail -15 "$f" | sed 's/^/#   | /'
        done
    fi
}

# finish PID: waits for a client and returns its exit status.
finish() { wait "$1"; }

# served NAME PID: a server's verdict once it has ended: it exits after the client's last
# message, and the client may end first (a slow server had not yet written its line).
served() { finish "$2" && grep -q 'in order and intact' "$tmp/$1.log"; }

# xh_cases_begin [nft] [must]: makes hosts A and B and the clean-up that removes them; exits
# with a TAP verdict when that cannot be done (a SKIP when this machine cannot make hosts at
# all, unless "must": where the caller runs, it can). With "nft", nftables must be there
# (the silent-host cases drop packets with it).
xh_cases_begin() {
    if ! why=$(xh_preflight); then
        if [[ " $* " == *" must "* ]]; then
            echo "not ok 1 - two simulated hosts: $why"
            echo "1..1"
            exit 1
        fi
        echo "1..0 # SKIP two simulated hosts: $why"
        exit 0
    fi
    if [[ " $* " == *" nft "* ]] && ! command -v nft >/dev/null; then
        # quickstart.sh installs nftables: its absence is a broken set-up, not a reason to pass.
        echo "not ok 1 - nft (nftables) is missing: the silent-host tests cannot drop packets"
        echo "1..1"
        exit 1
    fi
    if [[ ! -x $prog ]]; then
        echo "not ok 1 - $prog is not built"
        echo "1..1"
        exit 1
    fi
    tmp=$(mktemp -d /tmp/loom-faults.XXXXXX)
    pids=()
    trap xh_cases_cleanup EXIT
    trap 'echo "# interrupted: cleaning up" >&2; exit 130' INT TERM HUP
    mkdir -p "$tmp/state"
    if ! xh_up "$tmp/state"; then
        echo "not ok 1 - make the two simulated hosts (see the messages above)"
        echo "1..1"
        exit 1
    fi
    echo "# hosts $XH_HOST_A ($XH_IP_A) and $XH_HOST_B ($XH_IP_B); logs in $tmp"
    n=0
    failed=0
}

xh_cases_cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    ((${#pids[@]})) && kill -KILL "${pids[@]}" 2>/dev/null
    ((${#pids[@]})) && wait "${pids[@]}" 2>/dev/null  # (no "Killed" job notices for the servers left)
    xh_down
    [[ ${XH_KEEP:-0} == 1 ]] && echo "# kept $tmp" >&2 || rm -rf "$tmp"
    exit "$rc"
}
