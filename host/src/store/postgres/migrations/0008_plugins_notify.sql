-- Every host loads the plugins operators upload; a change is announced on
-- 'switchyard_config' (payload 'plugins') when it commits, so the other
-- hosts load it at once instead of polling the table.
CREATE TRIGGER plugins_changed AFTER INSERT OR UPDATE OR DELETE ON plugins
    FOR EACH STATEMENT EXECUTE FUNCTION switchyard_config_changed();
