"""asyncio integration (docs/python.md: ``await req``, the worker's event fd in the loop,
Worker.detach): an echo server serving many concurrent clients from one worker and one
thread (coroutines of this process, then client processes), awaits on tagged sends and
receives gathered by the dozen, errors through await, and a loop that sleeps while
nothing happens."""

import asyncio
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import loom
from loomtest import HERE, WAIT, digest, pattern, progress_until

END = 2**64 - 1
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bindings", "python", "examples")


async def echo_session(ep, served):
    """The server side of one connection: echo length-prefixed records until END."""
    header = bytearray(8)
    while True:
        await ep.stream_recv(header)
        length = int.from_bytes(header, "little")
        if length == END:
            break
        payload = bytearray(length)
        if length:
            await ep.stream_recv(payload)
        await asyncio.gather(ep.stream_send(header), *([ep.stream_send(payload)] if length else []))
        served.append(length)
    await ep.close()


ECHO_AM, REPLY_AM = 100, 101


async def am_echo_server(worker, count):
    """Serves ``count`` active messages: each is answered through its reply endpoint, in
    a coroutine of its own (received first if it came by rendezvous)."""

    async def answer(msg):
        data = await msg.receive()
        await msg.reply_ep.am_send(REPLY_AM, header=msg.header, data=data)

    answers = []
    async for msg in worker.am_messages(ECHO_AM):
        answers.append(asyncio.ensure_future(answer(msg)))
        if len(answers) == count:
            break
    await asyncio.gather(*answers)


def test_echo_server_and_16_clients_on_one_worker(tls):
    """An echo server on ONE worker, one thread: 16 client coroutines (on a second worker,
    each with its own endpoint) send active messages of 0 B to 1 MiB (eager and
    rendezvous) concurrently; every answer comes back intact to its client."""
    sizes = [0, 1, 8, 100, 5000, 65536, 1 << 20, 3]
    clients = 16

    async def main():
        with loom.Context() as ctx, ctx.worker() as server, ctx.worker() as client_worker:
            server_task = asyncio.ensure_future(am_echo_server(server, clients * len(sizes)))
            waiting = {}  # header -> future of the client waiting for that answer

            async def route_answers():
                async for msg in client_worker.am_messages(REPLY_AM):
                    waiting.pop(msg.header).set_result(bytes(await msg.receive()))
                    if not waiting and server_task.done():
                        return

            async def client(number):
                ep = client_worker.connect(server.address)
                intact = 0
                for i, size in enumerate(sizes):
                    header = b"%02d:%02d" % (number, i)
                    answer = asyncio.get_running_loop().create_future()
                    waiting[header] = answer
                    data = pattern(size, number * 100 + i)
                    await ep.am_send(ECHO_AM, header=header, data=data, reply=True)
                    intact += await answer == data.tobytes()
                return intact

            router = asyncio.ensure_future(route_answers())
            results = await asyncio.gather(*(client(n) for n in range(clients)))
            await server_task
            router.cancel()
            assert threading.active_count() == 1, "the bindings started a Python thread"
            return results

    results = asyncio.run(asyncio.wait_for(main(), WAIT))
    assert results == [len(sizes)] * clients


class ProcessOutput:
    """A child process whose stdout is read by the running loop (add_reader: no thread,
    unlike asyncio's subprocess support in 3.11)."""

    def __init__(self, started, argv, env):
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        started.append(self.proc)
        self.data = b""
        self.closed = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().add_reader(self.proc.stdout.fileno(), self._read)

    def _read(self):
        chunk = os.read(self.proc.stdout.fileno(), 65536)
        self.data += chunk
        if not chunk:
            asyncio.get_running_loop().remove_reader(self.proc.stdout.fileno())
            self.proc.stdout.close()
            self.closed.set_result(None)

    async def finish(self):
        await self.closed
        return self.proc.wait(timeout=WAIT), self.data.decode(errors="replace")


def test_echo_server_with_client_processes(tls):
    """The server coroutines of this process on one worker; three echo_client.py
    processes with two sessions each connect at once: every record verified."""
    served = []
    started = []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(loom.__file__))), os.environ.get("PYTHONPATH", "")]))

    async def main():
        loop = asyncio.get_running_loop()
        sessions = []
        with loom.Context() as ctx, ctx.worker() as worker:
            listener = worker.listen(
                lambda conn: sessions.append(loop.create_task(echo_session(conn.accept(), served))),
                host="127.0.0.1", port=0)
            worker.attach(loop)  # progress connection requests before anything is awaited here
            port = listener.address[1]
            client = [sys.executable, os.path.join(EXAMPLES, "echo_client.py"), "--port", str(port),
                      "--sessions", "2", "--count", "20", "--timeout", str(WAIT)]
            clients = [ProcessOutput(started, client + ["--size", str(size)], env) for size in (0, 4096, 200_000)]
            outputs = [await c.finish() for c in clients]
            await asyncio.gather(*sessions)
            listener.close()
        return outputs

    try:
        outputs = asyncio.run(asyncio.wait_for(main(), WAIT * 2))
    finally:
        for proc in started:  # a client left behind by a failure must not outlive the test
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=WAIT)
    for status, text in outputs:
        assert status == 0 and "echo_client: OK" in text, text
    assert len(served) == 3 * 2 * 20


