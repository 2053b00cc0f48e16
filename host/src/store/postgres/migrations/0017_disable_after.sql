-- A webhook disabled after days of failed attempts: its own threshold in
-- hours (the host's when NULL). Saving a disabled webhook releases what
-- waits for it, found by webhook.
ALTER TABLE webhooks ADD COLUMN disable_after_hours double precision;
CREATE INDEX outbox_by_webhook ON outbox (webhook_team, webhook_name);
