#!/bin/bash
#
# The first process of a simulated host (started by hosts.sh inside fresh namespaces; not
# meant to be run by hand):
#
#   holder.sh NAME STATE_DIR
#
# Makes the host: its own /sys (showing this network namespace's devices, as `ip netns
# exec` does; UCX finds its network devices there), an empty tmpfs on /dev/shm,
# STATE_DIR/etc-hosts over /etc/hosts (both hosts' names on their veth addresses), the host
# name NAME, loopback up.
#
# Then it writes STATE_DIR/NAME.ready and waits for end of file on its stdin, a pipe whose
# writing end only the test holds: when the test closes it or dies (even by SIGKILL), this
# process kills every other process in the host's network namespace and exits; the
# namespaces, and the veth end, go with the last process in them. A step that fails writes
# STATE_DIR/NAME.failed with the reason and exits.
#
set -u
name=$1 dir=$2

fail() {
    echo "$*" >"$dir/$name.failed.tmp" && mv "$dir/$name.failed.tmp" "$dir/$name.failed"
    exit 1
}

# unshare --propagation private already made every mount private: nothing below leaks out.
umount -l /sys || fail "cannot unmount the machine's /sys"
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys || fail "cannot mount a /sys for the network namespace"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm || fail "cannot mount a tmpfs on /dev/shm"
mount --bind "$dir/etc-hosts" /etc/hosts || fail "cannot bind $dir/etc-hosts over /etc/hosts"
hostname "$name" || fail "cannot set the host name $name"
ip link set lo up || fail "cannot bring lo up"

: >"$dir/$name.ready"
# Reads until end of file, then ends what still runs in this host (the processes in this
# network namespace, which only the test made), so that a test killed by SIGKILL leaves
# no job running.
while read -r _; do :; done
me=$(readlink /proc/$$/ns/net)
for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [[ $pid != "$$" && $(readlink "$p/ns/net" 2>/dev/null) == "$me" ]] && kill -KILL "$pid" 2>/dev/null
done
exit 0
