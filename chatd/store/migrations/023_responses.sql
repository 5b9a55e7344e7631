-- Open Responses (`/v1/responses`): a response is the part of a chat's turn between two
-- inputs from the client (a user message, or the results of its function calls). Its output
-- is read from the transcript and its stream from the chat's events; this row holds what the
-- request asked for and how the response ended.
CREATE TABLE responses (
    id                    text PRIMARY KEY,
    chat_id               uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    owner                 text NOT NULL,
    turn_id               text NOT NULL,
    after_message_id      bigint,
    after_event_seq       bigint NOT NULL,
    previous_response_id  text,
    request               jsonb NOT NULL,
    input_items           jsonb NOT NULL,
    answered_call_ids     jsonb NOT NULL DEFAULT '[]',
    idempotency_key       text,
    request_digest        text,
    created_at            timestamptz NOT NULL DEFAULT now(),
    cancel_requested_at   timestamptz,
    ended_at              timestamptz,
    ended_status          text,
    ended_error           jsonb,
    deleted_at            timestamptz,
    UNIQUE (owner, idempotency_key)
);
CREATE INDEX responses_chat ON responses (chat_id, created_at, id);

-- A response ends when its turn stops running (it waits for the client, or the turn ended):
-- recorded in the statement that changes the chat's status, so it can't be missed.
CREATE FUNCTION chatd_end_responses() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE responses
       SET ended_at = now(),
           ended_status = NEW.status,
           ended_error = CASE WHEN NEW.status = 'error' THEN NEW.last_error END
     WHERE chat_id = NEW.id AND turn_id = OLD.turn_id AND ended_at IS NULL;
    RETURN NULL;
END $$;

CREATE TRIGGER chats_end_responses AFTER UPDATE OF status ON chats
    FOR EACH ROW WHEN (OLD.status = 'running' AND NEW.status <> 'running')
    EXECUTE FUNCTION chatd_end_responses();
