// The product page's countdown to the opening, on the server's clock (the page carries the
// server's time; the browser's own clock may be off).
(function () {
  const shown = document.getElementById("countdown");
  if (!shown) return;
  const offset = Number(shown.dataset.nowMs) - Date.now();
  const start = Number(shown.dataset.startMs);
  function tick() {
    const left = Math.max(0, start - (Date.now() + offset));
    const s = Math.ceil(left / 1000);
    shown.textContent = left > 0 ? `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}` : "now: the sale is open";
    document.body.dataset.updates = Number(document.body.dataset.updates) + 1;
    if (left > 0) setTimeout(tick, 250);
  }
  tick();
})();
