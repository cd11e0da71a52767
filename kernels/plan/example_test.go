package plan_test

import (
	"fmt"

	"github.com/sparseattn/msa/kernels/plan"
)

func Example() {
	// Two sequences: 3 and 2 queries; 300 and 100 keys with blocks of 128
	// (3 and 1 blocks). One KV head, topK 2.
	cuQ := []int32{0, 3, 5}
	cuK := []int32{0, 300, 400}
	q2k := []int32{
		0, 2, // sequence 0, query 0
		1, -1, // query 1
		2, 0, // query 2
		0, -1, // sequence 1, query 0
		-1, 0, // query 1
	}
	rows, err := plan.NewRows(cuK, 128)
	if err != nil {
		panic(err)
	}
	csr, err := plan.BuildK2QCSR(nil, q2k, 1, 5, 2, cuQ, cuK, 128)
	if err != nil {
		panic(err)
	}
	fmt.Println("rows (batch, block):", rows.Batch, rows.Block)
	fmt.Println("row_ptr:", csr.RowPtr)
	fmt.Println("q_indices:", csr.QIdx)

	p := plan.FwdParams{TotalQ: 5, Hkv: 1, QheadPerKV: 16, TopK: 2, BlkKV: 128, Workers: 4}
	s, err := plan.BuildFwdSchedule(nil, csr, rows, cuQ, p)
	if err != nil {
		panic(err)
	}
	for i := 0; i < int(s.WorkCount); i++ {
		fmt.Println("item", s.Metadata[i*plan.MetaFields:(i+1)*plan.MetaFields])
	}
	fmt.Println("split_counts:", s.SplitCounts)

	_, err = plan.BuildK2QCSR(nil, []int32{0, 3, 1, -1, 2, 0, 0, -1, -1, 0}, 1, 5, 2, cuQ, cuK, 128)
	fmt.Println(err)

	// Decode: 2 requests, one query each, 16 query heads per KV head.
	d, err := plan.BuildDecodeSchedule(nil, []int32{9000, 300}, plan.DecodeParams{
		Batch: 2, SeqlenQ: 1, HQ: 16, Hkv: 1, PageSize: 128, Workers: 8, MaxPagesPerSeq: 128,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("decode chunk pages:", d.ChunkPages, "splits:", d.SplitCounts, "items:", d.WorkCount)
	fmt.Println(plan.ValidateDecodeSchedule(d, []int32{16000, 300}, d.Params))
	// Output:
	// rows (batch, block): [0 1 0 0] [0 0 1 2]
	// row_ptr: [0 2 4 5 7]
	// q_indices: [0 2 0 1 1 0 2 -1 -1 -1]
	// item [0 0 0 2 0 0]
	// item [0 1 0 2 1 0]
	// item [0 2 0 1 0 1]
	// item [0 3 0 2 0 2]
	// split_counts: [2 1 2 1 1]
	// plan: q2k_indices[h=0, q=0, k=1] = 3: block id out of range [0, 3) for sequence 0
	// decode chunk pages: 16 splits: [5 1] items: 6
	// plan: decode seqused_k[0] = 16000 needs 125 pages but the plan covers 80 pages (5 chunks of 16) for request 0: stale plan, re-plan
}
