#!/usr/bin/python3
"""Ping-pong from Python between two processes: Loom's Python bindings (docs/python.md)
against mpi4py over Open MPI's ob1 and against plain sockets.

Contenders (--only, comma-separated; `loom` = the four loom ones, `loom-blocking` =
loom-spin, loom-wait and loom-sendwait):
    loom-spin     req = ep.send(buf, tag) / req = worker.recv(buf, tag), then
                  `while not req.done(): worker.progress()`
    loom-wait     the same operations, then `req.wait()`
    loom-sendwait `ep.send_wait(buf, tag)` / `worker.recv_wait(buf, tag)` (start and wait in
                  one call; left out, loudly, when the bindings lack them)
    loom-asyncio  `await ep.send(buf, tag)` / `await worker.recv(buf, tag)` in asyncio.run
    mpi4py        comm.Send / comm.Recv of numpy buffers, Debian's python3-mpi4py over Open
                  MPI 4.1 with `--mca pml ob1`: btl self,vader (shm), btl self,tcp on lo (tcp)
    sockets       TCP over 127.0.0.1, sendall / recv_into, TCP_NODELAY (tcp only)
Transports (--tls): shm (LOOM_TLS=shm against btl vader) and tcp (LOOM_TLS=tcp
LOOM_NET_DEVICES=lo against btl tcp on lo and sockets).

Every contender exchanges the same numpy uint8 buffers in the same loop: rank 0 sends
then receives, rank 1 receives then sends back (blocking style for loom and mpi4py). A
run is one fresh process pair: warm-up then --iters round trips of 8 B, warm-up then
--iters-large round trips of 1 MiB. Rank 0 takes a perf_counter_ns stamp at every
iteration; the run's figure is the median round trip (8 B: half of it, the one-way
latency; 1 MiB: 2 * size / round trip, MB/s = 10^6 B/s). Each rank also times its own
loop (in the --json output). The runs alternate between the contenders (a b c d a b c d
...) for --repeats rounds, so drift on a loaded machine hits all of them alike; the
report gives the median over the runs of the per-run medians, with min and max, and the
ratios against the targets:
    loom blocking / mpi4py 8 B latency   <= 0.8
    loom asyncio / loom blocking latency <= 2
    loom blocking / mpi4py 1 MiB bw      >= 1.2
"loom blocking" is the fastest of loom-spin, loom-wait and loom-sendwait for that
transport and metric (the table says which). Ratios are ratios of the medians; the median
of the per-round ratios (each round's contenders ran next to each other in time) is
printed beside them. The payload is checked (rank 0 gets its own bytes back) after the
first and after the last round trip of each size.

Loom's package is found through PYTHONPATH (default: <repo>/build/install/lib/python3/
dist-packages). Ranks always run under /usr/bin/python3 (Debian's Python, with numpy and
mpi4py). A missing mpirun or mpi4py drops that contender loudly. Ranks are bound to one
core each (mpirun --bind-to core --map-by core; sched_setaffinity for the others) unless
--bind none.

    contrib/bench/py_pingpong.py [--repeats 9] [--iters 10000] [--iters-large 300]
        [--warmup N] [--warmup-large N] [--quick] [--only loom,mpi4py,sockets]
        [--tls shm,tcp] [--json FILE] [--bind core|none] [--timeout 180]
        [--loom-features tag,wakeup] [-v]
    contrib/bench/py_pingpong.py --micro [--tls shm,tcp]
        per-call costs instead (two workers in one process: worker.progress(), req.done(),
        ep.send of an eager message, ...; mpi4py's COMM_SELF equivalents), one table.
"""
import argparse
import json
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"
DEFAULT_LOOM_PATH = os.path.join(TOP, "build", "install", "lib", "python3", "dist-packages")

SMALL, LARGE = 8, 1024 * 1024
TAG = 0x1234
DONE_TAG = 0x4321
CONTENDERS = ("loom-spin", "loom-wait", "loom-sendwait", "loom-asyncio", "mpi4py", "sockets")
LOOM_KINDS = ("loom-spin", "loom-wait", "loom-sendwait", "loom-asyncio")
BLOCKING = ("loom-spin", "loom-wait", "loom-sendwait")
ALIASES = {"loom": LOOM_KINDS, "loom-blocking": BLOCKING,
           "asyncio": ("loom-asyncio",), "mpi": ("mpi4py",), "socket": ("sockets",)}
TRANSPORTS = ("shm", "tcp")
LOOM_ENV = {"shm": {"LOOM_TLS": "shm"}, "tcp": {"LOOM_TLS": "tcp", "LOOM_NET_DEVICES": "lo"}}
OB1_BTL = {"shm": ["--mca", "btl", "self,vader"],
           "tcp": ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"]}
LABELS = {
    "loom-spin": "loom spin (`while not req.done(): worker.progress()`)",
    "loom-wait": "loom wait (`req.wait()`)",
    "loom-sendwait": "loom send_wait/recv_wait (`ep.send_wait` / `worker.recv_wait`)",
    "loom-asyncio": "loom asyncio (`await ep.send` / `await worker.recv`)",
    "mpi4py": {"shm": "mpi4py ob1 btl vader (`comm.Send`/`comm.Recv`)",
               "tcp": "mpi4py ob1 btl tcp (`comm.Send`/`comm.Recv`)"},
    "sockets": "sockets (TCP lo, `sendall`/`recv_into`, TCP_NODELAY)",
}
TARGETS = {"lat_blocking_mpi": 0.8, "lat_asyncio_blocking": 2.0, "bw_blocking_mpi": 1.2}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def label(kind, tls):
    lab = LABELS[kind]
    return lab[tls] if isinstance(lab, dict) else lab


# ================================================================================================
# The ranks (run as `py_pingpong.py --rank-of KIND RANK PARAMS_JSON`)
# ================================================================================================

def bind_self(rank, how):
    if how != "core":
        return
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > 1:
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})


