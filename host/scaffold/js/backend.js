// A Switchyard model-backend plugin.
//
// It serves one model, named after the plugin, that answers each chat with
// the last user message, word by word. Replace `reply` with your engine;
// `console.log` goes to the host's log.

import { emit } from "switchyard:plugin/output@0.4.0";

const MODEL = "__PLUGIN_NAME__";

// What the model says: here, the last user message again.
const reply = (request) => {
  const users = request.messages.filter((m) => m.role === "user");
  return users.length ? users[users.length - 1].content : "";
};

// The text in pieces, each word with the space after it.
const words = (text) => text.match(/[^ ]+ ?| /g) ?? [];

export const backend = {
  listModels() {
    return [{ id: MODEL, ownedBy: MODEL, created: 0n }];
  },

  health() {},

  chat(request) {
    const pieces = words(reply(request));
    const most = request.maxTokens ?? pieces.length;
    let sent = 0;
    for (const piece of pieces.slice(0, most)) {
      sent += 1;
      // False: the client left; stop, and report what was made.
      if (!emit(piece)) break;
    }
    const prompt = request.messages.reduce((n, m) => n + m.content.split(/\s+/).filter(Boolean).length + 1, 0);
    return {
      finishReason: sent < pieces.length ? "length" : "stop",
      promptTokens: prompt,
      completionTokens: sent,
      cachedTokens: 0,
      cacheWriteTokens: 0,
      choices: undefined,
    };
  },

  forward(request) {
    // Embeddings, text completions and the Responses API, each body passed
    // whole: this model serves chat only, so it refuses them.
    throw { code: "unsupported-endpoint", message: `${MODEL} serves chat only`, position: undefined, status: undefined };
  },
};
