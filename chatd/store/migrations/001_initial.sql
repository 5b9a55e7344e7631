-- Chats, their transcript, queued messages, tool results, stream events and API keys.

CREATE TABLE api_keys (
    id          uuid PRIMARY KEY,
    owner       text NOT NULL,
    name        text NOT NULL DEFAULT '',
    prefix      text NOT NULL,
    key_hash    text NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

CREATE TABLE chats (
    id                  uuid PRIMARY KEY,
    owner               text NOT NULL,
    title               text,
    title_source        text,
    model               jsonb NOT NULL,
    system_prompt       text,
    dynamic_tools       jsonb NOT NULL DEFAULT '[]',
    active_tools        jsonb,
    max_steps           integer NOT NULL DEFAULT 25,
    status              text NOT NULL DEFAULT 'waiting',
    last_error          jsonb,
    pending_tool_calls  jsonb,
    action_expires_at   timestamptz,
    usage               jsonb NOT NULL DEFAULT '{}',
    last_event_seq      bigint NOT NULL DEFAULT 0,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX chats_owner_created ON chats (owner, created_at DESC, id DESC);

-- The transcript. `step_key` makes every write idempotent: (turn, step, kind).
CREATE TABLE messages (
    id          bigserial PRIMARY KEY,
    chat_id     uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    turn_id     text NOT NULL,
    step_key    text NOT NULL,
    role        text NOT NULL,
    parts       jsonb NOT NULL,
    visible     boolean NOT NULL DEFAULT true,
    compressed  boolean NOT NULL DEFAULT false,
    usage       jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (chat_id, step_key)
);
CREATE INDEX messages_chat ON messages (chat_id, id);

-- User messages as sent; `promoted_at` is set when a turn moves one into the transcript.
-- Rows are kept after promotion so a retried send (same client_message_id) is recognised.
CREATE TABLE queued_messages (
    id                 uuid PRIMARY KEY,
    chat_id            uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    parts              jsonb NOT NULL,
    client_message_id  text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    promoted_at        timestamptz,
    UNIQUE (chat_id, client_message_id)
);

-- Results of tool calls, written by each tool activity before the step's tool message exists.
CREATE TABLE tool_results (
    chat_id       uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    tool_call_id  text NOT NULL,
    part          jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (chat_id, tool_call_id)
);

-- Stream events, kept so a client reconnecting with Last-Event-ID misses nothing.
CREATE TABLE chat_events (
    chat_id     uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    seq         bigint NOT NULL,
    event       text NOT NULL,
    data        jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (chat_id, seq)
);
