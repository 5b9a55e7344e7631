-- The provider's stored response id of an assistant message (OpenAI Responses chain mode).
ALTER TABLE messages ADD COLUMN response_id text;
