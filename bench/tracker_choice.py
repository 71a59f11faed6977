"""How video-ingest's tracker was chosen: supervision's ByteTrack (A) against Roboflow's
`trackers` ByteTrackTracker (B): cost a frame at 10 and 100 boxes, ids and switches on a clean
scene, ids kept over a 0.5 s drop (docs/ingest.md, "Tracks, zones and lines"). Not run by CI:
the two need different supervision releases, so each runs in its own environment:

    python -m venv /tmp/sv && /tmp/sv/bin/pip install supervision==0.30.9
    python -m venv /tmp/tr && /tmp/tr/bin/pip install trackers==2.6.1
    /tmp/sv/bin/python bench/tracker_choice.py ; /tmp/tr/bin/python bench/tracker_choice.py

Implementation auto-detected: B if `trackers` imports, else A; force with --impl A|B. Written by
a helper for the choice; kept so that the figures can be made again.
"""
# ruff: noqa: E402 (thread counts are set before numpy is imported)
import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import importlib.metadata
import importlib.util
import sys
import time
import warnings

t0 = time.perf_counter()
import numpy as np  # noqa: E402

T_NUMPY = time.perf_counter() - t0

warnings.filterwarnings("ignore")

ap = argparse.ArgumentParser()
ap.add_argument("--impl", choices=["A", "B"], default=None)
ap.add_argument("--calls", type=int, default=3000)
ap.add_argument("--warmup", type=int, default=200)
args = ap.parse_args()

impl = args.impl
if impl is None:
    impl = "B" if importlib.util.find_spec("trackers") else "A"

t0 = time.perf_counter()
import supervision as sv  # noqa: E402

T_SV = time.perf_counter() - t0
T_TR = 0.0
if impl == "B":
    t0 = time.perf_counter()
    import trackers  # noqa: E402

    T_TR = time.perf_counter() - t0
CV2_LOADED = "cv2" in sys.modules

W, H, FPS = 1920, 1080, 30.0


def make_tracker(variant="default"):
    """variant: 'default' or dict of kwargs."""
    kw = {} if variant == "default" else dict(variant)
    if impl == "A":
        return sv.ByteTrack(**kw)
    return trackers.ByteTrackTracker(**kw)


def step(trk, dets, ts=None):
    if impl == "A":
        return trk.update_with_detections(dets)
    return trk.update(dets, timestamp=ts)


def make_dets(xyxy, scores, obj):
    return sv.Detections(
        xyxy=np.asarray(xyxy, dtype=np.float32).reshape(-1, 4),
        confidence=np.asarray(scores, dtype=np.float32),
        class_id=np.zeros(len(scores), dtype=int),
        data={"obj": np.asarray(obj, dtype=int)},
    )


def draw_scores(rng, n):
    s = rng.uniform(0.3, 0.95, n)
    low = rng.random(n) < 0.10
    s[low] = rng.uniform(0.1, 0.3, low.sum())
    return s


# ---------------------------------------------------------------- 1. timing
def timing_scene(n, frames, seed):
    """n boxes, straight paths 2-10 px/frame, bounce at frame edge, overlap allowed."""
    rng = np.random.default_rng(seed)
    wh = rng.uniform(40, 120, (n, 2))
    pos = rng.uniform([0, 0], [W, H], (n, 2)) % (np.array([W, H]) - wh)
    ang = rng.uniform(0, 2 * np.pi, n)
    spd = rng.uniform(2, 10, n)
    vel = np.stack([np.cos(ang), np.sin(ang)], 1) * spd[:, None]
    out = []
    for _ in range(frames):
        pos += vel
        for d in range(2):
            lim = (W, H)[d] - wh[:, d]
            over = (pos[:, d] < 0) | (pos[:, d] > lim)
            vel[over, d] *= -1
            pos[:, d] = np.clip(pos[:, d], 0, lim)
        xyxy = np.hstack([pos, pos + wh]) + rng.uniform(-1, 1, (n, 4))
        out.append(make_dets(xyxy, draw_scores(rng, n), np.arange(n)))
    return out


