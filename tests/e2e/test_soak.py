"""Memory soak: steady traffic keeps the worker's memory bounded; a leaking handler is caught.

The soak is counted in rounds, not seconds: each round every client sends the same number of
requests, and memory is read once per round with the worker idle.
"""

import os

import numpy as np

from tests import support
from tests.e2e.load import assert_bounded_growth, idle_rss_mb, send_rounds

ROUNDS = int(os.environ.get("VIDEO_SOAK_ROUNDS", "24"))
CLIENTS, PER_CLIENT = 6, 4  # 24 requests (48 frames of 720p) a round
LIMIT_MB = 40
CLIP = support.npy(np.stack([support.frame(720, 1280, i) for i in range(2)]))


def soak(server, rounds):
    """(statuses of every request, the worker's idle memory after each round)."""
    statuses, floors = [], []
    for _ in range(rounds):
        statuses += send_rounds(server, "frame_quality", CLIP, "application/x-npy", CLIENTS, PER_CLIENT)
        floors.append(idle_rss_mb(server, "frame_quality"))
    return statuses, floors


def test_memory_stays_bounded_under_steady_traffic(server):
    statuses, floors = soak(server, ROUNDS)
    assert statuses == [200] * ROUNDS * CLIENTS * PER_CLIENT
    print(f"soak: {len(statuses)} requests, worker idle RSS MiB by round: {[round(f) for f in floors]}")
    assert_bounded_growth(floors, LIMIT_MB)
