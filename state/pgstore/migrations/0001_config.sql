-- 0001: configuration version log, head pointer and the tables holding the
-- current document's buckets, engine groups, workers and settings.

-- Append-only log: every accepted write is one row holding the full,
-- validated document. Rows are never updated or deleted (enforced below).
CREATE TABLE config_versions (
    version     bigint      PRIMARY KEY CHECK (version > 0),
    created_at  timestamptz NOT NULL DEFAULT now(),
    author      text        NOT NULL,
    summary     text        NOT NULL,
    based_on    bigint,
    rollback_of bigint      REFERENCES config_versions (version),
    document    jsonb       NOT NULL
);

CREATE FUNCTION config_versions_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'config_versions is append-only';
END
$$;

CREATE TRIGGER config_versions_append_only
    BEFORE UPDATE OR DELETE ON config_versions
    FOR EACH ROW EXECUTE FUNCTION config_versions_append_only();

-- The version in force: exactly one row, locked FOR UPDATE by every write.
CREATE TABLE config_head (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    version    bigint      NOT NULL REFERENCES config_versions (version),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The current document, one row per bucket, group and worker, rewritten in
-- the same transaction as each version. Queryable; the log is authoritative.
CREATE TABLE buckets (
    id                 text    PRIMARY KEY,
    position           integer NOT NULL,
    rank               bigint  NOT NULL,
    kind               text    NOT NULL CHECK (kind IN ('plain', 'pd')),
    models             jsonb,
    min_tokens         bigint  NOT NULL,
    max_tokens         bigint,
    max_context_tokens bigint
);

CREATE TABLE engine_groups (
    bucket_id  text  NOT NULL REFERENCES buckets (id) ON DELETE CASCADE,
    stage      text  NOT NULL CHECK (stage IN ('plain', 'prefill', 'decode')),
    -- NULL: every engine of the stage's role; [] no engine.
    worker_ids jsonb,
    -- NULL: inherited from the model or document default.
    policy     jsonb,
    admission  jsonb,
    PRIMARY KEY (bucket_id, stage)
);

CREATE TABLE workers (
    id             text    PRIMARY KEY,
    position       integer NOT NULL,
    url            text    NOT NULL,
    role           text    NOT NULL CHECK (role IN ('plain', 'prefill', 'decode')),
    models         jsonb   NOT NULL,
    bootstrap_port integer,
    labels         jsonb
);

CREATE TABLE config_settings (
    singleton         boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    workers_declared  boolean NOT NULL,
    default_policy    jsonb,
    models            jsonb
);
