"""Typed errors: a bad frame becomes one of these values, answered with its own HTTP status."""

from __future__ import annotations


class ConfigError(ValueError):
    """A `handler:` setting is invalid; raised once, at `initialize`."""


class CannotLoad(RuntimeError):
    """The model cannot load in this worker; the message says why and what to do. The engine
    answers every request 500 `ModelNotLoaded` with it rather than restarting the worker."""


class FrameError(Exception):
    """A request that cannot be served; carries the HTTP status it is answered with."""

    status = 400

    @property
    def kind(self) -> str:
        return type(self).__name__

    #: Metric dimension `Reason` for `video_frames_rejected_total`.
    reason = "bad_input"

    def detached(self) -> FrameError:
        """This error without its traceback and the errors it was raised from (its message says
        what went wrong), to be kept as a request's answer.

        A caught error's traceback holds every frame that raised it, and with them the body, the
        decoded pixels and the FFmpeg decoder; the frame that catches it, holding it, closes a
        reference cycle. Kept as it was, all of that lived until the cyclic collector ran: a
        worker answering hostile segments grew by megabytes a batch.
        """
        self.__cause__ = self.__context__ = None
        return self.with_traceback(None)


class UnsupportedContentType(FrameError):
    """The Content-Type is not one of the wire protocol's."""


class UnsupportedCodec(UnsupportedContentType):
    """A video segment's codec is not in the configured `video_codecs`."""


class CorruptFrame(FrameError):
    """The body cannot be decoded: truncated or corrupt image, malformed npy or raw body."""


class BadHeader(FrameError):
    """A request header the handler reads has a malformed value."""


class EmptyFrame(FrameError):
    """The body or a frame in it has no pixels."""


class FrameTooLarge(FrameError):
    """A frame's width or height is above the configured maximum."""

    reason = "too_large"


class ClipTooLarge(FrameError):
    """A clip holds more frames or pixels than configured."""

    reason = "too_large"


class StaleFrame(FrameError):
    """The frame was older than `max_frame_age_ms` when its batch started."""

    status = 504
    reason = "stale"


class DeviceOutOfMemory(FrameError):
    """The device ran out of memory on this frame alone, even after splitting to one frame."""

    status = 507
    reason = "oom"


class InternalError(FrameError):
    """A bug in the handler or the model; logged with its traceback."""

    status = 500
    reason = "internal"


class AnswerTooLarge(FrameError):
    """The answer is larger than TorchServe may send (`max_response_size`)."""

    status = 500
    reason = "too_large"


class ModelNotLoaded(FrameError):
    """The worker could not load its model (`CannotLoad`: an operator nothing registered, an ONNX
    graph ONNX Runtime cannot run here); see the log."""

    status = 500
    reason = "internal"
