package simulate

import (
	"strings"
	"testing"
)

// TestVaryErrors: a bad --vary names what is wrong and where.
func TestVaryErrors(t *testing.T) {
	for in, want := range map[string]string{
		"pools.v100.spot":           "want pools.NAME.FIELD=V1,V2",
		"nodes.v100.spot=0.5":       "want pools.NAME.FIELD=V1,V2",
		"pools.v100.colour=red":     "pools.v100.colour: unknown field",
		"pools.v100.spot=0,1.5":     `pools.v100.spot: "1.5" is not a share between 0 and 1`,
		"pools.v100.max=ten":        `pools.v100.max: "ten" is not a whole number`,
		"pools.v100.idleTimeout=5x": "pools.v100.idleTimeout",
	} {
		_, err := ParseVary(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseVary(%q) = %v, want an error with %q", in, err, want)
		}
	}
	base := parseFleet(t, oneNodeFleet)
	v, err := ParseVary("pools.a100.max=2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Variants("f", base, []Vary{v}); err == nil || !strings.Contains(err.Error(), `no NodePool "a100" (have h100)`) {
		t.Errorf("varying a missing pool: %v", err)
	}
	// Two dimensions: every combination, the first varying slowest.
	a, _ := ParseVary("pools.h100.max=1,2")
	b, _ := ParseVary("pools.h100.idleTimeout=5m,1h")
	vs, err := Variants("f", base, []Vary{a, b})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range vs {
		names = append(names, v.Name)
	}
	if got := strings.Join(names, " "); got != "h100.max=1,h100.idleTimeout=5m h100.max=1,h100.idleTimeout=1h h100.max=2,h100.idleTimeout=5m h100.max=2,h100.idleTimeout=1h" {
		t.Errorf("variants %s", got)
	}
	if vs[3].Set.NodePools[0].Spec.Max != 2 || vs[3].Set.NodePools[0].Spec.IdleTimeout.D().String() != "1h0m0s" || base.NodePools[0].Spec.Max != 1 {
		t.Errorf("last variant %+v, base %+v: want max 2, idle 1h, base unchanged", vs[3].Set.NodePools[0].Spec, base.NodePools[0].Spec)
	}
}