def bench(n):
    frames = timing_scene(n, args.warmup + args.calls, seed=n)
    trk = make_tracker()
    for i in range(args.warmup):
        step(trk, frames[i], (i / FPS))
    ts = np.empty(args.calls)
    pc = time.perf_counter_ns
    for j in range(args.calls):
        i = args.warmup + j
        d = frames[i]
        t = i / FPS if impl == "B" else None
        a = pc()
        step(trk, d, t)
        ts[j] = pc() - a
    ts /= 1e3
    return np.median(ts), np.percentile(ts, 99), ts.mean()


# ---------------------------------------------------------------- 2. correctness
def lane_scene(n=10, frames=300, seed=0, speed=None, boxw=None, fixed_score=None):
    """n objects in separate horizontal lanes (1080/n px each), straight paths.
    Object is emitted only while fully inside the frame (it leaves at the far edge)."""
    rng = np.random.default_rng(seed)
    lane = H / n
    wh = np.column_stack([
        rng.uniform(40, 120, n) if boxw is None else np.full(n, boxw),
        rng.uniform(40, min(120, lane - 10), n),
    ])
    spd = rng.uniform(2, 10, n) if speed is None else np.full(n, float(speed))
    dirn = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    x0 = np.where(dirn > 0, 5.0, W - 5.0 - wh[:, 0])
    y0 = np.arange(n) * lane + (lane - wh[:, 1]) / 2
    out = []
    for f in range(frames):
        x = x0 + dirn * spd * f
        inside = (x >= 0) & (x + wh[:, 0] <= W)
        idx = np.where(inside)[0]
        xyxy = np.column_stack([x, y0, x + wh[:, 0], y0 + wh[:, 1]])[idx]
        xyxy = xyxy + rng.uniform(-1, 1, xyxy.shape)
        sc = draw_scores(rng, n)[idx] if fixed_score is None else np.full(len(idx), fixed_score)
        out.append(make_dets(xyxy, sc, idx))
    return out


def run_ids(trk, frames, ts_list=None):
    """Return per-frame dict obj->id (only ids >= 0 for B, A returns only tracked)."""
    res = []
    for k, d in enumerate(frames):
        r = step(trk, d, None if ts_list is None else ts_list[k])
        m = {}
        if r.tracker_id is not None and len(r):
            for o, t in zip(r.data["obj"], r.tracker_id):
                if t >= 0:
                    m[int(o)] = int(t)
        res.append(m)
    return res


def correctness(variant, n=10, frames=300, seed=0):
    sc = lane_scene(n, frames, seed)
    res = run_ids(make_tracker(variant), sc, [f / FPS for f in range(frames)] if impl == "B" else None)
    all_ids, first_seen, switches, first_id_frame = [], {}, 0, {}
    last = {}
    for f, m in enumerate(res):
        for o, t in m.items():
            if t not in first_seen:
                first_seen[t] = f
                all_ids.append(t)
            if o in last and last[o] != t:
                switches += 1
            last[o] = t
            first_id_frame.setdefault(o, f)
    appear = {o: min(f for f, d in enumerate(sc) if o in d.data["obj"]) for o in range(n)}
    delays = [first_id_frame.get(o, -1) - appear[o] if o in first_id_frame else None for o in range(n)]
    # coverage: fraction of object-frames with an id
    tot = sum(len(d) for d in sc)
    cov = sum(len(m) for m in res) / tot
    return dict(distinct=len(all_ids), switches=switches, delays=delays, ids=sorted(all_ids), cov=cov)


def birth_delay(variant):
    """obj0 present from first call, obj1 appears at frame 10; score 0.9, no jitter noise."""
    frames = []
    for f in range(20):
        boxes, obj = [[100 + 4 * f, 100, 160 + 4 * f, 180]], [0]
        if f >= 10:
            boxes.append([100 + 4 * f, 500, 160 + 4 * f, 580])
            obj.append(1)
        frames.append(make_dets(boxes, [0.9] * len(obj), obj))
    res = run_ids(make_tracker(variant), frames, [f / FPS for f in range(20)] if impl == "B" else None)
    d0 = next((f for f, m in enumerate(res) if 0 in m), None)
    d1 = next((f - 10 for f, m in enumerate(res) if 1 in m), None)
    return d0, d1


