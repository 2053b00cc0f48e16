-- When the event that queued a delivery was accepted: the start of the
-- delivery time that switchyard_delivery_duration_seconds measures.
ALTER TABLE outbox ADD COLUMN event_at_ms bigint NOT NULL DEFAULT 0;
