#!/usr/bin/env python3
"""MPI-level benchmark: the OSU micro-benchmarks through Debian's Open MPI 4.1 over Loom,
over UCX 1.13 and over Open MPI's own ob1, as ratios of medians.

Benchmark groups (--benchmarks): pt2pt (the default: osu_latency, osu_bw, osu_bibw,
osu_mbw_mr, osu_allreduce); onesided (osu_put_latency, osu_get_latency, osu_put_bw,
osu_get_bw, osu_acc_latency, osu_fop_latency -T mpi_int: OSU's default window and
synchronization, osc ucx on the pml ucx stacks, Open MPI's own osc choice under ob1: osc
rdma over vader, pt2pt over tcp); oshm (OSU's OpenSHMEM osu_oshm_put and osu_oshm_put_mr on
the symmetric heap, through oshrun and spml ucx, which is Open MPI 4.1's only OpenSHMEM
transport: Loom and UCX only, OSU's fixed iterations).

Stacks (all the same Open MPI, mpirun.openmpi, 2 ranks on this host):
    loom  pml ucx, with Loom's UCX-1.13-compatible libucp/libucs/libucm first on
          LD_LIBRARY_PATH (--loom-lib-dir, exported to the ranks with -x); LOOM_TLS
    ucx   pml ucx over Debian's UCX 1.13; UCX_TLS
    ob1   pml ob1 with Open MPI's byte-transfer layers (btl)
Transports:
    shm   LOOM_TLS=shm,self; UCX_TLS=shm,self (UCX 1.13's alias for its shared-memory
          transports, here posix, sysv and cma: `ucx_info -d`); btl vader,self
    tcp   LOOM_TLS=tcp; UCX_TLS=tcp; btl tcp,self. Every stack on the loopback device
          only (LOOM_NET_DEVICES=lo, UCX_NET_DEVICES=lo, btl_tcp_if_include lo), the rule
          compare_ucp.py applies to Loom and UCX: the same device for everyone, and lo is
          the only one whose figures do not depend on the VM's virtual NIC.
pml ucx runs with --mca opal_common_ucx_tls any --mca opal_common_ucx_devices any: Open
MPI 4.1 otherwise refuses pml ucx without an RDMA device. Debian's
/etc/openmpi/openmpi-mca-params.conf excludes pml ucx; the command line overrides it.

Method: for each repeat, every stack runs each benchmark once, the order of the stacks
rotated from one repeat to the next so drift on the machine hits every stack alike; OSU's
table is parsed (one figure per size: osu_latency and osu_allreduce the average latency in
us, osu_bw and osu_bibw MB/s (10^6 B/s), osu_mbw_mr messages/s) and the report gives
per-size medians over the repeats. osu_mbw_mr with 2 ranks is 1 pair: osu_bw's window of 64
non-blocking sends, but with a barrier before every window and only the window timed, so
its rate is above osu_bw's for the same size. Ranks are bound the same way for
every stack: --bind-to core --map-by core (Open MPI's own default for 2 ranks; rank 0 on
core 0, rank 1 on core 1), or --bind none. Sizes and iterations go through OSU's own
options (-m 1:MAX, -i, -x); without --iterations OSU's defaults apply (latency 10000
iterations up to 8 KiB then 1000; bandwidth 100 windows of 64 then 20; collectives 1000
then 100), and without --warmup OSU's warm-up (keep it: pml ucx over UCX with `-x 2` shows
128 B-8 KiB latencies 10x too high). Every mpirun runs under a timeout (--timeout).

Ratios: Loom against the best of the other stacks at each size. Latency Loom/best,
bandwidth and message rate best/Loom: below 1 Loom is better everywhere (as in
compare_ucp.py). The targets are printed in their own terms (Loom/best factor, with the
direction of the target).

The layer's own cost: on each transport, osu_latency 8 B over Loom through pml ucx against
`loom_perftest -t tag_lat -s 8` (the C API with no MPI above it, same LOOM_TLS, same cores),
run in the same rotation. OSU reports the mean one-way latency; loom_perftest's Final:
line gives the median (p50) and the mean: the target compares the means, the medians are
printed next to them.

Output: a CSV (benchmark, transport, stack, size, median, min, max, repeats, unit), the
tables and targets on stdout (progress on stderr), and one SVG per transport
(<plot-dir>/mpi_<transport>.svg, and onesided_<transport>.svg for the one-sided and
OpenSHMEM groups; contrib/bench/plot_mpi.py, which can also redraw them from a CSV). A stack that cannot run (Loom's directory missing, or a one-message smoke
run failing) is reported on stderr and in the report, and skipped.

    contrib/bench/compare_mpi.py [--repeats 5] [--iterations N|BENCH=N,...] [--warmup ...]
        [--stacks loom,ucx,ob1] [--transports shm,tcp] [--benchmarks osu_latency,...]
        [--sizes 4M] [--csv build/compare_mpi.csv] [--plot-dir docs/img]
        [--loom-lib-dir build/install/lib/ucx-compat] [--osu-dir DIR] [--bind core|none]
    contrib/bench/compare_mpi.py --from-csv FILE     (report and plots from an earlier run)
"""
import argparse
import csv
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))

