// Package cliconfig is the CLI's own configuration: named contexts (a
// server, a token and a default project), the current one, and the file they
// live in (~/.config/gpufleet/config.yaml, like kubectl's kubeconfig). It
// knows nothing of the API; cmd/gpufleet resolves a client from it.
package cliconfig

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// EnvFile names the config file instead of the default path.
const EnvFile = "GPUFLEET_CONFIG"

// Config is the whole file.
type Config struct {
	// CurrentContext names the context commands use when none is given.
	CurrentContext string    `json:"current-context,omitempty"`
	Contexts       []Context `json:"contexts,omitempty"`
}

// Context is one server and how to talk to it.
type Context struct {
	Name   string `json:"name"`
	Server string `json:"server"`
	// Token is the bearer secret; the file is written 0600.
	Token string `json:"token,omitempty"`
	// Project is the default project of commands that take one.
	Project string `json:"project,omitempty"`
	// CA pins the server's certificate (a PEM file) for https.
	CA string `json:"certificate-authority,omitempty"`
}

// DefaultPath is where the config lives: $GPUFLEET_CONFIG, else
// $XDG_CONFIG_HOME/gpufleet/config.yaml, else ~/.config/gpufleet/config.yaml.
func DefaultPath() string {
	if p := os.Getenv(EnvFile); p != "" {
		return p
	}
	if x := os.Getenv("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, "gpufleet", "config.yaml")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(".gpufleet", "config.yaml")
	}
	return filepath.Join(home, ".config", "gpufleet", "config.yaml")
}

// Load reads the config at path; a missing file is an empty config.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &Config{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading CLI config: %w", err)
	}
	c := &Config{}
	if err := yaml.UnmarshalStrict(data, c); err != nil {
		return nil, fmt.Errorf("%s: %w (fix or delete the file, then `gpufleet login` again)", path, err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Validate checks names and servers, naming each bad field.
func (c *Config) Validate() error {
	var errs []string
	seen := map[string]bool{}
	for i, x := range c.Contexts {
		switch {
		case x.Name == "":
			errs = append(errs, fmt.Sprintf("contexts[%d].name: is required", i))
		case seen[x.Name]:
			errs = append(errs, fmt.Sprintf("contexts[%d].name: %q is used twice", i, x.Name))
		}
		seen[x.Name] = true
		if err := CheckServer(x.Server); err != nil {
			errs = append(errs, fmt.Sprintf("contexts[%d].server: %v", i, err))
		}
	}
	if c.CurrentContext != "" && !seen[c.CurrentContext] {
		errs = append(errs, fmt.Sprintf("current-context: no context is named %q", c.CurrentContext))
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// CheckServer says whether s is a usable server URL (http or https, a host,
// no credentials in it).
func CheckServer(s string) error {
	u, err := url.Parse(s)
	switch {
	case s == "":
		return errors.New("is required, e.g. https://fleet.example:7777")
	case err != nil:
		return fmt.Errorf("%q is not a URL: %v", s, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q: the scheme must be http or https", s)
	case u.Host == "":
		return fmt.Errorf("%q has no host", s)
	case u.User != nil:
		return fmt.Errorf("%q carries credentials; pass the token with `gpufleet login --token-stdin` instead", redactURL(u))
	}
	return nil
}

func redactURL(u *url.URL) string {
	c := *u
	c.User = url.User("…")
	return c.String()
}

// Save writes the config atomically, readable only by its owner.
func (c *Config) Save(path string) error {
	if err := c.Validate(); err != nil {
		return err
	}
	sort.SliceStable(c.Contexts, func(i, j int) bool { return c.Contexts[i].Name < c.Contexts[j].Name })
	data, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*.yaml")
	if err != nil {
		return fmt.Errorf("writing CLI config: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing CLI config: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing CLI config: %w", err)
	}
	return nil
}

// Get returns the context named name.
func (c *Config) Get(name string) (*Context, bool) {
	for i := range c.Contexts {
		if c.Contexts[i].Name == name {
			return &c.Contexts[i], true
		}
	}
	return nil, false
}

// Current returns the context named name, or the current one when name is
// empty; nil and no error when there is none at all.
func (c *Config) Current(name string) (*Context, error) {
	if name == "" {
		name = c.CurrentContext
	}
	if name == "" {
		return nil, nil
	}
	x, ok := c.Get(name)
	if !ok {
		return nil, fmt.Errorf("no context is named %q (list them with `gpufleet config get-contexts`)", name)
	}
	return x, nil
}

// Put adds or replaces the context of its name.
func (c *Config) Put(x Context) {
	if old, ok := c.Get(x.Name); ok {
		*old = x
		return
	}
	c.Contexts = append(c.Contexts, x)
}

// Delete removes a context; deleting the current one leaves none current.
func (c *Config) Delete(name string) bool {
	for i := range c.Contexts {
		if c.Contexts[i].Name == name {
			c.Contexts = append(c.Contexts[:i], c.Contexts[i+1:]...)
			if c.CurrentContext == name {
				c.CurrentContext = ""
			}
			return true
		}
	}
	return false
}

// NameFor is a context name for a server URL: its host, port included.
func NameFor(server string) string {
	u, err := url.Parse(server)
	if err != nil || u.Host == "" {
		return "default"
	}
	return u.Host
}
