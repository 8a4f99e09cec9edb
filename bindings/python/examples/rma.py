#!/usr/bin/python3
"""Remote memory access to a numpy array: put, get and atomics, between two processes.

The server maps a numpy array of 16 uint64 (ctx.mem_map(array): Loom registers the
array's own memory, no copy), and sends its client the array's address and packed
remote key in a tagged message. The client unpacks the key (ep.unpack_rkey) and works
on the server's array without the server doing anything but progress:

    elements 0..7   put [10, 20, ..., 80], then read back with get
    element  8      atomic add 5 (no result)
    element  9      fetching add 7 (returns the old value, 0)
    element  10     swap in 0xABCD (returns the old value)
    element  11     compare-and-swap: 0 -> 99 (succeeds), then 0 -> 77 (fails: it is 99)
    elements 12..14 put 0xFF, 0xF0, 0xFF first, then and 0x0F, or 0x0F, xor 0x3C

then flushes and tells the server, which prints its array: what the client did.

    /usr/bin/python3 rma.py --server --port 13339      # one terminal
    /usr/bin/python3 rma.py --client 127.0.0.1 --port 13339
    /usr/bin/python3 rma.py                            # or both, the server as a child
"""

import argparse
import os
import subprocess
import sys

import numpy as np

import loom

KEY, DONE = 1, 2  # tags


def spin(worker, *requests):
    """Progresses ``worker`` until every request is done; returns their results."""
    while not all(r.done() for r in requests):
        worker.progress()
    return [r.result for r in requests]


def serve(opts):
    with loom.Context(features={"tag", "rma", "amo"}) as ctx, ctx.worker() as worker:
        array = np.zeros(16, dtype=np.uint64)
        mapping = ctx.mem_map(array)  # peers may now read, write and update the array
        accepted = []
        listener = worker.listen(lambda conn: accepted.append(conn.accept()), host=opts.host, port=opts.port)
        host, port = listener.address
        print(f"rma: server listening on {host}:{port}", flush=True)
        while not accepted:
            worker.progress()
        ep = accepted[0]
        # The array's address, then the packed key: all a peer needs to reach it.
        spin(worker, ep.send(mapping.address.to_bytes(8, "little") + mapping.pack_rkey(), KEY))
        spin(worker, worker.recv(bytearray(1), DONE))  # progress serves the client's accesses meanwhile
        print("rma: server array:", " ".join(hex(int(v)) for v in array), flush=True)
        mapping.close()
        spin(worker, ep.close())
    return 0


def client(opts):
    with loom.Context(features={"tag", "rma", "amo"}) as ctx, ctx.worker() as worker:
        ep = worker.connect_to(opts.client, opts.port)
        # The key's length is not known in advance: probe the message, then receive it.
        msg = None
        while msg is None:
            worker.progress()
            msg = worker.probe(KEY, remove=True)
        blob = bytearray(msg.length)
        spin(worker, worker.recv_message(blob, msg))
        base = int.from_bytes(blob[:8], "little")
        rkey = ep.unpack_rkey(bytes(blob[8:]))

        def at(i):
            return base + 8 * i  # the address of element i of the server's array

        spin(worker, ep.put(np.arange(10, 90, 10, dtype=np.uint64), at(0), rkey),
             ep.put(np.array([0xFF, 0xF0, 0xFF], dtype=np.uint64), at(12), rkey))
        spin(worker, ep.flush())
        back = np.zeros(8, dtype=np.uint64)
        spin(worker, ep.get(back, at(0), rkey))
        print("rma: client got back:", " ".join(str(int(v)) for v in back), flush=True)

        spin(worker, ep.atomic("add", 5, at(8), rkey))
        old_add, = spin(worker, ep.atomic("add", 7, at(9), rkey, fetch=True))
        old_swap, = spin(worker, ep.atomic("swap", 0xABCD, at(10), rkey))
        cswap_ok, = spin(worker, ep.atomic("cswap", 99, at(11), rkey, compare=0))
        cswap_no, = spin(worker, ep.atomic("cswap", 77, at(11), rkey, compare=0))
        spin(worker, ep.atomic("and", 0x0F, at(12), rkey), ep.atomic("or", 0x0F, at(13), rkey),
             ep.atomic("xor", 0x3C, at(14), rkey))
        spin(worker, ep.flush())
        print(f"rma: client fetch-add returned {old_add}, swap returned {old_swap}, "
              f"cswap returned {cswap_ok} then {cswap_no}", flush=True)
        rkey.close()
        spin(worker, ep.send(b"!", DONE))
        spin(worker, ep.close())
    return 0


def both(opts):
    argv = [sys.executable, os.path.abspath(__file__), "--server", "--host", "127.0.0.1", "--port", "0"]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    line = server.stdout.readline()
    if "listening on" not in line:
        server.kill()
        print(f"rma: the server did not start: {line!r}", file=sys.stderr)
        return 1
    opts.client, opts.port = "127.0.0.1", int(line.rsplit(":", 1)[1])
    status = client(opts)
    print(server.stdout.read(), end="", flush=True)
    return status or server.wait(timeout=60)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    role = parser.add_mutually_exclusive_group()
    role.add_argument("--server", action="store_true", help="map the array and wait for one client")
    role.add_argument("--client", metavar="HOST", help="connect to the server at HOST")
    parser.add_argument("--host", default="0.0.0.0", help="the server's listening address")
    parser.add_argument("--port", type=int, default=13339, help="the server's port (0: any, printed)")
    opts = parser.parse_args()
    if opts.server:
        return serve(opts)
    if opts.client:
        return client(opts)
    return both(opts)


if __name__ == "__main__":
    sys.exit(main())
