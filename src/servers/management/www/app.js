"use strict";
// The admin page: vanilla JS over the management API (basic auth), charts drawn as inline SVG.
let auth = sessionStorage.getItem("auth");
const main = document.getElementById("main");
const loginForm = document.getElementById("login").outerHTML;
let timer = null;

async function api(method, path, body) {
  const resp = await fetch("/api" + path, {
    method, headers: {"Authorization": "Basic " + auth, "Content-Type": "application/json",
              "X-Requested-With": "XMLHttpRequest"},
    body: body === undefined ? undefined : JSON.stringify(body)});
  const text = await resp.text();
  const data = text ? JSON.parse(text) : null;
  if (resp.status === 401 && sessionStorage.getItem("auth")) logout();  // the stored login went stale
  if (!resp.ok) throw new Error((data && data.reason) || resp.statusText);
  return data;
}
const enc = encodeURIComponent;
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => "&#" + c.charCodeAt(0) + ";");

function el(html) { main.innerHTML = html; }
function say(msg) { const p = document.getElementById("status"); if (p) p.textContent = msg; }

function table(rows, cols, id) {
  const head = cols.map((c, i) => `<th data-i="${i}">${esc(c[0])}</th>`).join("");
  const body = rows.map((r) => "<tr>" + cols.map((c) => `<td>${c[1](r)}</td>`).join("") + "</tr>").join("");
  return `<table id="${id}"><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table>`;
}

// a queue's rate of one message_stats counter (RabbitMQ leaves message_stats out before any traffic)
function qrate(q, name) {
  const d = q.message_stats && q.message_stats[name + "_details"];
  return d ? d.rate : 0;
}

function sortable(id) {
  const t = document.getElementById(id);
  if (!t) return;
  t.querySelectorAll("th").forEach((th) => th.addEventListener("click", () => {
    const i = +th.dataset.i, rows = [...t.tBodies[0].rows];
    const dir = th.dataset.dir === "asc" ? -1 : 1; th.dataset.dir = dir === 1 ? "asc" : "desc";
    const key = (r) => { const v = r.cells[i].textContent; return isNaN(+v) ? v : +v; };
    rows.sort((a, b) => (key(a) > key(b) ? dir : key(a) < key(b) ? -dir : 0));
    rows.forEach((r) => t.tBodies[0].appendChild(r));
  }));
}

function chart(points, series, title) {
  const w = 420, h = 140, colors = ["#36c", "#c63", "#3a3", "#a3a"];
  const max = Math.max(1, ...points.flatMap((p) => series.map((s) => p[s])));
  const lines = series.map((s, k) => {
    const pts = points.map((p, i) => `${(i / Math.max(1, points.length - 1)) * w},${h - (p[s] / max) * (h - 20)}`);
    return `<polyline fill="none" stroke="${colors[k]}" points="${pts.join(" ")}"/>` +
      `<text x="${8 + k * 100}" y="14" fill="${colors[k]}">${esc(s)}</text>`;
  }).join("");
  return `<svg width="${w}" height="${h}" role="img" aria-label="${esc(title)}"><title>${esc(title)}</title>${lines}` +
    `<text x="${w - 60}" y="${h - 4}">max ${max}</text></svg>`;
}

