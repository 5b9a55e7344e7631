-- When Temporal had a stored message (its update or signal-with-start returned). A send is
-- answered once its message is stored, so a message can be stored and not yet handed over;
-- every hand-over of a chat's message first hands over the chat's older ones that are not
-- (their gateway may have died), so the turns take a chat's messages in the order sent.
ALTER TABLE queued_messages ADD COLUMN handed_over_at timestamptz;
CREATE INDEX queued_messages_unhanded ON queued_messages (chat_id, created_at, id)
    WHERE promoted_at IS NULL AND handed_over_at IS NULL;
