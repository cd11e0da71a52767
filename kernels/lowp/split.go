package lowp

import (
	"runtime"
	"sync"
)

// minSplit is the fewest elements a conversion hands to one goroutine:
// 32768 float32s are 128 KiB, about 40 µs of encoding at 3 GB/s against
// a goroutine start of about a microsecond, so smaller slices stay on the
// caller's goroutine.
const minSplit = 1 << 15

// EncodeBF16Workers is EncodeBF16 split into contiguous chunks over at
// most workers goroutines (workers <= 0 means GOMAXPROCS; never more than
// GOMAXPROCS, nor more than one per minSplit elements). Each element is
// converted on its own, so the result is EncodeBF16's bit for bit.
func EncodeBF16Workers(dst []BFloat16, src []float32, workers int) {
	dst = dst[:len(src)]
	if SplitWorkers(len(src), workers) == 1 {
		EncodeBF16(dst, src) // no closure: a small conversion allocates nothing
		return
	}
	split(len(src), workers, func(lo, hi int) { EncodeBF16(dst[lo:hi], src[lo:hi]) })
}

// DecodeBF16Workers is DecodeBF16 split as EncodeBF16Workers splits
// EncodeBF16; the result is DecodeBF16's bit for bit.
func DecodeBF16Workers(dst []float32, src []BFloat16, workers int) {
	dst = dst[:len(src)]
	if SplitWorkers(len(src), workers) == 1 {
		DecodeBF16(dst, src)
		return
	}
	split(len(src), workers, func(lo, hi int) { DecodeBF16(dst[lo:hi], src[lo:hi]) })
}

// SplitWorkers is the number of goroutines EncodeBF16Workers and
// DecodeBF16Workers use for n elements and at most workers goroutines
// (<= 0: GOMAXPROCS): callers that run the conversion's chunks on
// goroutines of their own split it the same way.
func SplitWorkers(n, workers int) int {
	p := runtime.GOMAXPROCS(0)
	if workers <= 0 || workers > p {
		workers = p
	}
	return max(1, min(workers, n/minSplit))
}

// split calls fn on contiguous ranges covering [0, n), concurrently on up
// to workers goroutines (see EncodeBF16Workers for the cap), the first
// range on the calling goroutine.
func split(n, workers int, fn func(lo, hi int)) {
	workers = SplitWorkers(n, workers)
	if workers == 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(w*n/workers, (w+1)*n/workers)
		}()
	}
	fn(0, n/workers)
	wg.Wait()
}
