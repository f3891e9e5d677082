-- Engines declare where enginelink finds their KV events, replay socket and
-- metrics, their data-parallel size and the LoRA adapters they serve. The
-- version log's documents are the source of truth; these columns mirror the
-- current document like the rest of the workers table.
ALTER TABLE workers
    ADD COLUMN kv_events_endpoint text,
    ADD COLUMN kv_replay_endpoint text,
    ADD COLUMN metrics_url        text,
    ADD COLUMN dp_size            integer,
    ADD COLUMN lora_adapters      jsonb;
