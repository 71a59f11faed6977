"""bench/harness.py, what every bench repeats: CPU by process and over a window from /proc, a
process's memory, threads and fds, closed-loop clients against a real HTTP server, the table, the
quantiles and the JSON report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench import harness

SPIN = "import time\nend = time.process_time() + {}\nwhile time.process_time() < end: pass\ntime.sleep(60)"


@pytest.fixture
def spinner():
    """A child that burns 1.5 s of CPU, then sleeps: its CPU seconds are known."""
    child = subprocess.Popen([sys.executable, "-c", SPIN.format(1.5), "spinner-marker"])
    yield child
    child.kill()
    child.wait()


def test_cpu_seconds_counts_a_childs_cpu_and_zero_once_it_is_gone(spinner):
    assert harness.parent(spinner.pid) == os.getpid()
    assert spinner.pid in harness.children(os.getpid(), "spinner-marker")
    assert spinner.pid not in harness.children(os.getpid(), "no-such-word")
    deadline = time.monotonic() + 30
    while harness.cpu_seconds(spinner.pid) < 1.5 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert 1.5 <= harness.cpu_seconds(spinner.pid) < 2.5
    spinner.kill()
    spinner.wait()
    assert harness.cpu_seconds(spinner.pid) == 0.0


def test_a_window_gives_each_group_its_cpu_and_the_rest_of_the_machine_to_others():
    child = subprocess.Popen([sys.executable, "-c", SPIN.format(30)])
    try:
        window = harness.Window({"spinner": [child.pid], "gone": [2**22 + 1]}).start()
        time.sleep(1.0)
        spent = window.stop()
    finally:
        child.kill()
        child.wait()
    assert set(spent) == {"spinner", "gone", "others"} and spent["gone"] == 0
    assert 0.9 <= window.seconds < 1.5
    assert 0.5 <= spent["spinner"] <= window.seconds + 0.05  # one core, most of the window
    assert spent["others"] >= -0.1  # the machine's busy time holds the spinner's


def test_memory_reads_resident_size_threads_and_open_fds(tmp_path):
    rss, threads, fds = harness.memory(os.getpid())
    release = threading.Event()
    extra = [threading.Thread(target=release.wait, daemon=True) for _ in range(4)]
    files = [(tmp_path / str(i)).open("w") for i in range(5)]
    for thread in extra:
        thread.start()
    _, threads2, fds2 = harness.memory(os.getpid())
    release.set()
    for f in files:
        f.close()
    assert rss > 10 and threads2 >= threads + 3 and fds2 >= fds + 4


class _Answers(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        status = 200 if self.headers["Authorization"] == "Bearer k" else 401
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_closed_loop_counts_answers_in_the_window_and_failures_by_name():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/predictions/m"
    try:
        answers, latencies = harness.closed_loop(url, "k", [(b"x" * 10, "image/jpeg")], 3, 0.5)
        refused, _ = harness.closed_loop(url, "wrong", [(b"x", "image/jpeg")], 1, 0.2)
    finally:
        server.shutdown()
        server.server_close()
    assert set(answers) == {200} and answers[200] == len(latencies) > 10
    assert all(0 < ms < 500 for ms in latencies)
    assert set(refused) == {401}
    closed, _ = harness.closed_loop(url, "k", [(b"x", "image/jpeg")], 1, 0.2)  # the port closed: refused
    assert set(closed) == {"ConnectionError"}


def test_the_table_the_quantiles_and_the_report(tmp_path):
    table = harness.markdown(["a", "b"], [["1", "2"], ["3", "4"]])
    assert table.splitlines() == ["| a | b |", "| --- | --- |", "| 1 | 2 |", "| 3 | 4 |"]
    assert harness.percentile([], 0.5) is None
    assert harness.percentile([5.0, 1.0, 3.0], 0.5) == 3.0
    assert harness.percentile(list(map(float, range(101))), 0.99) == 99.0
    harness.report(tmp_path / "r.json", ["--short"], rows=[1])
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["command"] == "--short" and report["rows"] == [1] and len(report["commit"].split()[0]) == 40
    assert report["machine"].startswith(f"{os.cpu_count()} cores")
    harness.report(None, [], rows=[])  # no path: nothing written, nothing raised
