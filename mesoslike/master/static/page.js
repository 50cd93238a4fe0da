// What the pages of mesoslike share (docs/dashboard.rst): building elements
// from data (as text only: what the servers report comes from peers, never
// taken as HTML), links made only of http(s) URLs, tables, resource bars, and
// the refresh loop. No library, no build step.
"use strict";

window.MesoslikePage = (function () {
  // ------------------------------------------------------------ DOM helpers
  /** An element with text or children; ``attributes`` are set as attributes (class via "class"). */
  function el(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (value !== null && value !== undefined) node.setAttribute(name, String(value));
    }
    for (const child of children) append(node, child);
    return node;
  }

  function append(node, child) {
    if (child === null || child === undefined) return;
    if (Array.isArray(child)) child.forEach((c) => append(node, c));
    else if (child instanceof Node) node.appendChild(child);
    else node.appendChild(document.createTextNode(String(child)));
  }

  /** A link to an http(s) URL a peer gave, or plain text if it is anything else. */
  function link(url, text, title) {
    if (typeof url !== "string" || !/^https?:\/\/[^\s"<>]+$/.test(url)) return document.createTextNode(text);
    const a = el("a", {href: url, target: "_blank", rel: "noopener noreferrer", title: title || null}, text);
    return a;
  }

  function table(headings, rows, emptyText) {
    if (!rows.length) return el("p", {class: "empty"}, emptyText);
    return el("table", {},
      el("thead", {}, el("tr", {}, headings.map((h) => el("th", {}, h)))),
      el("tbody", {}, rows.map((cells) => el("tr", {}, cells.map((c) => el("td", {}, c))))));
  }

  function section(id) {
    return document.querySelector(`#${id} .body`);
  }

  function fill(id, ...content) {
    const body = section(id);
    body.replaceChildren();
    append(body, content);
  }

  function count(id, n) {
    const node = document.querySelector(`#${id} .count`);
    if (node) node.textContent = `(${n})`;
  }

  // ------------------------------------------------------------ values
  /** "cpus:4;mem:8192;ports:[1-2]" -> {cpus: 4, mem: 8192} (ranges left out) */
  function parseResources(text) {
    const out = {};
    for (const part of String(text || "").split(";")) {
      const at = part.indexOf(":");
      if (at <= 0) continue;
      const value = Number(part.slice(at + 1));
      if (Number.isFinite(value)) out[part.slice(0, at)] = value;
    }
    return out;
  }

  function percent(share) {
    return typeof share === "number" && Number.isFinite(share) ? `${(100 * share).toFixed(1)}%` : "–";
  }

  /** A bar of how much of ``total`` is ``used``, per resource kind. */
  function usage(usedText, totalText) {
    const used = parseResources(usedText), total = parseResources(totalText);
    const kinds = Object.keys(total).filter((k) => total[k] > 0);
    if (!kinds.length) return document.createTextNode(String(usedText || "–"));
    return el("div", {class: "usage"}, kinds.map((kind) => {
      const share = Math.min(1, (used[kind] || 0) / total[kind]);
      const bar = el("span", {class: "fill"});
      bar.style.width = `${(100 * share).toFixed(1)}%`;   // CSSOM: allowed by the page's CSP
      return el("div", {class: "kind", title: `${kind}: ${used[kind] || 0} of ${total[kind]}`},
        el("span", {class: "name"}, kind), el("span", {class: "bar"}, bar),
        el("span", {class: "value"}, `${used[kind] || 0}/${total[kind]}`));
    }));
  }

  function stateBadge(state) {
    const text = String(state || "?");
    return el("span", {class: `state ${text.replace(/[^A-Za-z_]/g, "")}`}, text.replace(/^TASK_/, ""));
  }

  /** A time of the master's own clock (preemption), relative to ``now`` of the same clock. */
  function relative(seconds, now) {
    if (typeof seconds !== "number" || typeof now !== "number") return "–";
    const delta = seconds - now;
    return delta >= 0 ? `in ${delta.toFixed(1)} s` : `${(-delta).toFixed(1)} s ago`;
  }

  function time(seconds) {
    if (typeof seconds !== "number" || seconds < 1e9) return "–";   // not a time since the epoch
    return new Date(seconds * 1000).toLocaleTimeString();
  }

  function keyValues(object) {
    const entries = Object.entries(object || {});
    if (!entries.length) return "–";
    return el("span", {class: "pairs"}, entries.map(([k, v]) => el("span", {class: "pair"}, `${k}=${v}`)));
  }

  // ------------------------------------------------------------ refreshing
  function setStatus(text, kind) {
    const status = document.getElementById("status");
    status.textContent = text;
    status.className = kind || "";
  }

  /** Draw each panel of ``panels`` (name -> function of the document) on its own: one
   * that trips over an unexpected document says so in its section, the others are drawn. */
  function renderPanels(panels, document_, what) {
    for (const [id, panel] of Object.entries(panels)) {
      try {
        panel(document_);
      } catch (error) {
        const body = section(id);
        if (body) body.replaceChildren(el("p", {class: "error"}, `cannot show this part of ${what}: ${error}`));
      }
    }
  }

  /** Call ``refresh`` (async) now and then every ``periodMs`` after it is done, while
   * the #auto-refresh box is ticked. Returns ``restart`` (refresh now, then go on). */
  function poll(refresh, periodMs) {
    let timer = null;
    async function loop() {
      await refresh();
      if (document.getElementById("auto-refresh").checked) timer = setTimeout(loop, periodMs);
    }
    function restart() {
      clearTimeout(timer);
      timer = null;
      loop();
    }
    document.getElementById("auto-refresh").addEventListener("change", (event) => {
      if (event.target.checked) restart();
      else clearTimeout(timer);
    });
    loop();
    return restart;
  }

  /** GET ``path`` as JSON: {status, body} (body null unless 2xx); throws if the server cannot be reached. */
  async function getJSON(path, headers) {
    const response = await fetch(path, {headers: Object.assign({Accept: "application/json"}, headers || {}),
      cache: "no-store"});
    return {status: response.status, body: response.ok ? await response.json() : null};
  }

  return {el, append, link, table, section, fill, count, parseResources, percent, usage, stateBadge, relative, time,
    keyValues, setStatus, renderPanels, poll, getJSON};
})();
