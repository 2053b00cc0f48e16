"""The stock `openai` client against Switchyard's gateway features.

Usage: python3 gateway_client.py BASE_URL LIMITED_KEY MODEL ROUTE
LIMITED_KEY may use MODEL and ROUTE only, at 2 requests a minute. Exits
non-zero on the first failed check.
"""

import sys

import openai

base_url, key, model, route = sys.argv[1:5]
client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
messages = [{"role": "user", "content": "hi"}]

assert sorted(m.id for m in client.models.list().data) == sorted([model, route])

raw = client.chat.completions.with_raw_response.create(model=model, messages=messages, max_tokens=5)
assert raw.headers["x-ratelimit-limit-requests"] == "2", raw.headers
assert raw.headers["x-ratelimit-remaining-requests"] == "1", raw.headers
assert raw.headers["x-ratelimit-reset-requests"].endswith("s"), raw.headers
assert raw.parse().choices[0].message.content == "Hello"

stream = client.chat.completions.with_raw_response.create(
    model=route, messages=messages, max_tokens=5, stream=True
)
assert stream.headers["x-switchyard-deployment"] == "west", stream.headers
assert stream.headers["x-ratelimit-remaining-requests"] == "0", stream.headers
text = "".join(c.choices[0].delta.content or "" for c in stream.parse() if c.choices)
assert text == "Hello", text

try:
    client.chat.completions.create(model=model, messages=messages, max_tokens=5)
    raise SystemExit("a third request in the minute was let in")
except openai.RateLimitError as e:
    assert e.status_code == 429
    assert e.body["type"] == "rate_limit_exceeded", e.body
    assert int(e.response.headers["retry-after"]) >= 1

try:
    client.chat.completions.create(model="fake-tools", messages=messages)
    raise SystemExit("a model outside the key's list was let in")
except openai.PermissionDeniedError as e:
    assert e.body["param"] == "model", e.body

print("ok")
