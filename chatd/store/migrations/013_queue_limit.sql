-- Messages waiting behind a chat's running turn, per chat: each is a workflow update and,
-- later, a turn, so a flood of sends to one busy chat is refused once this many wait.
ALTER TABLE owner_limits ADD COLUMN queued_messages integer CHECK (queued_messages >= 0);
