-- Tool approval and MCP tools (chatd.tool_policy, chatd.store.tool_decisions,
-- chatd.store.mcp_listings).

-- A chat's approval policy ({"<tool or glob>": "auto" | "ask" | "deny"}) and the operator's
-- MCP servers it uses, by name.
ALTER TABLE chats ADD COLUMN tool_policy jsonb NOT NULL DEFAULT '{}';
ALTER TABLE chats ADD COLUMN mcp_servers text[] NOT NULL DEFAULT '{}';

-- The approval audit: one decision per call that waited on a person, never deleted while its
-- chat exists. Keyed like the call's staged result, so a retried write inserts nothing.
CREATE TABLE tool_decisions (
    chat_id           uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    turn_id           text NOT NULL,
    step              integer NOT NULL,
    tool_call_id      text NOT NULL,
    tool_name         text NOT NULL,
    decision          text NOT NULL CHECK (decision IN ('approve', 'deny')),
    arguments_sha256  text NOT NULL,
    edited            boolean NOT NULL,
    message           text,
    remember          boolean NOT NULL,
    key_id            text,
    owner             text,
    decided_by        text,
    decided_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (chat_id, turn_id, step, tool_call_id)
);
-- The audit lists a chat's decisions in the order they were made.
CREATE INDEX tool_decisions_order ON tool_decisions (chat_id, decided_at, turn_id, step, tool_call_id);

-- The MCP tools a turn listed when it began: every later step and call of the turn reads
-- these, so a server changing its tools mid-turn changes nothing the turn sees.
CREATE TABLE turn_mcp_tools (
    chat_id    uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    turn_id    text NOT NULL,
    tools      jsonb NOT NULL,
    listed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (chat_id, turn_id)
);
-- Retention deletes the lists of ended turns by age.
CREATE INDEX turn_mcp_tools_listed ON turn_mcp_tools (listed_at);
