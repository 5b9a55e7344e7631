-- `conversation_prefixes`: where a conversation a client keeps itself continues. A client
-- that sends its whole conversation with every request (no `previous_response_id`) is
-- matched to the chat holding its longest known prefix, by a rolling digest over the
-- conversation's items (`api.open_responses.prefixes`), so only the new items are written.
-- One row per response: the digest of the conversation up to and including its input.
-- Two conversations may share a prefix (both begin "hi"): each keeps its row, and a match
-- is checked against the response's output before it is taken.
CREATE TABLE conversation_prefixes (
    owner        text NOT NULL,
    digest       bytea NOT NULL,
    response_id  text NOT NULL,
    chat_id      uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    items        integer NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner, digest, response_id)
);
CREATE INDEX conversation_prefixes_chat ON conversation_prefixes (chat_id);
