// The live view: a tile per camera (its video or pictures, with each answered frame's boxes,
// track ids, zones and lines drawn at that frame's time), one camera large with its state,
// counts and last events. Talks only to the bridge's own API (docs/ingest.md, "Live view").
"use strict";

// The token lives in this tab's sessionStorage (this origin only): a cookie would reach every port
// of the host. Every API call sends it as `Authorization: Bearer`.
const TOKEN = "video_ingest_token";
const COLOURS = { zone: "rgb(255,214,0)", line: "rgb(0,200,255)", box: "rgb(60,255,60)", draft: "rgb(255,80,255)",
  motion: "rgb(255,40,40)", region: "rgb(255,150,0)", mask: "rgba(170,170,170,0.45)" };
// The motion overlay (the header's "motion" box): kept in this tab, like the token.
const MOTION = "video_ingest_motion";
let motionShown = false;
const LIVE_EDGE_S = 3;      // further behind the newest video than this: jump to it
const KEEP_S = 20;          // video kept behind the playing position
const THUMBNAILS = 200;     // events' thumbnails kept (made here, from the frames shown)
const thumbnails = new Map();

function token() {
  return sessionStorage.getItem(TOKEN) || "";
}

function setToken(value) {
  sessionStorage.setItem(TOKEN, value);
}

// A cookie an older page set: gone, so that no port of the host receives it again.
function forgetCookie() {
  if (document.cookie.split("; ").some((c) => c.startsWith(TOKEN + "="))) {
    document.cookie = `${TOKEN}=; path=/; max-age=0; SameSite=Strict`;
  }
}

async function api(path, options = {}) {
  const headers = { ...(options.headers || {}), Authorization: `Bearer ${token()}` };
  const response = await fetch(path, { ...options, headers, cache: "no-store" });
  if (response.status === 401) {
    showLogin();
    throw new Error("unauthorized");
  }
  return response;
}

function showLogin() {
  document.getElementById("login").hidden = false;
  document.getElementById("grid").hidden = true;
  document.getElementById("focus").hidden = true;
}

const sleep = (ms) => new Promise((done) => setTimeout(done, ms));
const once = (target, name) => new Promise((done) => target.addEventListener(name, done, { once: true }));

function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key === "text") node.textContent = value; else node.setAttribute(key, value);
  }
  node.append(...children);
  return node;
}

// Where a frame of `width` x `height` pixels lies in a box of the canvas (object-fit: contain).
function placement(canvas, width, height) {
  const scale = Math.min(canvas.width / width, canvas.height / height);
  return { scale, x: (canvas.width - width * scale) / 2, y: (canvas.height - height * scale) / 2, width, height };
}

// A shape's points in frame pixels (fractions of the frame when every coordinate is within 0..1).
function pixels(points, width, height) {
  const fractions = points.every(([x, y]) => x <= 1 && y <= 1);
  return fractions ? points.map(([x, y]) => [x * width, y * height]) : points;
}

class Tile {
  constructor(camera) {
    this.name = camera.name;
    this.mode = camera.mode;
    this.seq = -1;
    this.stills = false;
    this.scene = { zones: [], lines: [] };
    this.frames = null;        // the answered frames drawn last (for a picture)
    this.ranges = [];          // video appended: {start, end, head}, media time -> stream time
    this.draft = null;         // the editor's shape being drawn
    this.drawn = [];           // boxes drawn last, in canvas pixels (read by the tests)
    this.motionDrawn = null;   // the motion overlay drawn last, in canvas pixels (read by the tests)
    this.kept = null;          // boxes shown where the model last looked (motion: frames looked at in part)
    this.video = element("video", { muted: "", playsinline: "", autoplay: "" });
    this.video.muted = true;
    this.picture = element("canvas", { class: "picture" });
    this.overlay = element("canvas", { class: "overlay" });
    this.notice = element("div", { class: "notice", hidden: "" });
    this.frame = element("div", { class: "frame" }, this.video, this.picture, this.overlay, this.notice);
    this.label = element("strong", { text: this.name });
    this.summary = element("span", { class: "summary" });
    this.root = element("div", { class: "tile", "data-camera": this.name }, this.frame,
      element("div", { class: "caption" }, this.label, this.summary));
    this.root.tile = this;
    this.closed = false;
    this.watchFrames();
  }

  close() {
    this.closed = true;
    this.root.remove();
  }

