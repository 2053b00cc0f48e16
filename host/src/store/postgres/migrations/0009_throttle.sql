-- An automation's cooldown and rate limit: a firing they hold back is an
-- execution with status 'Skipped' and why ('skipped'), and each
-- automation's recent firing times are kept, one row per automation,
-- locked while a firing is decided.
ALTER TABLE executions DROP CONSTRAINT executions_status_check;
ALTER TABLE executions ADD CONSTRAINT executions_status_check
    CHECK (status IN ('Pending', 'Finished', 'Failed', 'Skipped'));
ALTER TABLE executions ADD COLUMN skipped jsonb;

CREATE TABLE automation_fires (
    scope text NOT NULL,
    automation text NOT NULL,
    fires bigint[] NOT NULL,
    PRIMARY KEY (scope, automation)
);
