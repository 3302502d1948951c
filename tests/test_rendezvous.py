"""Process 0's roll call (``keras_vit.distribution._rendezvous``), with threads standing in
for processes."""

import concurrent.futures
import socket
import threading
import time

import pytest

from keras_vit.distribution import _rendezvous
from keras_vit.distribution._rendezvous import Roll, RollCallError, report, roll_call

pytestmark = pytest.mark.backend_independent

NAMES = ("JOB_ADDRESSES", "NUM_PROCESSES", "PROCESS_ID", "JOIN_TIMEOUT")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(count, *others, timeout=5):
    """Process 0 and ``others`` (``(index, count)`` each) on one port: each one's result, a
    ``Roll`` or the error it raised."""
    port = _free_port()
    with concurrent.futures.ThreadPoolExecutor(len(others) + 1) as pool:
        calls = [pool.submit(roll_call, port, count, timeout, NAMES)]
        time.sleep(0.2)  # process 0 listens first; the others also wait for it when it is late
        calls += [pool.submit(report, "127.0.0.1", str(port), index, their_count, timeout, NAMES)
                  for index, their_count in others]
        return [call.exception() or call.result() for call in calls]


def test_every_process_counted_and_connected():
    zero, one, two = _run(3, (2, 3), (1, 3))
    assert sorted(zero.connections) == [1, 2]
    assert list(one.connections) == [0] and list(two.connections) == [0]


def test_a_process_that_never_comes_is_named_to_every_process():
    zero, one = _run(3, (1, 3), timeout=1)
    assert isinstance(zero, RollCallError)
    assert str(zero).startswith("Process 2 of 3 did not join at port ")
    assert "within 1 s (JOIN_TIMEOUT): start each with PROCESS_ID" in str(zero)
    assert str(one).startswith("Process 0 at 127.0.0.1:")
    assert "refused process 1: process 0 stopped waiting for process 2." in str(one)


def test_processes_that_count_differently_are_refused():
    zero, one = _run(2, (1, 3))
    assert "has NUM_PROCESSES=3, process 0 has 2: set the same on every host" in str(zero)
    assert isinstance(one, RollCallError) and "NUM_PROCESSES=3, process 0 has 2" in str(one)


@pytest.mark.parametrize("index", [1, 0])
def test_two_processes_of_one_number_are_refused(index):
    results = _run(3, (1, 3), (index, 3))
    assert f"Two processes have PROCESS_ID={index}" in str(results[0])
    assert all(isinstance(r, RollCallError) for r in results)


def test_a_connection_that_is_not_a_process_is_ignored():
    port = _free_port()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        zero = pool.submit(roll_call, port, 2, 5, NAMES)
        time.sleep(0.2)
        socket.create_connection(("127.0.0.1", port)).close()  # a port scan
        with socket.create_connection(("127.0.0.1", port)) as probe:
            probe.sendall(b"GET / HTTP/1.1\r\n\r\n")
        one = report("127.0.0.1", str(port), 1, 2, 5, NAMES)
        assert list(zero.result().connections) == [1] and list(one.connections) == [0]


def test_a_port_that_answers_otherwise_is_named():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]

        def answer():
            connection, _ = server.accept()
            connection.sendall(b"\x00\x00\x12\x04 not ours\n")
            connection.close()

        threading.Thread(target=answer, daemon=True).start()
        with pytest.raises(RollCallError, match=r"Something answers at 127\.0\.0\.1:\d+ but not "
                                                r"as process 0 of this run"):
            report("127.0.0.1", str(port), 1, 2, 5, NAMES)


def test_a_coordinator_that_never_answers_is_named():
    with pytest.raises(RollCallError, match=r"Process 0 of 2 did not answer at 127\.0\.0\.1:\d+ "
                                            r"within 1 s \(JOIN_TIMEOUT\)"):
        report("127.0.0.1", str(_free_port()), 1, 2, 1, NAMES)


def test_a_connection_closed_without_bye_is_gone_and_one_with_bye_is_not():
    zero, one, two = _run(3, (1, 3), (2, 3))
    assert zero.gone(0.1) == []  # nobody left
    one.leave()
    one.connections[0].close()
    two.connections[0].close()  # as the kernel closes a killed process's sockets
    gone, deadline = [], time.monotonic() + 5
    while zero.connections and time.monotonic() < deadline:
        gone += zero.gone(0.5)
    assert gone == [2] and zero.connections == {}


def test_the_coordinators_port_is_free_for_jax_once_counted():
    port = _free_port()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        zero = pool.submit(roll_call, port, 2, 5, NAMES)
        time.sleep(0.2)
        one = report("127.0.0.1", str(port), 1, 2, 5, NAMES)
        zero = zero.result()
    # the connections stay open on the port while the next service listens there
    with socket.socket(socket.AF_INET6 if socket.has_dualstack_ipv6() else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("", port))
        s.listen()
    assert isinstance(one, Roll) and list(zero.connections) == [1]
    assert _rendezvous.Roll({}).gone(0.01) == []
