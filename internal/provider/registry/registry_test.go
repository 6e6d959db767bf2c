package registry

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
)

type stub struct{ name string }

func (s *stub) Name() string                                      { return s.name }
func (s *stub) Offers(context.Context) ([]model.Offer, error)     { return nil, nil }
func (s *stub) Terminate(context.Context, string) error           { return nil }
func (s *stub) List(context.Context) ([]provider.Instance, error) { return nil, nil }
func (s *stub) Launch(context.Context, provider.LaunchRequest) (provider.Instance, error) {
	return provider.Instance{}, nil
}

func TestNewRefusesDuplicatesAndNoName(t *testing.T) {
	t.Parallel()
	_, err := New(Driver{Name: "a"}, Driver{Name: "a"}, Driver{})
	if err == nil {
		t.Fatal("want errors for a duplicate and an unnamed driver")
	}
	if want := "registering driver \"a\": registered twice\nregistering driver 2: no name"; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
}

// TestFor: a pool's driver is built once per revision, rebuilt when the
// spec changes, remembered when it fails; a driver without New builds
// nothing; an unregistered driver is ErrUnknownDriver.
func TestFor(t *testing.T) {
	t.Parallel()
	builds := 0
	fail := false
	r, err := New(
		Driver{Name: "cloud", New: func(p *model.NodePool) (provider.Provider, error) {
			builds++
			if fail {
				return nil, errors.New("bad settings")
			}
			return &stub{name: "cloud-" + p.Name}, nil
		}},
		Driver{Name: "owned", Price: func(model.NodePoolSpec) provider.PoolPrice { return provider.PoolPrice{Fixed: true, PerNode: 2} }},
	)
	if err != nil {
		t.Fatal(err)
	}
	pool := func(rev int, prov string) *model.NodePool {
		return &model.NodePool{Name: "gpu", Revision: rev, Spec: model.NodePoolSpec{Provider: prov}}
	}
	p1, err := r.For(pool(1, "cloud"))
	if err != nil || p1.Name() != "cloud-gpu" {
		t.Fatalf("For = %v, %v", p1, err)
	}
	if p, _ := r.For(pool(1, "cloud")); p != p1 || builds != 1 {
		t.Errorf("same revision rebuilt (builds %d)", builds)
	}
	fail = true
	if _, err := r.For(pool(2, "cloud")); err == nil || builds != 2 {
		t.Errorf("changed revision: err %v, builds %d; want a failed rebuild", err, builds)
	}
	if _, err := r.For(pool(2, "cloud")); err == nil || builds != 2 {
		t.Errorf("a failed build is remembered for its revision: err %v, builds %d", err, builds)
	}
	if p, err := r.For(pool(3, "owned")); p != nil || err != nil {
		t.Errorf("a driver without New: %v, %v; want nil, nil", p, err)
	}
	if _, err := r.For(pool(3, "nope")); !errors.Is(err, ErrUnknownDriver) {
		t.Errorf("unknown driver: %v", err)
	}
	if !r.Launches() {
		t.Error("Launches = false with a driver that builds")
	}
	got := []provider.PoolPrice{r.Price(model.NodePoolSpec{Provider: "owned"}), r.Price(model.NodePoolSpec{Provider: "cloud"}), r.Price(model.NodePoolSpec{Provider: "nope"})}
	want := []provider.PoolPrice{{Fixed: true, PerNode: 2}, {Unknown: `provider "cloud" is not priced`}, {Unknown: `provider "nope" is not registered (registered: [cloud owned])`}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Price (-want +got):\n%s", diff)
	}
	r.Forget(nil)
	fail = false
	if _, err := r.For(pool(2, "cloud")); err != nil || builds != 3 {
		t.Errorf("after Forget the pool is built again: err %v, builds %d", err, builds)
	}
}

// TestCheckPool: a pool is checked by its own driver's Check (which may
// fill in defaults); an unregistered driver is a problem at
// spec.provider; a driver without Check has nothing to check.
func TestCheckPool(t *testing.T) {
	t.Parallel()
	r, err := New(
		Driver{Name: "cloud", Check: func(spec *model.NodePoolSpec, prefix string, known func(string) bool) model.FieldErrors {
			spec.Max = 7
			if !known("H100") {
				return model.FieldErrors{{Path: prefix + ".cloud", Message: "no H100"}}
			}
			return nil
		}},
		Driver{Name: "owned"},
	)
	if err != nil {
		t.Fatal(err)
	}
	spec := model.NodePoolSpec{Provider: "cloud"}
	if fe := r.CheckPool(&spec, "spec", func(string) bool { return true }); len(fe) > 0 || spec.Max != 7 {
		t.Errorf("CheckPool: %v, max %d; want no problems and the driver's default", fe, spec.Max)
	}
	if fe := r.CheckPool(&spec, "spec", func(string) bool { return false }); len(fe) != 1 || fe[0].Path != "spec.cloud" {
		t.Errorf("the driver's problem: %v", fe)
	}
	if fe := r.CheckPool(&model.NodePoolSpec{Provider: "owned"}, "spec", nil); len(fe) > 0 {
		t.Errorf("a driver without Check: %v", fe)
	}
	want := model.FieldErrors{{Path: "spec.provider", Message: `"gcp" is not a registered driver (cloud, owned)`}}
	if diff := cmp.Diff(want, r.CheckPool(&model.NodePoolSpec{Provider: "gcp"}, "spec", nil)); diff != "" {
		t.Errorf("an unregistered driver (-want +got):\n%s", diff)
	}
}
