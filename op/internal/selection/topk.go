package selection

import (
	"math"
	"slices"
)

// selectable reports whether TopKBlocks may pick a block with score x: a
// finite score (-inf marks an invisible block; NaN and +inf only arise from
// non-finite inputs and are never selected).
func selectable(x float32) bool { return !math.IsInf(float64(x), 0) && x == x }

// better reports whether block a (score sa) ranks before block b (score
// sb): higher score first, then lower block id.
func better(sa float32, a int, sb float32, b int) bool {
	return sa > sb || (sa == sb && a < b)
}

// topKRow selects the blocks of one score row into dst (len topK): forced
// blocks first, then the best remaining scores (ties: lower block id),
// then sorted ascending with -1 padding.
func topKRow(dst []int32, row []float32, keepFirst, keepLast bool) {
	topK := len(dst)
	n := 0
	if keepLast && n < topK {
		for j := len(row) - 1; j >= 0; j-- {
			if selectable(row[j]) {
				dst[n] = int32(j)
				n++
				break
			}
		}
	}
	if keepFirst && n < topK && len(row) > 0 && selectable(row[0]) && !slices.Contains(dst[:n], int32(0)) {
		dst[n] = 0
		n++
	}
	forced := n
	// Insertion into a sorted list of the best topK-forced candidates.
	for j, x := range row {
		if !selectable(x) || slices.Contains(dst[:forced], int32(j)) {
			continue
		}
		if n == topK && (forced == topK || !better(x, j, row[dst[n-1]], int(dst[n-1]))) {
			continue
		}
		p := n
		if n < topK {
			n++
		} else {
			p = topK - 1
		}
		for p > forced && better(x, j, row[dst[p-1]], int(dst[p-1])) {
			dst[p] = dst[p-1]
			p--
		}
		dst[p] = int32(j)
	}
	// Ascending order, -1 padding.
	for i := 1; i < n; i++ {
		for p := i; p > 0 && dst[p] < dst[p-1]; p-- {
			dst[p], dst[p-1] = dst[p-1], dst[p]
		}
	}
	for i := n; i < topK; i++ {
		dst[i] = -1
	}
}

// TopK selects the topK blocks of each row of [rows][maxBlocks] scores
// (op.TopKBlocksFunc): forced blocks first (the last visible block with
// keepLast, block 0 with keepFirst), then the best remaining scores (ties:
// lower block id), ascending and -1 padded.
func TopK(scores []float32, rows, maxBlocks, topK int, keepFirst, keepLast bool) []int32 {
	out := make([]int32, rows*topK)
	TopKInto(out, scores, rows, maxBlocks, topK, keepFirst, keepLast)
	return out
}

// TopKInto is TopK writing the selection into out (rows*topK elements).
func TopKInto(out []int32, scores []float32, rows, maxBlocks, topK int, keepFirst, keepLast bool) {
	for r := 0; r < rows; r++ {
		topKRow(out[r*topK:(r+1)*topK], scores[r*maxBlocks:(r+1)*maxBlocks], keepFirst, keepLast)
	}
}
