-- A change to what hosts keep is announced by record, not by table: the
-- payload is the record's path, its table and then the columns that name
-- it (the trigger's arguments, as `store::changes::KEPT` lists them)
-- joined by '/', so that each host drops that entry only. A team's key or
-- membership changing no longer empties every host's webhooks and
-- automations. (The plugins keep their table-wide announcement.)
CREATE FUNCTION switchyard_announce(tab text, r jsonb, columns text[]) RETURNS void AS $$
    SELECT pg_notify('switchyard_config', tab || '/' || array_to_string(
        ARRAY(SELECT r ->> c FROM unnest(columns) WITH ORDINALITY AS u (c, n) ORDER BY n), '/'))
$$ LANGUAGE sql;

CREATE FUNCTION switchyard_record_changed() RETURNS trigger AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        PERFORM switchyard_announce(TG_TABLE_NAME, to_jsonb(OLD), TG_ARGV);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        PERFORM switchyard_announce(TG_TABLE_NAME, to_jsonb(NEW), TG_ARGV);
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

DROP TRIGGER secrets_changed ON secrets;
DROP TRIGGER webhooks_changed ON webhooks;
DROP TRIGGER automations_changed ON automations;
DROP TRIGGER api_keys_changed ON api_keys;
DROP TRIGGER members_changed ON members;
DROP TRIGGER projects_changed ON projects;

CREATE TRIGGER secrets_changed AFTER INSERT OR UPDATE OR DELETE ON secrets
    FOR EACH ROW EXECUTE FUNCTION switchyard_record_changed('team');
CREATE TRIGGER webhooks_changed AFTER INSERT OR UPDATE OR DELETE ON webhooks
    FOR EACH ROW EXECUTE FUNCTION switchyard_record_changed('team', 'name');
CREATE TRIGGER automations_changed AFTER INSERT OR UPDATE OR DELETE ON automations
    FOR EACH ROW EXECUTE FUNCTION switchyard_record_changed('scope');
CREATE TRIGGER api_keys_changed AFTER INSERT OR UPDATE OR DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION switchyard_record_changed('hash');
CREATE TRIGGER members_changed AFTER INSERT OR UPDATE OR DELETE ON members
    FOR EACH ROW EXECUTE FUNCTION switchyard_record_changed('kind', 'group_name', 'user_id');
CREATE TRIGGER projects_changed AFTER INSERT OR UPDATE OR DELETE ON projects
    FOR EACH ROW EXECUTE FUNCTION switchyard_record_changed('team', 'name');
