-- A response chained by `previous_response_id` extends its previous response's
-- conversation digest (`api.open_responses.prefixes._chain_end`): that row is found by its
-- response.
CREATE INDEX conversation_prefixes_response ON conversation_prefixes (response_id);
