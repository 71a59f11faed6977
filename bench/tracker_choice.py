"""How video-ingest's tracker was chosen: supervision's ByteTrack (A) against Roboflow's
`trackers` ByteTrackTracker (B): cost a frame at 10 and 100 boxes, ids and switches on a clean
scene, ids kept over a 0.5 s drop (docs/ingest.md, "Tracks, zones and lines"). Not run by CI:
the two need different supervision releases, so each runs in its own environment:

    python -m venv /tmp/sv && /tmp/sv/bin/pip install supervision==0.30.9
    python -m venv /tmp/tr && /tmp/tr/bin/pip install trackers==2.6.1
    /tmp/sv/bin/python bench/tracker_choice.py ; /tmp/tr/bin/python bench/tracker_choice.py

Implementation auto-detected: B if `trackers` imports, else A; force with --impl A|B. Written by
a helper for the choice; kept so that the figures can be made again.

`--survey` (implied by the other --impl values): the later survey of trackers from PyPI, one
markdown table row per configuration (defaults, and "aligned": 1 s / 30 frames lost budget, the
thresholds as near trackers' ByteTrack as each API allows) on bench/ingest.py's
`moving_detections` (copied here: those venvs lack the project's packages): 1200 frames at
30 fps (timestamps f/30), each update timed with perf_counter_ns after 200 warm-up frames (1000
timed), 10 and 100 boxes; "+conv" also times building the tracker's input from the detections'
dicts. Gap: frames 45..59 of the 10-box scene dropped (not fed, or fed empty). Reset: the ids of
60 frames, then the tracker's reset (or a new instance where it has none), 60 more. Each
candidate in its own venv (threads: OMP/OPENBLAS/MKL_NUM_THREADS=1, set below):

    python3 -m venv /tmp/trk-iou   && /tmp/trk-iou/bin/pip install numpy ioutrack==0.3.0
    python3 -m venv /tmp/trk-iours && /tmp/trk-iours/bin/pip install numpy ioutrack-rs==0.4.0
    python3 -m venv /tmp/trk-sim   && /tmp/trk-sim/bin/pip install numpy similari-trackers-rs==0.26.12
    python3 -m venv /tmp/trk-tf    && /tmp/trk-tf/bin/pip install numpy trackforge==0.4.0
    python3 -m venv /tmp/trk-bm    && /tmp/trk-bm/bin/pip install torch==2.13.0 \
        && /tmp/trk-bm/bin/pip install boxmot==25.0.0 torchvision==0.28.0
    python3 -m venv /tmp/trk-tr    && /tmp/trk-tr/bin/pip install trackers==2.6.1
    /tmp/trk-iou/bin/python bench/tracker_choice.py             # and so on (auto-detected);
    /tmp/trk-tr/bin/python bench/tracker_choice.py --survey     # the reference, --impl B
    /tmp/trk-tr/bin/python bench/tracker_choice.py --impl ingest  # this tree's ingest.analytics.tracking
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
SURVEY_IMPLS = ["ioutrack", "similari", "trackforge", "boxmot", "ingest"]
ap.add_argument("--impl", choices=["A", "B", *SURVEY_IMPLS], default=None)
ap.add_argument("--calls", type=int, default=3000)
ap.add_argument("--warmup", type=int, default=200)
ap.add_argument("--survey", action="store_true", help="the PyPI survey's rows (see the docstring)")
args = ap.parse_args()

impl = args.impl
if impl is None:
    for _mod, _impl in (("trackers", "B"), ("supervision", "A"), ("boxmot", "boxmot"),
                        ("trackforge", "trackforge"), ("similari", "similari"), ("ioutrack", "ioutrack")):
        if importlib.util.find_spec(_mod):
            impl = _impl
            break
if impl in SURVEY_IMPLS:
    args.survey = True

sv = None
T_SV = 0.0
if impl in ("A", "B"):
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


# ---------------------------------------------------------------- 4. survey: trackers on PyPI
# bench/ingest.py's scene, copied (the survey's venvs lack the project's own packages).
import math  # noqa: E402

_SPREAD = (0.6180339887498949, 0.7548776662466927, 0.5698402909980532, 0.4142135623730951,
           0.3247179572447460, 0.2360679774997897, 0.8191725133961645)


def _fraction(i: int, k: int) -> float:
    return ((i + 1) * _SPREAD[k]) % 1.0


def moving_detections(n: int, frame: int, width: int = 1920, height: int = 1080) -> list[dict[str, object]]:
    """Frame `frame`'s `n` detections: object i moves at its own constant velocity (1-8 px a frame
    across, even objects rightwards, odd ones leftwards; up to 1 px a frame up or down), wrapping
    around the frame's edges; boxes 40-120 px a side; scores 0.7-0.95, every fifth object's 0.3-0.6
    (ByteTrack's second, low-score association), with a small jitter. Deterministic."""
    out: list[dict[str, object]] = []
    for i in range(n):
        w, h = 40 + 80 * _fraction(i, 0), 40 + 80 * _fraction(i, 1)
        speed = 1 + 7 * _fraction(i, 2)
        vx, vy = (speed if i % 2 == 0 else -speed), 2 * _fraction(i, 3) - 1
        x1 = (_fraction(i, 4) * (width - w) + vx * frame) % (width - w)
        y1 = (_fraction(i, 5) * (height - h) + vy * frame) % (height - h)
        low, span = (0.3, 0.3) if i % 5 == 4 else (0.7, 0.25)
        score = min(0.95, max(0.3, low + span * _fraction(i, 6) + 0.02 * math.sin(0.2 * frame + i)))
        out.append({"box": [round(x1, 1), round(y1, 1), round(x1 + w, 1), round(y1 + h, 1)],
                    "score": round(score, 3), "class_id": 0, "label": "person"})
    return out


SURVEY_FRAMES, SURVEY_WARMUP = 1200, 200
GAP = range(45, 60)  # 15 frames: 0.5 s at 30 fps


def _xyxy(dets):
    return np.array([d["box"] for d in dets], dtype=np.float64).reshape(len(dets), 4)


def _scores(dets):
    return np.array([d["score"] for d in dets], dtype=np.float64)


def _iou(a, b):
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None, :] - inter)