KIB, MIB = 1024, 1024 * 1024

# benchmark: (kind, unit, column of OSU's table holding the figure)
# kind "lat": lower is better; "bw" / "mr": higher is better.
BENCHMARKS = {
    "osu_latency": ("lat", "us", 1),
    "osu_bw": ("bw", "MB/s", 1),
    "osu_bibw": ("bw", "MB/s", 1),
    "osu_mbw_mr": ("mr", "msg/s", 2),
    "osu_allreduce": ("lat", "us", 1),
    # One-sided MPI: osc ucx on the pml ucx stacks; ob1 with Open MPI's own choice (osc rdma
    # over btl vader, osc pt2pt over btl tcp).
    "osu_put_latency": ("lat", "us", 1),
    "osu_get_latency": ("lat", "us", 1),
    "osu_put_bw": ("bw", "MB/s", 1),
    "osu_get_bw": ("bw", "MB/s", 1),
    "osu_acc_latency": ("lat", "us", 1),
    "osu_fop_latency": ("lat", "us", 1),
    # OpenSHMEM (oshrun, spml ucx: Loom and UCX only), on the symmetric heap.
    "osu_oshm_put": ("lat", "us", 1),
    "osu_oshm_put_mr": ("mr", "msg/s", 1),
}
ONESIDED = ("osu_put_latency", "osu_get_latency", "osu_put_bw", "osu_get_bw", "osu_acc_latency",
            "osu_fop_latency")
OSHM = ("osu_oshm_put", "osu_oshm_put_mr")
# --benchmarks groups; the default is pt2pt (what the MPI comparison has always measured).
GROUPS = {"pt2pt": ("osu_latency", "osu_bw", "osu_bibw", "osu_mbw_mr", "osu_allreduce"),
          "onesided": ONESIDED, "oshm": OSHM}
STACKS = ("loom", "ucx", "ob1")
TRANSPORTS = ("shm", "tcp")
PERFTEST = "loom_perftest"  # the pseudo-stack of the layer-cost check
PML_UCX = ["--mca", "pml", "ucx", "--mca", "opal_common_ucx_tls", "any",
           "--mca", "opal_common_ucx_devices", "any"]

# Per transport, the environment of each pml ucx stack and ob1's btl arguments.
LOOM_ENV = {"shm": {"LOOM_TLS": "shm,self"}, "tcp": {"LOOM_TLS": "tcp", "LOOM_NET_DEVICES": "lo"}}
UCX_ENV = {"shm": {"UCX_TLS": "shm,self"}, "tcp": {"UCX_TLS": "tcp", "UCX_NET_DEVICES": "lo"}}
OB1_ARGS = {"shm": ["--mca", "btl", "vader,self"],
            "tcp": ["--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo"]}

