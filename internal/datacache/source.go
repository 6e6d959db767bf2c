package datacache

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/objstore"
)

// Errors of OpenDataset; both are permanent (retrying elsewhere would not
// help).
var (
	// ErrUnresolved: the server could not resolve the dataset's source
	// (agentapi.DataSync.Error says why).
	ErrUnresolved = errors.New("dataset not resolvable")
	// ErrEmpty: no object under the source, most likely a typo.
	ErrEmpty = errors.New("no objects under the source (check the bucket and prefix)")
)

// OpenDataset lists the dataset that d (what the control plane handed the
// attempt's node) names, with the credentials d carries, into a Dataset of
// project ready for Acquire or Fetch. Errors start with d's field and
// source ("spec.data[0].source storage:lake/x: listing: …"). Agents and
// Kubernetes pods' data containers (package podsync) both list here.
func OpenDataset(ctx context.Context, project string, d agentapi.DataSync) (Dataset, error) {
	where := d.Field + ".source " + d.Source
	if d.Error != "" {
		return Dataset{}, fmt.Errorf("%w: %s", ErrUnresolved, d.Error)
	}
	st, err := objstore.Open(ctx, d.Storage, objstore.Credentials{AccessKeyID: d.AccessKeyID, SecretAccessKey: d.SecretAccessKey})
	if err != nil {
		return Dataset{}, fmt.Errorf("%s: opening the storage: %w", where, err)
	}
	// Source names the field too: the cache's errors start with it.
	ds := Dataset{Project: project, Digest: d.Digest, Source: where, Open: st.Get}
	err = st.List(ctx, "", func(i objstore.Info) bool {
		ds.Objects = append(ds.Objects, i)
		return true
	})
	if err != nil {
		return Dataset{}, fmt.Errorf("%s: listing: %w", where, err)
	}
	if len(ds.Objects) == 0 {
		return Dataset{}, fmt.Errorf("%s: %w", where, ErrEmpty)
	}
	return ds, nil
}

// Size is the bytes of ds's objects.
func (ds Dataset) Size() int64 {
	var n int64
	for _, o := range ds.Objects {
		n += o.Size
	}
	return n
}
