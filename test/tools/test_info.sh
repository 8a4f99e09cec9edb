#!/usr/bin/env bash
# Tests of loom_info as a user runs it: options, errors and output.
. "${top_srcdir:-$(dirname "$0")/../..}/test/tools/tap.sh"
info="${top_builddir:-.}/tools/info/loom_info"

check_output "-v prints the version"             '^# Loom version [0-9]+\.[0-9]+\.[0-9]+'  "$info" -v
check_output "no option prints the version"      '^# Loom version'                        "$info"
check        "-h exits 0"                                                                  "$info" -h
check_output "-h lists the options"              '-T +topology'                            "$info" -h
check        "unknown option fails"              bash -c "! '$info' -Z"
check_output "unknown option is named"           "unknown option '-Z'"                     "$info" -Z
check_output "stray argument is named"           "unexpected argument 'foo'"               "$info" foo
check_output "-f without -c is explained"        '-f only goes with -c'                    "$info" -f
check_output "-d lists the self transport"        '^#   transport self on device memory'      "$info" -d
check_output "-d shows the performance model"    '^#      model: overhead'                  "$info" -d
check_output "-d lists the modules searched"     '^# Transport modules \(searched in'       "$info" -d
check        "-T exits 0"                                                                  "$info" -T
check_output "-T prints the machine summary"     '^# NUMA nodes: [1-9][0-9]*, packages: [0-9]+, cores: [1-9][0-9]*, PUs: [1-9][0-9]*$' "$info" -T
check_output "-T lists each node's CPUs"         '^# NUMA node [0-9]+: CPUs [0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*, memory [0-9.]+ [KMGT]?i?B$' "$info" -T
check_output "-T shows lo as virtual and local"  '^# lo +network +virtual +[0-9a-z,-]+ +0$'   "$info" -T
check_output "-T names the clock source"         '^# clock: (tsc|monotonic), [0-9]+\.[0-9]+ MHz'  "$info" -T
check_output "-T prints the NUMA distance matrix" '^#  node1 +20 +10$'                      env HWLOC_SYNTHETIC="node:2 core:1 pu:1" "$info" -T
# Endpoint configuration (-e, -D): the protocols an endpoint would use.
check_output "-e shows self's protocols"          '^# +0 \.\. [0-9]+ +tag eager short on self/' env LOOM_TLS=self "$info" -e -D self
check_output "-e names the AM lane"               'AM lane shm/memory'                     env LOOM_TLS=shm "$info" -e -D shm
check_output "-e follows LOOM_RNDV_THRESH"        '^# +5000 \.\. inf +tag rendezvous'          env LOOM_TLS=tcp LOOM_RNDV_THRESH=5000 "$info" -e -D net
check_output "-e ends eager short at the threshold" '^# +0 \.\. 4999 +tag eager short '          env LOOM_TLS=tcp LOOM_RNDV_THRESH=5000 "$info" -e -D net
check_output "-e net leaves same-host transports" 'AM lane tcp/'                           env LOOM_TLS=shm,tcp "$info" -e -D net
check_output "-e net without tcp says so"         'no transport reaches such a peer'       env LOOM_TLS=shm "$info" -e -D net
check_output "-e says which lane each transport is"  '^#     shm/memory: used: AM lane'       env LOOM_TLS=shm,tcp "$info" -e -D shm
check_output "-e says why a reachable one is unused" '^#     tcp/lo: not used: reachable; the AM lane costs [0-9.]+ us by the model, this [0-9.]+ us' env LOOM_TLS=shm,tcp "$info" -e -D shm
check_output "-e names transports not in LOOM_TLS"  '^#     self/memory: not in LOOM_TLS$'   env LOOM_TLS=shm,tcp "$info" -e -D shm
check_output "-e net says lo cannot reach the peer" '^#     tcp/lo: not used: unreachable: ' env LOOM_TLS=tcp "$info" -e -D net
check        "-e net never reaches a peer through lo" bash -c "! env LOOM_TLS=tcp '$info' -e -D net | grep -q 'AM lane tcp/lo'"
check_output "-D takes known kinds only"          "-D takes self, shm or net, not 'foo'"    "$info" -e -D foo
check_output "-D without -e is explained"         '-D only goes with -e'                   "$info" -D net
# Configuration (-c, -cf, -cm), warnings about unknown variables, bad global values.
noenv="env -u LOOM_LOG_LEVEL -u LOOM_CONFIG_FILE -u LOOM_MODULES"
check_output "-c prints variables and values"     '^LOOM_LOG_LEVEL=warn$'                   $noenv "$info" -c
check_output "-c has a header per table"          '^# Global options$'                      "$info" -c
check_output "-c shows environment values"        '^LOOM_MODULES=\^tcp,shm$'                env LOOM_MODULES='^tcp,shm' "$info" -c
check_output "-cf documents the syntax"           '^# Syntax: +all, a comma-separated list' "$info" -cf
check_output "-cm prints a Markdown table"        '^\| `LOOM_MODULES` \| `all` \|'          $noenv "$info" -cm
check_output "-m without -c is explained"         '-m only goes with -c'                    "$info" -m
check_output "unknown variable gets a suggestion" 'LOOM_LOG_LEVL; did you mean LOOM_LOG_LEVEL\?' env LOOM_LOG_LEVL=debug "$info" -c
# Transport modules' variables (LOOM_IB_*): listed by -c and never called unknown.
if [ -f "${LOOM_MODULE_DIR:-/nonexistent}/libloom_uct_ib.so" ]; then
    check_output "-c lists a module's variables"      '^LOOM_IB_TX_QUEUE_LEN=64$'  env LOOM_IB_TX_QUEUE_LEN=64 "$info" -c
    check_output "a module's variable is not unknown" '^0$'  bash -c "LOOM_IB_TX_QUEUE_LEN=64 '$info' -c 2>&1 | grep -c 'unknown configuration variable'"
else
    tap_n=$((tap_n + 1)); echo "ok $tap_n - -c lists a module's variables # SKIP the ib module was not built"
fi
check        "bad LOOM_MODULES fails -c"          bash -c "! LOOM_MODULES=all,tcp '$info' -c"
check        "bad LOOM_LOG_LEVEL does not abort"  env LOOM_LOG_LEVEL=loud "$info" -v
check_output "bad LOOM_LOG_LEVEL is named once"   '^1$'  bash -c "LOOM_LOG_LEVEL=loud '$info' -v 2>&1 | grep -c 'LOOM_LOG_LEVEL=loud: invalid log level'"
finish
