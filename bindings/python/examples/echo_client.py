#!/usr/bin/python3
"""The client of echo_server.py: sends records and checks that each comes back intact.

--sessions N opens N connections from this process, each in its own coroutine
(asyncio.gather), each sending --count records of --size bytes (the contents differ per
session and record) and comparing every echo with what it sent. It prints one line per
session and exits 0 only if every byte came back.

Each session has a worker of its own: Loom keeps one stream per pair of workers (two
endpoints from one worker to the same server would share it, docs/protocols.md,
"Streams"), so connections that must not mix their bytes come from different workers.
All the workers sit in the same asyncio loop, on one thread.

    PYTHONPATH=build/install/lib/python3/dist-packages \\
        /usr/bin/python3 bindings/python/examples/echo_client.py --host 127.0.0.1 --port 13337 \\
        --sessions 4 --count 100 --size 65536
"""

import argparse
import asyncio
import sys
import time

import numpy as np

import loom

END = 2**64 - 1  # the length that ends a session


async def session(ctx, opts, number):
    """One connection: --count records out and back; returns (records verified, seconds)."""
    with ctx.worker() as worker:
        return await talk(worker.connect_to(opts.host, opts.port), opts, number)


async def talk(ep, opts, number):
    """The records of one session on endpoint ``ep``."""
    rng = np.random.default_rng(number)
    echo_header = bytearray(8)
    verified = 0
    start = time.perf_counter()
    for i in range(opts.count):
        payload = rng.integers(0, 256, opts.size, dtype=np.uint8)
        header = opts.size.to_bytes(8, "little")
        echo = np.zeros(opts.size, dtype=np.uint8)
        # Post the receives before sending: the echo can start coming back at once.
        recvs = [ep.stream_recv(echo_header)] + ([ep.stream_recv(echo)] if opts.size else [])
        sends = [ep.stream_send(header)] + ([ep.stream_send(payload)] if opts.size else [])
        await asyncio.gather(*sends, *recvs)
        if bytes(echo_header) != header or not np.array_equal(echo, payload):
            print(f"echo_client: session {number}: record {i} came back different", flush=True)
            break
        verified += 1
    elapsed = time.perf_counter() - start
    await ep.stream_send(END.to_bytes(8, "little"))
    await ep.close()
    return verified, elapsed


async def run(opts):
    with loom.Context() as ctx:
        results = await asyncio.wait_for(
            asyncio.gather(*(session(ctx, opts, n) for n in range(opts.sessions))), opts.timeout)
    ok = True
    for n, (verified, elapsed) in enumerate(results):
        rtt_us = elapsed / max(verified, 1) * 1e6
        print(f"echo_client: session {n}: {verified}/{opts.count} records of {opts.size} bytes verified, "
              f"{rtt_us:.1f} us per round trip", flush=True)
        ok = ok and verified == opts.count
    print("echo_client: OK" if ok else "echo_client: FAILED", flush=True)
    return 0 if ok else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1", help="the server's address")
    parser.add_argument("--port", type=int, default=13337, help="the server's port")
    parser.add_argument("--count", type=int, default=100, help="records per session")
    parser.add_argument("--size", type=int, default=4096, help="bytes per record")
    parser.add_argument("--sessions", type=int, default=1, help="concurrent connections from this process")
    parser.add_argument("--timeout", type=float, default=120, help="give up after this many seconds")
    opts = parser.parse_args()
    return asyncio.run(run(opts))


if __name__ == "__main__":
    sys.exit(main())
