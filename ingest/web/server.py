"""`video-ingest --web 127.0.0.1:8095`: the live view and the zone editor, served by the bridge.

The page (`ingest/web/static/`, plain HTML, CSS and JavaScript, nothing fetched from elsewhere) and its
JSON API (docs/ingest.md, "Live view"). Every request without the token gets 401: the token comes
as `Authorization: Bearer <token>` or the `video_ingest_token` cookie the page sets; a save needs
the header (a cookie alone cannot change anything). On a loopback address, a request naming
another host is refused (DNS rebinding). Requests are logged at DEBUG, without their queries.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from ingest.analytics.scene import Line, Shape, Zone
from ingest.config import ConfigError
from ingest.web.access import Token
from ingest.web.editor import EditError, Editor
from ingest.web.view import CameraView, View

logger = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
FILES = {"view.js": "text/javascript", "editor.js": "text/javascript", "style.css": "text/css"}
COOKIE = "video_ingest_token"
#: Requests served at once (each viewer of each camera holds one, waiting for its next picture).
MAX_REQUESTS = 256
#: Seconds a viewer's poll waits for a picture; seconds a socket may block (a stalled browser).
POLL_S = 10.0
SOCKET_S = 10.0
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


class WebServer:
    """Serves the page and its API on `address` until `close()`.

    Args:
        address: (host, port).
        token: the token every request must bring.
        view: what the cameras tell.
        editor: saves zones and lines to the camera list.
    """

    def __init__(self, address: tuple[str, int], token: Token, view: View, editor: Editor) -> None:
        handler = type("Handler", (_Handler,), {"web": self})
        self.token, self.view, self.editor = token, view, editor
        self.slots = threading.BoundedSemaphore(MAX_REQUESTS)
        self.loopback = address[0] in ("127.0.0.1", "localhost", "::1")
        self._server = ThreadingHTTPServer(address, handler)
        self._server.daemon_threads = True
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


class _Handler(BaseHTTPRequestHandler):
    web: WebServer
    timeout = SOCKET_S
    protocol_version = "HTTP/1.1"  # a viewer's polls reuse one connection
    server_version = "video-ingest"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("web: %s %s", self.command, urlsplit(self.path).path)

    def do_GET(self) -> None:
        self._serve(self._get)

    def do_PUT(self) -> None:
        self._serve(self._put)

    def _serve(self, route: Any) -> None:
        if not self.web.slots.acquire(blocking=False):
            self._error(503, "Busy", f"the web view serves {MAX_REQUESTS} requests at once: close some viewers")
            return
        try:
            if self.web.loopback and self.headers.get("Host") not in self.web.hosts:
                self._error(403, "Forbidden", "this web view answers requests for its own loopback address only")
            else:
                route(urlsplit(self.path))
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            logger.debug("web: a viewer went away")  # a stalled or closed browser: dropped, never waited for
        except Exception as exc:  # a bug: logged (redacted), answered, and the bridge goes on
            logger.error("web: %s %s failed: %s: %s", self.command, urlsplit(self.path).path, type(exc).__name__, exc,
                         exc_info=exc)
            self._error(500, "InternalError", "the web view failed on this request (the bridge's log has why)")
        finally:
            self.web.slots.release()

    def _token(self, header_only: bool = False) -> str | None:
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            return auth[7:].strip()
        if header_only:
            return None
        try:
            morsel = SimpleCookie(self.headers.get("Cookie", "")).get(COOKIE)
        except CookieError:
            return None
        return unquote(morsel.value) if morsel else None

    def _get(self, url: Any) -> None:
        if url.path.startswith("/static/") and url.path[8:] in FILES:
            name = url.path[8:]
            self._send(200, (STATIC / name).read_bytes(), FILES[name])
            return
        authorized = self.web.token.matches(self._token())
        if url.path in ("/", "/index.html"):  # the page asks for the token when it has none
            self._send(200 if authorized else 401, (STATIC / "index.html").read_bytes(), "text/html; charset=utf-8")
            return
        if not authorized:
            self._unauthorized()
            return
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
        reason = self.web.editor.read_only(view.name)
        return {**scene_json(view.camera.scene), "editable": reason is None, "read_only_reason": reason}

    def _live(self, query: dict[str, list[str]]) -> None:
        """`?cameras=a,b&after=12,-1&stills=0,1`: the next picture of each, in one long poll."""
        def listed(key: str, default: str) -> list[str]:
            return (query.get(key) or [""])[0].split(",") if query.get(key) else [default] * len(names)

        names = (query.get("cameras") or [""])[0].split(",")
        after, stills = listed("after", "-1"), listed("stills", "0")
        views = [self.web.view.camera(name) for name in names]
        if not all(views) or len(after) != len(names) or len(stills) != len(names):
            missing = [n for n, v in zip(names, views) if v is None]
            self._error(404 if missing else 400, "NotFound" if missing else "BadRequest",
                        f"no such camera: {', '.join(missing)}" if missing else
                        "give `after` (and `stills`) once per camera of `cameras`, comma-separated")
            return
        try:
            wanted = [(v, int(a), s == "1") for v, a, s in zip(views, after, stills) if v is not None]
        except ValueError:
            self._error(400, "BadRequest", "after must be whole numbers: the `seq` of the last picture shown")
            return
        found = self.web.view.live(wanted, POLL_S)
        self._send(200 if found else 204, b"".join(f.data for f in found), "application/octet-stream")

    def _put(self, url: Any) -> None:
        if not self.web.token.matches(self._token(header_only=True)):
            self._unauthorized("a save needs the token in `Authorization: Bearer <token>`")
            return
        found = _CAMERA.match(url.path)
        if found is None or found[2] != "scene" or self.web.view.camera(found[1]) is None:
            self._error(404, "NotFound", f"save to /api/cameras/CAMERA/scene, not {url.path}")
            return
        try:
            body = self._body()
            self.web.editor.save(found[1], body.get("zones", []), body.get("lines", []))
        except EditError as exc:
            self._error(exc.status, "InvalidScene" if exc.status == 400 else "ReadOnly", str(exc))
            return
        logger.info("web view: camera %s's zones and lines saved to %s", found[1], self.web.editor.path)
        self._json(200, {"saved": True, "message": "saved; the bridge applies it within a second, "
                                                   "without reconnecting the camera"})

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
        self._send(status, json.dumps(body).encode(), "application/json", headers)

    def _send(self, status: int, body: bytes, kind: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status, HTTPStatus(status).phrase)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for name, value in {**_SECURITY, **(headers or {})}.items():
            self.send_header(name, value)
        if status >= 400:  # a refused request's body may be unread: its connection ends here
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if body:
            self.wfile.write(body)
