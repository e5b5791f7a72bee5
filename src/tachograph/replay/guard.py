"""The closed world of replay: no connection or process the record does not hold.

While a replay (or the served part of a fork or resume) runs, every outbound connection
(``socket.socket.connect``/``connect_ex``, ``socket.create_connection``, asyncio's
``loop.create_connection``/``sock_connect``) and every ``subprocess.Popen`` spawn made in
the replaying context is refused with :class:`~tachograph.errors.UnrecordedCall` (a
``ConnectionRefusedError``, so that HTTP clients fail the way they fail on a closed port),
and reported as an ``unrecorded_call`` divergence naming the address (or the command) and
the agent's line that made it. Calls recorded through tachograph (decorated tools, the SDK
integrations) are served by the capture boundary and never get this far.

The patches are installed once per process while at least one guard is active (reference
counted under a lock); each patched function asks the guard of the *current context*
(a :class:`contextvars.ContextVar`), so other threads and other contexts are untouched.
An allow list (``HOST:PORT``, ``HOST:*``, ``unix:PATH``, ``exec:PROGRAM``) lets a user
opt in; allowed calls go through and are reported as allowed.
"""

from __future__ import annotations

import contextlib
import contextvars
import ipaddress
import os
import socket
import subprocess
import sys
import sysconfig
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any

from ..errors import ReplayError, UnrecordedCall
from ..privacy import redact_secrets

_posixsubprocess: Any
try:
    import _posixsubprocess
except ImportError:  # pragma: no cover - not on POSIX
    _posixsubprocess = None

if TYPE_CHECKING:
    import asyncio

__all__ = ["EXIT_REFUSED", "Allowed", "ExitRefused", "NetworkGuard", "parse_allow"]

