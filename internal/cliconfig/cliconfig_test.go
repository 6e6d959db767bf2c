package cliconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSaveLoadRoundTripIsPrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "config.yaml")
	c := &Config{}
	c.Put(Context{Name: "prod", Server: "https://fleet.example:7777", Token: "gfu_secret", Project: "vision"})
	c.Put(Context{Name: "local", Server: "http://127.0.0.1:7777"})
	c.CurrentContext = "prod"
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("config mode %v, want 0600: it holds tokens", fi.Mode().Perm())
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := got.Current("")
	if err != nil || cur == nil || cur.Token != "gfu_secret" || cur.Project != "vision" {
		t.Fatalf("current context after reload = %+v, %v", cur, err)
	}
	// Replacing keeps one context of the name.
	got.Put(Context{Name: "prod", Server: "https://fleet.example:7777", Token: "gfu_new"})
	if len(got.Contexts) != 2 {
		t.Errorf("Put of an existing name made %d contexts", len(got.Contexts))
	}
	if !got.Delete("prod") || got.CurrentContext != "" {
		t.Errorf("deleting the current context left current-context %q", got.CurrentContext)
	}
	if got.Delete("prod") {
		t.Error("deleted a context twice")
	}
}

func TestLoadMissingIsEmpty(t *testing.T) {
	c, err := Load(filepath.Join(t.TempDir(), "none.yaml"))
	if err != nil || len(c.Contexts) != 0 {
		t.Fatalf("Load(missing) = %+v, %v", c, err)
	}
	if cur, err := c.Current(""); cur != nil || err != nil {
		t.Errorf("Current of an empty config = %v, %v", cur, err)
	}
	if _, err := c.Current("prod"); err == nil || !strings.Contains(err.Error(), "get-contexts") {
		t.Errorf("Current(unknown) = %v, want an error that says how to list contexts", err)
	}
}

func TestLoadNamesBadFields(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	bad := `current-context: nope
contexts:
- name: a
  server: ftp://x
- name: a
  server: https://user:pw@fleet.example
- server: http://ok
`
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil {
		t.Fatal("a bad config loaded")
	}
	for _, want := range []string{"contexts[0].server", "contexts[1].name", "contexts[1].server", "contexts[2].name", "current-context", path} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "pw@") {
		t.Errorf("error %q repeats the password in the URL", err)
	}
	if err := os.WriteFile(path, []byte("contexts: []\nunknownKey: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil {
		t.Error("a config with an unknown key loaded")
	}
}

func TestNameFor(t *testing.T) {
	for in, want := range map[string]string{"https://fleet.example:7777": "fleet.example:7777", "http://10.0.0.1": "10.0.0.1", "::bad": "default"} {
		if got := NameFor(in); got != want {
			t.Errorf("NameFor(%q) = %q, want %q", in, got, want)
		}
	}
}
