-- A webhook disabled after days of failed attempts: its own threshold in
-- hours (the host's when NULL). Saving a disabled webhook releases what
-- waits for it: rare enough to find them without an index of their own (one
-- more index on the outbox costs every delivery a write).
ALTER TABLE webhooks ADD COLUMN disable_after_hours double precision;
