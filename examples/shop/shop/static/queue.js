// The waiting page: the buyer's place and ETA, pushed by the shop over Server-Sent Events
// (one stream per page; the shop reads the sale's room once per process for every page).
// Closing the page closes the stream, and the shop gives the place to the next person.
(function () {
  const place = document.getElementById("place");
  const eta = document.getElementById("eta");
  const problem = document.getElementById("problem");
  function about(ms) {
    if (ms < 0) return "";
    if (ms < 60000) return `about ${Math.max(1, Math.round(ms / 1000))} s`;
    return `about ${Math.round(ms / 60000)} min`;
  }
  function yourTurn() {
    document.getElementById("waiting").hidden = true;
    document.getElementById("turn").hidden = false;
    document.body.dataset.step = "turn";
    document.querySelector("h1").textContent = "Your turn";
    const shown = document.getElementById("window");
    const until = Date.now() + Number(shown.dataset.windowMs);
    (function tick() {
      const s = Math.max(0, Math.ceil((until - Date.now()) / 1000));
      shown.textContent = `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
      if (s > 0) setTimeout(tick, 500);
    })();
  }
  const source = new EventSource("/queue/events");
  source.addEventListener("place", (event) => {
    const p = JSON.parse(event.data);
    document.body.dataset.updates = Number(document.body.dataset.updates) + 1;
    document.body.dataset.position = p.position;
    if (p.position < 0) { source.close(); location.href = "/sold-out"; return; }
    if (p.position === 0) { source.close(); yourTurn(); return; }
    if (p.drawn) {
      place.textContent = `You are number ${p.position}`;
      eta.textContent = p.eta_ms >= 0 ? `Your turn in ${about(p.eta_ms)}` : "";
    } else {
      place.textContent = `${p.position} ${p.position === 1 ? "person" : "people"} in line`;
      eta.textContent = p.eta_ms >= 0 ? `Places are drawn at the opening, in ${about(p.eta_ms)}` : "";
    }
  });
  source.addEventListener("problem", (event) => {
    source.close();
    problem.hidden = false;
    problem.textContent = JSON.parse(event.data).message;
  });
})();
