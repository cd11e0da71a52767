package calib

import (
	"bytes"
	"fmt"
	"sync"
	"time"
	"unsafe"
)

// bwSink keeps the sums alive.
var bwSink uint64

// ReadBandwidth is a STREAM-like read test over a buffer of size bytes:
// workers goroutines each read their contiguous share, either summing it as
// uint64 with 8 independent accumulators (sum) or scanning it with
// bytes.IndexByte for a byte that never occurs (scan: the runtime's SIMD
// loop, which a scalar Go sum cannot match once the data is in cache). Each
// is the best of passes passes (after one warm-up pass), in GB/s: bytes /
// wall time. size must be at least 8 bytes per worker, workers and passes
// at least 1.
func ReadBandwidth(size, workers, passes int) (sum, scan float64, err error) {
	switch {
	case workers < 1:
		return 0, 0, fmt.Errorf("calib: ReadBandwidth: workers = %d, want at least 1", workers)
	case passes < 1:
		return 0, 0, fmt.Errorf("calib: ReadBandwidth: passes = %d, want at least 1", passes)
	case size < 8*workers:
		return 0, 0, fmt.Errorf("calib: ReadBandwidth: size = %d bytes, want at least 8 per worker (%d for %d workers)", size, 8*workers, workers)
	}
	buf := make([]uint64, size/8)
	for i := range buf { // touch every page; no byte is 0xff
		buf[i] = uint64(i%251) * 0x0101010101010101
	}
	raw := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(buf))), len(buf)*8)
	chunk := (len(buf)/workers + 7) &^ 7
	for _, useScan := range []bool{false, true} {
		best := 0.0
		for p := 0; p < passes+1; p++ {
			var wg sync.WaitGroup
			sums := make([]uint64, workers)
			t0 := time.Now()
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					lo, hi := min(w*chunk, len(buf)), min((w+1)*chunk, len(buf))
					if useScan {
						sums[w] = uint64(bytes.IndexByte(raw[lo*8:hi*8], 0xff) + 1)
					} else {
						sums[w] = sum8(buf[lo:hi])
					}
				}()
			}
			wg.Wait()
			el := time.Since(t0).Seconds()
			for _, s := range sums {
				bwSink += s
			}
			if p == 0 {
				continue // warm-up
			}
			if r := float64(len(buf)*8) / el / 1e9; r > best {
				best = r
			}
		}
		if useScan {
			scan = best
		} else {
			sum = best
		}
	}
	return sum, scan, nil
}

// sum8 sums s with 8 independent accumulators, so that the loop is bound by
// the loads rather than by one chain of additions.
func sum8(s []uint64) uint64 {
	var a0, a1, a2, a3, a4, a5, a6, a7 uint64
	for len(s) >= 8 {
		a0 += s[0]
		a1 += s[1]
		a2 += s[2]
		a3 += s[3]
		a4 += s[4]
		a5 += s[5]
		a6 += s[6]
		a7 += s[7]
		s = s[8:]
	}
	for _, x := range s {
		a0 += x
	}
	return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7
}
