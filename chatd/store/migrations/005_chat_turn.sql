-- The turn a chat is in, set when a turn begins: a turn's finish applies only while the
-- chat is still in it (checked on the newest row, under its lock). NULL for chats whose
-- turn began before this column existed; their finish falls back to the queue check.
ALTER TABLE chats ADD COLUMN turn_id text;