# The targets: (transport, benchmark, smallest size, largest size, baselines, kind, factor).
# kind "le": Loom/best <= factor at every size of the range; "ge": Loom/best >= factor
# (bandwidth, message rate). Ranges include both ends.
TARGETS = [
    ("shm", "osu_latency", 1, 8 * KIB, ("ucx", "ob1"), "le", 0.9),
    ("shm", "osu_latency", 8 * KIB, 4 * MIB, ("ucx", "ob1"), "le", 0.8),
    ("shm", "osu_bw", 64 * KIB, 4 * MIB, ("ucx", "ob1"), "ge", 1.2),
    ("shm", "osu_bibw", 64 * KIB, 4 * MIB, ("ucx", "ob1"), "ge", 1.2),
    ("shm", "osu_mbw_mr", 8, 8, ("ucx", "ob1"), "ge", 1.2),
    ("tcp", "osu_latency", 8, 8, ("ucx",), "le", 0.9),
    ("tcp", "osu_latency", 32 * KIB, 64 * KIB, ("ucx",), "le", 0.6),
    ("tcp", "osu_bw", MIB, MIB, ("ucx",), "ge", 1.2),
    # One-sided MPI and OpenSHMEM (issue 15). osu_fop_latency runs with -T mpi_int: 4 B.
    ("shm", "osu_put_latency", 8, 8, ("ucx", "ob1"), "le", 1.0),
    ("shm", "osu_get_latency", 8, 8, ("ucx", "ob1"), "le", 1.0),
    ("shm", "osu_put_bw", MIB, MIB, ("ucx", "ob1"), "ge", 1.1),
    ("shm", "osu_get_bw", MIB, MIB, ("ucx", "ob1"), "ge", 1.1),
    ("shm", "osu_fop_latency", 1, 8, ("ucx", "ob1"), "le", 0.9),
    ("tcp", "osu_put_latency", 8, 8, ("ucx",), "le", 0.5),
    ("tcp", "osu_get_bw", MIB, MIB, ("ucx",), "ge", 2.0),
    ("shm", "osu_oshm_put", 8, 8, ("ucx",), "le", 1.0),
    ("shm", "osu_oshm_put_mr", 8, 8, ("ucx",), "ge", 1.1),
    ("tcp", "osu_oshm_put", 8, 8, ("ucx",), "le", 1.0),
    ("tcp", "osu_oshm_put_mr", 8, 8, ("ucx",), "ge", 1.1),
]
LAYER_COST_US = 0.03  # osu_latency 8 B over Loom minus loom_perftest tag_lat 8 B
CSV_FIELDS = ["benchmark", "transport", "stack", "size", "median", "min", "max", "repeats", "unit"]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def fmt_size(n):
    n = int(n)
    if n >= MIB and n % MIB == 0:
        return f"{n // MIB} MiB"
    if n >= KIB and n % KIB == 0:
        return f"{n // KIB} KiB"
    return f"{n} B"


def parse_size(text):
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)(i?[bB])?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 4M, 64KiB, 4096)")
    return int(m.group(1)) * {"": 1, "k": KIB, "m": MIB, "g": 1024 * MIB}[m.group(2).lower()]


def parse_per_bench(text, what):
    """'N' (every benchmark) or 'osu_bw=20,osu_latency=1000' (and 'N,osu_bw=20')."""
    out = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        name, _, value = item.rpartition("=")
        if name and name not in BENCHMARKS:
            raise argparse.ArgumentTypeError(f"{what}: unknown benchmark {name!r}")
        try:
            out[name or "*"] = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what}: not a number: {item!r}") from None
    return out


def split_list(text, allowed, what):
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        sys.exit(f"compare_mpi: {what}: unknown {bad or text!r} (choose from {', '.join(allowed)})")
    return items


# ------------------------------------------------------------------------------------
# Running things
# ------------------------------------------------------------------------------------

def session_pids(sid):
    """Processes of the session `sid` (the mpirun we started leads it: its ranks too)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid:  # state ppid pgrp session
                pids.append(int(d))
        except (OSError, IndexError, ValueError):
            pass
    return pids


def kill_session(proc):
    """Ends a timed-out command and everything it started: SIGTERM (mpirun then takes its
    ranks down), then SIGKILL to whatever of its session is left."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
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


def run(cmd, env, timeout):
    """Runs cmd in its own session; returns (returncode or None on timeout, stdout, stderr)."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        kill_session(proc)
        out, err = proc.communicate()
        return None, out, err


def base_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UCX_", "LOOM_"))}
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def mpirun_cmd(a, stack, transport, binary, osu_args):
    """The mpirun (oshrun for OpenSHMEM) command line and environment for one benchmark run
    on one stack."""
    env = base_env()
    bench = os.path.basename(binary)
    bind = ["--bind-to", "core", "--map-by", "core"] if a.bind == "core" else ["--bind-to", "none"]
    # OpenSHMEM: spml ucx (its only transport); Open MPI 4.1.4's spml ucx never deregisters
    # its memory hooks, so finalize crashes unless they are off (on UCX as on Loom).
    cmd = [a.oshrun if bench in OSHM else a.mpirun, "-np", "2"] + bind
    if bench in OSHM:
        cmd += ["--mca", "spml", "ucx", "--mca", "opal_common_ucx_opal_mem_hooks", "0"]
    if stack == "ob1":
        cmd += ["--mca", "pml", "ob1"] + OB1_ARGS[transport]
    else:
        cmd += PML_UCX
        if bench in ONESIDED:
            cmd += ["--mca", "osc", "ucx"]
        extra = dict(LOOM_ENV[transport] if stack == "loom" else UCX_ENV[transport])
        if stack == "loom":
            old = env.get("LD_LIBRARY_PATH")
            extra["LD_LIBRARY_PATH"] = a.loom_lib_dir + (":" + old if old else "")
        env.update(extra)
        for k in sorted(extra):
            cmd += ["-x", k]
    return cmd + [binary] + osu_args, env


def parse_osu(out, column):
    """OSU's table: {size: figure}; lines starting with '#' are headers."""
    values = {}
    for line in out.splitlines():
        tok = line.split()
        if not tok or tok[0].startswith("#") or not tok[0].isdigit() or len(tok) <= column:
            continue
        try:
            values[int(tok[0])] = float(tok[column])
        except ValueError:
            pass
    return values


