"""Fixtures of the Python suite (docs/python.md).

- ``tls``: the transport of a module's two-process tests, "shm" then "tcp": LOOM_TLS is
  set in this process (Loom reads it at every loom_init) and given to the peers.
- ``pair``: this process's context and worker, a peer process (peer.py), and endpoints
  both ways created from the worker addresses; one pair per module and transport, so the
  many small cases do not each pay a process start.
- ``sock_pair``: the same, connected through a listener of this process (connect_to /
  accept), so both sides hold the two ends of one connection (streams need that).
- ``fresh_pair``: a ``pair`` of its own for one test (tests that kill or break the peer).
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import loom  # noqa: E402  (after the path: the suite's helpers sit beside this file)
from loomtest import WAIT, Peer, progress_until  # noqa: E402

TRANSPORTS = ["shm", "tcp"]


class Pair:
    """This process's side of a two-process test and the peer process."""

    def __init__(self, tls, via_listener=False, peer_args=()):
        self.tls = tls
        self.ctx = loom.Context()
        self.worker = self.ctx.worker()
        self.errors = []  # (endpoint, status) from the endpoint's error handler
        self.peer = Peer(tls, args=peer_args)
        try:
            if via_listener:
                accepted = []
                self.listener = self.worker.listen(
                    lambda conn: accepted.append(conn.accept(err_handler=self.on_error)),
                    host="127.0.0.1", port=0)
                self.peer.call("connect_to", host="127.0.0.1", port=self.listener.address[1], progress=self.worker)
                progress_until(self.worker, lambda: accepted, what="the peer's connection")
                self.ep = accepted[0]
            else:
                self.listener = None
                self.ep = self.worker.connect(self.peer.address, err_handler=self.on_error)
                self.peer.call("connect", address=self.worker.address.hex(), progress=self.worker)
        except BaseException:
            self.close()
            raise

    def on_error(self, ep, status):
        self.errors.append((ep, status))

    def close(self):
        """Stops the peer (bounded), then closes this side, children first."""
        self.peer.close()
        self.worker.close()
        self.ctx.close()


def _set_tls(value):
    old = os.environ.get("LOOM_TLS")
    os.environ["LOOM_TLS"] = value
    return old


def _restore_tls(old):
    if old is None:
        os.environ.pop("LOOM_TLS", None)
    else:
        os.environ["LOOM_TLS"] = old


@pytest.fixture(scope="module", params=TRANSPORTS)
def tls(request):
    """The transport (LOOM_TLS) of this process and its peers for a module's tests."""
    old = _set_tls(request.param)
    yield request.param
    _restore_tls(old)


@pytest.fixture(scope="module")
def pair(tls):
    """A Pair connected by worker addresses, shared by a module's tests on one transport."""
    p = Pair(tls)
    yield p
    p.close()


@pytest.fixture(scope="module")
def sock_pair(tls):
    """A Pair connected through this process's listener, shared by a module's tests."""
    p = Pair(tls, via_listener=True)
    yield p
    p.close()


@pytest.fixture
def fresh_pair(tls):
    """A Pair of one test's own."""
    p = Pair(tls)
    yield p
    p.close()


@pytest.fixture
def ctx():
    """A context of one test's own, closed after it."""
    with loom.Context() as c:
        yield c


@pytest.fixture
def two_workers(ctx):
    """Two workers of one context and an endpoint from the first to the second: the
    in-process cases that need no second process (errors, lifetimes)."""
    a = ctx.worker()
    b = ctx.worker()
    ep = a.connect(b.address)
    yield a, b, ep
    a.close()
    b.close()


def pytest_report_header(config):
    return [f"loom {loom.__version__} from {os.path.dirname(loom.__file__)}; peer waits bounded by {WAIT:.0f} s"]
