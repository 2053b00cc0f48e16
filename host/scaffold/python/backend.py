"""A Switchyard model-backend plugin.

It serves one model, named after the plugin, that answers each chat with
the last user message, word by word. Replace `reply` with your engine;
`print()` goes to the host's log.
"""

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.backend import ChatResult, FinishReason, ModelInfo
from wit_world.imports import output
from wit_world.imports.types import PluginError

MODEL = "__PLUGIN_NAME__"


def reply(request) -> str:
    """What the model says: here, the last user message again."""
    users = [m for m in request.messages if m.role == "user"]
    return users[-1].content if users else ""


def words(text: str) -> list[str]:
    """The text in pieces, each word with the space after it."""
    pieces, start = [], 0
    for i, c in enumerate(text):
        if c == " ":
            pieces.append(text[start : i + 1])
            start = i + 1
    if start < len(text):
        pieces.append(text[start:])
    return pieces


class Backend(exports.Backend):
    def list_models(self):
        return [ModelInfo(MODEL, MODEL, 0)]

    def health(self) -> None:
        return None

    def chat(self, request):
        pieces = words(reply(request))
        most = request.max_tokens if request.max_tokens is not None else len(pieces)
        sent = 0
        for piece in pieces[:most]:
            sent += 1
            # False: the client left; stop, and report what was made.
            if not output.emit(piece):
                break
        prompt = sum(len(m.content.split()) + 1 for m in request.messages)
        finish = FinishReason.LENGTH if sent < len(pieces) else FinishReason.STOP
        return ChatResult(finish, prompt, sent, 0, 0, None)

    def forward(self, request):
        # Embeddings, text completions and the Responses API, each body
        # passed whole: this model serves chat only, so it refuses them.
        raise Err(PluginError("unsupported-endpoint", f"{MODEL} serves chat only", None, None))
