// Continuity colour theme: light, dark, or the system's (prefers-color-scheme, the default).
// Loaded synchronously in <head>, before the stylesheet: it sets data-theme on <html> before the
// first paint, so a dark choice never flashes light. "system" leaves the attribute off and lets
// the stylesheet's media query decide. The choice is kept in localStorage, per browser.
(() => {
  "use strict";
  const KEY = "continuity:theme";
  const CHOICES = ["system", "light", "dark"];
  const root = document.documentElement;

  function stored() {
    try {
      const value = localStorage.getItem(KEY);
      return CHOICES.includes(value) ? value : "system";
    } catch {
      return "system"; // storage blocked (privacy settings): follow the system
    }
  }

  function apply(choice) {
    if (choice === "light" || choice === "dark") root.dataset.theme = choice;
    else delete root.dataset.theme;
    const select = document.getElementById("theme-choice");
    if (select) select.value = choice;
  }

  function choose(choice) {
    try {
      if (choice === "system") localStorage.removeItem(KEY);
      else localStorage.setItem(KEY, choice);
    } catch {
      // not kept, but still applied to this page
    }
    apply(choice);
  }

  apply(stored());
  window.addEventListener("storage", (event) => {
    if (event.key === KEY || event.key === null) apply(stored()); // changed in another tab
  });
  document.addEventListener("DOMContentLoaded", () => {
    const picker = document.querySelector("[data-theme-pick]");
    const select = document.getElementById("theme-choice");
    if (!picker || !select) return;
    select.value = stored();
    select.addEventListener("change", () => choose(select.value));
    picker.hidden = false;
  });
})();
