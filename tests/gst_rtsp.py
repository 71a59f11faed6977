"""A live RTSP server for the ingest tests: GStreamer's gst-rtsp-server, run by Debian's python3.

Not imported by the tests (the project's venv has no `gi`); `tests.rtsp_server.RtspServer` starts
it as `/usr/bin/python3 tests/gst_rtsp.py --port P --mount NAME=WxH@FPS ...` and talks to it over
stdin/stdout, one JSON object a line:

- it prints `{"ready": PORT}` once it listens;
- `{"cmd": "resize", "mount": NAME, "width": W, "height": H}` changes a mount's picture size
  mid-stream (the encoder sends new parameter sets and a key frame, the session stays);
- `{"cmd": "stall", "mount": NAME, "on": true}` stops (false: resumes) its packets, session kept;
- each command is answered `{"ok": CMD}`.

Each mount is a live stream (`videotestsrc` -> x264, a key frame every second, parameter sets with
every key frame, as IP cameras send), or `NAME=file:PATH`: an H.264 MPEG-TS file played once at
its own pace (a scripted scene; a new session plays it again). With `--auth` every mount needs
basic credentials, read from the environment `RTSP_USER`/`RTSP_PASSWORD`.

Each client gets its own pipeline, and commands apply to every pipeline of the mount: given one
shared media, gst-rtsp-server 1.22 aborts (`rtsp-media.c:2766 gst_rtsp_media_get_rates:
assertion failed`) when clients set it up at the same moment.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading


def _pipeline(width: int, height: int, fps: int) -> str:
    return (f"( videotestsrc is-live=true pattern=ball ! capsfilter name=caps caps=video/x-raw,format=I420,"
            f"width={width},height={height},framerate={fps}/1 ! valve name=valve drop=false ! "
            f"x264enc tune=zerolatency speed-preset=ultrafast key-int-max={fps} bframes=0 threads=1 ! "
            "video/x-h264,profile=baseline ! rtph264pay name=pay0 pt=96 config-interval=-1 )")


def _file_pipeline(path: str) -> str:
    return (f"( filesrc location={path} ! tsdemux ! h264parse ! "
            "rtph264pay name=pay0 pt=96 config-interval=-1 )")


class Mount:
    """One mount's settings and its clients' live pipelines."""

    def __init__(self, spec: str) -> None:
        name, _, shape = spec.partition("=")
        self.file = shape[len("file:"):] if shape.startswith("file:") else None
        size, _, fps = ("0x0@15" if self.file else shape).partition("@")
        width, _, height = size.partition("x")
        self.name, self.width, self.height, self.fps = name, int(width), int(height), int(fps or 15)
        self.stalled = False
        self.medias: set = set()

    def configure(self, media) -> None:
        """Remembers a client's media until it ends and applies the current size and stall state to it."""
        self.medias.add(media)
        media.connect("unprepared", self.medias.discard)
        self.apply(media)

    def apply_all(self) -> None:
        """Applies the current size and stall state to every client's media."""
        for media in list(self.medias):
            self.apply(media)

    def apply(self, media) -> None:
        from gi.repository import Gst

        if self.file:
            return
        element = media.get_element()
        caps = element.get_by_name("caps")
        caps.set_property("caps", Gst.Caps.from_string(
            f"video/x-raw,format=I420,width={self.width},height={self.height},framerate={self.fps}/1"))
        element.get_by_name("valve").set_property("drop", self.stalled)


def _token(rtsp, role: str):
    """An RTSP token whose media factory role is `role`."""
    token = rtsp.RTSPToken()
    token.set_string("media.factory.role", role)
    return token


def main() -> int:
    import gi

    gi.require_version("Gst", "1.0")
    gi.require_version("GstRtspServer", "1.0")
    from gi.repository import GLib, Gst, GstRtspServer

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mount", action="append", default=[], help="NAME=WxH@FPS")
    parser.add_argument("--auth", action="store_true", help="every mount needs RTSP_USER/RTSP_PASSWORD")
    args = parser.parse_args()
    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(str(args.port))
    auth = GstRtspServer.RTSPAuth()
    role = "user" if args.auth else "anonymous"
    if args.auth:  # no default token: a client without credentials is challenged (401)
        auth.add_basic(GstRtspServer.RTSPAuth.make_basic(os.environ["RTSP_USER"], os.environ["RTSP_PASSWORD"]),
                       _token(GstRtspServer, role))
    else:
        auth.set_default_token(_token(GstRtspServer, role))
    server.set_auth(auth)
    mounts = {}
    for spec in args.mount:
        mount = Mount(spec)
        mounts[mount.name] = mount
        factory = GstRtspServer.RTSPMediaFactory()
        factory.set_launch(_file_pipeline(mount.file) if mount.file else _pipeline(mount.width, mount.height, mount.fps))
        factory.connect("media-configure", lambda _f, media, m=mount: m.configure(media))
        permissions = Gst.Structure.new_empty(role)
        permissions.set_value("media.factory.access", True)
        permissions.set_value("media.factory.construct", True)
        factory.add_role_from_structure(permissions)
        server.get_mount_points().add_factory(f"/{mount.name}", factory)
    loop = GLib.MainLoop()
    if server.attach(None) == 0:
        print(json.dumps({"error": f"cannot listen on port {args.port}"}), flush=True)
        return 1

    def command(line: str) -> bool:
        order = json.loads(line)
        mount = mounts[order["mount"]]
        if order["cmd"] == "resize":
            mount.width, mount.height = int(order["width"]), int(order["height"])
        elif order["cmd"] == "stall":
            mount.stalled = bool(order["on"])
        mount.apply_all()
        print(json.dumps({"ok": order["cmd"]}), flush=True)
        return False

    def read_commands() -> None:
        for line in sys.stdin:
            if line.strip():
                GLib.idle_add(command, line)
        GLib.idle_add(loop.quit)  # stdin closed: the test is gone

    threading.Thread(target=read_commands, daemon=True).start()
    print(json.dumps({"ready": args.port}), flush=True)
    loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