def stats_ns(ts):
    """Round-trip figures (ns) from the iteration stamps ts[0..n]."""
    rtt = [b - a for a, b in zip(ts, ts[1:])]
    rtt.sort()
    n = len(rtt)
    return {"n": n, "median": statistics.median(rtt), "mean": (ts[-1] - ts[0]) / n,
            "min": rtt[0], "p10": rtt[n // 10], "p90": rtt[(9 * n) // 10], "max": rtt[-1]}


def oob_exchange(addr_text):
    """Prints this rank's address for the driver, returns the peer's (a line on stdin)."""
    sys.stdout.write(f"ADDR {addr_text}\n")
    sys.stdout.flush()
    line = sys.stdin.readline()
    if not line.startswith("PEER "):
        raise SystemExit(f"rank: bad line from the driver: {line!r}")
    return line[5:].strip()


def make_buffers(np, size, rank):
    sbuf = np.empty(size, dtype=np.uint8)
    sbuf[:] = (np.arange(size) * 7 + 3 + rank) & 0xFF
    rbuf = np.zeros(size, dtype=np.uint8)
    return sbuf, rbuf


def check_payload(np, rbuf, size):
    """Rank 0 receives back what it sent (its own pattern)."""
    want = (np.arange(size) * 7 + 3) & 0xFF
    if not np.array_equal(rbuf, want.astype(np.uint8)):
        raise SystemExit(f"rank 0: payload of {size} B came back wrong")


# --- loom ---------------------------------------------------------------------------------------

def loom_rank(kind, rank, p):
    import numpy as np
    try:
        import loom
    except ImportError as e:
        raise SystemExit(f"rank {rank}: import loom failed: {e} (PYTHONPATH="
                         f"{os.environ.get('PYTHONPATH')})")
    features = set(p["loom_features"]) if p["loom_features"] else None
    ctx = loom.Context(features=features)
    worker = ctx.worker()
    peer = oob_exchange(worker.address.hex())
    errors = []
    ep = worker.connect(bytes.fromhex(peer), err_handler=lambda ep, st: errors.append(st))
    out = {"kind": kind, "rank": rank, "loom_version": loom.__version__, "sizes": {}}
    if hasattr(loom, "get_async_spin_us"):
        out["async_spin_us"] = loom.get_async_spin_us()
    t_setup = time.perf_counter_ns()

    if kind == "loom-asyncio":
        import asyncio
        asyncio.run(loom_async_body(np, worker, ep, rank, p, out))
    else:
        loom_blocking_body(np, kind, worker, ep, rank, p, out)
    out["setup_to_end_s"] = (time.perf_counter_ns() - t_setup) / 1e9
    if errors:
        out["ep_errors"] = errors
    print("RESULT " + json.dumps(out), flush=True)
    # Teardown is part of the test of the bindings: a hang here shows as a timeout.
    ep.close().wait(timeout=10)
    worker.close()
    ctx.close()


def loom_blocking_body(np, kind, worker, ep, rank, p, out):
    send, recv, progress = ep.send, worker.recv, worker.progress
    spin = kind == "loom-spin"
    if kind == "loom-sendwait":
        send_wait, recv_wait = ep.send_wait, worker.recv_wait
    for size, iters, warm in ((SMALL, p["iters"], p["warmup"]),
                              (LARGE, p["iters_large"], p["warmup_large"])):
        sbuf, rbuf = make_buffers(np, size, rank)
        n = iters + warm
        ts = [0] * (iters + 1)
        t0 = time.perf_counter_ns()
        if rank == 0:
            if kind == "loom-sendwait":
                for i in range(n):
                    if i >= warm:
                        ts[i - warm] = time.perf_counter_ns()
                    send_wait(sbuf, TAG)
                    recv_wait(rbuf, TAG)
                    if i == 0:
                        check_payload(np, rbuf, size)
            elif spin:
                for i in range(n):
                    if i >= warm:
                        ts[i - warm] = time.perf_counter_ns()
                    r = send(sbuf, TAG)
                    while not r.done():
                        progress()
                    r = recv(rbuf, TAG)
                    while not r.done():
                        progress()
                    if i == 0:
                        r.result  # raises the error, if any
                        check_payload(np, rbuf, size)
            else:
                for i in range(n):
                    if i >= warm:
                        ts[i - warm] = time.perf_counter_ns()
                    send(sbuf, TAG).wait()
                    recv(rbuf, TAG).wait()
                    if i == 0:
                        check_payload(np, rbuf, size)
            ts[iters] = time.perf_counter_ns()
            check_payload(np, rbuf, size)
            r = send(sbuf, TAG)  # one more status check: the last send's result
            r.wait()
            recv(rbuf, TAG).wait()
            out["sizes"][str(size)] = stats_ns(ts)
        else:
            # rank 1 echoes what it receives (one buffer), one more time than rank 0 pings
            buf = rbuf
            if kind == "loom-sendwait":
                for i in range(n + 1):
                    recv_wait(buf, TAG)
                    send_wait(buf, TAG)
            elif spin:
                for i in range(n + 1):
                    r = recv(buf, TAG)
                    while not r.done():
                        progress()
                    r = send(buf, TAG)
                    while not r.done():
                        progress()
                r.result
            else:
                for i in range(n + 1):
                    recv(buf, TAG).wait()
                    send(buf, TAG).wait()
        out["sizes"].setdefault(str(size), {})["loop_s"] = (time.perf_counter_ns() - t0) / 1e9
    # The end: rank 0 says done, rank 1 answers, so neither leaves with a message in flight.
    flag = np.zeros(1, dtype=np.uint8)
    if rank == 0:
        send(flag, DONE_TAG).wait()
        recv(flag, DONE_TAG).wait()
    else:
        recv(flag, DONE_TAG).wait()
        send(flag, DONE_TAG).wait()
        ep.flush().wait(timeout=10)


async def loom_async_body(np, worker, ep, rank, p, out):
    send, recv = ep.send, worker.recv
    for size, iters, warm in ((SMALL, p["iters"], p["warmup"]),
                              (LARGE, p["iters_large"], p["warmup_large"])):
        sbuf, rbuf = make_buffers(np, size, rank)
        n = iters + warm
        ts = [0] * (iters + 1)
        t0 = time.perf_counter_ns()
        if rank == 0:
            for i in range(n):
                if i >= warm:
                    ts[i - warm] = time.perf_counter_ns()
                await send(sbuf, TAG)
                await recv(rbuf, TAG)
                if i == 0:
                    check_payload(np, rbuf, size)
            ts[iters] = time.perf_counter_ns()
            check_payload(np, rbuf, size)
            await send(sbuf, TAG)
            await recv(rbuf, TAG)
            out["sizes"][str(size)] = stats_ns(ts)
        else:
            buf = rbuf
            for i in range(n + 1):
                await recv(buf, TAG)
                await send(buf, TAG)
        out["sizes"].setdefault(str(size), {})["loop_s"] = (time.perf_counter_ns() - t0) / 1e9
    flag = np.zeros(1, dtype=np.uint8)
    if rank == 0:
        await send(flag, DONE_TAG)
        await recv(flag, DONE_TAG)
    else:
        await recv(flag, DONE_TAG)
        await send(flag, DONE_TAG)
        await ep.flush()
    worker.detach()


# --- mpi4py -------------------------------------------------------------------------------------

def mpi_rank(p):
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    out = {"kind": "mpi4py", "rank": rank, "sizes": {},
           "mpi_library": MPI.Get_library_version().splitlines()[0].strip()}
    send, recv = comm.Send, comm.Recv
    peer = 1 - rank
    for size, iters, warm in ((SMALL, p["iters"], p["warmup"]),
                              (LARGE, p["iters_large"], p["warmup_large"])):
        sbuf, rbuf = make_buffers(np, size, rank)
        n = iters + warm
        ts = [0] * (iters + 1)
        comm.Barrier()
        t0 = time.perf_counter_ns()
        if rank == 0:
            for i in range(n):
                if i >= warm:
                    ts[i - warm] = time.perf_counter_ns()
                send(sbuf, peer, TAG)
                recv(rbuf, peer, TAG)
                if i == 0:
                    check_payload(np, rbuf, size)
            ts[iters] = time.perf_counter_ns()
            check_payload(np, rbuf, size)
            out["sizes"][str(size)] = stats_ns(ts)
        else:
            buf = rbuf
            for i in range(n):
                recv(buf, peer, TAG)
                send(buf, peer, TAG)
        out["sizes"].setdefault(str(size), {})["loop_s"] = (time.perf_counter_ns() - t0) / 1e9
    comm.Barrier()
    print("RESULT " + json.dumps(out), flush=True)


# --- sockets ------------------------------------------------------------------------------------

def sockets_rank(rank, p):
    import socket
    import numpy as np
    if rank == 0:
        lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(1)
        oob_exchange(str(lsock.getsockname()[1]))
        sock, _ = lsock.accept()
        lsock.close()
    else:
        port = int(oob_exchange("-"))
        sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = {"kind": "sockets", "rank": rank, "sizes": {}}
    sendall, recv_into = sock.sendall, sock.recv_into

    def recv_exact(mv, size):
        got = recv_into(mv, size)
        while got < size:
            k = recv_into(mv[got:], size - got)
            if k == 0:
                raise SystemExit(f"rank {rank}: peer closed")
            got += k

    for size, iters, warm in ((SMALL, p["iters"], p["warmup"]),
                              (LARGE, p["iters_large"], p["warmup_large"])):
        sbuf, rbuf = make_buffers(np, size, rank)
        rmv = memoryview(rbuf)
        n = iters + warm
        ts = [0] * (iters + 1)
        t0 = time.perf_counter_ns()
        if rank == 0:
            for i in range(n):
                if i >= warm:
                    ts[i - warm] = time.perf_counter_ns()
                sendall(sbuf)
                recv_exact(rmv, size)
                if i == 0:
                    check_payload(np, rbuf, size)
            ts[iters] = time.perf_counter_ns()
            check_payload(np, rbuf, size)
            out["sizes"][str(size)] = stats_ns(ts)
        else:
            for i in range(n):
                recv_exact(rmv, size)
                sendall(rbuf)
        out["sizes"].setdefault(str(size), {})["loop_s"] = (time.perf_counter_ns() - t0) / 1e9
    # end: one byte each way
    if rank == 0:
        sendall(b"x")
        sock.recv(1)
    else:
        sock.recv(1)
        sendall(b"x")
    print("RESULT " + json.dumps(out), flush=True)
    sock.close()


def arm_traceback(seconds):
    """A rank that hangs prints where (to stderr, which the driver shows) before it is killed."""
    import faulthandler
    if seconds and seconds > 0:
        faulthandler.dump_traceback_later(seconds, exit=True)


def rank_main(kind, rank, params):
    p = json.loads(params)
    arm_traceback(p.get("hang_s"))
    if kind == "mpi4py":
        mpi_rank(p)  # mpirun binds
        return
    rank = int(rank)
    bind_self(rank, p["bind"])
    if kind == "sockets":
        sockets_rank(rank, p)
    else:
        loom_rank(kind, rank, p)


# ================================================================================================
# --micro: per-call costs of the bindings in one process (two workers), against mpi4py
# ================================================================================================

def _per_call_ns(fn, n, repeat=5):
    """Best of `repeat` timings of n calls of fn(); ns per call."""
    best = None
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn(n)
        dt = (time.perf_counter_ns() - t0) / n
        best = dt if best is None or dt < best else best
    return best


def micro_loom(feats):
    import numpy as np
    import loom
    ctx = loom.Context(features=feats)
    w0, w1 = ctx.worker(), ctx.worker()
    ep = w0.connect(w1.address)
    sbuf, rbuf = np.zeros(8, np.uint8), np.zeros(8, np.uint8)
    p0, p1, send, recv = w0.progress, w1.progress, ep.send, w1.recv
    N, B = 20000, 200

    def settle(reqs):
        while not all(r.done() for r in reqs):
            p0()
            p1()
        for r in reqs:
            r.result

    settle([send(sbuf, TAG), recv(rbuf, TAG)])
    out = {}
    done_req = send(sbuf, TAG)
    settle([done_req, recv(rbuf, TAG)])

    def loop_progress(n):
        for _ in range(n):
            p0()
    out["worker.progress() (nothing to do)"] = _per_call_ns(loop_progress, N)

    def loop_done(n):
        d = done_req.done
        for _ in range(n):
            d()
    out["req.done() (completed request)"] = _per_call_ns(loop_done, N)

    def loop_status(n):
        for _ in range(n):
            done_req.status
    out["req.status (completed)"] = _per_call_ns(loop_status, N)

    def loop_result(n):
        for _ in range(n):
            done_req.result
    out["req.result (completed send)"] = _per_call_ns(loop_result, N)

    def loop_wait_done(n):
        w = done_req.wait
        for _ in range(n):
            w()
    out["req.wait() (completed)"] = _per_call_ns(loop_wait_done, N)

    # ep.send of 8 B that completes at once, in batches (the receives are posted untimed)
    immediate = [0, 0]

    def batch_send(n):
        t = 0
        for _ in range(n // B):
            t0 = time.perf_counter_ns()
            reqs = [send(sbuf, TAG) for _ in range(B)]
            t += time.perf_counter_ns() - t0
            immediate[0] += sum(r.done() for r in reqs)
            immediate[1] += B
            settle(reqs + [recv(rbuf, TAG) for _ in range(B)])
        return t
    # timed inside: report the time of the send calls only
    def send_cost():
        best = None
        for _ in range(5):
            t = batch_send(N) / N
            best = t if best is None or t < best else best
        return best
    out["ep.send(8 B numpy) (eager, completes in the call; list append incl.)"] = send_cost()
    out["  ... fraction of those sends done() on return"] = immediate[0] / max(1, immediate[1])
    nbuf = sbuf
    sbuf = b"01234567"
    out["ep.send(8 B bytes) (same; list append incl.)"] = send_cost()
    sbuf = nbuf

    def loop_closed(n):
        for _ in range(n):
            w0.closed
    out["(baseline) worker.closed (a trivial pybind11 property)"] = _per_call_ns(loop_closed, N)

    # worker.recv of a message that already arrived (unexpected)
    def recv_cost():
        best = None
        for _ in range(5):
            t = 0
            for _ in range(N // B):
                reqs = [send(sbuf, TAG) for _ in range(B)]
                settle(reqs)
                for _ in range(50):
                    p1()
                t0 = time.perf_counter_ns()
                rr = [recv(rbuf, TAG) for _ in range(B)]
                t += time.perf_counter_ns() - t0
                settle(rr)
            t /= N
            best = t if best is None or t < best else best
        return best
    out["worker.recv(8 B numpy) (message already arrived; list append incl.)"] = recv_cost()

    if hasattr(ep, "send_wait") and hasattr(w1, "recv_wait"):
        send_wait, recv_wait = ep.send_wait, w1.recv_wait

        def sw_cost():
            best = None
            for _ in range(5):
                t = 0
                for _ in range(N // B):
                    t0 = time.perf_counter_ns()
                    for _ in range(B):
                        send_wait(sbuf, TAG)
                    t += time.perf_counter_ns() - t0
                    settle([recv(rbuf, TAG) for _ in range(B)])
                best = t / N if best is None or t / N < best else best
            return best
        out["ep.send_wait(8 B numpy) (eager)"] = sw_cost()

        def rw_cost():
            best = None
            for _ in range(5):
                t = 0
                for _ in range(N // B):
                    settle([send(sbuf, TAG) for _ in range(B)])
                    for _ in range(50):
                        p1()
                    t0 = time.perf_counter_ns()
                    for _ in range(B):
                        recv_wait(rbuf, TAG)
                    t += time.perf_counter_ns() - t0
                best = t / N if best is None or t / N < best else best
            return best
        out["worker.recv_wait(8 B numpy) (message already arrived)"] = rw_cost()

    def loop_pair(n):
        for _ in range(n):
            send(sbuf, TAG)
            r = recv(rbuf, TAG)
            while not r.done():
                p1()
    out["in-process pair: ep.send + w1.recv + progress until done"] = _per_call_ns(loop_pair, N)

    def loop_mv(n):
        for _ in range(n):
            memoryview(sbuf)
    out["(baseline) memoryview(numpy array)"] = _per_call_ns(loop_mv, N)

    def loop_list(n):
        for _ in range(n):
            [].append(1)
    out["(baseline) [].append(1)"] = _per_call_ns(loop_list, N)
    w0.close()
    w1.close()
    ctx.close()
    return out


def micro_asyncio(feats):
    """The cost of one await that suspends (the receive), in one process: w0 sends to w1 and
    w1 awaits the receive."""
    import asyncio
    import numpy as np
    import loom
    ctx = loom.Context(features=feats)
    w0, w1 = ctx.worker(), ctx.worker()
    ep = w0.connect(w1.address)
    sbuf, rbuf = np.zeros(8, np.uint8), np.zeros(8, np.uint8)
    out = {}

    async def body():
        # w0 only sends, and its sends complete in the call: without attach() nothing would
        # progress it (over tcp its connection never completes: see the report)
        w0.attach()
        await ep.send(sbuf, TAG)
        await w1.recv(rbuf, TAG)
        N = 5000
        best = None
        done = ep.send(sbuf, TAG)
        await w1.recv(rbuf, TAG)
        for _ in range(5):
            t0 = time.perf_counter_ns()
            for _ in range(N):
                await done
            dt = (time.perf_counter_ns() - t0) / N
            best = dt if best is None or dt < best else best
        out["await req (already completed)"] = best
        best = None
        for _ in range(5):
            t0 = time.perf_counter_ns()
            for _ in range(N):
                r = w1.recv(rbuf, TAG)  # posted first: it must suspend
                await ep.send(sbuf, TAG)
                await r
            dt = (time.perf_counter_ns() - t0) / N
            best = dt if best is None or dt < best else best
        out["in-process: post w1.recv, await ep.send, await the recv (suspends)"] = best
        w0.detach()
        w1.detach()

    asyncio.run(body())
    w0.close()
    w1.close()
    ctx.close()
    return out


def micro_mpi():
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_SELF
    sbuf, rbuf = np.zeros(8, np.uint8), np.zeros(8, np.uint8)
    N = 20000
    out = {}
    r = comm.Isend(sbuf, 0, TAG)
    comm.Recv(rbuf, 0, TAG)
    r.Wait()

    def loop_test(n):
        t = r.Test
        for _ in range(n):
            t()
    out["(mpi4py) Request.Test() (completed)"] = _per_call_ns(loop_test, N)

    def loop_iprobe(n):
        ip = comm.Iprobe
        for _ in range(n):
            ip(0, TAG)
    out["(mpi4py) comm.Iprobe (nothing there; drives progress)"] = _per_call_ns(loop_iprobe, N)

    def loop_pair(n):
        isend, recv = comm.Isend, comm.Recv
        for _ in range(n):
            q = isend(sbuf, 0, TAG)
            recv(rbuf, 0, TAG)
            q.Wait()
    out["(mpi4py) COMM_SELF pair: Isend + Recv + Wait"] = _per_call_ns(loop_pair, N)

    def isend_cost():
        B = 200
        best = None
        isend, recv = comm.Isend, comm.Recv
        for _ in range(5):
            t = 0
            for _ in range(N // B):
                t0 = time.perf_counter_ns()
                reqs = [isend(sbuf, 0, TAG) for _ in range(B)]
                t += time.perf_counter_ns() - t0
                for _ in range(B):
                    recv(rbuf, 0, TAG)
                MPI.Request.Waitall(reqs)
            best = t / N if best is None or t / N < best else best
        return best
    out["(mpi4py) comm.Isend(8 B numpy) to self (list append incl.)"] = isend_cost()

    def irecv_cost():
        B = 200
        best = None
        send, irecv = comm.Send, comm.Irecv
        for _ in range(5):
            t = 0
            for _ in range(N // B):
                for _ in range(B):
                    send(sbuf, 0, TAG)
                t0 = time.perf_counter_ns()
                reqs = [irecv(rbuf, 0, TAG) for _ in range(B)]
                t += time.perf_counter_ns() - t0
                MPI.Request.Waitall(reqs)
            best = t / N if best is None or t / N < best else best
        return best
    out["(mpi4py) comm.Irecv(8 B numpy), message already arrived (list append incl.)"] = irecv_cost()

    def loop_send_recv(n):
        send, recv = comm.Send, comm.Recv
        for _ in range(n):
            send(sbuf, 0, TAG)
            recv(rbuf, 0, TAG)
    out["(mpi4py) COMM_SELF pair: Send + Recv"] = _per_call_ns(loop_send_recv, N)
    return out


def micro_main(which, feats, hang_s="0"):
    feats = json.loads(feats)
    arm_traceback(float(hang_s))
    if which == "loom":
        out = micro_loom(feats)
        out.update(micro_asyncio(feats))
    else:
        out = micro_mpi()
    print("RESULT " + json.dumps({"rank": 0, "micro": out}), flush=True)


def run_micro(a, env, feats):
    """--micro: prints the per-call table (each part in its own /usr/bin/python3)."""
    rows = []
    for t in a.tls_list:
        e = dict(env)
        e.update(LOOM_ENV[t])
        r = subprocess.run([PYTHON, os.path.abspath(__file__), "--micro-of", "loom", json.dumps(feats),
                            str(max(1.0, a.timeout - 10))],
                           env=e, capture_output=True, text=True, timeout=a.timeout)
        res = parse_results(r.stdout)
        if r.returncode != 0 or 0 not in res:
            loud(f"--micro loom ({t}) failed: exit {r.returncode}\n{tail(r.stderr or r.stdout)}")
            continue
        rows += [(f"loom {t}", k, v) for k, v in res[0]["micro"].items()]
    if shutil.which(a.mpirun):
        r = subprocess.run([a.mpirun, "--allow-run-as-root", "-np", "1", "--mca", "pml", "ob1",
                            "--mca", "btl", "self,vader", PYTHON, os.path.abspath(__file__),
                            "--micro-of", "mpi", "null",
                            str(max(1.0, a.timeout - 10))], env=env, capture_output=True, text=True,
                           timeout=a.timeout)
        res = parse_results(r.stdout)
        if r.returncode != 0 or 0 not in res:
            loud(f"--micro mpi4py failed: exit {r.returncode}\n{tail(r.stderr or r.stdout)}")
        else:
            rows += [("mpi4py ob1", k, v) for k, v in res[0]["micro"].items()]
    print(f"### Per-call costs (ns per call, best of 5; load average {os.getloadavg()[0]:.2f})\n")
    print("| stack | call | ns |")
    print("| --- | --- | ---: |")
    for stack, k, v in rows:
        print(f"| {stack} | {k} | {v:.0f} |" if v >= 1 else f"| {stack} | {k} | {v:.2f} |")
    return 0


# ================================================================================================
# The driver
# ================================================================================================

def session_pids(sid):
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid:
                pids.append(int(d))
        except (OSError, IndexError, ValueError):
            pass
    return pids


def kill_session(proc):
    """Ends a process we started (it leads its own session) and what it started."""
    for sig, grace in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 2.0)):
        for pid in session_pids(proc.pid) or [proc.pid]:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        if proc.poll() is not None and not session_pids(proc.pid):
            return


def parse_results(text):
    """The ranks' `RESULT {json}` records (mpirun may glue the two ranks' lines together)."""
    res = {}
    dec = json.JSONDecoder()
    for chunk in text.split("RESULT ")[1:]:
        try:
            r, _ = dec.raw_decode(chunk)
            res[int(r["rank"])] = r
        except (ValueError, KeyError, TypeError):
            pass
    return res


def tail(text, n=12):
    return "\n".join(text.strip().splitlines()[-n:])


def run_pair(a, kind, tls, params, env):
    """Two rank processes, their addresses relayed through the pipes. Returns (results by
    rank, error text or None)."""
    deadline = time.monotonic() + a.timeout
    procs = []
    for rank in (0, 1):
        cmd = [PYTHON, os.path.abspath(__file__), "--rank-of", kind, str(rank), params]
        procs.append(subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, start_new_session=True))
    err = None
    try:
        addrs = [None, None]
        for rank, pr in enumerate(procs):
            while addrs[rank] is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no address")
                ready, _, _ = select.select([pr.stdout], [], [], left)
                if ready:
                    line = pr.stdout.readline()
                    if not line:
                        raise RuntimeError(f"rank {rank} exited before giving its address")
                    if line.startswith("ADDR "):
                        addrs[rank] = line[5:].strip()
        for rank, pr in enumerate(procs):
            pr.stdin.write(f"PEER {addrs[1 - rank]}\n")
            pr.stdin.flush()
        outs = []
        for rank, pr in enumerate(procs):
            o, e = pr.communicate(timeout=max(0.1, deadline - time.monotonic()))
            outs.append((o, e))
            if pr.returncode != 0:
                err = f"rank {rank} exit {pr.returncode}:\n{tail(e or o)}"
        res = {}
        for o, _ in outs:
            res.update(parse_results(o))
        if err is None and 0 not in res:
            err = "rank 0 printed no result:\n" + tail(outs[0][1] or outs[0][0])
        return res, err
    except (TimeoutError, subprocess.TimeoutExpired):
        err = f"timed out after {a.timeout} s"
    except (RuntimeError, OSError) as e:
        err = str(e)
    for pr in procs:
        if pr.poll() is None:
            kill_session(pr)
    details = []
    for rank, pr in enumerate(procs):
        try:
            o, e = pr.communicate(timeout=5)
        except (subprocess.TimeoutExpired, ValueError):
            o, e = "", ""
        details.append(f"rank {rank}: {tail(e or o, 8)}")
    res = {}
    return res, err + "\n" + "\n".join(details)


def run_mpi(a, tls, params, env):
    bind = ["--bind-to", "core", "--map-by", "core"] if a.bind == "core" else ["--bind-to", "none"]
    cmd = ([a.mpirun, "--oversubscribe", "--allow-run-as-root", "-np", "2"] + bind +
           ["--mca", "pml", "ob1"] + OB1_BTL[tls] +
           [PYTHON, os.path.abspath(__file__), "--rank-of", "mpi4py", "-", params])
    if a.verbose:
        log("#   " + " ".join(cmd))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        o, e = proc.communicate(timeout=a.timeout)
    except subprocess.TimeoutExpired:
        kill_session(proc)
        o, e = proc.communicate()
        return parse_results(o), f"timed out after {a.timeout} s: {' '.join(cmd)}\n{tail(e)}"
    res = parse_results(o)
    if proc.returncode != 0 or 0 not in res:
        return res, f"exit {proc.returncode}: {' '.join(cmd)}\n{tail(e or o)}"
    return res, None


def base_env(a):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UCX_", "LOOM_"))}
    env["PYTHONPATH"] = a.loom_path
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def check_python_module(mod, env):
    r = subprocess.run([PYTHON, "-c", f"import {mod}; print(getattr({mod}, '__version__', '?'), "
                        f"getattr({mod}, '__file__', '?'))"],
                       env=env, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        return None, tail(r.stderr, 3)
    return r.stdout.strip(), None


def loud(msg):
    bar = "!" * 78
    log(f"{bar}\n!! {msg}\n{bar}")


def median_or_none(xs):
    return statistics.median(xs) if xs else None


def fmt(x, digits=2):
    return "n/a" if x is None else f"{x:.{digits}f}"


def summarize(runs, contenders, tlss):
    """{tls: {kind: {"lat_us": [...], "bw_mbs": [...], "round": [...]}}} from the runs."""
    s = {t: {k: {"lat_us": [], "bw_mbs": [], "lat_by_round": {}, "bw_by_round": {}, "failed": 0}
             for k in contenders[t]} for t in tlss}
    for r in runs:
        d = s[r["tls"]][r["kind"]]
        if r["error"]:
            d["failed"] += 1
            continue
        r0 = r["results"]["0"]["sizes"]
        lat = r0[str(SMALL)]["median"] / 2 / 1e3
        bw = 2 * LARGE / (r0[str(LARGE)]["median"] / 1e9) / 1e6
        d["lat_us"].append(lat)
        d["bw_mbs"].append(bw)
        d["lat_by_round"][r["round"]] = lat
        d["bw_by_round"][r["round"]] = bw
    return s


def paired_ratio(num, den):
    """Median over the rounds where both ran of num/den."""
    both = sorted(set(num) & set(den))
    return median_or_none([num[i] / den[i] for i in both])


def best_blocking(d, metric):
    """The loom blocking variant with the better median for metric: (kind, data) or None."""
    cands = [k for k in BLOCKING if k in d and d[k][metric]]
    if not cands:
        return None
    if metric == "lat_us":
        return min(cands, key=lambda k: statistics.median(d[k][metric]))
    return max(cands, key=lambda k: statistics.median(d[k][metric]))


def report(a, s, contenders, tlss, meta):
    lines = []
    lines.append(f"### Python ping-pong: {meta['repeats']} runs per contender (alternating), "
                 f"{meta['iters']} x 8 B and {meta['iters_large']} x 1 MiB round trips per run")
    lines.append("")
    if meta.get("async_spin_us") is not None:
        lines.append(f"loom's asyncio spin budget (loom.get_async_spin_us()): {meta['async_spin_us']:g} us.")
        lines.append("")
    lines.append(f"Load average before/after: {meta['load_before']} / {meta['load_after']} "
                 f"({os.cpu_count()} CPUs); bind: {a.bind}. Figures: median over runs of each "
                 "run's median round trip [min-max of the runs]; latency = RTT/2, "
                 "bandwidth = 2 x 1 MiB / RTT (MB/s = 10^6 B/s).")
    lines.append("")
    ratios_out = {}
    for t in tlss:
        d = s[t]
        env = " ".join(f"{k}={v}" for k, v in LOOM_ENV[t].items())
        lines.append(f"#### {t} (loom: {env})")
        lines.append("")
        lines.append("| contender | 8 B latency (us) | 1 MiB bandwidth (MB/s) | runs ok/failed |")
        lines.append("| --- | ---: | ---: | ---: |")
        for k in contenders[t]:
            x = d[k]
            if x["lat_us"]:
                lat = f"{statistics.median(x['lat_us']):.2f} [{min(x['lat_us']):.2f}-{max(x['lat_us']):.2f}]"
                bw = f"{statistics.median(x['bw_mbs']):.0f} [{min(x['bw_mbs']):.0f}-{max(x['bw_mbs']):.0f}]"
            else:
                lat = bw = "n/a"
            lines.append(f"| {label(k, t)} | {lat} | {bw} | {len(x['lat_us'])}/{x['failed']} |")
        lines.append("")
        # ratios
        rows = []
        rt = {}
        blat = best_blocking(d, "lat_us")
        bbw = best_blocking(d, "bw_mbs")
        mpi = d.get("mpi4py")
        have_mpi = mpi is not None and mpi["lat_us"]

        def ratio_row(key, name, num, den, metric, target, sense):
            r = statistics.median(num[metric]) / statistics.median(den[metric])
            pr = paired_ratio(num[metric.replace("_us", "").replace("_mbs", "") + "_by_round"],
                              den[metric.replace("_us", "").replace("_mbs", "") + "_by_round"])
            if target is None:
                verdict, tgt = "", "-"
            else:
                ok = r <= target if sense == "le" else r >= target
                verdict = "met" if ok else "NOT met"
                tgt = f"{'<=' if sense == 'le' else '>='} {target}"
            rows.append(f"| {name} | {r:.2f} | {fmt(pr)} | {tgt} | {verdict} |")
            rt[key] = {"ratio": r, "paired": pr, "target": target, "sense": sense,
                       "met": None if target is None else verdict == "met"}

        if blat and have_mpi:
            ratio_row("lat_blocking_mpi", f"latency: loom blocking = {blat} / mpi4py", d[blat],
                      mpi, "lat_us", TARGETS["lat_blocking_mpi"], "le")
        if blat and "loom-asyncio" in d and d["loom-asyncio"]["lat_us"]:
            ratio_row("lat_asyncio_blocking", f"latency: loom-asyncio / loom blocking = {blat}",
                      d["loom-asyncio"], d[blat], "lat_us", TARGETS["lat_asyncio_blocking"], "le")
        if bbw and have_mpi:
            ratio_row("bw_blocking_mpi", f"1 MiB bandwidth: loom blocking = {bbw} / mpi4py",
                      d[bbw], mpi, "bw_mbs", TARGETS["bw_blocking_mpi"], "ge")
        if "loom-asyncio" in d and d["loom-asyncio"]["bw_mbs"] and have_mpi:
            ratio_row("bw_asyncio_mpi", "1 MiB bandwidth: loom-asyncio / mpi4py",
                      d["loom-asyncio"], mpi, "bw_mbs", None, "ge")
        sk = d.get("sockets")
        if sk is not None and sk["lat_us"]:
            if blat:
                ratio_row("lat_blocking_sockets", f"latency: loom blocking = {blat} / sockets",
                          d[blat], sk, "lat_us", None, "le")
            if bbw:
                ratio_row("bw_blocking_sockets", f"1 MiB bandwidth: loom blocking = {bbw} / sockets",
                          d[bbw], sk, "bw_mbs", None, "ge")
            if have_mpi:
                ratio_row("lat_mpi_sockets", "latency: mpi4py / sockets", mpi, sk, "lat_us", None, "le")
        if rows:
            lines.append("| ratio | of medians | median of per-round ratios | target | |")
            lines.append("| --- | ---: | ---: | ---: | --- |")
            lines += rows
            lines.append("")
        ratios_out[t] = rt
    return "\n".join(lines), ratios_out


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--rank-of":
        rank_main(*sys.argv[2:5])
        return 0
    if len(sys.argv) >= 2 and sys.argv[1] == "--micro-of":
        micro_main(*sys.argv[2:5])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--repeats", type=int, default=9, help="runs per contender (default 9)")
    ap.add_argument("--iters", type=int, default=10000, help="8 B round trips per run (10000)")
    ap.add_argument("--iters-large", type=int, default=300, help="1 MiB round trips per run (300)")
    ap.add_argument("--warmup", type=int, default=None, help="8 B warm-up (default iters/10, >= 100)")
    ap.add_argument("--warmup-large", type=int, default=None, help="1 MiB warm-up (default 20)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: 2 repeats, 500 x 8 B, 20 x 1 MiB")
    ap.add_argument("--only", default="loom,mpi4py,sockets",
                    help="contenders: " + ",".join(CONTENDERS) + " (aliases: " +
                    ", ".join(f"{k}={'+'.join(v)}" for k, v in ALIASES.items()) + ")")
    ap.add_argument("--tls", default="shm,tcp", help="transports: shm,tcp")
    ap.add_argument("--json", metavar="FILE", help="write every run and the summary here")
    ap.add_argument("--bind", choices=("core", "none"), default="core")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per run (180)")
    ap.add_argument("--loom-features", default="tag,wakeup",
                    help="loom.Context features for every loom contender (tag,wakeup; "
                    "'all' for the default)")
    ap.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    ap.add_argument("--micro", action="store_true",
                    help="instead of the ping-pong: per-call costs of the bindings (two workers "
                    "in one process, per --tls) and of mpi4py (COMM_SELF)")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.repeats, a.iters, a.iters_large = 2, 500, 20
        a.warmup = 50 if a.warmup is None else a.warmup
        a.warmup_large = 5 if a.warmup_large is None else a.warmup_large
    if a.warmup is None:
        a.warmup = max(100, a.iters // 10)
    if a.warmup_large is None:
        a.warmup_large = 20
    a.loom_path = os.environ.get("PYTHONPATH") or DEFAULT_LOOM_PATH

    wanted = []
    for item in filter(None, (x.strip() for x in a.only.split(","))):
        kinds = ALIASES.get(item, (item,))
        for k in kinds:
            if k not in CONTENDERS:
                ap.error(f"--only: unknown contender {item!r} (choose from "
                         f"{', '.join(CONTENDERS + tuple(ALIASES))})")
            if k not in wanted:
                wanted.append(k)
    wanted.sort(key=CONTENDERS.index)  # the table's order, whatever --only's
    tlss = [x.strip() for x in a.tls.split(",") if x.strip()]
    for t in tlss:
        if t not in TRANSPORTS:
            ap.error(f"--tls: unknown transport {t!r} (shm, tcp)")
    if not os.access(PYTHON, os.X_OK):
        sys.exit(f"py_pingpong: {PYTHON} not found (the ranks run under Debian's Python)")

    env = base_env(a)
    meta = {"repeats": a.repeats, "iters": a.iters, "iters_large": a.iters_large,
            "warmup": a.warmup, "warmup_large": a.warmup_large, "bind": a.bind,
            "loom_features": a.loom_features, "pythonpath": a.loom_path}
    missing = []
    if any(k in LOOM_KINDS for k in wanted):
        ver, err = check_python_module("loom", env)
        if ver is None:
            sys.exit(f"py_pingpong: `import loom` failed under {PYTHON} with PYTHONPATH="
                     f"{a.loom_path}:\n{err}\nBuild the bindings (or set PYTHONPATH to the "
                     "directory holding the loom package), or leave loom out with --only.")
        meta["loom"] = ver
        probe = subprocess.run(
            [PYTHON, "-c", "import loom; print(int(hasattr(loom.Endpoint, 'send_wait') and "
             "hasattr(loom.Worker, 'recv_wait')), getattr(loom, 'get_async_spin_us', lambda: None)())"],
            env=env, capture_output=True, text=True, timeout=60).stdout.split()
        if probe and probe[1] != "None":
            meta["async_spin_us"] = float(probe[1])
        if "loom-sendwait" in wanted and (not probe or probe[0] != "1"):
            loud("these bindings have no Endpoint.send_wait / Worker.recv_wait: loom-sendwait is "
                 "LEFT OUT")
            wanted.remove("loom-sendwait")
            missing.append("loom-sendwait: the bindings lack send_wait/recv_wait")
        log(f"# loom {ver}")
    if "mpi4py" in wanted:
        ver, err = check_python_module("mpi4py", env)
        if not shutil.which(a.mpirun):
            loud(f"mpirun ({a.mpirun}) not found: the mpi4py contender is LEFT OUT")
            wanted.remove("mpi4py")
            missing.append("mpi4py: no mpirun")
        elif ver is None:
            loud(f"mpi4py does not import under {PYTHON} ({err}): the mpi4py contender is "
                 "LEFT OUT (apt-get install python3-mpi4py)")
            wanted.remove("mpi4py")
            missing.append("mpi4py: does not import")
        else:
            meta["mpi4py"] = ver
    if not wanted:
        sys.exit("py_pingpong: nothing to run")
    contenders = {t: [k for k in wanted if not (k == "sockets" and t != "tcp")] for t in tlss}
    feats = None if a.loom_features == "all" else [f for f in a.loom_features.split(",") if f]
    if a.micro:
        a.tls_list = tlss
        return run_micro(a, env, feats)
    params = json.dumps({"iters": a.iters, "iters_large": a.iters_large, "warmup": a.warmup,
                         "warmup_large": a.warmup_large, "bind": a.bind, "loom_features": feats,
                         "hang_s": max(1.0, a.timeout - 10)},
                        separators=(",", ":"))
    meta["load_before"] = " ".join(f"{x:.2f}" for x in os.getloadavg())

    runs = []
    t_start = time.monotonic()
    for rnd in range(a.repeats):
        for t in tlss:
            for k in contenders[t]:
                e = dict(env)
                if k in LOOM_KINDS:
                    e.update(LOOM_ENV[t])
                t0 = time.monotonic()
                if k == "mpi4py":
                    res, err = run_mpi(a, t, params, e)
                else:
                    res, err = run_pair(a, k, t, params, e)
                wall = time.monotonic() - t0
                rec = {"round": rnd, "tls": t, "kind": k, "wall_s": wall, "error": err,
                       "results": {str(r): v for r, v in res.items()}}
                runs.append(rec)
                if err:
                    loud(f"round {rnd} {t} {k} FAILED: {err}")
                else:
                    r0 = res[0]["sizes"]
                    log(f"# round {rnd + 1}/{a.repeats} {t:3} {k:12} 8 B {r0[str(SMALL)]['median'] / 2e3:8.2f} us"
                        f"  1 MiB {2 * LARGE / r0[str(LARGE)]['median'] * 1e3:8.0f} MB/s  ({wall:.1f} s)")
    meta["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    meta["elapsed_s"] = time.monotonic() - t_start
    s = summarize(runs, contenders, tlss)
    text, ratios = report(a, s, contenders, tlss, meta)
    if missing:
        text += "\n" + "\n".join(f"**LEFT OUT: {m}**" for m in missing) + "\n"
    print(text)
    if a.json:
        summary = {t: {k: {"lat_us_median": median_or_none(v["lat_us"]),
                           "bw_mbs_median": median_or_none(v["bw_mbs"]),
                           "lat_us": v["lat_us"], "bw_mbs": v["bw_mbs"], "failed": v["failed"]}
                       for k, v in s[t].items()} for t in tlss}
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "summary": summary, "ratios": ratios, "runs": runs,
                       "missing": missing}, f, indent=1)
        log(f"# wrote {a.json}")
    failed = sum(1 for r in runs if r["error"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
