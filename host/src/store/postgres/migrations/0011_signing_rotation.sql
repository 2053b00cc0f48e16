-- Webhooks sign with an Ed25519 key too (Standard Webhooks' v1a), and a
-- rotation keeps the previous secrets signing until previous_until.
ALTER TABLE webhooks
    ADD COLUMN signing_key_secret text,
    ADD COLUMN previous_signing_secret text,
    ADD COLUMN previous_signing_key_secret text,
    ADD COLUMN previous_until bigint;
