package workload

import (
	"fmt"
	"slices"
)

// MeanTileUnion returns the mean, over every KV head and every query tile
// of tileTokens consecutive tokens of a sequence (a sequence's last tile
// may hold fewer), of the number of distinct blocks the tile's tokens
// selected in q2k [hkv][total_q][topK] (-1: an unused slot). This is the
// number of K/V blocks a query-major CTA walks for its tile, the quantity
// that path pays for: it is the blocks of one token when neighbouring
// tokens select alike and up to tileTokens times that when they do not.
// cuQ [B+1] holds the sequences' query offsets (total_q = cuQ[B]).
func MeanTileUnion(q2k, cuQ []int32, hkv, topK, tileTokens int) (float64, error) {
	switch {
	case hkv < 1 || topK < 1 || tileTokens < 1:
		return 0, fmt.Errorf("workload: MeanTileUnion: hkv %d, topK %d, tileTokens %d: want each >= 1", hkv, topK, tileTokens)
	case len(cuQ) < 2 || cuQ[0] != 0:
		return 0, fmt.Errorf("workload: MeanTileUnion: cuQ %v: want B+1 >= 2 offsets from 0", cuQ)
	}
	totalQ := int(cuQ[len(cuQ)-1])
	if len(q2k) != hkv*totalQ*topK {
		return 0, fmt.Errorf("workload: MeanTileUnion: q2k has %d entries: want hkv x total_q x topK = %d x %d x %d", len(q2k), hkv, totalQ, topK)
	}
	var blocks []int32
	sum, tiles := 0, 0
	for h := range hkv {
		for b := 0; b+1 < len(cuQ); b++ {
			if cuQ[b+1] < cuQ[b] {
				return 0, fmt.Errorf("workload: MeanTileUnion: cuQ %v: want non-decreasing offsets", cuQ)
			}
			for t0 := int(cuQ[b]); t0 < int(cuQ[b+1]); t0 += tileTokens {
				t1 := min(t0+tileTokens, int(cuQ[b+1]))
				blocks = blocks[:0]
				for _, j := range q2k[(h*totalQ+t0)*topK : (h*totalQ+t1)*topK] {
					if j >= 0 {
						blocks = append(blocks, j)
					}
				}
				slices.Sort(blocks)
				sum += len(slices.Compact(blocks))
				tiles++
			}
		}
	}
	if tiles == 0 {
		return 0, fmt.Errorf("workload: MeanTileUnion: cuQ %v holds no query", cuQ)
	}
	return float64(sum) / float64(tiles), nil
}