  // One fragment of the live poll (in order: each waits for the one before).
  receive(head, payload) {
    this.seq = head.seq;
    this.pending = (this.pending || Promise.resolve()).then(async () => {
      if (this.closed) return;
      try {
        if (head.kind === "mp4") await this.play(head, payload);
        else await this.show(head, payload);
      } catch (error) {
        console.warn(`camera ${this.name}:`, error);
        this.source = null;   // start the video anew with the next fragment
      }
    });
  }

  async play(head, payload) {
    if (!window.MediaSource || !MediaSource.isTypeSupported(head.codec)) {
      this.stills = true;
      const every = this.scene.snapshot_seconds ?? 10;
      this.say(`This browser cannot play ${head.codec.replace(/^video\/mp4; codecs=/, "")}: ` +
               `showing annotated stills instead, one every ${every} s (the camera's snapshot_seconds).`);
      return;
    }
    if (!this.source || this.codec !== head.codec) await this.open(head.codec);
    const buffer = this.buffer;
    buffer.timestampOffset = this.end;
    buffer.appendBuffer(payload);
    await once(buffer, "updateend");
    const ranges = buffer.buffered;
    const end = ranges.length ? ranges.end(ranges.length - 1) : this.end;
    this.ranges.push({ start: this.end, end, head });
    this.end = end;
    this.video.hidden = false;
    this.picture.hidden = true;
    const behind = end - this.video.currentTime;
    if (behind > LIVE_EDGE_S && !this.held) this.video.currentTime = Math.max(0, end - 1);  // held: paused on purpose
    if (this.video.paused && !this.held) this.video.play().catch(() => {});
    await this.trim();
  }

  async open(codec) {
    this.source = new MediaSource();
    this.codec = codec;
    this.video.src = URL.createObjectURL(this.source);
    await once(this.source, "sourceopen");
    this.buffer = this.source.addSourceBuffer(codec);
    this.buffer.mode = "segments";
    this.end = 0;
    this.ranges = [];
  }

  async trim() {
    const before = this.video.currentTime - KEEP_S;
    if (before <= 0 || this.buffer.updating) return;
    this.buffer.remove(0, before);
    await once(this.buffer, "updateend");
    this.ranges = this.ranges.filter((r) => r.end > before);
  }

  async show(head, payload) {
    const image = await createImageBitmap(new Blob([payload], { type: "image/jpeg" }));
    this.video.hidden = true;
    this.picture.hidden = false;
    this.fit(this.picture);
    const at = placement(this.picture, image.width, image.height);
    const pen = this.picture.getContext("2d");
    pen.clearRect(0, 0, this.picture.width, this.picture.height);
    pen.drawImage(image, at.x, at.y, image.width * at.scale, image.height * at.scale);
    this.frames = { frames: head.frames, width: image.width, height: image.height };
    this.draw(head.frames[0] || null, image.width, image.height);
    this.thumbnails((head.events || []).map((e) => ({ ...e, pts: head.frames[0]?.pts ?? e.pts })),
                    head.frames[0]?.pts ?? 0, this.picture);
  }

  say(text) {
    this.notice.textContent = text;
    this.notice.hidden = !text;
  }

  // Each presented video frame: the answered frame of its stream time, drawn over it.
  watchFrames() {
    if (!("requestVideoFrameCallback" in HTMLVideoElement.prototype)) {
      const tick = () => { if (!this.closed) { this.drawAt(this.video.currentTime); requestAnimationFrame(tick); } };
      requestAnimationFrame(tick);
      return;
    }
    const next = (_, meta) => {
      if (this.closed) return;
      this.drawAt(meta.mediaTime);
      this.video.requestVideoFrameCallback(next);
    };
    this.video.requestVideoFrameCallback(next);
  }

  drawAt(mediaTime) {
    const range = [...this.ranges].reverse().find((r) => r.start <= mediaTime + 1e-3);
    if (!range) return;
    const pts = range.head.pts + (mediaTime - range.start);
    let best = null;
    for (const frame of range.head.frames) {
      if (frame.pts <= pts + 0.01 && (!best || frame.pts > best.pts)) best = frame;
    }
    this.draw(best, this.video.videoWidth, this.video.videoHeight);
    if (best) this.thumbnails(range.head.events, best.pts, this.video);
  }