class Candidate:
    """One tracker behind the survey's calls. `aligned`: 1 s / 30 frames lost budget and the
    thresholds as near trackers' ByteTrack (activation 0.7, high/low split 0.6, an id on the
    second match) as the API allows; otherwise the library's defaults."""

    label = ""
    dist = ""  # distribution name, for version, licence and size
    timestamps = "no: frame counts"
    reset_how = "reset()"

    def make(self, aligned):
        raise NotImplementedError

    def native(self, dets):
        """The tracker's input for one frame of `moving_detections` dicts."""
        raise NotImplementedError

    def step(self, trk, x, ts):
        raise NotImplementedError

    def ids(self, raw, x, dets):
        """{detection index: track id} of one step's output."""
        raise NotImplementedError

    def reset(self, trk, aligned):
        trk.reset()
        return trk

    def configs(self):
        return {"defaults": False, "aligned": True}


class TrackersBT(Candidate):
    label, dist = "trackers ByteTrackTracker", "trackers"
    timestamps = "yes: `timestamp=` s (Kalman dt and lost budget)"

    def make(self, aligned):
        return trackers.ByteTrackTracker()  # its defaults are the reference: 30 frames = 1 s, 0.7, 0.6, mcf 2

    def configs(self):
        return {"defaults (= the reference)": False}

    def native(self, dets):
        return make_dets(_xyxy(dets), _scores(dets), np.arange(len(dets)))

    def step(self, trk, x, ts):
        return trk.update(x, timestamp=ts)

    def ids(self, raw, x, dets):
        if raw.tracker_id is None or not len(raw):
            return {}
        return {int(o): int(t) for o, t in zip(raw.data["obj"], raw.tracker_id) if t >= 0}


class SupervisionBT(TrackersBT):
    label, dist = "supervision ByteTrack", "supervision"
    timestamps = "no: frame counts (frame_rate scales the buffer)"

    def make(self, aligned):
        if not aligned:
            return sv.ByteTrack()
        return sv.ByteTrack(track_activation_threshold=0.7, lost_track_buffer=30, frame_rate=30,
                            minimum_consecutive_frames=2)

    def configs(self):
        return Candidate.configs(self)

    def step(self, trk, x, ts):
        return trk.update_with_detections(x)


