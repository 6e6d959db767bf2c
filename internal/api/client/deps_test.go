package client_test

import (
	"go/build"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet/internal/testutil"
)

const module = "github.com/gpufleet/gpufleet"

// deps returns the module's packages that pkg imports, directly or not,
// outside tests. Packages outside the module are left out: none of them
// imports the module back.
func deps(t *testing.T, root, pkg string) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	var walk func(p string)
	walk = func(p string) {
		bp, err := build.ImportDir(filepath.Join(root, strings.TrimPrefix(p, module)), 0)
		if err != nil {
			t.Fatalf("reading %s: %v", p, err)
		}
		for _, imp := range bp.Imports {
			if (imp == module || strings.HasPrefix(imp, module+"/")) && !seen[imp] {
				seen[imp] = true
				walk(imp)
			}
		}
	}
	walk(pkg)
	return seen
}

// cmdPackages returns the directories under cmd/ that hold a Go package.
func cmdPackages(t *testing.T, root string) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(filepath.Join(root, "cmd"), func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if m, _ := filepath.Glob(filepath.Join(path, "*.go")); len(m) > 0 {
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// under reports whether p is pkg or one of its subpackages.
func under(p, pkg string) bool { return p == pkg || strings.HasPrefix(p, pkg+"/") }

// TestDependencyDirections keeps the shell's layers apart (issue 15): the
// API client and the API see the control plane through wire types in
// api and model, never the controller or what it is built from; the store
// persists model types without importing the pure core; and cmd/ wires
// through internal/server without importing the controller.
func TestDependencyDirections(t *testing.T) {
	root := testutil.ModuleRoot(t)
	in := func(name string) string { return module + "/internal/" + name }
	rules := []struct {
		pkg       string
		forbidden []string
	}{
		{in("api/client"), []string{in("controller"), in("scheduler"), in("autoscaler"), in("store")}},
		{in("api"), []string{in("controller"), in("scheduler"), in("autoscaler"), in("store")}},
		{in("store"), []string{in("advisor"), in("autoscaler"), in("cost"), in("scheduler"), in("controller")}},
		{in("store/sqlite"), []string{in("advisor"), in("autoscaler"), in("cost"), in("scheduler"), in("controller")}},
		{in("store/postgres"), []string{in("advisor"), in("autoscaler"), in("cost"), in("scheduler"), in("controller")}},
	}
	for _, r := range rules {
		var bad []string
		for p := range deps(t, root, r.pkg) {
			for _, f := range r.forbidden {
				if under(p, f) {
					bad = append(bad, p)
				}
			}
		}
		slices.Sort(bad)
		if len(bad) > 0 {
			t.Errorf("%s depends on %s", strings.TrimPrefix(r.pkg, module+"/"), strings.Join(bad, ", "))
		}
	}
	// cmd parses flags and wires through internal/server: none of its
	// files, tests included, imports the controller itself.
	var sawServer bool
	for _, dir := range cmdPackages(t, root) {
		bp, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("reading %s: %v", dir, err)
		}
		rel, _ := filepath.Rel(root, dir)
		for _, imp := range slices.Concat(bp.Imports, bp.TestImports, bp.XTestImports) {
			if under(imp, in("controller")) {
				t.Errorf("%s imports %s: wire it through internal/server", rel, imp)
			}
			sawServer = sawServer || imp == in("server")
		}
	}
	if !sawServer {
		t.Fatal("no package under cmd/ imports internal/server: the cmd rule saw nothing")
	}
	// The walk itself must see edges, or every rule passes vacuously.
	if d := deps(t, root, in("controller")); !d[in("store")] || !d[in("scheduler")] {
		t.Fatalf("the walk misses the controller's imports of store and scheduler: %v", d)
	}
}
