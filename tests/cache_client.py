"""The stock `openai` client against Switchyard's response cache.

Usage: python3 cache_client.py BASE_URL KEY MODEL UNCACHED_ROUTE
MODEL is cached; UNCACHED_ROUTE is a route with `cache = false`. Five
answers come from the cache, seven from the upstream (six chats, one
embedding), and one from the uncached route. Exits non-zero on the first
failed check.
"""

import sys

import openai

base_url, key, model, uncached = sys.argv[1:5]
client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
chat = client.chat.completions.with_raw_response
hits = 0


def ask(expect, **kwargs):
    global hits
    raw = chat.create(model=kwargs.pop("model", model), max_tokens=5, **kwargs)
    assert raw.headers.get("x-switchyard-cache") == expect, (expect, kwargs, raw.headers)
    hits += expect == "hit"
    return raw


messages = [{"role": "user", "content": "cache me"}]
first = ask("miss", messages=messages).parse()
again = ask("hit", messages=messages).parse()
assert again.choices[0].message.content == first.choices[0].message.content == "Hello"
assert again.usage.total_tokens == first.usage.total_tokens, (again.usage, first.usage)

# A stream is kept as the same stream; include_usage does not change the key.
def streamed(expect, **kwargs):
    raw = ask(expect, messages=messages, stream=True, **kwargs)
    chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, len([c for c in chunks if c.choices])

missed = streamed("miss")
assert missed[0] == "Hello", missed
assert streamed("hit", stream_options={"include_usage": True}) == missed

# What changes the answer changes the key; what does not, does not.
ask("miss", messages=messages, temperature=0.3)
ask("hit", messages=messages, temperature=0.3, user="someone-else")
# no-cache asks the upstream again (and keeps its answer); no-store keeps nothing.
ask("miss", messages=messages, extra_headers={"Cache-Control": "no-cache"})
other = [{"role": "user", "content": "do not keep"}]
ask("miss", messages=other, extra_headers={"Cache-Control": "no-store"})
ask("miss", messages=other)
ask("hit", messages=other)

# A route that is never cached says nothing of the cache.
raw = chat.create(model=uncached, messages=messages, max_tokens=5)
assert "x-switchyard-cache" not in raw.headers, raw.headers

# Embeddings are cached too.
emb = client.embeddings.with_raw_response
assert emb.create(model=model, input="vector").headers["x-switchyard-cache"] == "miss"
hit = emb.create(model=model, input="vector")
assert hit.headers["x-switchyard-cache"] == "hit"
assert len(hit.parse().data[0].embedding) > 0
hits += 1

assert hits == 5, hits
print("ok")