_guard: contextvars.ContextVar[NetworkGuard | None] = contextvars.ContextVar(
    "tachograph_network_guard", default=None
)
# Set while an allowed create_connection runs, so that the connect it makes inside is not
# judged a second time (against the resolved address rather than the name the user allowed).
_passing: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "tachograph_network_passing", default=False
)

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_STDLIB_DIRS = tuple(
    {os.path.abspath(p) for p in (sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib"))}
)
# Libraries between the agent and the socket: their frames are not "the agent's frame".
_NETWORK_LIBS = frozenset(
    {
        "aiohttp",
        "anyio",
        "certifi",
        "h11",
        "h2",
        "httpcore",
        "httpx",
        "requests",
        "sniffio",
        "urllib3",
        "websockets",
        "openai",
        "anthropic",
    }
)
# tachograph's own storage (a fork or resume writes to a PostgreSQL store, say) may connect.
_OWN_IO = ("store", "sealing", "lifecycle")


def parse_allow(entries: Sequence[str]) -> frozenset[str]:
    """Validate allow-list entries; an error names the forms accepted."""
    out = set()
    for entry in entries:
        text = str(entry).strip()
        host, sep, port = text.rpartition(":")
        ok = text.startswith(("unix:", "exec:")) and len(text) > 5
        number = port.isascii() and port.isdigit() and len(port) <= 5 and int(port) <= 65535
        ok = ok or (bool(sep) and bool(host) and (port == "*" or number))
        if not ok:
            raise ReplayError(
                f"allow_network entry {entry!r} is not HOST:PORT (a port 0-65535), HOST:*, "
                "unix:PATH or exec:PROGRAM"
            )
        out.add(text.lower() if not text.startswith("unix:") else text)
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class Allowed:
    """An outbound call the allow list let through."""

    target: str
    frame: str | None

    def render(self) -> str:
        where = f" from {self.frame}" if self.frame else ""
        return f"allowed outbound call to {self.target}{where} (allow_network)"


class NetworkGuard:
    """Refuses and reports what the record cannot serve, for one replay."""

    def __init__(
        self,
        *,
        allow: Sequence[str] = (),
        active: Callable[[], bool],
        report: Callable[[str, dict[str, Any], str], None],
    ) -> None:
        self.allow = parse_allow(allow)
        self._active = active
        self._report = report
        self.allowed: list[Allowed] = []
        self.refused: list[dict[str, Any]] = []
        self._closed = False
        self._pid = os.getpid()  # os._exit is refused in this process alone, not a fork
        # sockets whose connection was judged (made under this guard, or accepted by it, or
        # sent on once and let through): their sends are not judged again
        self._vouched: weakref.WeakSet[socket.socket] = weakref.WeakSet()

    def vouch(self, sock: socket.socket) -> None:
        """Take ``sock``'s connection as judged: its sends go through unasked."""
        with contextlib.suppress(TypeError):
            self._vouched.add(sock)

    def vouched(self, sock: socket.socket) -> bool:
        """Whether ``sock``'s connection was judged already."""
        try:
            return sock in self._vouched
        except TypeError:
            return False

    @contextlib.contextmanager
    def guarding(self) -> Iterator[None]:
        """Guard the current context (and the tasks and threads it starts) for the duration.
        A thread that outlives it holds a closed guard, which lets everything through."""
        _install()
        token = _guard.set(self)
        try:
            yield
        finally:
            self._closed = True
            _guard.reset(token)
            _uninstall()

    # -- judging one call ------------------------------------------------------------------

    def _permits(self, kind: str, target: str, host: str | None, port: Any) -> bool:
        if kind == "exec":
            return f"exec:{os.path.basename(target).lower()}" in self.allow or (
                f"exec:{target.lower()}" in self.allow
            )
        if kind == "unix":
            return f"unix:{target}" in self.allow
        if kind == "send" and host is None:  # on a Unix socket's connection
            return f"unix:{target}" in self.allow
        host_l = (host or "").lower().strip("[]")
        if kind == "resolve":  # a lookup goes out as a query of the name: the name's entry
            port = _port_number(port)
        return f"{host_l}:{port}" in self.allow or f"{host_l}:*" in self.allow

    def check(
        self,
        kind: str,
        target: str,
        *,
        host: str | None = None,
        port: Any = None,
        command: str | None = None,
    ) -> None:
        """Let the call through (allowed, not serving, tachograph's own I/O) or refuse it."""
        if self._closed or not self._active():
            return
        frame = sys._getframe(2)
        if _own_io(frame) or (kind == "exec" and _host_probe(frame)):
            return
        where = agent_frame(frame)
        if self._permits(kind, target, host, port):
            allowed = Allowed(target, where)
            if allowed not in self.allowed:  # once a target and line, however many calls
                self.allowed.append(allowed)
            return
        method, url = _http_hint(frame)
        # what a refusal reports (in the replay report, its --json, the error raised into the
        # agent) hides the secrets a URL or a command line carries (api_key=, a URL's
        # password, a bearer token), as a recording would
        if url:
            url = redact_secrets.redact_text(url)
        if command is not None:
            command = redact_secrets.redact_text(command)
        if kind == "exec":  # a shell line's first word may be an assignment: API_KEY=sk-...
            target = redact_secrets.redact_text(target)
        detail: dict[str, Any] = {"kind": kind, "target": target, "frame": where}
        if host is not None:
            detail["host"], detail["port"] = host, port
        if command is not None:
            detail["command"] = command
        if method:
            detail["method"] = method
        if url:
            detail["url"] = url
        self.refused.append(detail)
        what = f"{method} {url or target}" if method else (command or target)
        did = {
            "exec": "started a process",
            "send": "sent on a connection, opened before the replay, that",
            "resolve": "looked up a host name",
        }.get(kind, "opened a connection")
        entry = f"unix:{target}" if kind == "unix" or (kind == "send" and host is None) else target
        how = (
            f"allow_network=[{entry!r}] (tacho replay --allow-network {entry})"
            if kind != "exec"
            else f"allow_network=['exec:{os.path.basename(target)}']"
        )
        explanation = (
            f"The agent {did} the record does not hold ({what}"
            f"{', at ' + where if where else ''}): replay is a closed world, so it was "
            "refused. Record that call (decorate the function with @tachograph.tool, or use "
            "an SDK integration) so that replay can serve it, or let it through with "
            f"{how}."
        )
        self._report(kind, detail, explanation)
        verb = {"exec": "spawn of", "resolve": "lookup of"}.get(kind, "call to")
        raise UnrecordedCall(
            f"tachograph replay refused an unrecorded {verb} {target}"
            f"{' from ' + where if where else ''}",
            target=target,
            host=host,
            port=port if isinstance(port, int) else None,
            frame=where,
        )


def _port_number(port: Any) -> Any:
    """A lookup's port as the number an allow-list entry names (``https`` is 443)."""
    text = _text(port)
    if text is None or text.isdigit():
        return text
    try:
        return str(socket.getservbyname(text))
    except OSError:
        return text


def _module_of(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__") or "")


def _own_io(frame: FrameType | None) -> bool:
    while frame is not None:
        name = _module_of(frame)
        if name.startswith("tachograph.") and name.split(".")[1] in _OWN_IO:
            return True
        frame = frame.f_back
    return False


def _logging(frame: FrameType | None) -> bool:
    """True inside the standard library's ``logging`` (a handler emitting a record)."""
    while frame is not None:
        if _module_of(frame).startswith("logging") and os.path.abspath(
            frame.f_code.co_filename
        ).startswith(_STDLIB_DIRS):
            return True
        frame = frame.f_back
    return False


def _host_probe(frame: FrameType | None) -> bool:
    """True for the stdlib ``platform`` module running ``uname -p``: the interpreter describing
    its own host (SDKs put it in a request header on their first call), not the agent acting
    on the world; refusing it would make a replay diverge on whichever call comes first."""
    while frame is not None:
        if _module_of(frame) == "platform" and os.path.abspath(frame.f_code.co_filename).startswith(
            _STDLIB_DIRS
        ):
            return True
        frame = frame.f_back
    return False


def _network_lib(name: str) -> bool:
    # forks published under a numbered name (httpx2, httpcore2) count as the library; a
    # name whose digits are its own (urllib3, h2) is looked up as it is first
    return name in _NETWORK_LIBS or name.rstrip("0123456789") in _NETWORK_LIBS


def _outside(frame: FrameType) -> bool:
    path = os.path.abspath(frame.f_code.co_filename)
    if path.startswith(_PACKAGE_DIR + os.sep):
        # the demo's agent is an agent like any other, though it ships inside the package
        return _module_of(frame).startswith("tachograph.demo")
    if _network_lib(_module_of(frame).split(".")[0]):
        return False
    if "site-packages" in path or "dist-packages" in path:
        return not any(_network_lib(part) for part in path.split(os.sep))
    return not path.startswith(_STDLIB_DIRS) and not path.startswith("<frozen")


def agent_frame(frame: FrameType | None) -> str | None:
    """``file:line`` of the first frame outside tachograph, the stdlib and HTTP libraries."""
    while frame is not None:
        if _outside(frame):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("ascii", "replace")
    return value if isinstance(value, str) else (str(value) if value is not None else None)


def _url_text(url: Any) -> str | None:
    scheme = getattr(url, "scheme", None)
    if isinstance(scheme, bytes):  # httpcore's URL holds bytes
        return f"{_text(scheme)}://{_text(url.host)}:{url.port}{_text(url.target)}"
    return _text(url)


def _http_hint(frame: FrameType | None) -> tuple[str | None, str | None]:
    """The HTTP method and URL being sent, when an HTTP client's frame shows them."""
    while frame is not None:
        local = frame.f_locals
        request = local.get("request")
        if request is not None and hasattr(request, "method") and hasattr(request, "url"):
            return _text(request.method), _url_text(request.url)
        method = local.get("method")
        if isinstance(method, str) and method.isupper() and "url" in local:
            return method, _text(local.get("url"))
        frame = frame.f_back
    return None, None


class ExitRefused(SystemExit):
    """Raised into the agent in place of ``os._exit(code)`` while a replay guards its context:
    a replay does not let the agent end the process that replays it (a test runner's, which
    would then end with the agent's exit code, 0 included, and no report). A ``SystemExit``,
    so that the agent's ``except Exception`` does not take it: the agent ends as a
    ``sys.exit`` ends it, ``aborted``. ``exit_code`` is the code it asked for."""

    def __init__(self, message: str, exit_code: Any) -> None:
        super().__init__(message)
        self.exit_code = exit_code


EXIT_REFUSED = f"{ExitRefused.__module__}.{ExitRefused.__qualname__}"
"""How :func:`~tachograph.capture.boundary.error_info` names :class:`ExitRefused`."""


def _os_exit(code: Any) -> None:
    guard = _guard.get()
    # a child forked during the replay (multiprocessing, an allowed fork) inherits the
    # context: its os._exit ends the child, as a child's must, never the replay
    if guard is None or guard._closed or not guard._active() or os.getpid() != guard._pid:
        _originals["os_exit"](code)
    raise ExitRefused(
        f"os._exit({code!r}) was called during replay: a replay does not let the agent end "
        "the process that replays it",
        code,
    )


# -- the patches ----------------------------------------------------------------------------

_lock = threading.Lock()
_count = 0
_originals: dict[str, Any] = {}
_own: dict[str, bool] = {}  # whether the patched class held the attribute itself
_INHERITED = object()


def _address(sock: socket.socket, address: Any) -> tuple[str, str, str | None, Any]:
    if sock.family == getattr(socket, "AF_UNIX", None):
        path = _text(address) or ""
        return "unix", path, None, None
    if isinstance(address, tuple) and len(address) >= 2:
        host = _text(address[0]) or ""
        shown = f"[{host}]" if ":" in host else host
        return "connect", f"{shown}:{address[1]}", host, address[1]
    return "connect", repr(address), None, None


def _judge_socket(sock: socket.socket, address: Any) -> None:
    guard = _guard.get()
    if guard is None or _passing.get():
        return
    kind, target, host, port = _address(sock, address)
    guard.check(kind if kind == "unix" else "connect", target, host=host, port=port)


def _vouch(sock: socket.socket) -> None:
    guard = _guard.get()
    if guard is not None:
        guard.vouch(sock)


def _connect(self: socket.socket, address: Any) -> None:
    _judge_socket(self, address)
    _vouch(self)
    token = _passing.set(True)  # judged: the audit event of the connect inside is not again
    try:
        _originals["connect"](self, address)
    finally:
        _passing.reset(token)


def _connect_ex(self: socket.socket, address: Any) -> int:
    _judge_socket(self, address)
    _vouch(self)
    token = _passing.set(True)
    try:
        result: int = _originals["connect_ex"](self, address)
    finally:
        _passing.reset(token)
    return result


def _judge_send(sock: socket.socket) -> None:
    """A send on a connection the guard has not judged: one opened before the replay (an
    HTTP client's pool keeps its connections open), which no connect of this replay saw."""
    guard = _guard.get()
    if guard is None or _passing.get() or guard.vouched(sock):
        return
    try:
        address = sock.getpeername()
    except OSError:  # not connected: the send fails by itself (a sendto the audit hook sees)
        return
    kind, target, host, port = _address(sock, address)
    if (kind == "unix" and not target) or _logging(sys._getframe(1)):
        # a socketpair (asyncio's own wake-up pipe); a handler of the standard library's
        # logging (syslog's /dev/log, a SocketHandler) set up by the host before the replay
        guard.vouch(sock)
        return
    guard.check("send", target, host=host, port=port)
    guard.vouch(sock)


def _send(self: socket.socket, data: Any, *args: Any) -> int:
    _judge_send(self)
    sent: int = _originals["send"](self, data, *args)
    return sent


def _sendall(self: socket.socket, data: Any, *args: Any) -> None:
    _judge_send(self)
    _originals["sendall"](self, data, *args)


def _sendfile(self: socket.socket, file: Any, *args: Any, **kwargs: Any) -> int:
    _judge_send(self)
    sent: int = _originals["sendfile"](self, file, *args, **kwargs)
    return sent


def _ssl_send(self: socket.socket, data: Any, *args: Any) -> int:
    _judge_send(self)
    sent: int = _originals["ssl_send"](self, data, *args)
    return sent


def _ssl_sendall(self: socket.socket, data: Any, *args: Any) -> None:
    _judge_send(self)
    _originals["ssl_sendall"](self, data, *args)


def _ssl_create(cls: Any, sock: socket.socket, *args: Any, **kwargs: Any) -> Any:
    # the TLS socket is a new object over the connection ``sock`` held: judged as it was
    guard = _guard.get()
    judged = guard is not None and guard.vouched(sock)
    wrapped = _originals["ssl_create"].__func__(cls, sock, *args, **kwargs)
    if judged and guard is not None:
        guard.vouch(wrapped)
    return wrapped


def _ssl_write(self: socket.socket, data: Any) -> int:
    _judge_send(self)
    written: int = _originals["ssl_write"](self, data)
    return written


def _accept(self: socket.socket) -> tuple[socket.socket, Any]:
    accepted: tuple[socket.socket, Any] = _originals["accept"](self)
    _vouch(accepted[0])  # an answer to who connected here is not a call the agent made
    return accepted


def _numeric_or_local(host: str) -> bool:
    """A name whose lookup does not leave the machine: an address written out, or
    ``localhost``."""
    name = host.strip("[]").partition("%")[0]
    if name.lower() in ("", "localhost", "localhost."):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _loopback(host: str) -> bool:
    """An address of this machine, whose reverse lookup the hosts file answers."""
    try:
        return ipaddress.ip_address(host.strip("[]").partition("%")[0]).is_loopback
    except ValueError:
        return host.lower() in ("localhost", "localhost.")


def _getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
    guard = _guard.get()
    if guard is not None and not _passing.get() and host is not None:
        name = _text(host) or ""
        if not _numeric_or_local(name):
            shown_port = _text(port)
            guard.check("resolve", f"{name}:{shown_port}", host=name, port=shown_port)
    token = _passing.set(True)  # judged: the audit event of the lookup inside is not again
    try:
        return _originals["getaddrinfo"](host, port, *args, **kwargs)
    finally:
        _passing.reset(token)


def _create_connection(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
    guard = _guard.get()
    if guard is not None and not _passing.get():
        host, port = _text(address[0]) or "", address[1]
        guard.check("connect", f"{host}:{port}", host=host, port=port)
    token = _passing.set(True)
    try:
        sock: socket.socket = _originals["create_connection"](address, *args, **kwargs)
        return sock
    finally:
        _passing.reset(token)


async def _loop_create_connection(
    self: asyncio.AbstractEventLoop,
    protocol_factory: Any,
    host: Any = None,
    port: Any = None,
    *args: Any,
    **kwargs: Any,
) -> Any:
    guard = _guard.get()
    if guard is not None and not _passing.get() and host is not None:
        shown = _text(host) or ""
        guard.check("connect", f"{shown}:{port}", host=shown, port=port)
    token = _passing.set(True)
    try:
        return await _originals["loop_create_connection"](
            self, protocol_factory, host, port, *args, **kwargs
        )
    finally:
        _passing.reset(token)


async def _sock_connect(self: asyncio.AbstractEventLoop, sock: socket.socket, address: Any) -> Any:
    _judge_socket(sock, address)
    token = _passing.set(True)
    try:
        return await _originals["sock_connect"](self, sock, address)
    finally:
        _passing.reset(token)


def _execute_child(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> Any:
    guard = _guard.get()
    if guard is not None:
        if isinstance(args, str | bytes | os.PathLike):
            command = _text(os.fspath(args)) or ""
            program = command.split()[0] if command.split() else command
        else:
            parts = [_text(os.fspath(a)) or "" for a in args]
            program, command = (parts[0] if parts else ""), " ".join(parts)
        exe = _text(kwargs.get("executable") or (rest[0] if rest else None))
        guard.check("exec", exe or program, command=command)
    token = _passing.set(True)  # judged: the posix_spawn or fork_exec inside is not again
    try:
        return _originals["execute_child"](self, args, *rest, **kwargs)
    finally:
        _passing.reset(token)


def _fork_exec(args: Any, executable_list: Any, *rest: Any) -> Any:
    # How multiprocessing starts a process by "spawn" (``spawnv_passfds``): the interpreter
    # raises no audit event for it. From ``subprocess``, it was judged (``_passing``).
    guard = _guard.get()
    if guard is not None and not _passing.get():
        parts = [_text(os.fsdecode(a)) or "" for a in args or ()]
        exe = _text(os.fsdecode(executable_list[0])) if executable_list else None
        guard.check("exec", exe or (parts[0] if parts else ""), command=" ".join(parts))
    return _originals["fork_exec"](args, executable_list, *rest)


# What the patches above cannot see (other ways to start a process, datagrams, the socket
# module's own ``_socket.socket``), judged from an audit hook (PEP 578): ``os.system``,
# ``os.posix_spawn``, ``os.spawn*``, ``os.exec*``, ``os.fork``, ``os.forkpty`` (``pty.fork``),
# ``connect`` of any socket, and ``sendto`` and ``sendmsg`` of an unconnected one. A hook
# cannot be removed: it does nothing unless a guard is active in the calling context.
_AUDITED = frozenset(
    {
        "os.system",
        "os.posix_spawn",
        "os.spawn",
        "os.exec",
        "os.fork",
        "os.forkpty",
        "socket.connect",
        "socket.sendto",
        "socket.sendmsg",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.gethostbyaddr",
        "socket.getnameinfo",
    }
)
_LOOKUPS = frozenset(
    {"socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo"}
)


def _judge_lookup(guard: NetworkGuard, event: str, args: tuple[Any, ...]) -> None:
    """A name lookup (``_socket``'s own ``getaddrinfo``, ``gethostbyname``...) or a reverse
    one (``gethostbyaddr``, ``getnameinfo``: a DNS query for the address's name)."""
    if event == "socket.getaddrinfo":
        host, port = _text(args[0]), _text(args[1])
    elif event == "socket.getnameinfo":
        address = args[0]
        host = _text(address[0]) if isinstance(address, tuple) and address else None
        port = _text(address[1]) if isinstance(address, tuple) and len(address) > 1 else None
    else:
        host, port = _text(args[0]), None
    if host is None:
        return
    reverse = event in ("socket.gethostbyaddr", "socket.getnameinfo")
    if _loopback(host) if reverse else _numeric_or_local(host):
        return
    guard.check("resolve", f"{host}:{port}" if port else host, host=host, port=port)


_hooked = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event not in _AUDITED or not _count:
        return
    guard = _guard.get()
    if guard is None or _passing.get():
        return
    if event in ("socket.connect", "socket.sendto", "socket.sendmsg"):
        sock, address = args[0], args[1]
        if address is not None:
            _judge_socket(sock, address)
        elif event == "socket.sendmsg":  # on its connection: judged as a send is
            _judge_send(sock)
        return
    if event in _LOOKUPS:
        _judge_lookup(guard, event, args)
        return
    if event in ("os.fork", "os.forkpty"):
        name = event.removeprefix("os.")
        guard.check("exec", name, command=f"{event}()")
        return
    if event == "os.system":
        command = _text(os.fsdecode(args[0])) or ""
        guard.check("exec", command.split()[0] if command.split() else command, command=command)
        return
    # os.posix_spawn (path, argv, env), os.spawn (mode, path, args, env), os.exec (path, ...)
    path = args[1] if event == "os.spawn" else args[0]
    argv = args[2] if event == "os.spawn" else (args[1] if len(args) > 1 else ())
    program = _text(os.fsdecode(path)) or ""
    command = " ".join(_text(os.fsdecode(a)) or "" for a in argv) if argv else program
    guard.check("exec", program, command=command)


def _patches() -> tuple[tuple[str, Any, str, Any], ...]:
    """What the guard replaces while it is active: ``(name, owner, attribute, replacement)``.
    asyncio is imported here, when a guard is first installed, not with tachograph."""
    import asyncio.base_events
    import asyncio.selector_events
    import ssl

    return (
        ("connect", socket.socket, "connect", _connect),
        ("connect_ex", socket.socket, "connect_ex", _connect_ex),
        ("send", socket.socket, "send", _send),
        ("sendall", socket.socket, "sendall", _sendall),
        ("sendfile", socket.socket, "sendfile", _sendfile),
        ("ssl_send", ssl.SSLSocket, "send", _ssl_send),
        ("ssl_sendall", ssl.SSLSocket, "sendall", _ssl_sendall),
        ("ssl_write", ssl.SSLSocket, "write", _ssl_write),
        ("ssl_create", ssl.SSLSocket, "_create", classmethod(_ssl_create)),
        ("accept", socket.socket, "accept", _accept),
        ("getaddrinfo", socket, "getaddrinfo", _getaddrinfo),
        ("create_connection", socket, "create_connection", _create_connection),
        (
            "loop_create_connection",
            asyncio.base_events.BaseEventLoop,
            "create_connection",
            _loop_create_connection,
        ),
        (
            "sock_connect",
            asyncio.selector_events.BaseSelectorEventLoop,
            "sock_connect",
            _sock_connect,
        ),
        ("execute_child", subprocess.Popen, "_execute_child", _execute_child),
        ("os_exit", os, "_exit", _os_exit),
        *(
            (("fork_exec", _posixsubprocess, "fork_exec", _fork_exec),)
            if _posixsubprocess is not None
            else ()
        ),
    )


def _install() -> None:
    global _count, _hooked
    with _lock:
        _count += 1
        if _count > 1:
            return
        if not _hooked:
            sys.addaudithook(_audit)
            _hooked = True
        for name, owner, attr, patched in _patches():
            # what the class itself holds (a classmethod stays one), else what it inherits
            own = vars(owner).get(attr, _INHERITED) if isinstance(owner, type) else _INHERITED
            _originals[name] = own if own is not _INHERITED else getattr(owner, attr)
            _own[name] = own is not _INHERITED or not isinstance(owner, type)
            setattr(owner, attr, patched)


def _uninstall() -> None:
    global _count
    with _lock:
        _count -= 1
        if _count > 0:
            return
        # The originals stay in the table: a thread may still be inside a patched call.
        for name, owner, attr, _patched in _patches():
            if _own.get(name, True):
                setattr(owner, attr, _originals[name])
            else:  # inherited (socket.socket's send is _socket.socket's): inherited again
                delattr(owner, attr)
