#!/usr/bin/env python3
"""Transport-level benchmark: Loom against UCX in the same run, as ratios of medians.

Runs loom_perftest and ucx_perftest (Debian's UCX, only as the baseline) with the same
options, alternating the two for every repeat so drift on the machine hits both, and
prints one markdown table: the median of each side, and Loom/UCX. A plain two-socket
loopback transfer is measured as well, as the ceiling for TCP bandwidth.

    contrib/bench/compare_uct.py [--repeats 5] [--quick] [--loom build/install/bin/loom_perftest]

Every figure in docs/performance.md comes from this script; the command line is printed
with the table.
"""
import argparse
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time

# (name, metric, loom (tl, dev, args), ucx (tl, dev, args), goal text)
# metric: "lat" = 50th percentile one-way latency (usec, lower is better),
#         "bw" = overall bandwidth (MB/s, higher is better)
CASES = [
    ("shm 8 B AM latency", "lat", ("shm", "memory", "-t am_lat -D short -s 8"),
     ("posix", "memory", "-t am_lat -D short -s 8"), "<= 0.90x"),
    ("tcp 8 B AM latency", "lat", ("tcp", "lo", "-t am_lat -D short -s 8"),
     ("tcp", "lo", "-t am_lat -D short -s 8"), "<= 0.90x"),
    ("shm 1 MiB put zcopy bandwidth", "bw", ("shm", "memory", "-t put_bw -D zcopy -s 1048576"),
     ("cma", "memory", "-t put_bw -D zcopy -s 1048576"), ">= 1.10x"),
    ("shm 1 MiB get zcopy bandwidth", "bw", ("shm", "memory", "-t get -D zcopy -s 1048576"),
     ("cma", "memory", "-t get -D zcopy -s 1048576"), ">= 1.10x"),
    ("tcp 8 KiB AM bcopy bandwidth", "bw", ("tcp", "lo", "-t am_bw -D bcopy -s 8192"),
     ("tcp", "lo", "-t am_bw -D bcopy -s 8192"), ">= 1.00x"),
    ("tcp 1 MiB AM zcopy bandwidth", "bw", ("tcp", "lo", "-t am_bw -D zcopy -s 1048576"),
     ("tcp", "lo", "-t am_bw -D zcopy -s 1048576"), "(UCX cannot; vs socket below)"),
]

ITERS = {"lat": (100000, 10000), "bw": (2000, 100)}
QUICK_ITERS = {"lat": (20000, 1000), "bw": (300, 20)}


def run_pair(binary, tl, dev, args, iters, warmup, env_extra=None):
    """Runs one server+client measurement; returns the client's Final: fields or None."""
    port = random.randint(20000, 32000)
    env = dict(os.environ)
    env.update(env_extra or {})
    common = ["-x", tl, "-d", dev, "-n", str(iters), "-w", str(warmup), "-f", "-p", str(port)] + args.split()
    server = subprocess.Popen([binary, "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=env)
    time.sleep(0.3)
    try:
        out = subprocess.run([binary, "127.0.0.1"] + common, capture_output=True, text=True,
                             timeout=300, env=env).stdout
    except subprocess.TimeoutExpired:
        out = ""
    finally:
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    return parse_perftest_row(out)


def parse_perftest_row(out):
    """The last row of 8 numbers that loom_perftest and ucx_perftest -f print
    ("Final: iters p50 avg overall bw-avg bw-overall mr-avg mr-overall", ucx_perftest
    without "Final:"): {"lat": p50, "avg": overall latency, "bw": overall bandwidth,
    "mr": overall message rate}, or None. (compare_ucp.py uses it too.)"""
    for line in reversed(out.splitlines()):
        f = line.replace("Final:", "").split()
        if len(f) == 8:
            try:
                v = [float(x) for x in f]
            except ValueError:
                continue
            return {"lat": v[1], "avg": v[3], "bw": v[5], "mr": v[7]}
    return None


def socket_bandwidth(size=1 << 20, total=2 << 30):
    """Plain two-socket loopback transfer of `total` bytes in `size` writes: MB/s (2^20)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    received = [0]

    def sink():
        conn, _ = listener.accept()
        buf = bytearray(size)
        view = memoryview(buf)
        while received[0] < total:
            n = conn.recv_into(view)
            if n == 0:
                break
            received[0] += n
        conn.close()

    t = threading.Thread(target=sink)
    t.start()
    client = socket.create_connection(("127.0.0.1", port))
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    data = b"x" * size
    start = time.perf_counter()
    sent = 0
    while sent < total:
        client.sendall(data)
        sent += size
    client.close()
    t.join()
    elapsed = time.perf_counter() - start
    listener.close()
    return total / elapsed / (1 << 20)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="fewer iterations (for a smoke run)")
    p.add_argument("--loom", default="build/install/bin/loom_perftest")
    p.add_argument("--ucx", default=shutil.which("ucx_perftest") or "ucx_perftest")
    p.add_argument("--only", default="", help="run only cases whose name contains this")
    a = p.parse_args()
    if not os.path.exists(a.loom):
        sys.exit(f"compare_uct: {a.loom} not found (run ./quickstart.sh first)")
    if not shutil.which(a.ucx):
        sys.exit("compare_uct: ucx_perftest not found (apt-get install ucx-utils)")
    iters = QUICK_ITERS if a.quick else ITERS
    rows = []
    for name, metric, loom, ucx, goal in CASES:
        if a.only and a.only not in name:
            continue
        n, w = iters[metric]
        lv, uv = [], []
        for _ in range(a.repeats):
            r = run_pair(a.loom, *loom, n, w)
            if r:
                lv.append(r[metric])
            r = run_pair(a.ucx, *ucx, n, w)
            if r:
                uv.append(r[metric])
        lm = statistics.median(lv) if lv else None
        um = statistics.median(uv) if uv else None
        ratio = lm / um if lm and um else None
        rows.append((name, metric, lm, um, ratio, goal, len(lv), len(uv)))
        print(f"# {name}: loom {lv} ucx {uv}", file=sys.stderr)
    sock = [socket_bandwidth() for _ in range(a.repeats)] if not a.only or "tcp" in a.only else []
    unit = {"lat": "us (p50, one-way)", "bw": "MB/s"}
    print(f"Command: contrib/bench/compare_uct.py --repeats {a.repeats}{' --quick' if a.quick else ''}")
    print(f"Machine: {os.cpu_count()} CPUs; medians of {a.repeats} runs, Loom and UCX alternating\n")
    print("| case | unit | Loom | UCX 1.13 | Loom/UCX | goal |")
    print("| --- | --- | ---: | ---: | ---: | --- |")
    fmt = lambda v: "failed" if v is None else (f"{v:.3f}" if v < 100 else f"{v:.0f}")
    for name, metric, lm, um, ratio, goal, nl, nu in rows:
        r = "n/a" if ratio is None else f"{ratio:.2f}x"
        print(f"| {name} | {unit[metric]} | {fmt(lm)} | {fmt(um)} | {r} | {goal} |")
    if sock:
        s = statistics.median(sock)
        print(f"\nPlain two-socket loopback transfer, 1 MiB writes: {s:.0f} MB/s (median of {len(sock)})")
        for name, metric, lm, um, ratio, goal, nl, nu in rows:
            if name.startswith("tcp 1 MiB") and lm:
                print(f"Loom tcp 1 MiB bandwidth / plain socket: {lm / s:.2f}x (goal: >= 0.90x)")


if __name__ == "__main__":
    main()
