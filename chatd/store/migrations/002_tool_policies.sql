-- How long a chat waits in requires_action for client tool results.
ALTER TABLE chats ADD COLUMN action_timeout_s integer NOT NULL DEFAULT 600;
