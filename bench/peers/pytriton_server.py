"""NVIDIA PyTriton 0.7 (Triton Inference Server) serving the frame model the way our handler does
(`bench.peers.core`), for `python -m bench.engines`.

    LD_LIBRARY_PATH=$(python -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))') \\
        .venv-pytriton/bin/python -m bench.peers.pytriton_server MODEL.pt --http-port PORT

Fed as Triton users feed it: the Open Inference Protocol (`tritonclient.http`), input `frames`,
BYTES `[1, 1]` per request (one encoded JPEG), dynamic batching (`max_batch_size`,
`max_queue_delay_microseconds`: TorchServe's `batchSize` and `maxBatchDelay`); outputs FP32
`brightness`, `contrast`, `sharpness` and INT32 `width`, `height`, `[1, 1]` per request (NaN and
0 for a frame that does not decode). HTTP on loopback only; gRPC and metrics are off. Triton's
Python stub must load this interpreter's libpython: the caller sets LD_LIBRARY_PATH
(`bench.engines` does).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np

from bench.peers.core import FrameModel

OUTPUTS = ("brightness", "contrast", "sharpness")
#: A detector's answer: up to this many rows of (x1, y1, x2, y2, score, class), zeros after `count`.
MAX_DETECTIONS = 100


def infer_function(model: FrameModel):
    """The `@batch` callable: `frames` `[N, 1]` bytes -> each output `[N, 1]`."""
    from pytriton.decorators import batch

    @batch
    def infer(frames: np.ndarray) -> dict[str, np.ndarray]:
        answers = model([bytes(row[0]) for row in frames])
        out = {name: np.full((len(answers), 1), np.nan, dtype=np.float32) for name in OUTPUTS}
        out["width"] = np.zeros((len(answers), 1), dtype=np.int32)
        out["height"] = np.zeros((len(answers), 1), dtype=np.int32)
        for i, answer in enumerate(answers):
            if answer["code"] != 200:
                continue
            frame = answer["frames"][0]  # type: ignore[index]
            for name in OUTPUTS:
                out[name][i, 0] = frame["outputs"][name]
            out["width"][i, 0], out["height"][i, 0] = frame["width"], frame["height"]
        return out

    return infer


def detect_function(model: FrameModel):
    """The `@batch` callable of a detector: `frames` `[N, 1]` bytes -> `detections` `[N, 100, 6]`
    FP32 and `count` `[N, 1]` INT32 (-1 for a frame that does not decode)."""
    from pytriton.decorators import batch

    @batch
    def infer(frames: np.ndarray) -> dict[str, np.ndarray]:
        answers = model([bytes(row[0]) for row in frames])
        detections = np.zeros((len(answers), MAX_DETECTIONS, 6), dtype=np.float32)
        count = np.full((len(answers), 1), -1, dtype=np.int32)
        for i, answer in enumerate(answers):
            if answer["code"] == 200:
                rows = answer["frames"][0]["detections"][:MAX_DETECTIONS]  # type: ignore[index]
                count[i, 0] = len(rows)
                if rows:
                    detections[i, :len(rows)] = rows
        return {"detections": detections, "count": count}

    return infer


def main(argv: Sequence[str] | None = None) -> None:
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    p = argparse.ArgumentParser(prog="python -m bench.peers.pytriton_server", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="the TorchScript frame model (frame_quality.pt)")
    p.add_argument("--http-port", type=int, required=True)
    p.add_argument("--name", default="frame_quality", help="the model's name on the server")
    p.add_argument("--max-batch-size", type=int, default=32, help="requests a batch (TorchServe's batchSize)")
    p.add_argument("--max-queue-delay-ms", type=float, default=50.0, help="TorchServe's maxBatchDelay")
    p.add_argument("--model-max-batch", type=int, default=16, help="frames a forward (model_max_batch)")
    p.add_argument("--decode-threads", type=int, default=2)
    p.add_argument("--detector", action="store_true", help="an end-to-end detector (face_detector)")
    p.add_argument("--workspace", help="PyTriton's workspace folder (default: one it makes and removes)")
    args = p.parse_args(argv)
    model = FrameModel(args.model, args.decode_threads, args.model_max_batch)
    config = TritonConfig(http_address="127.0.0.1", http_port=args.http_port, allow_grpc=False,
                          allow_metrics=False, log_verbose=0)
    if args.detector:
        function = detect_function(model)
        outputs = [Tensor(name="detections", dtype=np.float32, shape=(MAX_DETECTIONS, 6)),
                   Tensor(name="count", dtype=np.int32, shape=(1,))]
    else:
        function = infer_function(model)
        outputs = [*(Tensor(name=n, dtype=np.float32, shape=(1,)) for n in OUTPUTS),
                   Tensor(name="width", dtype=np.int32, shape=(1,)), Tensor(name="height", dtype=np.int32, shape=(1,))]
    with Triton(config=config, workspace=args.workspace) as triton:
        triton.bind(
            model_name=args.name, infer_func=function,
            inputs=[Tensor(name="frames", dtype=np.bytes_, shape=(1,))], outputs=outputs,
            config=ModelConfig(max_batch_size=args.max_batch_size, batcher=DynamicBatcher(
                max_queue_delay_microseconds=int(args.max_queue_delay_ms * 1000))),
            strict=True)
        triton.serve()


if __name__ == "__main__":
    main()
