#!/usr/bin/env python3
"""Verbs benchmark: Loom's rc transport against raw verbs (perftest) and UCX, in one run.

Runs inside the rdma-vm (Soft-RoCE rxe0 and soft-iWARP siw0), or on a machine with RDMA
devices, one process pair per measurement on one device (loopback through the device):

    ../shared/rdma-vm/run -t 1800 -- contrib/bench/compare_rc.py [--repeats 3] [--quick]

For every case it alternates Loom (loom_perftest -x rc), the raw-verbs ceiling
(ib_write_lat, ib_send_lat, ib_write_bw, ib_read_bw from perftest) and UCX 1.13's
uct-level rc_verbs (ucx_perftest -x rc_verbs, where it runs: not on iWARP, which UCX
does not support), so drift hits all of them, and prints one markdown table of medians
with Loom/verbs and Loom/UCX. Latency is one-way, half the round trip: perftest's
t_typical, the perftests' 50th percentile. Bandwidth is MB/s of 2^20 bytes in all three.
Every rc figure in docs/performance.md comes from this script; the command line is
printed with the table.
"""
import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from compare_uct import parse_perftest_row  # noqa: E402  (one parser for both scripts)

# (name, metric, loom args, perftest tool + args, ucx args or None)
CASES = [
    ("8 B put latency", "lat", "-t put_lat -D short -s 8", ("ib_write_lat", "-s 8"), "-t put_lat -D short -s 8"),
    ("8 B AM latency", "lat", "-t am_lat -D short -s 8", ("ib_send_lat", "-s 8"), "-t am_lat -D short -s 8"),
    ("1 MiB put bandwidth", "bw", "-t put_bw -D zcopy -s 1048576", ("ib_write_bw", "-s 1048576"),
     "-t put_bw -D zcopy -s 1048576"),
    ("1 MiB get bandwidth", "bw", "-t get_bw -D zcopy -s 1048576", ("ib_read_bw", "-s 1048576"),
     "-t get_bw -D zcopy -s 1048576"),
]
ITERS = {"lat": (2000, 200), "bw": (200, 20)}
QUICK_ITERS = {"lat": (500, 50), "bw": (50, 5)}


def device_ip(dev):
    """The IPv4 address of a verbs device's network interface (iWARP connects by IP)."""
    try:
        netdev = os.listdir(f"/sys/class/infiniband/{dev}/device/net")[0]
    except OSError:
        netdev = None
    if netdev is None:
        out = subprocess.run(["rdma", "link", "show", f"{dev}/1"], capture_output=True, text=True).stdout
        m = re.search(r"netdev (\S+)", out)
        netdev = m.group(1) if m else None
    if netdev is None:
        return None
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", netdev], capture_output=True, text=True).stdout
    m = re.search(r"inet (\d+\.\d+\.\d+\.\d+)", out)
    return m.group(1) if m else None


def run_pair(server_cmd, client_cmd, env=None, timeout=600):
    """Starts the server, runs the client; returns the client's stdout ("" on failure)."""
    e = dict(os.environ)
    e.update(env or {})
    server = subprocess.Popen(server_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=e)
    time.sleep(1.5)
    try:
        out = subprocess.run(client_cmd, capture_output=True, text=True, timeout=timeout, env=e).stdout
    except subprocess.TimeoutExpired:
        out = ""
    finally:
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return out


