#!/usr/bin/python3
"""The other process of the Python suite's two-process tests (loomtest.Peer starts it).

It makes a Loom context and worker (with LOOM_TLS from its environment), announces
{"event": "ready", "address": <worker address, hex>, "pid": ...} and then executes JSON
commands read from stdin, one per line ({"cmd": name, "id": n, ...arguments}), answering
each with {"id": n, ...results} or {"id": n, "error": text} on its stdout. Between
commands it progresses its worker (sleeping on the worker's event fd and on stdin), so
that a peer's rendezvous, emulated RMA or connection request is served while it idles.
Unsolicited events ({"event": ...}) report active messages and endpoint failures.

Commands executed synchronously wait on their requests with a bound (loomtest.WAIT);
the parent progresses its own worker while it waits for the answer. stdout is kept for
the protocol alone: fd 1 is pointed at stderr so that nothing else can corrupt it.

Usage: peer.py [--features tag,am,...] [--listen]
"""

import argparse
import os
import select
import sys
import time
import traceback

import numpy as np

import loom
from loomtest import WAIT, LineReader, digest, pattern, progress_until, write_line


class Agent:
    """The peer: one worker, its endpoints (by name; "main" is the one to the parent),
    mappings, active-message handlers, and the command loop."""

    def __init__(self, out_fd, features, listen):
        self.out_fd = out_fd
        self.reader = LineReader(0)
        self.ctx = loom.Context(features=features)
        self.worker = self.ctx.worker()
        self.eps = {}
        self.accepted = []
        self.listener = None
        self.mappings = {}
        self.arrays = {}
        self.rkeys = {}
        self.jobs = []       # work handed over by handlers, done from the main loop
        self.pending = None  # the request of a command run with wait=false
        self.running = True
        ready = {"event": "ready", "address": self.worker.address.hex(), "pid": os.getpid()}
        if listen:
            self.listener = self.worker.listen(self.on_connection, host="127.0.0.1", port=0)
            ready["port"] = self.listener.address[1]  # not .port: see test_worker.py
        self.emit(ready)

    # --- plumbing ---
    def emit(self, obj):
        write_line(self.out_fd, obj)

    def on_error(self, ep, status):
        self.emit({"event": "ep_error", "status": status})

    def on_connection(self, conn):
        host, port = conn.client_address
        ep = conn.accept(err_handler=self.on_error)
        self.accepted.append(ep)
        self.eps.setdefault("main", ep)
        self.emit({"event": "accepted", "host": host, "port": port})

    def ep(self, args):
        return self.eps[args.get("ep", "main")]

    def run(self):
        """Progress, handler jobs and commands until "exit" or stdin closes."""
        efd = self.worker.fileno()
        while self.running:
            while self.worker.progress():
                pass
            if self.jobs:
                job = self.jobs.pop(0)
                job()
                continue
            line = self.reader.poll()
            if line is not None:
                self.dispatch(line)
                continue
            if self.reader.eof:
                break
            if self.worker.arm():
                select.select([0, efd], [], [], 1.0)
        self.worker.close()
        self.ctx.close()

    def dispatch(self, line):
        cid = line.get("id")
        try:
            result = getattr(self, "cmd_" + line["cmd"])(line) or {}
        except Exception as exc:  # reported to the parent, whose test fails with it
            traceback.print_exc()
            result = {"error": f"{type(exc).__name__}: {exc}"}
        if self.running:
            self.emit({"id": cid, **result})

    # --- connections ---
    def cmd_connect(self, args):
        """Endpoint to a worker address (hex)."""
        self.eps[args.get("ep", "main")] = self.worker.connect(bytes.fromhex(args["address"]),
                                                              err_handler=self.on_error)

    def cmd_connect_to(self, args):
        """Endpoint to a listener (host, port)."""
        self.eps[args.get("ep", "main")] = self.worker.connect_to(args["host"], args["port"],
                                                                 err_handler=self.on_error)

    def cmd_wait_accepted(self, args):
        """Progresses until ``count`` connections were accepted."""
        n = args.get("count", 1)
        self.progress_until(lambda: len(self.accepted) >= n)
        return {"accepted": len(self.accepted)}

    def cmd_close_ep(self, args):
        req = self.eps.pop(args.get("ep", "main")).close()
        req.wait(timeout=WAIT)

    def cmd_ping(self, args):
        return {"pid": os.getpid()}

    def cmd_exit(self, args):
        self.running = False

    # --- tagged messages ---
    def cmd_recv(self, args):
        """Receives one message into a bytearray of ``size``: its tag, length, digest."""
        buf = bytearray(args["size"])
        req = self.worker.recv(buf, args["tag"], args.get("mask", loom.TAG_MASK_FULL))
        try:
            tag, length = req.wait(timeout=WAIT)
        except loom.LoomError as exc:
            return {"status": exc.status}
        return {"status": "LOOM_OK", "sender_tag": tag, "length": length,
                "sha256": digest(memoryview(buf)[:length])}

    def cmd_echo(self, args):
        """Receives one message, then sends the bytes received back with ``reply_tag``."""
        buf = bytearray(args["size"])
        tag, length = self.worker.recv(buf, args["tag"], args.get("mask", loom.TAG_MASK_FULL)).wait(timeout=WAIT)
        self.ep(args).send(memoryview(buf)[:length], args["reply_tag"]).wait(timeout=WAIT)
        return {"sender_tag": tag, "length": length, "sha256": digest(memoryview(buf)[:length])}

    def cmd_send(self, args):
        """Sends pattern(size, seed) messages ({tag, size, seed, sync}); waits for all
        (unless ``wait`` is false, when only the eager ones are done) and reports each
        status."""
        reqs = []
        for m in args["msgs"]:
            data = pattern(m["size"], m["seed"])
            reqs.append(self.ep(args).send(data, m["tag"], sync=m.get("sync", False)))
        statuses = []
        for req in reqs:
            try:
                req.wait(timeout=WAIT)
            except loom.LoomError:
                pass  # its status is reported
            statuses.append(req.status)
        return {"statuses": statuses}

    def cmd_send_when_told(self, args):
        """Waits for a "go" line on stdin (or, as a bound, ``bound`` seconds), then sends
        pattern(size, seed) with ``tag``; reports whether it was told (a parent stuck in a
        wait that holds the GIL cannot tell it)."""
        end = time.monotonic() + args["bound"]
        line = self.reader.poll()
        while line is None and not self.reader.eof and time.monotonic() < end:
            select.select([0], [], [], max(0.0, end - time.monotonic()))
            line = self.reader.poll()
        told = line is not None and line.get("cmd") == "go"
        self.ep(args).send(pattern(args["size"], args["seed"]), args["tag"]).wait(timeout=WAIT)
        return {"told": told}

    def cmd_probe(self, args):
        """Whether a message of ``tag`` waits here (probe, without removing it)."""
        while self.worker.progress():
            pass
        msg = self.worker.probe(args["tag"])
        return {"found": msg is not None, "length": None if msg is None else msg.length}

    # --- active messages ---
    def cmd_am_echo(self, args):
        """Installs a handler for ``am_id`` that reports each message (event "am") and
        answers it through its reply endpoint with ``reply_id``, same header and data."""
        reply_id = args["reply_id"]

        def handler(msg):
            # A rendezvous message is received from the main loop: receive() needs progress.
            self.jobs.append(lambda: self.echo_am(msg, reply_id))

        self.worker.set_am_handler(args["am_id"], handler)

    def echo_am(self, msg, reply_id):
        data = msg.receive().wait(timeout=WAIT)  # bytearray of msg.length bytes
        self.emit({"event": "am", "header": msg.header.hex(), "length": msg.length, "is_rndv": msg.is_rndv,
                   "eager_data": msg.data is not None, "has_reply_ep": msg.reply_ep is not None,
                   "sha256": digest(data)})
        if msg.reply_ep is not None:
            msg.reply_ep.am_send(reply_id, msg.header, data, eager=not msg.is_rndv, rndv=msg.is_rndv).wait(timeout=WAIT)

    def cmd_am_collect(self, args):
        """Installs a handler for ``am_id`` that reports every message (event "am"), its
        data received (a rendezvous one from the main loop)."""

        def handler(msg):
            self.jobs.append(lambda: self.report_am(msg))

        self.worker.set_am_handler(args["am_id"], handler)

    def report_am(self, msg):
        data = msg.receive().wait(timeout=WAIT)
        self.emit({"event": "am", "header": msg.header.hex(), "length": msg.length, "is_rndv": msg.is_rndv,
                   "eager_data": msg.data is not None, "has_reply_ep": msg.reply_ep is not None,
                   "sha256": digest(data)})

    def cmd_am_send(self, args):
        """Sends an active message of pattern(size, seed) with a header (hex); reports
        its status (a rendezvous one completes when the receiver took or dropped it)."""
        req = self.ep(args).am_send(args["am_id"], bytes.fromhex(args.get("header", "")),
                                    pattern(args["size"], args["seed"]), reply=args.get("reply", False),
                                    eager=args.get("eager", False), rndv=args.get("rndv", False))
        if not args.get("wait", True):
            self.pending = req
            return {}
        try:
            req.wait(timeout=WAIT)
        except loom.LoomError:
            pass
        return {"status": req.status}

    def cmd_wait_pending(self, args):
        """Waits for the request of a command run with wait=false; reports its status."""
        try:
            self.pending.wait(timeout=args.get("limit", WAIT))
        except loom.LoomError:
            pass
        return {"status": self.pending.status}

    # --- streams ---
    def cmd_stream_echo(self, args):
        """Receives ``size`` stream bytes (waitall), sends them back."""
        buf = bytearray(args["size"])
        n = self.ep(args).stream_recv(buf, waitall=True).wait(timeout=WAIT)
        self.ep(args).stream_send(buf).wait(timeout=WAIT)
        return {"length": n, "sha256": digest(buf)}

    def cmd_stream_send(self, args):
        """Sends pattern(size, seed) on the stream, in ``pieces`` sends."""
        data = pattern(args["size"], args["seed"])
        cuts = np.linspace(0, len(data), args.get("pieces", 1) + 1).astype(int)
        reqs = [self.ep(args).stream_send(data[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]
        for req in reqs:
            req.wait(timeout=WAIT)

    def cmd_stream_recv(self, args):
        """Receives ``size`` stream bytes (waitall or not): the length and digest."""
        buf = bytearray(args["size"])
        n = self.ep(args).stream_recv(buf, waitall=args.get("waitall", True)).wait(timeout=WAIT)
        return {"length": n, "sha256": digest(memoryview(buf)[:n])}

    # --- memory ---
    def cmd_mem_map(self, args):
        """Maps a numpy uint64 array of ``count`` elements (0, 1, 2, ... times ``step``),
        or with ``allocate`` memory Loom allocates; answers its address, length, key."""
        name = args.get("name", "mem")
        if args.get("allocate"):
            mh = self.ctx.mem_map(length=args["count"] * 8)
            arr = np.frombuffer(mh, dtype=np.uint64)
            arr[:] = np.arange(args["count"], dtype=np.uint64) * np.uint64(args.get("step", 1))
        else:
            arr = np.arange(args["count"], dtype=np.uint64) * np.uint64(args.get("step", 1))
            mh = self.ctx.mem_map(arr)
        self.mappings[name] = mh
        self.arrays[name] = arr
        return {"address": mh.address, "length": mh.length, "rkey": mh.pack_rkey().hex(),
                "array_address": arr.__array_interface__["data"][0]}

    def cmd_dump(self, args):
        """What peers' RMA left in a mapped array: the digest of all of it and the bytes
        (hex) of [offset, offset + length) (default: all)."""
        raw = self.arrays[args.get("name", "mem")].view(np.uint8)
        offset = args.get("offset", 0)
        length = args.get("length", len(raw) - offset)
        return {"sha256": digest(raw), "hex": raw[offset:offset + length].tobytes().hex()}

    def cmd_unmap(self, args):
        self.mappings.pop(args.get("name", "mem")).close()
        self.arrays.pop(args.get("name", "mem"))

    def cmd_rma(self, args):
        """put of pattern(size, seed) at ``address`` of the parent's memory (key hex),
        flush, get it back; answers the digest of what the get read."""
        ep = self.ep(args)
        rkey = ep.unpack_rkey(bytes.fromhex(args["rkey"]))
        data = pattern(args["size"], args["seed"])
        ep.put(data, args["address"], rkey).wait(timeout=WAIT)
        ep.flush().wait(timeout=WAIT)
        back = bytearray(args["size"])
        ep.get(back, args["address"], rkey).wait(timeout=WAIT)
        ep.flush().wait(timeout=WAIT)
        old = ep.atomic("add", args.get("add", 0), args["address"], rkey, fetch=True).wait(timeout=WAIT)
        rkey.close()
        return {"sha256": digest(back), "fetched": old}

    # --- helpers ---
    def progress_until(self, predicate):
        progress_until(self.worker, predicate, timeout=WAIT)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--features", default=None, help="comma-separated Context features (default: all)")
    parser.add_argument("--listen", action="store_true", help="listen on 127.0.0.1 (port in the ready event)")
    opts = parser.parse_args()
    # The protocol owns the original stdout; anything else written to fd 1 goes to stderr.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    features = set(opts.features.split(",")) if opts.features else None
    agent = Agent(out_fd, features, opts.listen)
    agent.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
