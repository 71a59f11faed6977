// Recordings (`--record`): the events with their snapshots, each clip played in place, and every
// camera's last 24 hours as a timeline of recorded time and events. The snapshot, clip and export
// addresses come signed from the API: a <video> or <img> cannot send the token (docs/ingest.md,
// "Recordings in the web view"). Uses view.js's `view.api` and `element`.
"use strict";

const DAY_S = 86400;
const EVENTS_PAGE = 24;
const PLAY_BEFORE_S = 5, PLAY_AFTER_S = 295;   // a click on the timeline plays this around it (an export)
const recorded = { next: null, filters: {}, was: null };

async function answer(path) {
  const response = await view.api(path);
  const body = await response.json();
  if (!response.ok) throw new Error(body.message || response.statusText);
  return body;
}

const when = (at) => new Date(at * 1000).toLocaleString();

function what(e) {
  const place = e.type === "crossed" ? `crossed ${e.place}${e.direction ? " " + e.direction : ""}` : `${e.type} ${e.place}`;
  return `${e.label || "object"} #${e.track_id ?? "?"} ${place}`;
}

function note(text) {
  document.getElementById("player-note").textContent = text;
}

// The one player, moved to where it plays: an event's card, or under the timelines.
function play(where, url, title) {
  const player = document.getElementById("player");
  document.querySelectorAll("#recorded-events li.playing").forEach((li) => li.classList.remove("playing"));
  if (where.tagName === "LI") where.classList.add("playing");
  where.append(player);
  player.hidden = false;
  player.src = url;
  player.play().catch(() => {});
  note(title);
}

// An event's clip, from a fresh signed address (a listed one may have expired).
async function playEvent(id, where) {
  const e = await answer(`/api/events/${encodeURIComponent(id)}`);
  if (!e.clip_url) {
    note(`${what(e)}: ${e.clip_state === "pending" ? "its clip is made once its post_seconds are recorded" : "no clip"}`);
    return;
  }
  play(where, e.clip_url, `${e.camera}: ${what(e)}, ${when(e.at)}`);
}

async function playRecording(camera, at) {
  const found = await answer(`/api/cameras/${camera}/recordings?since=${at - PLAY_BEFORE_S}&until=${at + PLAY_AFTER_S}`);
  if (!found.export_url) { note(`${camera}: nothing recorded at ${when(at)}`); return; }
  play(document.getElementById("player-slot"), found.export_url, `${camera}: the recording from ${when(Math.max(at - PLAY_BEFORE_S, found.spans[0][0]))}`);
}

const failed = (error) => note(`could not play it: ${error.message}`);

function card(e) {
  const picture = e.snapshot_url ? element("img", { src: e.snapshot_url, alt: `snapshot: ${what(e)}` })
    : element("span", { class: "no-thumbnail" });
  const button = element("button", { type: "button", text: e.clip_state === "failed" || e.clip === null ? "No clip" : "Play" });
  button.disabled = e.clip_state === "failed" || e.clip === null;
  const li = element("li", { "data-id": e.id }, picture, element("strong", { text: what(e) }),
    element("span", { class: "when", text: `${e.camera} · ${when(e.at)}` }), button);
  button.addEventListener("click", () => playEvent(e.id, li).catch(failed));
  return li;
}

async function loadEvents(more = false) {
  const query = new URLSearchParams({ limit: String(EVENTS_PAGE), ...recorded.filters });
  if (more && recorded.next) query.set("before", recorded.next);
  const page = await answer(`/api/events?${query}`);
  const list = document.getElementById("recorded-events");
  const cards = page.events.map(card);
  if (more) list.append(...cards);
  else list.replaceChildren(...(cards.length ? cards : [element("li", { text: "no events" })]));
  recorded.next = page.next;
  document.getElementById("more-events").hidden = !page.next;
}

// One camera's row: its recorded stretches and its events' marks over the last day.
async function timeline(camera, since, until) {
  const found = await answer(`/api/cameras/${camera}/recordings?since=${since}&until=${until}`);
  const percent = (seconds) => `${(seconds / (until - since)) * 100}%`;
  const track = element("div", { class: "track" });
  for (const [start, end] of found.spans) {
    const span = element("div", { class: "span" });
    span.style.left = percent(start - since);
    span.style.width = percent(end - start);
    track.append(span);
  }
  for (const e of [...found.events].reverse()) {   // the newest drawn last: on top of older ones near it
    const mark = element("button", { type: "button", class: `marker ${e.type}`, title: `${what(e)}, ${when(e.at)}`, "data-id": e.id });
    mark.style.left = percent(e.at - since);
    mark.addEventListener("click", (click) => {
      click.stopPropagation();
      playEvent(e.id, document.getElementById("player-slot")).catch(failed);
    });
    track.append(mark);
  }
  track.addEventListener("click", (click) => {
    const box = track.getBoundingClientRect();
    playRecording(camera, since + ((click.clientX - box.left) / box.width) * (until - since)).catch(failed);
  });
  const axis = element("div", { class: "axis" }, ...["24 h ago", "18 h", "12 h", "6 h", "now"].map((text) => element("span", { text })));
  return element("div", { class: "timeline", "data-camera": camera }, element("span", { class: "name", text: camera }), track, axis);
}

async function loadTimelines() {
  const { cameras } = await answer("/api/cameras");
  const select = document.getElementById("filter-camera");
  const chosen = select.value;
  select.replaceChildren(element("option", { value: "", text: "every camera" }),
    ...cameras.map((c) => element("option", { value: c.name, text: c.name })));
  select.value = chosen;
  const until = Date.now() / 1000;
  const rows = await Promise.all(cameras.map((c) => timeline(c.name, until - DAY_S, until)));
  document.getElementById("timelines").replaceChildren(...rows);
}

// The recordings instead of the live view, and back.
function showRecordings(on) {
  const live = [document.getElementById("grid"), document.getElementById("focus")];
  if (on) {
    recorded.was = live.map((section) => section.hidden);
    live.forEach((section) => { section.hidden = true; });
    loadTimelines().catch(failed);
    loadEvents().catch(failed);
  } else {
    document.getElementById("player").pause();
    live.forEach((section, i) => { section.hidden = recorded.was[i]; });
  }
  document.getElementById("recordings").hidden = !on;
}

async function startRecordings() {
  const button = document.getElementById("show-recordings");
  button.addEventListener("click", () => showRecordings(true));
  document.getElementById("recordings-back").addEventListener("click", () => showRecordings(false));
  document.getElementById("more-events").addEventListener("click", () => loadEvents(true).catch(failed));
  document.getElementById("event-filters").addEventListener("submit", (submit) => {
    submit.preventDefault();
    const filters = { camera: "filter-camera", label: "filter-label", place: "filter-place" };
    recorded.filters = Object.fromEntries(Object.entries(filters)
      .map(([name, id]) => [name, document.getElementById(id).value.trim()]).filter(([, value]) => value));
    loadEvents().catch(failed);
  });
  const probe = await view.api("/api/events?limit=1").catch(() => null);
  button.hidden = !(probe && probe.ok);   // 404 NotRecording: the bridge runs without --record
}

window.recordings = { showRecordings, playEvent, loadEvents };
document.addEventListener("DOMContentLoaded", () => { startRecordings(); });
