-- Spend (issue 36): what every model-step attempt cost, and the budgets that pause a turn.

-- One row per attempt of a model step that reached a provider: an estimate written as the
-- request goes out, replaced by the provider's reported usage when the stream finishes. An
-- attempt lost with its worker stays an estimate, marked as one, so a crash neither loses
-- nor doubles what the provider billed. No foreign key to `chats`: deleting a chat (or an
-- edit deleting its messages) must not give its spend back to a budget or a report.
CREATE TABLE step_spend (
    chat_id         uuid NOT NULL,
    step_key        text NOT NULL,   -- the assistant message's `messages.step_key`
    attempt         text NOT NULL,   -- "<the workflow's attempt>.<Temporal's attempt>"
    turn_id         text NOT NULL,
    owner           text NOT NULL,
    model           text NOT NULL,   -- provider/name
    usage           jsonb NOT NULL,
    cost_usd        double precision, -- NULL: the model has no price
    estimated       boolean NOT NULL,
    -- The chats above this one and the turns they were running when it spent: a subagent's
    -- spend counts toward its ancestors' chat and turn budgets.
    ancestor_chats  uuid[] NOT NULL DEFAULT '{}',
    ancestor_turns  text[] NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (chat_id, step_key, attempt)
);
CREATE INDEX step_spend_turn ON step_spend (turn_id);
CREATE INDEX step_spend_owner ON step_spend (owner, created_at);
CREATE INDEX step_spend_ancestor_chats ON step_spend USING gin (ancestor_chats);
CREATE INDEX step_spend_ancestor_turns ON step_spend USING gin (ancestor_turns);

-- The owner's spend per UTC day, beside its tokens: a counter, for the same reason.
ALTER TABLE owner_daily_usage ADD COLUMN cost_usd double precision NOT NULL DEFAULT 0;

CREATE FUNCTION chatd_count_spend() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    added double precision := coalesce(NEW.cost_usd, 0);
BEGIN
    IF TG_OP = 'UPDATE' THEN
        added := added - coalesce(OLD.cost_usd, 0);
    END IF;
    IF added <> 0 THEN
        INSERT INTO owner_daily_usage AS u (owner, day, cost_usd)
        VALUES (NEW.owner, (NEW.created_at AT TIME ZONE 'UTC')::date, added)
        ON CONFLICT (owner, day) DO UPDATE SET cost_usd = u.cost_usd + EXCLUDED.cost_usd;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER step_spend_counted AFTER INSERT OR UPDATE OF cost_usd ON step_spend
    FOR EACH ROW EXECUTE FUNCTION chatd_count_spend();

-- Budgets: a chat's (with its subagents'), a turn's (set on its message), an owner's per
-- UTC day and month. NULL: none.
ALTER TABLE chats ADD COLUMN budget_usd double precision CHECK (budget_usd >= 0);
ALTER TABLE queued_messages ADD COLUMN max_cost_usd double precision CHECK (max_cost_usd >= 0);
ALTER TABLE owner_limits ADD COLUMN usd_per_day double precision CHECK (usd_per_day >= 0);
ALTER TABLE owner_limits ADD COLUMN usd_per_month double precision CHECK (usd_per_month >= 0);

-- A turn paused on a budget: {budget, limit_usd, spent_usd, next_step_usd, ...}; NULL
-- otherwise. Cleared with the status it came with.
ALTER TABLE chats ADD COLUMN pending_budget jsonb;

-- A response whose turn paused on a budget ends `budget` (`/v1`: incomplete, reason budget).
CREATE OR REPLACE FUNCTION chatd_end_responses() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE responses
       SET ended_at = now(),
           ended_status = CASE WHEN NEW.pending_budget IS NOT NULL THEN 'budget'
                               ELSE NEW.status END,
           ended_error = CASE WHEN NEW.status = 'error' THEN NEW.last_error END
     WHERE chat_id = NEW.id AND turn_id = OLD.turn_id AND ended_at IS NULL;
    RETURN NULL;
END $$;

-- Who raised which budget, or ended a paused turn, and when.
CREATE TABLE budget_decisions (
    id          bigserial PRIMARY KEY,
    chat_id     uuid NOT NULL,
    turn_id     text NOT NULL,
    pause       text NOT NULL,   -- the paused step and attempt: one decision per pause
    budget      text NOT NULL,
    add_usd     double precision,
    decision    text NOT NULL CHECK (decision IN ('raise', 'stop')),
    key_id      uuid,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (turn_id, pause)
);
CREATE INDEX budget_decisions_chat ON budget_decisions (chat_id, id);
