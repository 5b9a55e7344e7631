-- The reconciler finds messages stored but never handed to a workflow (their gateway died
-- before the hand-over): this index reads the waiting ones, oldest first, without the taken.
CREATE INDEX queued_messages_unpromoted ON queued_messages (created_at, id)
    WHERE promoted_at IS NULL;
