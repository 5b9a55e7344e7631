-- Compaction threshold per chat (fraction of the model's context limit).
ALTER TABLE chats ADD COLUMN compaction_threshold double precision NOT NULL DEFAULT 0.7;
