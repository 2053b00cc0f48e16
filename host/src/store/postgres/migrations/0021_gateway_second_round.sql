-- The gateway, second round. Spend in USD: budgets on keys (a project's are
-- in its limits' JSON),
-- and cost and cache hits in usage.
ALTER TABLE api_keys
    ADD COLUMN usd_per_day double precision,
    ADD COLUMN usd_per_month double precision;

ALTER TABLE usage
    ADD COLUMN cost_usd double precision NOT NULL DEFAULT 0,
    ADD COLUMN cache_hits bigint NOT NULL DEFAULT 0;

-- The inference response cache, shared by every host.
CREATE TABLE response_cache (
    key text PRIMARY KEY,
    answer bytea NOT NULL,
    expires_ms bigint NOT NULL
);
CREATE INDEX response_cache_expiry ON response_cache (expires_ms);

-- A delivery's trace context (W3C traceparent), for its attempts' spans.
ALTER TABLE outbox ADD COLUMN trace text;
