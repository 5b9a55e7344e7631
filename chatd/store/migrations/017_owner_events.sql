-- The owner's watch stream (issue 16, `GET /api/v1/stream`): every chat's `status`, `chat`,
-- `error` and `subagent` events again, numbered on one sequence per owner, so a client
-- watching all of an owner's chats resumes exactly once with one cursor.

-- The owner's last number. Taken under this row's lock, which is held to commit: a number is
-- visible before the next is given out, so a reader past it never skips a later commit.
CREATE TABLE owner_event_seqs (
    owner     text PRIMARY KEY,
    last_seq  bigint NOT NULL
);

-- `chat_id` is the chat whose stream had the event. No foreign key: checking one would lock
-- the chat's row after the owner's (see the lock order below). `created_at` is taken under
-- the owner's lock, so it grows with `seq` and retention deletes a prefix by time.
CREATE TABLE owner_events (
    owner       text NOT NULL,
    seq         bigint NOT NULL,
    chat_id     uuid NOT NULL,
    event       text NOT NULL,
    data        jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (owner, seq)
);

-- As `chat_events_pruned` (migration 010) for chats: every event of the owner with
-- seq <= through_seq is gone and none above it. Not a column of `owner_event_seqs`, so
-- pruning never waits on the row every commit with such an event locks.
CREATE TABLE owner_events_pruned (
    owner        text PRIMARY KEY,
    through_seq  bigint NOT NULL
);

-- Copy one chat event to its owner's stream and notify `owner_events.NOTIFY_CHANNEL` with
-- the owner's key (`owner_events.owner_key`: a hash as a uuid, whatever the owner's length).
-- The data names the chat: `chat_id` is added; a `subagent` event already names the child
-- there, so it gains `parent_chat_id` instead. Identical payloads in one transaction are
-- sent once, so a transaction wakes the owner's streams once.
CREATE FUNCTION chatd_publish_owner_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    who text;
    next_seq bigint;
BEGIN
    SELECT owner INTO who FROM chats WHERE id = NEW.chat_id;
    IF who IS NULL THEN
        RETURN NULL;  -- the chat was deleted in the same transaction
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

-- Lock order (migration 016): the owner's row is locked last, after every chat row the
-- transaction locks. A deferred trigger runs at commit, when the transaction has taken all
-- of its chat rows. An immediate one would take the owner's row where the transaction
-- publishes: one that published on a chat and then locked another would hold it while
-- waiting for a writer of that other chat, which waits for it. Its WHEN is checked as each
-- row is inserted, so a delta costs no more than that.
CREATE CONSTRAINT TRIGGER chat_events_to_owner AFTER INSERT ON chat_events
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.event IN ('status', 'chat', 'error', 'subagent'))
    EXECUTE FUNCTION chatd_publish_owner_event();
