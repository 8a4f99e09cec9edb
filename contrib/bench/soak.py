#!/usr/bin/env python3
"""The soak of issue 17 (docs/reliability.md, "Soak").

Runs N soak_peer processes (test/faults/soak_peer.c) that all connect to one another and
send random mixed traffic (tagged messages 8 B .. 4 MiB across eager and rendezvous,
active messages, stream records, RMA put/flush/get), each message with a sequence number
and a checksum the receiver verifies. Every so often it kills (SIGKILL) a random
non-coordinator process (any but 0) and starts a new incarnation of it: the survivors'
endpoints to it must fail with an error (expected errors), and they reconnect to the new
one. Anything else counts as unexpected: a checksum mismatch (corrupted), a message
missing on a live endpoint (lost), an error on an endpoint whose peer was not killed, an
operation or endpoint that stays stuck past --bound, a process that crashes or does not
finish its drain.

While it runs it samples each process's VmRSS from /proc/PID/status, from the first
statistics the process writes (its set-up done) on. At the end it
prints a table (and --json FILE): messages, bytes, expected and unexpected errors, lost,
corrupted, and RSS per process. Exit status 0 only when lost, corrupted and unexpected
errors are all 0 and the memory of every long-lived process is bounded:

    median RSS of its last quarter <= 1.5 x median RSS of its first quarter + 16 MiB

(a long-lived process: one incarnation that ran at least half of the soak; process 0,
never killed, always is). A leak of a few hundred bytes per message fails it within a
minute; allocator noise and pools that grow to their working size do not.

Transports: LOOM_TLS of the environment (tcp if unset), or --tls, repeatable, given to
the processes in turn (--tls shm,tcp --tls tcp: pairs of two shm,tcp processes use shm,
pairs with the tcp one use tcp).

Simulated hosts (test/faults/run_soak_netem.sh): --prefix gives each process, in turn like
--tls, a command its soak_peer runs under (nsenter into a host's namespaces), and --addr
the address it listens on and its peers connect to (default 127.0.0.1).

Stdlib only. Every wait is bounded: the processes by --bound, this script by the end of
the soak plus a margin, after which it kills what is left and reports it.
"""
import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

