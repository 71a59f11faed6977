"""`python -m bench.ray_onehop`: the measurement behind the Ray engine's next step
(docs/performance.md, "Where Ray's CPU goes"). frame_quality's model deployment serves HTTP
itself (its own application on `/predictions/frame_quality`, no `doors` hop) or, for comparison,
behind today's `doors` ingress; Serve's Python proxy in front, or Ray's HAProxy mode
(`--haproxy`). Each run is a fresh one-node Ray on 127.0.0.1; the load and the CPU accounting are
`bench.engines`' (16 open-loop cameras of 720p JPEG, a nominal and an overload window).

A prototype of the path, not the product: no key, no request-size bound, no timeout answers.

    python -m bench.ray_onehop --path one-hop --haproxy     # about 90 s a run
    python -m bench.ray_onehop --path two-hop
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import engines as bench
from loadgen.schedule import Plan

TAG = "ray-onehop"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ray_onehop", description=__doc__.split("\n\n")[0])
    p.add_argument("--path", choices=("one-hop", "two-hop"), required=True,
                   help="one-hop: the model deployment is the ingress; two-hop: behind `doors`, as today")
    p.add_argument("--haproxy", action="store_true", help="Ray's HAProxy mode (RAY_SERVE_ENABLE_HA_PROXY=1)")
    p.add_argument("--seconds", type=float, default=10.0, help="each measured window")
    args = p.parse_args(argv)
    from rayserve.node import keep_loopback

    keep_loopback()  # before Ray is imported
    work = Path(tempfile.mkdtemp(prefix="ray-onehop-"))
    mars, _ = bench.build_archives(work, ("frame_quality",), False)
    gcs, http = bench.free_port(), bench.free_port()
    env = {**os.environ, bench.TAG_ENV: TAG}
    if args.haproxy:  # its fixed ports moved clear of anything else here
        env.update(RAY_SERVE_ENABLE_HA_PROXY="1", RAY_SERVE_FALLBACK_PROXY_HTTP_PORT=str(bench.free_port()),
                   RAY_SERVE_HAPROXY_STATS_PORT=str(bench.free_port()),
                   RAY_SERVE_HAPROXY_METRICS_PORT=str(bench.free_port()))
    node = [sys.executable, "-m", "rayserve.node"]
    subprocess.run([*node, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={gcs}", "--num-cpus=2",
                    "--include-dashboard=false", "--disable-usage-stats"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    try:
        _deploy(f"127.0.0.1:{gcs}", http, str(mars["frame_quality"]), args.path)
        _measure(f"http://127.0.0.1:{http}/predictions/frame_quality", args)
    finally:
        subprocess.run([*node, "stop"], stdout=subprocess.DEVNULL, check=False)
    return 0


def _deploy(address: str, port: int, mar: str, path: str) -> None:
    import ray
    from ray import serve
    from starlette.requests import Request
    from starlette.responses import Response

    from rayserve import wire
    from rayserve.ingress import Doors, Route
    from rayserve.model import Model

    class Direct(Model):
        """The model replica answering HTTP itself."""

        async def __call__(self, request: Request) -> Response:  # type: ignore[override]
            body = await request.body()
            item, headers = await wire.item(request, body, True)
            answer = await self.run_batch((item, headers))
            return Response(answer.body, answer.status, media_type="application/json")

    ray.init(address=address, _node_ip_address="127.0.0.1", logging_level="WARNING", log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    batching = {"batch_size": 32, "max_batch_delay_ms": 50}  # the shipped frame_quality's
    if path == "one-hop":
        direct = serve.deployment(Direct).options(name="frame_quality", max_ongoing_requests=164,
                                                  user_config=batching, ray_actor_options={"num_cpus": 1})
        serve.run(direct.bind(mar), name="frame_quality", route_prefix="/predictions/frame_quality")
    else:
        model = serve.deployment(Model).options(name="frame_quality", max_ongoing_requests=64, max_queued_requests=100,
                                                user_config=batching, ray_actor_options={"num_cpus": 1})
        doors = serve.deployment(Doors).options(name="doors", max_ongoing_requests=1024,
                                                ray_actor_options={"num_cpus": 0})
        serve.run(doors.bind({"frame_quality": model.bind(mar)}, {"frame_quality": Route("1.0", 120)}, None, 10**8),
                  name="video", route_prefix="/")


def _measure(url: str, args: argparse.Namespace) -> None:
    from loadgen.frames import Format, FrameSource

    send = bench.http_sender(url, None)
    source = FrameSource(Format.JPEG, distinct=8)
    for stream in range(bench.CLIENTS):
        source.prepare(stream, bench.RESOLUTION)

    def bodies(stream: int, frame_id: int) -> bytes:
        return source.payload(stream, frame_id, bench.RESOLUTION).body

    load = bench.LOADS["frame_quality"]
    bench.drive(Plan(bench.CLIENTS, load.nominal, 4.0), bodies, send)  # warm-up
    label = f"{args.path}{' + HAProxy' if args.haproxy else ''}"
    for name, fps in (("nominal", load.nominal), ("overload", load.overload)):
        before = bench.cpu_seconds(bench.tagged(TAG))
        records, dropped = bench.drive(Plan(bench.CLIENTS, fps, args.seconds), bodies, send)
        after = bench.cpu_seconds(bench.tagged(TAG))
        w = bench.summarize(records, args.seconds, bench.cpu_delta(before, after), os.cpu_count() or 1, dropped)
        print(f"{label:<20} {name:<8} offered {w.offered_fps:6.1f}  served {w.frames_per_s:6.1f} frames/s  "
              f"p99 {bench._num(w.p99_ms, 0)} ms  CPU {bench._num(w.cpu_ms_per_frame)} ms/frame  {w.statuses}")
        print("    CPU s by process: " + ", ".join(f"{k} {v:.1f}" for k, v in bench.cpu_split(before, after).items()))


if __name__ == "__main__":
    sys.exit(main())
