package op

import (
	"strings"
	"sync"
	"testing"
)

// TestDecodeWrapperRunCloseRace checks that Run racing a Close (or Plan) on
// another goroutine is safe: every call takes the busy flag before it reads
// the wrapper's pool and plan, so Run gets a result, the concurrent-use
// error or the closed-wrapper error, never a data race. CI runs it under
// -race.
func TestDecodeWrapperRunCloseRace(t *testing.T) {
	s := misuseSpec()
	pr := buildDecode(s)
	w := plannedWrapper(t, s, pr)
	defer w.Close()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; i < 50; i++ {
			res, err := w.Run(pr.q, pr.k, pr.v, 0)
			if err != nil {
				if msg := err.Error(); !strings.Contains(msg, "concurrent") && !strings.Contains(msg, "closed") {
					t.Error(err)
					return
				}
				continue
			}
			checkDecode(t, s, pr, res)
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 50; i++ {
			w.Close()
			if err := w.Plan(planArgs(s, pr), nil); err != nil && !strings.Contains(err.Error(), "concurrent") {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
}
