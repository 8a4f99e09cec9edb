#!/usr/bin/env bash
#
# Runs Loom's verbs test suite (the rc transport on Soft-RoCE and soft-iWARP devices)
# for one or more builds and leaves each build's result where test/summarize.py counts it:
#
#   test/rdma/run_rdma_tests.sh [BUILD_DIR...]     (default: <source>/build)
#
# Where it runs, in this order:
#   1. on this machine, when it has RDMA devices of its own (ibv_devices lists any);
#   2. in the rdma-vm (a qemu VM with rxe0/rxe1 and siw0/siw1) when one is found beside
#      the checkout: <source>/../shared/rdma-vm, or $LOOM_RDMA_VM; its one-time setup is
#      run first when its image is missing. One VM boot runs every build's suite, one build
#      after the other (a boot under TCG costs most of a minute of both cores);
#   3. nowhere: it says so loudly ("RDMA: NOT TESTED: ...") and records a skipped case.
#
# Output, per build: BUILD_DIR/test/rdma/gtest-uct-rdma.log (loom_info -d of the devices,
# then the gtest output) and its .trs (":test-result: PASS|FAIL|SKIP"). quickstart.sh runs
# it once for the regular build and the AddressSanitizer+UBSan build (build/sanitize): the
# sanitizers are the only check of the transport's memory handling against real devices.
# Under TCG a build's suite takes minutes (the VM boot ~45 s on a loaded 2-core machine).
# LOOM_QS_TIMING_LOG, when set, gets one line per build with its suite's wall time.
# Exit status: 0 when every suite passed or could not run here, 1 when one failed.
#
set -uo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
vm_dir=${LOOM_RDMA_VM:-$(cd "$top/.." && pwd)/shared/rdma-vm}
vm_timeout=${LOOM_RDMA_VM_TIMEOUT:-1800}   # seconds for one build's suite inside the VM (TCG is slow; the regular build's takes ~1000)
# The generic uct suites over every rc resource, the verbs-specific suites, the device facts.
filter='Transports/*:Rc/*:Devices/*'

say() { printf '\n==> %s\n' "$*"; }

# write_trs TRS RESULT: the automake harness's .trs format.
write_trs() {
    printf ':test-result: %s\n:global-test-result: %s\n:recheck: %s\n:copy-in-global-log: no\n' \
        "$2" "$2" "$([ "$2" = PASS ] && echo no || echo yes)" > "$1"
}

# not_tested OUTDIR REASON: loud message, a skipped case with the reason.
not_tested() {
    local banner="RDMA: NOT TESTED: $2"
    printf '\n%s\n%s\n%s\n' "********************************************************************************" \
        "$banner" "********************************************************************************"
    printf '%s\nok 1 - rdma verbs suite # SKIP %s\n' "$banner" "$2" > "$1/gtest-uct-rdma.log"
    write_trs "$1/gtest-uct-rdma.trs" SKIP
}

# failed OUTDIR REASON: the suite could not run although it should have; counted as a failure.
failed() {
    echo "RDMA: FAILED: $2" | tee -a "$1/gtest-uct-rdma.log"
    echo "not ok 1 - rdma verbs suite: $2" >> "$1/gtest-uct-rdma.log"
    write_trs "$1/gtest-uct-rdma.trs" FAIL
    status=1
}

