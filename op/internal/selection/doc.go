// Package selection computes block selection, the first stage of
// block-sparse attention: Scorer rates every key block for every query and
// KV head (softmax_scale times q against the block's mean key, reduced over
// the query heads of a group by maximum or mean, -inf where the block is
// invisible) and TopK picks each row's blocks (forced first and last
// blocks, then the best scores, ascending and -1 padded). op's
// BlockScoresFunc, TopKBlocksFunc, their graph nodes and the one-call
// SelectBlocks and BlockSparseAttention validate the arguments and run
// these; op/causalselect runs them for the GPU check, which links no
// Gorgonia. It depends on kernels/lowp's decoders and kernels/grad's GEMM
// tiles (GEMMTiler, for the query-by-mean products); it must not depend
// on package op, on the other op/internal packages, on the forward
// attention kernels or on Gorgonia.
package selection
