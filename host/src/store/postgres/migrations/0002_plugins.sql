-- Plugins uploaded through the operator API: every host loads them, and
-- compares sha256 with what it runs to notice a replacement or a removal.
CREATE TABLE plugins (
    name text PRIMARY KEY,
    kind text NOT NULL,
    version text NOT NULL,
    sha256 text NOT NULL,
    settings jsonb NOT NULL,
    wasm bytea NOT NULL,
    uploaded_at_ms bigint NOT NULL
);
