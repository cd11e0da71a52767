package op

import (
	"strings"
	"testing"
)

// TestDeprecatedNamesForward calls each deprecated name with missing inputs
// and checks the error comes from the function that replaced it, so an alias
// that stops forwarding (or forwards to the wrong function) fails here.
func TestDeprecatedNamesForward(t *testing.T) {
	cases := []struct {
		now string
		err error
	}{
		{"SparseAttentionFunc", second(SparseAttenFunc(nil, nil, nil, nil, nil, 1, SparseArgs{}))},
		{"SparseAttentionNVFP4KVFunc", second(SparseAttenNVFP4KVFunc(nil, nil, nil, nil, nil, nil, nil, nil, nil, 1, SparseArgs{}))},
		{"SparseAttentionBackwardFunc", second(SparseAttenBackwardFunc(nil, nil, nil, nil, nil, nil, nil, nil, nil, 1, SparseArgs{}))},
		{"K2QCSRFunc", third(BuildK2QCSR(nil, nil, nil, 64))},
		{"FwdScheduleFunc", second(PrepareSparseFwdSchedule(nil, nil, ScheduleArgs{}))},
		{"DecodeAttentionFunc", second(SparseDecodeAttenFunc(nil, nil, nil, nil, DecodeArgs{}))},
		{"ContextParallelPrefillFunc", third(CPSparsePrefill(nil, nil, nil, nil, nil, CPPrefillArgs{}))},
		{"WritePagedKVFunc", AppendPagedKV(nil, nil, nil, nil, nil, HND)},
	}
	for _, c := range cases {
		if c.err == nil || !strings.Contains(c.err.Error(), c.now) {
			t.Errorf("deprecated alias of %s: got error %v, want one naming %s", c.now, c.err, c.now)
		}
	}
}

func third[A, B any](_ A, _ B, err error) error { return err }
