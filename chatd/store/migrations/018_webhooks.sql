-- Outbound webhooks (issue 16): an owner's endpoints, one delivery per endpoint and event,
-- and every attempt to deliver it. No chat row is locked here (the lock order of 016 holds).

-- `secret` is the Standard Webhooks signing secret (`whsec_...`). The worker must sign with
-- it, so it can't be hashed; the API shows it once, at creation, and never lists it again.
CREATE TABLE webhook_endpoints (
    id          uuid PRIMARY KEY,
    owner       text NOT NULL,
    url         text NOT NULL,
    events      text[] NOT NULL,
    secret      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_endpoints_owner ON webhook_endpoints (owner, created_at, id);

-- One message per endpoint and event. `event_id` is the event's fanout workflow id, so a
-- fanout run twice records nothing new. `body` is the exact JSON sent (and signed): every
-- retry and replay sends the same bytes. A chat's deletion keeps its deliveries' log.
CREATE TABLE webhook_deliveries (
    id                uuid PRIMARY KEY,
    endpoint_id       uuid NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    event_id          text NOT NULL,
    event             text NOT NULL,
    chat_id           uuid NOT NULL,
    turn_id           text NOT NULL,
    body              text NOT NULL,
    status            text NOT NULL DEFAULT 'pending',  -- pending | succeeded | failed
    attempts          integer NOT NULL DEFAULT 0,
    last_status_code  integer,
    last_error        text,
    next_retry_at     timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (endpoint_id, event_id)
);
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, created_at DESC, id DESC);

-- Each attempt's outcome, numbered per delivery (a replay is a further attempt).
CREATE TABLE webhook_attempts (
    delivery_id    uuid NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    attempt        integer NOT NULL,
    replay         boolean NOT NULL DEFAULT false,
    status_code    integer,
    error          text,
    next_retry_at  timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (delivery_id, attempt)
);
