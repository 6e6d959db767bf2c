package store_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet/internal/testutil"
)

// TestWrappersPassPrepareOn reads every Go file in the module (tests
// included) and checks each store.Store wrapper for Prepare (the store's
// encoding apart from its queueing, store.Preparer):
//
//   - a type whose Submit passes batches on to another store's Submit
//     must declare Prepare beside it, passing them on alike. Without it
//     the wrapper either drops Prepare (a wrapped interface: the
//     controller's committer encodes under its lock again) or, worse,
//     inherits the wrapped store's Prepare through embedding, which skips
//     what its Submit does to a batch (a fence, a record).
//   - a struct that embeds a Store interface (store.Store, or an
//     interface that embeds it) must declare Prepare: the interface does
//     not promote it.
//   - a struct that declares Submit(*Batch) and holds a store (a field,
//     named or embedded, of a Store interface or of a type with its own
//     Submit(*Batch)) must declare Prepare, however its Submit reaches
//     the store: a method value, a helper.
//
// It reads syntax, not types (go/types over the module and its tests
// would need export data for every dependency: go list -export -deps
// -test ./... did not finish in 5 minutes on a loaded 2-core machine), so
// it cannot see a store reached through a global or a closure;
// TestFencedStorePrepareFencesAsSubmit (internal/server) checks what the
// known wrapper does at run time.
//
// New wrappers anywhere in the tree are checked as they are written, with
// no list to keep up; the test fails if it finds none of the wrappers it
// knows, so it cannot pass by finding nothing.
func TestWrappersPassPrepareOn(t *testing.T) {
	root := testutil.ModuleRoot(t)
	problems, found := checkWrappers(t, root)
	for _, p := range problems {
		t.Error(p)
	}
	for _, known := range []string{"internal/server.fencedStore", "internal/store/postgres.fenced"} {
		for _, kind := range []string{kindSubmits, kindHolds} {
			if names := found[kind]; !slices.Contains(names, filepath.FromSlash(known)) {
				t.Errorf("the known wrapper %s was not found as one that %s: the check is broken (found %v)", known, kind, names)
			}
		}
	}
}

// TestWrapperCheckFindsIndirectWrappers: checkWrappers flags the wrappers
// in testdata/wrappers, which forward to the store they hold through a
// method value, a helper, or a concrete store, and passes the one that
// declares Prepare.
func TestWrapperCheckFindsIndirectWrappers(t *testing.T) {
	problems, _ := checkWrappers(t, filepath.Join("testdata", "wrappers"))
	var flagged []string
	for _, p := range problems {
		for _, name := range []string{"methodValue", "viaHelper", "concrete", "good"} {
			if strings.Contains(p, " "+name+" ") && !slices.Contains(flagged, name) {
				flagged = append(flagged, name)
			}
		}
	}
	slices.Sort(flagged)
	if want := []string{"concrete", "methodValue", "viaHelper"}; !slices.Equal(flagged, want) {
		t.Errorf("flagged %v, want %v; all problems:\n%s", flagged, want, strings.Join(problems, "\n"))
	}
}

