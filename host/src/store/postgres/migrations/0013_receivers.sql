-- Protecting receivers: a webhook's pace and circuit-breaker settings, its
-- circuit as last written, and its next free send slot, shared by hosts.
ALTER TABLE webhooks
    ADD COLUMN max_per_second double precision,
    ADD COLUMN circuit_breaker text;

CREATE TABLE webhook_circuits (
    team text NOT NULL,
    name text NOT NULL,
    record text NOT NULL,
    PRIMARY KEY (team, name)
);

CREATE TABLE webhook_pace (
    team text NOT NULL,
    name text NOT NULL,
    next_us bigint NOT NULL,
    PRIMARY KEY (team, name)
);
