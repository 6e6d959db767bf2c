package scheduler

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Data locality (docs/datasets.md): nodes report the datasets their data
// caches hold (Snapshot.Datasets), and a job that reads datasets
// (spec.data) prefers the nodes that hold them, since a node without them
// downloads them before the job starts.
//
// The cluster gives nodes holding data some pending job reads classes of
// their own (as for unique labels), so the best node of a class either
// holds that data or does not; the "data" scorer then rates a class by the
// share of the job's datasets it holds, next to fit, price, preference and
// topology.

// ScoreData names the data-locality scorer in placement reasons.
const ScoreData = "data-local"

// weightData is the data scorer's weight on the 0–100 scale, against
// weightFit+weightPrice+weightPref+weightTopo (10): a node holding all the
// job's data beats an exact fit or a GPU-hour half the price without it.
const weightData = 6

// dataScore is the data scorer: 100 × the share of the job's datasets the
// class's nodes hold. Pure.
func dataScore(want []string, held map[string]bool) float64 {
	if len(want) == 0 {
		return 0
	}
	n := 0
	for _, d := range want {
		if held[d] {
			n++
		}
	}
	return 100 * float64(n) / float64(len(want))
}

// withData mixes the data scorer into a node score of the other scorers.
func withData(score, data float64) float64 {
	const others = weightFit + weightPrice + weightPref + weightTopo
	return (score*others + weightData*data) / (others + weightData)
}

// wantedData is the set of dataset digests pending jobs read, nil when
// none reads any.
func wantedData(pending []*model.Job) map[string]bool {
	var out map[string]bool
	for _, j := range pending {
		if len(j.Spec.Data) == 0 {
			continue
		}
		for _, d := range j.Spec.DataDigests(j.Project) {
			if out == nil {
				out = map[string]bool{}
			}
			out[d] = true
		}
	}
	return out
}

// heldKey is the digests of wanted that held holds, sorted and joined (a
// class key part), and them as a set; "" and nil when none.
func heldKey(held, wanted map[string]bool) (string, map[string]bool) {
	if len(held) == 0 || len(wanted) == 0 {
		return "", nil
	}
	var ds []string
	for d := range held {
		if wanted[d] {
			ds = append(ds, d)
		}
	}
	if len(ds) == 0 {
		return "", nil
	}
	sort.Strings(ds)
	set := make(map[string]bool, len(ds))
	for _, d := range ds {
		set[d] = true
	}
	return strings.Join(ds, ","), set
}

// dataReasons says, for a bound job that reads datasets, what the data
// scorer found on each node it was placed on.
func (s *sched) dataReasons(pj *pjob, p *placement) []Reason {
	if len(pj.data) == 0 {
		return nil
	}
	var out []Reason
	seen := map[string]bool{}
	for _, r := range p.replicas {
		if seen[r.NodeID] {
			continue
		}
		seen[r.NodeID] = true
		held := s.c.snap.Datasets[r.NodeID]
		n := 0
		for _, d := range pj.data {
			if held[d] {
				n++
			}
		}
		msg := fmt.Sprintf("holds %d of the job's %d datasets in its data cache (data-local score %.0f, weight %d)", n, len(pj.data), dataScore(pj.data, held), weightData)
		if n < len(pj.data) {
			msg += fmt.Sprintf("; fetches %d before the job starts", len(pj.data)-n)
		}
		out = append(out, Reason{Scope: "node/" + r.NodeID, Code: ScoreData, Message: msg})
	}
	return out
}
