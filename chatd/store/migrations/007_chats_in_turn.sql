-- Chats in a turn, oldest change first: the reconciler's sweep reads only this small index
-- (chats whose status says a turn runs), never the whole table.
CREATE INDEX chats_in_turn ON chats (updated_at, id) WHERE status IN ('running', 'requires_action');
