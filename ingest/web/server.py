"""`video-ingest --web 127.0.0.1:8095`: the live view and the zone editor, served by the bridge.

The page (`ingest/web/static/`, plain HTML, CSS and JavaScript, nothing fetched from elsewhere) and its
JSON API (docs/ingest.md, "Live view"). Every API request without the token gets 401: the token
comes only as `Authorization: Bearer <token>` (the page keeps it in sessionStorage, never in a
cookie, which every port of the host would receive). On a loopback address, a request naming
another host is refused (DNS rebinding). Requests are logged at DEBUG, without their queries.
With `--record`, the recordings' routes (`ingest.web.recordings`) too: their snapshots, clips and
exports go to a `<video>` or `<img>` by signed addresses instead of the token, a byte range at a
time when asked (`Range`), straight from the file.

Bounded before any thread starts: at most `MAX_CONNECTIONS` connections are held (a connection
beyond them is answered 503 by the accepting thread and closed), and a request's line and
headers must arrive within `HEADERS_S` in all, however slowly their bytes trickle.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import socket
import threading
import time
from collections import Counter
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from ingest.analytics.scene import Line, Shape, Zone
from ingest.config import Camera, ConfigError
from ingest.sinks.output import strict_json
from ingest.web import recordings
from ingest.web.access import Token
from ingest.web.answers import Answer, Media, Outcome, Refusal, byte_range
from ingest.web.editor import EditError, Editor
from ingest.web.recordings import Recordings
from ingest.web.view import CameraView, View

if TYPE_CHECKING:
    from ingest.record.recorder import Recorder

logger = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
FILES = {"view.js": "text/javascript", "editor.js": "text/javascript", "recordings.js": "text/javascript",
         "style.css": "text/css"}
#: Connections held at once, each with its thread (a viewer's browser keeps a few open); beyond: 503.
MAX_CONNECTIONS = 256
#: Seconds a viewer's poll waits for a picture; seconds a socket may block (a stalled browser).
POLL_S = 10.0
SOCKET_S = 10.0
#: Seconds for a request's line and headers in all, from when its connection waits for them.
HEADERS_S = 10.0
MAX_BODY = 1 << 20
_CAMERA = re.compile(r"^/api/cameras/([A-Za-z0-9_.-]+)/(state|counts|events|scene)$")
_SECURITY = {"Content-Security-Policy": "default-src 'self'; img-src 'self' blob: data:; media-src 'self' blob:; "
                                       "frame-ancestors 'none'",
             "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `:PORT` or `PORT` (host 127.0.0.1).

    Raises:
        ConfigError: naming the fix.
    """
    host, _, port = text.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--web {text!r}: write HOST:PORT, e.g. --web 127.0.0.1:8095")
    return host.strip("[]") or "127.0.0.1", int(port)


def scene_json(scene: Any) -> dict[str, Any]:
    """A camera's zones and lines as the page draws them (and sends them back to save)."""
    def points(shape: Shape) -> list[list[float]]:
        return [list(p) for p in shape.points]

    def classes(names: frozenset[str]) -> dict[str, Any]:
        return {"classes": sorted(names)} if names else {}  # none: every class

    def zone(z: Zone) -> dict[str, Any]:
        return {"name": z.name, "polygon": points(z.polygon), **classes(z.classes),
                "anchor": [a.value for a in z.anchors]}

    def line(x: Line) -> dict[str, Any]:
        start, end = points(x.segment)
        return {"name": x.name, "from": start, "to": end, **classes(x.classes),
                "anchors": [a.value for a in x.anchors], "min_frames": x.min_frames}

    return {"zones": [zone(z) for z in scene.zones], "lines": [line(x) for x in scene.lines], "track": scene.track,
            "snapshot_seconds": scene.snapshot_seconds}


def motion_json(camera: Camera) -> dict[str, Any]:
    """Whether the camera looks for motion, and its motion masks (polygons, as in the YAML) for the
    editor to draw: a camera with motion off has none to draw (masks apply when motion is on)."""
    settings = camera.effective_motion
    if settings is None:
        return {"on": False, "mask": []}
    return {"on": True, "mask": [[list(point) for point in polygon] for polygon in settings.mask]}


Wanted = list[tuple[CameraView, int, bool]]


