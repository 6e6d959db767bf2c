-- Sealed job secrets (issue 9). data holds model.Secret, whose value is
-- sealed with AES-256-GCM under a key kept outside this database (the data
-- dir's secrets.key or GPUFLEET_SECRET_KEYS), so a copy of this file alone
-- reveals no secret.
CREATE TABLE secrets (
	project TEXT NOT NULL,
	name    TEXT NOT NULL,
	data    TEXT NOT NULL,
	PRIMARY KEY (project, name)
) STRICT;
