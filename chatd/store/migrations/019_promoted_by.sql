-- Which workflow run began a message's turn. A send no worker took in time is handed over a
-- second way (a signal-with-start) while its first way (the update) may still land; if both
-- do, in runs one after the other, the later run finds the message taken by another run and
-- leaves it (`TurnStore.begin`): every message starts one turn. NULL: begun by a gateway
-- that waited for a slow worker; the run that then takes it claims it.
ALTER TABLE queued_messages ADD COLUMN promoted_by text;