  // The thumbnails of the events that happened in the frame at `pts`, from `source` as shown.
  thumbnails(events, pts, source) {
    for (const e of events || []) {
      if (Math.abs(e.pts - pts) > 1e-3 || thumbnails.has(e.event_id)) continue;
      const small = element("canvas", { width: "192", height: "108" });
      const pen = small.getContext("2d");
      const width = source.videoWidth || source.width, height = source.videoHeight || source.height;
      const at = placement(small, width, height);
      pen.drawImage(source, at.x, at.y, width * at.scale, height * at.scale);
      pen.drawImage(this.overlay, 0, 0, small.width, small.height);
      thumbnails.set(e.event_id, small.toDataURL("image/jpeg", 0.7));
      if (thumbnails.size > THUMBNAILS) thumbnails.delete(thumbnails.keys().next().value);
    }
  }

  redraw() {
    if (!this.video.hidden) this.drawAt(this.video.currentTime);
    else if (this.frames) this.draw(this.frames.frames[0] || null, this.frames.width, this.frames.height);
  }

  fit(canvas) {
    const ratio = window.devicePixelRatio || 1;
    const width = Math.round(this.frame.clientWidth * ratio), height = Math.round(this.frame.clientHeight * ratio);
    if (canvas.width !== width || canvas.height !== height) { canvas.width = width; canvas.height = height; }
  }

  // The zones, lines, the editor's draft and the frame's boxes, over a picture of `width` x `height`.
  draw(frame, width, height) {
    const canvas = this.overlay;
    this.fit(canvas);
    const pen = canvas.getContext("2d");
    pen.clearRect(0, 0, canvas.width, canvas.height);
    if (!width || !height) return;
    const at = placement(canvas, width, height);
    this.at = at;
    const place = ([x, y]) => [at.x + x * at.scale, at.y + y * at.scale];
    pen.lineWidth = Math.max(2, Math.round(canvas.width / 400));
    pen.font = `${Math.max(12, Math.round(canvas.width / 70))}px sans-serif`;
    if (motionShown) this.masks(pen, width, height, place);
    for (const zone of this.scene.zones) this.shape(pen, pixels(zone.polygon, width, height).map(place), true, COLOURS.zone, zone.name);
    for (const line of this.scene.lines) this.shape(pen, pixels([line.from, line.to], width, height).map(place), false, COLOURS.line, line.name);
    if (this.draft && this.draft.points.length) {
      this.shape(pen, this.draft.points.map(([x, y]) => place([x * width, y * height])), this.draft.kind !== "line", COLOURS.draft, "");
    }
    this.drawn = [];
    const scale = frame && frame.width ? (width / frame.width) : 1;
    for (const d of this.visible(frame)) {
      const [x1, y1] = place([d.box[0] * scale, d.box[1] * scale]);
      const [x2, y2] = place([d.box[2] * scale, d.box[3] * scale]);
      pen.strokeStyle = COLOURS.box;
      pen.strokeRect(x1, y1, x2 - x1, y2 - y1);
      const text = `#${d.track_id ?? "?"} ${d.label ?? ""}`.trim();
      const size = pen.measureText(text);
      const textHeight = parseInt(pen.font, 10) + 4;
      const top = Math.max(0, y1 - textHeight - pen.lineWidth);
      pen.fillStyle = "rgba(0,0,0,0.75)";
      pen.fillRect(x1, top, size.width + 6, textHeight);
      pen.fillStyle = "#fff";
      pen.fillText(text, x1 + 3, top + textHeight - 4);
      this.drawn.push({ box: [x1, y1, x2, y2], label: d.label, track_id: d.track_id, ...(d.held ? { held: true } : {}) });
    }
    this.motionDrawn = motionShown && frame ? this.motion(pen, frame, (x, y) => place([x * scale, y * scale])) : null;
  }

  // The boxes to draw for `frame`. A frame the model looked at only in part (motion: its `regions`)
  // or not at all (`looked: false`) answers only there: the objects seen last elsewhere did not
  // move (the tracker keeps them as they were), so their boxes stay. Motion off (no `looked`): the
  // frame's own boxes, as they came.
  visible(frame) {
    if (!frame) return [];
    if (frame.looked === undefined) { this.kept = null; return frame.detections; }
    if (frame !== this.keptFor) {
      const regions = frame.looked ? frame.regions || [] : [];
      const w = frame.width || Infinity, h = frame.height || Infinity;
      const clamp = (b) => [Math.max(0, b[0]), Math.max(0, b[1]), Math.min(w, b[2]), Math.min(h, b[3])];
      const inside = (b) => regions.some((r) => b[0] >= r[0] && b[1] >= r[1] && b[2] <= r[2] && b[3] <= r[3]);
      const tracked = new Set(frame.detections.map((d) => d.track_id).filter((id) => id !== undefined));
      const before = (this.kept || []).filter((d) => !inside(clamp(d.box)) && !tracked.has(d.track_id))
        .map((d) => ({ ...d, held: true }));  // an object seen now is not kept where it was too
      this.kept = [...before, ...frame.detections];
      this.keptFor = frame;
    }
    return this.kept;
  }

