"""A Switchyard payload-template plugin.

Each `${name}` in the template becomes that variable's value as JSON (a
string keeps its quotes), and the result must be JSON. Change `render` to
build any payload you like; `print()` goes to the host's log.
"""

import json
import re

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports.types import PluginError

VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def offset(text: str, index: int) -> int:
    """The byte offset the host expects for a character index."""
    return len(text[:index].encode())


class Template(exports.Template):
    def validate(self, template: str, known: list[str]) -> list[str]:
        used = []
        for match in VARIABLE.finditer(template):
            name = match.group(1)
            if name not in known:
                raise Err(
                    PluginError(
                        "unknown-variable",
                        f"unknown variable ${{{name}}}; use one of: {', '.join(sorted(known))}",
                        offset(template, match.start()),
                    )
                )
            used.append(name)
        return used

    def render(self, template: str, variables) -> str:
        values = {v.name: v.value for v in variables}
        rendered = VARIABLE.sub(lambda m: values.get(m.group(1), "null"), template)
        try:
            json.loads(rendered)
        except ValueError as e:
            raise Err(PluginError("invalid-json", f"the rendered payload is not JSON: {e}", None))
        return rendered