class IouTrack(Candidate):
    label = "ioutrack ByteTrack"
    reset_how = "clear_trackers()"

    def __init__(self):
        import ioutrack

        self.mod = ioutrack
        self.dist = "ioutrack-rs" if importlib.util.find_spec("ioutrack") and _installed("ioutrack-rs") else "ioutrack"
        self.label = f"{self.dist} ByteTrack"

    def make(self, aligned):
        if not aligned:
            return self.mod.ByteTrack()  # max_age=1, min_hits=3, init 0.8, high 0.7, low 0.1
        return self.mod.ByteTrack(max_age=30, min_hits=2, init_tracker_min_score=0.7, high_score_threshold=0.6)

    def native(self, dets):
        return np.column_stack([_xyxy(dets), _scores(dets)])

    def step(self, trk, x, ts):
        return trk.update(x, return_all=False)

    def ids(self, raw, x, dets):
        # no detection index in the output (boxes are the filter's): matched back by IoU >= 0.5
        if not len(raw) or not len(x):
            return {}
        m = _iou(np.asarray(raw[:, :4], np.float64), x[:, :4])
        out = {}
        for r in np.argsort(-m.max(axis=1)):
            j = int(m[r].argmax())
            if m[r, j] >= 0.5 and j not in out:
                out[j] = int(raw[r, 4])
        return out

    def reset(self, trk, aligned):
        trk.clear_trackers()
        return trk


class Similari(Candidate):
    label, dist = "similari-trackers-rs Sort", "similari-trackers-rs"
    timestamps = "no: epochs (frames); skip_epochs(n) for a gap"
    reset_how = "none: new instance"

    def __init__(self):
        import similari

        self.mod = similari

    def make(self, aligned):
        # shards=1 in both (default 4: 4 worker threads). Defaults: max_idle_epochs=5, method=None.
        # aligned: IoU >= 0.1 (trackers' minimum_iou_threshold); at 0.3 (its examples' value) a
        # box whose score varies from frame to frame got a new id nearly every frame here.
        if not aligned:
            return self.mod.Sort(shards=1)
        return self.mod.Sort(shards=1, bbox_history=1, max_idle_epochs=30,
                             method=self.mod.PositionalMetricType.iou(threshold=0.1))

    def native(self, dets):
        bb = self.mod.BoundingBox.new_with_confidence
        return [(bb(b[0], b[1], b[2] - b[0], b[3] - b[1], d["score"]).as_xyaah(), i)
                for i, d in enumerate(dets) for b in (d["box"],)]

    def step(self, trk, x, ts):
        r = trk.predict(x)
        trk.clear_wasted()  # its docs: purge the waste bin now and then, or memory grows
        return r

    def ids(self, raw, x, dets):
        return {int(t.custom_object_id): int(t.id) for t in raw}

    def reset(self, trk, aligned):
        return self.make(aligned)


class TrackForge(Candidate):
    label, dist = "trackforge BYTETRACK", "trackforge"
    reset_how = "none: new instance"

    def __init__(self):
        import trackforge

        self.mod = trackforge

    def make(self, aligned):
        if not aligned:
            return self.mod.BYTETRACK()  # track_thresh 0.5, track_buffer 30, match 0.8, det_thresh 0.6
        return self.mod.BYTETRACK(track_thresh=0.6, track_buffer=30, det_thresh=0.7)

    def native(self, dets):
        return [([b[0], b[1], b[2] - b[0], b[3] - b[1]], d["score"], 0) for d in dets for b in (d["box"],)]

    def step(self, trk, x, ts):
        return trk.update(x)

    def ids(self, raw, x, dets):
        return {int(di): int(tid) for tid, _box, _s, _c, di in raw if di is not None}

    def reset(self, trk, aligned):
        return self.make(aligned)


class BoxMot(Candidate):
    label, dist = "boxmot ByteTrack", "boxmot"
    timestamps = "partly: variable_dt + timestamp_s= sets the Kalman dt; lost budget in frames"

    def __init__(self):
        import logging

        import boxmot

        logging.getLogger("boxmot").disabled = True  # it logs its settings at each construction
        self.mod = boxmot

    def make(self, aligned):
        if not aligned:
            return self.mod.ByteTrack()  # min_conf 0.1, track_thresh 0.45, track_buffer 25
        return self.mod.ByteTrack(track_thresh=0.6, track_buffer=30, variable_dt=True)

    def native(self, dets):
        return np.column_stack([_xyxy(dets), _scores(dets), np.zeros(len(dets))])

    def step(self, trk, x, ts):
        if trk.variable_dt:
            return trk.update(x, None, timestamp_s=ts)
        return trk.update(x, None)

    def ids(self, raw, x, dets):
        return {int(r[7]): int(r[4]) for r in raw}


