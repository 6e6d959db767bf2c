package gpu

// nvlinkGroups numbers the NVLink domains of GPUs. gpus[i] names GPU i as an
// endpoint; links are pairs of endpoints joined by an active NVLink, and an
// endpoint that is not a GPU (an NVSwitch) joins every GPU linked to it.
// Groups are numbered from 0 in order of their first GPU; a GPU with no
// link is -1.
func nvlinkGroups(gpus []string, links [][2]string) []int {
	parent := map[string]string{}
	var find func(string) string
	find = func(x string) string {
		p, ok := parent[x]
		if !ok || p == x {
			return x
		}
		root := find(p)
		parent[x] = root
		return root
	}
	linked := map[string]bool{}
	for _, l := range links {
		linked[l[0]], linked[l[1]] = true, true
		if a, b := find(l[0]), find(l[1]); a != b {
			parent[a] = b
		}
	}
	groups := make([]int, len(gpus))
	ids := map[string]int{}
	for i, g := range gpus {
		if !linked[g] {
			groups[i] = -1
			continue
		}
		root := find(g)
		id, ok := ids[root]
		if !ok {
			id = len(ids)
			ids[root] = id
		}
		groups[i] = id
	}
	return groups
}
