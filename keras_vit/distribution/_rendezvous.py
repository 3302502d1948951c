"""Process 0's roll call on the coordinator's port, before JAX's coordination service opens there.

JAX's ``initialize`` aborts the program, in C++, when a process never joins, and a process killed
in a collective fails another's transport without its number. So each process first says who it
is to process 0 (``roll_call`` there, ``report`` elsewhere): one that never comes, comes twice or
counts the processes differently is named before JAX starts. The connections then stay open for
the run: the operating system closes a process's end when it ends, however it ends, so its
partner learns at once which process is gone (``Roll.gone``); one that ends normally says
``bye`` first.

Each line is ASCII: ``keras_vit <process> <count>`` to process 0, then ``ok`` or ``refused
<why>`` back, and ``bye`` from either side when it leaves.
"""

import select
import socket
import threading
import time

_HELLO = "keras_vit"
_BYE = b"bye\n"
_LINE_SECONDS = 10.0  # for a process that connected to send its line


class RollCallError(ConnectionError):
    """The processes could not all be counted: the message names which and what to fix."""


def _listener(port):
    if socket.has_dualstack_ipv6():
        return socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
    return socket.create_server(("", port))  # SO_REUSEADDR: JAX's service binds the port next


def _read_line(connection, seconds):
    connection.settimeout(seconds)
    data = b""
    while not data.endswith(b"\n") and len(data) < 4096:
        chunk = connection.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.decode("ascii", "replace").strip()


def _send(connection, text):
    try:
        connection.sendall(text.encode("ascii", "replace") + b"\n")
    except OSError:
        pass  # a process that already left learns nothing more from us


def _hello(line):
    """``(process, count)`` from a line, or None for anything that is not a process of ours."""
    words = line.split()
    if len(words) == 3 and words[0] == _HELLO and words[1].isdigit() and words[2].isdigit():
        return int(words[1]), int(words[2])
    return None


def _names(indices):
    indices = sorted(indices)
    return ("process " if len(indices) == 1 else "processes ") + ", ".join(map(str, indices))


def roll_call(port, count, timeout, names):
    """Process 0: wait up to ``timeout`` s for processes 1 to ``count - 1`` on ``port``.

    ``names``: the variables' names ``(job addresses, count, process id, join timeout)`` for the
    messages. Returns a ``Roll`` of their open connections; raises ``RollCallError`` naming the
    processes missing or in conflict, after telling the ones that came.
    """
    joined, deadline = {}, time.monotonic() + timeout
    with _listener(port) as listener:
        while len(joined) < count - 1:
            left = deadline - time.monotonic()
            listener.settimeout(max(left, 0.001))
            try:
                connection, address = listener.accept()
            except TimeoutError:
                missing = set(range(1, count)) - set(joined)
                _refuse_all(joined, f"process 0 stopped waiting for {_names(missing)}")
                raise RollCallError(
                    f"{_names(missing).capitalize()} of {count} did not join at port {port} "
                    f"within {timeout} s ({names[3]}): start each with {names[2]} set to its "
                    f"number and {names[0]} set to process 0's address, or set {names[1]} to "
                    "the number of processes started.") from None
            problem = _admit(connection, address, joined, count, names)
            if problem:
                _refuse_all(joined, problem)
                raise RollCallError(problem)
    for connection in joined.values():
        _send(connection, "ok")
    return Roll(joined)


def _admit(connection, address, joined, count, names):
    """Add a connecting process to ``joined``; returns what is wrong with the run, if anything."""
    try:
        hello = _hello(_read_line(connection, _LINE_SECONDS))
    except OSError:
        hello = None
    if hello is None:
        connection.close()  # not a process of this run (a port scan, a health check)
        return None
    index, their_count = hello
    if their_count != count:
        problem = (f"the process at {address[0]} has {names[1]}={their_count}, process 0 has "
                   f"{count}: set the same on every host")
    elif index == 0 or index in joined:
        problem = (f"two processes have {names[2]}={index} (one at {address[0]}): give each "
                   f"process its own number, 0 to {count - 1}")
    else:
        joined[index] = connection
        return None
    _send(connection, f"refused {problem}")
    connection.close()
    return problem[0].upper() + problem[1:] + "."


def _refuse_all(joined, why):
    for connection in joined.values():
        _send(connection, f"refused {why}")
        connection.close()


def report(host, port, index, count, timeout, names):
    """Process ``index`` > 0: say who it is to process 0 at ``host:port``, waiting up to
    ``timeout`` s for it to answer and as long again for every other process to come.

    Returns a ``Roll`` of the connection to process 0; raises ``RollCallError`` when process 0
    never answers or refuses the run (its reason in the message).
    """
    address = f"{host}:{port}"
    connection = _connect(host, port, timeout, count, names)
    _send(connection, f"{_HELLO} {index} {count}")
    try:
        answer = _read_line(connection, timeout + _LINE_SECONDS)
    except OSError as error:
        answer = f"no answer ({error})"
    if answer == "ok":
        return Roll({0: connection})
    connection.close()
    if answer.startswith("refused "):
        raise RollCallError(f"Process 0 at {address} refused process {index}: "
                            f"{answer[len('refused '):]}.")
    raise RollCallError(
        f"Something answers at {address} but not as process 0 of this run ({answer[:80]!r}): "
        "a run already under way there? Start every process of the run together, and check "
        f"that {names[0]} is process 0's address.")


def _connect(host, port, timeout, count, names):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.create_connection((host.strip("[]"), int(port)), timeout=1)
        except OSError as error:
            if time.monotonic() > deadline:
                raise RollCallError(
                    f"Process 0 of {count} did not answer at {host}:{port} within {timeout} s "
                    f"({names[3]}), {error}: start it with {names[2]}=0, and check that "
                    f"{names[0]} is its address and that the port is free and reachable from "
                    "this host.") from None
            time.sleep(0.2)


class Roll:
    """The open connections to the other processes of a run, by process number."""

    def __init__(self, connections):
        self.connections = dict(connections)
        self._lock = threading.Lock()  # a watching thread reads while the main one leaves

    def gone(self, seconds):
        """The processes whose connection closed without a ``bye`` within ``seconds`` (waiting
        that long at most); those that said ``bye`` are let go silently."""
        with self._lock:
            by_socket = {c: i for i, c in self.connections.items()}
        if not by_socket:
            time.sleep(seconds)
            return []
        try:
            readable, _, _ = select.select(list(by_socket), [], [], seconds)
        except (OSError, ValueError):  # closed by ``leave`` meanwhile
            return []
        with self._lock:
            return [index for index in map(by_socket.get, readable) if self._ended(index)]

    def _ended(self, index):
        """Whether process ``index`` is gone without a ``bye``, after reading what it sent."""
        connection = self.connections.get(index)
        if connection is None:
            return False
        try:
            data = connection.recv(4096)
        except OSError:
            data = b""
        if data and _BYE not in data:
            return False
        del self.connections[index]
        connection.close()
        return not data

    def leave(self):
        """Say ``bye`` to every process: this one ends on purpose."""
        with self._lock:
            for connection in self.connections.values():
                try:
                    connection.sendall(_BYE)
                except OSError:
                    pass
