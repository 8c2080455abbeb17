-- Documents the columns of refinery's history table, so that every table and column of schema
-- carmy carries a comment (contract §8). refinery creates the table (CREATE TABLE IF NOT EXISTS)
-- before it applies any migration; the check keeps this file harmless when run by other means.

DO $$
BEGIN
    IF to_regclass('carmy.refinery_schema_history') IS NOT NULL THEN
        COMMENT ON COLUMN carmy.refinery_schema_history.version IS
            'The migration''s number: <version> of the file migrations/V<version>__<name>.sql. '
            'One row per applied migration; max(version) is the schema''s version.';
        COMMENT ON COLUMN carmy.refinery_schema_history.name IS
            'The migration''s name: <name> of the file migrations/V<version>__<name>.sql.';
        COMMENT ON COLUMN carmy.refinery_schema_history.applied_on IS
            'When the migration was applied, as RFC 3339 text in UTC (the clock of the migrating '
            'process, not the database''s), e.g. 2025-01-31T12:00:00.123456789Z.';
        COMMENT ON COLUMN carmy.refinery_schema_history.checksum IS
            'refinery''s checksum of the migration''s name, version and SQL text, as a decimal '
            'unsigned 64-bit integer. Migrating fails when an embedded file no longer matches the '
            'checksum recorded here (the file was changed after it was applied).';
    END IF;
END
$$;
