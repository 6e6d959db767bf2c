-- Pipelined commits (internal/store/postgres, pipeline.go): a committer
-- keeps up to two transactions in flight on two connections, the next one
-- running its statements while the previous one's WAL flush runs. Each
-- transaction takes the advisory lock of its commit number first
-- (gpufleet_commit_ticket) and counts itself last (gpufleet_commit): that
-- waits until the transaction of the number before has ended, and raises
-- GF002 unless that one committed, so commits land in the order they were
-- sent and never after a predecessor that failed. The lock's first key is
-- "gpuf" in ASCII; the second is the commit number modulo 2^31.
CREATE FUNCTION gpufleet_commit_ticket(p_seq bigint) RETURNS void LANGUAGE sql AS $$
	SELECT pg_advisory_xact_lock(1735423334, (p_seq % 2147483648)::integer)
$$;

CREATE FUNCTION gpufleet_commit_after(p_seq bigint) RETURNS void LANGUAGE sql AS $$
	SELECT pg_advisory_xact_lock_shared(1735423334, ((p_seq - 1) % 2147483648)::integer)
$$;

CREATE FUNCTION gpufleet_commit(p_seq bigint, p_at text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
	PERFORM gpufleet_commit_after(p_seq);
	UPDATE store_commits SET seq = p_seq, at = p_at WHERE id = 1 AND seq = p_seq - 1;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'commit % is out of order: the commit before it did not land', p_seq USING ERRCODE = 'GF002';
	END IF;
	RETURN p_seq;
END
$$;
