"""Memory soak: steady traffic keeps the worker's memory bounded; a leaking handler is caught."""

import os
import threading

import numpy as np

from tests import support
from tests.e2e.load import assert_bounded_growth, rss_samples, run_clients

SOAK_SECONDS = float(os.environ.get("VIDEO_SOAK_SECONDS", "90"))
LIMIT_MB = 40
CLIP = support.npy(np.stack([support.frame(720, 1280, i) for i in range(2)]))


def soak(server, seconds):
    samples = []
    sampler = threading.Thread(target=lambda: samples.extend(rss_samples(server, "frame_quality", seconds)))
    sampler.start()
    outcome = run_clients(server, "frame_quality", CLIP, "application/x-npy", clients=6, seconds=seconds)
    sampler.join()
    return outcome, samples


def test_memory_stays_bounded_under_steady_traffic(server):
    outcome, samples = soak(server, SOAK_SECONDS)
    assert outcome.statuses() == {200}
    print(f"soak: {len(outcome.records)} requests, worker RSS MiB {samples[0]:.0f} -> {samples[-1]:.0f}")
    assert_bounded_growth(samples, LIMIT_MB)
