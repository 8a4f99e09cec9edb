#!/usr/bin/env python3
"""Protocol-level benchmark: Loom's C API against UCX's ucp, as ratios of medians.

Runs loom_perftest and ucx_perftest (Debian's UCX, only as the baseline) with the same
ucp test options between two processes on this host, alternating Loom and UCX for
every repeat, and which of them runs first, so drift on the machine hits both, and prints
one markdown table: the median of each side and a ratio that is below 1 when Loom is better:

    latency (tag_lat, ucp_am_lat, stream_lat, ucp_put_lat: one-way p50 and overall
             average; ucp_get: one get, usec):                             Loom / UCX
    bandwidth (tag_bw, ucp_am_bw, stream_bw, ucp_put_bw, ucp_get -O 8, MB/s) and message
             rate (msg/s):                                                 UCX / Loom

Transports are chosen as the applications do: LOOM_TLS for Loom, UCX_TLS for UCX
(shm: LOOM_TLS=shm against UCX_TLS=shm, UCX's alias for posix, sysv and cma;
tcp: LOOM_TLS=tcp against UCX_TLS=tcp, both restricted to the lo device; with
--transports: tcp-all, tcp at its defaults on every device; default, no transport
variable at all).

    contrib/bench/compare_ucp.py [--repeats 5] [--quick] [--loom build/install/bin/loom_perftest]
                                 [--only SUBSTRING] [--baseline-loom OTHER/loom_perftest]

--baseline-loom puts another Loom build in UCX's place (same LOOM_TLS settings on both
sides): a before/after comparison of a change, e.g. the build of the commit before it
(git worktree add ../before REV, build it, pass its bin/loom_perftest).
"""
import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_uct import parse_perftest_row  # noqa: E402  (the shared perftest-row parser)

# Per transport: (Loom environment, UCX environment)
TRANSPORTS = {
    "shm": ({"LOOM_TLS": "shm"}, {"UCX_TLS": "shm"}),
    "tcp": ({"LOOM_TLS": "tcp", "LOOM_NET_DEVICES": "lo"}, {"UCX_TLS": "tcp", "UCX_NET_DEVICES": "lo"}),
    # Both at their defaults, every device (UCX stripes rendezvous over them, Loom where
    # the devices qualify as rails: docs/protocols.md, "Multi-rail"). Only with --transports.
    "tcp-all": ({"LOOM_TLS": "tcp"}, {"UCX_TLS": "tcp"}),
    # Both as an application gets them: no transport variable at all (every transport
    # loaded; between processes of one host both pick shm). Only with --transports.
    "default": ({}, {}),
}

KIB, MIB = 1024, 1024 * 1024

# (name, kind, client arguments, iterations, warm-up); kind: "lat" (tag_lat), "bw", "mr"
CASES = [
    ("tag_lat 8 B", "lat", "-t tag_lat -s 8", 100000, 5000),
    ("tag_lat 8 KiB", "lat", f"-t tag_lat -s {8 * KIB}", 50000, 2000),
    ("tag_lat 16 KiB", "lat", f"-t tag_lat -s {16 * KIB}", 30000, 1000),
    ("tag_lat 32 KiB", "lat", f"-t tag_lat -s {32 * KIB}", 20000, 1000),
    ("tag_lat 64 KiB", "lat", f"-t tag_lat -s {64 * KIB}", 10000, 500),
    ("tag_bw 1 MiB", "bw", f"-t tag_bw -s {MIB}", 1000, 50),
    ("tag_bw 4 MiB", "bw", f"-t tag_bw -s {4 * MIB}", 250, 20),
    ("tag_bw 8 B -O 64 (message rate)", "mr", "-t tag_bw -s 8 -O 64", 1000000, 10000),
    # Active messages (no header: ucx_perftest's -H 0) and streams: the same names in both tools.
    ("ucp_am_lat 8 B", "lat", "-t ucp_am_lat -s 8", 100000, 5000),
    ("ucp_am_lat 64 KiB", "lat", f"-t ucp_am_lat -s {64 * KIB}", 10000, 500),
    ("ucp_am_bw 1 MiB", "bw", f"-t ucp_am_bw -s {MIB}", 1000, 50),
    ("ucp_am_bw 8 B -O 64 (message rate)", "mr", "-t ucp_am_bw -s 8 -O 64", 1000000, 10000),
    ("stream_lat 8 B", "lat", "-t stream_lat -s 8", 100000, 5000),
    ("stream_lat 64 KiB", "lat", f"-t stream_lat -s {64 * KIB}", 10000, 500),
    ("stream_bw 1 MiB", "bw", f"-t stream_bw -s {MIB}", 1000, 50),
    ("stream_bw 8 B -O 64 (message rate)", "mr", "-t stream_bw -s 8 -O 64", 1000000, 10000),
    # RMA and atomics (ucx_perftest's defaults: put_bw keeps 32 in flight, get and add 1)
    ("ucp_put_lat 8 B", "lat", "-t ucp_put_lat -s 8", 100000, 5000),
    ("ucp_put_lat 64 KiB", "lat", f"-t ucp_put_lat -s {64 * KIB}", 10000, 500),
    ("ucp_get 8 B", "lat", "-t ucp_get -s 8", 10000, 500),
    ("ucp_put_bw 1 MiB", "bw", f"-t ucp_put_bw -s {MIB}", 1000, 50),
    ("ucp_get 1 MiB -O 8", "bw", f"-t ucp_get -s {MIB} -O 8", 500, 20),
    ("ucp_put_bw 8 B (message rate)", "mr", "-t ucp_put_bw -s 8", 1000000, 10000),
    ("ucp_add 8 B (message rate)", "mr", "-t ucp_add -s 8", 1000000, 10000),
]


