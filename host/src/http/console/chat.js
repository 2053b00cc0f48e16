// The chat page's one script: sends the form to /chat/stream, shows the
// reply as its tokens arrive, keeps the conversation in the form's hidden
// field, and stops a reply on request (the host stops generating when the
// stream is dropped). Without it the form posts to /chat and the whole
// reply comes back in the page.
"use strict";
(function () {
  const form = document.getElementById("chat-form");
  if (!form || !window.fetch || !window.TextDecoder || !window.AbortController) return;
  const list = document.getElementById("conversation");
  const field = document.getElementById("conversation-field");
  const message = document.getElementById("message");
  const status = document.getElementById("chat-status");
  const send = form.querySelector("button[type=submit]");
  const stop = document.getElementById("chat-stop");
  let running = null;

  // Adds a turn to the list; returns its text element.
  function addTurn(role, text) {
    const empty = document.getElementById("no-turns");
    if (empty) empty.remove();
    const item = document.createElement("li");
    item.className = "turn " + role;
    const who = document.createElement("span");
    who.className = "who";
    who.textContent = role === "user" ? "You" : "Reply";
    const pre = document.createElement("pre");
    pre.textContent = text;
    item.append(who, pre);
    list.append(item);
    return pre;
  }

  stop.addEventListener("click", function () {
    if (running) running.abort();
  });

  form.addEventListener("submit", async function (event) {
    event.preventDefault();
    const old = document.getElementById("chat-error");
    if (old) old.remove();
    const asked = message.value;
    const body = new URLSearchParams(new FormData(form));
    const turns = JSON.parse(field.value || "[]");
    addTurn("user", asked);
    const previous = document.getElementById("reply");
    if (previous) previous.removeAttribute("id");
    const reply = addTurn("assistant", "");
    reply.id = "reply";
    message.value = "";
    status.textContent = "Generating…";
    send.disabled = true;
    stop.hidden = false;
    running = new AbortController();
    const started = performance.now();
    let ended = null;
    try {
      const response = await fetch(form.dataset.stream, {
        method: "POST",
        body: body,
        credentials: "same-origin",
        signal: running.signal,
      });
      if (!response.ok) {
        let why = "HTTP " + response.status;
        try {
          why = (await response.json()).error.message;
        } catch (_) {}
        ended = "Failed: " + why;
        // Nothing was said: the message goes back to be sent again.
        reply.parentElement.remove();
        list.lastElementChild.remove();
        message.value = asked;
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
      ended = "Done in " + seconds + " s.";
    } catch (error) {
      ended = error.name === "AbortError" ? "Stopped." : "Failed: " + error;
    } finally {
      // What was said stays in the conversation, a stopped reply included.
      if (reply.isConnected) {
        turns.push({ role: "user", content: asked }, { role: "assistant", content: reply.textContent });
        field.value = JSON.stringify(turns);
      }
      status.textContent = ended;
      running = null;
      stop.hidden = true;
      send.disabled = false;
    }
  });
})();
