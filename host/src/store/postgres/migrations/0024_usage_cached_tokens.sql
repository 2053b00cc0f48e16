-- The gateway, third round: usage counts the prompt tokens the upstream
-- read from its cache, beside the cost they were priced at.
ALTER TABLE usage
    ADD COLUMN cached_tokens bigint NOT NULL DEFAULT 0;
