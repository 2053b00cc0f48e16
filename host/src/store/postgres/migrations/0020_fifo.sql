-- FIFO webhooks: a webhook's ordering ('fifo', or NULL for parallel), and each
-- delivery's place in its FIFO webhook's line (NULL for parallel ones). A
-- FIFO delivery is claimed only when no delivery before it in its line
-- waits and none of its webhook's is leased.
ALTER TABLE webhooks ADD COLUMN ordering text;
ALTER TABLE outbox ADD COLUMN fifo text;
CREATE INDEX outbox_fifo_line ON outbox (webhook_team, webhook_name, fifo) WHERE fifo IS NOT NULL;
