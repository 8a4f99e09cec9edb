"""Loom for Python: tagged messages, active messages, streams, RMA and atomics.

The classes come from the compiled extension ``loom._loom`` (pybind11 over Loom's C
API); this module adds the exceptions and asyncio: ``await request`` in a coroutine
registers the worker's event fd with the running loop. docs/python.md is the reference.
"""

import asyncio
import collections

from . import _loom
from ._loom import (AmMessage, ConnRequest, Context, Endpoint, Listener, MemoryHandle,
                    RemoteKey, Request, TagMessage, Worker, get_async_spin_us, set_async_spin_us,
                    status_name, status_string)

__version__ = "0.1.0"
__all__ = [
    "AmMessage", "Canceled", "ConnRequest", "ConnectionError", "Context", "Endpoint",
    "InvalidParam", "Listener", "LoomError", "MemoryHandle", "MessageTruncated", "NoResource",
    "RemoteKey", "Request", "TAG_MASK_FULL", "TagMessage", "TimedOut", "Worker",
    "get_async_spin_us", "set_async_spin_us", "status_name", "status_string",
]

TAG_MASK_FULL = (1 << 64) - 1


class LoomError(Exception):
    """A Loom operation failed: ``.status`` is the C name, ``.code`` the number."""

    def __init__(self, code, what=""):
        self.code = code
        self.status = status_name(code)
        self.what = what
        text = status_string(code)
        super().__init__(f"{what}: {text} ({self.status})" if what else f"{text} ({self.status})")


class TimedOut(LoomError):
    """LOOM_ERR_TIMED_OUT: a deadline passed (or Request.wait's timeout)."""


class Canceled(LoomError):
    """LOOM_ERR_CANCELED: the operation was cancelled, or its worker closed."""


class MessageTruncated(LoomError):
    """LOOM_ERR_MESSAGE_TRUNCATED: the message was longer than the receive buffer."""


class ConnectionError(LoomError):  # pylint: disable=redefined-builtin
    """The peer or the connection failed (reset, refused, unreachable, timed out...)."""


class NoResource(LoomError):
    """LOOM_ERR_NO_RESOURCE."""


class InvalidParam(LoomError):
    """LOOM_ERR_INVALID_PARAM: a bad argument, or a closed object."""


_CLASSES = {-7: TimedOut, -6: Canceled, -70: MessageTruncated, -1: NoResource, -3: InvalidParam}
for _code in (-40, -41, -42, -43, -44, -45, -46):  # unreachable .. peer timeout
    _CLASSES[_code] = ConnectionError


def _make_error(code, what):
    return _CLASSES.get(code, LoomError)(code, what)


_loom._set_error_factory(_make_error)


# --- asyncio ------------------------------------------------------------------------------------

class _Reactor:
    """Progresses one worker from one asyncio loop: a reader on its event fd, plus a
    progress pass scheduled whenever a coroutine starts waiting (an operation may need
    progress before any event comes)."""

    _ROUNDS = 64  # progress passes before yielding to other callbacks when work stays pending

    def __init__(self, worker, loop):
        self.worker = worker
        self.loop = loop
        self.fd = worker.fileno()
        self.scheduled = False
        loop.add_reader(self.fd, self.drain)
        worker._set_aio_attached(True)

    def kick(self):
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self.drain)

    def drain(self):
        self.scheduled = False
        worker = self.worker
        if worker.closed:
            return
        for _ in range(self._ROUNDS):
            while worker.progress():
                pass
            if worker.arm():  # nothing pending: the fd wakes the loop on the next event
                return
        self.kick()

    def detach(self):
        if self.fd is not None:
            if not self.loop.is_closed():
                self.loop.remove_reader(self.fd)
            self.fd = None
            if not self.worker.closed:
                self.worker._set_aio_attached(False)
        if getattr(self.worker, "_aio", None) is self:
            self.worker._aio = None


def _reactor(worker, loop):
    aio = getattr(worker, "_aio", None)
    if aio is not None and aio.loop is loop and aio.fd is not None:
        return aio
    if aio is not None and aio.loop.is_closed():  # asyncio.run ended: its loop is gone
        aio.fd = None
    if aio is not None:
        aio.detach()
    aio = _Reactor(worker, loop)
    worker._aio = aio
    return aio


def _await_later(request):
    """The await of a request still running after Request.__await__'s spin (set_async_spin_us):
    a future its completion wakes, the worker's event fd in the running loop. A coroutine
    cancelled meanwhile (asyncio.wait_for's timeout) cancels the operation: a receive
    abandoned by its coroutine must not take the next message into a forgotten buffer."""
    worker = request.worker
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    request._set_future(fut)
    _reactor(worker, loop).kick()
    try:
        yield from fut.__await__()
    except asyncio.CancelledError:
        request.cancel()
        raise
    return request.result


def _loop_idle():
    """True when the running loop has no other callback ready (then an await may spin on)."""
    ready = getattr(asyncio.get_running_loop(), "_ready", None)  # asyncio's own loop only
    return ready is not None and not ready


def _await_result(value):
    """The await of a request done with a value: nothing to wait for."""
    return value
    yield  # pylint: disable=unreachable  (makes this a generator)


def _attach_running(worker):
    """Registers ``worker`` with the running loop (an await of a request done in its call)."""
    _reactor(worker, asyncio.get_running_loop()).kick()


_loom._set_await_hooks(_await_later, _await_result, _loop_idle, _attach_running)


def _worker_detach(self):
    """Removes the worker's reader from its asyncio loop (close() does it too)."""
    aio = getattr(self, "_aio", None)
    if aio is not None:
        aio.detach()


def _worker_attach(self, loop=None):
    """Registers the worker with ``loop`` (default: the running loop) before any await."""
    return _reactor(self, loop or asyncio.get_running_loop())


class _AmQueue:
    """The async iterator of Worker.am_messages: a handler that queues messages."""

    def __init__(self, worker, am_id):
        self.worker = worker
        self.queue = collections.deque()
        self.waiter = None
        worker.set_am_handler(am_id, self._on_message)

    def _on_message(self, msg):
        self.queue.append(msg)  # a rendezvous message stays with Loom until received
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def __aiter__(self):
        return self

    async def __anext__(self):
        while not self.queue:
            loop = asyncio.get_running_loop()
            self.waiter = loop.create_future()
            _reactor(self.worker, loop).kick()
            await self.waiter
        return self.queue.popleft()


def _worker_am_messages(self, am_id):
    """An async iterator of the active messages of id ``am_id`` (replaces its handler)."""
    return _AmQueue(self, am_id)


def _attached_if_in_loop(make):
    """Wraps an endpoint-making method: made inside a running loop, its worker is registered
    there at once. A coroutine that only sends awaits requests done inside their calls,
    which never reach the loop, yet the worker must progress for the data to leave."""
    def wrapper(self, *args, **kwargs):
        made = make(self, *args, **kwargs)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return made
        worker = self if isinstance(self, Worker) else made.worker
        _reactor(worker, loop).kick()
        return made
    wrapper.__name__ = make.__name__
    wrapper.__doc__ = make.__doc__
    return wrapper


Worker.connect = _attached_if_in_loop(Worker.connect)
Worker.connect_to = _attached_if_in_loop(Worker.connect_to)
Worker.listen = _attached_if_in_loop(Worker.listen)
ConnRequest.accept = _attached_if_in_loop(ConnRequest.accept)
Worker.detach = _worker_detach
Worker.attach = _worker_attach
Worker.am_messages = _worker_am_messages
