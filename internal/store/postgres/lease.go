package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpufleet/gpufleet/internal/store"
)

// Lease expiry is the database's clock (now()), so replicas with skewed
// clocks agree on it; durations travel as microseconds.

const acquireSQL = `INSERT INTO leases (name, holder, epoch, acquired_at, expires_at)
	VALUES ($1, $2, 1, now(), now() + $3 * interval '1 microsecond')
	ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, epoch = leases.epoch + 1,
		acquired_at = excluded.acquired_at, expires_at = excluded.expires_at
	WHERE leases.expires_at <= now() OR leases.holder = excluded.holder
	RETURNING epoch, expires_at`

// Acquire takes the lease; see store.Leaser. The update waits for any
// commit fenced by the current term (it holds the row's share lock), so
// once Acquire returns, no batch of an older term can commit.
func (s *Store) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, error) {
	if err := checkLease(name, holder, ttl); err != nil {
		return store.Lease{}, err
	}
	l := store.Lease{Name: name, Holder: holder}
	var epoch int64
	err := s.pool.QueryRow(ctx, acquireSQL, name, holder, ttl.Microseconds()).Scan(&epoch, &l.Expires)
	if err == nil {
		l.Epoch = uint64(epoch)
		return l, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return store.Lease{}, fmt.Errorf("acquiring lease %s: %w", name, err)
	}
	held := &store.HeldError{Name: name}
	if err := s.pool.QueryRow(ctx, `SELECT holder, epoch, expires_at FROM leases WHERE name = $1`, name).Scan(&held.Holder, &epoch, &held.Expires); err != nil {
		return store.Lease{}, fmt.Errorf("acquiring lease %s: reading its holder: %w", name, err)
	}
	held.Epoch = uint64(epoch)
	return store.Lease{}, held
}

// Renew extends l's term; see store.Leaser.
func (s *Store) Renew(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	if err := checkLease(l.Name, l.Holder, ttl); err != nil {
		return store.Lease{}, err
	}
	err := s.pool.QueryRow(ctx, `UPDATE leases SET expires_at = now() + $4 * interval '1 microsecond'
		WHERE name = $1 AND holder = $2 AND epoch = $3 RETURNING expires_at`,
		l.Name, l.Holder, int64(l.Epoch), ttl.Microseconds()).Scan(&l.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Lease{}, fmt.Errorf("renewing lease %s epoch %d for %s: %w", l.Name, l.Epoch, l.Holder, store.ErrLeaseLost)
	}
	if err != nil {
		return store.Lease{}, fmt.Errorf("renewing lease %s: %w", l.Name, err)
	}
	return l, nil
}

// Release ends l's term now; see store.Leaser.
func (s *Store) Release(ctx context.Context, l store.Lease) error {
	if _, err := s.pool.Exec(ctx, `UPDATE leases SET expires_at = now()
		WHERE name = $1 AND holder = $2 AND epoch = $3 AND expires_at > now()`, l.Name, l.Holder, int64(l.Epoch)); err != nil {
		return fmt.Errorf("releasing lease %s: %w", l.Name, err)
	}
	return nil
}

func checkLease(name, holder string, ttl time.Duration) error {
	switch {
	case name == "":
		return errors.New("lease: name is required")
	case holder == "":
		return errors.New("lease: holder is required")
	case ttl < time.Millisecond:
		return fmt.Errorf("lease %s: ttl %s must be at least 1ms", name, ttl)
	}
	return nil
}
