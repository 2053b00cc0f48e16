-- Switchyard's schema, version 1.
--
-- A scope is written as text: 'r/<registry>' or 'p/<team>/<project>' (names
-- never hold '/'). Times are unix seconds (*_at) or milliseconds (*_ms), as
-- the API shows them.

CREATE TABLE meta (
    key text PRIMARY KEY,
    value bytea NOT NULL
);

CREATE TABLE users (
    id text PRIMARY KEY,
    name text NOT NULL UNIQUE,
    operator boolean NOT NULL,
    created_at bigint NOT NULL
);

-- Only the SHA-256 of a key is stored.
CREATE TABLE api_keys (
    hash text PRIMARY KEY,
    id text NOT NULL,
    user_id text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name text NOT NULL,
    prefix text NOT NULL,
    created_at bigint NOT NULL,
    UNIQUE (user_id, id)
);

-- Teams and registries.
CREATE TABLE groups (
    kind text NOT NULL CHECK (kind IN ('team', 'registry')),
    name text NOT NULL,
    description text NOT NULL,
    created_at bigint NOT NULL,
    PRIMARY KEY (kind, name)
);

CREATE TABLE members (
    kind text NOT NULL,
    group_name text NOT NULL,
    user_id text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    user_name text NOT NULL,
    role text NOT NULL CHECK (role IN ('member', 'admin')),
    added_at bigint NOT NULL,
    PRIMARY KEY (kind, group_name, user_id),
    FOREIGN KEY (kind, group_name) REFERENCES groups (kind, name) ON DELETE CASCADE
);
CREATE INDEX members_by_user ON members (user_id, kind);

CREATE TABLE projects (
    team text NOT NULL,
    name text NOT NULL,
    description text NOT NULL,
    created_by text NOT NULL,
    created_at bigint NOT NULL,
    PRIMARY KEY (team, name)
);

-- Values sealed by the host (ChaCha20-Poly1305 under the master key).
CREATE TABLE secrets (
    team text NOT NULL,
    name text NOT NULL,
    sealed text NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    PRIMARY KEY (team, name)
);

CREATE TABLE webhooks (
    team text NOT NULL,
    name text NOT NULL,
    url text NOT NULL,
    access_token_secret text,
    signing_secret text,
    standard_webhooks boolean NOT NULL,
    disabled_reason text,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    PRIMARY KEY (team, name)
);

-- The columns the queries need; the definition (event fields, payload
-- template, …) as the API shows it in `record`.
CREATE TABLE automations (
    scope text NOT NULL,
    name text NOT NULL,
    event_type text NOT NULL,
    webhook_team text NOT NULL,
    webhook_name text NOT NULL,
    state text NOT NULL,
    record jsonb NOT NULL,
    PRIMARY KEY (scope, name)
);
-- Which automations an event in a scope fires, without scanning the others.
CREATE INDEX automations_by_trigger ON automations (scope, event_type);
-- Which automations use a webhook, to name them when it is deleted.
CREATE INDEX automations_by_webhook ON automations (webhook_team, webhook_name);

CREATE TABLE collections (
    scope text NOT NULL,
    name text NOT NULL,
    description text NOT NULL,
    versions bigint NOT NULL,
    created_by text NOT NULL,
    created_at bigint NOT NULL,
    PRIMARY KEY (scope, name)
);

CREATE TABLE versions (
    scope text NOT NULL,
    collection text NOT NULL,
    idx bigint NOT NULL,
    metadata jsonb NOT NULL,
    source jsonb,
    created_by text NOT NULL,
    created_at bigint NOT NULL,
    PRIMARY KEY (scope, collection, idx),
    FOREIGN KEY (scope, collection) REFERENCES collections (scope, name) ON DELETE CASCADE
);

-- An alias is held by one version of a collection at a time.
CREATE TABLE aliases (
    scope text NOT NULL,
    collection text NOT NULL,
    alias text NOT NULL,
    idx bigint NOT NULL,
    seq bigserial NOT NULL,
    PRIMARY KEY (scope, collection, alias)
);
CREATE INDEX aliases_by_version ON aliases (scope, collection, idx);

CREATE TABLE tags (
    scope text NOT NULL,
    collection text NOT NULL,
    idx bigint NOT NULL,
    tag text NOT NULL,
    seq bigserial NOT NULL,
    PRIMARY KEY (scope, collection, idx, tag)
);

CREATE TABLE runs (
    team text NOT NULL,
    project text NOT NULL,
    id text NOT NULL,
    name text NOT NULL,
    creator text NOT NULL,
    created_at bigint NOT NULL,
    PRIMARY KEY (team, project, id)
);

-- A metric's most recent values, oldest first.
CREATE TABLE run_metrics (
    team text NOT NULL,
    project text NOT NULL,
    run text NOT NULL,
    metric text NOT NULL,
    vals double precision[] NOT NULL,
    PRIMARY KEY (team, project, run, metric)
);

-- When an automation last fired for a run: at most once per run per window.
CREATE TABLE run_fired (
    scope text NOT NULL,
    automation text NOT NULL,
    run text NOT NULL,
    at_ms bigint NOT NULL,
    PRIMARY KEY (scope, automation, run)
);

-- Events written with their action, until matched.
CREATE TABLE event_inbox (
    id text PRIMARY KEY,
    event jsonb NOT NULL
);

-- Deliveries waiting. A host sending one holds a lease on it; when the
-- lease runs out (the host died), another host takes it over.
CREATE TABLE outbox (
    id text PRIMARY KEY,
    scope text NOT NULL,
    automation text NOT NULL,
    execution_id text NOT NULL,
    webhook_team text NOT NULL,
    webhook_name text NOT NULL,
    body_sealed text NOT NULL,
    attempts integer NOT NULL,
    due_ms bigint NOT NULL,
    lease_owner text,
    lease_until_ms bigint
);
CREATE INDEX outbox_by_due ON outbox (due_ms);

-- Execution ids sort by time, so the primary key lists an automation's
-- executions newest first.
CREATE TABLE executions (
    scope text NOT NULL,
    automation text NOT NULL,
    id text NOT NULL,
    delivery_id text NOT NULL,
    webhook_team text NOT NULL,
    webhook_name text NOT NULL,
    status text NOT NULL CHECK (status IN ('Pending', 'Finished', 'Failed')),
    error text,
    event jsonb NOT NULL,
    payload text,
    attempts jsonb NOT NULL,
    body_sealed text,
    created_at_ms bigint NOT NULL,
    updated_at_ms bigint NOT NULL,
    PRIMARY KEY (scope, automation, id)
);

-- Token totals per usage scope, day, model and key, added to by upserts.
CREATE TABLE usage (
    scope text NOT NULL,
    day date NOT NULL,
    model text NOT NULL,
    key_id text NOT NULL,
    requests bigint NOT NULL,
    prompt_tokens bigint NOT NULL,
    completion_tokens bigint NOT NULL,
    total_tokens bigint NOT NULL,
    PRIMARY KEY (scope, day, model, key_id)
);

-- Records that could not be read, set aside so that they block nothing.
CREATE TABLE quarantine (
    kind text NOT NULL,
    key text NOT NULL,
    reason text NOT NULL,
    at_ms bigint NOT NULL,
    value text NOT NULL
);
