package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestServerCostFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "prices.csv")
	bad := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(good, []byte("match,value,price_per_hour,purchase_price,amortize_months,opex_per_hour\nnode,dgx-01,,300000,36,2\npool,onprem,4.50,,,\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("match,value,price_per_hour,colour\nrack,r1,x,blue\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := func() *Config {
		return &Config{DataDir: dir, Listen: "127.0.0.1:0", LogLevel: "info", HeartbeatTimeout: time.Minute, MeterInterval: time.Minute}
	}
	tests := map[string]struct {
		edit func(*Config)
		// want are substrings of the error; none: no error.
		want []string
	}{
		"defaults": {edit: func(*Config) {}},
		"webhook and secret": {edit: func(c *Config) {
			c.WebhookURL, c.WebhookSecret = "https://hooks.example.com/x", "0123456789abcdef"
		}},
		"prices": {edit: func(c *Config) { c.PricesFile = good }},
		"webhook without secret": {edit: func(c *Config) { c.WebhookURL = "https://hooks.example.com/x" },
			want: []string{"--webhook-secret: is required with --webhook-url", "GPUFLEET_WEBHOOK_SECRET"}},
		"not a url": {edit: func(c *Config) { c.WebhookURL, c.WebhookSecret = "hooks.example.com", "0123456789abcdef" },
			want: []string{`--webhook-url: "hooks.example.com" is not an http(s) URL`}},
		"alert webhook without secret": {edit: func(c *Config) { c.AlertWebhookURL = "https://hooks.example.com/alerts" },
			want: []string{"--webhook-secret: is required with --alert-webhook-url"}},
		"alert webhook not a url": {edit: func(c *Config) { c.AlertWebhookURL, c.WebhookSecret = "ftp://x", "0123456789abcdef" },
			want: []string{`--alert-webhook-url: "ftp://x" is not an http(s) URL`}},
		"meter interval": {edit: func(c *Config) { c.MeterInterval = 100 * time.Millisecond }, want: []string{"--meter-interval: must be at least 1s"}},
		"short secret":   {edit: func(c *Config) { c.WebhookSecret = "short" }, want: []string{"--webhook-secret: must be at least 16 characters"}},
		"missing price":  {edit: func(c *Config) { c.PricesFile = filepath.Join(dir, "nope.csv") }, want: []string{"--prices:", "nope.csv"}},
		"bad prices":     {edit: func(c *Config) { c.PricesFile = bad }, want: []string{"--prices " + bad, "colour"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := base()
			tc.edit(c)
			err := c.Validate()
			if err == nil {
				_, err = c.costConfig()
			}
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	c := base()
	c.PricesFile = good
	cc, err := c.costConfig()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cc.Prices.Lookup("n-1", "onprem", ""); !ok {
		t.Errorf("pool onprem has no custom price")
	}
}
