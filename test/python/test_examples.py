"""The examples of bindings/python/examples run as their README says, over shm and tcp
(each in processes of its own, bounded by subprocess timeouts), and print what they
should: the echo server with three client processes, the ping-pong in both of its
forms (self-spawning, and server and client started here), the RMA example."""

import os
import re
import select
import subprocess
import sys

import pytest

import loom
from loomtest import HERE, WAIT

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bindings", "python", "examples")


@pytest.fixture
def env(tls):
    """The environment of the examples: this process's loom package, the transport."""
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(loom.__file__)))
    return dict(os.environ, LOOM_TLS=tls,
                PYTHONPATH=os.pathsep.join([pkg_root, os.environ.get("PYTHONPATH", "")]))


def example(name):
    return [sys.executable, os.path.join(EXAMPLES, name)]


def run(argv, env):
    """Runs an example to its end (bounded); returns its output, asserting exit status 0."""
    proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=WAIT * 2)
    assert proc.returncode == 0, proc.stdout
    return proc.stdout


def start_server(argv, env):
    """Starts a server example; returns (process, port) once it printed 'listening on'."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if not select.select([proc.stdout], [], [], WAIT)[0]:  # the server prints it first thing
        proc.kill()
        raise AssertionError(f"{argv} printed nothing in {WAIT} s")
    line = proc.stdout.readline()
    match = re.search(r"listening on (\S+):(\d+)", line)
    if not match:
        proc.kill()
        raise AssertionError(f"the server did not start: {line}{proc.stdout.read()}")
    return proc, int(match.group(2))


def finish(proc):
    """The rest of a server's output once it exited by itself (bounded)."""
    try:
        out, _ = proc.communicate(timeout=WAIT * 2)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"{proc.args} did not exit: {proc.communicate()[0]}") from None
    assert proc.returncode == 0, out
    return out


def test_echo_server_and_clients(env):
    """echo_server.py serves three echo_client.py processes at once (2 + 2 + 1 sessions,
    records of 0 B, 1000 B and 300 kB); every client verifies every record; the server
    counts 5 sessions and every record."""
    server, port = start_server(example("echo_server.py") + ["--host", "127.0.0.1", "--port", "0",
                                                            "--clients", "5"], env)
    try:
        clients = [subprocess.Popen(example("echo_client.py") + ["--host", "127.0.0.1", "--port", str(port),
                                                                 "--sessions", str(n), "--count", "30",
                                                                 "--size", str(size)],
                                    env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                   for n, size in ((2, 0), (2, 1000), (1, 300_000))]
        for client in clients:
            out, _ = client.communicate(timeout=WAIT * 2)
            assert client.returncode == 0 and "echo_client: OK" in out, out
            assert len(re.findall(r"session \d+: 30/30 records of \d+ bytes verified", out)) >= 1, out
        out = finish(server)
    finally:
        if server.poll() is None:
            server.kill()
    bytes_echoed = 2 * 30 * 1000 + 30 * 300_000
    assert f"5 sessions (0 failed), {5 * 30} records, {bytes_echoed} bytes echoed" in out, out


def check_pingpong_output(out, sizes):
    assert "numpy_pingpong: all arrays verified" in out, out
    for size in sizes:
        match = re.search(rf"^\s*{size}\s+([0-9.]+)\s+([0-9.]+)\s*$", out, re.M)
        assert match, f"no figures for {size} B in:\n{out}"
        assert float(match.group(1)) > 0


def test_numpy_pingpong_self_spawning(env):
    """numpy_pingpong.py with no role starts its server and prints a latency per size."""
    out = run(example("numpy_pingpong.py") + ["--sizes", "8,4096,1048576", "--iters", "50"], env)
    check_pingpong_output(out, [8, 4096, 1048576])
    assert "server answered 180 pings of 3 sizes" in out, out  # (50 + 10 warm-up) x 3


def test_numpy_pingpong_server_and_client(env):
    """--server and --client as two processes started here."""
    server, port = start_server(example("numpy_pingpong.py") + ["--server", "--host", "127.0.0.1", "--port", "0"],
                                env)
    try:
        out = run(example("numpy_pingpong.py") + ["--client", "127.0.0.1", "--port", str(port), "--sizes", "0,100",
                                                  "--iters", "20", "--warmup", "0"], env)
        check_pingpong_output(out, [0, 100])
        # The client's schedule rules: 2 sizes x 20 round trips, no warm-up.
        assert "server answered 40 pings of 2 sizes" in finish(server)
    finally:
        if server.poll() is None:
            server.kill()


EXPECTED_ARRAY = [10, 20, 30, 40, 50, 60, 70, 80, 5, 7, 0xABCD, 99, 0xFF & 0x0F, 0xF0 | 0x0F, 0xFF ^ 0x3C, 0]


def test_rma_example(env):
    """rma.py: the client reads back what it put, gets the atomics' old values, and the
    server's array holds exactly what the operations leave."""
    out = run(example("rma.py"), env)
    assert "rma: client got back: 10 20 30 40 50 60 70 80" in out, out
    assert "fetch-add returned 0, swap returned 0, cswap returned 0 then 99" in out, out
    match = re.search(r"rma: server array: (.*)$", out, re.M)
    assert match, out
    assert [int(v, 16) for v in match.group(1).split()] == EXPECTED_ARRAY
