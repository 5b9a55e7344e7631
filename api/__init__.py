"""The HTTP gateway: REST + SSE over the chat store and Temporal."""
