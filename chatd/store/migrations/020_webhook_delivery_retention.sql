-- Retention forgets settled webhook deliveries (their attempts go with them): this index
-- finds the old ones without reading the pending.
CREATE INDEX webhook_deliveries_settled ON webhook_deliveries (updated_at)
    WHERE status <> 'pending';
