"""Tool calls and structured output through Switchyard with stock clients:
the `openai` SDK and `langchain-openai`, unchanged.

Usage: python3 tools_client.py BASE_URL API_KEY MODEL  (MODEL is served by an
OpenAI-compatible upstream). Prints "ok"; exits non-zero on the first failed
check.
"""

import json
import sys

import openai
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

base_url, api_key, model = sys.argv[1], sys.argv[2], sys.argv[3]

# The openai SDK: a tool call, the result sent back, a streamed call.
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
tools = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
ask = {"role": "user", "content": "Weather in Paris?"}
reply = client.chat.completions.create(model=model, messages=[ask], tools=tools)
choice = reply.choices[0]
assert choice.finish_reason == "tool_calls", reply
call = choice.message.tool_calls[0]
assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}, call
answer = client.chat.completions.create(model=model, tools=tools, messages=[
    ask, choice.message.model_dump(exclude_none=True),
    {"role": "tool", "tool_call_id": call.id, "content": "sunny"}])
assert answer.choices[0].message.content == "It is sunny in Paris.", answer
stream = client.chat.completions.create(model=model, messages=[ask], tools=tools, stream=True)
arguments, finish = "", None
for chunk in stream:
    for c in chunk.choices:
        for delta in c.delta.tool_calls or []:
            arguments += delta.function.arguments or ""
        finish = c.finish_reason or finish
assert json.loads(arguments) == {"city": "Paris"} and finish == "tool_calls", (arguments, finish)


# LangChain: bind_tools, then with_structured_output.
@tool
def get_weather(city: str) -> str:
    """Weather in a city."""
    return "sunny"


llm = ChatOpenAI(model=model, base_url=base_url, api_key=api_key, max_retries=0)
message = llm.bind_tools([get_weather]).invoke([HumanMessage("Weather in Paris?")])
assert message.tool_calls and message.tool_calls[0]["name"] == "get_weather", message
assert message.tool_calls[0]["args"] == {"city": "Paris"}, message.tool_calls
followed = llm.bind_tools([get_weather]).invoke([
    HumanMessage("Weather in Paris?"), message,
    ToolMessage("sunny", tool_call_id=message.tool_calls[0]["id"])])
assert followed.content == "It is sunny in Paris.", followed


class Person(BaseModel):
    name: str
    age: int


person = llm.with_structured_output(Person).invoke("Who is Ada?")
assert person == Person(name="Ada", age=36), person
print("ok")
