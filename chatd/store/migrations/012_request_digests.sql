-- A retried request carries the same Idempotency-Key and the same body: the digest of the
-- body tells a retry (answered as the first time) from a key reused for another request.
ALTER TABLE queued_messages ADD COLUMN request_digest text;

-- POST /chats with an Idempotency-Key: the chat id it was given, claimed before the chat is
-- inserted (a create that crashed in between is finished by its retry).
CREATE TABLE chat_creations (
    owner            text NOT NULL,
    idempotency_key  text NOT NULL,
    request_digest   text NOT NULL,
    chat_id          uuid NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner, idempotency_key)
);
CREATE INDEX chat_creations_created ON chat_creations (created_at);
