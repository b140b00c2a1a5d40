// The staff console shows times in UTC, in one format, and says so once. A viewer may switch
// to their own time zone (kept for this browser), charts' labels and tooltips included; the UTC
// time stays in each time's title.
(() => {
  "use strict";

  const KEY = "continuity:console-clock";
  const pad = (n) => String(n).padStart(2, "0");

  function shown(at, precision, local) {
    const parts = local
      ? [at.getFullYear(), at.getMonth() + 1, at.getDate(), at.getHours(), at.getMinutes(), at.getSeconds()]
      : [at.getUTCFullYear(), at.getUTCMonth() + 1, at.getUTCDate(), at.getUTCHours(), at.getUTCMinutes(), at.getUTCSeconds()];
    const [year, month, day, hour, minute, second] = parts.map(pad);
    const time = precision === "seconds" ? `${hour}:${minute}:${second}` : `${hour}:${minute}`;
    return `${year}-${month}-${day} ${time}`;
  }

  const WEEKDAYS = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

  // A chart's ticks and tooltips: "Mon 14:05" or "14:05", as dashboard/charts.py writes them.
  function clock(at, format, local) {
    const [weekday, hour, minute] = local
      ? [at.getDay(), at.getHours(), at.getMinutes()]
      : [at.getUTCDay(), at.getUTCHours(), at.getUTCMinutes()];
    const time = `${pad(hour)}:${pad(minute)}`;
    return format === "weekday-time" ? `${WEEKDAYS[weekday]} ${time}` : time;
  }

  function showTimes(local, zone) {
    document.querySelectorAll("time[data-utc-time]").forEach((el) => {
      const at = new Date(el.getAttribute("datetime"));
      if (Number.isNaN(at.getTime())) return;
      el.textContent = shown(at, el.dataset.utcTime, local);
      el.title = `${shown(at, "seconds", false)} UTC`;
    });
    document.querySelectorAll("[data-clock-at]").forEach((el) => {
      const at = new Date(el.dataset.clockAt);
      if (Number.isNaN(at.getTime())) return;
      const time = clock(at, el.dataset.clockFormat, local);
      const template = el.dataset.clockText;
      el.textContent = template ? template.replace("{time}", local ? time : `${time} UTC`) : time;
    });
    document.querySelectorAll("[data-clock-zone]").forEach((el) => {
      el.textContent = local ? zone : "UTC";
    });
  }

  function setUp() {
    const note = document.querySelector("[data-console-clock]");
    const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    if (!note || !zone || zone === "UTC") return;
    let local = localStorage.getItem(KEY) === "local";
    const button = document.createElement("button");
    button.type = "button";
    button.className = "secondary";
    const say = () => {
      note.firstChild.textContent = local ? `Times are in your time zone (${zone}). ` : "Times are in UTC. ";
      button.textContent = local ? "Show UTC" : `Show my time zone (${zone})`;
      showTimes(local, zone);
    };
    button.addEventListener("click", () => {
      local = !local;
      localStorage.setItem(KEY, local ? "local" : "utc");
      say();
    });
    note.append(button);
    say();
  }

  document.addEventListener("DOMContentLoaded", setUp);
  // The overview refreshes its tables with htmx: their times follow the chosen clock too.
  document.addEventListener("htmx:afterSettle", () => {
    const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    showTimes(zone && zone !== "UTC" && localStorage.getItem(KEY) === "local", zone);
  });

  // A table wider than the screen scrolls in its wrapper: keyboard users reach it with Tab and
  // scroll it with the arrow keys, and screen readers hear what it is (WCAG 2.1.1).
  function scrollableTables() {
    document.querySelectorAll(".table-wrap").forEach((wrap) => {
      if (wrap.scrollWidth > wrap.clientWidth) {
        const table = wrap.querySelector("table");
        wrap.tabIndex = 0;
        wrap.setAttribute("role", "region");
        wrap.setAttribute("aria-label", table?.dataset.table ? `${table.dataset.table} table` : "Table");
      } else {
        wrap.removeAttribute("tabindex");
        wrap.removeAttribute("role");
        wrap.removeAttribute("aria-label");
      }
    });
  }
  // Checked again whenever a wrapper or its table changes size, not only at load and swaps:
  // a table that widens afterwards (times rewritten to the reader's clock, a thread that
  // grew) must not be left scrollable and out of the keyboard's reach.
  const tableSizes = new ResizeObserver(scrollableTables);
  function watchTables() {
    document.querySelectorAll(".table-wrap").forEach((wrap) => {
      tableSizes.observe(wrap);
      const table = wrap.querySelector("table");
      if (table) tableSizes.observe(table);
    });
    scrollableTables();
  }
  document.addEventListener("DOMContentLoaded", watchTables);
  document.addEventListener("htmx:afterSettle", watchTables);

  // A taken-over conversation's thread refreshes while support answers in it: the reply form
  // answers the message the thread now says it answers.
  document.addEventListener("htmx:afterSettle", (event) => {
    const said = event.detail.target.querySelector?.("[data-answering]");
    const field = document.querySelector('[data-action="staff-reply"] input[name="answering"]');
    if (said && field) field.value = said.dataset.answering;
  });
})();