const pages = {
  "": async () => {
    const [o, hist] = await Promise.all([api("GET", "/overview"), api("GET", "/stats/history?seconds=300")]);
    const ms = o.message_stats, qt = o.queue_totals, ot = o.object_totals;
    el(`<h1>Overview</h1><p>Node ${esc(o.node)} — version ${esc(o.product_version)}</p>
      <p id="totals">Queues ${ot.queues}, connections ${ot.connections}, channels ${ot.channels}, consumers ${ot.consumers};
      messages ${qt.messages} (ready ${qt.messages_ready}, unacked ${qt.messages_unacknowledged})</p>
      <p>Rates/s: publish ${ms.publish_details.rate}, deliver ${ms.deliver_get_details.rate}, ack ${ms.ack_details.rate}</p>
      ${chart(hist, ["publish", "deliver_get", "ack"], "message rates")}
      ${chart(hist, ["ready", "unacked"], "queued messages")}
      <h2>Listeners</h2>${table(o.listeners, [["protocol", (l) => esc(l.protocol)], ["address", (l) => esc(l.ip_address)],
        ["port", (l) => l.port]], "listeners")}`);
  },
  async queues() {
    const qs = await api("GET", "/queues");
    el(`<h1>Queues</h1>${table(qs, [["vhost", (q) => esc(q.vhost)],
      ["name", (q) => `<a href="#/queue/${enc(q.vhost)}/${enc(q.name)}">${esc(q.name)}</a>`],
      ["ready", (q) => q.messages_ready], ["unacked", (q) => q.messages_unacknowledged],
      ["consumers", (q) => q.consumers], ["durable", (q) => q.durable],
      ["publish/s", (q) => qrate(q, "publish")], ["deliver/s", (q) => qrate(q, "deliver_get")],
      ["ack/s", (q) => qrate(q, "ack")]], "queues")}
      <form id="add-queue"><input name="name" placeholder="name"><button>Add queue</button></form><p id="status"></p>`);
    sortable("queues");
    document.getElementById("add-queue").onsubmit = async (e) => {
      e.preventDefault();
      await api("PUT", `/queues/%2F/${enc(e.target.name.value)}`, {durable: true}); route();
    };
  },
  async queue(vhost, name) {
    const q = await api("GET", `/queues/${enc(vhost)}/${enc(name)}`);
    const base = `/queues/${enc(vhost)}/${enc(name)}`;
    el(`<h1>Queue ${esc(name)}</h1><p id="depth">ready ${q.messages_ready}, unacked ${q.messages_unacknowledged},
      consumers ${q.consumers}</p>
      <p id="rates">Rates/s: publish ${qrate(q, "publish")}, deliver ${qrate(q, "deliver_get")},
      redeliver ${qrate(q, "redeliver")}, ack ${qrate(q, "ack")}, depth ${q.messages_details.rate}</p>
      <form id="publish"><input name="payload" placeholder="payload"><button>Publish</button></form>
      <form id="get"><button>Get messages</button></form><pre id="messages"></pre>
      <button id="purge">Purge</button> <button id="delete">Delete</button><p id="status"></p>`);
    document.getElementById("publish").onsubmit = async (e) => {
      e.preventDefault();
      const r = await api("POST", `/exchanges/${enc(vhost)}/amq.default/publish`,
        {properties: {}, routing_key: name, payload: e.target.payload.value, payload_encoding: "string"});
      say(r.routed ? "published" : "not routed");
    };
    document.getElementById("get").onsubmit = async (e) => {
      e.preventDefault();
      const ms = await api("POST", base + "/get", {count: 5, ackmode: "ack_requeue_true", encoding: "auto"});
      document.getElementById("messages").textContent = ms.map((m) => m.payload).join("\n") || "(empty)";
    };
    document.getElementById("purge").onclick = async () => { await api("DELETE", base + "/contents"); say("purged"); };
    document.getElementById("delete").onclick = async () => { await api("DELETE", base); location.hash = "#/queues"; };
  },
  async exchanges() {
    const [xs, bs] = await Promise.all([api("GET", "/exchanges"), api("GET", "/bindings")]);
    el(`<h1>Exchanges</h1>${table(xs, [["vhost", (x) => esc(x.vhost)], ["name", (x) => esc(x.name || "(AMQP default)")],
      ["type", (x) => esc(x.type)], ["durable", (x) => x.durable]], "exchanges")}
      <h2>Bindings</h2>${table(bs, [["source", (b) => esc(b.source)], ["destination", (b) => esc(b.destination)],
      ["type", (b) => esc(b.destination_type)], ["routing key", (b) => esc(b.routing_key)]], "bindings")}`);
    sortable("exchanges"); sortable("bindings");
  },
  async connections() {
    const cs = await api("GET", "/connections");
    el(`<h1>Connections</h1>${table(cs, [["name", (c) => esc(c.name)], ["user", (c) => esc(c.user)],
      ["vhost", (c) => esc(c.vhost)], ["protocol", (c) => esc(c.protocol)], ["channels", (c) => c.channels],
      ["", (c) => `<button class="close" data-name="${esc(c.name)}">Close</button>`]], "connections")}<p id="status"></p>`);
    main.querySelectorAll("button.close").forEach((b) => b.onclick = async () => {
      await api("DELETE", `/connections/${enc(b.dataset.name)}`); say("closed");
      setTimeout(() => { if (location.hash === "#/connections") route(); }, 500);
    });
  },
  async users() {
    const [us, vs, ps] = await Promise.all([api("GET", "/users"), api("GET", "/vhosts"), api("GET", "/permissions")]);
    el(`<h1>Users</h1>${table(us, [["name", (u) => esc(u.name)], ["tags", (u) => esc(u.tags.join(", "))]], "users")}
      <h2>Virtual hosts</h2>${table(vs, [["name", (v) => esc(v.name)], ["messages", (v) => v.messages]], "vhosts")}
      <h2>Permissions</h2>${table(ps, [["user", (p) => esc(p.user)], ["vhost", (p) => esc(p.vhost)],
      ["configure", (p) => esc(p.configure)], ["write", (p) => esc(p.write)], ["read", (p) => esc(p.read)]], "perms")}`);
  },
  async definitions() {
    el(`<h1>Definitions</h1><button id="export">Export</button> <button id="import">Import</button>
      <textarea id="defs"></textarea><p id="status"></p>`);
    document.getElementById("export").onclick = async () => {
      document.getElementById("defs").value = JSON.stringify(await api("GET", "/definitions"), null, 2); say("exported");
    };
    document.getElementById("import").onclick = async () => {
      await api("POST", "/definitions", JSON.parse(document.getElementById("defs").value)); say("imported");
    };
  },
};

async function route() {
  clearTimeout(timer);
  if (!auth) return showLogin();
  document.getElementById("nav").hidden = false;
  const [name, ...args] = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const page = pages[name] || pages[""];
  try { await page(...args); } catch (err) { main.insertAdjacentHTML("afterbegin", `<p class="error">${esc(err.message)}</p>`); }
  if (!name) timer = setTimeout(route, 2000);  // the overview is live
}

function showLogin() {
  document.getElementById("nav").hidden = true;
  main.innerHTML = loginForm;
  document.getElementById("login").onsubmit = async (e) => {
    e.preventDefault();
    auth = btoa(document.getElementById("user").value + ":" + document.getElementById("password").value);
    try {
      await api("GET", "/whoami");
      sessionStorage.setItem("auth", auth);
      route();
    } catch (err) { document.getElementById("login-error").textContent = err.message; auth = null; }
  };
}

function logout() { auth = null; sessionStorage.removeItem("auth"); showLogin(); }
document.getElementById("logout").onclick = logout;
window.addEventListener("hashchange", route);
route();