def reset_check():
    trk = make_tracker()
    sc = lane_scene(3, 10, seed=1, fixed_score=0.9)
    ts = [f / FPS for f in range(10)] if impl == "B" else None
    a = run_ids(trk, sc, ts)[-1]
    trk.reset()
    b = run_ids(trk, sc, ts)[-1]
    return sorted(a.values()), sorted(b.values())


# ---------------------------------------------------------------- 3. time gap
def gap_test(speed, mode, n=5):
    sc = lane_scene(n, 151, seed=2, speed=speed, boxw=50, fixed_score=0.9)
    trk = make_tracker()
    seq = list(range(0, 60)) + list(range(75, 151))
    before, after = {}, {}
    for f in seq:
        if f == 75 and mode == "empty":
            for _ in range(60, 75):
                step(trk, sv.Detections.empty(), None)
        ts = f / FPS if mode == "ts" else None
        r = step(trk, sc[f], ts)
        m = {int(o): int(t) for o, t in zip(r.data.get("obj", []), r.tracker_id) if t >= 0} if len(r) else {}
        if f == 59:
            before = m
        if f >= 75:
            for o, t in m.items():
                after.setdefault(o, t)
    kept = sum(1 for o in before if after.get(o) == before[o])
    return f"{kept}/{len(before)}"


def main():
    ver = sv.__version__ + (f", trackers {importlib.metadata.version('trackers')}" if impl == "B" else "")
    print(f"impl={impl} ({'sv.ByteTrack' if impl == 'A' else 'trackers.ByteTrackTracker'}), supervision {ver}, numpy {np.__version__}")
    print(f"import s: numpy {T_NUMPY:.3f}  supervision {T_SV:.3f}  trackers {T_TR:.3f}  cv2 in sys.modules after import: {CV2_LOADED}")
    print("\n| N dets | median us | p99 us | mean us | % core @30fps (median) |")
    for n in (10, 100):
        med, p99, mean = bench(n)
        print(f"| {n} | {med:.0f} | {p99:.0f} | {mean:.0f} | {med * 30 / 1e6 * 100:.2f}% |")

    if impl == "A":
        variants = {"default (mcf=1)": "default", "mcf=2": dict(minimum_consecutive_frames=2)}
    else:
        variants = {
            "default (mcf=2, act=0.7, high=0.6)": "default",
            "mcf=1": dict(minimum_consecutive_frames=1),
            "mcf=1, act=0.35, high=0.25": dict(minimum_consecutive_frames=1, track_activation_threshold=0.35, high_conf_det_threshold=0.25),
        }
    print("\ncorrectness, 10 lane objects x 300 frames (obj leaves at far edge), seeds 0..4")
    for name, v in variants.items():
        for seed in range(5):
            c = correctness(v, seed=seed)
            print(f"  {name:36s} seed{seed}: distinct_ids={c['distinct']} switches={c['switches']} "
                  f"id_coverage={c['cov']:.3f} frames_to_first_id={c['delays']}"
                  + (f" ids={c['ids']}" if seed == 0 else ""))
    print("\nbirth delay (score 0.9): frames until id for [obj at first call, obj born at frame 10]")
    for mcf in (1, 2, 3):
        print(f"  mcf={mcf}: {birth_delay(dict(minimum_consecutive_frames=mcf))}")
    a, b = reset_check()
    print(f"\nids before reset {a}, after reset() {b}")

    print("\ngap test (5 objects, 50px wide, score 0.9; frames 0..59, gap 60..74, 75..150): kept id")
    modes = ["asis", "empty"] + (["ts"] if impl == "B" else [])
    for spd in (4, 12):
        print("  speed", spd, "px/f: " + "  ".join(f"{m}={gap_test(spd, m)}" for m in modes))


if __name__ == "__main__":
    main()
