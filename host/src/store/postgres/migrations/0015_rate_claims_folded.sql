-- One row per (bucket, at_ms): a claim and the corrections dated as it add
-- up in place, and a daily budget's are all dated at its day's start, so a
-- claim sums a handful of rows rather than every one made that day.
CREATE TABLE rate_claims_folded AS
    SELECT bucket, at_ms, sum(n)::bigint AS n FROM rate_claims GROUP BY bucket, at_ms;
DROP TABLE rate_claims;
ALTER TABLE rate_claims_folded RENAME TO rate_claims;
ALTER TABLE rate_claims ALTER COLUMN bucket SET NOT NULL;
ALTER TABLE rate_claims ALTER COLUMN at_ms SET NOT NULL;
ALTER TABLE rate_claims ALTER COLUMN n SET NOT NULL;
ALTER TABLE rate_claims ADD PRIMARY KEY (bucket, at_ms);
CREATE INDEX rate_claims_age ON rate_claims (at_ms);

CREATE OR REPLACE FUNCTION switchyard_claim_limit(
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
        INSERT INTO rate_claims VALUES (b, now_ms, g)
            ON CONFLICT (bucket, at_ms) DO UPDATE SET n = rate_claims.n + EXCLUDED.n;
    END IF;
    RETURN QUERY SELECT g, u, o;
END
$$;
