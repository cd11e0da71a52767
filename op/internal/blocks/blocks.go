package blocks

import "github.com/sparseattn/msa/op/internal/validate"

// All fills q2k [Hkv][total_q][topK] with every block each query of
// the batch can see (causal: the blocks whose first key it sees), ascending
// and -1 padded.
func All(q2k []int32, cuQ, seqK []int32, hkv, topK, blk int, causal bool) {
	totalQ := int(cuQ[len(cuQ)-1])
	for i := range q2k {
		q2k[i] = -1
	}
	for b := 0; b+1 < len(cuQ); b++ {
		seqQ, n := int(cuQ[b+1]-cuQ[b]), int(seqK[b])
		for i := 0; i < seqQ; i++ {
			last := validate.CeilDiv(n, blk) // blocks past the sequence's keys hold none
			if see := i + n - seqQ; causal && see < 0 {
				last = 0 // bottom-right aligned: query i sees keys t <= see
			} else if causal {
				last = min(last, see/blk+1)
			}
			for h := 0; h < hkv; h++ {
				row := q2k[(h*totalQ+int(cuQ[b])+i)*topK:][:topK]
				for j := 0; j < last; j++ {
					row[j] = int32(j)
				}
			}
		}
	}
}
