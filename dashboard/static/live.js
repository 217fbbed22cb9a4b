// Reloads the parts of a page marked data-live every few seconds: the page
// is fetched again and each marked element's content replaced by the new
// one's, so counts stay current without a reload. Forms and scroll stay.
(function () {
  var every = Number(document.body.dataset.refresh || 0);
  if (!every) return;
  function tick() {
    fetch(location.href, { credentials: "same-origin", headers: { "X-Live": "1" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (!text) return;
        var doc = new DOMParser().parseFromString(text, "text/html");
        document.querySelectorAll("[data-live]").forEach(function (el) {
          var fresh = doc.getElementById(el.id);
          // Unchanged parts stay as they are: no flicker, no lost focus.
          if (fresh && fresh.innerHTML !== el.innerHTML) el.replaceChildren.apply(el, Array.from(fresh.childNodes));
        });
        document.body.dataset.refreshed = String(Date.now());
      })
      .catch(function () {})
      .finally(function () { setTimeout(tick, every); });
  }
  setTimeout(tick, every);
  // "select all" ticks every row's box.
  document.addEventListener("change", function (e) {
    if (e.target.id !== "select-all") return;
    document.querySelectorAll("input[name=id][form=selection]").forEach(function (b) { b.checked = e.target.checked; });
  });
})();
