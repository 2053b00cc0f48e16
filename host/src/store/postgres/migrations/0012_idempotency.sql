-- Idempotency keys: the first answer to an event-producing request, by
-- caller and key, kept 24 hours.
CREATE TABLE idempotency (
    key text PRIMARY KEY,
    fingerprint text NOT NULL,
    at_ms bigint NOT NULL,
    status integer,
    body text
);
CREATE INDEX idempotency_by_age ON idempotency (at_ms);
