// The Fuxi service's page (docs/dashboard.rst): reads the service's own
// GET /status (what `mesoslike fuxi status --json` shows) every REFRESH_MS:
// jobs, their units' slots (desired, granted, where) and why each waiting
// unit waits. Job and unit names come from users: shown as text only.
"use strict";

(function () {
  const REFRESH_MS = 2000;
  const {el, table, fill, count, keyValues, setStatus, renderPanels, poll, getJSON} = window.MesoslikePage;
  let lastStatus = null;

  function renderService(status) {
    const fw = status.framework || {};
    document.getElementById("framework-id").textContent = fw.id || "";
    const rows = status.serving === false
      ? [["serving", `no: ${status.why_not || "a standby"}`]]
      : [["framework", fw.id || "(not registered yet)"],
        ["master", typeof fw.master === "string" ? fw.master : (fw.master ? JSON.stringify(fw.master) : "–")],
        ["registered", fw.registered ? "yes" : `no${fw.why_not ? `: ${fw.why_not}` : ""}`],
        ["recovering", fw.recovering ? "yes" : "no"],
        ["generation", String(fw.generation ?? "–")],
        ["global blacklist", (status.global_blacklist || []).join(", ") || "none"]];
    fill("service", el("table", {class: "facts"}, el("tbody", {},
      rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v))))));
  }

  function renderGroups(status) {
    const groups = status.quota_groups || [];
    count("groups", groups.length);
    fill("groups", table(["group", "maximum", "used", "waiting demand", "policy"], groups.map((g) => [
      el("span", {class: "group-name"}, g.name), g.maximum || "no maximum", g.used, g.waiting, g.policy,
    ]), "No quota group."));
  }

  function slots(unit) {
    return `${unit.granted}/${unit.desired}`;
  }

  function renderWaiting(status) {
    const rows = [];
    for (const job of status.jobs || []) {
      for (const unit of job.units || []) {
        if (unit.waiting > 0) {
          rows.push([el("code", {}, job.id), el("span", {class: "unit-name"}, unit.name), unit.slot, slots(unit),
            String(unit.waiting), el("span", {class: "why-waiting"}, unit.why_waiting || "–")]);
        }
      }
    }
    count("waiting", rows.length);
    fill("waiting", table(["job", "unit", "slot", "granted/desired", "waiting", "why it waits"], rows,
      "No unit waits for slots."));
  }

  function instances(counts) {
    if (!counts) return "–";
    return `${counts.done}/${counts.total} done, ${counts.running} running, ${counts.pending} pending` +
      (counts.failed ? `, ${counts.failed} failed attempts` : "") + (counts.backups ? `, ${counts.backups} backups` : "");
  }

  function appmaster(am) {
    if (!am) return "–";
    return `pid ${am.pid ?? "?"} ${am.running ? "running" : "exited"}` + (am.restarts ? `, ${am.restarts} restarts` : "");
  }

  function renderJobs(status) {
    const jobs = status.jobs || [];
    count("jobs", jobs.length);
    fill("jobs", jobs.length ? jobs.map((job) => el("div", {class: "job"},
      el("h3", {}, el("code", {class: "job-id"}, job.id), " ", el("span", {class: "job-name"}, job.name), " — ",
        el("span", {class: `job-state ${String(job.state).replace(/[^A-Za-z_]/g, "")}`}, job.state),
        job.reason ? ` (${job.reason})` : ""),
      el("p", {class: "note"}, `group ${job.quota_group}, priority ${job.priority}${job.policy ? `, ${job.policy}` : ""}; `,
        `${instances(job.instances)}; ${Number(job.elapsed || 0).toFixed(1)} s; AppMaster ${appmaster(job.appmaster)}`,
        (job.blacklisted || []).length ? `; blacklisted: ${job.blacklisted.join(", ")}` : ""),
      table(["unit", "slot", "granted/desired", "waiting", "slots per host", "instances", "why it waits"],
        (job.units || []).map((unit) => [
          el("span", {class: "unit-name"}, unit.name), unit.slot, slots(unit), String(unit.waiting),
          keyValues(unit.hosts), instances(unit.instances), unit.why_waiting || "–",
        ]), "No unit."))) : el("p", {class: "empty"}, "No job was submitted."));
  }

  async function refresh() {
    try {
      const {status, body} = await getJSON("/status");
      if (body === null) {
        setStatus(`GET /status answered ${status}`, "error");
        return;
      }
      lastStatus = body;
      renderPanels({service: renderService, groups: renderGroups, waiting: renderWaiting, jobs: renderJobs},
        body, "/status");
      setStatus(`updated ${new Date().toLocaleTimeString()}`, "ok");
    } catch (error) {
      setStatus(`cannot reach the Fuxi service: ${error.message || error}`, "error");
    }
  }

  window.mesoslikeFuxi = {status: () => lastStatus};
  poll(refresh, REFRESH_MS);
})();
