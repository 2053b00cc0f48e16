-- The gateway: keys scoped to models and projects, with an expiry and
-- limits; projects' limits; and the claims every host makes on a limit's
-- window (see docs/operations.md, "Rate limits across hosts").
ALTER TABLE api_keys
    ADD COLUMN models text,
    ADD COLUMN projects text,
    ADD COLUMN expires_at bigint,
    ADD COLUMN rpm bigint,
    ADD COLUMN tpm bigint,
    ADD COLUMN tokens_per_day bigint;

ALTER TABLE projects ADD COLUMN limits text;

-- A project's limits are kept by hosts like a key.
CREATE TRIGGER projects_changed AFTER INSERT OR UPDATE OR DELETE ON projects
    FOR EACH STATEMENT EXECUTE FUNCTION switchyard_config_changed();

CREATE TABLE rate_claims (
    bucket text NOT NULL,
    at_ms bigint NOT NULL,
    n bigint NOT NULL
);
CREATE INDEX rate_claims_window ON rate_claims (bucket, at_ms);
CREATE INDEX rate_claims_age ON rate_claims (at_ms);

-- One claim, atomically: hosts claiming on one bucket take turns (the
-- advisory lock), and each statement after the lock sees the claims
-- committed before it. One round trip.
CREATE FUNCTION switchyard_claim_limit(
    b text, since_ms bigint, now_ms bigint, need bigint, want bigint, lim bigint
) RETURNS TABLE (granted bigint, used bigint, oldest bigint)
LANGUAGE plpgsql AS $$
DECLARE
    u bigint;
    o bigint;
    g bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(b, 7));
    SELECT coalesce(sum(c.n), 0), min(c.at_ms) INTO u, o
        FROM rate_claims c WHERE c.bucket = b AND c.at_ms > since_ms;
    g := CASE WHEN lim - u >= need THEN least(want, lim - u) ELSE 0 END;
    IF g > 0 THEN
        INSERT INTO rate_claims VALUES (b, now_ms, g);
    END IF;
    RETURN QUERY SELECT g, u, o;
END
$$;

-- Usage per route deployment too ('' for a model without a route).
ALTER TABLE usage ADD COLUMN deployment text NOT NULL DEFAULT '';
ALTER TABLE usage DROP CONSTRAINT usage_pkey;
ALTER TABLE usage ADD PRIMARY KEY (scope, day, model, key_id, deployment);
