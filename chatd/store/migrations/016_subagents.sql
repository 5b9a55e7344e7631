-- Subagents and model fallback (issue 15): a chat may be a child of another (a subagent,
-- with its own turns), may spawn children (`subagents`), and may list models to fall back on.

ALTER TABLE chats ADD COLUMN parent_chat_id uuid REFERENCES chats (id) ON DELETE CASCADE;
-- A root is 0, its child 1: the depth limit reads it without walking the ancestry.
ALTER TABLE chats ADD COLUMN depth integer NOT NULL DEFAULT 0;
ALTER TABLE chats ADD COLUMN subagents boolean NOT NULL DEFAULT false;
-- A list of `ModelConfig`s, at most 3 (the API checks the count).
ALTER TABLE chats ADD COLUMN fallback_models jsonb NOT NULL DEFAULT '[]';

-- A chat's children in spawn order (`ChatStore.children`, the usage of descendants).
CREATE INDEX chats_parent ON chats (parent_chat_id, created_at, id)
    WHERE parent_chat_id IS NOT NULL;
-- `GET /chats` lists root chats unless asked for children: the page reads this index alone.
CREATE INDEX chats_owner_roots ON chats (owner, created_at DESC, id DESC)
    WHERE parent_chat_id IS NULL;

-- A child's spawn, and each change of its status or title, as a `subagent` event on its
-- parent's stream, so a UI shows the children without a stream per child. A trigger, so
-- every statement that changes a child publishes it, in its own transaction.
--
-- Lock order: the statement holds the child's row; appending to the parent locks the
-- parent's row (`chatd_append_events` bumps its `last_event_seq`). So every transaction
-- that locks several chats' rows must lock descendants before ancestors, or two could wait
-- on each other. Writers of one chat lock its row only (and, through this trigger, its
-- parent's: the parent's update sets only `last_event_seq`, which fires nothing further);
-- a batch of several chats' events must lock deeper chats first (`depth` DESC, then id).
CREATE FUNCTION chatd_publish_subagent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM chatd_append_events(
        NEW.parent_chat_id,
        ARRAY['subagent'],
        ARRAY[jsonb_build_object('chat_id', NEW.id, 'status', NEW.status, 'title', NEW.title)]
    );
    RETURN NULL;
END
$$;

CREATE TRIGGER chats_subagent_spawned AFTER INSERT ON chats
    FOR EACH ROW WHEN (NEW.parent_chat_id IS NOT NULL)
    EXECUTE FUNCTION chatd_publish_subagent();

CREATE TRIGGER chats_subagent_changed AFTER UPDATE OF status, title ON chats
    FOR EACH ROW WHEN (
        NEW.parent_chat_id IS NOT NULL
        AND (OLD.status IS DISTINCT FROM NEW.status OR OLD.title IS DISTINCT FROM NEW.title)
    )
    EXECUTE FUNCTION chatd_publish_subagent();