def run_pair(binary, env_extra, args, iters, warmup, timeout=300):
    """One server + client measurement; returns the client's parsed Final: row or None."""
    port = random.randint(20000, 32000)
    env = dict(os.environ)
    for k in ("LOOM_TLS", "LOOM_NET_DEVICES", "UCX_TLS", "UCX_NET_DEVICES"):
        env.pop(k, None)
    env.update(env_extra)
    server = subprocess.Popen([binary, "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=env)
    time.sleep(0.3)
    cmd = [binary, "127.0.0.1", "-p", str(port), "-n", str(iters), "-w", str(warmup), "-f"] + args.split()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        out = r.stdout
        if r.returncode != 0:
            print(f"# failed ({r.returncode}): {' '.join(cmd)}: {r.stderr.strip()[-300:]}", file=sys.stderr)
    except subprocess.TimeoutExpired:
        out = ""
        print(f"# timed out: {' '.join(cmd)}", file=sys.stderr)
    finally:
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return parse_perftest_row(out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="a fifth of the iterations (a smoke run)")
    p.add_argument("--loom", default="build/install/bin/loom_perftest")
    p.add_argument("--ucx", default=shutil.which("ucx_perftest") or "ucx_perftest")
    p.add_argument("--only", default="", help="run only cases whose 'transport name' contains this")
    p.add_argument("--transports", default="shm,tcp",
                   help="comma-separated: shm, tcp (both on lo), tcp-all (both at their defaults, every device)")
    p.add_argument("--baseline-loom", default="",
                   help="another Loom build's loom_perftest as the baseline instead of UCX (before/after)")
    a = p.parse_args()
    if not os.path.exists(a.loom):
        sys.exit(f"compare_ucp: {a.loom} not found (make install, or give --loom)")
    if a.baseline_loom:
        if not os.path.exists(a.baseline_loom):
            sys.exit(f"compare_ucp: {a.baseline_loom} not found")
        a.ucx = a.baseline_loom
        base_name = f"baseline ({a.baseline_loom})"
    else:
        if not shutil.which(a.ucx):
            sys.exit("compare_ucp: ucx_perftest not found (apt-get install ucx-utils)")
        base_name = "UCX 1.13"
    scale = 5 if a.quick else 1
    rows = []
    chosen = a.transports.split(",")
    if any(t not in TRANSPORTS for t in chosen):
        sys.exit(f"compare_ucp: --transports takes {', '.join(TRANSPORTS)}")
    for tl in chosen:
        loom_env, ucx_env = TRANSPORTS[tl]
        for name, kind, args, iters, warmup in CASES:
            full = f"{tl} {name}"
            if a.only and a.only not in full:
                continue
            n = max(iters // scale, 10)
            w = max(warmup // scale, 1)
            lv, uv = [], []
            base_env = loom_env if a.baseline_loom else ucx_env
            for rep in range(a.repeats):
                # Which side runs first alternates too (ABBA): shm ucp_put_lat 8 B is bimodal
                # (0.04-0.07 or 0.23-0.25 us) and takes the slow mode more often in the first
                # run of a pair, whichever build that is (docs/performance.md).
                sides = [(a.loom, loom_env, lv), (a.ucx, base_env, uv)]
                for exe, env, into in (sides if rep % 2 == 0 else sides[::-1]):
                    r = run_pair(exe, env, args, n, w)
                    if r:
                        into.append(r)
            rows.append((full, kind, n, lv, uv))
            show = "lat" if kind == "lat" else kind
            print(f"# {full}: loom {[x[show] for x in lv]} baseline {[x[show] for x in uv]}", file=sys.stderr)

    def med(vals, key):
        return statistics.median(v[key] for v in vals) if vals else None

    def fmt(v):
        return "failed" if v is None else (f"{v:.3f}" if v < 100 else f"{v:.0f}")

    def ratio(num, den):
        return "n/a" if not num or not den else f"{num / den:.2f}x"

    print(f"Command: contrib/bench/compare_ucp.py --repeats {a.repeats}{' --quick' if a.quick else ''}"
          f"{' --only ' + repr(a.only) if a.only else ''}"
          f"{' --transports ' + a.transports if a.transports != 'shm,tcp' else ''}"
          f"{' --baseline-loom ' + a.baseline_loom if a.baseline_loom else ''}")
    print(f"Machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end; medians of "
          f"{a.repeats} runs, Loom ({a.loom}) and {base_name} alternating; ratio < 1 means Loom is better\n")
    short = "baseline" if a.baseline_loom else "UCX"
    print(f"| case | iters | unit | Loom | {'baseline' if a.baseline_loom else 'UCX 1.13'} | ratio | Loom avg "
          f"| {short} avg | avg ratio |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for full, kind, n, lv, uv in rows:
        if kind == "lat":
            lm, um, la, ua = med(lv, "lat"), med(uv, "lat"), med(lv, "avg"), med(uv, "avg")
            print(f"| {full} | {n} | us one-way, p50 / avg | {fmt(lm)} | {fmt(um)} | {ratio(lm, um)} "
                  f"| {fmt(la)} | {fmt(ua)} | {ratio(la, ua)} |")
        else:
            key, unit = ("bw", "MB/s") if kind == "bw" else ("mr", "msg/s")
            lm, um = med(lv, key), med(uv, key)
            print(f"| {full} | {n} | {unit} | {fmt(lm)} | {fmt(um)} | {ratio(um, lm)} | | | |")


if __name__ == "__main__":
    main()