def osu_args(a, bench, min_size=1, max_size=None):
    if bench in OSHM:
        return ["heap"]  # OSU's OpenSHMEM tests take no size or iteration options
    args = ["-m", f"{min_size}:{max_size or a.sizes}"]
    if bench == "osu_fop_latency":
        # osc ucx 4.1.4 asks the transport for 1-byte atomics for the default MPI_CHAR.
        args += ["-T", "mpi_int"]
    it = a.iterations.get(bench, a.iterations.get("*"))
    wu = a.warmup.get(bench, a.warmup.get("*"))
    if it is not None:
        args += ["-i", str(it)]
    # Without --warmup, OSU's own warm-up (osu_latency 100 iterations, 10 from 16 KiB): pml
    # ucx over UCX needs it: with -x 2, its 128 B-8 KiB latencies come out 10x too high.
    if wu is not None:
        args += ["-x", str(wu)]
    return args


def osu_dir_of(a, bench):
    return a.oshm_osu_dir if bench in OSHM else a.osu_dir


def run_osu(a, stack, transport, bench, args=None, timeout=None):
    """One OSU run; returns ({size: figure}, error text or None)."""
    cmd, env = mpirun_cmd(a, stack, transport, os.path.join(osu_dir_of(a, bench), bench),
                          args if args is not None else osu_args(a, bench))
    if a.verbose:
        shown = " ".join(f"{k}={env[k]}" for k in sorted(env) if k.startswith(("UCX_", "LOOM_")))
        log(f"#   {shown} {' '.join(cmd)}")
    rc, out, err = run(cmd, env, timeout or a.timeout)
    values = parse_osu(out, BENCHMARKS[bench][2])
    if rc is None:
        return values, f"timed out after {timeout or a.timeout} s: {' '.join(cmd)}"
    if rc != 0 or not values:
        tail = "\n".join((err.strip() or out.strip()).splitlines()[-15:])
        return values, f"exit {rc}, {len(values)} sizes parsed: {' '.join(cmd)}\n{tail}"
    return values, None


def perftest_iters(a):
    """osu_latency's iterations and warm-up at 8 B (OSU's defaults: 10000 and 100)."""
    it = a.iterations.get("osu_latency", a.iterations.get("*"))
    wu = a.warmup.get("osu_latency", a.warmup.get("*"))
    return (10000 if it is None else it), (100 if wu is None else wu)


