#!/usr/bin/env bash
#
# Runs Loom's verbs test suite (the rc transport on Soft-RoCE and soft-iWARP devices)
# and leaves its result where test/summarize.py counts it:
#
#   test/rdma/run_rdma_tests.sh [BUILD_DIR]        (default: <source>/build)
#
# Where it runs, in this order:
#   1. on this machine, when it has RDMA devices of its own (ibv_devices lists any);
#   2. in the rdma-vm (a qemu VM with rxe0/rxe1 and siw0/siw1) when one is found beside
#      the checkout: <source>/../shared/rdma-vm, or $LOOM_RDMA_VM; its one-time setup is
#      run first when its image is missing;
#   3. nowhere: it says so loudly ("RDMA: NOT TESTED: ...") and records a skipped case.
#
# Output: BUILD_DIR/test/rdma/gtest-uct-rdma.log (loom_info -d of the devices, then the
# gtest output) and its .trs (":test-result: PASS|FAIL|SKIP"). quickstart.sh runs it for
# the regular build and for the AddressSanitizer+UBSan build (build/sanitize): under TCG
# each run takes well under a minute (boot ~6 s, the suite ~10 s), and the sanitizers are
# the only check of the transport's memory handling against real devices.
# Exit status: 0 when the suite passed or could not run here, 1 when it failed.
#
set -uo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:-$top/build}" 2>/dev/null && pwd) || {
    echo "run_rdma_tests.sh: no build directory ${1:-$top/build}" >&2
    exit 1
}
outdir="$build/test/rdma"
log="$outdir/gtest-uct-rdma.log"
trs="$outdir/gtest-uct-rdma.trs"
vm_dir=${LOOM_RDMA_VM:-$(cd "$top/.." && pwd)/shared/rdma-vm}
vm_timeout=${LOOM_RDMA_VM_TIMEOUT:-1200}   # seconds for the whole suite inside the VM (TCG is slow)
gtest="$build/test/gtest/gtest-uct"
gtest_ucp="$build/test/gtest/gtest-ucp"
module_dir="$build/src/uct/ib/.libs"
info="$build/tools/info/loom_info"
# The generic uct suites over every rc resource, the verbs-specific suites, the device facts.
filter='Transports/*:Rc/*:Devices/*'

mkdir -p "$outdir"
rm -f "$log" "$trs"
# Into the build tree: the VM sees only its current directory (the build tree) of the
# host's writable paths, and a source tree under /tmp not at all (a fresh tmpfs there).
cp "$top/test/rdma/siw_accept_window.bt" "$outdir/"

say() { printf '\n==> %s\n' "$*"; }

# write_trs RESULT: the automake harness's .trs format.
write_trs() {
    printf ':test-result: %s\n:global-test-result: %s\n:recheck: %s\n:copy-in-global-log: no\n' \
        "$1" "$1" "$([ "$1" = PASS ] && echo no || echo yes)" > "$trs"
}

# not_tested REASON: loud message, a skipped case with the reason, exit 0.
not_tested() {
    local banner="RDMA: NOT TESTED: $1"
    printf '\n%s\n%s\n%s\n' "********************************************************************************" \
        "$banner" "********************************************************************************"
    printf '%s\nok 1 - rdma verbs suite # SKIP %s\n' "$banner" "$1" > "$log"
    write_trs SKIP
    exit 0
}

# failed REASON: the suite could not run although it should have; counted as a failure.
failed() {
    echo "RDMA: FAILED: $1" | tee -a "$log"
    echo "not ok 1 - rdma verbs suite: $1" >> "$log"
    write_trs FAIL
    exit 1
}

if [ ! -f "$module_dir/libloom_uct_ib.so" ]; then
    not_tested "the ib module was not built (rdma-core headers missing at configure time? see $build/configure.out)"
fi
[ -x "$gtest" ] || failed "$gtest is missing (run make check first)"
[ -x "$gtest_ucp" ] || failed "$gtest_ucp is missing (run make check first)"
[ -x "$build/tools/perftest/loom_perftest" ] || failed "$build/tools/perftest/loom_perftest is missing (run make first)"

