-- How a webhook gets its receiver's token beyond a static one: OAuth2's
-- client credentials (JSON: type, token_url, client_id,
-- client_secret_secret, scope).
ALTER TABLE webhooks ADD COLUMN auth text;
