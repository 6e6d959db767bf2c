// Package deploy holds the Grafana dashboard and Prometheus alerting rules
// shipped with gpufleet; its test holds them to the metrics the server
// registers.
package deploy

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var metricRef = regexp.MustCompile(`\bgpufleet_[a-z0-9_]+`)

// registeredNames collects the metric names declared in the module's Go
// sources (every Name: or NewDesc literal starting "gpufleet_").
func registeredNames(t *testing.T) map[string]bool {
	t.Helper()
	decl := regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(gpufleet_[a-z0-9_]+)"`)
	names := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 5 {
		t.Fatalf("found only %d metric declarations; is the walk broken?", len(names))
	}
	return names
}

// exists reports whether ref names a declared metric, or one of the series
// a histogram declares.
func exists(names map[string]bool, ref string) bool {
	if names[ref] {
		return true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(ref, suf); ok && names[base] {
			return true
		}
	}
	return false
}

// exprs returns every string under a key "expr" in a decoded document.
func exprs(v any) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "expr" {
				out = append(out, s)
			} else {
				out = append(out, exprs(e)...)
			}
		}
	case []any:
		for _, e := range x {
			out = append(out, exprs(e)...)
		}
	}
	return out
}

func TestEveryQueriedMetricExists(t *testing.T) {
	names := registeredNames(t)
	for _, file := range []string{"grafana/gpufleet.json", "prometheus/alerts.yml"} {
		t.Run(file, func(t *testing.T) {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var doc any
			if strings.HasSuffix(file, ".json") {
				err = json.Unmarshal(b, &doc)
			} else {
				err = yaml.Unmarshal(b, &doc)
			}
			if err != nil {
				t.Fatalf("parsing: %v", err)
			}
			es := exprs(doc)
			if len(es) == 0 {
				t.Fatal("no expressions found")
			}
			var missing []string
			for _, e := range es {
				for _, ref := range metricRef.FindAllString(e, -1) {
					if !exists(names, ref) && !slices.Contains(missing, ref) {
						missing = append(missing, ref)
					}
				}
			}
			if len(missing) > 0 {
				t.Errorf("queried but not registered: %v", missing)
			}
		})
	}
}
