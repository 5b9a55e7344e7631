"""chatd-temporal: shared domain types, the Postgres store and the model providers."""
