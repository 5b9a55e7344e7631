-- The one definition of appending a chat's stream events and of the `message` event: every
-- statement that publishes calls these, so numbering, notification and the event's shape
-- cannot drift apart between writers, and each write stays one statement.

-- Append events to chat `chat` in order: take the next sequence numbers, insert the events
-- under them, and notify the gateways (`events.NOTIFY_CHANNEL`, payload `<chat>:<last seq>`)
-- when the transaction commits. Returns the last sequence number; NULL if the chat does not
-- exist or there are no events. A statement that also updates the chat's row does so in a
-- CTE that its main query reads before calling this, so the row is updated in that order.
CREATE OR REPLACE FUNCTION chatd_append_events(chat uuid, names text[], payloads jsonb[])
RETURNS bigint LANGUAGE sql AS $$
    WITH c AS (
        UPDATE chats SET last_event_seq = last_event_seq + cardinality(names)
        WHERE id = chat AND cardinality(names) > 0
        RETURNING last_event_seq
    ), ins AS (
        INSERT INTO chat_events (chat_id, seq, event, data)
        SELECT chat, c.last_event_seq - cardinality(names) + t.n, t.name, t.payload
        FROM c, unnest(names, payloads) WITH ORDINALITY AS t(name, payload, n)
    )
    SELECT c.last_event_seq
    FROM c, LATERAL (SELECT pg_notify('chatd_events', chat::text || ':' || c.last_event_seq)) AS x
$$;

-- The `message` event of a transcript message, as `transcript.message_event` makes it in
-- Python: parts without the fields clients never see (`parts.INTERNAL_FIELDS`), usage only
-- if there is any, the time as pydantic writes it (microseconds only when there are any).
CREATE OR REPLACE FUNCTION chatd_message_event(m messages) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', m.id,
        'turn_id', m.turn_id,
        'role', m.role,
        'parts', (
            SELECT coalesce(jsonb_agg(p - 'signature' - 'provider_data' ORDER BY i), '[]')
            FROM jsonb_array_elements(m.parts) WITH ORDINALITY AS x(p, i)
        ),
        'compressed', m.compressed,
        'created_at',
            to_char(m.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
            || CASE WHEN date_part('microseconds', m.created_at AT TIME ZONE 'UTC')::bigint
                         % 1000000 = 0
                    THEN ''
                    ELSE to_char(m.created_at AT TIME ZONE 'UTC', '.US') END
            || 'Z'
    ) || CASE WHEN m.usage IS NULL THEN '{}' ELSE jsonb_build_object('usage', m.usage) END
$$;
