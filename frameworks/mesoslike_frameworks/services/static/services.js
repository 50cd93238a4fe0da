// The services page: polls the service's own REST API (/v2/apps, /v2/deployments,
// /v2/queue, /services/events) every two seconds and shows it as text only.
"use strict";

function token() {
  const field = document.getElementById("token");
  if (field.value) { sessionStorage.setItem("services-token", field.value); }
  return field.value || sessionStorage.getItem("services-token") || "";
}

async function get(path) {
  const headers = { "Accept": "application/json" };
  const t = token();
  if (t) { headers["Authorization"] = "Bearer " + t; }
  const answer = await fetch(path, { headers: headers });
  if (!answer.ok) { throw new Error(path + ": HTTP " + answer.status); }
  return answer.json();
}

function fill(id, rows) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren(...rows.map((cells) => {
    const row = document.createElement("tr");
    for (const cell of cells) {
      const td = document.createElement("td");
      if (cell !== null && typeof cell === "object") {
        td.textContent = cell.text;
        td.className = cell.cls || "";
      } else {
        td.textContent = cell === null || cell === undefined ? "" : String(cell);
      }
      row.appendChild(td);
    }
    return row;
  }));
}

async function refresh() {
  const status = document.getElementById("status");
  try {
    const [apps, deployments, queue, events] = await Promise.all([
      get("/v2/apps?embed=apps.tasks"), get("/v2/deployments"), get("/v2/queue"), get("/services/events")]);
    const waiting = {};
    for (const item of queue.queue) { waiting[item.app.id] = item.count + " waiting: " + item.processedOffersSummary.why; }
    fill("apps", apps.apps.map((a) => [a.id, a.tasksRunning + " / " + a.instances,
      a.healthChecks.length ? a.tasksHealthy : "-", a.cpus, a.mem, a.version,
      waiting[a.id] ? { text: waiting[a.id], cls: "bad" } : ""]));
    const tasks = [];
    for (const a of apps.apps) {
      for (const t of a.tasks || []) {
        const results = t.healthCheckResults || [];
        const health = results.length ? (results[0].alive ? { text: "healthy", cls: "good" } : { text: "unhealthy", cls: "bad" }) : "-";
        tasks.push([t.id, t.state, health, t.host, t.ports.join(","), t.version]);
      }
    }
    fill("tasks", tasks);
    fill("deployments", deployments.map((d) => [d.id, d.affectedApps.join(", "), d.currentStep + " / " + d.totalSteps,
      d.currentActions.map((x) => x.action + " " + x.app).join(", ")]));
    fill("events", events.events.slice(-50).reverse().map((e) => [e.timestamp, e.eventType,
      e.appId || e.id || e.taskId || (e.plan ? e.plan.id : "") || ""]));
    status.textContent = "updated " + new Date().toLocaleTimeString();
  } catch (error) {
    status.textContent = String(error.message || error);
  }
}

refresh();
setInterval(refresh, 2000);