  // The frame's motion as the bridge found it: its regions (what the model looked at, dashed), its
  // motion boxes (thin), a badge when it was not looked at or the light changed. What was drawn,
  // in canvas pixels, or null for a frame without motion (its camera has motion off).
  motion(pen, frame, place) {
    if (frame.looked === undefined) return null;
    const drawn = { looked: frame.looked, lighting: Boolean(frame.lighting), regions: [], motion: [] };
    const boxes = (list, colour, dash, width, into) => {
      pen.save();
      pen.strokeStyle = colour;
      pen.setLineDash(dash);
      pen.lineWidth = width;
      for (const b of list || []) {
        const [x1, y1] = place(b[0], b[1]), [x2, y2] = place(b[2], b[3]);
        pen.strokeRect(x1, y1, x2 - x1, y2 - y1);
        into.push([x1, y1, x2, y2]);
      }
      pen.restore();
    };
    const thin = Math.max(1, Math.round(pen.lineWidth / 2));
    boxes(frame.regions, COLOURS.region, [8, 6], pen.lineWidth, drawn.regions);
    boxes(frame.motion, COLOURS.motion, [], thin, drawn.motion);
    const badges = [...(frame.looked ? [] : ["not looked at"]), ...(frame.lighting ? ["lighting change"] : [])];
    badges.forEach((text, row) => this.badge(pen, text, row));
    return drawn;
  }

  badge(pen, text, row) {
    const height = parseInt(pen.font, 10) + 6;
    const x = this.at.x + 6, y = this.at.y + 6 + row * (height + 4);
    pen.fillStyle = "rgba(0,0,0,0.75)";
    pen.fillRect(x, y, pen.measureText(text).width + 10, height);
    pen.fillStyle = COLOURS.region;
    pen.fillText(text, x + 5, y + height - 5);
  }

  // The camera's motion masks (no motion is counted inside them), filled grey under the rest.
  masks(pen, width, height, place) {
    pen.save();
    pen.fillStyle = COLOURS.mask;
    for (const polygon of this.scene.motion?.mask || []) {
      pen.beginPath();
      pixels(polygon, width, height).map(place).forEach(([x, y], i) => (i ? pen.lineTo(x, y) : pen.moveTo(x, y)));
      pen.closePath();
      pen.fill();
    }
    pen.restore();
  }

  shape(pen, points, closed, colour, name) {
    pen.strokeStyle = colour;
    pen.fillStyle = colour;
    pen.beginPath();
    points.forEach(([x, y], i) => (i ? pen.lineTo(x, y) : pen.moveTo(x, y)));
    if (closed) pen.closePath();
    pen.stroke();
    if (name && points.length) pen.fillText(name, points[0][0] + 6, points[0][1] + parseInt(pen.font, 10) + 4);
  }

  // A point of the overlay (CSS pixels from its top left) as fractions of the frame, or null off it.
  fraction(offsetX, offsetY) {
    if (!this.at) return null;
    const ratio = window.devicePixelRatio || 1;
    const x = (offsetX * ratio - this.at.x) / (this.at.width * this.at.scale);
    const y = (offsetY * ratio - this.at.y) / (this.at.height * this.at.scale);
    if (x < 0 || y < 0 || x > 1 || y > 1) return null;
    return [Math.round(x * 10000) / 10000, Math.round(y * 10000) / 10000];
  }
}

const tiles = new Map();
let focused = null;

// One long poll for every tile's next picture (a browser opens few connections to one host).
async function live() {
  for (;;) {
    const shown = [...tiles.values()];
    if (!shown.length) { await sleep(500); continue; }
    const query = `cameras=${shown.map((t) => t.name).join(",")}&after=${shown.map((t) => t.seq).join(",")}` +
      `&stills=${shown.map((t) => (t.stills ? 1 : 0)).join(",")}`;
    let response;
    try {
      live.abort = new AbortController();  // a new camera asks again at once
      response = await api(`/api/live?${query}`, { signal: live.abort.signal });
    } catch (error) {
      if (error.message === "unauthorized") return;
      if (error.name !== "AbortError") await sleep(1000);
      continue;
    }
    if (response.status === 204) continue;
    if (!response.ok) { await sleep(1000); continue; }
    try {
      if (!fragments(new Uint8Array(await response.arrayBuffer()))) await sleep(1000);
    } catch (error) {
      console.warn("live view: a response skipped:", error);  // one bad answer never ends the poll
      await sleep(1000);
    }
  }
}

