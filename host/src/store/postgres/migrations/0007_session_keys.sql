-- The API key a console session was signed in with: revoking the key
-- ends its sessions. Sessions from before have none, and end on expiry.
ALTER TABLE sessions ADD COLUMN key_id text NOT NULL DEFAULT '';
CREATE INDEX sessions_key_id ON sessions (key_id);
