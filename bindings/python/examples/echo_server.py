#!/usr/bin/python3
"""An asyncio echo server: one Loom worker, one thread, any number of clients.

Each client connects to the listener (worker.listen); on_connection accepts it and
starts a coroutine for the session. A session is a Loom stream of records: an 8-byte
little-endian length, then that many bytes; the server sends every record back as it
came. A length of 2**64 - 1 ends the session. Every ``await`` is on a loom.Request:
the worker's event fd sits in the asyncio loop, so while no client has anything to say
the process sleeps.

    PYTHONPATH=build/install/lib/python3/dist-packages \\
        /usr/bin/python3 bindings/python/examples/echo_server.py --port 13337
    ... then echo_client.py --port 13337 (see README.md)

--clients N makes the server exit after N sessions ended (the tests use it); the
default serves until interrupted (Ctrl-C).
"""

import argparse
import asyncio
import signal
import sys

import loom

END = 2**64 - 1  # the length that ends a session


class Stats:
    """What the server did, for its last line."""

    def __init__(self):
        self.sessions = 0
        self.failed = 0
        self.records = 0
        self.bytes = 0


async def session(ep, peer, stats):
    """Echoes records on one endpoint until the client says goodbye or fails."""
    header = bytearray(8)
    try:
        while True:
            await ep.stream_recv(header)  # waitall: all 8 bytes
            length = int.from_bytes(header, "little")
            if length == END:
                break
            payload = bytearray(length)
            if length:
                await ep.stream_recv(payload)
            # Two sends in flight at once; the stream keeps their order.
            sends = [ep.stream_send(header)] + ([ep.stream_send(payload)] if length else [])
            await asyncio.gather(*sends)
            stats.records += 1
            stats.bytes += length
    except loom.ConnectionError as exc:
        stats.failed += 1
        print(f"echo_server: client {peer[0]}:{peer[1]} went away: {exc.status}", flush=True)
    finally:
        try:
            await ep.close()  # flushes what is still queued, then closes
        except loom.LoomError:
            pass  # the client is gone already
        stats.sessions += 1


async def serve(opts):
    loop = asyncio.get_running_loop()
    stats = Stats()
    all_done = asyncio.Event()
    tasks = set()

    def on_connection(conn):
        # Runs during the worker's progress, inside the loop: start the session's coroutine.
        peer = conn.client_address
        task = loop.create_task(session(conn.accept(), peer, stats))
        tasks.add(task)

        def finished(t):
            tasks.discard(t)
            if opts.clients and stats.sessions >= opts.clients:
                all_done.set()

        task.add_done_callback(finished)

    with loom.Context() as ctx, ctx.worker() as worker:
        listener = worker.listen(on_connection, host=opts.host, port=opts.port)
        # Nothing is awaited until a client comes: register the worker with the loop now,
        # so that connection requests are progressed while the server waits.
        worker.attach(loop)
        host, port = listener.address
        print(f"echo_server: listening on {host}:{port}", flush=True)
        loop.add_signal_handler(signal.SIGINT, all_done.set)
        loop.add_signal_handler(signal.SIGTERM, all_done.set)
        await all_done.wait()
        for task in list(tasks):
            task.cancel()
        listener.close()
        worker.detach()
    print(f"echo_server: {stats.sessions} sessions ({stats.failed} failed), {stats.records} records, "
          f"{stats.bytes} bytes echoed", flush=True)
    return 0 if stats.failed == 0 else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default: all)")
    parser.add_argument("--port", type=int, default=13337, help="port (0: any free one, printed)")
    parser.add_argument("--clients", type=int, default=0, help="exit after this many sessions (0: never)")
    opts = parser.parse_args()
    return asyncio.run(serve(opts))


if __name__ == "__main__":
    sys.exit(main())
