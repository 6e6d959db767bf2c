-- The change feed's rows (a commit's batches, ~27 kB for a group of 20
-- submissions) are compressed when stored. pglz, the default, was the
-- largest single item in the backends' CPU profile under a submission
-- burst (7% of their samples); lz4 compresses the same rows several times
-- faster, and followers decompress them faster too. A server built without
-- lz4 keeps pglz.
DO $$
BEGIN
	ALTER TABLE changes ALTER COLUMN data SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
	RAISE NOTICE 'lz4 is not available; the change feed stays compressed with pglz';
END
$$;
