#!/usr/bin/env python3
"""Start-up cost of the protocol layer: Loom's loom_init + loom_worker_create against
UCX's ucp_init + ucp_worker_create, medians of alternating runs.

Builds startup_loom.c (pkg-config loom from an installed tree, --prefix) and
startup_ucx.c (pkg-config ucx), runs each --runs times per transport setting
(LOOM_TLS / UCX_TLS = shm, tcp), alternating, and prints a markdown table of the
in-process times (init, worker create, worker address, teardown) and of the whole
process (spawn to exit, which adds dynamic loading and module loading).

Then memory and time per endpoint (epmem.c, built once per library): a child hosts
--eps workers, the measured process connects one endpoint to each, sends one message on
each and flushes; resident memory is read from /proc/self/status, private (RssAnon) and
shared-memory pages mapped (RssShmem) apart.

    contrib/bench/startup.py [--prefix build/install] [--runs 21] [--eps 256]
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
    epmem = {}
    for lib, flags, pc_env in (("loom", [f"-Wl,-rpath,{libdir}"], env), ("ucx", ["-DEPMEM_UCX"], None)):
        out = os.path.join(tmp, f"epmem_{lib}")
        subprocess.run([cc, "-std=c11", "-O2", "-o", out, os.path.join(HERE, "epmem.c")] + flags +
                       pkg_config(["--cflags", "--libs", lib], pc_env), check=True)
        epmem[lib] = out
    return loom, ucx, epmem


def run_epmem(binary, env_extra, eps):
    env = dict(os.environ)
    for k in ("LOOM_TLS", "LOOM_NET_DEVICES", "UCX_TLS", "UCX_NET_DEVICES"):
        env.pop(k, None)
    env.update(env_extra)
    r = subprocess.run([binary, str(eps)], capture_output=True, text=True, env=env, timeout=300)
    if r.returncode != 0:
        print(f"# {binary} failed: {r.stderr.strip()}", file=sys.stderr)
        return None
    keys = ["worker_anon", "worker_shmem", "ep_anon_created", "ep_anon", "ep_shmem", "create_us", "connect_us"]
    return dict(zip(keys, (float(x) for x in r.stdout.split())))


def print_epmem(rows, eps, runs):
    print(f"\nPer endpoint: {eps} endpoints to {eps} workers of another process, one 8-byte tagged "
          f"message on each until the peers have them; medians of {runs} alternating runs; ratio = Loom / UCX\n")
    print("| transports | measure | Loom | UCX 1.13 | Loom/UCX |")
    print("| --- | --- | ---: | ---: | ---: |")
    items = [("worker_anon", "context + worker, private KiB", 1024), ("worker_shmem", "context + worker, shared "
             "segments KiB", 1024), ("ep_anon", "per endpoint, private bytes", 1),
             ("ep_shmem", "per endpoint, peers' shared pages mapped, bytes", 1),
             ("create_us", "endpoint create, us each", 1), ("connect_us", "first message until received, us per endpoint", 1)]
    for name, lv, uv in rows:
        for key, label, div in items:
            lm = statistics.median(v[key] for v in lv) / div if lv else None
            um = statistics.median(v[key] for v in uv) / div if uv else None
            r = f"{lm / um:.2f}x" if lm and um else "n/a"
            f = lambda v: "failed" if v is None else (f"{v:.2f}" if key.endswith("_us") else f"{v:.0f}")
            print(f"| {name} | {label} | {f(lm)} | {f(um)} | {r} |")


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
    p.add_argument("--eps", type=int, default=256, help="endpoints (and peer workers) in the per-endpoint run")
    p.add_argument("--ep-runs", type=int, default=5, help="repeats of the per-endpoint run")
    a = p.parse_args()
    if not os.path.exists(os.path.join(a.prefix, "lib", "pkgconfig", "loom.pc")):
        sys.exit(f"startup: no {a.prefix}/lib/pkgconfig/loom.pc (run make install)")
    if not shutil.which("pkg-config"):
        sys.exit("startup: pkg-config not found")
    with tempfile.TemporaryDirectory() as tmp:
        loom, ucx, epmem = build(tmp, os.path.abspath(a.prefix))
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
        ep_rows = []
        for name, (loom_env, ucx_env) in SETTINGS.items():
            lv, uv = [], []
            for _ in range(a.ep_runs):
                r = run_epmem(epmem["loom"], loom_env, a.eps)
                if r:
                    lv.append(r)
                r = run_epmem(epmem["ucx"], ucx_env, a.eps)
                if r:
                    uv.append(r)
            ep_rows.append((name, lv, uv))
    med = lambda vals, k: statistics.median(v[k] for v in vals) if vals else None
    fmt = lambda v: "failed" if v is None else f"{v / 1000:.2f}"
    print(f"Command: contrib/bench/startup.py --runs {a.runs} --eps {a.eps} --ep-runs {a.ep_runs}")
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
    print_epmem(ep_rows, a.eps, a.ep_runs)


if __name__ == "__main__":
    main()
