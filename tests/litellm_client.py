"""litellm's SDK pointed at Switchyard, as a LiteLLM user would point it at
any OpenAI-compatible server: chat, streaming and embeddings.

Usage: python3 litellm_client.py BASE_URL KEY MODEL
KEY may make 3 requests a minute. Exits non-zero on the first failed check.
"""

import os
import sys

# No fetch of the model cost map from the internet at import.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import litellm  # noqa: E402

base_url, key, model = sys.argv[1:4]
common = dict(model=f"openai/{model}", api_base=base_url, api_key=key, max_retries=0)
messages = [{"role": "user", "content": "hi"}]

reply = litellm.completion(messages=messages, max_tokens=5, **common)
assert reply.choices[0].message.content == "Hello", reply
assert reply.usage.total_tokens == 13, reply.usage

stream = litellm.completion(messages=messages, max_tokens=5, stream=True, **common)
text = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
assert text == "Hello", text

# Embeddings, the third request of the minute; then one over the key's limit.
embedded = litellm.embedding(input=["a", "b"], **common)
vectors = [d["embedding"] for d in embedded.data]
assert vectors == [[0.25, -0.5, 1.0]] * 2, embedded
assert embedded.usage.prompt_tokens == 8, embedded.usage
try:
    litellm.completion(messages=messages, max_tokens=5, **common)
    raise SystemExit("a fourth request in the minute was let in")
except litellm.RateLimitError as e:
    assert "3 requests per minute" in str(e), e

print("ok")
