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
