"""The core's checks: OOM split and recovery, host syncs in the forward, staging overlap, device
memory against the budget, and a worker on a non-zero GPU index (filled in by the lead)."""

from __future__ import annotations

from bench.gpu_probe.probe import Section

SECTIONS: list[Section] = []
