package simulate

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

// Vary is one --vary dimension: a pool field and the values to try
// (pools.NAME.FIELD=V1,V2,…).
type Vary struct {
	Pool, Field string
	Values      []string
}

// VaryFields are the pool fields --vary can set:
//   - spot: the share of the pool's max that may run on spot, 0 to 1. The
//     pool becomes on-demand only with the rest of its max, and a pool
//     NAME-spot (spot only, min 0) takes that share; 0 leaves no spot
//     pool, 1 no on-demand one.
//   - max, min: the pool's size bounds.
//   - idleTimeout: how long a node idles before it goes (a duration).
var VaryFields = []string{"spot", "max", "min", "idleTimeout"}

// ParseVary reads one --vary value.
func ParseVary(s string) (Vary, error) {
	key, vals, ok := strings.Cut(s, "=")
	parts := strings.Split(key, ".")
	if !ok || len(parts) != 3 || parts[0] != "pools" || parts[1] == "" {
		return Vary{}, fmt.Errorf("--vary %q: want pools.NAME.FIELD=V1,V2,… (FIELD: %s)", s, strings.Join(VaryFields, ", "))
	}
	v := Vary{Pool: parts[1], Field: parts[2]}
	if !slices.Contains(VaryFields, v.Field) {
		return Vary{}, fmt.Errorf("--vary %q: pools.%s.%s: unknown field (want %s)", s, v.Pool, v.Field, strings.Join(VaryFields, ", "))
	}
	for _, x := range strings.Split(vals, ",") {
		x = strings.TrimSpace(x)
		if err := checkValue(v.Field, x); err != nil {
			return Vary{}, fmt.Errorf("--vary %q: pools.%s.%s: %w", s, v.Pool, v.Field, err)
		}
		v.Values = append(v.Values, x)
	}
	return v, nil
}

func checkValue(field, x string) error {
	switch field {
	case "spot":
		f, err := strconv.ParseFloat(x, 64)
		if err != nil || f < 0 || f > 1 {
			return fmt.Errorf("%q is not a share between 0 and 1", x)
		}
	case "max", "min":
		n, err := strconv.Atoi(x)
		if err != nil || n < 0 {
			return fmt.Errorf("%q is not a whole number ≥ 0", x)
		}
	case "idleTimeout":
		if _, err := model.ParseDuration(x); err != nil {
			return fmt.Errorf("%q: %w", x, err)
		}
	}
	return nil
}

// Variant is a fleet with the --vary settings that made it.
type Variant struct {
	Name string
	Set  *manifest.Set
}

// Variants applies every combination of varies' values to base, in the
// order given (the first dimension varies slowest). Without varies it is
// base alone, named name.
func Variants(name string, base *manifest.Set, varies []Vary) ([]Variant, error) {
	out := []Variant{{Name: name, Set: base}}
	for _, v := range varies {
		var next []Variant
		for _, cur := range out {
			for _, x := range v.Values {
				set, err := apply(cur.Set, v, x)
				if err != nil {
					return nil, err
				}
				label := fmt.Sprintf("%s.%s=%s", v.Pool, v.Field, x)
				if cur.Name != name {
					label = cur.Name + "," + label
				}
				next = append(next, Variant{Name: label, Set: set})
			}
		}
		out = next
	}
	return out, nil
}

// apply returns a copy of set with pool v.Pool's v.Field set to x.
func apply(set *manifest.Set, v Vary, x string) (*manifest.Set, error) {
	out, err := clone(set)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(out.NodePools, func(p manifest.NodePool) bool { return p.Metadata.Name == v.Pool })
	if i < 0 {
		var names []string
		for _, p := range out.NodePools {
			names = append(names, p.Metadata.Name)
		}
		return nil, fmt.Errorf("--vary pools.%s.%s: the fleet has no NodePool %q (have %s)", v.Pool, v.Field, v.Pool, strings.Join(names, ", "))
	}
	p := &out.NodePools[i]
	switch v.Field {
	case "max":
		p.Spec.Max, _ = strconv.Atoi(x)
	case "min":
		p.Spec.Min, _ = strconv.Atoi(x)
	case "idleTimeout":
		d, _ := model.ParseDuration(x)
		p.Spec.IdleTimeout = d
	case "spot":
		f, _ := strconv.ParseFloat(x, 64)
		spotMax := int(math.Round(f * float64(p.Spec.Max)))
		switch {
		case spotMax == 0:
			p.Spec.CapacityTypes = []model.CapacityType{model.OnDemand}
		case spotMax == p.Spec.Max:
			p.Spec.CapacityTypes = []model.CapacityType{model.Spot}
		default:
			spot := *p
			spot.Metadata.Name = p.Metadata.Name + "-spot"
			if slices.ContainsFunc(out.NodePools, func(q manifest.NodePool) bool { return q.Metadata.Name == spot.Metadata.Name }) {
				return nil, fmt.Errorf("--vary pools.%s.spot: the fleet already has a NodePool %s", v.Pool, spot.Metadata.Name)
			}
			spot.Spec.CapacityTypes = []model.CapacityType{model.Spot}
			spot.Spec.Min, spot.Spec.Max = 0, spotMax
			p.Spec.CapacityTypes = []model.CapacityType{model.OnDemand}
			p.Spec.Max -= spotMax
			p.Spec.Min = min(p.Spec.Min, p.Spec.Max)
			out.NodePools = append(out.NodePools, spot)
			slices.SortStableFunc(out.NodePools, func(a, b manifest.NodePool) int { return cmp.Compare(a.Metadata.Name, b.Metadata.Name) })
		}
	}
	if i := slices.IndexFunc(out.NodePools, func(p manifest.NodePool) bool { return p.Metadata.Name == v.Pool }); i >= 0 {
		if fe := out.NodePools[i].Validate(nil); len(fe) > 0 {
			return nil, fmt.Errorf("--vary pools.%s.%s=%s makes the pool invalid: %w", v.Pool, v.Field, x, fe.Err())
		}
	}
	return out, nil
}

// clone deep-copies set (through its canonical JSON).
func clone(set *manifest.Set) (*manifest.Set, error) {
	data, err := json.Marshal(set)
	if err != nil {
		return nil, err
	}
	var out manifest.Set
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
