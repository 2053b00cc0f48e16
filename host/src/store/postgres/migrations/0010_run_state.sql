-- Runs have a state (W&B's): running until they end, once.
ALTER TABLE runs ADD COLUMN state text NOT NULL DEFAULT 'running';
