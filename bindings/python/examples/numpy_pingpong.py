#!/usr/bin/python3
"""Ping-pong of numpy arrays between two processes, in blocking style with explicit
progress (no asyncio): every operation returns a loom.Request, and the caller turns
worker.progress() until it is done, as an MPI program would spin in MPI_Wait.

    # two processes by hand
    /usr/bin/python3 numpy_pingpong.py --server --port 13338
    /usr/bin/python3 numpy_pingpong.py --client 127.0.0.1 --port 13338
    # or one command that starts the server itself
    /usr/bin/python3 numpy_pingpong.py --sizes 8,4096,1048576 --iters 1000

The client sends the schedule (sizes, iterations, warm-up) first; then, for each size, both sides
exchange the same array back and forth. The client prints the one-way latency (half a
round trip) and the bandwidth per size, and checks that the last array it got back is
the one it sent. LOOM_TLS chooses the transport (shm, tcp, ...), as for any Loom program.
"""

import argparse
import os
import subprocess
import sys
import time

import numpy as np

import loom

SCHEDULE, PING, PONG = 1, 2, 3  # tags
MAX_SIZES = 64


def spin(worker, *requests):
    """Progresses ``worker`` until every request is done; returns their results."""
    while not all(r.done() for r in requests):
        worker.progress()
    return [r.result for r in requests]


def serve(opts):
    """Accepts one client, runs its schedule, exits."""
    with loom.Context(features={"tag"}) as ctx, ctx.worker() as worker:
        accepted = []
        listener = worker.listen(lambda conn: accepted.append(conn.accept()), host=opts.host, port=opts.port)
        host, port = listener.address
        print(f"numpy_pingpong: server listening on {host}:{port}", flush=True)
        while not accepted:  # the client's connection request comes through progress
            worker.progress()
        ep = accepted[0]
        schedule = np.zeros(3 + MAX_SIZES, dtype=np.int64)
        spin(worker, worker.recv(schedule, SCHEDULE))
        iters, warmup, count = (int(v) for v in schedule[:3])
        rounds = 0
        for size in schedule[3:3 + count]:
            buf = np.empty(int(size), dtype=np.uint8)
            for _ in range(warmup + iters):
                spin(worker, worker.recv(buf, PING))
                spin(worker, ep.send(buf, PONG))
                rounds += 1
        spin(worker, ep.close())
        print(f"numpy_pingpong: server answered {rounds} pings of {count} sizes", flush=True)
    return 0


def client(opts):
    """Connects, sends the schedule, ping-pongs every size, prints the figures."""
    sizes = [int(s) for s in opts.sizes.split(",")]
    assert 0 < len(sizes) <= MAX_SIZES
    with loom.Context(features={"tag"}) as ctx, ctx.worker() as worker:
        ep = worker.connect_to(opts.client, opts.port)
        schedule = np.zeros(3 + MAX_SIZES, dtype=np.int64)
        schedule[:3 + len(sizes)] = [opts.iters, opts.warmup, len(sizes), *sizes]
        spin(worker, ep.send(schedule, SCHEDULE))
        ok = True
        print(f"numpy_pingpong: {opts.iters} round trips per size, LOOM_TLS={os.environ.get('LOOM_TLS', 'all')}")
        print(f"{'size (B)':>10} {'latency (us)':>13} {'bandwidth (MB/s)':>17}")
        for size in sizes:
            data = (np.arange(size) % 251).astype(np.uint8)
            back = np.zeros(size, dtype=np.uint8)
            for i in range(opts.warmup + opts.iters):
                if i == opts.warmup:
                    start = time.perf_counter()
                # The receive first: the answer may come before the send call returns.
                recv = worker.recv(back, PONG)
                spin(worker, ep.send(data, PING), recv)
            elapsed = time.perf_counter() - start
            one_way = elapsed / opts.iters / 2
            mbps = size / one_way / 1e6 if size else 0.0
            print(f"{size:>10} {one_way * 1e6:>13.2f} {mbps:>17.1f}", flush=True)
            if not np.array_equal(back, data):
                print(f"numpy_pingpong: the {size}-byte array came back different", flush=True)
                ok = False
        spin(worker, ep.close())
    print("numpy_pingpong: all arrays verified" if ok else "numpy_pingpong: FAILED", flush=True)
    return 0 if ok else 1


def both(opts):
    """Starts the server as a child process (port 0: any free one), then runs the client."""
    argv = [sys.executable, os.path.abspath(__file__), "--server", "--host", "127.0.0.1", "--port", "0"]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    line = server.stdout.readline()  # "... listening on HOST:PORT"
    if "listening on" not in line:
        server.kill()
        print(f"numpy_pingpong: the server did not start: {line!r}", file=sys.stderr)
        return 1
    opts.client = "127.0.0.1"
    opts.port = int(line.rsplit(":", 1)[1])
    status = client(opts)
    print(server.stdout.read(), end="", flush=True)
    return status or server.wait(timeout=60)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    role = parser.add_mutually_exclusive_group()
    role.add_argument("--server", action="store_true", help="wait for one client")
    role.add_argument("--client", metavar="HOST", help="connect to the server at HOST")
    parser.add_argument("--host", default="0.0.0.0", help="the server's listening address")
    parser.add_argument("--port", type=int, default=13338, help="the server's port (0: any, printed)")
    parser.add_argument("--sizes", default="8,4096,65536,1048576", help="comma-separated message sizes")
    parser.add_argument("--iters", type=int, default=1000, help="timed round trips per size")
    parser.add_argument("--warmup", type=int, default=10, help="untimed round trips first")
    opts = parser.parse_args()
    if opts.server:
        return serve(opts)
    if opts.client:
        return client(opts)
    return both(opts)


if __name__ == "__main__":
    sys.exit(main())
