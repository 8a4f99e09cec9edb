#!/usr/bin/env python3
"""Start-up cost of the protocol layer: Loom's loom_init + loom_worker_create against
UCX's ucp_init + ucp_worker_create, medians of alternating runs.

Builds startup_loom.c (pkg-config loom from an installed tree, --prefix) and
startup_ucx.c (pkg-config ucx), runs each --runs times per transport setting
(LOOM_TLS / UCX_TLS = shm, tcp), alternating, and prints a markdown table of the
in-process times (init, worker create, worker address, teardown) and of the whole
process (spawn to exit, which adds dynamic loading and module loading).

    contrib/bench/startup.py [--prefix build/install] [--runs 21]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SETTINGS = {
    "shm": ({"LOOM_TLS": "shm"}, {"UCX_TLS": "shm"}),
    "tcp": ({"LOOM_TLS": "tcp", "LOOM_NET_DEVICES": "lo"}, {"UCX_TLS": "tcp", "UCX_NET_DEVICES": "lo"}),
    "default (all)": ({}, {}),
}


def pkg_config(args, env=None):
    return subprocess.run(["pkg-config"] + args, capture_output=True, text=True, check=True,
                          env=env).stdout.split()


def build(tmp, prefix):
    cc = os.environ.get("CC", "gcc")
    ucx = os.path.join(tmp, "startup_ucx")
    subprocess.run([cc, "-std=c99", "-O2", "-o", ucx, os.path.join(HERE, "startup_ucx.c")] +
                   pkg_config(["--cflags", "--libs", "ucx"]), check=True)
    env = dict(os.environ)
    env["PKG_CONFIG_PATH"] = os.path.join(prefix, "lib", "pkgconfig")
    libdir = pkg_config(["--variable=libdir", "loom"], env)[0]
    loom = os.path.join(tmp, "startup_loom")
    subprocess.run([cc, "-std=c99", "-O2", "-o", loom, os.path.join(HERE, "startup_loom.c"),
                    f"-Wl,-rpath,{libdir}"] + pkg_config(["--cflags", "--libs", "loom"], env), check=True)
    return loom, ucx


def run(binary, env_extra):
    env = dict(os.environ)
    for k in ("LOOM_TLS", "LOOM_NET_DEVICES", "UCX_TLS", "UCX_NET_DEVICES"):
        env.pop(k, None)
    env.update(env_extra)
    t0 = time.perf_counter()
    r = subprocess.run([binary], capture_output=True, text=True, env=env, timeout=60)
    wall = (time.perf_counter() - t0) * 1e6
    if r.returncode != 0:
        print(f"# {binary} failed: {r.stderr.strip()}", file=sys.stderr)
        return None
    v = [float(x) for x in r.stdout.split()]
    return {"init": v[0], "worker": v[1], "address": v[2], "cleanup": v[3], "bytes": v[4], "wall": wall}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prefix", default="build/install", help="installed Loom (make install)")
    p.add_argument("--runs", type=int, default=21)
    a = p.parse_args()
    if not os.path.exists(os.path.join(a.prefix, "lib", "pkgconfig", "loom.pc")):
        sys.exit(f"startup: no {a.prefix}/lib/pkgconfig/loom.pc (run make install)")
    if not shutil.which("pkg-config"):
        sys.exit("startup: pkg-config not found")
    with tempfile.TemporaryDirectory() as tmp:
        loom, ucx = build(tmp, os.path.abspath(a.prefix))
        rows = []
        for name, (loom_env, ucx_env) in SETTINGS.items():
            lv, uv = [], []
            for _ in range(a.runs):
                r = run(loom, loom_env)
                if r:
                    lv.append(r)
                r = run(ucx, ucx_env)
                if r:
                    uv.append(r)
            rows.append((name, lv, uv))
    med = lambda vals, k: statistics.median(v[k] for v in vals) if vals else None
    fmt = lambda v: "failed" if v is None else f"{v / 1000:.2f}"
    print(f"Command: contrib/bench/startup.py --runs {a.runs}")
    print(f"Machine: {os.cpu_count()} CPUs; medians of {a.runs} runs each, Loom and UCX alternating; "
          "milliseconds; ratio = Loom / UCX\n")
    print("| transports | step | Loom ms | UCX 1.13 ms | Loom/UCX |")
    print("| --- | --- | ---: | ---: | ---: |")
    steps = [("init", "loom_init / ucp_init"), ("worker", "worker create"), ("address", "worker address"),
             ("cleanup", "teardown"), ("wall", "whole process (spawn to exit)")]
    for name, lv, uv in rows:
        for key, label in steps:
            lm, um = med(lv, key), med(uv, key)
            r = f"{lm / um:.2f}x" if lm and um else "n/a"
            print(f"| {name} | {label} | {fmt(lm)} | {fmt(um)} | {r} |")
        lb, ub = med(lv, "bytes"), med(uv, "bytes")
        print(f"| {name} | worker address size (bytes) | {lb:.0f} | {ub:.0f} | |" if lb and ub else
              f"| {name} | worker address size | n/a | n/a | |")


if __name__ == "__main__":
    main()
