"""A function tool loop with the `openai` SDK on chatd's Open Responses API (`/v1`).

The model asks for a tool; your code runs it and sends the result back; the model answers.
Between the two requests the chat waits durably in chatd (`requires_action`): a worker
crash or a gateway restart in between loses nothing.

Run it against `chatd dev` (the demo model calls `get_weather` because the message says
"weather"):

    CHATD_BASE_URL=http://127.0.0.1:8080 CHATD_API_KEY=$(cat .data/api_key) \
        python examples/openai_function_tools.py
"""

from __future__ import annotations

import json
import os

from openai import OpenAI

BASE_URL = os.environ.get("CHATD_BASE_URL", "http://127.0.0.1:8080")
API_KEY = os.environ["CHATD_API_KEY"]
MODEL = os.environ.get("CHATD_MODEL", "demo/demo")

# A tool the model may call. Your code runs it: chatd never sees its implementation.
TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Today's weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "A city name"}},
            "required": ["city"],
        },
    }
]


def get_weather(city: str) -> str:
    """The tool itself (a real one would call a weather service)."""
    return f"sunny and 22 °C in {city}"


def main() -> None:
    client = OpenAI(base_url=f"{BASE_URL}/v1", api_key=API_KEY)

    # 1. Ask. The response ends `completed` with `function_call` items when the model wants
    #    tools; in chatd the chat now waits for their results.
    response = client.responses.create(
        model=MODEL, input="What's the weather in Lisbon?", tools=TOOLS
    )
    print(
        "response",
        response.id,
        "in chat",
        response.conversation.id if response.conversation else "?",
    )

    for _round in range(5):  # a real model may ask several times; bound the loop
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            break
        # 2. Run each call and send its output back, continuing the same chat.
        outputs = []
        for call in calls:
            args = json.loads(call.arguments)
            print(f"  the model calls {call.name}({args})")
            assert call.name == "get_weather", f"unexpected tool {call.name}"
            outputs.append(
                {
                    "type": "function_call_output",
                    "call_id": call.call_id,
                    "output": get_weather(**args),
                }
            )
        response = client.responses.create(
            model=MODEL, previous_response_id=response.id, input=outputs, tools=TOOLS
        )

    # 3. The final answer uses the tool's output.
    print("answer:", response.output_text)
    assert response.status == "completed", response.status
    assert "sunny and 22 °C" in response.output_text, "the answer should quote the tool's output"
    # Both responses are one chat: the second continued the first.
    assert response.previous_response_id is not None
    print("OK")


if __name__ == "__main__":
    main()
