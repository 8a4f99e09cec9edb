# Two simulated hosts on one Linux machine, for tests of MPI jobs that span hosts.
# Source this file (bash), then:
#
#   xh_preflight            prints why the machine cannot make the hosts (not root, no
#                           unshare, no veth, ...) and returns 1; else returns 0 silently
#   xh_up DIR               makes hosts A and B, state in DIR (an empty directory the caller
#                           owns and removes); sets XH_HOST_A/B (host names), XH_IP_A/B,
#                           XH_CIDR (the veth subnet), XH_IF_A/B (veth ends), XH_AGENT (the
#                           rsh agent: "XH_AGENT HOST COMMAND..." runs COMMAND on HOST)
#   xh_add_link             joins the hosts by a second veth pair (another /24): a second
#                           rail; sets XH_IP_A2/B2, XH_CIDR2, XH_IF_A2/B2 (call after xh_up)
#   xh_in A|B|NAME CMD...   runs CMD inside a host (same environment and directory)
#   xh_veth_bytes A|B [IF]  prints "RX_BYTES TX_BYTES" of that host's veth end (or of IF)
#   xh_kill_all             ends every process running in the hosts but the hosts' own
#                           (TERM, then KILL after 5 s): what a job left behind
#   xh_down                 removes both hosts and everything running in them; idempotent,
#                           call it from an EXIT trap
#   xh_leftovers            prints what of the hosts is still alive (processes in their
#                           namespaces); nothing when the clean-up was complete
#
# A host is a set of fresh namespaces: network (a veth pair joins A and B, each end with an
# address of a private /24 that exists only inside the two namespaces; lo up), mount (a
# tmpfs of its own on /dev/shm, its own /sys, an /etc/hosts naming both hosts), UTS (host
# name loomA-<pid>/loomB-<pid>) and IPC (its own SysV segments). The rest of the file
# system (/tmp, the source tree) is the machine's, and so is the pid namespace: a process
# in one host cannot join a sibling pid namespace (setns fails with EINVAL), so the rsh
# agent could not start anything on the other host. XH_SHARE=ipc leaves the IPC namespace
# shared too, to see what software does when two "hosts" share it.
#
# Nothing is named outside the namespaces (no `ip netns add`, no veth in the machine's
# network namespace), so parallel runs cannot collide. The namespaces live as long as a
# process in them. The first process of each host (holder.sh) reads a pipe whose writing
# end only the test shell holds: when the test closes it or dies (even by SIGKILL), the
# holder kills every process in its host and exits. xh_down does the same from outside. A
# test killed by SIGKILL leaves only its temporary directory. A background subshell of the
# test that outlives a command must call xh__close_fds first, or it keeps the hosts alive.
# The machine's network configuration is never touched.

XH_SRC_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
XH_DIR=
XH_PIDS=()  # the first process (holder.sh) of each host, A then B
XH_FD_A=  # writing ends of the holders' pipes
XH_FD_B=
XH_NET_INODES=()

xh_preflight() {
    local t
    if [[ $(id -u) != 0 ]]; then
        echo "needs root (namespaces, veth, mounts)"
        return 1
    fi
    for t in unshare nsenter ip mount umount hostname timeout; do
        if ! command -v "$t" >/dev/null; then
            echo "$t not found (util-linux, iproute2, coreutils)"
            return 1
        fi
    done
    if ! unshare --net --mount --uts --ipc --propagation private true 2>/dev/null; then
        echo "cannot create namespaces here (unshare --net --mount --uts --ipc failed)"
        return 1
    fi
    if ! unshare --net sh -c 'ip link add xhp0 type veth peer name xhp1' 2>/dev/null; then
        echo "cannot create a veth pair (no veth support in this kernel?)"
        return 1
    fi
    return 0
}

# Namespace flags of the hosts, for unshare and nsenter.
xh__share() { [[ " ${XH_SHARE:-} " == *" $1 "* ]]; }
xh__unshare_flags() {
    local f=(--net --mount --uts)
    xh__share ipc || f+=(--ipc)
    printf "%s\n" "${f[*]}"
}
xh__nsenter_flags() {
    local f=(-n -m -u)
    xh__share ipc || f+=(-i)
    printf "%s\n" "${f[*]}"
}

# In a child about to exec: drops the writing ends of the holders' pipes.
xh__close_fds() {
    [[ -n $XH_FD_A ]] && exec {XH_FD_A}>&-
    [[ -n $XH_FD_B ]] && exec {XH_FD_B}>&-
    return 0
}

