#!/bin/bash
#
# The "ssh" between the simulated hosts of hosts.sh, for mpirun's rsh launcher (Open MPI
# --mca plm_rsh_agent, MPICH hydra -launcher ssh -launcher-exec):
#
#   agent.sh --state DIR [ssh options] [USER@]HOST [COMMAND...]
#
# Runs COMMAND on HOST (a name or address in DIR/hosts.map) as sshd would: the words
# joined by spaces and given to /bin/sh -c, in the home directory, with a fresh login
# environment (HOME, USER, LOGNAME, SHELL and a default PATH) rather than the caller's, so
# that what a job needs on the other host must travel the way it does between real hosts
# (mpirun -x, --prefix, hydra's environment forwarding). XH_AGENT_PASS="VAR ..." in the
# caller's environment passes those variables too (like ssh's SendEnv). ssh options are
# accepted and ignored. Every call is logged to DIR/agent.log.
#
set -u

state=
if [[ ${1:-} == --state ]]; then
    state=$2
    shift 2
fi
[[ -n $state && -f $state/hosts.map ]] || { echo "agent.sh: no --state DIR with hosts.map" >&2; exit 255; }

# ssh options: those that take an argument, then flags.
while [[ $# -gt 0 && $1 == -* ]]; do
    case $1 in
        -[BbcDEeFIiJLlmOopQRSWw]) shift 2 ;;
        --) shift; break ;;
        *) shift ;;
    esac
done
[[ $# -ge 1 ]] || { echo "agent.sh: no host" >&2; exit 255; }
host=${1#*@}
shift

pid=
while read -r name p ip; do
    if [[ $host == "$name" || $host == "$ip" ]]; then
        pid=$p
        break
    fi
done <"$state/hosts.map"
[[ -n $pid ]] || { echo "agent.sh: unknown host '$host' (not in $state/hosts.map)" >&2; exit 255; }

[[ -d /proc/$pid ]] || { echo "agent.sh: host $host is gone (no process $pid)" >&2; exit 255; }
read -ra ns <"$state/nsenter-flags"

envv=(HOME=/root USER=root LOGNAME=root SHELL=/bin/sh
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
for v in ${XH_AGENT_PASS:-}; do
    [[ -n ${!v+set} ]] && envv+=("$v=${!v}")
done

cmd=$*
[[ -n $cmd ]] || cmd='exec /bin/sh -l'
printf '%s %s: %s\n' "$(date +%T.%N | cut -c1-12)" "$host" "$cmd" >>"$state/agent.log"
exec nsenter -t "$pid" "${ns[@]}" -- env -i "${envv[@]}" /bin/sh -c "cd && $cmd"
