-- The outbox as a queue, as pgmq and SQS keep one: `visible_at` is when a
-- delivery may next be claimed, its due time pushed forward while a host
-- holds its lease. A claim and the next due time read one index from its
-- start, so neither steps over deliveries in flight, however many there
-- are. FIFO lines keep their own index (outbox_fifo_line).
ALTER TABLE outbox ADD COLUMN visible_at bigint;
UPDATE outbox SET visible_at = greatest(due_ms, coalesce(lease_until_ms, 0));
ALTER TABLE outbox ALTER COLUMN visible_at SET NOT NULL;
ALTER TABLE outbox DROP COLUMN lease_until_ms;
DROP INDEX outbox_by_due;
CREATE INDEX outbox_visible ON outbox (visible_at) WHERE fifo IS NULL;

-- Bodies as bytes, not hex text: half the size, and nothing to decode. A
-- body that is not hex (edited by hand) becomes one that will not open,
-- so its delivery fails saying so and the rest go.
CREATE FUNCTION switchyard_unhex(t text) RETURNS bytea AS $$
    SELECT CASE WHEN t ~ '^([0-9a-fA-F]{2})*$' THEN decode(t, 'hex') ELSE ''::bytea END
$$ LANGUAGE sql IMMUTABLE;
ALTER TABLE outbox ALTER COLUMN body_sealed TYPE bytea USING switchyard_unhex(body_sealed);
ALTER TABLE executions ALTER COLUMN body_sealed TYPE bytea USING switchyard_unhex(body_sealed);
DROP FUNCTION switchyard_unhex(text);
-- A delivery written with its execution leaves its body there, written
-- once; a claim reads it from the execution (`coalesce`).
ALTER TABLE outbox ALTER COLUMN body_sealed DROP NOT NULL;

-- An execution's attempts, one row each, appended: the execution's own row
-- is written when it fires and when it is replayed, never for an attempt,
-- so what an execution costs does not grow with its attempts. Its status
-- and error are its last attempt's when that came at or after the
-- execution's own last write (a replay writes it again, Pending).
CREATE TABLE attempts (
    scope text NOT NULL,
    automation text NOT NULL,
    execution_id text NOT NULL,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    status text NOT NULL,
    error text,
    at_ms bigint NOT NULL,
    attempt jsonb NOT NULL,
    -- Execution ids are unique by themselves (ordered, random-tailed): the
    -- short key keeps an append cheap; reads still name the automation.
    PRIMARY KEY (execution_id, seq)
);
INSERT INTO attempts (scope, automation, execution_id, status, error, at_ms, attempt)
SELECT e.scope, e.automation, e.id, e.status, e.error, e.updated_at_ms, a.attempt
FROM executions e, jsonb_array_elements(e.attempts) WITH ORDINALITY AS a (attempt, n)
ORDER BY e.scope, e.automation, e.id, a.n;
ALTER TABLE executions DROP COLUMN attempts;

-- History expires by time, in batches read from this index rather than
-- the table. Executions are written in the order they fire, so a block
-- range index is enough, and costs an append next to nothing.
CREATE INDEX executions_by_time ON executions USING brin (created_at_ms);