xh__index() {
    case $1 in
        A | 0 | "$XH_HOST_A") echo 0 ;;
        B | 1 | "$XH_HOST_B") echo 1 ;;
        *) echo "xh: unknown host $1" >&2; return 1 ;;
    esac
}

# xh__wait_file PATH SECONDS PID: waits for PATH to appear while PID lives.
xh__wait_file() {
    local path=$1 deadline=$((SECONDS + $2)) pid=$3
    while [[ ! -e $path ]]; do
        kill -0 "$pid" 2>/dev/null || return 1
        ((SECONDS < deadline)) || return 1
        sleep 0.02
    done
}

# xh__start_host INDEX NAME: the host's first process, in its new namespaces.
xh__start_host() {
    local i=$1 name=$2 fd pid
    # The holder reads the pipe; only this shell keeps its writing end (the other host's
    # holder must not inherit it, or one host would keep the other alive).
    local flags
    read -ra flags <<<"$(xh__unshare_flags)"
    exec {fd}> >(xh__close_fds; exec unshare "${flags[@]}" --propagation private -- \
        /bin/bash "$XH_SRC_DIR/holder.sh" "$name" "$XH_DIR")
    pid=$!  # unshare execs the holder: the same process
    ((i == 0)) && XH_FD_A=$fd || XH_FD_B=$fd
    XH_PIDS[i]=$pid
    if ! xh__wait_file "$XH_DIR/$name.ready" 20 "$pid"; then
        echo "xh: host $name did not come up: $(cat "$XH_DIR/$name.failed" 2>/dev/null || echo 'no reason given')" >&2
        return 1
    fi
    XH_NET_INODES[i]=$(stat -L -c %i "/proc/$pid/ns/net")
}

# xh__link IF_A IP_A IF_B IP_B: a veth pair between the hosts, each end with its /24
# address, up and with carrier.
xh__link() {
    # The veth is created straight into the two namespaces: never in the machine's.
    ip link add "$1" netns "${XH_PIDS[0]}" type veth peer name "$3" netns "${XH_PIDS[1]}" || return 1
    nsenter -t "${XH_PIDS[0]}" -n ip addr add "$2/24" dev "$1" || return 1
    nsenter -t "${XH_PIDS[1]}" -n ip addr add "$4/24" dev "$3" || return 1
    nsenter -t "${XH_PIDS[0]}" -n ip link set "$1" up || return 1
    nsenter -t "${XH_PIDS[1]}" -n ip link set "$3" up || return 1
    # The link is usable once both ends report carrier.
    local deadline=$((SECONDS + 10)) a b
    while :; do
        a=$(nsenter -t "${XH_PIDS[0]}" -n -m cat "/sys/class/net/$1/operstate" 2>/dev/null)
        b=$(nsenter -t "${XH_PIDS[1]}" -n -m cat "/sys/class/net/$3/operstate" 2>/dev/null)
        [[ $a == up && $b == up ]] && break
        ((SECONDS < deadline)) || { echo "xh: veth $1-$3 not up (A $a, B $b)" >&2; return 1; }
        sleep 0.02
    done
}

xh_up() {
    XH_DIR=$(cd "$1" && pwd) || return 1
    local tag=$$ net
    XH_HOST_A=loomA-$tag
    XH_HOST_B=loomB-$tag
    # Any /24 does: it exists only inside the two namespaces.
    net=10.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 1))
    XH_IP_A=$net.1
    XH_IP_B=$net.2
    XH_CIDR=$net.0/24
    XH_IF_A=xhA
    XH_IF_B=xhB
    printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n%s\t%s\n%s\t%s\n' \
        "$XH_IP_A" "$XH_HOST_A" "$XH_IP_B" "$XH_HOST_B" >"$XH_DIR/etc-hosts"
    xh__start_host 0 "$XH_HOST_A" || return 1
    xh__start_host 1 "$XH_HOST_B" || return 1
    xh__link "$XH_IF_A" "$XH_IP_A" "$XH_IF_B" "$XH_IP_B" || return 1
    # The agent finds a host's first process in hosts.map.
    printf '%s %s %s\n' "$XH_HOST_A" "${XH_PIDS[0]}" "$XH_IP_A" "$XH_HOST_B" "${XH_PIDS[1]}" "$XH_IP_B" \
        >"$XH_DIR/hosts.map"
    xh__nsenter_flags >"$XH_DIR/nsenter-flags"
    XH_AGENT=$XH_DIR/rsh
    printf '#!/bin/sh\nexec %q --state %q "$@"\n' "$XH_SRC_DIR/agent.sh" "$XH_DIR" >"$XH_AGENT"
    chmod +x "$XH_AGENT"
    export XH_HOST_A XH_HOST_B XH_IP_A XH_IP_B XH_CIDR XH_IF_A XH_IF_B XH_AGENT
}

