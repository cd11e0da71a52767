package check

import (
	"strings"
	"testing"
)

// TestLongDecodeCasesSplit: the long-context decode cases exercise what
// they are named for: the auto-split ones give every one of DefaultSMs SMs
// a chunk, the no-split ones one item per request and KV head.
func TestLongDecodeCasesSplit(t *testing.T) {
	cs := LongDecodeCases()
	if len(cs) == 0 {
		t.Fatal("no long decode cases")
	}
	for i, c := range cs {
		if err := c.Gen(uint64(i + 1)); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		s := c.Sched
		if strings.HasSuffix(c.Name, "/no-split") {
			if s.SplitKV || s.WorkCount != c.Batch*c.Hkv {
				t.Errorf("%s: split %v, %d items", c.Name, s.SplitKV, s.WorkCount)
			}
			continue
		}
		if !s.SplitKV || s.WorkCount < DefaultSMs {
			t.Errorf("%s: split %v, %d items (chunk %d pages) on %d SMs", c.Name, s.SplitKV, s.WorkCount, s.ChunkPages, DefaultSMs)
		}
	}
}
