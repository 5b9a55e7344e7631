-- The events ride on their notification (issue 37): a gateway's streams take them from it
-- instead of reading them back, one query per wake-up. The payload is still
-- `<chat>:<last seq>`, followed, when the whole notification fits in Postgres's limit (8,000
-- bytes), by `:` and a JSON array: the first event's seq, the events' time, their names and
-- their data. A gateway that reads only the chat from the payload is unaffected.
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
    FROM c,
    LATERAL (
        SELECT chat::text || ':' || c.last_event_seq AS head,
               jsonb_build_array(
                   c.last_event_seq - cardinality(names) + 1, now(), names, to_jsonb(payloads)
               )::text AS body
    ) AS p,
    LATERAL (
        SELECT pg_notify(
            'chatd_events',
            CASE WHEN octet_length(p.head) + 1 + octet_length(p.body) < 8000
                 THEN p.head || ':' || p.body ELSE p.head END
        )
    ) AS x
$$;
