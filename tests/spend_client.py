"""The stock `openai` client against Switchyard's USD budgets.

Usage: python3 spend_client.py BASE_URL KEY MODEL
KEY has a budget of $0.08 a day; MODEL costs about $0.021 an answer and is
admitted against $0.043 (its prompt at one token a byte, and max_tokens). Exits non-zero on the
first failed check.
"""

import sys
import time

import openai

base_url, key, model = sys.argv[1:4]
client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
messages = [{"role": "user", "content": "hi"}]

for _ in range(2):
    raw = client.chat.completions.with_raw_response.create(model=model, messages=messages, max_tokens=5)
    assert raw.headers["x-ratelimit-limit-usd"] == "0.08", raw.headers
    left = float(raw.headers["x-ratelimit-remaining-usd"])
    assert 0 <= left < 0.08, raw.headers
    assert raw.parse().choices[0].message.content == "Hello"
    # Settled costs are written each second.
    time.sleep(1.3)

try:
    client.chat.completions.create(model=model, messages=messages, max_tokens=5)
    raise SystemExit("a request past the USD budget was let in")
except openai.RateLimitError as e:
    assert e.status_code == 429
    assert e.body["type"] == "insufficient_quota", e.body
    assert e.body["code"] == "insufficient_quota", e.body
    assert "$0.08 per day (UTC)" in e.body["message"], e.body
    assert "renews at 00:00 UTC" in e.body["message"], e.body
    assert int(e.response.headers["retry-after"]) >= 1

print("ok")