MIB = 1024 * 1024


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class Proc:
    """One incarnation of one soak process."""

    def __init__(self, pid_id, inc, popen, tls, t0):
        self.id, self.inc, self.popen, self.tls = pid_id, inc, popen, tls
        self.t0 = t0
        self.t1 = None
        self.killed = False
        self.rss = []  # (seconds since the soak began, KiB)
        self.up = False  # its set-up is done (its first stats file exists)
        self.exit = None

    @property
    def name(self):
        return f"{self.id}.{self.inc}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--procs", type=int, default=3, help="processes (2..8; default 3)")
    ap.add_argument("--seconds", type=float, default=60, help="length of the soak (default 60)")
    ap.add_argument("--restart-every", type=float, default=6.0,
                    help="mean seconds between kills (default 6; 0: no restarts)")
    ap.add_argument("--bound", type=float, default=30.0,
                    help="seconds any one wait may take in a process (default 30)")
    ap.add_argument("--tls", action="append", help="LOOM_TLS per process, in turn (repeatable)")
    ap.add_argument("--prefix", action="append",
                    help="command (split on spaces) each process runs under, in turn (repeatable)")
    ap.add_argument("--addr", action="append", help="IPv4 address each process listens on, in turn (repeatable)")
    ap.add_argument("--kinds", default="tasr",
                    help="traffic: letters of tag, am, stream, rma (default tasr: all)")
    ap.add_argument("--peer", help="the soak_peer program (default: test/faults/soak_peer of the cwd)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--keep", action="store_true", help="keep the working directory (logs)")
    args = ap.parse_args()

    peer = os.path.abspath(args.peer or "test/faults/soak_peer")
    if not os.access(peer, os.X_OK):
        print(f"soak: {peer} is not built (make test/faults/soak_peer)", file=sys.stderr)
        return 2
    if not 2 <= args.procs <= 8:
        print("soak: --procs must be 2..8", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else int(time.time()) % 100000
    rng = random.Random(seed)
    tls = args.tls or [os.environ.get("LOOM_TLS", "tcp")]
    work = tempfile.mkdtemp(prefix="loom-soak.")
    print(f"# soak: {args.procs} processes, {args.seconds:.0f} s, seed {seed}, kinds {args.kinds}, "
          f"LOOM_TLS {' / '.join(tls)}, restarts every ~{args.restart_every:g} s; logs in {work}",
          flush=True)

    procs = []  # every incarnation
    live = {}  # id -> Proc
    incs = {}
    unexpected = []  # what this script saw itself
    t_begin = time.monotonic()

    def now():
        return time.monotonic() - t_begin

    def start(i):
        inc = incs.get(i, -1) + 1
        incs[i] = inc
        env = dict(os.environ, LOOM_TLS=tls[i % len(tls)])
        log = open(os.path.join(work, f"log.{i}.{inc}"), "w")
        prefix = args.prefix[i % len(args.prefix)].split() if args.prefix else []
        where = ["-a", args.addr[i % len(args.addr)]] if args.addr else []
        # (the prefix execs the peer: the pid stays the peer's, for RSS and the kill)
        p = subprocess.Popen(prefix + [peer, "-i", str(i), "-n", str(args.procs), "-g", str(inc), "-d", work,
                                       "-s", str(seed), "-t", str(args.bound), "-k", args.kinds] + where,
                             stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        log.close()
        pr = Proc(i, inc, p, env["LOOM_TLS"], now())
        procs.append(pr)
        live[i] = pr

    def touch(name):
        with open(os.path.join(work, name), "w"):
            pass

    def sample():
        # From a process's first stats file on: before it, the pid may still be the launcher
        # (the libtool wrapper, nsenter) or the peer still setting up, which under emulation
        # takes seconds and would make a first quarter of a few MiB.
        t = now()
        for pr in live.values():
            if not pr.up:
                pr.up = os.path.exists(os.path.join(work, f"stats.{pr.id}.{pr.inc}.json"))
                if not pr.up:
                    continue
            kib = rss_kib(pr.popen.pid)
            if kib is not None and pr.popen.poll() is None:
                pr.rss.append((round(t, 2), kib))

    def reap_crashed():
        for i, pr in list(live.items()):
            rc = pr.popen.poll()
            if rc is not None:
                pr.exit, pr.t1 = rc, now()
                unexpected.append(f"process {pr.name} exited on its own with status {rc} at {pr.t1:.1f} s")
                print(f"# soak: {unexpected[-1]}; restarting it", flush=True)
                start(i)

    def connected():
        """Every live process has an endpoint to the current incarnation of every other."""
        for pr in live.values():
            st = read_json(os.path.join(work, f"stats.{pr.id}.{pr.inc}.json"))
            if st is None:
                return False
            want = {str(j): live[j].inc for j in live if j != pr.id}
            if st.get("peers") != want:
                return False
        return True

    kills = 0
    try:
        for i in range(args.procs):
            start(i)
        quiet = max(10.0, args.bound / 2)  # no kills this close to the end: the last one reconnects
        next_kill = 5.0 + rng.uniform(0.5, 1.5) * args.restart_every if args.restart_every > 0 else None
        last_sample = -1.0
        while now() < args.seconds:
            if now() - last_sample >= 0.5:
                last_sample = now()
                sample()
            reap_crashed()
            if next_kill is not None and now() >= next_kill and now() < args.seconds - quiet:
                victim = live[rng.randrange(1, args.procs)]
                # the file first: an error the survivors see from now on is expected
                touch(f"killed.{victim.id}.{victim.inc}")
                touch("lastkill")
                victim.popen.send_signal(signal.SIGKILL)
                victim.popen.wait()
                victim.killed, victim.t1, victim.exit = True, now(), -9
                kills += 1
                start(victim.id)
                next_kill = now() + rng.uniform(0.5, 1.5) * args.restart_every
            time.sleep(0.05)  # the sampling period (nothing to wait for: the processes run on their own)

        # The end: once every process is connected to every other (bounded), stop; each
        # drains, exchanges FIN/DONE with its peers and exits.
        deadline = now() + args.bound
        while not connected() and now() < deadline:
            reap_crashed()
            sample()
            time.sleep(0.2)
        if not connected():
            unexpected.append(f"the processes were not all connected to one another {args.bound:.0f} s after the end")
        t_stop = now()
        touch("stop")
        deadline = now() + args.bound + 15
        while now() < deadline and any(pr.popen.poll() is None for pr in live.values()):
            sample()
            time.sleep(0.1)
        for pr in live.values():
            if pr.popen.poll() is None:
                unexpected.append(f"process {pr.name} hung in its drain: killed {args.bound + 15:.0f} s after the stop")
                pr.popen.kill()
                pr.popen.wait()
            pr.exit, pr.t1 = pr.popen.returncode, now()
    finally:
        for pr in procs:  # whatever happened, nothing is left behind
            if pr.popen.poll() is None:
                pr.popen.kill()
                pr.popen.wait()

    # --- results ---------------------------------------------------------------------------------
    keys = ["msgs_sent", "bytes_sent", "msgs_rcvd", "bytes_rcvd", "tag", "am", "stream", "rma",
            "expected_errors", "unexpected_errors", "lost", "corrupted", "expected_gaps"]
    total = dict.fromkeys(keys, 0)
    logs = []
    per_proc = []
    for pr in procs:
        st = read_json(os.path.join(work, f"stats.{pr.id}.{pr.inc}.json"))
        if st is None:
            st = {}
            if not pr.killed:
                unexpected.append(f"process {pr.name} left no counters")
        for k in keys:
            total[k] += st.get(k, 0)
        logs += [f"{pr.name}: {line}" for line in st.get("log", [])]
        if not pr.killed:
            if pr.exit != 0 and st.get("unexpected_errors", 0) == 0 and st.get("lost", 0) == 0 \
                    and st.get("corrupted", 0) == 0:
                unexpected.append(f"process {pr.name} exited with status {pr.exit}")
            if st and not st.get("final"):
                unexpected.append(f"process {pr.name} did not finish (no final counters)")
        per_proc.append({"proc": pr.name, "tls": pr.tls, "start": round(pr.t0, 2),
                         "end": round(pr.t1 if pr.t1 is not None else now(), 2), "killed": pr.killed,
                         "exit": pr.exit, "msgs_sent": st.get("msgs_sent", 0),
                         "msgs_rcvd": st.get("msgs_rcvd", 0),
                         "unexpected_errors": st.get("unexpected_errors", 0), "rss_kib": pr.rss})
    total["unexpected_errors"] += len(unexpected)

    # memory: the long-lived incarnations
    rss_rows = []
    rss_ok = True
    for pr in procs:
        life = (pr.t1 if pr.t1 is not None else now()) - pr.t0
        vals = [k for _, k in pr.rss]
        if life < args.seconds / 2 or len(vals) < 8:
            continue
        q = len(vals) // 4
        first, last = statistics.median(vals[:q]), statistics.median(vals[-q:])
        limit = 1.5 * first + 16 * 1024
        ok = last <= limit
        rss_ok &= ok
        rss_rows.append({"proc": pr.name, "samples": len(vals), "first_quarter_mib": round(first / 1024, 1),
                         "last_quarter_mib": round(last / 1024, 1), "max_mib": round(max(vals) / 1024, 1),
                         "limit_mib": round(limit / 1024, 1), "ok": ok})
    if not rss_rows:
        unexpected.append("no long-lived process to judge memory by")
        total["unexpected_errors"] += 1
        rss_ok = False

    ok = total["lost"] == 0 and total["corrupted"] == 0 and total["unexpected_errors"] == 0 and rss_ok
    duration = t_stop
    print()
    print(f"soak: {args.procs} processes, {duration:.0f} s of traffic, {kills} kills and restarts, "
          f"{len(procs)} incarnations, seed {seed}")
    rows = [
        ("messages sent, completed", f"{total['msgs_sent']:,}"),
        ("  tag / am / stream / rma", f"{total['tag']:,} / {total['am']:,} / {total['stream']:,} / {total['rma']:,}"),
        ("bytes sent, completed", f"{total['bytes_sent']:,} ({total['bytes_sent'] / MIB / max(duration, 1):.0f} MiB/s)"),
        ("messages received, verified", f"{total['msgs_rcvd']:,}"),
        ("bytes received, verified", f"{total['bytes_rcvd']:,}"),
        ("expected errors (killed peers)", f"{total['expected_errors']:,}"),
        ("unexpected errors", f"{total['unexpected_errors']:,}"),
        ("lost", f"{total['lost']:,}"),
        ("corrupted", f"{total['corrupted']:,}"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"| {'':{width}} | value |")
    print(f"| {'-' * width} | ---: |")
    for name, val in rows:
        print(f"| {name:{width}} | {val} |")
    print()
    print("| process | samples | RSS first quarter (MiB) | RSS last quarter (MiB) | max (MiB) | bound (MiB) | |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rss_rows:
        print(f"| {r['proc']} | {r['samples']} | {r['first_quarter_mib']} | {r['last_quarter_mib']} | "
              f"{r['max_mib']} | {r['limit_mib']} | {'ok' if r['ok'] else 'GREW'} |")
    short = [pr for pr in procs if pr.rss and pr.name not in {r["proc"] for r in rss_rows}]
    if short:
        mx = max(k for pr in short for _, k in pr.rss)
        print(f"\n(the {len(short)} shorter-lived incarnations: max RSS {mx / 1024:.1f} MiB)")
    for line in unexpected + logs[:30]:
        print(f"# unexpected: {line}")
    print(f"\nsoak: {'PASS' if ok else 'FAIL'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"procs": args.procs, "seconds": args.seconds, "seed": seed, "tls": tls, "kinds": args.kinds,
                       "kills": kills, "totals": total, "rss_ok": rss_ok, "rss": rss_rows,
                       "unexpected": unexpected + logs, "processes": per_proc, "pass": ok}, f, indent=1)
    if ok and not args.keep:
        subprocess.run(["rm", "-rf", work])
    else:
        print(f"# logs kept in {work}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