def parse_ib(out, metric):
    """perftest's ib_*_lat (t_typical, usec) or ib_*_bw (BW average, MB/s)."""
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if metric == "lat" and "t_typical" in line and i + 1 < len(lines):
            f = lines[i + 1].split()
            # #bytes #iterations t_min t_max t_typical ...
            return {"lat": float(f[4])} if len(f) >= 5 else None
        if metric == "bw" and "BW average" in line and i + 1 < len(lines):
            f = lines[i + 1].split()
            # #bytes #iterations BW peak BW average MsgRate
            return {"bw": float(f[3])} if len(f) >= 4 else None
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    p.add_argument("--devices", default="rxe0,siw0")
    p.add_argument("--loom", default=os.path.join(TOP, "build/tools/perftest/loom_perftest"))
    p.add_argument("--module-dir", default=os.path.join(TOP, "build/src/uct/ib/.libs"))
    p.add_argument("--only", default="")
    a = p.parse_args()
    if not os.path.exists(a.loom):
        sys.exit(f"compare_rc: {a.loom} not found (build first)")
    for tool in ("ib_write_lat", "ucx_perftest"):
        if not shutil.which(tool):
            sys.exit(f"compare_rc: {tool} not found (apt-get install perftest ucx-utils)")
    iters = QUICK_ITERS if a.quick else ITERS
    gid = os.environ.get("RDMA_VM_RXE0_GID_INDEX", "1")
    loom_env = {"LOOM_MODULE_DIR": a.module_dir}
    rows = []
    for dev in a.devices.split(","):
        iwarp = dev.startswith("siw") or os.path.exists(f"/sys/class/infiniband/{dev}/node_type") and \
            "iWARP" in open(f"/sys/class/infiniband/{dev}/node_type").read()
        ip = device_ip(dev)
        for name, metric, loom_args, (tool, tool_args), ucx_args in CASES:
            if a.only and a.only not in name:
                continue
            n, w = iters[metric]
            vals = {"loom": [], "verbs": [], "ucx": []}
            for _ in range(a.repeats):
                port = random.randint(20000, 32000)
                common = ["-x", "rc", "-d", f"{dev}:1", "-n", str(n), "-w", str(w), "-f", "-p", str(port)]
                out = run_pair([a.loom, "-p", str(port)], [a.loom, "127.0.0.1"] + common + loom_args.split(),
                               loom_env)
                r = parse_perftest_row(out)
                if r:
                    vals["loom"].append(r[metric])
                port = random.randint(20000, 32000)
                ib = [tool, "-d", dev, "-n", str(n), "-p", str(port)] + tool_args.split()
                if iwarp:
                    srv, cli = ib + ["-R"], ib + ["-R", ip or "127.0.0.1"]
                else:
                    srv, cli = ib + ["-x", gid], ib + ["-x", gid, "127.0.0.1"]
                r = parse_ib(run_pair(srv, cli), metric)
                if r:
                    vals["verbs"].append(r[metric])
                if ucx_args and not iwarp:
                    port = random.randint(20000, 32000)
                    ucmd = ["-x", "rc_verbs", "-d", f"{dev}:1", "-n", str(n), "-w", str(w), "-f", "-p", str(port)]
                    out = run_pair(["ucx_perftest", "-p", str(port)],
                                   ["ucx_perftest", "127.0.0.1"] + ucmd + ucx_args.split(),
                                   {"UCX_IB_GID_INDEX": gid})
                    r = parse_perftest_row(out)
                    if r:
                        vals["ucx"].append(r[metric])
            med = {k: (statistics.median(v) if v else None) for k, v in vals.items()}
            print(f"# {dev} {name}: {vals}", file=sys.stderr, flush=True)
            rows.append((dev, name, metric, med, iwarp))
    unit = {"lat": "us", "bw": "MB/s"}
    better = {"lat": lambda l, o: o / l, "bw": lambda l, o: l / o}
    print(f"Command: contrib/bench/compare_rc.py --repeats {a.repeats}{' --quick' if a.quick else ''}"
          f" (devices {a.devices}; loopback through one device)")
    print(f"Machine: {os.cpu_count()} CPUs; medians of {a.repeats} runs, Loom, verbs and UCX alternating\n")
    print("| device | case | unit | Loom | raw verbs | UCX 1.13 rc_verbs | Loom vs verbs | Loom vs UCX |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    fmt = lambda v: "failed" if v is None else (f"{v:.2f}" if v < 100 else f"{v:.0f}")
    for dev, name, metric, med, iwarp in rows:
        lm, vm, um = med["loom"], med["verbs"], med["ucx"]
        rv = f"{(lm / vm if metric == 'lat' else vm / lm):.2f}x" if lm and vm else "n/a"
        if iwarp:
            ucx_cell, ru = "no iWARP support", "n/a"
        else:
            ucx_cell = fmt(um)
            ru = f"{(lm / um if metric == 'lat' else um / lm):.2f}x" if lm and um else "n/a"
        print(f"| {dev} | {name} | {unit[metric]} | {fmt(lm)} | {fmt(vm)} | {ucx_cell} | {rv} | {ru} |")
    print("\nLoom vs X is a time ratio, above 1 when Loom is slower: Loom/X for latency, X/Loom "
          "for bandwidth. Goals: <= 1.10x against raw verbs, < 1.00x against UCX.")


if __name__ == "__main__":
    main()