class Ingest(Candidate):
    label, dist = "ingest.analytics.tracking.Tracks (this tree)", ""
    timestamps = "yes: stream seconds (Kalman dt and lost budget)"

    def __init__(self):
        from pathlib import Path

        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from ingest.analytics.tracking import Tracks

        self.cls = Tracks

    def make(self, aligned):
        return self.cls()  # lost_track_seconds 1.0, threshold 0.5, id on the second match

    def configs(self):
        return {"defaults": False}

    def native(self, dets):
        return dets  # it takes the dicts: its figures include the conversion

    def step(self, trk, x, ts):
        return trk.update(x, ts)

    def ids(self, raw, x, dets):
        return {i: int(t) for i, t in enumerate(raw) if t is not None}


def _installed(dist):
    try:
        importlib.metadata.distribution(dist)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def _licence(dist):
    if not dist:
        return "(the project's)"
    md = importlib.metadata.metadata(dist)
    lic = md.get("License-Expression") or md.get("License")
    if lic:
        return lic.splitlines()[0][:40]
    cls = [c.split("::")[-1].strip() for c in md.get_all("Classifier") or [] if c.startswith("License ::")]
    if cls:
        return cls[0]
    for f in importlib.metadata.files(dist) or []:
        if "LICENSE" in f.name.upper():
            first = next((ln.strip() for ln in f.read_text().splitlines() if ln.strip()), "?")
            return f"none in metadata; LICENSE file: {first}"
    return "none"


def _size_mb(dist):
    if not dist:
        return "-"
    d = importlib.metadata.distribution(dist)
    own = sum(os.path.getsize(d.locate_file(f)) for f in d.files or [] if os.path.exists(d.locate_file(f)))
    site = str(d.locate_file(""))
    allb = 0
    for root, _dirs, files in os.walk(site):
        if os.path.relpath(root, site).split(os.sep)[0].startswith(("pip", "setuptools", "_distutils_hack")):
            continue
        allb += sum(os.path.getsize(os.path.join(root, f)) for f in files if not os.path.islink(os.path.join(root, f)))
    return f"{own / 1e6:.1f} MB (site-packages {allb / 1e6:.0f} MB)"


def survey_timing(cand, aligned, n, runs=3):
    """`runs` fresh trackers over the scene; each frame's dicts made untimed, then timed: the
    conversion to the tracker's input, and the update. Median and p99 over the runs' timed frames
    pooled; `spread`: the runs' own update medians, lowest to highest."""
    pc = time.perf_counter_ns
    t_up, t_conv, meds, distinct, dup, with_id, total = [], [], [], set(), 0, 0, 0
    for run in range(runs):
        trk = cand.make(aligned)
        mine = []
        for f in range(SURVEY_FRAMES):
            dets = moving_detections(n, f)
            a = pc()
            x = cand.native(dets)
            b = pc()
            r = cand.step(trk, x, f / FPS)
            c = pc()
            if f < SURVEY_WARMUP:
                continue
            mine.append(c - b)
            t_conv.append(c - a)
            if run == 0:
                m = cand.ids(r, x, dets)
                vals = list(m.values())
                dup += len(vals) - len(set(vals))
                distinct.update(vals)
                with_id += len(m)
                total += n
        t_up += mine
        meds.append(np.median(mine) / 1e3)
    up, conv = np.array(t_up) / 1e3, np.array(t_conv) / 1e3
    return dict(med=np.median(up), p99=np.percentile(up, 99), cmed=np.median(conv), cp99=np.percentile(conv, 99),
                spread=(min(meds), max(meds)), distinct=len(distinct), dup=dup, cov=with_id / total)


def _wrapped(n):
    """Objects whose box jumps (wraps around an edge) between frames 44 and 60."""
    out = set()
    for f in range(44, 60):
        a, b = _xyxy(moving_detections(n, f)), _xyxy(moving_detections(n, f + 1))
        out |= set(np.flatnonzero(np.abs(b[:, :2] - a[:, :2]).max(axis=1) > 200).tolist())
    return out


def survey_gap(cand, aligned, mode, n=10):
    """Frames 45..59 dropped: `skip` not fed (timestamps jump for those that take them), `empty`
    fed with no detections. Kept: objects whose id after the gap (first id seen from frame 60)
    is the one at frame 44, over those with an id at frame 44 that do not wrap in the gap."""
    trk = cand.make(aligned)
    before, after = {}, {}
    for f in range(120):
        if f in GAP:
            if mode == "empty":
                cand.step(trk, cand.native([]), f / FPS)
            continue
        d = moving_detections(n, f)
        x = cand.native(d)
        m = cand.ids(cand.step(trk, x, f / FPS), x, d)
        if f == 44:
            before = m
        if f >= 60:
            for o, t in m.items():
                after.setdefault(o, t)
    elig = [o for o in before if o not in _wrapped(n)]
    return f"{sum(after.get(o) == before[o] for o in elig)}/{len(elig)}"


