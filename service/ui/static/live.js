// The job page, live: follows /ui/jobs/{id}/events/stream (Server-Sent Events, with the login
// cookie) and updates the page in place. Status, progress and ETA change as the stream says; a new
// event is added to the latest events (keeping the last few) and to the folded list of all; a new stage, a change of status or the job's end fetches the
// page again and swaps its <main> in (the timeline, results and outputs as the server renders them),
// so the page never reloads. EventSource reconnects by itself, resuming with Last-Event-ID.
"use strict";
(function () {
  const start = document.getElementById("job-live");
  if (!start || start.dataset.ended === "true" || !window.EventSource) return;
  const after = start.dataset.after;
  const source = new EventSource(start.dataset.stream + (after ? "?after=" + after : ""));
  const recent = [];  // events since the page was rendered, re-added if a swapped-in page lacks them
  let fetching = false, again = false;

  function cell(row, text) { const td = document.createElement("td"); td.textContent = text; row.appendChild(td); }
  function pct(x) { return x === null || x === undefined ? "" : Math.round(x * 100) + "%"; }
  function duration(s) {
    if (s === null || s === undefined) return "";
    s = Math.max(Math.round(s), 0);
    return s < 60 ? s + "s" : s < 3600 ? Math.floor(s / 60) + "m " + String(s % 60).padStart(2, "0") + "s"
      : Math.floor(s / 3600) + "h " + String(Math.floor(s % 3600 / 60)).padStart(2, "0") + "m";
  }

  function row(ev) {
    const tr = document.createElement("tr");
    tr.className = "event event-" + ev.kind;
    tr.dataset.id = ev.id;
    cell(tr, new Date(ev.created_at).toLocaleTimeString([], {hour12: false}));
    cell(tr, ev.kind); cell(tr, ev.stage || ""); cell(tr, pct(ev.progress)); cell(tr, ev.message || "");
    return tr;
  }

  function addRow(ev) {  // newest first, in the latest few and (once the page folds them) in all
    for (const id of ["events-recent", "events"]) {
      const body = document.getElementById(id);
      if (!body || body.querySelector('tr[data-id="' + ev.id + '"]')) continue;
      body.insertBefore(row(ev), body.firstChild);
      const keep = Number(body.dataset.keep || 0);
      while (keep && body.rows.length > keep) body.deleteRow(-1);
    }
  }

  function update(job) {
    const status = document.getElementById("status");
    if (status) { status.textContent = job.status; status.className = "status status-" + job.status; }
    const bar = document.getElementById("progress-bar");
    if (bar) bar.value = job.progress;
    const text = document.getElementById("progress-text");
    if (text) {
      text.textContent = pct(job.progress) + (job.stage ? " · " + job.stage + (job.stage_progress !== null ? " " + pct(job.stage_progress) : "") : "")
        + (job.eta_seconds !== null && job.eta_seconds !== undefined ? " · ETA " + duration(job.eta_seconds) : "");
    }
    document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
  }

  function refresh() {  // the page as the server renders it now, swapped in without a reload
    if (fetching) { again = true; return; }
    fetching = true;
    fetch(location.href, {credentials: "same-origin", cache: "no-store"})
      .then(r => r.ok ? r.text() : Promise.reject(r.status))
      .then(html => {
        const fresh = new DOMParser().parseFromString(html, "text/html").querySelector("main");
        if (!fresh) return;
        const open = document.querySelector("details.events-all[open]");  // a list the reader opened stays open
        document.querySelector("main").replaceWith(fresh);
        const all = document.querySelector("details.events-all");
        if (open && all) all.open = true;
        recent.forEach(addRow);
      })
      .catch(() => {})
      .finally(() => { fetching = false; if (again) { again = false; refresh(); } });
  }

  source.onmessage = m => {
    const ev = JSON.parse(m.data);
    recent.push(ev);
    addRow(ev);
    if (ev.kind === "stage" || ev.kind === "status" || ev.kind === "warning") refresh();
  };
  source.addEventListener("job", m => update(JSON.parse(m.data)));
  source.addEventListener("end", m => {
    source.close();
    update(JSON.parse(m.data));
    document.body.dataset.ended = "true";
    refresh();
  });
})();
