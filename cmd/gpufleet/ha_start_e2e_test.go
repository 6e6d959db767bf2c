package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/store/postgres"
	"github.com/gpufleet/gpufleet/internal/store/postgres/pgtest"
)

// TestTakeoverServesBeforeItsAdminToken: a replica that wins the lease
// serves as the leader without waiting for the commit of its admin token
// (the data dir's token for the CLI, made the first time a replica
// leads): that commit is held here by a lock on the tokens table, and the
// replica answers /readyz 200 as the leader meanwhile; once the lock goes,
// the token is written and works, and the replica logs its first
// scheduling pass. The lock goes as soon as /readyz answers, since it
// must go within the lease's renew deadline, 4 s from the acquisition
// (the held commit holds the lease row too): waiting for more under
// -race on a loaded machine could lose the lease.
func TestTakeoverServesBeforeItsAdminToken(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := postgres.Open(ctx, dsn, postgres.Options{Shared: true}) // the tables, migrated
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	// Reads go on (ACCESS SHARE); the token's INSERT waits.
	if _, err := tx.Exec(ctx, "LOCK TABLE tokens IN EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	r := startReplica(t, "r1", []string{"GPUFLEET_STORE=" + dsn, "GPUFLEET_SECRET_KEYS=" + hex.EncodeToString(key)}, workRoot(t))
	waitLeader(t, []*replica{r}, 60*time.Second)
	_, statErr := os.Stat(filepath.Join(r.dataDir, tokenFile))
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(statErr, fs.ErrNotExist) {
		t.Fatalf("admin token written while the tokens table was locked (%v): the lock did not hold its commit, so the test shows nothing", statErr)
	}
	token := adminToken(t, r, 30*time.Second)
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(r.out.String(), "first scheduling pass done"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the leader logged no first scheduling pass:\n%s", lastOf(r.out.String(), 3000))
		}
	}
	if _, err := client.New(r.url, token, nil).ListJobs(ctx, client.ListOptions{}); err != nil {
		t.Fatalf("the admin token written after the lock went: %v", err)
	}
	if r.restarts() != 0 {
		t.Errorf("the replica exited meanwhile:\n%s", lastOf(r.out.String(), 3000))
	}
}
