"""The web view's bounds against the real `video-ingest --web` process, with raw sockets: slow
connections hold at most `MAX_CONNECTIONS` threads, one beyond them is answered 503 at once, a
request's line and headers trickled a byte at a time are dropped at their deadline, and an
authorized request is served again afterwards.

The bridge runs without TorchServe (its camera's address answers nothing): the web view serves
all the same, and its thread count is the web view's alone.
"""

from __future__ import annotations

import json
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from ingest.web import server as web
from tests.rtsp_server import free_port
from tests.support import ROOT

#: Bytes a slow connection sends, one each `TRICKLE_S`: never its headers' end.
SLOW_REQUEST = b"GET /api/cameras HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200
TRICKLE_S = 2.0
EXTRA = 20


@pytest.fixture
def bridge(tmp_path: Path):
    port, token_file = free_port(), tmp_path / "web_token.json"
    log = (tmp_path / "ingest.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "ingest.cli", "--url", f"http://127.0.0.1:{free_port()}", "--model", "none",
         "--camera", f"dock=rtsp://127.0.0.1:{free_port()}/none", "--results", str(tmp_path / "results.jsonl"),
         "--web", f"127.0.0.1:{port}", "--web-token-file", str(token_file)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while "the web view is on" not in (tmp_path / "ingest.log").read_text():  # no probe: no stray connection
            assert process.poll() is None and time.monotonic() < deadline, (tmp_path / "ingest.log").read_text()
            time.sleep(0.2)
        yield {"process": process, "port": port, "token": json.loads(token_file.read_text())["web"]["key"]}
    finally:
        process.kill()
        process.wait()
        log.close()


def threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))


def answers(sockets: list[socket.socket], slow: list[socket.socket], timeout: float,
            check: Callable[[], None]) -> dict[socket.socket, bytes]:
    """Each socket's bytes until the bridge closed it, trickling a byte of `SLOW_REQUEST` every
    `TRICKLE_S` into each of `slow` still open (fails if some are open after `timeout`); `check()`
    meanwhile. (A byte sent to a closed connection would reset it and lose what it was answered.)"""
    got = {s: b"" for s in sockets}
    sent = dict.fromkeys(slow, 1)
    with selectors.DefaultSelector() as waiting:
        for s in sockets:
            waiting.register(s, selectors.EVENT_READ)
        deadline, trickle = time.monotonic() + timeout, time.monotonic() + TRICKLE_S
        while waiting.get_map():
            assert time.monotonic() < deadline, f"{len(waiting.get_map())} slow connections still open"
            check()
            for key, _ in waiting.select(timeout=0.2):
                try:
                    data = key.fileobj.recv(65536)
                except ConnectionResetError:
                    data = b""
                got[key.fileobj] += data
                if not data:
                    waiting.unregister(key.fileobj)
            if time.monotonic() >= trickle:
                trickle += TRICKLE_S
                for s in [k.fileobj for k in waiting.get_map().values() if k.fileobj in sent]:
                    s.sendall(SLOW_REQUEST[sent[s]:sent[s] + 1])
                    sent[s] += 1
    return got


def test_slow_connections_hold_bounded_threads_one_beyond_gets_503_and_they_end_at_the_deadline(bridge):
    pid, port = bridge["process"].pid, bridge["port"]
    before = threads(pid)

    def bounded() -> None:
        assert threads(pid) - before <= web.MAX_CONNECTIONS, (before, threads(pid))

    held = []
    for _ in range(web.MAX_CONNECTIONS):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(SLOW_REQUEST[:1])
        held.append(s)
    beyond = [socket.create_connection(("127.0.0.1", port)) for _ in range(EXTRA)]
    try:
        got = answers(held + beyond, held, 3 * web.HEADERS_S + 30, bounded)
    finally:
        for s in held + beyond:
            s.close()
    refused = [body for body in got.values() if body]
    assert len(refused) == EXTRA and all(got[s] for s in beyond)  # the slow ones: closed without an answer
    head, _, body = refused[0].partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"HTTP/1.1 503 Service Unavailable" and b"Connection: close" in head
    assert json.loads(body) == {"code": 503, "type": "Busy", "message": "the web view holds 256 connections at once: "
                                                                        "close some viewers, or try again"}
    served = requests.get(f"http://127.0.0.1:{port}/api/cameras", timeout=20,
                          headers={"Authorization": f"Bearer {bridge['token']}"})
    assert served.status_code == 200 and [c["name"] for c in served.json()["cameras"]] == ["dock"]
    deadline = time.monotonic() + 30
    while threads(pid) > before:  # every slow connection's thread ended
        assert time.monotonic() < deadline, (before, threads(pid))
        time.sleep(0.2)