def survey_budget(cand, aligned):
    """One still box (score 0.9) at frames 0..29, then none fed until frame 75 (1.5 s later by
    the timestamps, the next call by count), then frames 75..89: a lost budget kept in time ends
    the track (a new id), one kept in calls does not."""
    trk = cand.make(aligned)
    d = [{"box": [500.0, 500.0, 580.0, 660.0], "score": 0.9, "class_id": 0}]
    seen = {}
    for f in [*range(30), *range(75, 90)]:
        x = cand.native(d)
        m = cand.ids(cand.step(trk, x, f / FPS), x, d)
        if 0 in m:
            seen.setdefault(f >= 75, m[0])
    if len(seen) < 2:
        return f"? ({seen})"
    return "time (new id)" if seen[True] != seen[False] else "calls (same id)"


def survey_reset(cand, aligned, n=10):
    trk = cand.make(aligned)
    runs = []
    for k in range(2):
        if k:
            trk = cand.reset(trk, aligned)
        ids = set()
        for f in range(60):
            d = moving_detections(n, f)
            x = cand.native(d)
            ids.update(cand.ids(cand.step(trk, x, f / FPS), x, d).values())
        runs.append(ids)
    a, b = runs
    span = lambda s: f"{min(s)}..{max(s)}" if s else "none"  # noqa: E731
    return f"{cand.reset_how}: {span(a)} then {span(b)} ({'REUSED' if a & b else 'not reused'})"


def survey():
    t0 = time.perf_counter()
    cand = {"A": SupervisionBT, "B": TrackersBT, "ioutrack": IouTrack, "similari": Similari,
            "trackforge": TrackForge, "boxmot": BoxMot, "ingest": Ingest}[impl]()
    x = cand.native(moving_detections(10, 0))
    cand.ids(cand.step(cand.make(False), x, 0.0), x, None)  # lazy imports (boxmot's) load here
    t_imp = time.perf_counter() - t0 + T_SV + T_TR
    ver = importlib.metadata.version(cand.dist) if cand.dist else "working tree"
    heavy = [m for m in ("torch", "cv2", "scipy", "supervision") if m in sys.modules]
    print(f"<!-- {cand.label} {ver}: import + first update {t_imp:.2f} s, loaded {heavy}; numpy "
          f"{np.__version__}; {SURVEY_FRAMES} frames, {SURVEY_WARMUP} warm-up, 3 runs pooled; threads "
          f"{os.environ.get('OMP_NUM_THREADS')}; spread = the 3 runs' medians -->")
    print("| candidate | config | 10 boxes µs med / p99 (spread) | 100 boxes µs med / p99 (spread) "
          "| +conv µs med 10 / 100 "
          "| ids 10 / 100 (coverage) | timestamps | 0.5 s gap kept: not fed / fed empty | reset | licence "
          "| installed |")
    print("|" + "---|" * 11)
    for cname, aligned in cand.configs().items():
        r = {n: survey_timing(cand, aligned, n) for n in (10, 100)}
        dup = r[10]["dup"] + r[100]["dup"]
        gap = " / ".join(survey_gap(cand, aligned, m) for m in ("skip", "empty"))
        cells = [f"{cand.label} {ver}", cname]
        cells += [f"{r[n]['med']:.0f} / {r[n]['p99']:.0f} ({r[n]['spread'][0]:.0f}-{r[n]['spread'][1]:.0f})"
                  for n in (10, 100)]
        cells.append(f"{r[10]['cmed']:.0f} / {r[100]['cmed']:.0f}")
        cells.append(f"{r[10]['distinct']} ({r[10]['cov']:.2f}) / {r[100]['distinct']} ({r[100]['cov']:.2f})"
                     + (f", {dup} dup in a frame" if dup else ""))
        cells += [f"{cand.timestamps}; 1.5 s skip: {survey_budget(cand, aligned)}", gap, survey_reset(cand, aligned), _licence(cand.dist), _size_mb(cand.dist)]
        print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    survey() if args.survey else main()