def live_wanted(query: dict[str, list[str]], view: View) -> Wanted | Refusal:
    """`/api/live`'s query as (camera, after, stills) per camera named, each camera once and
    no more cameras than the bridge has (a name repeated would repeat its picture in the body)."""
    names = (query.get("cameras") or [""])[0].split(",")
    repeated = [name for name, times in Counter(names).items() if times > 1]
    if repeated:
        return Refusal(400, "BadRequest", f"camera named more than once: {', '.join(repeated)} (name each camera once)")
    cameras = len(view.cameras())
    if len(names) > cameras:
        return Refusal(400, "BadRequest", f"{len(names)} cameras named: this bridge has {cameras}")
    views = [view.camera(name) for name in names]
    missing = [n for n, v in zip(names, views) if v is None]
    if missing:
        return Refusal(404, "NotFound", f"no such camera: {', '.join(missing)}")
    after, stills = (query[key][0].split(",") if query.get(key) else [default] * len(names)
                     for key, default in (("after", "-1"), ("stills", "0")))
    if len(after) != len(names) or len(stills) != len(names):
        return Refusal(400, "BadRequest", "give `after` (and `stills`) once per camera of `cameras`, comma-separated")
    try:
        return [(v, int(a), s == "1") for v, a, s in zip(views, after, stills) if v is not None]
    except ValueError:
        return Refusal(400, "BadRequest", "after must be whole numbers: the `seq` of the last picture shown")


def _refuse(connection: socket.socket) -> None:
    """Answers 503 on a connection beyond `MAX_CONNECTIONS`, from the accepting thread, which never
    waits: what the socket's buffer does not take at once is dropped (a 503 is far smaller)."""
    body = json.dumps({"code": 503, "type": "Busy", "message": f"the web view holds {MAX_CONNECTIONS} connections "
                       "at once: close some viewers, or try again"}).encode()
    head = [f"HTTP/1.1 503 {HTTPStatus(503).phrase}", "Content-Type: application/json",
            f"Content-Length: {len(body)}", "Connection: close", *(f"{k}: {v}" for k, v in _SECURITY.items())]
    try:
        connection.setblocking(False)
        connection.send("\r\n".join([*head, "", ""]).encode() + body)
        connection.shutdown(socket.SHUT_WR)
        connection.recv(1 << 16)  # what came already: closed unread, it would reset the 503 away
    except OSError:
        pass  # the client went, or sent nothing yet


class _Deadline(io.RawIOBase):
    """A connection's reads, each waiting at most what is left of `deadline` (None: `idle_s` each),
    so that a request's line and headers trickled a byte at a time still end at the deadline."""

    def __init__(self, connection: socket.socket, idle_s: float) -> None:
        self.connection, self.idle_s = connection, idle_s
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.idle_s if self.deadline is None else min(self.idle_s, self.deadline - time.monotonic())
        if left <= 0:
            raise TimeoutError("no whole request line and headers within the deadline")
        self.connection.settimeout(left)
        return self.connection.recv_into(buffer)


class _Server(ThreadingHTTPServer):
    """A thread per connection, at most `MAX_CONNECTIONS`: one beyond is answered 503 and closed
    without a thread."""

    daemon_threads = True
    request_queue_size = 128  # socketserver's 5 drops a burst's connections for a second (a SYN resent)

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self.connections = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.connections.acquire(blocking=False):
            _refuse(request)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread started: its slot is free again
            self.connections.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connections.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        logger.debug("web: a connection failed", exc_info=True)  # a reset by the client: nothing to answer


class WebServer:
    """Serves the page and its API on `address` until `close()`.

    Args:
        address: (host, port).
        token: the token every request must bring.
        view: what the cameras tell.
        editor: saves zones and lines to the camera list.
        recorder: `--record`'s recorder (events, clips, recordings), or None.
    """

    def __init__(self, address: tuple[str, int], token: Token, view: View, editor: Editor,
                 recorder: Recorder | None = None) -> None:
        handler = type("Handler", (_Handler,), {"web": self})
        self.token, self.view, self.editor, self.recorder = token, view, editor, recorder
        self.recordings = Recordings(recorder, token) if recorder is not None else None
        self.loopback = address[0] in ("127.0.0.1", "localhost", "::1")
        self._server = _Server(address, handler)
        self.port = self._server.server_address[1]
        self.hosts = {f"{h}:{self.port}" for h in ("127.0.0.1", "localhost", "[::1]", address[0])}
        self._thread = threading.Thread(target=self._server.serve_forever, name="web", daemon=True)

    def start(self) -> WebServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self.view.close()
        self._server.shutdown()
        self._server.server_close()
        if self.recordings is not None:
            self.recordings.close()


