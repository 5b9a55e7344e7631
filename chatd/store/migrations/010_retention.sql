-- Retention (chatd/retention.py): how far each chat's stream events are pruned, and the
-- indexes that let the other tables be cleaned up without reading them whole.

-- Every event of the chat with seq <= through_seq is gone and none above it: the pruner
-- deletes a prefix of the sequence and moves this in the same statement, so a cursor below
-- it (and only such a cursor) has lost events. A table of its own, not a column of `chats`:
-- pruning never waits on, or rewrites, the row every append updates.
CREATE TABLE chat_events_pruned (
    chat_id      uuid PRIMARY KEY REFERENCES chats (id) ON DELETE CASCADE,
    through_seq  bigint NOT NULL
);

-- Chats pruned by time before this table existed may have gaps: everything up to the
-- highest missing sequence number counts as pruned (all of it, if no event is left).
INSERT INTO chat_events_pruned (chat_id, through_seq)
SELECT c.id, CASE WHEN kept.any THEN kept.gap_through ELSE c.last_event_seq END
FROM chats c
CROSS JOIN LATERAL (
    SELECT count(*) > 0 AS any,
           coalesce(max(e.seq) FILTER (WHERE e.seq > e.prev + 1), 1) - 1 AS gap_through
    FROM (
        SELECT seq, lag(seq, 1, 0::bigint) OVER (ORDER BY seq) AS prev
        FROM chat_events WHERE chat_id = c.id
    ) AS e
) AS kept
WHERE CASE WHEN kept.any THEN kept.gap_through ELSE c.last_event_seq END > 0;

-- Promoted queued messages, staged tool results and start markers are deleted by age.
CREATE INDEX queued_messages_promoted ON queued_messages (promoted_at)
    WHERE promoted_at IS NOT NULL;
CREATE INDEX tool_results_created ON tool_results (created_at);
CREATE INDEX tool_call_starts_started ON tool_call_starts (started_at);
