// What the page adds to rendered content: copy buttons, local times, keyboard access to code.

import { announce, scrollableByKeyboard } from "./dom.js";
import { renderStreamed } from "./markdown.js";

// Copy buttons need the asynchronous clipboard, which browsers give only to secure contexts
// (HTTPS, or localhost): elsewhere none is shown.
function copyButton(label, text) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "copy";
  button.setAttribute("aria-label", label);
  button.addEventListener("click", async () => {
    let done = true;
    try {
      await navigator.clipboard.writeText(text());
    } catch {
      done = false;
    }
    delete button.dataset.copied;
    delete button.dataset.copyFailed;
    button.dataset[done ? "copied" : "copyFailed"] = "";
    announce(done ? "Copied" : "Could not copy");
    setTimeout(() => {
      delete button.dataset.copied;
      delete button.dataset.copyFailed;
    }, 2000);
  });
  return button;
}

function addCopyButtons(root) {
  if (!navigator.clipboard || !window.isSecureContext) return;
  root.querySelectorAll(".bubble.assistant.markdown pre").forEach((pre) => {
    if (pre.parentElement.classList.contains("code-block")) return;
    const block = document.createElement("div");
    block.className = "code-block";
    pre.before(block);
    block.append(pre, copyButton("Copy code", () => pre.textContent.replace(/\n$/, "")));
  });
  root.querySelectorAll(".bubble.user > .meta").forEach((meta) => {
    if (meta.querySelector(".copy")) return;
    const text = meta.parentElement.querySelector(":scope > .text");
    meta.append(copyButton("Copy what you wrote", () => text.innerText));
  });
  root.querySelectorAll("[data-reply-meta]").forEach((meta) => {
    if (meta.querySelector(".copy")) return;
    const reply = meta.previousElementSibling;
    meta.append(copyButton("Copy reply", () => reply.innerText));
  });
}

// Times come from the server in its time zone; the reader sees their own, with the date
// when it is not today, and the full date and time in the title.
export function localTimes(root) {
  const now = new Date();
  root.querySelectorAll("time[data-local-time]").forEach((el) => {
    const at = new Date(el.getAttribute("datetime"));
    if (Number.isNaN(at.getTime())) return;
    const clock = { hour: "2-digit", minute: "2-digit" };
    const day = { day: "numeric", month: "short" };
    if (at.getFullYear() !== now.getFullYear()) day.year = "numeric";
    el.textContent = at.toDateString() === now.toDateString()
      ? at.toLocaleTimeString([], clock)
      : at.toLocaleString([], { ...day, ...clock });
    el.title = at.toLocaleString([], { dateStyle: "full", timeStyle: "short" });
  });
}

// Exports are written in the reader's time zone, with its offset from UTC.
function exportsInLocalTime(root) {
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  if (!zone) return;
  root.querySelectorAll("a[data-in-local-time]").forEach((link) => {
    const url = new URL(link.href, location.href);
    url.searchParams.set("tz", zone);
    link.href = url.pathname + url.search;
  });
}

export const onMac = /Mac|iPhone|iPad/.test(navigator.platform || navigator.userAgent);

export function enhance(root) {
  root.querySelectorAll("[data-streaming]").forEach(renderStreamed);
  root.querySelectorAll(".markdown pre").forEach(scrollableByKeyboard);
  addCopyButtons(root);
  localTimes(root);
  exportsInLocalTime(root);
  if (onMac) root.querySelectorAll("kbd[data-mod-key]").forEach((kbd) => (kbd.textContent = "⌘"));
}