def run_perftest(a, transport):
    """loom_perftest tag_lat 8 B on the same transport and cores; returns
    ({'p50': us, 'avg': us}, error text or None)."""
    env = base_env()
    env.update(LOOM_ENV[transport])
    port = random.randint(20000, 32000)
    pin = (lambda core: ["taskset", "-c", str(core)]) if a.bind == "core" else (lambda core: [])
    it, wu = perftest_iters(a)
    server_cmd = pin(0) + [a.loom_perftest, "-p", str(port)]
    client_cmd = pin(1) + [a.loom_perftest, "127.0.0.1", "-p", str(port), "-t", "tag_lat",
                           "-s", "8", "-n", str(it), "-w", str(wu), "-f"]
    if a.verbose:
        log(f"#   {' '.join(f'{k}={v}' for k, v in LOOM_ENV[transport].items())} "
            f"{' '.join(server_cmd)} & {' '.join(client_cmd)}")
    server = subprocess.Popen(server_cmd, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        time.sleep(0.3)
        rc, out, err = run(client_cmd, env, a.timeout)
    finally:
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            kill_session(server)
    for line in out.splitlines():
        tok = line.split()
        if len(tok) >= 4 and tok[0] == "Final:":
            try:
                return {"p50": float(tok[2]), "avg": float(tok[3])}, None
            except ValueError:
                break
    why = "timed out" if rc is None else f"exit {rc}"
    return None, f"{why}: {' '.join(client_cmd)}\n{(err.strip() or out.strip())[-600:]}"


# ------------------------------------------------------------------------------------
# Availability
# ------------------------------------------------------------------------------------

def pml_ucx_component():
    try:
        out = subprocess.run(["ompi_info", "--path", "pkglibdir", "--parsable"],
                             capture_output=True, text=True, timeout=30).stdout
        pkglibdir = out.strip().split(":")[-1]
    except (OSError, subprocess.TimeoutExpired):
        pkglibdir = "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3"
    return os.path.join(pkglibdir, "mca_pml_ucx.so")


def ucx_libs_resolved(comp, ld_library_path):
    """{library: directory} for the UCX libraries (libucp, libucs, libuct, libucm) that
    the dynamic loader finds for `comp` with this LD_LIBRARY_PATH (ldd)."""
    env = dict(os.environ)
    if ld_library_path:
        env["LD_LIBRARY_PATH"] = ld_library_path
    else:
        env.pop("LD_LIBRARY_PATH", None)
    out = subprocess.run(["ldd", comp], capture_output=True, text=True, env=env).stdout
    return {m.group(1): os.path.realpath(os.path.dirname(m.group(2)))
            for m in re.finditer(r"(libuc[pstm]\.so\.\d+) => (\S+)", out)}


def check_stack(a, stack):
    """Static checks; returns the reason the stack cannot run, or None."""
    if stack == "ob1":
        return None
    comp = pml_ucx_component()
    if not os.path.exists(comp):
        return f"Open MPI's pml ucx component {comp} is missing"
    loom_dir = os.path.realpath(a.loom_lib_dir)
    env_path = base_env().get("LD_LIBRARY_PATH", "")
    if stack == "ucx":
        # The baseline must be Debian's UCX, not Loom's layer through the caller's LD_LIBRARY_PATH.
        libs = ucx_libs_resolved(comp, env_path)
        if any(d == loom_dir for d in libs.values()):
            return f"with this LD_LIBRARY_PATH ({env_path}), pml ucx loads Loom's layer, not UCX"
        return None
    d = a.loom_lib_dir
    if not os.path.isdir(d):
        return f"Loom's UCX-compatible library directory {d} does not exist (--loom-lib-dir)"
    missing = [lib for lib in ("libucp.so.0", "libucs.so.0") if not os.path.exists(os.path.join(d, lib))]
    if missing:
        return f"{d} lacks {', '.join(missing)}"
    # Every UCX library pml ucx ends up loading must come from there: no mix with Debian's.
    libs = ucx_libs_resolved(comp, d + (":" + env_path if env_path else ""))
    stray = {lib: where for lib, where in libs.items() if where != loom_dir}
    if stray or "libucp.so.0" not in libs:
        shown = ", ".join(f"{lib} from {where}" for lib, where in sorted(stray.items()))
        return f"with LD_LIBRARY_PATH={d}, {comp} loads {shown or 'no libucp.so.0'}"
    return None


def smoke(a, stack, transport):
    """One 8-byte osu_latency run: returns the reason the stack does not work, or None."""
    _, err = run_osu(a, stack, transport, "osu_latency", ["-m", "8:8", "-i", "10", "-x", "2"],
                     timeout=min(a.timeout, 120))
    return err


# ------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------

def summarize(samples):
    """samples {(bench, transport, stack): {size: [values]}} -> CSV rows (dicts)."""
    rows = []
    for (bench, transport, stack), per_size in samples.items():
        for size in sorted(per_size):
            v = per_size[size]
            if not v:
                continue
            unit = BENCHMARKS[bench][1] if bench in BENCHMARKS else "us"
            rows.append({"benchmark": bench, "transport": transport, "stack": stack, "size": size,
                         "median": statistics.median(v), "min": min(v), "max": max(v),
                         "repeats": len(v), "unit": unit})
    return rows


def write_csv(path, rows):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{r[k]:.6g}" if isinstance(r[k], float) else r[k]) for k in CSV_FIELDS})


def read_csv(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows.append({"benchmark": r["benchmark"], "transport": r["transport"], "stack": r["stack"],
                         "size": int(r["size"]), "median": float(r["median"]), "min": float(r["min"]),
                         "max": float(r["max"]), "repeats": int(r["repeats"]),
                         "unit": r.get("unit", "")})
    return rows


def fmt_val(v):
    if v is None:
        return "—"
    if v >= 1000:
        return f"{v:.0f}"
    return f"{v:.3f}" if v < 10 else f"{v:.2f}"


def ratio_better_below_1(kind, loom, best):
    """Latency Loom/best; bandwidth and message rate best/Loom: < 1 means Loom is better."""
    if loom is None or best is None or loom <= 0 or best <= 0:
        return None
    return loom / best if kind == "lat" else best / loom


def best_of(med, bench, transport, size, stacks):
    """The best baseline figure at a size, and which stack gave it."""
    kind = BENCHMARKS[bench][0]
    cands = [(med[(bench, transport, s)][size], s) for s in stacks
             if size in med.get((bench, transport, s), {})]
    if not cands:
        return None, None
    return (min if kind == "lat" else max)(cands)


def print_tables(rows, transports, benchmarks):
    med = {}
    for r in rows:
        med.setdefault((r["benchmark"], r["transport"], r["stack"]), {})[r["size"]] = r["median"]
    reps = {}
    for r in rows:
        reps.setdefault((r["benchmark"], r["transport"], r["stack"]), set()).add(r["repeats"])
    for transport in transports:
        for bench in benchmarks:
            kind, unit, _ = BENCHMARKS[bench]
            present = [s for s in STACKS if (bench, transport, s) in med]
            if not present:
                continue
            sizes = sorted({z for s in present for z in med[(bench, transport, s)]})
            n = sorted({x for s in present for x in reps[(bench, transport, s)]})
            direction = "Loom/best" if kind == "lat" else "best/Loom"
            print(f"\n### {transport} {bench} ({unit}, medians of {'/'.join(map(str, n))}; "
                  f"ratio {direction}: < 1 means Loom is better)\n")
            print("| size | " + " | ".join(present) + " | best other | ratio |")
            print("| ---: | " + " | ".join("---:" for _ in present) + " | --- | ---: |")
            for z in sizes:
                vals = [med[(bench, transport, s)].get(z) for s in present]
                others = [s for s in present if s != "loom"]
                bv, bs = best_of(med, bench, transport, z, others)
                loom = med.get((bench, transport, "loom"), {}).get(z)
                r = ratio_better_below_1(kind, loom, bv)
                print(f"| {fmt_size(z)} | " + " | ".join(fmt_val(v) for v in vals)
                      + f" | {bs or '—'} | {'n/a' if r is None else f'{r:.2f}x'} |")
    return med


def evaluate_targets(med, transports, benchmarks, max_size):
    print("\n### Targets (Loom against the best of the named stacks at each size)\n")
    print("| transport | benchmark | sizes | target | worst Loom/best | at | met |")
    print("| --- | --- | --- | --- | ---: | --- | --- |")
    for transport, bench, lo, hi, base, kind, factor in TARGETS:
        if transport not in transports or bench not in benchmarks:
            continue
        sizes_txt = fmt_size(lo) if lo == hi else f"{fmt_size(lo)}-{fmt_size(hi)}"
        target = f"Loom {'<=' if kind == 'le' else '>='} {factor:.2f}x best of {'/'.join(base)}"
        loom = med.get((bench, transport, "loom"), {})
        sizes = sorted(z for z in set(loom) if lo <= z <= hi)
        status, worst, at = None, None, ""
        if not loom:
            status = "not measured (no loom results)"
        elif not sizes:
            status = f"not measured (no size in range; largest run {fmt_size(max_size)})"
        else:
            missed = []
            for z in sizes:
                bv, _ = best_of(med, bench, transport, z, base)
                if bv is None or bv <= 0:
                    continue
                f = loom[z] / bv
                bad = f > factor if kind == "le" else f < factor
                if worst is None or (f > worst if kind == "le" else f < worst):
                    worst, at = f, fmt_size(z)
                if bad:
                    missed.append(fmt_size(z))
            if worst is None:
                status = f"not measured (no {'/'.join(base)} results)"
            elif missed:
                status = "**NOT MET** at " + ", ".join(missed)
            else:
                status = "met"
            if sizes and sizes[-1] < hi:
                status += f" (measured to {fmt_size(sizes[-1])} only)"
        print(f"| {transport} | {bench} | {sizes_txt} | {target} | "
              f"{'' if worst is None else f'{worst:.2f}x'} | {at} | {status} |")


def evaluate_layer_cost(med, transports):
    print(f"\n### The layer's own cost: osu_latency 8 B over Loom through pml ucx against "
          f"loom_perftest tag_lat 8 B (target: within {LAYER_COST_US} us)\n")
    print("| transport | osu_latency 8 B (mean) | loom_perftest mean | p50 | "
          "cost (mean - mean) | met |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for transport in transports:
        osu = med.get(("osu_latency", transport, "loom"), {}).get(8)
        pavg = med.get(("tag_lat_avg", transport, PERFTEST), {}).get(8)
        p50 = med.get(("tag_lat_p50", transport, PERFTEST), {}).get(8)
        if osu is None or pavg is None:
            print(f"| {transport} | {fmt_val(osu)} | {fmt_val(pavg)} | {fmt_val(p50)} | | "
                  f"not measured |")
            continue
        cost = osu - pavg
        met = "met" if cost <= LAYER_COST_US else "**NOT MET**"
        print(f"| {transport} | {osu:.3f} | {pavg:.3f} | {fmt_val(p50)} | {cost:+.3f} us | {met} |")


def make_plots(a, csv_path, rows, transports):
    """The SVGs through plot_mpi; matplotlib comes from Debian (python3-matplotlib), so
    when this interpreter lacks it (a pyenv python3 first on PATH) Debian's draws them."""
    try:
        sys.path.insert(0, HERE)
        import plot_mpi
    except ImportError as e:
        system = "/usr/bin/python3"
        if os.path.realpath(sys.executable) == os.path.realpath(system) or not os.path.exists(system):
            log(f"!!! compare_mpi: no plot: {e} (apt-get install python3-matplotlib)")
            return
        r = subprocess.run([system, os.path.join(HERE, "plot_mpi.py"), csv_path, "--plot-dir", a.plot_dir,
                            "--format", a.plot_format, "--transports", ",".join(transports)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            log(f"!!! compare_mpi: plotting with {system} failed:\n{r.stderr.strip()}")
        paths = r.stdout.split()
    else:
        paths = plot_mpi.plot(rows, a.plot_dir, transports, a.plot_format)
    for path in paths:
        print(f"plot: {path}")


def report(rows, a, transports, benchmarks, skipped, header):
    print(header)
    for what, why in skipped:
        print(f"\n**SKIPPED {what}:** {why.splitlines()[0]}")
    med = print_tables(rows, transports, benchmarks)
    # The CSV keeps the perftest figures under their own benchmark names.
    evaluate_targets(med, transports, benchmarks, a.sizes)
    if "osu_latency" in benchmarks:
        evaluate_layer_cost(med, transports)


# ------------------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--iterations", type=lambda t: parse_per_bench(t, "--iterations"), default={},
                   help="OSU -i: N for every benchmark, or BENCH=N,... (bandwidth tests count "
                        "windows of 64 messages); default: OSU's own")
    p.add_argument("--warmup", type=lambda t: parse_per_bench(t, "--warmup"), default={},
                   help="OSU -x, same forms; default: OSU's own (pml ucx over UCX needs it)")
    p.add_argument("--stacks", default=",".join(STACKS))
    p.add_argument("--transports", default=",".join(TRANSPORTS))
    p.add_argument("--benchmarks", default="pt2pt",
                   help="benchmarks, or groups: pt2pt (the default), onesided, oshm; "
                        "e.g. onesided,oshm or osu_put_latency,osu_oshm_put")
    p.add_argument("--sizes", type=parse_size, default=4 * MIB, metavar="MAX",
                   help="largest message size, from 1 B (default 4M)")
    p.add_argument("--csv", default=os.path.join(TOP, "build", "compare_mpi.csv"))
    p.add_argument("--plot-dir", default=os.path.join(TOP, "docs", "img"),
                   help="where mpi_<transport>.svg go (default docs/img); '' for no plot")
    p.add_argument("--plot-format", default="svg", help="svg (default), png or pdf")
    p.add_argument("--loom-lib-dir", default=os.path.join(TOP, "build", "install", "lib", "ucx-compat"))
    p.add_argument("--loom-perftest", default=os.path.join(TOP, "build", "install", "bin", "loom_perftest"))
    p.add_argument("--osu-dir", default="",
                   help="directory of the osu_* binaries built against Open MPI (default: "
                        "test/mpi/build_osu.sh build openmpi)")
    p.add_argument("--mpirun", default="mpirun.openmpi")
    p.add_argument("--oshrun", default="oshrun")
    p.add_argument("--oshm-osu-dir", default="",
                   help="directory of the osu_oshm_* binaries (default: test/mpi/build_osu.sh build oshmem)")
    p.add_argument("--bind", choices=("core", "none"), default="core")
    p.add_argument("--timeout", type=float, default=600, help="seconds per mpirun (default 600)")
    p.add_argument("--from-csv", default="", help="no runs: report and plots from this CSV")
    p.add_argument("-v", "--verbose", action="store_true", help="print every command")
    a = p.parse_args()
    stacks = split_list(a.stacks, STACKS, "--stacks")
    transports = split_list(a.transports, TRANSPORTS, "--transports")
    names = [x.strip() for x in a.benchmarks.split(",") if x.strip()]
    expanded = ",".join(",".join(GROUPS[n]) if n in GROUPS else n for n in names)
    benchmarks = split_list(expanded, tuple(BENCHMARKS), "--benchmarks")
    a.loom_lib_dir = os.path.abspath(a.loom_lib_dir)

    if a.from_csv:
        rows = read_csv(a.from_csv)
        a.sizes = max((r["size"] for r in rows), default=a.sizes)
        report(rows, a, transports, benchmarks, [],
               f"Report from {a.from_csv} (medians, min, max as recorded)")
        if a.plot_dir:
            make_plots(a, a.from_csv, rows, transports)
        return

    if a.repeats < 1:
        sys.exit("compare_mpi: --repeats must be at least 1")
    if not shutil.which(a.mpirun):
        sys.exit(f"compare_mpi: {a.mpirun} not found (apt-get install openmpi-bin)")
    if not a.osu_dir:
        script = os.path.join(TOP, "test", "mpi", "build_osu.sh")
        r = subprocess.run([script, os.path.join(TOP, "build"), "openmpi"], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"compare_mpi: {script} failed:\n{r.stderr}")
        a.osu_dir = r.stdout.split()[-1]
    if not a.oshm_osu_dir and any(b in OSHM for b in benchmarks):
        script = os.path.join(TOP, "test", "mpi", "build_osu.sh")
        r = subprocess.run([script, os.path.join(TOP, "build"), "oshmem"], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"compare_mpi: {script} oshmem failed:\n{r.stderr}")
        a.oshm_osu_dir = r.stdout.split()[-1]
    missing = [b for b in benchmarks if not os.access(os.path.join(osu_dir_of(a, b), b), os.X_OK)]
    if missing:
        sys.exit(f"compare_mpi: no {', '.join(missing)} in {a.osu_dir} or {a.oshm_osu_dir} "
                 f"(--osu-dir, --oshm-osu-dir)")

    # Which stacks can run: static checks, then one 8-byte message per transport.
    skipped, units = [], {}
    for stack in stacks:
        why = check_stack(a, stack)
        for transport in transports:
            if why is None:
                why_t = smoke(a, stack, transport)
            else:
                why_t = why
            if why_t:
                skipped.append((f"{stack} on {transport}", why_t))
                log(f"!!! compare_mpi: stack {stack} on {transport} is UNAVAILABLE and skipped: {why_t}")
            else:
                units.setdefault(transport, []).append(stack)
    layer_cost = "osu_latency" in benchmarks and "loom" in stacks
    for transport in transports:
        if not layer_cost or "loom" not in units.get(transport, []):
            continue
        if not os.access(a.loom_perftest, os.X_OK):
            skipped.append((f"loom_perftest on {transport}", f"{a.loom_perftest} not found"))
            log(f"!!! compare_mpi: {a.loom_perftest} not found: the layer-cost check is skipped")
        else:
            units[transport].append(PERFTEST)
    if not any(s != PERFTEST for u in units.values() for s in u):
        sys.exit("compare_mpi: no stack can run; nothing to measure")

    load0 = os.getloadavg()[0]
    if load0 > 0.5:
        log(f"!!! compare_mpi: load average {load0:.2f} at the start: other processes compete for the "
            f"cores the ranks are bound to, expect noisy figures")
    t0 = time.time()
    samples = {}
    for rep in range(a.repeats):
        for transport in transports:
            for bench in benchmarks:
                order = list(units.get(transport, []))
                if bench != "osu_latency" and PERFTEST in order:
                    order.remove(PERFTEST)
                if bench in OSHM and "ob1" in order:
                    order.remove("ob1")  # OpenSHMEM in Open MPI 4.1 runs on spml ucx only
                if not order:
                    continue
                k = rep % len(order)
                order = order[k:] + order[:k]
                for stack in order:
                    t = time.time()
                    if stack == PERFTEST:
                        res, err = run_perftest(a, transport)
                        if res:
                            for key in ("p50", "avg"):
                                samples.setdefault((f"tag_lat_{key}", transport, PERFTEST), {}) \
                                    .setdefault(8, []).append(res[key])
                        shown = f"p50 {res['p50']:.3f} us, mean {res['avg']:.3f} us" if res else ""
                    else:
                        values, err = run_osu(a, stack, transport, bench)
                        for size, v in values.items():
                            samples.setdefault((bench, transport, stack), {}).setdefault(size, []).append(v)
                        shown = f"{len(values)} sizes"
                    label = f"[{rep + 1}/{a.repeats}] {transport} {bench} {stack}"
                    if err:
                        log(f"!!! {label}: FAILED: {err}")
                    else:
                        log(f"# {label}: {shown}, {time.time() - t:.1f} s")

    rows = summarize(samples)
    write_csv(a.csv, rows)
    elapsed = time.time() - t0
    argv = " ".join(sys.argv[1:])
    header = (f"Command: contrib/bench/compare_mpi.py {argv}\n"
              f"Machine: {os.cpu_count()} CPUs, load average {load0:.2f} at the start and "
              f"{os.getloadavg()[0]:.2f} at the end; {elapsed / 60:.1f} min; Open MPI "
              f"({a.mpirun}), ranks bound: {a.bind}; medians of {a.repeats} alternating runs\n"
              f"CSV: {a.csv}")
    report(rows, a, transports, benchmarks, skipped, header)
    if a.plot_dir:
        make_plots(a, a.csv, rows, transports)


if __name__ == "__main__":
    main()
