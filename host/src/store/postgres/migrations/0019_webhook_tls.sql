-- The TLS a webhook's receiver asks for (JSON: client_cert_secret,
-- client_key_secret, ca_secret: team secrets holding PEM).
ALTER TABLE webhooks ADD COLUMN tls text;
