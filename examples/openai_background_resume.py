"""A background response whose stream is dropped and resumed, with the `openai` SDK.

`background=True` answers at once (status `queued`) while the turn runs durably in chatd.
Its events can be read at any time with `GET /v1/responses/{id}?stream=true`, and every
event has a `sequence_number`, the same on every read: after a disconnect, ask for the
events `starting_after` the last one you saw and you get each remaining event exactly once.

    CHATD_BASE_URL=http://127.0.0.1:8080 CHATD_API_KEY=$(cat .data/api_key) \
        python examples/openai_background_resume.py
"""

from __future__ import annotations

import os

from openai import OpenAI

BASE_URL = os.environ.get("CHATD_BASE_URL", "http://127.0.0.1:8080")
API_KEY = os.environ["CHATD_API_KEY"]
MODEL = os.environ.get("CHATD_MODEL", "demo/demo")

READ_BEFORE_DROP = 6
"""How many events to read before pretending the connection dropped."""


def main() -> None:
    client = OpenAI(base_url=f"{BASE_URL}/v1", api_key=API_KEY)

    # 1. Start it in the background: the POST returns before the model has said anything.
    response = client.responses.create(
        model=MODEL, input="Tell me something about durable workflows.", background=True
    )
    print("created", response.id, "status", response.status)
    assert response.status in ("queued", "in_progress"), response.status

    # 2. Read its stream from the start, and drop the connection after a few events.
    seen: list[int] = []
    text = ""
    stream = client.responses.retrieve(response.id, stream=True)
    for event in stream:
        seen.append(event.sequence_number)
        if event.type == "response.output_text.delta":
            text += event.delta
        if len(seen) == READ_BEFORE_DROP:
            break
    stream.close()  # the "disconnect": a real client would lose its network here
    last = seen[-1]
    print(f"read {len(seen)} events, dropped the stream after sequence number {last}")

    # 3. Resume after the last event seen. The turn went on meanwhile; nothing is lost or
    #    repeated.
    final_status = None
    for event in client.responses.retrieve(response.id, stream=True, starting_after=last):
        assert event.sequence_number == seen[-1] + 1, (
            f"expected event {seen[-1] + 1}, got {event.sequence_number}"
        )
        seen.append(event.sequence_number)
        if event.type == "response.output_text.delta":
            text += event.delta
        if event.type in ("response.completed", "response.failed", "response.incomplete"):
            final_status = event.response.status
    print(f"resumed: {len(seen)} events in all, ended {final_status}")

    # 4. The text put together from the two streams is the stored answer.
    stored = client.responses.retrieve(response.id)
    print("answer:", stored.output_text)
    assert final_status == "completed", final_status
    assert seen == list(range(seen[0], seen[0] + len(seen))), "events must be contiguous"
    assert text == stored.output_text, "the streamed text must equal the stored answer"
    assert stored.output_text.startswith("[demo model]") or MODEL != "demo/demo"
    print("OK")


if __name__ == "__main__":
    main()
