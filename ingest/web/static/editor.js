// The zone, line and motion mask editor of the large camera: draw on the picture, name, choose
// classes, save. Points are fractions of the frame (they follow a resolution change). The bridge
// checks the camera list with its own code and answers its own message when a shape is wrong.
// Motion masks (polygons where no motion is counted) have no name or classes; they are saved into
// the camera's `motion: {mask: ...}`, its other motion settings kept, and only while motion is on.
"use strict";

class Editor {
  constructor() {
    this.tile = null;
    this.zones = [];
    this.lines = [];
    this.masks = [];    // motion masks: polygons of [x, y] fractions of the frame
    this.kind = null;   // "zone", "line" or "mask" while drawing
    this.$ = (id) => document.getElementById(id);
    this.$("draw-zone").addEventListener("click", () => this.begin("zone"));
    this.$("draw-line").addEventListener("click", () => this.begin("line"));
    this.$("draw-mask").addEventListener("click", () => this.begin("mask"));
    this.$("cancel").addEventListener("click", () => this.end());
    this.$("add").addEventListener("click", () => this.add());
    this.$("save").addEventListener("click", () => this.save());
  }

  load(tile, scene) {
    if (this.tile !== tile) this.end();
    this.tile = tile;
    this.zones = scene.zones.map((z) => ({ ...z }));
    this.lines = scene.lines.map((l) => ({ ...l }));
    this.motionOn = Boolean(scene.motion?.on);
    this.masks = (scene.motion?.mask || []).map((m) => m.map((p) => [...p]));
    this.editable = scene.editable;
    this.version = scene.version;  // sent back with a save: one made from an older file is refused
    this.$("editor-note").textContent = scene.editable ? "" : `Read-only: ${scene.read_only_reason}`;
    for (const id of ["draw-zone", "draw-line", "add", "save", "cancel", "shape-name", "shape-classes"]) {
      this.$(id).disabled = !scene.editable;
    }
    this.$("draw-mask").disabled = !scene.editable || !this.motionOn;
    this.$("mask-note").textContent = this.motionOn ? "" :
      "Motion is off for this camera: motion masks apply when it is on (motion: on in the camera list).";
    this.list();
  }

  list() {
    const items = [...this.zones.map((s) => ["zone", s]), ...this.lines.map((s) => ["line", s]),
      ...this.masks.map((m) => ["mask", m])];
    this.$("shapes").replaceChildren(...items.map(([kind, shape]) => {
      const remove = element("button", { type: "button", text: "remove" });
      remove.disabled = !this.editable;
      remove.addEventListener("click", () => {
        if (kind === "zone") this.zones = this.zones.filter((z) => z !== shape);
        else if (kind === "line") this.lines = this.lines.filter((l) => l !== shape);
        else this.masks = this.masks.filter((m) => m !== shape);
        this.list();
      });
      if (kind === "mask") {
        const n = this.masks.indexOf(shape) + 1;
        return element("li", { "data-kind": kind, "data-name": `mask-${n}` }, `motion mask ${n} (${shape.length} corners)`, remove);
      }
      const classes = shape.classes && shape.classes.length ? shape.classes.join(", ") : "every class";
      return element("li", { "data-kind": kind, "data-name": shape.name }, `${kind} ${shape.name} (${classes})`, remove);
    }));
  }

  begin(kind) {
    if (!this.tile) return;
    this.end();
    this.kind = kind;
    this.points = [];
    this.tile.draft = { kind, points: this.points };
    const canvas = this.tile.overlay;
    canvas.classList.add("drawing");
    if (kind === "mask") window.view.showMotion(true);  // the masks drawn, and the motion they hide
    this.$("editor-help").textContent = {
      zone: "Click each corner of the zone on the picture, then Add.",
      line: "Press where the line starts, drag to where it ends and let go (or click both ends), then Add.",
      mask: "Click each corner of an area where motion must not count (a clock, trees in the wind), then Add.",
    }[kind];
    this.handlers = {
      mousedown: (e) => this.press(e),
      mouseup: (e) => this.release(e),
      mousemove: (e) => this.move(e),
    };
    for (const [name, handler] of Object.entries(this.handlers)) canvas.addEventListener(name, handler);
  }

  point(event) {
    return this.tile.fraction(event.offsetX, event.offsetY);
  }

  press(event) {
    const p = this.point(event);
    if (!p) return;
    if (this.kind === "line" && this.points.length >= 2) this.points.length = 0;
    this.points.push(p);
    this.pressed = this.kind === "line";
    this.tile.redraw();
  }

  move(event) {
    if (!this.pressed) return;
    const p = this.point(event);
    if (!p) return;
    if (this.points.length === 1) this.points.push(p); else this.points[1] = p;
    this.tile.redraw();
  }

  release(event) {
    if (!this.pressed) return;
    this.pressed = false;
    const p = this.point(event);
    const [start] = this.points;
    if (p && (p[0] !== start[0] || p[1] !== start[1])) this.points[1] = p;
    else if (this.points.length > 1 && this.points[1] === start) this.points.length = 1;
    this.tile.redraw();
  }

  end() {
    if (this.tile && this.handlers) {
      for (const [name, handler] of Object.entries(this.handlers)) this.tile.overlay.removeEventListener(name, handler);
      this.tile.overlay.classList.remove("drawing");
      this.tile.draft = null;
      this.tile.redraw();
    }
    this.handlers = null;
    this.kind = null;
    this.$("editor-help").textContent = "";
  }

  stop() {
    this.end();
    this.tile = null;
  }

  add() {
    if (!this.kind) { this.fail("Choose Draw a zone, Draw a line or Draw a motion mask first."); return; }
    if (this.kind === "mask") {
      this.masks = [...this.masks, this.points.slice()];
      this.end();
      this.list();
      this.$("editor-saved").textContent = "Added: Save to write it to the camera list.";
      return;
    }
    const name = this.$("shape-name").value.trim();
    const classes = this.$("shape-classes").value.split(",").map((c) => c.trim()).filter(Boolean);
    const shape = { name };
    if (classes.length) shape.classes = classes;
    if (this.kind === "zone") {
      shape.polygon = this.points.slice();
      this.zones = [...this.zones.filter((z) => z.name !== name), shape];
    } else {
      shape.from = this.points[0] || null;
      shape.to = this.points[1] || this.points[0] || null;
      this.lines = [...this.lines.filter((l) => l.name !== name), shape];
    }
    this.end();
    this.$("shape-name").value = "";
    this.$("shape-classes").value = "";
    this.list();
    this.$("editor-saved").textContent = "Added: Save to write it to the camera list.";
  }

  fail(message) {
    this.$("editor-error").textContent = message;
    this.$("editor-saved").textContent = "";
  }

  async save() {
    this.fail("");
    const response = await window.view.api(`/api/cameras/${this.tile.name}/scene`, {
      method: "PUT", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ zones: this.zones, lines: this.lines, version: this.version,
        ...(this.motionOn ? { motion_mask: this.masks } : {}) }),
    });
    const body = await response.json();
    const tile = this.tile;
    if (response.status === 409 && body.type === "Conflict") {
      // Another tab or a hand edit changed the file: show what it holds now, and say so.
      await window.view.loadScene(tile);
      this.fail(`Not saved: ${body.message} (the camera's zones and lines were reloaded).`);
      return;
    }
    if (!response.ok) { this.fail(body.message); return; }
    this.version = body.version;
    this.$("editor-saved").textContent = body.message;
    setTimeout(() => window.view.loadScene(tile), 1500);
  }
}

document.addEventListener("DOMContentLoaded", () => { window.editor = new Editor(); });
