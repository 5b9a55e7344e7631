-- Quotas: the limits every gateway enforces, the usage they are checked against, and the
-- open streams each key holds.

-- Limits per owner. The row of owner '*' holds the defaults; in any row, NULL means "the
-- default" (for the '*' row: the built-in default, `chatd.store.quotas.BUILT_IN_LIMITS`).
CREATE TABLE owner_limits (
    owner                  text PRIMARY KEY,
    requests_per_s         double precision CHECK (requests_per_s > 0),
    request_burst          integer CHECK (request_burst > 0),
    running_turns          integer CHECK (running_turns >= 0),
    streams                integer CHECK (streams >= 0),
    input_tokens_per_day   bigint CHECK (input_tokens_per_day >= 0),
    output_tokens_per_day  bigint CHECK (output_tokens_per_day >= 0),
    updated_at             timestamptz NOT NULL DEFAULT now()
);

-- Tokens used per owner and UTC day, counted as model steps are recorded. A counter, not a
-- sum over `messages`: an edit deletes messages, and that must not give tokens back.
CREATE TABLE owner_daily_usage (
    owner          text NOT NULL,
    day            date NOT NULL,
    input_tokens   bigint NOT NULL DEFAULT 0,
    output_tokens  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (owner, day)
);

-- Counts each recorded step once: a step written again (same step key) inserts no row, so
-- the trigger does not fire for it.
CREATE FUNCTION chatd_count_usage() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO owner_daily_usage AS u (owner, day, input_tokens, output_tokens)
    SELECT c.owner, (NEW.created_at AT TIME ZONE 'UTC')::date,
           coalesce((NEW.usage ->> 'input_tokens')::bigint, 0),
           coalesce((NEW.usage ->> 'output_tokens')::bigint, 0)
    FROM chats c WHERE c.id = NEW.chat_id
    ON CONFLICT (owner, day) DO UPDATE
        SET input_tokens = u.input_tokens + EXCLUDED.input_tokens,
            output_tokens = u.output_tokens + EXCLUDED.output_tokens;
    RETURN NULL;
END
$$;

CREATE TRIGGER messages_count_usage AFTER INSERT ON messages
    FOR EACH ROW WHEN (NEW.usage IS NOT NULL) EXECUTE FUNCTION chatd_count_usage();

-- Open SSE streams, one lease each. The gateway serving a stream extends its lease while
-- the stream is open and deletes it when the stream ends; a crashed gateway's leases lapse.
CREATE TABLE stream_leases (
    id          uuid PRIMARY KEY,
    key_hash    text NOT NULL,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX stream_leases_key ON stream_leases (key_hash);

-- An owner's chats in a turn, counted when a message would start another one.
CREATE INDEX chats_owner_in_turn ON chats (owner) WHERE status IN ('running', 'requires_action');
