"use strict";
const CONFIG = JSON.parse(document.getElementById("config").textContent);
const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "longtask.token";
function token() { return (sessionStorage.getItem(TOKEN_KEY) || "").trim(); }
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}
async function api(path, init) {
  const headers = {"Accept": "application/json"};
  if (token()) headers["Authorization"] = "Bearer " + token();
  if (init && init.body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, Object.assign({}, init || {}, {headers}));
  let data = null;
  try { data = await r.json(); } catch (e) { data = null; }
  if (!r.ok) {
    const err = new Error((data && data.error) || (r.status + " " + r.statusText));
    err.status = r.status;
    throw err;
  }
  return data;
}
function money(v) { return v ? String(Number(v.toFixed(6))) : "0"; }
function age(s) {
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60]]) {
    if (s >= size) return Math.floor(s / size) + unit;
  }
  return Math.floor(s) + "s";
}
function seconds(v) {
  if (v < 1) return Math.round(v * 1000) + " ms";
  if (v < 60) return v.toFixed(1) + " s";
  const two = (n) => String(n).padStart(2, "0");
  if (v < 3600) return Math.floor(v / 60) + " min " + two(Math.round(v % 60)) + " s";
  return Math.floor(v / 3600) + " h " + two(Math.floor((v % 3600) / 60)) + " min";
}
// A word as a POSIX shell reads it back (as Python's shlex.quote writes it).
function shq(s) {
  s = String(s);
  if (s && /^[A-Za-z0-9_@%+=:,.\/-]+$/.test(s)) return s;
  return "'" + s.replace(/'/g, "'\"'\"'") + "'";
}
// A command for a shell here: the server's --db goes after the command's arguments.
function command(words, options) {
  return words.map(shq).concat(CONFIG.dbOption ? [CONFIG.dbOption] : [], options || [])
    .join(" ");
}
function bindToken(onChange) {
  const input = $("token");
  input.value = token();
  input.addEventListener("input", () => sessionStorage.setItem(TOKEN_KEY, input.value.trim()));
  input.addEventListener("change", () => { if (onChange) onChange(); });
}
