package kubernetes

import (
	"strconv"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	batchv1 "k8s.io/api/batch/v1"
)

type batchJob = batchv1.Job

func itoa(i int) string { return strconv.Itoa(i) }

func cmpSort[T any](less func(a, b T) bool) cmp.Option { return cmpopts.SortSlices(less) }

// approx compares prices to a millionth of a dollar.
func approx() cmp.Option { return cmpopts.EquateApprox(0, 1e-6) }
