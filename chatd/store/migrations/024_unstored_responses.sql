-- `store: false` responses (Open Responses): the turn runs durably like any other, but once
-- it has ended its chat is readable through no API and is deleted soon after.
--
-- `responses.store` false: no public read finds the row (only the connection that made it
-- holds it). `chats.discard_at` set: the native API no longer lists or reads the chat, and
-- the reconciler deletes it (rows cascade) once it is past that time and no turn runs.
ALTER TABLE responses ADD COLUMN store boolean NOT NULL DEFAULT true;
ALTER TABLE chats ADD COLUMN discard_at timestamptz;
CREATE INDEX chats_discard_at ON chats (discard_at) WHERE discard_at IS NOT NULL;

-- Keys the deployment makes for itself (shared by every gateway): `compaction` seals the
-- summaries `POST /v1/responses/compact` returns when no codec key is configured.
CREATE TABLE server_keys (
    name        text PRIMARY KEY,
    key         bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- The owners' watch stream (migration 017) shows no discarded chat: the trigger's function
-- again, with `discard_at IS NULL`.
CREATE OR REPLACE FUNCTION chatd_publish_owner_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    who text;
    next_seq bigint;
BEGIN
    SELECT owner INTO who FROM chats WHERE id = NEW.chat_id AND discard_at IS NULL;
    IF who IS NULL THEN
        RETURN NULL;  -- the chat was deleted in the same transaction, or is discarded
    END IF;
    INSERT INTO owner_event_seqs AS s (owner, last_seq) VALUES (who, 1)
    ON CONFLICT (owner) DO UPDATE SET last_seq = s.last_seq + 1
    RETURNING s.last_seq INTO next_seq;
    INSERT INTO owner_events (owner, seq, chat_id, event, data)
    VALUES (
        who, next_seq, NEW.chat_id, NEW.event,
        NEW.data || CASE WHEN NEW.event = 'subagent'
                         THEN jsonb_build_object('parent_chat_id', NEW.chat_id)
                         ELSE jsonb_build_object('chat_id', NEW.chat_id) END
    );
    PERFORM pg_notify(
        'chatd_owner_events',
        substr(encode(sha256(convert_to(who, 'UTF8')), 'hex'), 1, 32)::uuid::text
    );
    RETURN NULL;
END
$$;
