package pgtest

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// TestDatabasePerTest: each DSN names its own empty database on a server
// that asks for the password.
func TestDatabasePerTest(t *testing.T) {
	ctx := context.Background()
	a, b := DSN(t), DSN(t)
	if a == b {
		t.Fatalf("two DSNs name the same database: %s", a)
	}
	for _, dsn := range []string{a, b} {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatalf("connecting: %v", err)
		}
		var tables int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables); err != nil {
			t.Fatal(err)
		}
		if tables != 0 {
			t.Errorf("new database holds %d tables", tables)
		}
		conn.Close(ctx)
	}
	cfg, err := pgx.ParseConfig(a)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Password = "wrong"
	if conn, err := pgx.ConnectConfig(ctx, cfg); err == nil {
		conn.Close(ctx)
		t.Errorf("connected with a wrong password")
	}
}