# Then the protocol layer's suites over rc (the Verbs/* instances), once per device kind:
# the first device of each driver (rxe0 and siw0 in the VM), or LOOMTEST_UCP_DEVICES.
# shellcheck disable=SC2016
suite_script='
    "$1" -d 2>&1
    "$2" --gtest_filter="$3"; rc=$?
    devices=${LOOMTEST_UCP_DEVICES:-$(ls /sys/class/infiniband 2>/dev/null | sort | awk "{d=\$1; sub(/[0-9]+\$/, \"\", d); if (!(d in seen)) {seen[d]=1; print \$1\":1\"}}")}
    for dev in $devices; do
        echo "== protocol layer (gtest-ucp Verbs/*) over rc on $dev"
        LOOMTEST_UCP_VERBS=1 LOOM_NET_DEVICES=$dev "$4" --gtest_filter="Verbs/*" || rc=1
        # InfiniBand and RoCE devices (node type 1, a CA; iWARP is an RNIC) also connect QP
        # to QP, wired up by the protocol layer over tcp.
        case $(cat "/sys/class/infiniband/${dev%%:*}/node_type" 2>/dev/null) in
        1*)
            echo "== protocol layer (gtest-ucp Verbs/*) over rc on $dev, endpoint to endpoint (LOOM_IB_CM=verbs)"
            LOOMTEST_UCP_VERBS=1 LOOM_IB_CM=verbs LOOM_NET_DEVICES=$dev,lo "$4" --gtest_filter="Verbs/*" || rc=1
            ;;
        esac
    done
    # loom_perftest between two processes over rc, as a user runs it (a server, then a
    # client naming it): a case passes when the client prints its Final: line and both exit 0.
    final="^Final: +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+"
    for dev in $devices; do
        echo "== loom_perftest, server and client over rc on $dev"
        for t in "tag_lat" "tag_lat -s 65536" "tag_bw -s 1048576 -O 4" "tag_sync_lat" "ucp_am_lat" \
                 "stream_bw -s 65536" "ucp_put_lat" "ucp_put_bw -s 1048576" "ucp_get -s 65536 -O 4"; do
            name="LoomPerftest.rc_${dev%%:*}_$(echo "$t" | tr " -" "__")"
            port=$((20000 + RANDOM % 12000))
            LOOM_TLS=rc LOOM_NET_DEVICES=$dev timeout 120 "$6" -p $port > /dev/null 2> perftest_server.err &
            server=$!
            out=$(LOOM_TLS=rc LOOM_NET_DEVICES=$dev timeout 120 "$6" 127.0.0.1 -p $port -t $t -n 200 -w 10 -f 2>&1)
            cli=$?
            wait $server
            srv=$?
            if [ $cli -eq 0 ] && [ $srv -eq 0 ] && printf "%s\n" "$out" | grep -Eq -- "$final"; then
                echo "[       OK ] $name (0 ms)"
            else
                printf "%s\n" "$out" | tail -5 | sed "s/^/  client| /"
                tail -5 perftest_server.err | sed "s/^/  server| /"
                echo "[  FAILED  ] $name, client exit $cli, server exit $srv (0 ms)"
                rc=1
            fi
        done
        rm -f perftest_server.err
    done
    # soft-iWARP accepts a connection by sending its MPA reply and only then reading the
    # socket for the queue pair: an initiator frame that arrives in between waits unread
    # (rc probes its acceptor for this, docs/notes.md). bpftrace, where it runs, widens that
    # window to tens of milliseconds, so that every siw connection of these cases hits it.
    if ls /sys/class/infiniband 2>/dev/null | grep -q "^siw" && command -v bpftrace >/dev/null; then
        echo "== soft-iWARP with its accept window widened ($5)"
        mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
        out=$(mktemp)
        bpftrace "$5" > "$out" 2>&1 &
        bt=$!
        for _ in $(seq 1200); do grep -q "^Attaching" "$out" && break; kill -0 $bt 2>/dev/null || break; sleep 0.1; done
        if grep -q "^Attaching" "$out"; then
            # Two-process cases only: in one process the initiator cannot run while its acceptor spins.
            "$2" --gtest_filter="Transports/UctPeerFailureTest.*/rc_siw*:Transports/UctMultiProcTest.*/rc_siw*" || rc=1
            kill -INT $bt; wait $bt
            accepts=$(sed -n "s/^@accepts: //p" "$out")
            echo "soft-iWARP accepts delayed: ${accepts:-0}"
            [ "${accepts:-0}" -gt 0 ] || echo "RDMA: NOTE: the widened accept window was not exercised (siw_accept not probed)"
        else
            kill $bt 2>/dev/null; wait $bt 2>/dev/null
            echo "RDMA: NOTE: bpftrace could not attach; the soft-iWARP accept window was not widened"; tail -3 "$out"
        fi
        rm -f "$out"
    else
        echo "== soft-iWARP accept window not widened (needs siw devices and bpftrace)"
    fi
    # Unmodified Open MPI on Loom over rc (the regular build: the sanitizer build'"'"'s libraries
    # cannot load into uninstrumented MPI processes): osu_latency with validation, and the
    # MPI correctness suite with 2 ranks. TAP lines become gtest-style markers, counted below.
    if [ -n "$7" ]; then
        [ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd   # the VM lacks it; bash process substitution needs it
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
        for dev in $devices; do
            d=${dev%%:*}
            echo "== Open MPI (pml ucx) on Loom over rc on $dev: osu_latency -c, the MPI suite with 2 ranks"
            out=$(LD_LIBRARY_PATH="$7" LOOM_TLS=rc,self LOOM_NET_DEVICES=$dev timeout 600 mpirun -np 2 \
                  -x LD_LIBRARY_PATH -x LOOM_TLS -x LOOM_NET_DEVICES -x LOOM_MODULE_DIR --mca pml ucx \
                  --mca opal_common_ucx_tls any --mca opal_common_ucx_devices any \
                  "$8/osu_latency" -c -m 1:1048576 -i 50 -x 5 2>&1)
            if [ $? -eq 0 ] && printf "%s\n" "$out" | grep -q Pass && ! printf "%s\n" "$out" | grep -q Fail; then
                echo "[       OK ] MpiOnRc.${d}_osu_latency (0 ms)"
            else
                printf "%s\n" "$out" | tail -15 | sed "s/^/  osu| /"
                echo "[  FAILED  ] MpiOnRc.${d}_osu_latency (0 ms)"; rc=1
            fi
            LOOM_NET_DEVICES=$dev top_srcdir="$9" "$9/test/mpi/run_mpi_suite.sh" --loom "$7" --stacks ompi-loom \
                --np 2 --tls rc,self --timeout 600 "${10}" > mpi_suite.out 2>&1 || rc=1
            awk -v d="$d" '"'"'
                function name(s) { sub(/^(not )?ok [0-9]+ - /, "", s); sub(/ # SKIP.*/, "", s); gsub(/[^A-Za-z0-9]+/, "_", s); return "MpiOnRc." d "_" s }
                # the layout of a gtest skip ("...: Skipped", the reason, then the case) keeps its reason in the summary.
                /^ok .* # SKIP/ { r = $0; sub(/.* # SKIP */, "", r); print "run_mpi_suite.sh: Skipped"; print (r == "" ? "no reason given" : r);
                                  print "[  SKIPPED ] " name($0) " (0 ms)"; next }
                /^ok /          { print "[       OK ] " name($0) " (0 ms)"; next }
                /^not ok /      { print "[  FAILED  ] " name($0) " (0 ms)"; next }
                { print "  mpi| " $0 }'"'"' mpi_suite.out
            rm -f mpi_suite.out
        done
    else
        echo "== MPI over rc: not run for this build (its sanitizer libraries cannot load into MPI processes; the regular build runs it)"
    fi
    exit $rc'
# What the VM needs from the source tree goes into the build tree: a checkout under /tmp is
# invisible in the VM (its /tmp is a fresh tmpfs).
mpi_src=$outdir/mpi-src
mkdir -p "$mpi_src/test/mpi" "$mpi_src/test/tools"
cp -p "$top/test/tools/tap.sh" "$mpi_src/test/tools/"
cp -p "$top/test/mpi/run_mpi_suite.sh" "$top/test/mpi/mpitest.h" "$top"/test/mpi/test_*.c "$mpi_src/test/mpi/"
mpi_compat="" osu_bin=""
if ! grep -q '^[^#]*fsanitize=address' "$build/Makefile" 2>/dev/null && [ -e "$build/bindings/ucx/.libs/libucp.so.0" ]; then
    mpi_compat=$build/bindings/ucx/.libs
    osu_bin=$("$top/test/mpi/build_osu.sh" "$build" openmpi 2>/dev/null | awk '{print $2}')
fi
suite_cmd=(env LOOM_MODULE_DIR="$module_dir" LOOMTEST_UCT_TLS=rc LOOMTEST_TIMEOUT=300
           bash -c "$suite_script" _ "$info" "$gtest" "$filter" "$gtest_ucp" "$outdir/siw_accept_window.bt"
           "$build/tools/perftest/loom_perftest" "$mpi_compat" "$osu_bin" "$mpi_src" "$build/test/mpi")

case $build in
    */sanitize) label="the AddressSanitizer+UBSan build" ;;
    *) label="the regular build (quickstart runs the sanitizer build's too)" ;;
