-- Tool results are staged per call within its turn and step, not per chat: a server that
-- omits or reuses call ids ("call_0" in every response) makes a new call each time, and an
-- earlier call's result must not answer it.
ALTER TABLE tool_results ADD COLUMN turn_id text NOT NULL DEFAULT '';
ALTER TABLE tool_results ADD COLUMN step integer NOT NULL DEFAULT -1;

-- Results staged before this migration (a turn waiting in requires_action, say) stay
-- readable: each belongs to the newest assistant step that made its call.
UPDATE tool_results r SET turn_id = s.turn_id, step = s.step
FROM (
    SELECT DISTINCT ON (r2.chat_id, r2.tool_call_id)
           r2.chat_id, r2.tool_call_id, m.turn_id,
           coalesce(substring(m.step_key FROM ':(\d+):assistant$')::integer, -1) AS step
    FROM tool_results r2
    JOIN messages m ON m.chat_id = r2.chat_id AND m.role = 'assistant'
     AND m.parts @> jsonb_build_array(
             jsonb_build_object('type', 'tool_call', 'id', r2.tool_call_id))
    ORDER BY r2.chat_id, r2.tool_call_id, m.id DESC
) AS s
WHERE r.chat_id = s.chat_id AND r.tool_call_id = s.tool_call_id;

ALTER TABLE tool_results ALTER COLUMN turn_id DROP DEFAULT;
ALTER TABLE tool_results ALTER COLUMN step DROP DEFAULT;
ALTER TABLE tool_results DROP CONSTRAINT tool_results_pkey;
ALTER TABLE tool_results ADD PRIMARY KEY (chat_id, turn_id, step, tool_call_id);

-- A built-in call about to run, written just before the tool starts: a retried activity
-- that finds its own earlier attempt here knows the tool may have run (a non-idempotent one
-- is then not run again); one that finds nothing knows it never started.
CREATE TABLE tool_call_starts (
    chat_id       uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    turn_id       text NOT NULL,
    step          integer NOT NULL,
    tool_call_id  text NOT NULL,
    activity_id   text NOT NULL,
    attempt       integer NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (chat_id, turn_id, step, tool_call_id)
);