def test_gather_many_tag_receives_and_sends(pair):
    """32 receives awaited together complete with their own tags (the peer sends in
    reverse order), and awaited sends (eager and rendezvous) reach the peer."""
    p = pair
    n = 32

    async def main():
        bufs = [np.zeros(1000 + i, dtype=np.uint8) for i in range(n)]
        recvs = [p.worker.recv(bufs[i], 0xA000 + i) for i in range(n)]
        cid = p.peer.send("send", msgs=[{"tag": 0xA000 + i, "size": 1000 + i, "seed": i} for i in reversed(range(n))])
        results = await asyncio.gather(*recvs)
        assert results == [(0xA000 + i, 1000 + i) for i in range(n)]
        for i in range(n):
            assert np.array_equal(bufs[i], pattern(1000 + i, i))
        # Now our sends, one eager and one rendezvous, awaited while the peer echoes.
        out = []
        for size in (8, 4 << 20):
            data = pattern(size, size)
            back = np.zeros(size, dtype=np.uint8)
            echo = p.peer.send("echo", size=size, tag=0xB000, reply_tag=0xB001)
            got, sent = await asyncio.gather(p.worker.recv(back, 0xB001), p.ep.send(data, 0xB000))
            assert sent is None and got == (0xB001, size)
            assert np.array_equal(back, data)
            out.append(echo)
        return cid, out

    cid, echoes = asyncio.run(asyncio.wait_for(main(), WAIT))
    p.worker.detach()
    assert p.peer.reply(cid, progress=p.worker)["statuses"] == ["LOOM_OK"] * n
    for echo, size in zip(echoes, (8, 4 << 20)):
        assert p.peer.reply(echo, progress=p.worker)["sha256"] == digest(pattern(size, size))


def test_errors_come_out_of_await(two_workers):
    """await raises the request's error: a deadline, a truncation, a cancel."""
    a, b, ep = two_workers

    async def main():
        with pytest.raises(loom.TimedOut):
            await b.recv(bytearray(8), 0xC000, deadline=0.2)
        small = b.recv(bytearray(4), 0xC001)
        await ep.send(b"0123456789", 0xC001)
        with pytest.raises(loom.MessageTruncated):
            await small
        never = b.recv(bytearray(8), 0xC002)
        never.cancel()
        with pytest.raises(loom.Canceled):
            await never
        done = ep.send(b"x", 0xC003)
        assert await done is None and await done is None  # a completed request awaits again
        assert await b.recv(bytearray(1), 0xC003) == (0xC003, 1)

    asyncio.run(asyncio.wait_for(main(), WAIT))


def test_worker_moves_to_a_new_loop_and_detaches(two_workers):
    """A worker awaited in one asyncio.run and then in another works in both (the reader
    follows the loop); detach() is idempotent."""
    a, b, ep = two_workers

    async def round_trip(tag):
        recv = b.recv(bytearray(5), tag)
        await ep.send(b"hello", tag)
        return await recv

    assert asyncio.run(asyncio.wait_for(round_trip(0xD000), WAIT)) == (0xD000, 5)
    assert asyncio.run(asyncio.wait_for(round_trip(0xD001), WAIT)) == (0xD001, 5)
    a.detach()
    b.detach()
    b.detach()
    assert asyncio.run(asyncio.wait_for(round_trip(0xD002), WAIT)) == (0xD002, 5)


def test_closing_a_worker_inside_the_loop_removes_its_reader(ctx):
    """close() in a running loop removes the worker's fd from it: a new worker (which may
    get the same fd number) can be awaited in the same loop right after."""

    async def main():
        for i in range(5):
            w = ctx.worker()
            ep = w.connect(w.address)
            recv = w.recv(bytearray(3), 0xE000 + i)
            await ep.send(b"abc", 0xE000 + i)
            assert await recv == (0xE000 + i, 3)
            w.close()
            await asyncio.sleep(0)  # let the loop poll once with the closed worker gone

    asyncio.run(asyncio.wait_for(main(), WAIT))


def test_idle_await_sleeps(tls, two_workers):
    """While a coroutine awaits a receive that nothing will match, the loop sleeps on the
    worker's fd: under half a second of CPU for a one-second wait. (The connection is
    set up first, both workers progressing, as two live processes would.)"""
    a, b, ep = two_workers
    warm = b.recv(bytearray(1), 0xF001)
    ep.send(b"w", 0xF001)
    progress_until([a, b], warm.done, what="the warm-up message")

    async def main():
        recv = b.recv(bytearray(8), 0xF000)
        task = asyncio.ensure_future(recv)  # a task awaiting the request
        cpu = time.process_time()
        done, _ = await asyncio.wait([task], timeout=1.0)
        used = time.process_time() - cpu
        assert not done
        recv.cancel()
        with pytest.raises(loom.Canceled):
            await task
        return used

    used = asyncio.run(asyncio.wait_for(main(), WAIT))
    assert used < 0.5, f"the loop spun: {used:.2f} s of CPU in a 1 s idle wait"