// checkWrappers reads every Go file under root (a module's tree, tests
// included) and returns each wrapper of a store lacking Prepare as a
// problem, and the wrappers it found (directory relative to root, a dot
// and the type's name), by the kind of check that found them.
func checkWrappers(t *testing.T, root string) (problems []string, found map[string][]string) {
	t.Helper()
	fset := token.NewFileSet()
	type pkgKey = string // directory
	var (
		submits  = map[pkgKey]map[string]token.Pos{} // delegating Submit methods by receiver type
		prepares = map[pkgKey]map[string]bool{}
		embeds   = map[pkgKey]map[string]token.Pos{} // structs embedding a Store interface
		storeIfs = map[string]bool{"store.Store": true}
		structs  []struct {
			dir, name string
			st        *ast.StructType
			file      *ast.File
		}
	)
	var files []*ast.File
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files, dirs = append(files, f), append(dirs, filepath.Dir(path))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Interfaces that embed store.Store (as the server's backingStore).
	for i, f := range files {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, sp := range gd.Specs {
				ts, ok := sp.(*ast.TypeSpec)
				if !ok {
					continue
				}
				switch ty := ts.Type.(type) {
				case *ast.InterfaceType:
					for _, m := range ty.Methods.List {
						if len(m.Names) == 0 && isStoreType(m.Type, f.Name.Name) {
							storeIfs[dirs[i]+"."+ts.Name.Name] = true
						}
					}
				case *ast.StructType:
					structs = append(structs, struct {
						dir, name string
						st        *ast.StructType
						file      *ast.File
					}{dirs[i], ts.Name.Name, ty, f})
				}
			}
		}
	}
	for _, s := range structs {
		for _, fld := range s.st.Fields.List {
			if len(fld.Names) != 0 {
				continue
			}
			id, ok := fld.Type.(*ast.Ident)
			sel, isSel := fld.Type.(*ast.SelectorExpr)
			if ok && storeIfs[s.dir+"."+id.Name] || isSel && storeIfs[exprString(sel)] || ok && id.Name == "Store" && filepath.Base(s.dir) == "store" {
				if embeds[s.dir] == nil {
					embeds[s.dir] = map[string]token.Pos{}
				}
				embeds[s.dir][s.name] = fld.Pos()
			}
		}
	}
	for i, f := range files {
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) != 1 {
				continue
			}
			recv := receiverName(fd.Recv.List[0].Type)
			switch fd.Name.Name {
			case "Prepare":
				if prepares[dirs[i]] == nil {
					prepares[dirs[i]] = map[string]bool{}
				}
				prepares[dirs[i]][recv] = true
			case "Submit":
				if !isBatchParam(fd.Type) || fd.Body == nil || !callsSubmit(fd.Body) {
					continue
				}
				if submits[dirs[i]] == nil {
					submits[dirs[i]] = map[string]token.Pos{}
				}
				submits[dirs[i]][recv] = fd.Pos()
			}
		}
	}
	// A struct that holds a store (a field, named or embedded, of a Store
	// interface or of a type with Submit(*Batch)) and declares
	// Submit(*Batch) itself is a wrapper however its Submit reaches the
	// store (a method value, a helper): it must declare Prepare.
	storeDir := filepath.Join(root, "internal", "store")
	holders := map[string]bool{storeDir + ".Store": true}
	for k := range storeIfs {
		holders[k] = true
	}
	for i, f := range files {
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Recv != nil && len(fd.Recv.List) == 1 && fd.Name.Name == "Submit" && isBatchParam(fd.Type) {
				holders[dirs[i]+"."+receiverName(fd.Recv.List[0].Type)] = true
			}
		}
	}
	holds := map[pkgKey]map[string]token.Pos{}
	for _, s := range structs {
		if !holders[s.dir+"."+s.name] {
			continue // declares no Submit(*Batch)
		}
		for _, fld := range s.st.Fields.List {
			if key := typeKey(fld.Type, s.dir, s.file, root); key != "" && holders[key] {
				if holds[s.dir] == nil {
					holds[s.dir] = map[string]token.Pos{}
				}
				holds[s.dir][s.name] = fld.Pos()
			}
		}
	}
	found = map[string][]string{}
	check := func(kind string, byDir map[pkgKey]map[string]token.Pos) {
		for dir, types := range byDir {
			for name, pos := range types {
				rel, _ := filepath.Rel(root, dir)
				found[kind] = append(found[kind], rel+"."+name)
				if !prepares[dir][name] {
					problems = append(problems, fmt.Sprintf("%s: %s %s has no Prepare: declare one that does to a batch what its Submit does and passes it on with store.Prepare",
						fset.Position(pos), name, kind))
				}
			}
		}
	}
	check(kindSubmits, submits)
	check(kindHolds, holds)
	check("embeds a store.Store interface but", embeds)
	slices.Sort(problems)
	problems = slices.Compact(problems)
	for _, names := range found {
		slices.Sort(names)
	}
	return problems, found
}

// Kinds of wrapper checkWrappers finds, as its problems word them.
const (
	kindSubmits = "passes batches on to another store's Submit but"
	kindHolds   = "holds a store and declares Submit(*Batch) but"
)

func receiverName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// isStoreType reports whether e names store.Store (Store inside package
// store).
func isStoreType(e ast.Expr, pkg string) bool {
	switch x := e.(type) {
	case *ast.SelectorExpr:
		return exprString(x) == "store.Store"
	case *ast.Ident:
		return pkg == "store" && x.Name == "Store"
	}
	return false
}

func exprString(s *ast.SelectorExpr) string {
	if id, ok := s.X.(*ast.Ident); ok {
		return id.Name + "." + s.Sel.Name
	}
	return ""
}

// isBatchParam reports whether ft is func(*store.Batch) or func(*Batch).
func isBatchParam(ft *ast.FuncType) bool {
	if ft.Params == nil || len(ft.Params.List) != 1 {
		return false
	}
	st, ok := ft.Params.List[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	switch x := st.X.(type) {
	case *ast.SelectorExpr:
		return x.Sel.Name == "Batch"
	case *ast.Ident:
		return x.Name == "Batch"
	}
	return false
}

// typeKey names the type e refers to (through a pointer) as its
// package's directory and name, for a type of this module declared in
// dir (an identifier) or imported by f (pkg.Name); "" for any other.
func typeKey(e ast.Expr, dir string, f *ast.File, root string) string {
	if st, ok := e.(*ast.StarExpr); ok {
		e = st.X
	}
	switch x := e.(type) {
	case *ast.Ident:
		return dir + "." + x.Name
	case *ast.SelectorExpr:
		pkg, ok := x.X.(*ast.Ident)
		if !ok {
			return ""
		}
		for _, imp := range f.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			name := filepath.Base(path)
			if imp.Name != nil {
				name = imp.Name.Name
			}
			if rel, ok := strings.CutPrefix(path, modulePath+"/"); ok && name == pkg.Name {
				return filepath.Join(root, filepath.FromSlash(rel)) + "." + x.Sel.Name
			}
		}
	}
	return ""
}

// modulePath is the module's import path (go.mod).
const modulePath = "github.com/gpufleet/gpufleet"

// callsSubmit reports whether body refers to a method named Submit (a
// call, or a method value called later), or calls store.Commit: it passes
// its batch on to another store.
func callsSubmit(body *ast.BlockStmt) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Submit" || exprString(sel) == "store.Commit") {
			found = true
		}
		return !found
	})
	return found
}
