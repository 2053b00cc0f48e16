-- Hosts cache what the delivery path reads of the configuration (secrets,
-- webhooks, automations); every write to it is announced on
-- 'switchyard_config' when it commits, so that each host drops its copy.

CREATE FUNCTION switchyard_config_changed() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('switchyard_config', TG_TABLE_NAME);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER secrets_changed AFTER INSERT OR UPDATE OR DELETE ON secrets
    FOR EACH STATEMENT EXECUTE FUNCTION switchyard_config_changed();
CREATE TRIGGER webhooks_changed AFTER INSERT OR UPDATE OR DELETE ON webhooks
    FOR EACH STATEMENT EXECUTE FUNCTION switchyard_config_changed();
CREATE TRIGGER automations_changed AFTER INSERT OR UPDATE OR DELETE ON automations
    FOR EACH STATEMENT EXECUTE FUNCTION switchyard_config_changed();
