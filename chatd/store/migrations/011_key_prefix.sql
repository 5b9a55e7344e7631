-- API keys keep a fixed-length clear prefix (chatd.store.keys.display_prefix): `chatd_` and
-- 4 characters, or 4 characters of a key without that marker. Rows written before stored
-- the first 12 characters, which can be most of a short chosen key.
UPDATE api_keys
   SET prefix = CASE WHEN prefix LIKE 'chatd\_%' THEN left(prefix, 10) ELSE left(prefix, 4) END
 WHERE length(prefix) > CASE WHEN prefix LIKE 'chatd\_%' THEN 10 ELSE 4 END;
