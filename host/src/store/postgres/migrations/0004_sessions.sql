-- Console sessions: the SHA-256 of the cookie, never the cookie itself.
CREATE TABLE sessions (
    hash text PRIMARY KEY,
    user_id text NOT NULL,
    csrf text NOT NULL,
    created_at bigint NOT NULL,
    expires_at bigint NOT NULL
);
CREATE INDEX sessions_expires_at ON sessions (expires_at);