// A live poll's fragments, each to its tile; one that cannot be read is skipped (and its camera
// moved past it, when its seq can be read), the others shown. Returns how many were shown.
function fragments(data) {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  let shown = 0;
  for (let at = 0; at + 8 <= data.length;) {
    const headLength = view.getUint32(at), payloadLength = view.getUint32(at + 4);
    const text = new TextDecoder().decode(data.subarray(at + 8, at + 8 + headLength));
    const payload = data.subarray(at + 8 + headLength, at + 8 + headLength + payloadLength);
    at += 8 + headLength + payloadLength;
    let head;
    try {
      head = JSON.parse(text);
    } catch (error) {
      console.warn(`live view: a fragment skipped, its header is not JSON (${error.message}):`, text.slice(0, 200));
      skipped(text);
      continue;
    }
    const tile = tiles.get(head.camera);
    if (tile && payload.length === payloadLength) { tile.receive(head, payload); shown++; }
  }
  return shown;
}

// The camera and seq of a header that is not JSON (`{"seq":N,"kind":...,"camera":"NAME",...}`):
// its tile asks for the fragments after it, not for it again.
function skipped(text) {
  const seq = /^\{"seq":(\d+),/.exec(text), camera = /"camera":"([A-Za-z0-9_.-]+)"/.exec(text);
  const tile = seq && camera ? tiles.get(camera[1]) : null;
  if (tile && Number(seq[1]) > tile.seq) tile.seq = Number(seq[1]);
}

function describe(state) {
  if (state.up) return `up, ${state.fps} fps answered, lag ${state.lag_s ?? "-"} s`;
  if (state.reconnect_in_s !== null) return `down: reconnecting in ${state.reconnect_in_s} s`;
  return "down";
}

function summary(counts) {
  const zones = Object.entries(counts.zones).map(([z, labels]) => `${z} ${Object.values(labels).reduce((a, b) => a + b, 0)}`);
  const lines = Object.entries(counts.lines).map(([l, d]) => {
    const sum = (x) => Object.values(x || {}).reduce((a, b) => a + b, 0);
    return `${l} ${sum(d.in)} in / ${sum(d.out)} out`;
  });
  return [...zones, ...lines].join(" · ");
}

async function refresh() {
  const response = await api("/api/cameras");
  const { cameras } = await response.json();
  const names = new Set(cameras.map((c) => c.name));
  for (const [name, tile] of tiles) if (!names.has(name)) { tile.close(); tiles.delete(name); }
  for (const camera of cameras) {
    let tile = tiles.get(camera.name);
    if (!tile) {
      tile = new Tile(camera);
      tiles.set(camera.name, tile);
      if (live.abort) live.abort.abort();
      document.getElementById("grid").append(tile.root);
      tile.root.addEventListener("click", () => { if (focused !== tile) focus(tile); });
      loadScene(tile);
    }
    tile.label.className = camera.state.up ? "up" : "down";
    tile.summary.textContent = `${describe(camera.state)}${summary(camera.counts) ? " · " + summary(camera.counts) : ""}`;
    if (tile === focused) showDetails(tile, camera);
  }
  document.getElementById("status").textContent = `${cameras.length} camera(s)`;
}

// The camera's zones and lines as the bridge runs them (`editor`: the editor's list too).
async function loadScene(tile, editor = true) {
  const scene = await (await api(`/api/cameras/${tile.name}/scene`)).json();
  tile.scene = scene;
  tile.redraw();
  if (editor && tile === focused && window.editor) window.editor.load(tile, scene);
  return scene;
}

function row(cells, data) {
  const tr = element("tr");
  cells.forEach((text, i) => tr.append(element("td", { text: String(text), ...(data[i] || {}) })));
  return tr;
}

function showDetails(tile, camera) {
  const s = camera.state;
  const state = document.getElementById("state");
  const items = [["up", s.up ? "yes" : "no"], ["answered fps", s.fps], ["lag", s.lag_s === null ? "-" : `${s.lag_s} s`],
    ["dropped", s.dropped], ["last error", s.last_error || "none"],
    ["reconnecting", s.reconnect_in_s === null ? "-" : `in ${s.reconnect_in_s} s`],
    ["video", s.codec ? `${s.codec} ${s.width}x${s.height}` : "-"]];
  state.replaceChildren(...items.flatMap(([k, v]) => [element("dt", { text: k }), element("dd", { text: String(v), "data-key": k })]));
  const zones = document.querySelector("#zones tbody");
  zones.replaceChildren(...Object.entries(camera.counts.zones).flatMap(([zone, labels]) =>
    Object.entries(labels).map(([label, n]) => row([zone, label, n], [{}, {}, { "data-zone": zone, "data-label": label }]))));
  const lines = document.querySelector("#lines tbody");
  lines.replaceChildren(...Object.entries(camera.counts.lines).flatMap(([line, d]) => {
    const labels = new Set([...Object.keys(d.in || {}), ...Object.keys(d.out || {})]);
    return [...labels].map((label) => row([line, label, d.in?.[label] ?? 0, d.out?.[label] ?? 0],
      [{}, {}, { "data-line": line, "data-direction": "in", "data-label": label },
        { "data-line": line, "data-direction": "out", "data-label": label }]));
  }));
}

async function showEvents(tile) {
  const { events } = await (await api(`/api/cameras/${tile.name}/events`)).json();
  const list = document.getElementById("events");
  list.replaceChildren(...events.map((e) => {
    const what = e.event === "crossed" ? `crossed ${e.line} ${e.direction}` :
      e.event === "left" ? `left ${e.zone} after ${Number(e.dwell_s).toFixed(1)} s` : `entered ${e.zone}`;
    const picture = thumbnails.has(e.event_id) ? element("img", { alt: "", src: thumbnails.get(e.event_id) })
      : element("span", { class: "no-thumbnail" });
    return element("li", { "data-event": e.event }, picture, element("span", { text: `${e.label} #${e.track_id} ${what}` }));
  }));
}

function focus(tile) {
  focused = tile;
  document.getElementById("focus").hidden = false;
  document.getElementById("grid").hidden = true;
  document.getElementById("focus-name").textContent = tile.name;
  document.getElementById("stage").append(tile.root);
  loadScene(tile);
  showEvents(tile).catch(() => {});
  requestAnimationFrame(() => tile.redraw());
}

function unfocus() {
  if (!focused) return;
  if (window.editor) window.editor.stop();
  const grid = document.getElementById("grid");
  const order = [...tiles.keys()];
  grid.append(focused.root);
  for (const name of order) grid.append(tiles.get(name).root);
  focused = null;
  document.getElementById("focus").hidden = true;
  grid.hidden = false;
}

// The motion overlay on or off, on every tile (the editor turns it on to draw a mask).
function showMotion(on) {
  motionShown = on;
  document.getElementById("motion").checked = on;
  sessionStorage.setItem(MOTION, on ? "1" : "0");
  tiles.forEach((t) => t.redraw());
}

async function start() {
  forgetCookie();
  const hash = new URLSearchParams(location.hash.slice(1));
  if (hash.get("token")) {
    setToken(hash.get("token"));
    history.replaceState(null, "", location.pathname + location.search);
  }
  document.getElementById("login").addEventListener("submit", (event) => {
    event.preventDefault();
    setToken(document.getElementById("token").value);
    location.reload();
  });
  document.getElementById("back").addEventListener("click", unfocus);
  const toggle = document.getElementById("motion");
  toggle.checked = motionShown = sessionStorage.getItem(MOTION) === "1";
  toggle.addEventListener("change", () => showMotion(toggle.checked));
  window.addEventListener("resize", () => tiles.forEach((t) => t.redraw()));
  const wanted = new URLSearchParams(location.search).get("camera");
  live();
  for (let second = 0; ; second++) {
    try {
      await refresh();
      if (wanted && !focused && tiles.has(wanted)) focus(tiles.get(wanted));
      if (focused && second % 2 === 0) await showEvents(focused);
      if (second % 5 === 4) for (const tile of tiles.values()) await loadScene(tile, false);
    } catch (error) {
      if (error.message === "unauthorized") return;
    }
    await sleep(1000);
  }
}

window.view = { tiles, api, loadScene, showMotion, get focused() { return focused; }, get motion() { return motionShown; } };
document.addEventListener("DOMContentLoaded", start);
