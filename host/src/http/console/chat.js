// The chat page's one script: sends the form to /chat/stream and shows the
// reply as its tokens arrive. Without it the form posts to /chat and the
// whole reply comes back in the page.
"use strict";
(function () {
  const form = document.getElementById("chat-form");
  if (!form || !window.fetch || !window.TextDecoder) return;
  const reply = document.getElementById("reply");
  const status = document.getElementById("chat-status");
  const button = form.querySelector("button[type=submit]");
  form.addEventListener("submit", async function (event) {
    event.preventDefault();
    const old = document.getElementById("chat-error");
    if (old) old.remove();
    reply.textContent = "";
    status.textContent = "Generating…";
    button.disabled = true;
    const started = performance.now();
    try {
      const response = await fetch(form.dataset.stream, {
        method: "POST",
        body: new URLSearchParams(new FormData(form)),
        credentials: "same-origin",
      });
      if (!response.ok) {
        let why = "HTTP " + response.status;
        try {
          why = (await response.json()).error.message;
        } catch (_) {}
        status.textContent = "Failed: " + why;
        return;
      }
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        reply.textContent += decoder.decode(value, { stream: true });
      }
      const seconds = ((performance.now() - started) / 1000).toFixed(1);
      status.textContent = "Done in " + seconds + " s.";
    } catch (error) {
      status.textContent = "Failed: " + error;
    } finally {
      button.disabled = false;
    }
  });
})();
