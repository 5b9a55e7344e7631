"""Open Responses (OpenAI's Responses API as an open specification) at `/v1`."""
