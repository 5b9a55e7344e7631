-- How the model may call tools (Open Responses' `tool_choice` and `parallel_tool_calls`),
-- as `chatd.models.ToolUse`: its mode, the tools it may call, one call a step or many.
-- A response names it each time; the empty object is the default (any tool, any number).
ALTER TABLE chats ADD COLUMN tool_use jsonb NOT NULL DEFAULT '{}'::jsonb;
