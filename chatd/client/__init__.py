"""The terminal client: `chatd chat` and `chatd chats` over the HTTP API."""
