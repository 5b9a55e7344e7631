-- Streams one key holds on one chat: each event of a chat is written to every stream of it,
-- so many streams of one busy chat multiply the gateway's work for a single tenant.
ALTER TABLE owner_limits ADD COLUMN streams_per_chat integer CHECK (streams_per_chat >= 0);
ALTER TABLE stream_leases ADD COLUMN chat_id uuid;
