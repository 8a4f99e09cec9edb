#!/bin/bash
# The 60-second soak of issue 17 (docs/reliability.md "Soak"): contrib/bench/soak.py with
# three soak_peer processes, random mixed traffic (tag, active messages, stream, RMA) and
# a random peer killed and restarted every few seconds. Process 1 uses tcp only, the
# others shm and tcp: pairs with process 1 run over tcp, the 0-2 pair over shm.
# Passes when nothing was lost or corrupted, no error was unexpected, nothing hung and the
# long-lived process's memory stayed bounded (soak.py says how).
# Usage: run_soak.sh [SOAK_PEER]  (default: ./test/faults/soak_peer of the build tree)
set -u
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
prog=$(readlink -f "${1:-./test/faults/soak_peer}")
command -v python3 >/dev/null || { echo "python3 is missing: skipped"; exit 77; }
if [[ ! -x $prog ]]; then
    echo "$prog is not built"
    exit 1
fi
# ASan keeps freed memory in a quarantine (256 MiB by default), which grows RSS by that
# much: capped here so that the soak's memory bound means the same in both builds.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=16"
exec python3 "$top/contrib/bench/soak.py" --peer "$prog" --seconds "${SOAK_SECONDS:-60}" \
    --tls shm,tcp --tls tcp ${SOAK_ARGS:-}
