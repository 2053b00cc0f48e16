-- Hosts also keep what lets a request's caller in (a key, a role in a
-- group); a key revoked or a member removed or demoted is announced like
-- the configuration, so that every host drops what it kept.

CREATE TRIGGER api_keys_changed AFTER INSERT OR UPDATE OR DELETE ON api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION switchyard_config_changed();
CREATE TRIGGER members_changed AFTER INSERT OR UPDATE OR DELETE ON members
    FOR EACH STATEMENT EXECUTE FUNCTION switchyard_config_changed();
