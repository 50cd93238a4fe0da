// The master's dashboard (docs/dashboard.rst): reads this master's own GET /state
// every REFRESH_MS and draws it. No library, no build step, nothing from the
// internet. Everything in /state comes from peers (agents and frameworks name
// their own hosts, tasks and attributes): it is only ever put in the page as
// text (textContent), never as HTML, and a link is made only of an http(s) URL.
"use strict";

(function () {
  const REFRESH_MS = 2000;
  /** role shares kept for the chart: this long back */
  const HISTORY_MS = 5 * 60 * 1000;
  const TOKEN_KEY = "mesoslike.token";
  const COLORS = ["#2b5797", "#d35400", "#27ae60", "#8e44ad", "#c0392b", "#16a085", "#7f8c8d", "#f39c12"];
  /** what the agent names a sandbox directory after, as-is (mesoslike/agent/executor.py path_component) */
  const SAFE_COMPONENT = /^[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,199}$/;

  /** [{time, shares: {role: share}}], oldest first */
  const history = [];
  let lastState = null;
  const {el, append, link, table, section, fill, count, percent, usage, stateBadge, relative, time, keyValues,
    setStatus, renderPanels, poll, getJSON} = window.MesoslikePage;

  // ------------------------------------------------------------ panels
  function renderCluster(state) {
    const leader = state.leader || {};
    const rows = [
      ["leader", leader.id ? [el("code", {}, leader.id), " ", leader.address || "", " ",
        link(leader.http_address, "HTTP", "the leader's dashboard")] : "none known"],
      ["this master", state.is_leader ? "leading" : (state.master ? `${state.master.id || ""} ${state.master.address || ""} (not leading)` : "not leading")],
      ["version", state.version || "?"],
      ["total", state.total || "–"],
      ["allocated", usage(state.allocated, state.total)],
      ["agents", String((state.agents || []).length)],
      ["frameworks", String((state.frameworks || []).length)],
    ];
    // the HA group's members, when the master lists them
    const members = state.masters || state.members || (state.ha && state.ha.members);
    if (Array.isArray(members)) {
      rows.push(["HA members", el("ul", {}, members.map((m) => el("li", {},
        typeof m === "string" ? m : [m.id || "", " ", link(m.http_address, m.address || m.http_address || "?"),
          m.leader || (leader.id && m.id === leader.id) ? " (leader)" : ""])))]);
    }
    fill("cluster", el("table", {class: "facts"}, el("tbody", {},
      rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v))))));
    const address = document.getElementById("master-address");
    address.textContent = leader.address || "";
    if (!state.is_leader && leader.http_address) {
      append(section("cluster"), el("p", {class: "warning"}, "This master is not leading: ",
        link(leader.http_address, "open the leader's dashboard")));
    }
  }

  function drainText(agent) {
    for (const key of ["drain_info", "drain", "draining", "drain_status", "maintenance"]) {
      const value = agent[key];
      if (value === undefined || value === null || value === false) continue;
      if (value === true) return key;
      if (typeof value === "object") {
        return Object.entries(value).map(([k, v]) => `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`).join(", ");
      }
      return `${key}: ${value}`;
    }
    return "";
  }

  function renderAgents(state) {
    const agents = state.agents || [];
    count("agents", agents.length);
    fill("agents", table(["hostname", "id", "state", "resources", "used", "attributes", "HTTP"], agents.map((agent) => {
      const drain = drainText(agent);
      const status = agent.state || (agent.drain_info && agent.drain_info.state) ||   // DRAINING, DRAINED (docs/operations.rst)
        (agent.drained ? "drained" : (agent.connected === false ? "disconnected" : "active"));
      return [
        el("span", {class: "agent-hostname"}, agent.hostname),
        el("code", {class: "agent-id"}, agent.id),
        [el("span", {class: `agent-state ${String(status).replace(/[^A-Za-z_]/g, "")}`}, String(status)),
          drain ? el("div", {class: "drain"}, drain) : null],
        agent.resources,
        usage(agent.used, agent.resources),
        keyValues(agent.attributes),
        link(agent.http_address, "agent", "the agent's own /state"),
      ];
    }), "No agent is registered."));
  }

  function agentIndex(state) {
    const agents = {};
    for (const agent of state.agents || []) agents[agent.id] = agent;
    return agents;
  }

  /** Why a framework gets no offers (/state's offer_blockers: mesoslike/allocator/blockers.py). */
  function blockers(fw) {
    const list = Array.isArray(fw.offer_blockers) ? fw.offer_blockers : [];
    if (!list.length) return fw.offered ? "offered" : "–";
    return el("div", {class: "blockers"}, list.map((b) =>
      el("div", {class: `blocker ${String(b.reason || "").replace(/[^A-Z_]/g, "")}`, title: JSON.stringify(b)},
        el("span", {class: "reason"}, String(b.reason || "?")), " ", String(b.message || ""))));
  }

  function renderFrameworks(state) {
    const frameworks = state.frameworks || [];
    count("frameworks", frameworks.length);
    fill("frameworks", table(["name", "id", "role", "dominant share", "tasks", "used", "offered", "connected",
      "why no offers"],
      frameworks.map((fw) => [
        fw.webui_url ? link(fw.webui_url, fw.name) : el("span", {class: "framework-name"}, fw.name),
        el("code", {}, fw.id), fw.role, percent(fw.dominant_share),
        String((fw.tasks || []).length), fw.used, fw.offered, fw.connected ? "yes" : "no (failing over)",
        blockers(fw),
      ]), "No framework is registered."));
  }

  /** A task's stdout and stderr shown in the log panel (as plain text, read through this master's
   * /files/read), a download link to each through its agent, and its sandbox directory. */
  function sandboxLinks(task, frameworkId, agents) {
    const agent = agents[task.agent_id];
    if (!agent || !agent.http_address) return "–";
    if (!SAFE_COMPONENT.test(frameworkId) || !SAFE_COMPONENT.test(task.id)) {
      // the agent hashed the ids into the directory names: its browser finds them
      return link(`${agent.http_address}/files/browse?path=`, "sandboxes");
    }
    const dir = `${frameworkId}/${task.id}`;
    return el("span", {class: "files"},
      ["stdout", "stderr"].map((name) => {
        const button = el("button", {type: "button", class: `log-${name}`, title: `show the ${name} of ${task.id}`}, name);
        button.addEventListener("click", () => openLog(task.agent_id, `${dir}/${name}`,
          `${name} of ${task.id} on ${agent.hostname || task.agent_id}`));
        return [button, link(`${agent.http_address}/files/download?path=${encodeURIComponent(`${dir}/${name}`)}`, "↓",
          `download ${name}`), " "];
      }),
      link(`${agent.http_address}/files/browse?path=${encodeURIComponent(dir)}`, "sandbox"));
  }

  // ------------------------------------------------------------ task logs
  /** the bytes of a file's end shown when it is opened */
  const LOG_TAIL_BYTES = 64 * 1024;
  /** the most text the panel keeps (the oldest goes first) */
  const LOG_KEEP_CHARS = 1 << 20;
  const LOG_FOLLOW_MS = 1000;
  /** the file shown: {agentId, path, offset, timer, generation} */
  let log = null;
  let logGeneration = 0;

  async function readLog(agentId, path, offset, length) {
    const query = `agent_id=${encodeURIComponent(agentId)}&path=${encodeURIComponent(path)}&offset=${offset}` +
      (length === undefined ? "" : `&length=${length}`);
    const response = await fetch(`/files/read?${query}`, {cache: "no-store",
      headers: token() ? {Authorization: `Bearer ${token()}`, Accept: "application/json"} : {Accept: "application/json"}});
    const body = await response.json().catch(() => null);
    if (!response.ok || !body || typeof body.data !== "string") {
      throw new Error((body && body.error) || `GET /files/read answered ${response.status}`);
    }
    return body;
  }

  /** Show the end of a sandbox file as plain text, then (while "follow" is ticked) what is added to it. */
  async function openLog(agentId, path, title) {
    closeLog();
    const generation = ++logGeneration;
    log = {agentId, path, offset: 0, timer: null, generation};
    document.getElementById("log-title").textContent = title;
    const text = document.getElementById("log-text");
    text.textContent = "";
    logStatus("reading…", "");
    const panel = document.getElementById("log");
    panel.hidden = false;
    panel.scrollIntoView({block: "nearest"});
    try {
      const size = (await readLog(agentId, path, -1)).offset;
      log.offset = Math.max(0, size - LOG_TAIL_BYTES);
      if (log.offset > 0) text.textContent = `… (the last ${LOG_TAIL_BYTES / 1024} KiB)\n`;
      await pullLog(generation);
    } catch (error) {
      logStatus(`cannot read it: ${error.message || error}`, "error");
    }
  }

  /** Read what the file has past the offset shown, page by page; then again in LOG_FOLLOW_MS while following. */
  async function pullLog(generation) {
    if (!log || log.generation !== generation) return;
    const text = document.getElementById("log-text");
    try {
      for (;;) {
        const page = await readLog(log.agentId, log.path, log.offset);
        if (!log || log.generation !== generation) return;
        if (!page.data) break;
        const atBottom = text.scrollTop + text.clientHeight >= text.scrollHeight - 4;
        text.append(document.createTextNode(page.data));   // as text: never HTML
        if (text.textContent.length > LOG_KEEP_CHARS) text.textContent = text.textContent.slice(-LOG_KEEP_CHARS);
        if (atBottom) text.scrollTop = text.scrollHeight;
        log.offset = page.offset + new TextEncoder().encode(page.data).length;
      }
      logStatus(`${log.offset} bytes read${following() ? "; following" : ""}`, "");
    } catch (error) {
      logStatus(`cannot read it: ${error.message || error}`, "error");
    }
    if (log && log.generation === generation && following()) {
      log.timer = setTimeout(() => pullLog(generation), LOG_FOLLOW_MS);
    }
  }

  function following() {
    return document.getElementById("log-follow").checked;
  }

  function logStatus(message, kind) {
    const status = document.getElementById("log-status");
    status.textContent = message;
    status.className = kind || "note";
  }

  function closeLog() {
    if (log && log.timer) clearTimeout(log.timer);
    log = null;
    document.getElementById("log").hidden = true;
  }

  function startLogControls() {
    document.getElementById("log-close").addEventListener("click", closeLog);
    document.getElementById("log-follow").addEventListener("change", () => {
      if (log && following()) pullLog(log.generation);
      else if (log && log.timer) clearTimeout(log.timer);
    });
  }

  function mebibytes(bytes) {
    return `${(bytes / 1048576).toFixed(bytes < 10485760 ? 1 : 0)} MiB`;
  }

  /** A task's usage as its agent measured it (mesoslike/agent: /monitor/statistics), in short. */
  function taskUsage(usage) {
    if (!usage || typeof usage !== "object") return "";
    const number = (key) => (typeof usage[key] === "number" ? usage[key] : null);
    const parts = [];
    const cpu = (number("cpus_user_time_secs") || 0) + (number("cpus_system_time_secs") || 0);
    if (number("cpus_user_time_secs") !== null) parts.push(`cpu ${cpu.toFixed(2)} s`);
    if (number("mem_rss_bytes") !== null) {
      parts.push(`rss ${mebibytes(number("mem_rss_bytes"))}` +
        (number("mem_limit_bytes") ? ` of ${mebibytes(number("mem_limit_bytes"))}` : ""));
    }
    if (number("processes") !== null) parts.push(`${number("processes")} proc`);
    return el("span", {class: "task-usage", title: JSON.stringify(usage)}, parts.join(", "));
  }

  function taskRow(task, fw, agents) {
    const agent = agents[task.agent_id];
    const where = agent ? link(agent.http_address, task.hostname || agent.hostname) : (task.hostname || task.agent_id || "–");
    const used = taskUsage(task.usage);
    return [
      el("code", {class: "task-id"}, task.id), task.name || "", stateBadge(task.state),
      el("span", {class: "framework-name"}, fw.name || fw.id), where, task.resources, used,
      sandboxLinks(task, fw.id, agents), task.message || (task.exit_code !== null && task.exit_code !== undefined ? `exit ${task.exit_code}` : ""),
    ];
  }

  const TASK_HEADINGS = ["id", "name", "state", "framework", "agent", "resources", "usage", "sandbox", "message"];
  const COMPLETED_HEADINGS = ["ended", ...TASK_HEADINGS];

  function renderTasks(state) {
    const agents = agentIndex(state);
    const rows = [];
    for (const fw of state.frameworks || []) for (const task of fw.tasks || []) rows.push(taskRow(task, fw, agents));
    count("tasks", rows.length);
    fill("tasks", table(TASK_HEADINGS, rows, "No task is running."));
  }

  function renderRoles(state) {
    const shares = state.roles || {};
    const config = (state.roles_config && state.roles_config.roles) || {};
    // what is in force (GET /weights, GET /quota: set by the operator or the roles file)
    const weights = state.weights || {};
    const quota = state.quota || {};
    const preemptionRoles = (state.preemption && state.preemption.roles) || {};
    const names = [...new Set([...Object.keys(shares), ...Object.keys(config), ...Object.keys(weights),
      ...Object.keys(quota)])].sort();
    const frameworksByRole = {};
    for (const fw of state.frameworks || []) frameworksByRole[fw.role] = (frameworksByRole[fw.role] || 0) + 1;
    fill("roles", table(["role", "dominant share", "weight", "guarantee (quota)", "limit", "consumed", "min share",
      "fair share", "frameworks"],
      names.map((role) => {
        const c = config[role] || {};
        const q = quota[role] || {};
        const p = preemptionRoles[role] || {};
        const weight = weights[role] !== undefined ? weights[role] : c.weight;
        return [
          [swatch(role), el("span", {class: "role-name"}, role)], percent(shares[role]),
          el("span", {class: "role-weight"}, weight !== undefined ? String(weight) : "1"),
          el("span", {class: "role-guarantee"}, q.guarantee || c.guarantee || "–"),
          el("span", {class: "role-limit"}, q.limit || c.limit || "–"), q.consumed || "–", c.min_share || "–",
          p.fair_share || "–", String(frameworksByRole[role] || 0),
        ];
      }), "No role has a share yet."));
    if (state.roles_config && state.roles_config.path) {
      append(section("roles"), el("p", {class: "note"}, "roles file: ", el("code", {}, state.roles_config.path)));
    }
    drawChart(names);
  }

  const roleColors = {};
  function colorOf(role) {
    if (!(role in roleColors)) roleColors[role] = COLORS[Object.keys(roleColors).length % COLORS.length];
    return roleColors[role];
  }

  function swatch(role) {
    const node = el("span", {class: "swatch"});
    node.style.backgroundColor = colorOf(role);
    return node;
  }

  function svg(tag, attributes) {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, String(value));
    return node;
  }

  /** The roles' dominant shares over the last HISTORY_MS, from the samples this page took. */
  function drawChart(roles) {
    const width = 600, height = 140, left = 36, bottom = 18;
    const chart = document.querySelector("#roles .chart");
    const root = svg("svg", {viewBox: `0 0 ${width} ${height}`, class: "share-chart", role: "img",
      "aria-label": "dominant share of each role over the last minutes"});
    const now = history.length ? history[history.length - 1].time : Date.now();
    // the span grows with the samples taken, from a minute up to HISTORY_MS
    const span = Math.min(HISTORY_MS, Math.max(60000, history.length ? now - history[0].time : 0));
    const x = (t) => left + (width - left - 4) * (1 - (now - t) / span);
    const y = (share) => (height - bottom) * (1 - Math.min(1, Math.max(0, share))) + 2;
    for (const level of [0, 0.5, 1]) {
      root.appendChild(svg("line", {x1: left, x2: width - 4, y1: y(level), y2: y(level), class: "grid"}));
      const label = svg("text", {x: 2, y: y(level) + 4, class: "axis"});
      label.textContent = `${level * 100}%`;
      root.appendChild(label);
    }
    const minutes = svg("text", {x: left, y: height - 2, class: "axis"});
    minutes.textContent = span >= 120000 ? `last ${Math.round(span / 60000)} minutes` : `last ${Math.round(span / 1000)} s`;
    root.appendChild(minutes);
    for (const role of roles) {
      const points = history.filter((s) => role in s.shares)
        .map((s) => `${x(s.time).toFixed(1)},${y(s.shares[role]).toFixed(1)}`);
      if (!points.length) continue;
      const line = svg(points.length > 1 ? "polyline" : "circle", points.length > 1
        ? {points: points.join(" "), fill: "none", stroke: colorOf(role), "stroke-width": 2, class: "series"}
        : {cx: points[0].split(",")[0], cy: points[0].split(",")[1], r: 3, fill: colorOf(role), class: "series"});
      const title = svg("title", {});
      title.textContent = role;
      line.appendChild(title);
      root.appendChild(line);
    }
    chart.replaceChildren(root);
  }

  function renderOffers(state) {
    const offers = state.offers || [];
    const names = {};
    for (const fw of state.frameworks || []) names[fw.id] = fw.name;
    count("offers", offers.length);
    fill("offers", table(["offer", "framework", "agent", "resources"], offers.map((o) => [
      el("code", {}, o.id), names[o.framework_id] || o.framework_id, o.hostname || o.agent_id, o.resources,
    ]), "No offer is outstanding."));
  }

  function renderPreemption(state) {
    const p = state.preemption;
    if (!p) {
      fill("preemption", el("p", {class: "empty"}, "Fair-share preemption is off (no roles file enables it)."));
      return;
    }
    const facts = el("table", {class: "facts"}, el("tbody", {}, [
      ["enabled", p.enabled ? "yes" : "no"],
      ["cluster utilization", `${percent(p.cluster_utilization)} (preempts above ${percent(p.cluster_utilization_threshold)})`],
      ["counters", keyValues(p.counters)],
    ].map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v)))));
    const starved = Object.entries(p.roles || {}).map(([role, r]) => [
      role, r.fair_share || "–", r.steady_fair_share || "–", r.usage || "–", r.demand || "–", r.starved || "–",
      relative(r.fair_share_starved_since, p.updated_at), relative(r.min_share_starved_since, p.updated_at),
      (r.preempting || []).join(" ") || "–",
    ]);
    const pending = (p.pending || []).map((v) => [
      el("code", {}, v.task_id), v.role, v.role_for, v.resources, v.reason, relative(v.warned_at, p.updated_at),
      relative(v.deadline, p.updated_at), relative(v.killed_at, p.updated_at),
    ]);
    const preferred = (p.preferred || []).map((entry) => [entry.agent_id, entry.role, relative(entry.until, p.updated_at)]);
    fill("preemption", facts,
      el("h3", {}, "Roles"), table(["role", "fair share", "steady fair share", "usage", "demand", "starved by",
        "below fair share since", "below min share since", "preempting"], starved, "No role."),
      el("h3", {}, "Pending victims"), table(["task", "role", "for role", "resources", "reason", "warned", "deadline", "killed"], pending, "None."),
      el("h3", {}, "Agents kept for a starved role"), table(["agent", "role", "until"], preferred, "None."));
  }

  function renderCompleted(state) {
    const agents = agentIndex(state);
    const frameworks = state.completed_frameworks || [];
    const ended = [];
    const seen = new Set();
    const add = (task, fw) => {
      const key = `${fw.id}/${task.id}`;
      if (seen.has(key)) return;
      seen.add(key);
      ended.push([task, fw]);
    };
    const names = {};
    for (const fw of [...(state.frameworks || []), ...frameworks]) names[fw.id] = fw;
    for (const fw of [...(state.frameworks || []), ...frameworks]) {
      for (const task of fw.completed_tasks || []) add(task, fw);
    }
    for (const task of state.completed_tasks || []) {   // a list of its own, when /state has one
      const fw = names[task.framework_id] || {id: task.framework_id || "", name: task.framework_name || task.framework_id || ""};
      add(task, fw);
    }
    // newest first, by the time of each task's last status (its end)
    const endedAt = (task) => (typeof task.timestamp === "number" ? task.timestamp : 0);
    ended.sort((a, b) => endedAt(b[0]) - endedAt(a[0]));
    const rows = ended.map(([task, fw]) => [el("span", {class: "ended-at"}, time(task.timestamp)),
      ...taskRow(task, fw, agents)]);
    fill("completed",
      el("h3", {}, `Frameworks (${frameworks.length})`),
      table(["name", "id", "role", "tasks", "ended"], frameworks.map((fw) => [
        el("span", {class: "framework-name"}, fw.name), el("code", {}, fw.id), fw.role || "",
        String((fw.tasks || []).length + (fw.completed_tasks || []).length),
        fw.unregistered_time !== undefined ? time(fw.unregistered_time) : (fw.ended_at !== undefined ? time(fw.ended_at) : ""),
      ]), "No completed framework."),
      el("h3", {}, `Tasks (${rows.length}, newest first)`),
      table(COMPLETED_HEADINGS, rows, "No completed task."));
  }

  /** Links to the pages of frameworks that serve one — the Fuxi service's, and any framework that names its
   * page with the label webui_url (/state's webui_url; docs/dashboard.rst, "Frameworks' pages"). */
  function renderFrameworkLinks(state) {
    const nav = document.getElementById("framework-pages");
    nav.replaceChildren();
    for (const fw of state.frameworks || []) {
      if (fw.webui_url) append(nav, [" ", el("span", {class: "framework-page"}, link(fw.webui_url, `${fw.name} ↗`,
        `the page of framework ${fw.name} (${fw.id})`))]);
    }
  }

  function render(state) {
    lastState = state;
    const shares = state.roles || {};
    const now = Date.now();
    history.push({time: now, shares: Object.assign({}, shares)});
    while (history.length && history[0].time < now - HISTORY_MS) history.shift();
    renderPanels({cluster: renderCluster, agents: renderAgents, frameworks: renderFrameworks, tasks: renderTasks,
      roles: renderRoles, offers: renderOffers, preemption: renderPreemption, completed: renderCompleted,
      links: renderFrameworkLinks}, state, "/state");
  }

  // ------------------------------------------------------------ fetching
  function token() {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  }

  async function refresh() {
    try {
      const {status, body} = await getJSON("/state", token() ? {Authorization: `Bearer ${token()}`} : {});
      if (status === 401 || status === 403) {
        showTokenForm(token() ? "The token was refused: " : "");
        setStatus(`this master asks for a valid operator token (${status})`, "error");
      } else if (body === null) {
        setStatus(`GET /state answered ${status}`, "error");
      } else {
        render(body);
        document.getElementById("token-form").hidden = true;
        setStatus(`updated ${new Date().toLocaleTimeString()}`, "ok");
      }
    } catch (error) {
      setStatus(`cannot reach the master: ${error.message || error}`, "error");
    }
  }

  function showTokenForm(prefix) {
    const form = document.getElementById("token-form");
    form.hidden = false;
    const why = document.getElementById("token-why");
    if (prefix && !why.dataset.prefixed) {
      why.prepend(document.createTextNode(prefix));
      why.dataset.prefixed = "1";
    }
  }

  function start() {
    startLogControls();
    const form = document.getElementById("token-form");
    const restart = poll(refresh, REFRESH_MS);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const value = document.getElementById("token").value.trim();
      if (value) sessionStorage.setItem(TOKEN_KEY, value);
      document.getElementById("token").value = "";
      restart();
    });
    document.getElementById("token-forget").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      restart();
    });
    document.getElementById("token-button").addEventListener("click", () => {
      form.hidden = !form.hidden;
    });
  }

  // for the tests and the curious: the last /state drawn, and how many samples the chart has
  window.mesoslikeDashboard = {state: () => lastState, samples: () => history.length};
  start();
})();
