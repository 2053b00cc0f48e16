-- Receivers, second round: a webhook's own headers (a JSON object of
-- name to value, values naming secrets as $NAME) and its own retry
-- schedule (a JSON array of waits in ms).
ALTER TABLE webhooks
    ADD COLUMN headers text,
    ADD COLUMN retry_schedule_ms text;
