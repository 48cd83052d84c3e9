// blobdex's page, enhanced: results as you type, `/` to search, j/k or arrows through the results, the lines a
// file view's #L40-L90 names marked, and code navigation (calls, crumbs, folders, the outline) without a page
// load. Everything works without it.
"use strict";

function debounce(fn, ms) {
  let timer = null;
  return (...args) => { clearTimeout(timer); timer = setTimeout(() => fn(...args), ms); };
}

function searchAsYouType() {
  const form = document.getElementById("search-form");
  const results = document.getElementById("results");
  if (!form || !results) return;
  let asked = 0;
  const refresh = debounce(async () => {
    const params = new URLSearchParams(new FormData(form));
    for (const [key, value] of [...params.entries()]) if (value === "") params.delete(key);
    history.replaceState(null, "", "/?" + params.toString());  // the URL holds the whole query
    if (!(params.get("q") || "").trim()) { results.innerHTML = ""; return; }
    const mine = ++asked;
    params.set("partial", "results");
    const answer = await fetch("/?" + params.toString(), { credentials: "same-origin" });
    if (mine === asked) results.innerHTML = await answer.text();  // a later keystroke's answer wins
  }, 250);
  form.addEventListener("input", refresh);
  form.addEventListener("change", refresh);
}

function keyboard() {
  let at = -1;
  document.addEventListener("keydown", (event) => {
    const field = ["INPUT", "TEXTAREA", "SELECT"].includes(document.activeElement.tagName);
    if (event.key === "/" && !field) {
      const box = document.getElementById("q");
      if (box) { event.preventDefault(); box.focus(); box.select(); }
      return;
    }
    if (field && event.key !== "ArrowDown") return;
    const hits = [...document.querySelectorAll("a.hit")];
    if (!hits.length) return;
    const down = event.key === "ArrowDown" || event.key === "j";
    const up = event.key === "ArrowUp" || event.key === "k";
    if (!down && !up) return;
    event.preventDefault();
    if (hits[at]) hits[at].classList.remove("selected");
    at = Math.max(0, Math.min(hits.length - 1, at + (down ? 1 : -1)));
    hits[at].classList.add("selected");
    hits[at].focus();  // Enter follows the link
  });
}

function markLines() {
  const code = document.getElementById("code");
  if (!code) return;
  const apply = () => {
    const m = /^#L(\d+)(?:-L?(\d+))?$/.exec(location.hash);
    if (!m) return;
    const a = Number(m[1]), b = Number(m[2] || m[1]);
    // The rows on the page are walked, never the numbers between a and b: a shared link may say #L1-L300000000.
    for (const row of code.querySelectorAll("tr[id^='L']")) {
      const n = Number(row.id.slice(1));
      row.classList.toggle("hl", n >= a && n <= b);
    }
    const first = document.getElementById("L" + a);
    if (first) first.scrollIntoView({ block: "center" });
  };
  code.addEventListener("click", (event) => {  // shift-click a line number: mark the range from the first
    const link = event.target.closest("td.n a");
    if (!link || !event.shiftKey) return;
    const m = /^#L(\d+)/.exec(location.hash);
    const n = Number(link.getAttribute("href").slice(2));
    if (!m) return;
    event.preventDefault();
    const a = Math.min(Number(m[1]), n), b = Math.max(Number(m[1]), n);
    history.replaceState(null, "", `#L${a}-L${b}`);
    apply();
  });
  if (!markLines.listening) window.addEventListener("hashchange", () => markLines.apply && markLines.apply());
  markLines.listening = true;
  markLines.apply = apply;
  apply();
}

// Code navigation in place: a call's definition, a crumb, a folder or an outline entry replaces the page's main
// part and pushes its URL, so Back and a shared link work as with a page load. Anything unexpected (another
// host, an error, not a page) falls back to an ordinary load.
const IN_PLACE = "a.call, a.def, nav.crumbs a, table.tree a, details.outline a";

async function swapTo(url, push) {
  const answer = await fetch(url, { credentials: "same-origin" });
  const type = answer.headers.get("content-type") || "";
  const next = answer.ok && type.startsWith("text/html")
    ? new DOMParser().parseFromString(await answer.text(), "text/html") : null;
  const main = next && next.getElementById("main");
  if (!main) { location.href = url; return; }
  document.getElementById("main").replaceWith(main);
  const header = next.querySelector("header.top");  // its nav marks the page's section
  if (header) document.querySelector("header.top").replaceWith(header);
  document.title = next.title;
  if (push) history.pushState({ inPlace: true }, "", url);
  markLines();
  if (!new URL(url).hash) window.scrollTo(0, 0);
}

function navigateInPlace() {
  document.addEventListener("click", (event) => {
    const link = event.target.closest(IN_PLACE);
    if (!link || event.defaultPrevented || event.button !== 0) return;
    if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;  // a new tab, a range
    const url = new URL(link.href, location.href);
    if (url.origin !== location.origin) return;
    if (url.pathname === location.pathname && url.search === location.search) return;  // a line of this page
    event.preventDefault();
    swapTo(url.href, true).catch(() => { location.href = url.href; });
  });
  window.addEventListener("popstate", () => { swapTo(location.href, false).catch(() => location.reload()); });
}

document.addEventListener("DOMContentLoaded", () => { searchAsYouType(); keyboard(); markLines(); navigateInPlace(); });
