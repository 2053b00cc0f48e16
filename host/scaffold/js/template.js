// A Switchyard payload-template plugin.
//
// Each `${name}` in the template becomes that variable's value as JSON (a
// string keeps its quotes), and the result must be JSON. Change `render` to
// build any payload you like; `console.log` goes to the host's log.

const VARIABLE = /\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g;

// The byte offset the host expects for a UTF-16 index.
const offset = (text, index) => new TextEncoder().encode(text.slice(0, index)).length;

// A plugin error: thrown, it becomes the call's `err`.
const pluginError = (code, message, position) => ({ code, message, position });

export const template = {
  validate(text, known) {
    const used = [];
    for (const match of text.matchAll(VARIABLE)) {
      const name = match[1];
      if (!known.includes(name)) {
        throw pluginError(
          "unknown-variable",
          `unknown variable \${${name}}; use one of: ${[...known].sort().join(", ")}`,
          offset(text, match.index),
        );
      }
      used.push(name);
    }
    return used;
  },

  render(text, variables) {
    const values = new Map(variables.map((v) => [v.name, v.value]));
    const rendered = text.replace(VARIABLE, (_, name) => values.get(name) ?? "null");
    try {
      JSON.parse(rendered);
    } catch (e) {
      throw pluginError("invalid-json", `the rendered payload is not JSON: ${e.message}`, undefined);
    }
    return rendered;
  },
};
