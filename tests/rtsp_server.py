"""Real camera servers for the ingest tests: gst-rtsp-server (`tests/gst_rtsp.py`), an HTTP
MJPEG camera, and a liar.

`RtspServer` runs GStreamer's RTSP server under Debian's `/usr/bin/python3` (which has `gi`;
the project's venv does not) and drives it over stdin: resize a mount mid-stream, stall it, kill
the whole server. `MjpegServer` serves `multipart/x-mixed-replace` JPEG frames over HTTP, as
IP cameras' `/video.mjpg` do. `GarbageServer` accepts TCP connections and answers random bytes.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import threading
from pathlib import Path

from tests.support import ROOT

SYSTEM_PYTHON = "/usr/bin/python3"
SCRIPT = ROOT / "tests" / "gst_rtsp.py"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _check_gstreamer() -> None:
    found = subprocess.run([SYSTEM_PYTHON, "-c", "import gi; gi.require_version('GstRtspServer', '1.0')"],
                           capture_output=True)
    assert found.returncode == 0 and shutil.which("gst-inspect-1.0"), (
        "the ingest tests need GStreamer's RTSP server for /usr/bin/python3: apt-get install "
        "gir1.2-gst-rtsp-server-1.0 python3-gi gstreamer1.0-plugins-base gstreamer1.0-plugins-good "
        "gstreamer1.0-plugins-bad gstreamer1.0-plugins-ugly gstreamer1.0-libav gstreamer1.0-tools (.ci/run does)")


class RtspServer:
    """gst-rtsp-server with live H.264 test streams, one per mount.

    Args:
        mounts: {name: (width, height, fps)}, or {name: Path} of an H.264 MPEG-TS file played once
            at its own pace; each is served at rtsp://127.0.0.1:PORT/NAME.
        port: the port (default: a free one); kept across `kill()` and `start()`.
        credentials: (user, password): every mount needs them (basic authentication).
        log: where the server's stderr goes.
    """

    def __init__(self, mounts: dict[str, tuple[int, int, int] | Path], port: int | None = None,
                 credentials: tuple[str, str] | None = None, log: Path | None = None) -> None:
        _check_gstreamer()
        self.mounts = dict(mounts)
        self.port = port or free_port()
        self.credentials = credentials
        self.log = log
        self._process: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def url(self, mount: str, credentials: tuple[str, str] | None = None) -> str:
        """The mount's URL, with `user:password@` when `credentials` are given."""
        userinfo = f"{credentials[0]}:{credentials[1]}@" if credentials else ""
        return f"rtsp://{userinfo}127.0.0.1:{self.port}/{mount}"

    def start(self) -> RtspServer:
        """Starts the server and waits until it listens."""
        args = [SYSTEM_PYTHON, str(SCRIPT), "--port", str(self.port)]
        args += [f"--mount={name}=file:{spec}" if isinstance(spec, Path) else
                 f"--mount={name}={spec[0]}x{spec[1]}@{spec[2]}" for name, spec in self.mounts.items()]
        env = dict(os.environ)
        if self.credentials:
            args.append("--auth")
            env.update(RTSP_USER=self.credentials[0], RTSP_PASSWORD=self.credentials[1])
        stderr = self.log.open("a") if self.log else subprocess.DEVNULL
        self._process = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                         text=True, env=env)
        answer = self._read()
        assert answer.get("ready") == self.port, f"gst-rtsp-server did not start: {answer}"
        return self

    def _read(self) -> dict[str, object]:
        assert self._process is not None and self._process.stdout is not None
        line = self._process.stdout.readline()
        return json.loads(line) if line.strip() else {"exited": self._process.poll()}

    def _command(self, **order: object) -> None:
        with self._lock:
            assert self._process is not None and self._process.stdin is not None
            self._process.stdin.write(json.dumps(order) + "\n")
            self._process.stdin.flush()
            answer = self._read()
        assert answer == {"ok": order["cmd"]}, answer

    def resize(self, mount: str, width: int, height: int) -> None:
        """Changes the mount's picture size mid-stream (same session, new parameter sets)."""
        self._command(cmd="resize", mount=mount, width=width, height=height)
        fps = self.mounts[mount][2]  # type: ignore[index]
        self.mounts[mount] = (width, height, fps)

    def stall(self, mount: str, on: bool = True) -> None:
        """Stops (or resumes) the mount's packets; sessions stay open."""
        self._command(cmd="stall", mount=mount, on=on)

    def kill(self) -> None:
        """SIGKILL: the server vanishes, as a camera losing power."""
        if self._process is not None:
            self._process.send_signal(signal.SIGKILL)
            self._process.wait(timeout=30)
            self._process = None

    def stop(self) -> None:
        """Ends the server (closing its stdin lets it quit; killed if it does not)."""
        if self._process is None:
            return
        assert self._process.stdin is not None
        self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
        self._process = None

    def __enter__(self) -> RtspServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class MjpegServer:
    """An HTTP MJPEG camera: `GET /video.mjpg` streams `frames` (JPEG bytes) round and round at `fps`."""

    BOUNDARY = "frame"

    def __init__(self, frames: list[bytes], fps: float = 10.0) -> None:
        import http.server

        camera = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                self.send_response(200)
                self.send_header("Content-Type", f"multipart/x-mixed-replace; boundary={MjpegServer.BOUNDARY}")
                self.end_headers()
                camera.clients += 1
                n = 0
                try:
                    while not camera._stopped.is_set():
                        jpeg = frames[n % len(frames)]
                        self.wfile.write(f"--{MjpegServer.BOUNDARY}\r\nContent-Type: image/jpeg\r\n"
                                         f"Content-Length: {len(jpeg)}\r\n\r\n".encode() + jpeg + b"\r\n")
                        self.wfile.flush()
                        n += 1
                        camera._stopped.wait(1 / fps)
                except OSError:
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self._stopped = threading.Event()
        self.clients = 0
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/video.mjpg"

    def start(self) -> MjpegServer:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._server.shutdown()
        self._server.server_close()


class GarbageServer:
    """Listens on a port and answers every connection with random bytes, then closes it."""

    def __init__(self) -> None:
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._socket.getsockname()[1])
        self.connections = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def start(self) -> GarbageServer:
        self._thread.start()
        return self

    def _serve(self) -> None:
        noise = random.Random(17)
        while True:
            try:
                peer, _ = self._socket.accept()
            except OSError:
                return  # closed by stop()
            self.connections += 1
            with peer:
                try:
                    peer.recv(4096)
                    peer.sendall(noise.randbytes(4096))
                except OSError:
                    pass

    def stop(self) -> None:
        self._socket.close()
        self._thread.join(timeout=10)