# What runs for one build (in the VM, or on this machine's devices): device facts, the uct
# suites over rc, then the protocol layer's suites over rc (the Verbs/* instances), once per
# device kind: the first device of each driver (rxe0 and siw0 in the VM), or LOOMTEST_UCP_DEVICES
# (the sanitizer build: the first of them only). Each step's banner says when it started.
# shellcheck disable=SC2016
suite_script='
    # tap_to_gtest PREFIX INDENT FILE: a TAP script'"'"'s output with its results as gtest-style
    # markers (counted by test/summarize.py), named PREFIX + the case, other lines indented.
    tap_to_gtest() {
        awk -v p="$1" -v ind="$2" '"'"'
            function name(s) { sub(/^(not )?ok [0-9]+ - /, "", s); sub(/ # SKIP.*/, "", s); gsub(/[^A-Za-z0-9]+/, "_", s); return p s }
            # the layout of a gtest skip ("...: Skipped", the reason, then the case) keeps its reason in the summary.
            /^ok .* # SKIP/ { r = $0; sub(/.* # SKIP */, "", r); print "tap: Skipped"; print (r == "" ? "no reason given" : r);
                              print "[  SKIPPED ] " name($0) " (0 ms)"; next }
            /^ok /          { print "[       OK ] " name($0) " (0 ms)"; next }
            /^not ok /      { print "[  FAILED  ] " name($0) " (0 ms)"; next }
            { print ind $0 }'"'"' "$3"
    }
    # step TEXT: a step'"'"'s banner, with the seconds since the suite started (where the time goes).
    step() { echo "== $* [at ${SECONDS} s]"; }
    "$1" -d 2>&1
    step "transport layer (gtest-uct $3) over rc"
    "$2" --gtest_filter="$3"; rc=$?
    # A send whose buffer the wire still reads when a completion gives it back shows on a
    # slow link: soft-iWARP sends unsignaled requests of a page or more from their pages
    # (rc signals those, kIwarpZcopyMin). The tests that check every byte, again with 10 ms
    # of delay (netem) on each device'"'"'s link; without that rule a few percent of the
    # messages arrive with later bytes there.
    netdevs=$(cat /sys/class/infiniband/*/ports/1/gid_attrs/ndevs/0 2>/dev/null | sort -u | paste -sd " " -)
    if [ -n "$netdevs" ] && modprobe sch_netem 2>/dev/null && command -v tc >/dev/null; then
        step "transport layer over slow links (netem delay 10ms on $netdevs)"
        for n in $netdevs; do tc qdisc add dev "$n" root netem delay 10ms || rc=1; done
        "$2" --gtest_filter="Rc/IbPairTest.BounceBuffers*:Rc/IbPairTest.ActiveMessagesBothWays/*:Rc/IbPairTest.LargeRdmaAcrossTheWire/*" || rc=1
        for n in $netdevs; do tc qdisc del dev "$n" root; done
    else
        echo "RDMA: NOTE: no netem (sch_netem, tc) or no device netdev here: the slow-link step did not run"
    fi
    devices=${LOOMTEST_UCP_DEVICES:-$(ls /sys/class/infiniband 2>/dev/null | sort | awk "{d=\$1; sub(/[0-9]+\$/, \"\", d); if (!(d in seen)) {seen[d]=1; print \$1\":1\"}}")}
    # The sanitizer build runs the protocol layer on the first device only (rxe0 in the VM):
    # its point is the memory handling of code that is the same on every device, and the
    # regular build covers the other kinds; the uct suites above ran on every device.
    ucp_devices=$devices
    if [ -n "${LOOM_RDMA_SANITIZER:-}" ]; then
        ucp_devices=${devices%%[[:space:]]*}
        step "sanitizer build: the protocol layer and loom_perftest over $ucp_devices only (the regular build runs every device)"
    fi
    for dev in $ucp_devices; do
        step "protocol layer (gtest-ucp Verbs/*) over rc on $dev"
        LOOMTEST_UCP_VERBS=1 LOOM_NET_DEVICES=$dev "$4" --gtest_filter="Verbs/*" || rc=1
        # InfiniBand and RoCE devices (node type 1, a CA; iWARP is an RNIC) also connect QP
        # to QP, wired up by the protocol layer over tcp.
        case $(cat "/sys/class/infiniband/${dev%%:*}/node_type" 2>/dev/null) in
        1*)
            step "protocol layer (gtest-ucp Verbs/*) over rc on $dev, endpoint to endpoint (LOOM_IB_CM=verbs)"
            LOOMTEST_UCP_VERBS=1 LOOM_IB_CM=verbs LOOM_NET_DEVICES=$dev,lo "$4" --gtest_filter="Verbs/*" || rc=1
            ;;
        esac
    done
    # Multi-rail: rc over two devices of one kind on each side (rxe0 and rxe1, siw0 and
    # siw1), large messages split over both (test_rndv_rails.cc).
    for kind in rxe siw; do
        rails=$(ls /sys/class/infiniband 2>/dev/null | grep -E "^$kind[0-9]+\$" | sort | head -2 | sed "s/\$/:1/" | paste -sd, -)
        case $rails in
        *,*)
            step "protocol layer, multi-rail (gtest-ucp Verbs/UcpRailsTest.*) over rc on $rails"
            LOOMTEST_UCP_VERBS=1 LOOMTEST_RAILS=1 LOOM_NET_DEVICES=$rails "$4" --gtest_filter="Verbs/UcpRailsTest.*" || rc=1
            if [ "$kind" = rxe ]; then
                step "protocol layer, multi-rail over rc on $rails, endpoint to endpoint (LOOM_IB_CM=verbs)"
                LOOMTEST_UCP_VERBS=1 LOOMTEST_RAILS=1 LOOM_IB_CM=verbs LOOM_NET_DEVICES=$rails,lo "$4" \
                    --gtest_filter="Verbs/UcpRailsTest.*" || rc=1
            fi
            ;;
        *) step "multi-rail over $kind: fewer than two $kind devices here, not run" ;;
        esac
    done
    # loom_perftest between two processes over rc, as a user runs it (a server, then a
    # client naming it): a case passes when the client prints its Final: line and both exit 0.
    final="^Final: +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+"
    for dev in $ucp_devices; do
        step "loom_perftest, server and client over rc on $dev"
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
        step "soft-iWARP with its accept window widened ($5)"
        mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
        out=$(mktemp)
        bpftrace "$5" > "$out" 2>&1 &
        bt=$!
        for _ in $(seq 1200); do grep -q "^Attaching" "$out" && break; kill -0 $bt 2>/dev/null || break; sleep 0.1; done
        if grep -q "^Attaching" "$out"; then
            # Two-process cases only: in one process the initiator cannot run while its acceptor spins.
            "$2" --gtest_filter="Transports/UctPeerFailureTest.*/rc_siw*:Transports/UctMultiProcTest.*/rc_siw*" || rc=1
            # bpftrace prints its counts on SIGINT and exits; once, under a loaded host,
            # it never did and the whole VM suite ran out of time there: bounded.
            kill -INT $bt
            for _ in $(seq 600); do kill -0 $bt 2>/dev/null || break; sleep 0.1; done
            if kill -0 $bt 2>/dev/null; then
                kill -KILL $bt
                echo "RDMA: NOTE: bpftrace did not exit within 60 s of SIGINT (killed); its count is lost"
            fi
            wait $bt
            accepts=$(sed -n "s/^@accepts: //p" "$out")
            echo "soft-iWARP accepts delayed: ${accepts:-0}"
            [ "${accepts:-0}" -gt 0 ] || echo "RDMA: NOTE: the widened accept window was not exercised (siw_accept not probed)"
        else
            kill $bt 2>/dev/null; wait $bt 2>/dev/null
            echo "RDMA: NOTE: bpftrace could not attach; the soft-iWARP accept window was not widened"; tail -3 "$out"
        fi
        rm -f "$out"
    else
        step "soft-iWARP accept window not widened (needs siw devices and bpftrace)"
    fi
    # Unmodified Open MPI on Loom over rc (the regular build: the sanitizer build'"'"'s libraries
    # cannot load into uninstrumented MPI processes): osu_latency with validation, and the
    # MPI correctness suite with 2 ranks. TAP lines become gtest-style markers, counted below.
    if [ -n "$7" ]; then
        [ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd   # the VM lacks it; bash process substitution needs it
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
        for dev in $devices; do
            d=${dev%%:*}
            step "Open MPI (pml ucx) on Loom over rc on $dev: osu_latency -c, one-sided, OpenSHMEM, the MPI suite with 2 ranks (first device)"
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
            # One-sided MPI (osc ucx) and OpenSHMEM (spml ucx) over rc: atomics by the target'"'"'s CPU
            # (LOOM_ATOMIC_MODE=cpu). OSU one-sided with validation where it has it, up to 64 KiB;
            # test_shmem and osu_oshm_barrier with 2 PEs. (osu_oshm_put/get/put_mr have no option
            # for fewer iterations: 1-2 minutes each under TCG, run by hand; docs/mpi.md.)
            for b in "osu_put_latency -w create -s lock" "osu_get_bw -w allocate -s fence" "osu_acc_latency -c" \
                     "osu_fop_latency -c -T mpi_int" "osu_cas_latency -c -T mpi_int"; do
                name="MpiOnRc.${d}_osc_ucx_${b%% *}"
                out=$(LD_LIBRARY_PATH="$7" LOOM_TLS=rc,self LOOM_NET_DEVICES=$dev timeout 300 mpirun -np 2 \
                      -x LD_LIBRARY_PATH -x LOOM_TLS -x LOOM_NET_DEVICES -x LOOM_MODULE_DIR --mca pml ucx --mca osc ucx \
                      --mca opal_common_ucx_tls any --mca opal_common_ucx_devices any "$8/"$b -m 1:65536 -i 5 -x 2 2>&1)
                if [ $? -eq 0 ] && ! printf "%s\n" "$out" | grep -q Fail; then
                    echo "[       OK ] $name (0 ms)"
                else
                    printf "%s\n" "$out" | tail -15 | sed "s/^/  osu| /"
                    echo "[  FAILED  ] $name (0 ms)"; rc=1
                fi
            done
            oshrun_rc=(oshrun -np 2 --bind-to none --mca spml ucx --mca pml ucx --mca opal_common_ucx_opal_mem_hooks 0
                       --mca opal_common_ucx_tls any --mca opal_common_ucx_devices any
                       -x LD_LIBRARY_PATH -x LOOM_TLS -x LOOM_NET_DEVICES -x LOOM_MODULE_DIR)
            for p in "${11}" "${12}"; do
                [ -n "$p" ] || continue
                name="ShmemOnRc.${d}_$(basename "$p")"
                out=$(LD_LIBRARY_PATH="$7" LOOM_TLS=rc,self LOOM_NET_DEVICES=$dev timeout 300 "${oshrun_rc[@]}" "$p" 2>&1)
                if [ $? -eq 0 ] && { [ "$(basename "$p")" != test_shmem ] || printf "%s\n" "$out" | grep -Eq "^test_shmem: [0-9]+ checks passed$"; } &&
                   ! printf "%s\n" "$out" | grep -q ": FAIL "; then
                    echo "[       OK ] $name (0 ms)"
                else
                    printf "%s\n" "$out" | tail -15 | sed "s/^/  shmem| /"
                    echo "[  FAILED  ] $name (0 ms)"; rc=1
                fi
            done
            # The two-sided suite (14 programs, about 110 s under TCG) on the first device only:
            # it runs the protocol layer'"'"'s code, the same on every device, which the
            # Verbs/* suites above ran on each; what differs on iWARP (atomics by the CPU, the
            # flush by a read) is in the one-sided and OpenSHMEM runs above.
            if [ "$dev" = "${devices%%[[:space:]]*}" ]; then
                LOOM_NET_DEVICES=$dev top_srcdir="$9" "$9/test/mpi/run_mpi_suite.sh" --loom "$7" --stacks ompi-loom \
                    --np 2 --tls rc,self --timeout 600 "${10}" > mpi_suite.out 2>&1 || rc=1
                tap_to_gtest "MpiOnRc.${d}_" "  mpi| " mpi_suite.out
                rm -f mpi_suite.out
            fi
        done
    else
        step "MPI over rc: not run for this build (its sanitizer libraries cannot load into MPI processes; the regular build runs it)"
    fi
    # tcp between two simulated hosts under netem (loss, delay, reordering, duplication):
    # the machine'"'"'s own kernel has no sch_netem, this Debian kernel has. Both builds (issue
    # 17: every fault test in the regular and the ASan build).
    if [ -n "${13}" ]; then
        step "network faults under netem (test/faults/run_net_faults.sh --netem-only)"
        bash "${13}" --netem-only "${14}" > net_faults.out 2>&1 || rc=1
        tap_to_gtest "NetFaults." "  netem| " net_faults.out
        rm -f net_faults.out
    fi
    # The soak (random mixed traffic, peers killed and restarted) between two simulated
    # hosts under netem, for the same reason here, in both builds; 60 s, as on one host.
    if [ -n "${15}" ]; then
        step "the soak between two hosts under netem (test/faults/run_soak_netem.sh)"
        SOAK_SECONDS=60 bash "${15}" "${16}" > soak_netem.out 2>&1 || rc=1
        tap_to_gtest "SoakNetem." "  soak| " soak_netem.out
        rm -f soak_netem.out
    fi
    exit $rc'

label_of() {
    case $1 in
        */sanitize) echo "the AddressSanitizer+UBSan build" ;;
        *) echo "the regular build" ;;
    esac
}

# prepare BUILD: checks that BUILD can run the suite and writes BUILD/test/rdma/vm-suite.sh,
# the suite's command for that build (run in the VM or here: it writes the build's log, its
# exit status to vm-suite.rc and its wall time to vm-suite.time). Returns 1, with the
# build's result written, when the suite cannot run for it.
prepare() {
    local build=$1
    local outdir="$build/test/rdma"
    local gtest="$build/test/gtest/gtest-uct" gtest_ucp="$build/test/gtest/gtest-ucp"
    local module_dir="$build/src/uct/ib/.libs" info="$build/tools/info/loom_info"
    mkdir -p "$outdir"
    rm -f "$outdir/gtest-uct-rdma.log" "$outdir/gtest-uct-rdma.trs" "$outdir"/vm-suite.*
    # Into the build tree: the VM sees only its shared directories (the build trees) of the
    # host's writable paths, and a source tree under /tmp not at all (a fresh tmpfs there).
    cp "$top/test/rdma/siw_accept_window.bt" "$outdir/"
    if [ ! -f "$module_dir/libloom_uct_ib.so" ]; then
        not_tested "$outdir" "the ib module was not built (rdma-core headers missing at configure time? see $build/configure.out)"
        return 1
    fi
    [ -x "$gtest" ] || { failed "$outdir" "$gtest is missing (run make check first)"; return 1; }
    [ -x "$gtest_ucp" ] || { failed "$outdir" "$gtest_ucp is missing (run make check first)"; return 1; }
    [ -x "$build/tools/perftest/loom_perftest" ] ||
        { failed "$outdir" "$build/tools/perftest/loom_perftest is missing (run make first)"; return 1; }
    # What the VM needs from the source tree goes into the build tree: a checkout under /tmp is
    # invisible in the VM (its /tmp is a fresh tmpfs).
    local mpi_src=$outdir/mpi-src
    mkdir -p "$mpi_src/test/mpi" "$mpi_src/test/tools"
    cp -p "$top/test/tools/tap.sh" "$mpi_src/test/tools/"
    cp -p "$top/test/mpi/run_mpi_suite.sh" "$top/test/mpi/mpitest.h" "$top"/test/mpi/test_*.c "$mpi_src/test/mpi/"
    mkdir -p "$mpi_src/test/faults" "$mpi_src/test/mpi/netns" "$mpi_src/contrib/bench"
    cp -p "$top/test/faults/run_net_faults.sh" "$top/test/faults/xh_cases.sh" "$top/test/faults/run_soak_netem.sh" \
        "$mpi_src/test/faults/"
    cp -p "$top/contrib/bench/soak.py" "$mpi_src/contrib/bench/"
    cp -p "$top"/test/mpi/netns/*.sh "$mpi_src/test/mpi/netns/"
    local mpi_compat="" osu_bin="" shmem_prog="" oshm_barrier="" net_faults="" fault_peer="" soak_netem="" soak_peer=""
    if [ -x "$build/test/faults/fault_peer" ]; then
        net_faults=$mpi_src/test/faults/run_net_faults.sh
        fault_peer=$build/test/faults/fault_peer
    fi
    if [ -x "$build/test/faults/soak_peer" ]; then
        soak_netem=$mpi_src/test/faults/run_soak_netem.sh
        soak_peer=$build/test/faults/soak_peer
    fi
    if ! grep -q '^[^#]*fsanitize=address' "$build/Makefile" 2>/dev/null && [ -e "$build/bindings/ucx/.libs/libucp.so.0" ]; then
        mpi_compat=$build/bindings/ucx/.libs
        osu_bin=$("$top/test/mpi/build_osu.sh" "$build" openmpi 2>/dev/null | awk '{print $2}')
        oshcc -O1 -o "$outdir/test_shmem" "$top/test/shmem/test_shmem.c" 2>"$outdir/test_shmem.build.log" &&
            shmem_prog=$outdir/test_shmem
        oshm_barrier=$("$top/test/mpi/build_osu.sh" "$build" oshmem 2>/dev/null | awk '{print $2}')
        oshm_barrier=${oshm_barrier:+$oshm_barrier/osu_oshm_barrier}
    fi
    local sanitizer=""
    grep -q '^[^#]*fsanitize=address' "$build/Makefile" 2>/dev/null && sanitizer=1
    local suite_cmd=(env LOOM_MODULE_DIR="$module_dir" LOOMTEST_UCT_TLS=rc LOOMTEST_TIMEOUT=300 LOOM_RDMA_SANITIZER="$sanitizer"
                     bash -c "$suite_script" _ "$info" "$gtest" "$filter" "$gtest_ucp" "$outdir/siw_accept_window.bt"
                     "$build/tools/perftest/loom_perftest" "$mpi_compat" "$osu_bin" "$mpi_src" "$build/test/mpi"
                     "$shmem_prog" "$oshm_barrier" "$net_faults" "$fault_peer" "$soak_netem" "$soak_peer")
    # The suite runs in the build tree (it leaves its scratch files there); each build has
    # its own time limit, so that one build's hang cannot eat the other's time.
    {
        echo "# run_rdma_tests.sh: the verbs suite of $(label_of "$build"); written for each run"
        printf 'cd %q || exit 126\n' "$build"
        printf 't0=$(date +%%s)\n'
        printf 'timeout -k 30 %q' "$vm_timeout"
        printf ' %q' "${suite_cmd[@]}"
        printf ' > %q 2>&1\n' "$outdir/gtest-uct-rdma.log"
        printf 'rc=$?\n'
        # Out of time: say where it was killed, so that the tests missing from the count
        # (that test, the rest of its step and every later step) are named as not run.
        printf 'if [ $rc -eq 124 ]; then\n'
        printf '  log=%q\n' "$outdir/gtest-uct-rdma.log"
        printf '  step=$(tr -d "\\r" < "$log" | grep "^== " | tail -1)\n'
        printf '  test=$(tr -d "\\r" < "$log" | awk %q | tail -1)\n' \
            '/^\[ RUN      \] /{t=$4} /^\[       OK \] |^\[  FAILED  \] /{t=""} END{print t}'
        printf '  echo "RDMA: the suite exceeded %ss, killed in the step \\"${step#== }\\"${test:+ during $test}: that test, the rest of the step and every later step did not run" >> "$log"\n' "$vm_timeout"
        printf 'fi\n'
        printf 'echo $(($(date +%%s) - t0)) > %q\n' "$outdir/vm-suite.time"
        printf 'echo $rc > %q\n' "$outdir/vm-suite.rc"
        printf 'exit $rc\n'
    } > "$outdir/vm-suite.sh"
}

has_local_devices() {
    command -v ibv_devices >/dev/null && [ "$(ibv_devices 2>/dev/null | awk 'NR > 2 && NF' | wc -l)" -gt 0 ]
}

status=0
builds=()
for arg in "${@:-$top/build}"; do
    b=$(cd "$arg" 2>/dev/null && pwd) || { echo "run_rdma_tests.sh: no build directory $arg" >&2; exit 1; }
    builds+=("$b")
done

if ! has_local_devices && [ ! -x "$vm_dir/run" ]; then
    for b in "${builds[@]}"; do
        mkdir -p "$b/test/rdma"
        not_tested "$b/test/rdma" "no RDMA device here and no rdma-vm at $vm_dir (set LOOM_RDMA_VM to its directory)"
    done
    exit 0
fi

ready=()
for b in "${builds[@]}"; do
    prepare "$b" && ready+=("$b")
done
[ ${#ready[@]} -gt 0 ] || exit $status

labels=$(for b in "${ready[@]}"; do label_of "$b"; done | paste -sd ',' | sed 's/,/, then /g')
if has_local_devices; then
    say "verbs suite of $labels on this machine's RDMA devices ($(ibv_devices | awk 'NR > 2 {printf "%s ", $1}'))"
    for b in "${ready[@]}"; do bash "$b/test/rdma/vm-suite.sh"; done
else
    cache=${RDMA_VM_CACHE:-/var/tmp/rdma-vm}
    first_out=${ready[0]}/test/rdma
    if [ ! -e "$cache/current/initrd" ]; then
        say "setting up the rdma-vm once ($vm_dir/setup)"
        sudo=()
        [ "$(id -u)" -eq 0 ] || sudo=(sudo -n)
        if ! "${sudo[@]}" "$vm_dir/setup" > "$first_out/rdma-vm-setup.log" 2>&1; then
            for b in "${ready[@]}"; do failed "$b/test/rdma" "rdma-vm setup failed (see $first_out/rdma-vm-setup.log)"; done
            exit 1
        fi
    fi
    say "verbs suite of $labels in one rdma-vm boot ($vm_dir: rxe0/rxe1 RoCE v2, siw0/siw1 iWARP)"
    # The VM starts in the first build tree, which it shares writable; -s shares the others.
    shares=() scripts=()
    for b in "${ready[@]}"; do
        [ "$b" = "${ready[0]}" ] || shares+=(-s "$b")
        scripts+=("$b/test/rdma/vm-suite.sh")
    done
    vm_log=$first_out/rdma-vm.log
    # shellcheck disable=SC2016
    (cd "${ready[0]}" && "$vm_dir/run" -v -t $((${#ready[@]} * (vm_timeout + 60))) "${shares[@]}" -- \
        bash -c 'rc=0; for s; do bash "$s" || rc=1; done; exit $rc' _ "${scripts[@]}") > "$vm_log" 2>&1
    vm_rc=$?
    # run -v ends with "rdma-vm: accel=tcg kernel=... boot=41.93s total=1234.56s exit=0".
    boot=$(sed -n 's/.* boot=\([0-9]*\)[0-9.]*s total=.*/\1/p' "$vm_log")
    echo "rdma-vm: exit $vm_rc${boot:+, booted in $boot s} (its messages: $vm_log)"
    [ -z "${LOOM_QS_TIMING_LOG:-}" ] || [ -z "$boot" ] ||
        printf '%6d s                 rdma-vm boot (one for %d builds)\n' "$boot" ${#ready[@]} >> "$LOOM_QS_TIMING_LOG"
    if [ $vm_rc -eq 125 ]; then
        tail -40 "$vm_log" | sed 's/^/  vm| /'
    fi
fi

for b in "${ready[@]}"; do
    outdir=$b/test/rdma
    log=$outdir/gtest-uct-rdma.log
    if [ ! -s "$outdir/vm-suite.rc" ]; then
        [ -z "${vm_log:-}" ] || tail -40 "$vm_log" >> "$log"
        failed "$outdir" "the suite of $(label_of "$b") did not finish: the rdma-vm failed to boot, crashed or timed out (exit ${vm_rc:-?}; its console tail is in $log)"
        continue
    fi
    rc=$(cat "$outdir/vm-suite.rc")
    # The suite's processes share the log (stdout and stderr, several processes): a log line
    # may run into an "[ OK ]" marker, so markers are counted wherever they are in a line
    # (and CR LF line ends, which a console gives, are taken too).
    passed=$(tr -d '\r' < "$log" | grep -o '\[       OK \] [^ ]* (' | wc -l)
    failures=$(tr -d '\r' < "$log" | grep -c '^\[  FAILED  \].*ms)$')
    secs=$(cat "$outdir/vm-suite.time" 2>/dev/null || echo '?')
    echo "RDMA: verbs suite of $(label_of "$b"): $passed passed, $failures failed (exit $rc, $secs s; log $log)"
    [ -z "${LOOM_QS_TIMING_LOG:-}" ] ||
        printf '%6s s                 verbs suite of %s\n' "$secs" "$(label_of "$b")" >> "$LOOM_QS_TIMING_LOG"
    if [ "$rc" -eq 0 ] && [ "$passed" -gt 0 ]; then
        write_trs "$outdir/gtest-uct-rdma.trs" PASS
    else
        write_trs "$outdir/gtest-uct-rdma.trs" FAIL
        status=1
    fi
done
exit $status