esac

has_local_devices() {
    command -v ibv_devices >/dev/null && [ "$(ibv_devices 2>/dev/null | awk 'NR > 2 && NF' | wc -l)" -gt 0 ]
}

if has_local_devices; then
    say "verbs suite of $label on this machine's RDMA devices ($(ibv_devices | awk 'NR > 2 {printf "%s ", $1}'))"
    "${suite_cmd[@]}" > "$log" 2>&1
    rc=$?
elif [ -x "$vm_dir/run" ]; then
    cache=${RDMA_VM_CACHE:-/var/tmp/rdma-vm}
    if [ ! -e "$cache/current/initrd" ]; then
        say "setting up the rdma-vm once ($vm_dir/setup)"
        sudo=()
        [ "$(id -u)" -eq 0 ] || sudo=(sudo -n)
        "${sudo[@]}" "$vm_dir/setup" > "$outdir/rdma-vm-setup.log" 2>&1 ||
            failed "rdma-vm setup failed (see $outdir/rdma-vm-setup.log)"
    fi
    say "verbs suite of $label in the rdma-vm ($vm_dir: rxe0/rxe1 RoCE v2, siw0/siw1 iWARP)"
    # The VM starts in the current directory, which it shares writable: the build tree.
    (cd "$build" && "$vm_dir/run" -t "$vm_timeout" -- "${suite_cmd[@]}") > "$log" 2>&1
    rc=$?
    case $rc in
        124) echo "RDMA: the suite exceeded ${vm_timeout}s in the VM" >> "$log" ;;
        125) failed "the rdma-vm failed to boot or crashed (console tail in $log)" ;;
    esac
else
    not_tested "no RDMA device here and no rdma-vm at $vm_dir (set LOOM_RDMA_VM to its directory)"
fi

# The VM's console may end lines with CR LF, and merges the streams: a log line may run
# into an "[ OK ]" marker, so markers are counted wherever they are in a line.
passed=$(tr -d '\r' < "$log" | grep -o '\[       OK \] [^ ]* (' | wc -l)
failures=$(tr -d '\r' < "$log" | grep -c '^\[  FAILED  \].*ms)$')
echo "RDMA: verbs suite: $passed passed, $failures failed (exit $rc; log $log)"
if [ "$rc" -eq 0 ] && [ "$passed" -gt 0 ]; then
    write_trs PASS
    exit 0
fi
write_trs FAIL
exit 1
