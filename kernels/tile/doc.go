// Package tile holds the CPU block kernel of the attention paths: an online
// (flash-style) softmax of M query rows against one block of at most BlockN
// keys, P.V accumulation, and the final normalisation.
//
// Scores are computed in base 2: Acc.Reset takes softmax_scale*log2(e) and
// every score is s = scale * (q . k). Finish converts the log-sum-exp back to
// natural log. Masks are always a prefix of the block, so the mask of row
// r is one integer valid[r] in [0, n].
//
// The arithmetic is implemented in tiers (generic Go, AVX2+FMA, AVX-512,
// AVX512_BF16); the tier is chosen once at start-up (see dispatch.go) and
// every tier is tested against the generic one.
package tile
