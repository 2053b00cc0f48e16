"""The stock `openai` client against a running Switchyard.

Usage: python3 openai_client.py BASE_URL API_KEY  (the key's user must be a
member of team `ml`, which owns project `vision`). Exits non-zero on the first
failed check.
"""

import sys

import openai

base_url, api_key = sys.argv[1], sys.argv[2]
MODEL = "SmolLM2-135M-Instruct"
client = openai.OpenAI(base_url=base_url, api_key=api_key, project="ml/vision", max_retries=0)
messages = [{"role": "user", "content": "Say hello."}]

models = client.models.list()
assert [m.id for m in models.data] == [MODEL], models
assert models.data[0].object == "model"

reply = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=5, temperature=0)
choice = reply.choices[0]
assert choice.message.role == "assistant" and choice.message.content, reply
assert choice.finish_reason == "length", reply
usage = reply.usage
assert usage.completion_tokens == 5, usage
assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens, usage

stream = client.chat.completions.create(
    model=MODEL,
    messages=messages,
    max_completion_tokens=5,
    temperature=0,
    stream=True,
    stream_options={"include_usage": True},
)
chunks = list(stream)
assert chunks[0].choices[0].delta.role == "assistant", chunks[0]
assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5, chunks[-1]
assert chunks[-2].choices[0].finish_reason == "length", chunks[-2]
text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
assert text == choice.message.content, (text, choice.message.content)

same = [
    client.chat.completions.create(model=MODEL, messages=messages, max_tokens=6, seed=3).choices[0].message.content
    for _ in range(2)
]
assert same[0] == same[1], same


def expect(error, call):
    try:
        call()
    except error as e:
        assert isinstance(e.body, dict) and e.body.get("message"), e.body
        return
    raise AssertionError(f"expected {error.__name__}")


expect(openai.NotFoundError, lambda: client.chat.completions.create(model="nope", messages=messages))
expect(openai.BadRequestError, lambda: client.chat.completions.create(model=MODEL, messages=messages, n=2))
bad_key = openai.OpenAI(base_url=base_url, api_key="sk-wrong", max_retries=0)
expect(openai.AuthenticationError, lambda: bad_key.models.list())
other = openai.OpenAI(base_url=base_url, api_key=api_key, project="other/team", max_retries=0)
expect(openai.PermissionDeniedError, lambda: other.chat.completions.create(model=MODEL, messages=messages))

print("all checks passed")
