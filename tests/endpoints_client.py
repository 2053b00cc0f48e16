"""The stock `openai` client against Switchyard's endpoints besides chat:
passed through to an upstream that embeds, completes and responds, or
(with `embedded`) served by the embedded model through chat.

Usage: python3 endpoints_client.py BASE_URL KEY MODEL [embedded]
Exits non-zero on the first failed check.
"""

import sys

import openai

base_url, key, model = sys.argv[1:4]
client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)


def embedded_model():
    try:
        client.embeddings.create(model=model, input="a")
        raise SystemExit("the embedded model embedded")
    except openai.BadRequestError as e:
        assert e.body["param"] == "model" and "does not embed" in e.message, e.body
    # A prompt no answer ends within 3 tokens: the cap, not the model, ends it.
    long = "Write a long story about the colour blue."
    completion = client.completions.create(model=model, prompt=long, max_tokens=3)
    assert completion.choices[0].text and completion.usage.completion_tokens == 3, completion
    pieces = client.completions.create(model=model, prompt=long, max_tokens=3, stream=True)
    assert "".join(c.choices[0].text for c in pieces if c.choices), "no text streamed"
    # Cut at 3 tokens, the stream ends as OpenAI's does: `response.incomplete`
    # (which the SDK's `responses.stream` helper does not take for an end).
    events = list(client.responses.create(model=model, input=long, max_output_tokens=3, stream=True))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    last = events[-1]
    assert last.type == "response.incomplete", [e.type for e in events]
    assert last.response.output_text == text and text, last.response
    assert last.response.incomplete_details.reason == "max_output_tokens", last.response
    try:
        client.responses.create(model=model, input="Hi", tools=[{"type": "web_search"}])
        raise SystemExit("the embedded model took tools")
    except openai.BadRequestError as e:
        assert e.body["param"] == "tools", e.body
    print("ok")
    sys.exit(0)


if sys.argv[4:] == ["embedded"]:
    embedded_model()

# The SDK asks for base64 unless told otherwise, and decodes it.
embedded = client.embeddings.create(model=model, input=["a", "b"])
assert [d.embedding for d in embedded.data] == [[0.25, -0.5, 1.0]] * 2, embedded
assert embedded.usage.prompt_tokens == 8, embedded.usage
floats = client.embeddings.create(model=model, input="a", encoding_format="float")
assert floats.data[0].embedding == [0.25, -0.5, 1.0], floats

completion = client.completions.create(model=model, prompt="Hello", max_tokens=3)
assert completion.choices[0].text == " world", completion
assert completion.usage.total_tokens == 7, completion.usage
stream = client.completions.create(
    model=model, prompt="Hello", stream=True, stream_options={"include_usage": True}
)
chunks = list(stream)
assert "".join(c.choices[0].text for c in chunks if c.choices) == " world", chunks
assert chunks[-1].usage.total_tokens == 7, chunks[-1]

raw = client.responses.with_raw_response.create(model=model, input="Hi")
assert raw.headers["content-type"].startswith("application/json"), raw.headers
response = raw.parse()
assert response.output_text == "Hi there", response
assert response.usage.input_tokens == 9, response.usage

kinds = []
text = ""
for event in client.responses.create(model=model, input="Hi", stream=True):
    kinds.append(event.type)
    if event.type == "response.output_text.delta":
        text += event.delta
assert text == "Hi there", text
assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds

# The SDK's streaming helper, which checks the events fit together.
with client.responses.stream(model=model, input="Hi") as events:
    final = events.get_final_response()
assert final.output_text == "Hi there", final

try:
    client.embeddings.create(model=model, input="too long")
    raise SystemExit("an input the upstream refused was let through")
except openai.BadRequestError as e:
    assert "input is too long" in e.message, e.message

print("ok")