class _Handler(BaseHTTPRequestHandler):
    web: WebServer
    timeout = SOCKET_S
    headers_s = HEADERS_S
    protocol_version = "HTTP/1.1"  # a viewer's polls reuse one connection
    disable_nagle_algorithm = True  # the headers and the body are two writes: no 40 ms delayed-ACK stall between
    server_version = "video-ingest"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the socket's own reader, replaced by one with a deadline
        self._reader = _Deadline(self.connection, self.timeout)
        self.rfile = io.BufferedReader(self._reader)

    def handle_one_request(self) -> None:
        self._reader.deadline = time.monotonic() + self.headers_s
        super().handle_one_request()

    def parse_request(self) -> bool:
        parsed = super().parse_request()  # reads the headers
        self._reader.deadline = None
        return parsed

    def log_message(self, format: str, *args: Any) -> None:
        if getattr(self, "command", None):  # none yet: the request line timed out or could not be read
            logger.debug("web: %s %s", self.command, urlsplit(self.path).path)

    def do_GET(self) -> None:
        self._serve(self._get)

    def do_PUT(self) -> None:
        self._serve(self._put)

    def do_DELETE(self) -> None:
        self.close_connection = True  # a body it may have sent stays unread: the connection ends here
        self._serve(self._delete)

    def _serve(self, route: Any) -> None:
        try:
            if self.web.loopback and self.headers.get("Host") not in self.web.hosts:
                self._error(403, "Forbidden", "this web view answers requests for its own loopback address only")
            else:
                route(urlsplit(self.path))
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            logger.debug("web: a viewer went away")  # a stalled or closed browser: dropped, never waited for
            self.close_connection = True  # an answer may be cut short: nothing more on this connection
        except Exception as exc:  # a bug: logged (redacted), answered, and the bridge goes on
            logger.error("web: %s %s failed: %s: %s", self.command, urlsplit(self.path).path, type(exc).__name__, exc,
                         exc_info=exc)
            self._error(500, "InternalError", "the web view failed on this request (the bridge's log has why)")

    def _token(self) -> str | None:
        """The token of `Authorization: Bearer`: the only credential (a cookie is never one)."""
        auth = self.headers.get("Authorization", "")
        return auth[7:].strip() if auth.startswith("Bearer ") else None

    def _get(self, url: Any) -> None:
        recorded = recordings.route(unquote(url.path))
        if self._page(url.path):
            return
        if recorded is not None:
            self._recorded(recorded, url)
        elif not self.web.token.matches(self._token()):
            self._unauthorized()
        else:
            self._api(url)

    def _page(self, path: str) -> bool:
        """The page and its code, when `path` names them (no data in them: the page asks for the token,
        which a navigation never sends)."""
        if path.startswith("/static/") and path[8:] in FILES:
            self._send(200, (STATIC / path[8:]).read_bytes(), FILES[path[8:]])
        elif path in ("/", "/index.html"):
            self._send(200, (STATIC / "index.html").read_bytes(), "text/html; charset=utf-8")
        else:
            return False
        return True

    def _api(self, url: Any) -> None:
        if url.path == "/api/cameras":
            self._json(200, {"cameras": [self._summary(v) for v in self.web.view.cameras()]})
            return
        if url.path == "/api/live":
            self._live(parse_qs(url.query))
            return
        found = _CAMERA.match(url.path)
        view = self.web.view.camera(found[1]) if found else None
        if found is None or view is None:
            self._error(404, "NotFound", f"no such page or camera: {url.path}")
            return
        self._camera(view, found[2], parse_qs(url.query))

    def _camera(self, view: CameraView, what: str, query: dict[str, list[str]]) -> None:
        if what == "state":
            self._json(200, view.state())
        elif what == "counts":
            self._json(200, view.counts())
        elif what == "events":
            self._json(200, {"events": view.events()})
        else:
            self._json(200, self._scene(view))

    def _summary(self, view: CameraView) -> dict[str, Any]:
        assert view.camera is not None
        return {"name": view.name, "mode": view.camera.mode.value, "state": view.state(), "counts": view.counts()}

    def _scene(self, view: CameraView) -> dict[str, Any]:
        assert view.camera is not None
        reason = self.web.editor.read_only(view.name)  # from what the editor last read: no file read here
        return {**scene_json(view.camera.scene), "motion": motion_json(view.camera), "editable": reason is None,
                "read_only_reason": reason, "version": self.web.editor.version}

    def _live(self, query: dict[str, list[str]]) -> None:
        """`?cameras=a,b&after=12,-1&stills=0,1`: the next picture of each, in one long poll."""
        wanted = live_wanted(query, self.web.view)
        if isinstance(wanted, Refusal):
            self._error(wanted.status, wanted.kind, wanted.message)
            return
        found = self.web.view.live(wanted, POLL_S)
        self._send(200 if found else 204, b"".join(f.data for f in found), "application/octet-stream")

    def _delete(self, url: Any) -> None:
        found = recordings.route(unquote(url.path))
        if found is None:
            self._error(404, "NotFound", f"delete an event: DELETE /api/events/ID, not {url.path}")
        else:
            self._recorded(found, url)

    def _recorded(self, found: recordings.Route, url: Any) -> None:
        """`--record`'s routes, with the token or (a snapshot, clip or export to GET) a signed address."""
        signed = found.media and self.command == "GET"
        refused = None if self.web.token.matches(self._token()) else (
            self.web.token.refuses(url.path, url.query, time.time()) if signed else
            "give the web view's token (printed at start, or in --web-token-file)")
        if refused is not None:
            self._unauthorized(refused)
        elif self.web.recordings is None:
            self._error(404, "NotRecording", "this bridge keeps no recordings: start it with --record DIR "
                                             "(docs/ingest.md, Recordings)")
        elif self.command == "DELETE":
            self._outcome(self.web.recordings.delete(found))
        else:
            self._outcome(self.web.recordings.get(found, parse_qs(url.query)))

    def _outcome(self, outcome: Outcome) -> None:
        if isinstance(outcome, Refusal):
            self._error(outcome.status, outcome.kind, outcome.message)
        elif isinstance(outcome, Answer):
            self._json(outcome.status, outcome.body)
        else:
            self._media(outcome)

    def _media(self, media: Media) -> None:
        """A file, whole or the byte range asked for (a `<video>` asks by ranges to play and seek),
        sent by the kernel from the file (`sendfile`), never read whole into memory."""
        try:
            file = media.path.open("rb")
        except FileNotFoundError:
            self._error(404, "NotFound", "the file is gone (deleted since it was listed)")
            return
        with file:
            size = os.fstat(file.fileno()).st_size
            span = byte_range(self.headers.get("Range"), size)
            if isinstance(span, Refusal):
                self._error(span.status, span.kind, span.message, {"Content-Range": f"bytes */{size}"})
                return
            first, last = span or (0, size - 1)
            headers = {"Accept-Ranges": "bytes", "Content-Disposition": f'inline; filename="{media.name}"'}
            if span is not None:
                headers["Content-Range"] = f"bytes {first}-{last}/{size}"
                logger.debug("web: %s: 206, bytes %d-%d of %d", urlsplit(self.path).path, first, last, size)
            self._head(206 if span else 200, media.kind, last - first + 1, headers)
            if last >= first and self.connection.sendfile(file, first, last - first + 1) < last - first + 1:
                self.close_connection = True  # fewer bytes than promised: the client sees the cut

    def _put(self, url: Any) -> None:
        if not self.web.token.matches(self._token()):
            self._unauthorized("a save needs the token in `Authorization: Bearer <token>`")
            return
        found = _CAMERA.match(url.path)
        if found is None or found[2] != "scene" or self.web.view.camera(found[1]) is None:
            self._error(404, "NotFound", f"save to /api/cameras/CAMERA/scene, not {url.path}")
            return
        try:
            body = self._body()
            version = body.get("version")
            if version is not None and not isinstance(version, str):
                raise EditError(400, "version must be the scene's `version`, as it came")
            saved = self.web.editor.save(found[1], body.get("zones", []), body.get("lines", []), version,
                                         body.get("motion_mask"))
        except EditError as exc:
            self._error(exc.status, exc.kind, str(exc))
            return
        logger.info("web view: camera %s's zones, lines and motion masks saved to %s", found[1], self.web.editor.path)
        self._json(200, {"saved": True, "version": saved, "message": "saved; the bridge applies it within a "
                                                                     "second, without reconnecting the camera"})

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= MAX_BODY:
            raise EditError(400, f"send the camera's zones and lines as a JSON body of at most {MAX_BODY} bytes")
        try:
            body = json.loads(self.rfile.read(length))
        except ValueError as exc:
            raise EditError(400, f"the body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise EditError(400, 'send {"zones": [...], "lines": [...]}')
        return body

    def _unauthorized(self, message: str = "give the web view's token (printed at start, or in --web-token-file)") -> None:
        self._error(401, "Unauthorized", message, {"WWW-Authenticate": 'Bearer realm="video-ingest"'})

    def _error(self, status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> None:
        self._json(status, {"code": status, "type": kind, "message": message}, headers)

    def _json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, strict_json(body)[0].encode(), "application/json", headers)

    def _send(self, status: int, body: bytes, kind: str, headers: dict[str, str] | None = None) -> None:
        self._head(status, kind, len(body), headers)
        if body:
            self.wfile.write(body)

    def _head(self, status: int, kind: str, length: int, headers: dict[str, str] | None = None) -> None:
        self.send_response(status, HTTPStatus(status).phrase)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(length))
        for name, value in {**_SECURITY, **(headers or {})}.items():
            self.send_header(name, value)
        if status >= 400 or self.close_connection:  # a refused request's body may be unread: its connection ends
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
