// Continuity chat, the entry module: the upsert extension, older pages, the conversations drawer,
// keyboard shortcuts, the account menu, and what starts on load. Its parts are in modules/,
// served as they are (no build step).

import { restoreDraft } from "./modules/composer.js";
import { exchangesBox, scrollToEnd, scroller } from "./modules/dom.js";
import { enhance, localTimes, onMac } from "./modules/enhance.js";
import { noteState, tickHints, upsertFragment } from "./modules/exchanges.js";
import { liveChannel } from "./modules/live.js";

// Declared on the composer itself: its response replaces the composer (out of band) before
// the main swap runs, and a detached element no longer inherits extensions from <body>.
htmx.defineExtension("upsert", {
  handleSwap(swapStyle, target, fragment) {
    if (swapStyle !== "upsert") return false;
    upsertFragment(fragment);
    return true;
  },
});

// Content swapped in by htmx elsewhere (the memory page's edits) shows times as the rest.
document.addEventListener("htmx:load", (event) => localTimes(event.detail.elt));

// Scrolling up loads one older page at a time, and the exchange the reader was on stays where
// it was on screen: the older page goes in above it and the view moves down by its height
// (the browser's own scroll anchoring is off for the exchanges, see app.css). Left at the
// top instead, the next page's marker would show at once and load every page in a cascade.
let olderAnchor = null; // {exchange, top} while an older page is swapped in
const loadsOlder = (event) => event.detail.requestConfig?.elt?.matches?.("[data-load-older]");

document.addEventListener("htmx:beforeSwap", (event) => {
  if (!loadsOlder(event)) return;
  const exchange = event.detail.requestConfig.elt.nextElementSibling;
  if (exchange) olderAnchor = { exchange, top: exchange.getBoundingClientRect().top };
});

// An older page of exchanges arrived: back to the reader's place, then copy buttons, local
// times and so on.
// htmx sends afterSwap once per element of the page, after the whole page went in.
document.addEventListener("htmx:afterSwap", (event) => {
  if (!loadsOlder(event) || !olderAnchor) return;
  const box = exchangesBox();
  enhance(box); // first: its copy buttons make the new exchanges taller
  box.querySelectorAll("[data-exchange]").forEach((el) => noteState(el, { quietly: true }));
  if (olderAnchor.exchange.isConnected) {
    scroller().scrollTop += olderAnchor.exchange.getBoundingClientRect().top - olderAnchor.top;
  }
  olderAnchor = null;
});

// Below 720px the sidebar is a drawer. Without JavaScript its link opens it as the :target;
// here the link acts as a button that toggles it and moves focus in and back out.
const sidebar = () => document.getElementById("conversations");
const drawerToggle = () => document.querySelector("[data-drawer-open]");
const drawerShown = () => !!sidebar() && getComputedStyle(sidebar()).display !== "none";

function setDrawer(open) {
  const nav = sidebar();
  const toggle = drawerToggle();
  if (!nav) return;
  nav.classList.toggle("open", open);
  toggle?.setAttribute("aria-expanded", String(open));
  if (open) nav.querySelector("a:not([data-drawer-close]), input")?.focus();
  else {
    if (nav.matches(":target")) location.hash = ""; // opened without script, or reloaded so
    toggle?.focus();
  }
}

document.addEventListener("click", (event) => {
  if (!event.target.closest) return;
  if (event.target.closest("[data-drawer-open]")) {
    event.preventDefault();
    setDrawer(!sidebar()?.classList.contains("open"));
  } else if (event.target.closest("[data-drawer-close]")) {
    event.preventDefault();
    setDrawer(false);
  }
});

function focusSearch() {
  const search = document.getElementById("search-q");
  if (!search) return;
  if (!drawerShown()) setDrawer(true);
  search.focus();
  search.select();
}

// Ctrl+K (⌘K on a Mac) searches the conversations and Ctrl+Shift+O (⇧⌘O) starts a new one,
// on the chat pages, which show them in the composer's hint; Esc stops the reply being
// written (the newest Stop button), unless a menu or the drawer is what Esc should close.
function shortcut(event) {
  if (event.key === "Escape" && !event.target.closest?.("details[open], [data-drawer]")) {
    const stops = document.querySelectorAll("[data-stop]");
    if (!stops.length) return false;
    stops[stops.length - 1].click();
    event.preventDefault();
    return true;
  }
  const mod = onMac ? event.metaKey && !event.ctrlKey : event.ctrlKey && !event.metaKey;
  if (!mod || event.altKey || !document.getElementById("search-q")) return false;
  const key = event.key.toLowerCase();
  if (key === "k" && !event.shiftKey) focusSearch();
  else if (key === "o" && event.shiftKey) {
    window.location.assign(document.querySelector(".new-conversation")?.href || "/");
  } else return false;
  event.preventDefault();
  return true;
}

document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && sidebar()?.classList.contains("open")) {
    event.preventDefault(); // Esc closes the drawer, and focus goes back to its toggle
    setDrawer(false);
    return;
  }
  if (shortcut(event)) return;
  if (event.key === " " && event.target.matches?.("[data-drawer-open]")) {
    event.preventDefault(); // a link that acts as a button answers Space too
    event.target.click();
    return;
  }
  const field = event.target;
  if (!field.matches || !field.matches("#composer textarea")) return;
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    field.form.requestSubmit();
  }
});

// The account menu is open in the bar on a wide screen, a fold-out on a narrow one.
function accountMenu() {
  const menu = document.querySelector("[data-account-menu]");
  if (!menu) return;
  const wide = matchMedia("(min-width: 721px)");
  const fit = () => (menu.open = wide.matches);
  wide.addEventListener("change", fit);
  fit();
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape" || wide.matches || !menu.open || !menu.contains(event.target)) return;
    menu.open = false;
    menu.querySelector("summary").focus();
  });
  document.addEventListener("click", (event) => {
    if (!wide.matches && menu.open && !menu.contains(event.target)) menu.open = false;
  });
}

document.addEventListener("DOMContentLoaded", () => {
  accountMenu();
  restoreDraft();
  enhance(document);
  document.querySelector("[data-focus-on-load]")?.focus(); // e.g. "“Trip plans” deleted."
  const toggle = drawerToggle();
  if (toggle) {
    toggle.setAttribute("role", "button");
    toggle.setAttribute("aria-controls", "conversations");
    toggle.setAttribute("aria-expanded", String(!!sidebar()?.matches(":target")));
  }
  // The page answers its keys now (Enter sends): until then, Enter in the message box adds a
  // line, as it does without JavaScript.
  document.documentElement.dataset.scriptReady = "";
  const main = document.getElementById("conversation");
  if (!main) return; // other pages (memory, account) open at their top
  document.querySelectorAll("[data-exchange]").forEach((el) => noteState(el, { quietly: true }));
  const resync = liveChannel(main);
  setInterval(() => tickHints(resync), 500);
  tickHints(resync);
  // A search result links to its exchange; otherwise the conversation opens at its end.
  const hash = location.hash.slice(1);
  const linked = hash.startsWith("exchange-") && document.getElementById(hash);
  if (linked) linked.scrollIntoView();
  else scrollToEnd(true);
});
