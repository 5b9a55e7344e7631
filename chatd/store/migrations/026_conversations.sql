-- Conversations (`/v1/conversations`): a conversation is a chat, and its items are the
-- chat's transcript. Two things the transcript doesn't hold need rows of their own.
--
-- `conversation_metadata`: the client's key-value pairs (a chat without a row has none).
CREATE TABLE conversation_metadata (
    chat_id   uuid PRIMARY KEY REFERENCES chats (id) ON DELETE CASCADE,
    metadata  jsonb NOT NULL DEFAULT '{}'
);

-- `removed_parts`: the parts a client deleted from a message (as conversation items), by
-- their index in the message as it was first stored. The message's `parts` no longer hold
-- them (the model no longer sees them); these rows keep the ids of the parts after them,
-- `<kind>_<message id>_<original index>`, what they were.
CREATE TABLE removed_parts (
    message_id  bigint NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    part_index  integer NOT NULL,
    PRIMARY KEY (message_id, part_index)
);
