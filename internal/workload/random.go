package workload

import "fmt"

// RandomQ2K picks, for every KV head and query q of one causal sequence of
// T tokens, min(topK, visible blocks) distinct blocks among the visible
// ones 0..q/blk: always the diagonal block q/blk, the others uniformly at
// random; unused slots are -1. It returns the list [hkv][T][topK] and the
// number of visible (query, key) pairs inside the selected blocks. The
// benchmark's random prefill cases use seed Seed(T)+3.
func RandomQ2K(T, hkv, topK, blk int, seed uint64) ([]int32, int64, error) {
	if T < 1 || hkv < 1 || topK < 1 || blk < 1 {
		return nil, 0, fmt.Errorf("workload: RandomQ2K: T %d, hkv %d, topK %d, blk %d: want each >= 1", T, hkv, topK, blk)
	}
	q2k := make([]int32, hkv*T*topK)
	r := NewSplitMix(seed)
	var pairs int64
	seen := make(map[int]bool, topK)
	for h := 0; h < hkv; h++ {
		for qi := 0; qi < T; qi++ {
			list := q2k[(h*T+qi)*topK : (h*T+qi+1)*topK]
			diag := qi / blk
			n := min(topK, diag+1)
			list[0] = int32(diag)
			clear(seen)
			seen[diag] = true
			for i := 1; i < n; i++ {
				var j int
				if n == diag+1 { // every visible block is selected
					j = i - 1
				} else {
					for j = r.Intn(diag); seen[j]; j = r.Intn(diag) {
					}
				}
				seen[j] = true
				list[i] = int32(j)
			}
			for i := n; i < topK; i++ {
				list[i] = -1
			}
			for _, j := range list[:n] {
				pairs += int64(min((int(j)+1)*blk, qi+1, T) - int(j)*blk)
			}
		}
	}
	return q2k, pairs, nil
}
