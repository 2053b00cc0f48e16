"""The stock `anthropic` SDK against Switchyard's /v1/messages.

Usage: python3 anthropic_client.py BASE_URL KEY LIMITED_KEY OTHER_KEY MODEL TOOLS_MODEL
KEY may use every model; LIMITED_KEY is held to 1 request a minute;
OTHER_KEY may use MODEL only. Exits non-zero on the first failed check.
"""

import sys

import anthropic

base_url, key, limited, other, model, tools_model = sys.argv[1:7]
client = anthropic.Anthropic(base_url=base_url, api_key=key, max_retries=0)

# Whole.
reply = client.messages.create(
    model=model, max_tokens=5, system="Be brief.",
    messages=[{"role": "user", "content": "hi"}])
assert reply.type == "message" and reply.role == "assistant", reply
assert reply.content[0].type == "text" and reply.content[0].text == "Hello", reply
assert reply.stop_reason == "end_turn", reply
assert reply.usage.input_tokens == 11 and reply.usage.output_tokens == 2, reply.usage

# Streamed: the SDK checks the events' order as it builds the message.
with client.messages.stream(model=model, max_tokens=5, messages=[{"role": "user", "content": "hi"}]) as stream:
    text = "".join(stream.text_stream)
    final = stream.get_final_message()
assert text == "Hello", text
assert final.stop_reason == "end_turn" and final.usage.output_tokens == 2, final
kinds = []
with client.messages.stream(model=model, max_tokens=5, messages=[{"role": "user", "content": "hi"}]) as stream:
    for event in stream:
        kinds.append(event.type)
order = [k for k in kinds if k in ("message_start", "content_block_start", "content_block_stop", "message_delta", "message_stop")]
assert order == ["message_start", "content_block_start", "content_block_stop", "message_delta", "message_stop"], kinds

# Tools: a call, the result sent back, a streamed call.
tools = [{"name": "get_weather", "description": "Weather in a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
ask = {"role": "user", "content": "Weather in Paris?"}
called = client.messages.create(model=tools_model, max_tokens=50, tools=tools, messages=[ask])
assert called.stop_reason == "tool_use", called
use = [b for b in called.content if b.type == "tool_use"][0]
assert use.name == "get_weather" and use.input == {"city": "Paris"}, use
answer = client.messages.create(model=tools_model, max_tokens=50, tools=tools, messages=[
    ask, {"role": "assistant", "content": called.content},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}])
assert answer.content[0].text == "It is sunny in Paris.", answer
with client.messages.stream(model=tools_model, max_tokens=50, tools=tools, messages=[ask]) as stream:
    final = stream.get_final_message()
streamed_use = [b for b in final.content if b.type == "tool_use"][0]
assert streamed_use.input == {"city": "Paris"} and final.stop_reason == "tool_use", final

# count_tokens.
counted = client.messages.count_tokens(model=model, messages=[{"role": "user", "content": "hi"}])
assert counted.input_tokens > 0, counted

# Errors, in the SDK's classes.
try:
    anthropic.Anthropic(base_url=base_url, api_key="sy_wrong", max_retries=0).messages.create(
        model=model, max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    raise SystemExit("a wrong key was let in")
except anthropic.AuthenticationError as e:
    assert e.status_code == 401 and e.body["type"] == "error", e.body
    assert e.body["error"]["type"] == "authentication_error", e.body
try:
    anthropic.Anthropic(base_url=base_url, api_key=other, max_retries=0).messages.create(
        model=tools_model, max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    raise SystemExit("a model outside the key's list was let in")
except anthropic.PermissionDeniedError as e:
    assert e.body["error"]["type"] == "permission_error", e.body
try:
    client.messages.create(model=model, max_tokens=5, top_k=3, messages=[{"role": "user", "content": "hi"}])
    raise SystemExit("top_k was let through")
except anthropic.BadRequestError as e:
    assert e.body["error"]["type"] == "invalid_request_error" and "top_k" in e.body["error"]["message"], e.body
slow = anthropic.Anthropic(base_url=base_url, api_key=limited, max_retries=0)
slow.messages.create(model=model, max_tokens=5, messages=[{"role": "user", "content": "hi"}])
try:
    slow.messages.create(model=model, max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    raise SystemExit("a second request in the minute was let in")
except anthropic.RateLimitError as e:
    assert e.body["error"]["type"] == "rate_limit_error", e.body
    assert int(e.response.headers["retry-after"]) >= 1

print("ok")
