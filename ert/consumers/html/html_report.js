// ert report: hover text and legend toggles. No network, no library: the page works from a mail attachment.
(function () {
  "use strict";
  var tip = document.getElementById("tip");

  // An element is hidden when any of its tags is switched off in its chart's legend.
  function apply(figure) {
    var off = {};
    figure.querySelectorAll('button.tog[aria-pressed="false"]').forEach(function (b) { off[b.dataset.tag] = true; });
    figure.querySelectorAll("[data-tags]").forEach(function (el) {
      var hide = el.getAttribute("data-tags").split(" ").some(function (t) { return off[t]; });
      el.classList.toggle("off", hide);
    });
  }

  document.querySelectorAll("figure.chart").forEach(function (figure) {
    figure.addEventListener("click", function (event) {
      var button = event.target.closest("button.tog");
      if (!button) { return; }
      button.setAttribute("aria-pressed", button.getAttribute("aria-pressed") === "true" ? "false" : "true");
      apply(figure);
    });
    apply(figure);
  });

  function place(event) {
    var x = event.clientX + 14, y = event.clientY + 14;
    var w = tip.offsetWidth, h = tip.offsetHeight;
    if (x + w > window.innerWidth - 4) { x = Math.max(4, event.clientX - w - 14); }
    if (y + h > window.innerHeight - 4) { y = Math.max(4, event.clientY - h - 14); }
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }

  // The topmost element with a tip under the pointer, and every other one of its kind there (roof, point ...):
  // roofs that coincide (two levels within a few percent, one machine's level on another's) are all named.
  function tipsAt(event) {
    var seen = [], texts = [], kind = null;
    document.elementsFromPoint(event.clientX, event.clientY).forEach(function (el) {
      var target = el.closest ? el.closest("[data-tip]") : null;
      if (!target || seen.indexOf(target) >= 0) { return; }
      seen.push(target);
      var cls = target.getAttribute("class") || "";
      if (kind === null) { kind = cls; }
      if (cls === kind) { texts.push(target.getAttribute("data-tip")); }
    });
    return texts;
  }

  document.addEventListener("mousemove", function (event) {
    var texts = tipsAt(event);
    if (!texts.length) { tip.hidden = true; return; }
    var text = texts.slice(0, 3).join("\n\n") + (texts.length > 3 ? "\n\n(+" + (texts.length - 3) + " more here)" : "");
    if (tip.textContent !== text) { tip.textContent = text; }
    tip.hidden = false;
    place(event);
  });
  document.addEventListener("mouseleave", function () { tip.hidden = true; });
}());