xh_add_link() {
    local net
    # Another /24 than the first link's: the second rail is a network of its own.
    while :; do
        net=10.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 1))
        [[ $net.0/24 != "$XH_CIDR" ]] && break
    done
    XH_IP_A2=$net.1
    XH_IP_B2=$net.2
    XH_CIDR2=$net.0/24
    XH_IF_A2=xhA2
    XH_IF_B2=xhB2
    xh__link "$XH_IF_A2" "$XH_IP_A2" "$XH_IF_B2" "$XH_IP_B2" || return 1
    export XH_IP_A2 XH_IP_B2 XH_CIDR2 XH_IF_A2 XH_IF_B2
}

xh_in() {
    local i flags
    i=$(xh__index "$1") || return 1
    shift
    [[ -n ${XH_PIDS[i]:-} ]] || { echo "xh: host $i is not up" >&2; return 1; }
    read -ra flags <<<"$(xh__nsenter_flags)"
    # Our pipe ends stay here: a long-lived command must not keep the hosts alive.
    (xh__close_fds; exec nsenter -t "${XH_PIDS[i]}" "${flags[@]}" --wd="$PWD" -- "$@")
}

xh_veth_bytes() {
    local i ifname
    i=$(xh__index "$1") || return 1
    ((i == 0)) && ifname=$XH_IF_A || ifname=$XH_IF_B
    [[ -n ${2:-} ]] && ifname=$2
    nsenter -t "${XH_PIDS[i]}" -n -m sh -c \
        "echo \$(cat /sys/class/net/$ifname/statistics/rx_bytes) \$(cat /sys/class/net/$ifname/statistics/tx_bytes)"
}

# Processes of the machine in the hosts' network namespaces (the hosts' own and all they
# started): "PID COMMAND" lines.
xh__members() {
    local p ino i
    for p in /proc/[0-9]*; do
        ino=$(stat -L -c %i "$p/ns/net" 2>/dev/null) || continue
        for i in "${XH_NET_INODES[@]}"; do
            [[ $ino == "$i" ]] && echo "${p#/proc/} $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null | cut -c1-80)"
        done
    done
}

xh_kill_all() {
    local members p deadline=$((SECONDS + 5)) sig=TERM
    while :; do
        members=$(xh__members | grep -vE "^(${XH_PIDS[0]:-x}|${XH_PIDS[1]:-x}) ")
        [[ -z $members ]] && return 0
        ((SECONDS < deadline)) || sig=KILL
        while read -r p _; do kill -"$sig" "$p" 2>/dev/null; done <<<"$members"
        ((SECONDS < deadline + 5)) || return 1
        sleep 0.1
    done
}

xh_down() {
    local i p deadline members
    # End of file on the holders' pipes: each kills its host's processes and exits. Then
    # the same from here, for a holder that is stuck or was never ready.
    xh__close_fds
    XH_FD_A=
    XH_FD_B=
    for i in 0 1; do
        [[ -n ${XH_PIDS[i]:-} ]] && kill -KILL "${XH_PIDS[i]}" 2>/dev/null
    done
    # What runs in the hosts: the processes in their network namespaces, which only this
    # test made.
    if ((${#XH_NET_INODES[@]})); then
        deadline=$((SECONDS + 10))
        while :; do
            members=$(xh__members)
            [[ -z $members ]] && break
            ((SECONDS < deadline)) || break
            while read -r p _; do kill -KILL "$p" 2>/dev/null; done <<<"$members"
            sleep 0.05
        done
    fi
    for i in 0 1; do
        [[ -n ${XH_PIDS[i]:-} ]] && wait "${XH_PIDS[i]}" 2>/dev/null
    done
    XH_PIDS=()
    return 0
}

xh_leftovers() {
    ((${#XH_NET_INODES[@]})) || return 0
    xh__members
}
